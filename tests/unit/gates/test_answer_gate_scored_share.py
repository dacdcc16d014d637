"""The answer gate compares the share of the prompts a grader scored with its yardsticks' (#23,
the sixth review's hole 3b): an answer a grader cannot judge is outside its pass rate and mean
score, so answers that stop saying anything the grader can check must fail the gate, for every
grader, not read as an improvement."""

from __future__ import annotations

import pytest

from eval_pipeline.gates.answers import evaluate_answer_gate

TOL = {"max_pass_rate_drop": 0.1, "max_mean_score_drop": 0.1}


def row(run_id="run-2", n_scored=20, pass_rate=0.8, mean_score=0.8, **overrides):
    return {"run_id": run_id, "variant": "bm25", "grader": "decision", "set_id": "team.support",
            "set_fingerprint": "fp-1", "corpus_signature": "corpus-1", "generator": "api.example.com:gen-1",
            "yardstick": "decision:api.example.com:grader-1:v1+abcd1234", "limited": False, "errored": 0,
            "eligible": True, "n_scored": n_scored, "pass_rate": pass_rate, "mean_score": mean_score, **overrides}


def test_a_grader_that_scores_fewer_prompts_fails_naming_both_counts_even_with_better_numbers():
    previous = row("run-1", n_scored=20, pass_rate=0.7, mean_score=0.7)
    gate = evaluate_answer_gate(row(n_scored=12, pass_rate=1.0, mean_score=1.0, n_prompts=20), previous, None, TOL,
                                strict=False)
    assert not gate.passed and gate.state == "comparable"
    assert "decision scored 12 of 20 answers, the previous run run-1 20 of 20" in gate.message
    assert gate.failures == []  # the metric rows themselves improved: the share is what fails


def test_the_reference_is_compared_too():
    reference, previous = row("run-1", n_scored=20), row("run-2", n_scored=17)
    gate = evaluate_answer_gate(row("run-3", n_scored=15, n_prompts=20), previous, reference, TOL, strict=True)
    assert not gate.passed
    assert "the reference run run-1 20 of 20" in gate.message and "previous run" not in gate.message


@pytest.mark.parametrize("n_scored, passed", [(18, True), (17, False), (20, True), (19, True)])
def test_a_drop_of_the_share_up_to_the_pass_rate_tolerance_passes(n_scored, passed):
    gate = evaluate_answer_gate(row(n_scored=n_scored, n_prompts=20), row("run-1", n_scored=20), None, TOL,
                                strict=True)
    assert gate.passed is passed, gate.message


def test_the_share_is_over_the_prompts_when_they_are_known_else_over_the_larger_count():
    # a grader applying to 20 of 40 prompts lost 4: 0.1 of the prompts (passes), 0.2 of what it scored
    previous = row("run-1", n_scored=20)
    assert evaluate_answer_gate(row(n_scored=16, n_prompts=40), previous, None, TOL, strict=True).passed
    unknown = evaluate_answer_gate(row(n_scored=16), previous, None, TOL, strict=True)
    assert not unknown.passed and "16 of 20 answers" in unknown.message


def test_a_grader_that_scores_more_prompts_passes():
    assert evaluate_answer_gate(row(n_scored=20, n_prompts=20), row("run-1", n_scored=10), None, TOL,
                                strict=True).passed


def test_a_tighter_tolerance_binds_the_share_too():
    tol = {**TOL, "max_pass_rate_drop": 0.0}
    gate = evaluate_answer_gate(row(n_scored=19, n_prompts=20), row("run-1", n_scored=20), None, tol, strict=True)
    assert not gate.passed and "tolerance 0" in gate.message


@pytest.mark.parametrize("yardstick, match", [
    ({"n_scored": None}, "no valid n_scored"), ({"n_scored": 0}, "no valid n_scored"),
    ({"n_scored": 2.5}, "no valid n_scored"),
])
def test_a_yardstick_without_a_scored_count_is_refused(yardstick, match):
    with pytest.raises(ValueError, match=match):
        evaluate_answer_gate(row(), row("run-1", **yardstick), None, TOL, strict=False)


@pytest.mark.parametrize("current, match", [
    ({"n_scored": None}, "current n_scored"), ({"n_scored": -1}, "current n_scored"),
    ({"n_prompts": 10}, "current n_prompts"), ({"n_prompts": "20"}, "current n_prompts"),
])
def test_a_compared_row_without_valid_counts_is_an_error(current, match):
    with pytest.raises(ValueError, match=match):
        evaluate_answer_gate(row(**current), row("run-1"), None, TOL, strict=False)
