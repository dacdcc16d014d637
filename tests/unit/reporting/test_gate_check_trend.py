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


FAILED_ROW = {**ROW, "actual": 0.5, "delta": -0.4778, "passed": False}


def _failed(**extra):
    return _report(**{"gate_rows": [FAILED_ROW], "gate_passed_by_variant": {"dense": False, "bm25": True},
                      "gate_messages": {"dense": "dropped past its tolerance", "bm25": "first run"},
                      "decided_by": {"dense": "previous", "bm25": "nothing to compare with (first run)"},
                      "accept": {"dense": "run-7"}, **extra})


def test_a_failed_gate_says_how_to_accept_it_in_the_launchpad_s_words_and_the_command_line_s():
    """After a regression a user looking at the failed check finds how to accept it once its numbers
    are intended: the accept_reference job's Launchpad config and the command, both naming the run."""
    dense = variant_gate_checks(_failed(), ["dense"])["dense"][1]
    assert '{run_id: "run-7", variants: ["dense"]}' in dense["accept"]
    assert "python -m eval_pipeline.history accept run-7 --variant dense" in dense["accept"]
    bm25 = variant_gate_checks(_failed(), ["bm25"])["bm25"][1]
    assert "accept" not in bm25  # passed: nothing to accept


def test_the_gate_check_names_what_decided_it():
    checks = variant_gate_checks(_failed(), ["dense", "bm25"])
    assert checks["dense"][1]["decided_by"] == "previous"
    assert checks["bm25"][1]["decided_by"] == "nothing to compare with (first run)"


def test_accept_is_offered_where_an_acceptance_can_take_the_variant():
    """From a run's verdict: a failed, measured variant of a full run with an id; never a passed
    one, one this run did not measure, or any variant of a limited run (never a reference)."""
    from eval_pipeline.gates.retrieval import GateResult
    from eval_pipeline.reporting.run import verdict_output
    from eval_pipeline.verdict.retrieval import RunVerdict

    failed, passed = GateResult(False, "comparable", [], "failed"), GateResult(True, "comparable", [], "passed")

    def accept(**kwargs):
        gates = {"dense": failed, "bm25": passed, "gone": failed}
        verdict = RunVerdict(SUMMARY, pd.DataFrame(), pd.DataFrame(), gates=gates, previous=dict.fromkeys(gates),
                             reference=dict.fromkeys(gates), **kwargs)
        report = verdict_output(verdict)
        return {k: "accept" in m for k, (_, m) in variant_gate_checks(report, ["dense", "bm25", "gone"]).items()}

    assert accept(run_id="r9", unmeasured=["gone"]) == {"dense": True, "bm25": False, "gone": False}
    assert accept(run_id="r9", limited=True) == {"dense": False, "bm25": False, "gone": False}
    assert accept(run_id="") == {"dense": False, "bm25": False, "gone": False}


def test_a_failed_metric_s_delta_is_shown_rounded_as_the_headline_numbers_are():
    row = {**FAILED_ROW, "delta": -0.09208470417110115}
    dense = variant_gate_checks(_failed(gate_rows=[row]), ["dense"])["dense"][1]
    assert dense["previous hit@1 delta"] == -0.0921


def test_an_answer_gate_s_numbers_are_shown_rounded_and_a_missing_one_stays_nan():
    import math

    from eval_pipeline.reporting.answers import answer_gate_checks

    grader = {"state": "comparable", "pass_rate": 0.6936046511627906, "mean_score": None, "yardstick": "det:v1",
              "message": "", "treatment_changes": [], "generator": "extractive:v1"}
    variants = {"dense": {"passed": True, "graders": {"deterministic": grader}}}
    report = {"answers": {"evaluated": True, "variants": variants}}
    (_, metadata), = answer_gate_checks(report, ["dense"]).values()
    assert metadata["deterministic pass_rate"] == 0.6936
    assert math.isnan(metadata["deterministic mean_score"])
