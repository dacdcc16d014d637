"""The index sweep end to end on the tiny fixture, with two real models (all-MiniLM-L6-v2 and
sre-embedding-model, both from pip): one run builds every index and ranks, scores, answers and
gates every (index, variant) pair; one pair re-materializes alone; an index added to the file
later is the only one built; a variant that no index's embedder decides is ranked once per
chunking. Each run is a process of its own (forked from the job zygote: tests/job_zygote.py),
since the variants file is read at import; of two runs a test compares, one is a new process."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.integration.cli import run_python

pytestmark = pytest.mark.integration

SRE = "package:sre_embedding_model/model_weights"

INDEXES = f"""\
baseline: minilm-w30-o5|pg-dense
indexes:
  - embedder: bundled
    chunking: {{split_length: 30, split_overlap: 5}}
  - name: sre-w30-o5
    embedder: {{kind: local, model: "{SRE}"}}
    chunking: {{split_length: 30, split_overlap: 5}}
EXTRA
variants:
  - engine: pg-dense
  - engine: bm25
  - engine: metadata
recommend: {{max_p95_ms: 1000, max_storage_mb: 50}}
"""
ADDED = """\
  - embedder: bundled
    chunking: {split_length: 60, split_overlap: 10}
"""


def _drive(tmp_path: Path, variants: str, name: str, pair: str | None = None, *, fresh: bool = False) -> dict:
    path = tmp_path / f"{name}.yaml"
    path.write_text(variants, encoding="utf-8")
    env = {**os.environ, "EVAL_PIPELINE_VARIANTS": str(path), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    args = ["-m", "tests.integration.index_sweep_driver", str(tmp_path / "state"), str(tmp_path / name),
            *([pair] if pair else [])]
    done = run_python(tmp_path, name, env, args, timeout=900, fresh=fresh)
    lines = [line for line in done.stdout.splitlines() if line.startswith("INDEX-SWEEP-RESULT ")]
    assert lines, (done.stdout[-3000:], done.stderr[-5000:])
    result = json.loads(lines[-1].split(" ", 1)[1])
    assert result["success"], result.get("errors")
    return result


@pytest.fixture
def state(tmp_path):
    yield tmp_path
    from eval_pipeline.store.database import EmbeddedPostgres

    EmbeddedPostgres(tmp_path / "state").stop()


def test_one_run_does_every_pair_then_one_pair_alone_then_an_added_index_alone(state):
    tmp_path = state
    first = _drive(tmp_path, INDEXES.replace("EXTRA\n", ""), "first", pair="sre-w30-o5|pg-dense")
    pairs = [f"{i}|{v}" for i in ("minilm-w30-o5", "sre-w30-o5") for v in ("pg-dense", "bm25", "metadata")]
    assert first["keys"] == pairs
    assert first["ranked_partitions"] == sorted(pairs) == first["answer_partitions"]
    assert first["summary_variants"] == pairs  # the report has every pair, in the file's order
    assert set(first["indexes"]) == {"minilm-w30-o5", "sre-w30-o5"}
    assert all(not i["reused"] and i["build_seconds"] > 0 and i["storage_bytes"] > 0 for i in first["indexes"].values())
    assert first["indexes"]["minilm-w30-o5"]["table"] != first["indexes"]["sre-w30-o5"]["table"]
    # one chunking, two embedders: metadata is ranked once and shared, every other variant per index
    assert first["ranked_metadata"]["shared_across_indexes"] == "sre-w30-o5|metadata (from minilm-w30-o5|metadata)"
    # a gate check, a retrieval and an answer one, for every pair
    checks = dict(map(tuple, first["checks"]))
    for pair in pairs:
        name = pair.replace("|", "_").replace("-", "_")
        assert checks[f"gate__{name}"] is True and checks[f"answer_gate__{name}"] is True, sorted(checks)
    assert first["recommendation"]["best_overall"] is not None
    assert first["recommendation"]["within_budget"]["index"] in ("minilm-w30-o5", "sre-w30-o5")

    report = (tmp_path / "first" / "results.md").read_text()
    assert "## Indexes" in report and "Recommended" in report.splitlines()[2]
    assert "| minilm-w30-o5\\|pg-dense |" in report  # a pair key in a table cell is escaped, not split
    assert "### What each index costs" in report and "answer in top 5" in report
    assert (tmp_path / "first" / "pareto_latency.png").is_file() and (tmp_path / "first" / "pareto_storage.png").is_file()

    # one pair re-materialized alone: only its partition is written again
    single = first["single"]
    assert single["success"] and single["partitions"] == ["sre-w30-o5|pg-dense"]
    assert [Path(f).parts[0] for f in single["new_files"]] == ["sre-w30-o5|pg-dense"]

    # an index added to the file: the two built ones are reused, the new one alone is built
    # (a new process: its tables and their reuse are compared with the first run's, under another hash seed)
    added = _drive(tmp_path, INDEXES.replace("EXTRA\n", ADDED), "added", fresh=True)
    assert {k: v["reused"] for k, v in added["indexes"].items()} == {
        "minilm-w30-o5": True, "sre-w30-o5": True, "minilm-w60-o10": False}
    assert added["indexes"]["minilm-w30-o5"]["table"] == first["indexes"]["minilm-w30-o5"]["table"]
    # a reused table still reports what its build cost
    assert added["indexes"]["sre-w30-o5"]["build_seconds"] == pytest.approx(first["indexes"]["sre-w30-o5"]["build_seconds"])
    assert len(added["summary_variants"]) == 9


TUNED = """\
baseline: hybrid
variants:
  - engine: hybrid
  - engine: hybrid
    tune: rrf_k
    name: hybrid-tuned
  - engine: hybrid
    legs: [bm25, dense]
    tune: weights
    name: hybrid-bm25-tuned
  - engine: bm25
tuning: {fraction: 0.5, seed: 0}
"""


def test_fusion_tuning_tunes_on_one_part_and_every_variant_is_scored_on_the_rest(state):
    """On the tiny set (seed 0 puts t2 and t5 on the tuning side): the tuned variants choose
    their rrf_k or weights there, no variant is ranked or scored on a tuning question, and the
    chosen values are in the results' recorded configuration and in the report's provenance."""
    tmp_path = state
    result = _drive(tmp_path, TUNED, "tuned")
    tuning, scored = set(result["tuning_qids"]), set(result["scored_qids"])
    assert tuning == {"t2", "t5"} and scored == {"t1", "t3", "t4", "t6"}
    assert result["split"] == {"fraction": 0.5, "seed": 0, "n_tuning": 2, "n_held_out": 4}
    for key, qids in result["ranked_qids"].items():
        assert set(qids) == scored, key  # every variant, tuned or not, on the held-out part only
    assert set(result["n_questions"].values()) == {len(scored)}
    configs = result["variant_configs"]
    assert "tuned" not in configs["hybrid"] and "tuned" not in configs["bm25"]
    rrf = configs["hybrid-tuned"]["tuned"]
    assert rrf["method"] == "rrf_k" and configs["hybrid-tuned"]["rrf_k"] == rrf["chosen"]["rrf_k"]
    assert rrf["split_seed"] == 0 and rrf["n_tuning"] == 2 and rrf["grid_size"] == 8
    weights = configs["hybrid-bm25-tuned"]["tuned"]
    assert weights["method"] == "weights" and configs["hybrid-bm25-tuned"]["weights"] == weights["chosen"]["weights"]
    report = (tmp_path / "tuned" / "results.md").read_text()
    assert "2 questions tuned on (fraction 0.5, seed 0), never scored; every variant is scored on the other 4" in report
    assert f"- tuned hybrid-tuned: `rrf_k {rrf['chosen']['rrf_k']} (of 8 grid points; ndcg@10" in report
    assert f"- tuned hybrid-bm25-tuned: `weights {weights['chosen']['weights']} (of 11 grid points" in report
