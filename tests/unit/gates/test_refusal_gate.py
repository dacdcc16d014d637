"""The refusal rates are gated like the other metrics (issue #26): a drop of the correct-refusal
rate, or a rise of the false-refusal rate, by more than its tolerance fails."""

from __future__ import annotations

import pytest

from eval_pipeline.gates.retrieval import GATEABLE_METRICS, evaluate_gate, lower_is_better

TOL = {"correct_refusal_rate": 0.05, "false_refusal_rate": 0.05}


def test_the_refusal_rates_are_gateable_and_the_false_one_is_lower_is_better():
    assert "correct_refusal_rate" in GATEABLE_METRICS and "false_refusal_rate" in GATEABLE_METRICS
    assert lower_is_better("false_refusal_rate") and not lower_is_better("correct_refusal_rate")


def test_a_rise_in_false_refusals_fails_and_a_fall_passes():
    base = {"correct_refusal_rate": 0.50, "false_refusal_rate": 0.04}
    worse = evaluate_gate({"correct_refusal_rate": 0.50, "false_refusal_rate": 0.20}, base, TOL, "comparable",
                          strict=False)
    assert not worse.passed and [r["metric"] for r in worse.failures] == ["false_refusal_rate"]
    assert worse.failures[0]["delta"] == pytest.approx(-0.16)  # the change toward better
    better = evaluate_gate({"correct_refusal_rate": 0.50, "false_refusal_rate": 0.0}, base, TOL, "comparable",
                           strict=False)
    assert better.passed
    edge = evaluate_gate({"correct_refusal_rate": 0.45, "false_refusal_rate": 0.09}, base, TOL, "comparable",
                         strict=False)
    assert edge.passed  # both moved by exactly their tolerance
    dropped = evaluate_gate({"correct_refusal_rate": 0.40, "false_refusal_rate": 0.04}, base, TOL, "comparable",
                            strict=False)
    assert [r["metric"] for r in dropped.failures] == ["correct_refusal_rate"]
