"""Tests for eval_pipeline.gates.retrieval: tolerance validation and the gate verdict in every state."""

from __future__ import annotations

import math
from fractions import Fraction
from types import MappingProxyType

import numpy as np
import pytest

from eval_pipeline.gates.retrieval import (
    DEFAULT_TOLERANCES,
    EPSILON,
    GATEABLE_METRICS,
    GateResult,
    evaluate_gate,
    validate_tolerances,
)

BASE = {"hit@1": 0.80, "hit@5": 0.90, "mrr": 0.85, "ndcg@10": 0.82}


# ---------------------------------------------------------------------------
# validate_tolerances
# ---------------------------------------------------------------------------


def test_defaults_are_valid_and_cover_the_headline_metrics():
    assert validate_tolerances(DEFAULT_TOLERANCES) == DEFAULT_TOLERANCES
    assert set(DEFAULT_TOLERANCES) <= set(GATEABLE_METRICS)


def test_gateable_metrics_are_the_per_question_columns():
    for metric in ("hit@1", "hit@3", "hit@5", "hit@10", "hit@20", "recall@1", "recall@10", "recall@20",
                   "mrr", "ndcg@10", "map"):
        assert metric in GATEABLE_METRICS


@pytest.mark.parametrize("value", [0, 0.0, 1, 1.0, 0.05, np.float64(0.1), np.int64(0), Fraction(1, 20)])
def test_valid_tolerances(value):
    out = validate_tolerances({"mrr": value})
    assert out == {"mrr": float(value)} and type(out["mrr"]) is float


def test_negative_zero_is_normalized_to_zero():
    out = validate_tolerances({"mrr": -0.0})
    assert out["mrr"] == 0.0 and math.copysign(1.0, out["mrr"]) == 1.0
    assert str(out["mrr"]) == "0.0"


@pytest.mark.parametrize(
    "value, shown",
    [
        (True, "True"),
        (False, "False"),
        ("0.05", "'0.05'"),
        ("", "''"),
        (None, "None"),
        (float("nan"), "nan"),
        (float("inf"), "inf"),
        (float("-inf"), "-inf"),
        (-0.01, "-0.01"),
        (-1, "-1"),
        (1.0000001, "1.0000001"),
        (2, "2"),
        ([0.05], r"\[0.05\]"),
    ],
)
def test_invalid_tolerance_values_name_the_setting(value, shown):
    with pytest.raises(ValueError, match=rf"^gate tolerance for 'mrr' must be a finite number in \[0, 1\], got {shown}$"):
        validate_tolerances({"hit@1": 0.05, "mrr": value})


def test_nan_message_is_exactly_as_documented():
    with pytest.raises(ValueError) as info:
        validate_tolerances({"mrr": float("nan")})
    assert str(info.value) == "gate tolerance for 'mrr' must be a finite number in [0, 1], got nan"


def test_empty_mapping_fails():
    with pytest.raises(ValueError, match="gate tolerances are empty"):
        validate_tolerances({})


@pytest.mark.parametrize("name", ["ndcg@5", "MRR", "hit@2", "precision@10", "latency_p50_ms", ""])
def test_unknown_metric_fails_and_lists_valid_ones(name):
    with pytest.raises(ValueError, match=rf"unknown metric {name!r}.*valid metrics: hit@1"):
        validate_tolerances({name: 0.05})


def test_not_a_mapping_fails():
    with pytest.raises(ValueError, match="must be a mapping"):
        validate_tolerances([("mrr", 0.05)])  # type: ignore[arg-type]


def test_validate_does_not_mutate_and_accepts_read_only_mappings():
    raw = {"mrr": -0.0, "hit@1": 1}
    out = validate_tolerances(MappingProxyType(raw))
    assert raw == {"mrr": -0.0, "hit@1": 1} and out is not raw
    assert list(out) == ["mrr", "hit@1"]


# ---------------------------------------------------------------------------
# evaluate_gate: comparable
# ---------------------------------------------------------------------------


def test_drop_equal_to_tolerance_passes():
    # 0.80 - 0.75 is 0.05000000000000004 in floats: passes thanks to EPSILON
    current = {**BASE, "hit@1": 0.75}
    assert BASE["hit@1"] - current["hit@1"] > 0.05
    result = evaluate_gate(current, BASE, DEFAULT_TOLERANCES, "comparable", strict=False)
    assert result.passed and result.state == "comparable"
    row = next(r for r in result.rows if r["metric"] == "hit@1")
    assert row["passed"] is True and row["delta"] == pytest.approx(-0.05) and row["tolerance"] == 0.05


def test_drop_just_over_tolerance_fails():
    current = {**BASE, "mrr": 0.85 - 0.05 - 1e-6}
    result = evaluate_gate(current, BASE, DEFAULT_TOLERANCES, "comparable", strict=False)
    assert not result.passed
    assert [r["metric"] for r in result.failures] == ["mrr"]
    assert "mrr 0.8500 -> 0.8000" in result.message and "tolerance 0.05" in result.message


def test_drop_within_epsilon_of_tolerance_passes_but_not_beyond():
    tol = {"mrr": 0.05}
    assert evaluate_gate({"mrr": 0.5 - 0.05 - EPSILON / 2}, {"mrr": 0.5}, tol, "comparable", strict=True).passed
    assert not evaluate_gate({"mrr": 0.5 - 0.05 - 1e-9}, {"mrr": 0.5}, tol, "comparable", strict=True).passed


def test_improvement_passes_and_zero_tolerance_allows_no_drop():
    better = {m: v + 0.1 for m, v in BASE.items()}
    assert evaluate_gate(better, BASE, DEFAULT_TOLERANCES, "comparable", strict=True).passed
    assert evaluate_gate(BASE, BASE, {"mrr": 0}, "comparable", strict=True).passed
    assert not evaluate_gate({"mrr": 0.8499}, BASE, {"mrr": 0}, "comparable", strict=True).passed


def test_rows_have_the_documented_fields():
    result = evaluate_gate(BASE, BASE, DEFAULT_TOLERANCES, "comparable", strict=False)
    assert isinstance(result, GateResult)
    assert [r["metric"] for r in result.rows] == list(DEFAULT_TOLERANCES)
    for row in result.rows:
        assert set(row) == {"metric", "actual", "yardstick", "delta", "tolerance", "passed"}
        assert row["delta"] == 0.0 and row["passed"] is True


def test_nan_current_value_fails_a_comparable_gate():
    result = evaluate_gate({**BASE, "mrr": float("nan")}, BASE, {"mrr": 0.05}, "comparable", strict=False)
    assert not result.passed and result.failures[0]["metric"] == "mrr"


def test_a_metric_measured_now_but_missing_from_the_yardstick_fails_closed_and_is_named():
    """A drop from the yardstick cannot be seen, so the gate cannot pass (a metric newly gated, or
    a yardstick that measured nothing of it: a regression in steps would be judged step to step
    alone); one measured on neither side is not judged, and named."""
    result = evaluate_gate({**BASE, "map": 0.1}, BASE, {"mrr": 0.05, "map": 0.0}, "comparable", strict=False)
    assert not result.passed and result.state == "not_compared"
    row = next(r for r in result.rows if r["metric"] == "map")
    assert row["passed"] is False and row["yardstick"] is None
    assert "map measured now but not in the yardstick" in result.message
    nowhere = evaluate_gate({**BASE, "map": float("nan")}, BASE, {"mrr": 0.05, "map": 0.0}, "comparable",
                            strict=True)
    assert nowhere.passed and next(r for r in nowhere.rows if r["metric"] == "map")["passed"] is None
    assert "not judged (measured on neither side): map" in nowhere.message


def test_current_missing_a_gated_metric_is_an_error():
    with pytest.raises(ValueError, match=r"lack gated metric\(s\) \['hit@5'\]"):
        evaluate_gate({"mrr": 0.5}, BASE, {"mrr": 0.05, "hit@5": 0.05}, "comparable", strict=False)


def test_invalid_tolerances_and_state_are_rejected():
    with pytest.raises(ValueError, match="gate tolerance for 'mrr'"):
        evaluate_gate(BASE, BASE, {"mrr": "0.05"}, "comparable", strict=False)
    with pytest.raises(ValueError, match="comparison_state must be one of"):
        evaluate_gate(BASE, BASE, DEFAULT_TOLERANCES, "same", strict=False)
    with pytest.raises(ValueError, match="needs yardstick metrics"):
        evaluate_gate(BASE, None, DEFAULT_TOLERANCES, "comparable", strict=False)
    with pytest.raises(ValueError, match="strict must be"):
        evaluate_gate(BASE, BASE, DEFAULT_TOLERANCES, "comparable", strict="yes")  # type: ignore[arg-type]


# ---------------------------------------------------------------------------
# evaluate_gate: baseline / mismatch / unknown
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("strict", [False, True])
def test_baseline_state_passes(strict):
    result = evaluate_gate(BASE, None, DEFAULT_TOLERANCES, "first_run", strict=strict)
    assert result.passed and result.state == "first_run"
    assert all(r["yardstick"] is None and r["passed"] is None for r in result.rows)
    assert result.message == "no earlier comparable run to compare with: gate passes"


@pytest.mark.parametrize("strict", [False, True])
@pytest.mark.parametrize("state", ["mismatch", "unknown", "not_compared"])
def test_a_run_that_cannot_be_compared_fails_closed(state, strict):
    """Nothing comparable never passes, strict or not: the yardstick moved, so a regression in
    the same change would pass unseen."""
    crashed = {m: 0.0 for m in BASE}  # a huge drop, reported but not judged
    result = evaluate_gate(crashed, BASE, DEFAULT_TOLERANCES, state, strict=strict)
    assert not result.passed and result.state == state
    assert result.message.startswith("FAILED (not compared)") and "accept" in result.message
    assert all(r["passed"] is None for r in result.rows)
    assert result.rows[0]["delta"] == pytest.approx(-0.8)  # still reported for information
    # an unchanged run that cannot be compared fails too: passing it would record it as a yardstick
    assert not evaluate_gate(BASE, None, DEFAULT_TOLERANCES, state, strict=strict).passed
    assert not evaluate_gate(BASE, BASE, DEFAULT_TOLERANCES, state, strict=strict).passed


def test_paired_is_judged_by_the_tolerances():
    assert evaluate_gate(BASE, BASE, DEFAULT_TOLERANCES, "paired", strict=False).passed
    dropped = evaluate_gate({**BASE, "hit@1": BASE["hit@1"] - 0.2}, BASE, DEFAULT_TOLERANCES, "paired", strict=False)
    assert not dropped.passed and dropped.state == "paired" and dropped.failures[0]["metric"] == "hit@1"
    with pytest.raises(ValueError, match="needs yardstick metrics"):
        evaluate_gate(BASE, None, DEFAULT_TOLERANCES, "paired", strict=False)


def test_evaluate_gate_does_not_mutate_inputs():
    current, base, tol = dict(BASE), dict(BASE), {"mrr": -0.0}
    evaluate_gate(current, base, tol, "comparable", strict=False)
    assert current == BASE and base == BASE and math.copysign(1.0, tol["mrr"]) == -1.0


def test_a_nan_at_its_best_passes_its_row_and_says_so():
    """A gated metric NaN today because the run is at its best (``at_best``: rc_nauc of a run that lost nothing)
    cannot have dropped: its row passes, no delta is invented, and the message says why. Any other NaN still
    fails; a metric named at_best that was measured is judged on its number; one the yardstick lacks too is
    measured on neither side."""
    tol = {"mrr": 0.05, "rc_nauc": 0.05}
    current = {**BASE, "rc_nauc": float("nan")}
    best = evaluate_gate(current, {**BASE, "rc_nauc": 0.4}, tol, "comparable", strict=False, at_best={"rc_nauc"})
    assert best.passed and best.state == "comparable", best.message
    row = next(r for r in best.rows if r["metric"] == "rc_nauc")
    assert row["passed"] is True and row["delta"] is None and math.isnan(row["actual"]) and row["yardstick"] == 0.4
    assert "rc_nauc undefined today: the run is at its best" in best.message, best.message
    assert not evaluate_gate(current, {**BASE, "rc_nauc": 0.4}, tol, "comparable", strict=False).passed
    measured = evaluate_gate({**BASE, "rc_nauc": 0.1}, {**BASE, "rc_nauc": 0.4}, tol, "comparable", strict=False,
                             at_best={"rc_nauc"})
    assert not measured.passed and "rc_nauc 0.4000 -> 0.1000" in measured.message, measured.message
    neither = evaluate_gate(current, BASE, tol, "comparable", strict=False, at_best={"rc_nauc"})
    assert neither.passed and "not judged (measured on neither side): rc_nauc" in neither.message
    unjudged = evaluate_gate(current, {**BASE, "rc_nauc": 0.4}, tol, "not_compared", strict=False,
                             at_best={"rc_nauc"})
    assert not unjudged.passed and next(r for r in unjudged.rows if r["metric"] == "rc_nauc")["passed"] is None
