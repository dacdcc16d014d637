"""`question_set: {compare_with: {generator: ict}}` through the whole job (`dagster job execute`,
issue #30): the question_set asset builds the second set (cached, and says so), the report asset
ranks it with every variant and results.md gets the "Do the question sets agree?" section, with
Kendall's τ as numeric metadata on the report asset. A state dir and history of its own."""

from __future__ import annotations

import pytest
import yaml

from tests.integration.cli import start_job, tiny_job_config
from tests.orchestration import verdict_runs

pytestmark = pytest.mark.integration

VARIANTS = [{"engine": "pg-keyword", "match": "any"}, {"engine": "pg-dense"}, {"engine": "bm25"},
            {"engine": "metadata"}]


def _run(project: verdict_runs.Project, name: str, variants, compare_with: dict) -> verdict_runs.Run:
    config = tiny_job_config(project.tmp / name)
    config["ops"]["question_set"]["config"]["compare_with"] = compare_with
    config["ops"]["golden_prompts"] = {"config": {"source": "none"}}
    job = start_job(project.tmp, name, {**project.env, "EVAL_PIPELINE_VARIANTS": str(variants)}, config)
    return project.finish(name, job.wait(timeout=600))


def _metadata(project: verdict_runs.Project, run_id: str, asset: str) -> dict:
    for record in project.events(run_id, "ASSET_MATERIALIZATION"):
        materialization = record.event_log_entry.dagster_event.event_specific_data.materialization
        if materialization.asset_key.to_user_string() == asset:
            return {k: getattr(v, "value", v) for k, v in materialization.metadata.items()}
    raise AssertionError(f"{asset} was not materialized in run {run_id}")


def test_compare_with_an_ict_set_adds_the_set_validity_section(tmp_path_factory, job_env):
    root = tmp_path_factory.mktemp("compare_with")
    project = verdict_runs.Project(root, job_env("state"))
    variants = root / "variants.yaml"
    variants.write_text(yaml.safe_dump({"variants": VARIANTS}, sort_keys=False))

    first = _run(project, "first", variants, {"name": "ict", "generator": "ict", "k": 2, "seed": 1})
    assert first.code == 0, first.log[-3000:]
    assert "## Do the question sets agree?" in first.report
    assert "B is a weak generated set" in first.report
    report = _metadata(project, first.run_id, "report")
    tau = report["set tau ndcg@10"]
    assert tau is None or -1.0 <= tau <= 1.0
    # the microscope on the same page (#26): misses.jsonl as a path, the counts per triage label as numbers
    assert str(report["misses"]).endswith("misses.jsonl")
    assert isinstance(report["misses never_candidate"], int)
    questions = _metadata(project, first.run_id, "question_set")
    assert questions["compare_with"] == "ict" and questions["compare_with questions"] > 0
    assert questions["compare_with generation_units_generated"] > 0

    again = _run(project, "again", variants, {"name": "ict", "generator": "ict", "k": 2, "seed": 1})
    assert again.code == 0, again.log[-3000:]
    cached = _metadata(project, again.run_id, "question_set")
    assert cached["compare_with generation_units_generated"] == 0 and cached["compare_with generation_units_cached"] > 0
    assert cached["compare_with fingerprint"] == questions["compare_with fingerprint"]
    assert _metadata(project, again.run_id, "report")["set tau ndcg@10"] == tau


def test_a_bad_compare_with_fails_before_anything_is_embedded(tmp_path_factory, job_env):
    root = tmp_path_factory.mktemp("compare_with_bad")
    project = verdict_runs.Project(root, job_env("state"))
    variants = root / "variants.yaml"
    variants.write_text(yaml.safe_dump({"variants": VARIANTS[:2]}, sort_keys=False))
    bad = _run(project, "bad", variants, {"name": "ict", "source": "file", "path": str(root / "missing.jsonl")})
    assert bad.code != 0
    assert "question_set.compare_with" in bad.log
    assert "pgvector_store" not in "".join(line for line in bad.log.splitlines() if "STEP_SUCCESS" in line)
