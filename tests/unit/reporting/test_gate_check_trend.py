"""Each variant's gate check carries the variant's headline numbers on every evaluation, passed
or failed (issue #28, item 2: a check's Plots tab is then that variant's trend, one series per
variant), and its compared runs as run links (item 5)."""

import pandas as pd
from dagster import MetadataValue

from assets.metadata import to_metadata
from eval_pipeline.common.metadata import RunLink
from eval_pipeline.reporting.run import variant_gate_checks

SUMMARY = pd.DataFrame([{"variant": "dense", "hit@1": 0.9777777777, "hit@5": 1.0, "mrr": 0.95, "ndcg@10": 0.96,
                         "latency_p95_ms": 12.345678},
                        {"variant": "bm25", "hit@1": 0.5, "hit@5": 0.7, "mrr": float("nan"), "ndcg@10": 0.6,
                         "latency_p95_ms": 3.0}])
ROW = {"variant": "dense", "against": "previous", "metric": "hit@1", "actual": 0.9778, "yardstick": 1.0,
       "delta": -0.0222, "tolerance": 0.05, "passed": True, "state": "comparable"}


def _report(**extra):
    return {"summary": SUMMARY, "gate_rows": [ROW], "gate_messages": {"dense": "passed", "bm25": "first run"},
            "gate_states": {"dense": "comparable", "bm25": "first_run"},
            "gate_passed_by_variant": {"dense": True, "bm25": True},
            "gate_runs": {"dense": {"previous": "abcd1234-0000", "reference": None}, "bm25": {}}, **extra}


def test_every_evaluation_records_the_headline_numbers_rounded():
    checks = variant_gate_checks(_report(), ["dense", "bm25", "gone"])
    dense, bm25 = checks["dense"][1], checks["bm25"][1]
    assert (dense["hit@1"], dense["hit@5"], dense["ndcg@10"], dense["latency_p95_ms"]) == (0.9778, 1.0, 0.96, 12.3457)
    assert bm25["hit@1"] == 0.5 and "mrr" not in bm25  # a first run too; NaN is no point to plot
    assert "hit@1" not in checks["gone"][1]


def test_the_compared_runs_are_links():
    metadata = to_metadata(variant_gate_checks(_report(), ["dense"])["dense"][1])
    assert isinstance(variant_gate_checks(_report(), ["dense"])["dense"][1]["previous_run"], RunLink)
    assert metadata["previous_run"] == MetadataValue.dagster_run("abcd1234-0000")
    assert metadata["reference_run"] == "none"
