"""The sweep travels as a value: definitions.py reads the variants file once and the asset
factories build every asset, check, job and schedule from the `SweepConfig` they are given,
so two sweeps build two graphs, and no module of the Dagster layer holds a sweep of its own."""

from __future__ import annotations

import importlib

import pytest
from dagster import PartitionsDefinition

from eval_pipeline.config.models import SweepConfig
from eval_pipeline.config.sweep import load_sweep

PAIRS = """\
indexes:
  - embedder: bundled
    chunking: {split_length: 150, split_overlap: 20}
  - name: minilm-w60
    chunking: {split_length: 60, split_overlap: 10}
variants:
  - engine: bm25
  - engine: hybrid
    reranker: {kind: mmr, lambda_: 0.7}
audit: {blocking: true}
schedule: {cron: "30 4 * * 1-5"}
"""


def _sweep(tmp_path, text: str, name: str) -> SweepConfig:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return load_sweep(path)


def test_two_sweeps_build_two_graphs(tmp_path):
    from assets import build_assets

    pairs = _sweep(tmp_path, PAIRS, "pairs.yaml")
    plain = _sweep(tmp_path, "variants:\n  - engine: bm25\n  - engine: pg-dense\n", "plain.yaml")
    graph, other = build_assets(pairs), build_assets(plain)
    assert list(graph.assets) == ["corpus_snapshot", "pgvector_store", "question_set", "ranked_results",
                                  "variant_metrics", "golden_prompts", "answers", "graded_answers", "answer_metrics",
                                  "verdict", "findings", "report"]
    assert list(graph.checks) == ["question_set_audit", "no_errored_questions", "verdict_passed", "verdict_gate",
                                  "regression_gate", "answer_gate"]
    partitioned = ["ranked_results", "variant_metrics", "answers", "graded_answers", "answer_metrics"]
    for name in partitioned:
        assert [str(k) for k in graph.assets[name].partitions_def.get_partition_keys()] == pairs.keys
        assert [str(k) for k in other.assets[name].partitions_def.get_partition_keys()] == ["bm25", "pg-dense"]
    assert graph.gate_checks == {"minilm-w150-o20|bm25": "gate__minilm_w150_o20_bm25",
                                 "minilm-w150-o20|hybrid+mmr": "gate__minilm_w150_o20_hybrid_mmr",
                                 "minilm-w60|bm25": "gate__minilm_w60_bm25",
                                 "minilm-w60|hybrid+mmr": "gate__minilm_w60_hybrid_mmr"}
    assert other.answer_gate_checks == {"bm25": "answer_gate__bm25", "pg-dense": "answer_gate__pg_dense"}
    assert {k.name for k in graph.checks["regression_gate"].check_keys} == set(graph.gate_checks.values())
    # the audit blocks the run only when the file says so
    (audit,) = graph.checks["question_set_audit"].check_specs
    (plain_audit,) = other.checks["question_set_audit"].check_specs
    assert audit.blocking and not plain_audit.blocking


def test_the_ops_read_the_sweep_they_were_built_with(tmp_path):
    from assets import validate_run_config

    pairs = _sweep(tmp_path, PAIRS, "pairs.yaml")
    plain = _sweep(tmp_path, "variants:\n  - engine: bm25\n", "plain.yaml")
    config = {"ops": {"pgvector_store": {"config": {"split_length": 30}}}}
    validate_run_config(config, plain)  # no `indexes:`: the run config's chunking is the one index's
    with pytest.raises(ValueError, match=f"the variants file {tmp_path / 'pairs.yaml'} lists indexes"):
        validate_run_config(config, pairs)


@pytest.mark.parametrize("module", ["assets", "assets.partitions", "assets.ranking", "assets.store",
                                    "assets.answer_quality", "assets.run", "assets.reference"])
def test_no_module_of_the_dagster_layer_holds_a_sweep(module):
    values = vars(importlib.import_module(module)).items()
    held = [name for name, value in values if isinstance(value, (SweepConfig, PartitionsDefinition))]
    assert held == [], f"{module} holds {held}: pass the sweep to a factory instead"


def test_the_jobs_and_the_schedule_are_built_from_the_sweep(tmp_path):
    import definitions

    pairs = _sweep(tmp_path, PAIRS, "pairs.yaml")
    jobs = definitions.build_jobs(pairs)
    assert [j.name for j in jobs] == ["retrieval_eval", "retrieval_eval_parallel", "retrieval_eval_celery"]
    for job in jobs:
        assert job.tags == {"dagster/asset_partition_range_start": "minilm-w150-o20|bm25",
                            "dagster/asset_partition_range_end": "minilm-w60|hybrid+mmr"}
    schedule = definitions.build_schedule(jobs[0], pairs)
    assert (schedule.name, schedule.cron_schedule, schedule.job_name) == ("nightly_retrieval_eval", "30 4 * * 1-5",
                                                                          "retrieval_eval")
    # the code location's own: the one sweep read from the variants file, everything built from it
    assert definitions.ALL_ASSETS == list(definitions.GRAPH.assets.values())
    assert definitions.GATE_CHECKS == definitions.GRAPH.gate_checks
    assert definitions.WHOLE_SWEEP["dagster/asset_partition_range_end"] == definitions.SWEEP.keys[-1]
