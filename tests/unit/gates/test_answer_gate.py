"""The answer gate and its tolerances (pure: no database)."""

from __future__ import annotations

import math
from decimal import Decimal

import numpy as np
import pytest

from eval_pipeline.gates.answers import (
    DEFAULT_ANSWER_TOLERANCES,
    AnswerGateResult,
    evaluate_answer_gate,
    parse_tolerance,
    validate_answer_tolerances,
)
from eval_pipeline.history.answers import answer_comparable

YARDSTICK = "decision:api.example.com:grader-1:v1+abcd1234"
TOL = {"max_pass_rate_drop": 0.1, "max_mean_score_drop": 0.1}


def row(run_id="run-2", pass_rate=0.8, mean_score=0.8, **overrides):
    base = {
        "run_id": run_id,
        "variant": "bm25",
        "grader": "decision",
        "set_id": "team.support",
        "set_fingerprint": "fp-1",
        "corpus_signature": "corpus-1",
        "generator": "api.example.com:gen-1->gen-1-0613",
        "yardstick": YARDSTICK,
        "limited": False,
        "errored": 0,
        "eligible": True,
        "n_scored": 20,
        "pass_rate": pass_rate,
        "mean_score": mean_score,
    }
    base.update(overrides)
    return base


# ---------------------------------------------------------------------------
# tolerances
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("value, expected", [
    (0, 0.0),
    (1, 1.0),
    (0.0, 0.0),
    (1.0, 1.0),
    (0.1, 0.1),
    (1e-2, 0.01),
    (5e-1, 0.5),
    ("1e-2", 0.01),   # PyYAML reads 1e-2 (no dot) as this string
    ("1E-1", 0.1),
    ("5e-1", 0.5),
    ("0.5", 0.5),
    ("  0.5 ", 0.5),
    (".5", 0.5),
    ("0.", 0.0),
    ("1.", 1.0),
    ("+0.25", 0.25),
    ("1", 1.0),
    ("0", 0.0),
    ("1.0e0", 1.0),
    ("1e-400", 0.0),  # underflows to 0: a finite number in range
    (np.float64(0.2), 0.2),
    (np.float32(0.5), 0.5),
    (np.int64(1), 1.0),
])
def test_valid_tolerances(value, expected):
    got = parse_tolerance(value, "max_pass_rate_drop")
    assert type(got) is float
    assert got == pytest.approx(expected, abs=1e-9)


@pytest.mark.parametrize("value", [-0.0, "-0.0", "-0", "-0e5"])
def test_negative_zero_is_zero(value):
    got = parse_tolerance(value, "max_pass_rate_drop")
    assert got == 0.0 and math.copysign(1.0, got) == 1.0
    assert repr(got) == "0.0"


@pytest.mark.parametrize("value", [
    "", "   ", "\t\n", None,                                   # empty
    "abc", "0.1abc", "1e", "e-2", ".", "+", "-", "1e-2.5", "0..1", "1,5", "0.1 0.2",
    "nan", "NaN", "inf", "-inf", "Infinity", "0x1", "1_0", "0_1", "٠.٥", "0.5\x00",
    float("nan"), float("inf"), float("-inf"), np.float64("nan"), Decimal("NaN"), Decimal("0.05"),
    -0.1, "-0.1", -1e-12, 1.0000001, "1.0000001", 2, "1e1", "5.", 10**400, "1e999",
    True, False, np.bool_(True), [0.1], (0.1,), {"x": 0.1}, b"0.1", object(),
])
def test_invalid_tolerances_are_refused_naming_source_setting_and_value(value):
    with pytest.raises(ValueError) as info:
        validate_answer_tolerances({"max_mean_score_drop": value}, "answers.yaml")
    message = str(info.value)
    assert message.startswith("answers.yaml: max_mean_score_drop must be")
    assert repr(value) in message


def test_parse_tolerance_without_source_names_the_setting():
    with pytest.raises(ValueError, match=r"^max_pass_rate_drop must be .*, got 'abc'$"):
        parse_tolerance("abc", "max_pass_rate_drop")
    with pytest.raises(ValueError, match="not a boolean"):
        parse_tolerance(True, "max_pass_rate_drop")
    with pytest.raises(ValueError, match="empty"):
        parse_tolerance("", "max_pass_rate_drop")


def test_defaults_when_absent():
    assert DEFAULT_ANSWER_TOLERANCES == {"max_pass_rate_drop": 0.1, "max_mean_score_drop": 0.1}
    assert validate_answer_tolerances(None, "cfg") == DEFAULT_ANSWER_TOLERANCES
    assert validate_answer_tolerances({}, "cfg") == DEFAULT_ANSWER_TOLERANCES
    assert validate_answer_tolerances({"max_pass_rate_drop": "5e-2"}, "cfg") == {
        "max_pass_rate_drop": 0.05, "max_mean_score_drop": 0.1}
    assert validate_answer_tolerances({"max_mean_score_drop": 0}, "cfg") == {
        "max_pass_rate_drop": 0.1, "max_mean_score_drop": 0.0}
    # the defaults are a fresh dict each time
    validate_answer_tolerances(None, "cfg")["max_pass_rate_drop"] = 0.9
    assert DEFAULT_ANSWER_TOLERANCES["max_pass_rate_drop"] == 0.1


def test_a_key_with_an_empty_value_is_an_error_not_a_default():
    with pytest.raises(ValueError, match=r"cfg: max_pass_rate_drop .*empty.*None"):
        validate_answer_tolerances({"max_pass_rate_drop": None}, "cfg")


def test_unknown_key_names_the_valid_ones():
    with pytest.raises(ValueError) as info:
        validate_answer_tolerances({"max_pass_rate_dorp": 0.1}, "team.yaml")
    message = str(info.value)
    assert "team.yaml" in message and "'max_pass_rate_dorp'" in message
    assert "max_pass_rate_drop" in message and "max_mean_score_drop" in message


@pytest.mark.parametrize("raw", [[("max_pass_rate_drop", 0.1)], "max_pass_rate_drop: 0.1", 0.1])
def test_tolerances_must_be_a_mapping(raw):
    with pytest.raises(ValueError, match="^cfg: .*mapping"):
        validate_answer_tolerances(raw, "cfg")


def test_the_gate_validates_its_tolerances():
    with pytest.raises(ValueError, match="max_pass_rate_drop"):
        evaluate_answer_gate(row(), None, None, {"max_pass_rate_drop": "nan"}, strict=False)
    with pytest.raises(ValueError, match="strict"):
        evaluate_answer_gate(row(), None, None, TOL, strict="yes")


# ---------------------------------------------------------------------------
# comparability
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("grader, yardstick, ok", [
    ("decision", YARDSTICK, True),
    ("judge", "judge:api.example.com:judge-model:vjudge-1+0123abcd", True),
    ("deterministic", "deterministic:v1", True),
    ("static", "static:v3", True),
    ("decision", "decision", False),
    ("judge", "judge", False),
    ("decision", "decision:failed", False),
    ("judge", "judge:failed", False),
    ("decision", "decision:api.example.com:v1", False),  # no model
    ("decision", "decision::m:v1", False),               # no provider
    ("deterministic", "deterministic", False),
    ("deterministic", "deterministic:1", False),
    ("static", "deterministic:v1", False),               # another grader's yardstick
    ("judge", YARDSTICK, False),
    ("decision", "", False),
    ("decision", None, False),
])
def test_yardstick_comparability(grader, yardstick, ok):
    comparable, why = answer_comparable(row(grader=grader, yardstick=yardstick))
    assert comparable is ok, why


@pytest.mark.parametrize("overrides, reason", [
    ({"generator": None}, "generator is unknown"),
    ({"generator": ""}, "generator is unknown"),
    ({"generator": "  "}, "generator is unknown"),
    ({"limited": True}, "limited"),
    ({"limited": None}, "limited flag"),
    ({"limited": 0}, "limited flag"),
    ({"limited": "false"}, "limited flag"),
    ({"corpus_signature": None}, "corpus_signature unknown"),
    ({"set_fingerprint": ""}, "set_fingerprint unknown"),
])
def test_not_comparable_rows(overrides, reason):
    comparable, why = answer_comparable(row(**overrides))
    assert not comparable and reason in why


# ---------------------------------------------------------------------------
# the gate
# ---------------------------------------------------------------------------


def test_numpy_flags_from_a_pandas_row_count_as_flags():
    assert answer_comparable(row(limited=np.False_))[0]
    assert not answer_comparable(row(limited=np.True_))[0]


def test_first_run_passes_unless_strict():
    result = evaluate_answer_gate(row(), None, None, TOL, strict=False)
    assert isinstance(result, AnswerGateResult)
    assert (result.passed, result.state, result.rows) == (True, "first_run", [])
    # strict: nothing passes unjudged; `not_compared`, as the retrieval gate says it (one rule: gates/rule.py)
    strict = evaluate_answer_gate(row(), None, None, TOL, strict=True)
    assert (strict.passed, strict.state) == (False, "not_compared") and "accepted" in strict.message


@pytest.mark.parametrize("overrides", [
    {"generator": None}, {"yardstick": "decision"}, {"yardstick": "decision:failed"}, {"limited": True},
])
def test_not_comparable_passes_with_a_warning_unless_strict(overrides):
    previous = row("run-1", 0.99, 0.99)
    current = row(pass_rate=0.1, mean_score=0.1, **overrides)
    lenient = evaluate_answer_gate(current, previous, previous, TOL, strict=False)
    assert (lenient.passed, lenient.state, lenient.rows) == (True, "not_comparable", [])
    assert lenient.message.startswith("WARNING")
    strict = evaluate_answer_gate(current, previous, previous, TOL, strict=True)
    assert (strict.passed, strict.state) == (False, "not_comparable")
    assert strict.message.startswith("FAILED (strict)")


def test_a_drop_equal_to_the_tolerance_passes_despite_float_noise():
    assert 0.7 - 0.8 < -0.1  # the float noise the slack absorbs
    previous = row("run-1", 0.8, 0.8)
    result = evaluate_answer_gate(row(pass_rate=0.7, mean_score=0.7), previous, previous, TOL, strict=True)
    assert result.passed and result.state == "comparable"
    assert len(result.rows) == 4 and all(r["passed"] for r in result.rows)
    # and with means computed as sums over n
    prev_mean = sum([1.0] * 16 + [0.0] * 4) / 20   # 0.8
    cur_mean = sum([1.0] * 14 + [0.0] * 6) / 20    # 0.7
    result = evaluate_answer_gate(row(pass_rate=cur_mean, mean_score=cur_mean), row("run-1", prev_mean, prev_mean),
                                  None, TOL, strict=True)
    assert result.passed


def test_zero_tolerance_allows_no_drop_but_equal_passes():
    tol = {"max_pass_rate_drop": 0, "max_mean_score_drop": -0.0}
    previous = row("run-1", 0.5, 0.5)
    assert evaluate_answer_gate(row(pass_rate=0.5, mean_score=0.5), previous, None, tol, strict=True).passed
    assert not evaluate_answer_gate(row(pass_rate=0.5, mean_score=0.49), previous, None, tol, strict=True).passed


def test_a_drop_just_over_the_tolerance_fails():
    previous = row("run-1", 0.8, 0.8)
    result = evaluate_answer_gate(row(pass_rate=0.6999, mean_score=0.8), previous, previous, TOL, strict=False)
    assert not result.passed and result.state == "comparable"
    failed = {(r["metric"], r["against"]) for r in result.failures}
    assert failed == {("pass_rate", "previous"), ("pass_rate", "reference")}
    assert "pass_rate" in result.message and "run-1" in result.message


def test_improvements_pass():
    previous = row("run-1", 0.5, 0.5)
    assert evaluate_answer_gate(row(pass_rate=1.0, mean_score=0.9), previous, previous, TOL, strict=True).passed


def test_rows_list_every_comparison():
    previous, reference = row("run-2", 0.75, 0.7), row("run-1", 0.8, 0.9)
    result = evaluate_answer_gate(row("run-3", 0.7, 0.65), previous, reference, TOL, strict=True)
    assert [(r["metric"], r["against"]) for r in result.rows] == [
        ("pass_rate", "previous"), ("mean_score", "previous"), ("pass_rate", "reference"), ("mean_score", "reference")]
    by = {(r["metric"], r["against"]): r for r in result.rows}
    r = by[("mean_score", "reference")]
    assert r["run_id"] == "run-3" and r["yardstick_run_id"] == "run-1"
    assert r["actual"] == 0.65 and r["yardstick"] == 0.9 and r["tolerance"] == 0.1
    assert r["delta"] == pytest.approx(-0.25) and r["passed"] is False
    assert by[("pass_rate", "previous")]["passed"] is True
    assert set(r) == {"metric", "against", "run_id", "yardstick_run_id", "actual", "yardstick", "delta", "tolerance",
                      "passed"}
    assert [f["metric"] for f in result.failures] == ["mean_score"]


def test_each_metric_has_its_own_tolerance():
    tol = {"max_pass_rate_drop": 0.3, "max_mean_score_drop": 0.01}
    previous = row("run-1", 0.8, 0.8)
    result = evaluate_answer_gate(row(pass_rate=0.55, mean_score=0.78), previous, None, tol, strict=True)
    assert [(r["metric"], r["passed"]) for r in result.rows] == [("pass_rate", True), ("mean_score", False)]


def test_reference_catches_a_regression_in_steps():
    runs = [row("run-1", 0.80, 0.80), row("run-2", 0.74, 0.74), row("run-3", 0.68, 0.68)]
    second = evaluate_answer_gate(runs[1], runs[0], runs[0], TOL, strict=True)
    assert second.passed
    third = evaluate_answer_gate(runs[2], runs[1], runs[0], TOL, strict=True)
    assert not third.passed
    assert {(r["against"], r["passed"]) for r in third.rows} == {("previous", True), ("reference", False)}
    # without the reference the steps would pass
    assert evaluate_answer_gate(runs[2], runs[1], None, TOL, strict=True).passed


@pytest.mark.parametrize("missing", [math.nan, None, np.float64("nan")])
def test_nan_current_value_fails_its_row_in_a_comparable_run(missing):
    previous = row("run-1", 0.8, 0.8)
    result = evaluate_answer_gate(row(pass_rate=missing, mean_score=0.8, n_scored=0), previous, None, TOL,
                                  strict=False)
    assert not result.passed and result.state == "comparable"
    bad = result.failures
    assert [r["metric"] for r in bad] == ["pass_rate"] and bad[0]["delta"] is None and math.isnan(bad[0]["actual"])
    assert "nothing was scored" in result.message


@pytest.mark.parametrize("previous, reference, state", [
    (None, None, "first_run"),
    ("prev", "prev", "comparable"),
])
def test_errored_answers_fail_the_gate_whatever_else(previous, reference, state):
    prev = row("run-1", 0.5, 0.5)
    current = row(pass_rate=0.9, mean_score=0.9, errored=2, eligible=False)
    result = evaluate_answer_gate(current, prev if previous else None, prev if reference else None, TOL,
                                  strict=False)
    assert (result.passed, result.state) == (False, state)
    assert "could not be generated: the metrics are incomplete" in result.message


def test_errored_answers_fail_a_not_comparable_run_even_when_not_strict():
    result = evaluate_answer_gate(row(generator=None, errored=1), None, None, TOL, strict=False)
    assert (result.passed, result.state) == (False, "not_comparable")
    assert "metrics are incomplete" in result.message


@pytest.mark.parametrize("field, value", [
    ("set_fingerprint", "fp-2"), ("set_id", "team.other"), ("corpus_signature", "corpus-2"),
    ("yardstick", "decision:api.example.com:grader-2:v1+abcd1234"),
    ("variant", "dense"), ("grader", "judge"),
])
def test_a_yardstick_of_another_key_is_never_compared(field, value):
    other = row("run-1", 0.1, 0.1, **{field: value})
    if field == "grader":
        other["yardstick"] = "judge:api.example.com:grader-1:v1"
    with pytest.raises(ValueError, match="measured something else"):
        evaluate_answer_gate(row(), other, None, TOL, strict=False)
    with pytest.raises(ValueError, match="measured something else"):
        evaluate_answer_gate(row(), None, other, TOL, strict=False)


def test_another_generator_is_the_treatment_judged_against_the_same_measurement():
    """The generator (model, prompt) is what a team tunes: a row of another generator on the same
    set, corpus and yardstick is the yardstick, and a drop fails."""
    other = row("run-1", 0.9, 0.9, generator="api.example.com:gen-2->gen-2")
    result = evaluate_answer_gate(row("run-2", 0.5, 0.5), other, None, None, strict=False)
    assert result.state == "comparable" and not result.passed


def test_a_measurement_with_a_history_but_nothing_comparable_fails_closed():
    """A loosened golden set re-stamped under the same set id: no row of its fingerprint, but the
    (variant, grader) has a history; strict or not, it fails."""
    history = row("run-1", 0.5, 0.5, set_fingerprint="fp-0")
    for strict in (False, True):
        result = evaluate_answer_gate(row("run-2", 1.0, 1.0), None, None, None, strict=strict, history=history)
        assert result.state == "not_compared" and not result.passed and "fp-0" in result.message
    # a new measurement passes, unless strict, or a variant vanished in a project with answer history
    assert evaluate_answer_gate(row("run-2"), None, None, None, strict=False, project_has_history=True).passed
    assert not evaluate_answer_gate(row("run-2"), None, None, None, strict=True, project_has_history=True).passed
    assert not evaluate_answer_gate(row("run-2"), None, None, None, strict=True).passed  # strict judges nothing new
    vanished = evaluate_answer_gate(row("run-2"), None, None, None, strict=False, project_has_history=True,
                                    vanished=["dense"])
    assert vanished.state == "not_compared" and not vanished.passed


def test_a_limited_run_of_a_measurement_with_a_history_fails():
    history = row("run-1", 0.9, 0.9)
    limited = evaluate_answer_gate(row("run-2", 0.0, 0.0, limited=True, eligible=False), None, None, None,
                                   strict=False, history=history)
    assert limited.state == "not_comparable" and not limited.passed
    alone = evaluate_answer_gate(row("run-2", 0.0, 0.0, limited=True, eligible=False), None, None, None, strict=False)
    assert alone.passed  # nothing measured it before: a smoke run


@pytest.mark.parametrize("overrides, match", [
    ({"run_id": "run-2"}, "its own yardstick"),
    ({"run_id": None}, "no run_id"),
    ({"eligible": False}, "not eligible"),
    ({"limited": True}, "not eligible"),
    ({"errored": 1}, "not eligible"),
    ({"pass_rate": math.nan}, "no valid pass_rate"),
    ({"mean_score": None}, "no valid mean_score"),
])
def test_an_ineligible_yardstick_is_refused_not_judged(overrides, match):
    previous = row(**{"run_id": "run-1", **overrides})
    with pytest.raises(ValueError, match=match):
        evaluate_answer_gate(row(), previous, None, TOL, strict=False)


@pytest.mark.parametrize("overrides, match", [
    ({"errored": None}, "errored"), ({"errored": True}, "errored"), ({"errored": -1}, "errored"),
    ({"pass_rate": 1.5}, "pass_rate"), ({"mean_score": float("inf")}, "mean_score"),
    ({"pass_rate": "0.8"}, "pass_rate"),
])
def test_invalid_current_rows_are_errors(overrides, match):
    with pytest.raises(ValueError, match=match):
        evaluate_answer_gate(row(**overrides), None, None, TOL, strict=False)


def test_a_run_that_cannot_be_compared_is_never_offered_its_own_acceptance():
    """A limited (or unknown-generator) run of a measurement recorded before fails closed; the
    accept command it names must not be this run's, which `accept` refuses (found by a review)."""
    result = evaluate_answer_gate(row(limited=True), None, None, TOL, strict=False, recorded="run-0")
    assert (result.passed, result.state) == (False, "not_compared")
    assert "accept RUN_ID" not in result.message and "<that run>" in result.message
