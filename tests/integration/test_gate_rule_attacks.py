"""Attacks on the one gate rule (6ce8cf9, eval_pipeline/gates/rule.py) and the history of
measurements under it (3eb5cd5, 6dbbf0e, a795ceb), against the real embedded Postgres.

Each test is an input for which the verdict passes where the code before (263a154) failed
closed, one for which it passes a regression at 263a154 too (said so), or one for which a
gate's message misleads the user about why it failed or passed. The
answer verdict reads and writes the default ``eval_*`` history, so every test holds it fresh
under the shared lock (tests/integration/answer_history_lock.py).
"""

from __future__ import annotations

import json
import math

import pandas as pd
import pytest

from eval_pipeline.history.answers import accept_answer_run
from eval_pipeline.verdict.answers import judge_answer_run, record_answers
from eval_pipeline.verdict.retrieval import judge_run
from tests.integration.answer_history_lock import fresh_default_history

pytestmark = pytest.mark.integration

TOL = {"max_pass_rate_drop": 0.05, "max_mean_score_drop": 0.05}
JUDGE_YARDSTICK = "judge:api.example.com:judge-1:v1"


def answer_frame(variant: str, pass_rate: float, *, grader: str = "deterministic", yardstick: str | None = None,
                 scored: int = 20, grader_failed: int = 0) -> pd.DataFrame:
    """One answer_metrics row, as the answer_metrics asset gives it (20 prompts)."""
    return pd.DataFrame([{
        "variant": variant, "grader": grader, "set_id": "team.tiny", "set_name": "team.tiny", "set_fingerprint": "fp-1",
        "limited": False, "generator": "extractive:v1", "yardstick": yardstick or f"{grader}:v1", "n_prompts": 20,
        "n_errored": 0, "n_scored": scored, "pass_rate": pass_rate, "pass_rate_low": 0.0, "pass_rate_high": 1.0,
        "mean_score": pass_rate, "mean_low": 0.0, "mean_high": 1.0, "n_grader_failed": grader_failed,
        "corpus_signature": "corpus-1", "store_table": "t", "variant_config": json.dumps({"engine": "bm25"}),
        "treatment_json": json.dumps({"context_k": 5}), "metrics_json": json.dumps({})}])


def judge_answers(pg_uri: str, run_id: str, frames: dict[str, pd.DataFrame], *, strict: bool = False):
    return judge_answer_run(frames, order=list(frames), corpus_signature="corpus-1", tolerances=TOL, strict=strict,
                            connection_string=pg_uri, run_id=run_id)


# --- a pass where the code before failed closed ---------------------------------------------


def test_an_accepted_answer_yardstick_re_recorded_without_grades_does_not_make_the_next_run_new(pg_uri):
    """HOLE (fails open; a regression of 6dbbf0e). The judge grades of `a` were measured once
    (ans0, 0.9) and accepted; ans0 was then recorded again with its grading calls failed
    (nothing scored, 20 grader failures), the re-recording 6dbbf0e's own test
    (test_an_accepted_answer_row_re_recorded_without_metrics_is_not_a_yardstick) takes as
    possible: the row has no numbers and keeps its acceptance. The one
    eligibility rule (USABLE, 6dbbf0e) rightly refuses it as a yardstick, but the history lookup
    (``answer_history_of``) now uses the same rule, and ``answer_recorded_of`` skips a row that
    scored nothing: the measurement has neither a history nor a recorded run, the project has an
    accepted answer row, nothing vanished, so ``without_yardstick`` calls ans1 "a new
    measurement" and passes its pass rate of 0.1. At 263a154 the accepted row was the
    measurement's history (``eligible OR accepted``): ``not_compared``, failed until accepted; at
    6ce8cf9 the gate raised (no verdict). Either the history lookup should count an accepted row
    without numbers (it was a yardstick once), or ``answer_recorded_of`` a row whose grading
    failed."""
    with fresh_default_history(pg_uri):
        first = judge_answers(pg_uri, "ans0", {"a": answer_frame("a", 0.9, grader="judge", yardstick=JUDGE_YARDSTICK)})
        assert first.gates["a"]["judge"].passed, first.gates["a"]["judge"].message
        record_answers(first, pg_uri, "ans0", run_eligible=False)  # the run's retrieval gate failed
        assert accept_answer_run(pg_uri, "ans0")[0] == [("a", "judge")]  # its answers accepted deliberately
        retried = judge_answers(pg_uri, "ans0", {"a": answer_frame("a", math.nan, grader="judge",
                                                                   yardstick=JUDGE_YARDSTICK, scored=0,
                                                                   grader_failed=20)})
        assert not retried.gates["a"]["judge"].passed  # its grades failed: no verdict
        record_answers(retried, pg_uri, "ans0", run_eligible=False)  # the retried step records it again
        later = judge_answers(pg_uri, "ans1", {"a": answer_frame("a", 0.1, grader="judge",
                                                                 yardstick=JUDGE_YARDSTICK)})
        gate = later.gates["a"]["judge"]
        assert not gate.passed, f"{gate.state}: {gate.message}"
        assert gate.state == "not_compared" and "ans0" in gate.message, gate.message


def test_an_eligible_answer_run_re_recorded_without_grades_does_not_make_the_next_run_new(pg_uri):
    """HOLE (fails open; 263a154 had it too). The judge grades of `a` were measured in ans0
    (0.9), which passed and became the yardstick; ans0 was then recorded again with its grading
    calls failed: the row is re-recorded ineligible with nothing scored. The measurement
    now has no history (no eligible row) and no recorded run (``answer_recorded_of`` skips a row
    that scored nothing, meant for a grader that applies to no prompt, not for one whose every
    call failed), so ans1's pass rate of 0.1 is "a new measurement" in "the project's first
    answer run" and passes. A row with grader failures measured something: it should count as
    recorded, so the next run fails closed (``not_compared``) until one is accepted."""
    with fresh_default_history(pg_uri):
        first = judge_answers(pg_uri, "ans0", {"a": answer_frame("a", 0.9, grader="judge", yardstick=JUDGE_YARDSTICK)})
        record_answers(first, pg_uri, "ans0", run_eligible=True)
        retried = judge_answers(pg_uri, "ans0", {"a": answer_frame("a", math.nan, grader="judge",
                                                                   yardstick=JUDGE_YARDSTICK, scored=0,
                                                                   grader_failed=20)})
        record_answers(retried, pg_uri, "ans0", run_eligible=False)
        later = judge_answers(pg_uri, "ans1", {"a": answer_frame("a", 0.1, grader="judge",
                                                                 yardstick=JUDGE_YARDSTICK)})
        gate = later.gates["a"]["judge"]
        assert not gate.passed, f"{gate.state}: {gate.message}"


# --- messages that mislead --------------------------------------------------------------------


def _record_retrieval_run(pg_uri: str, run_id: str) -> None:
    """A passing retrieval run of `a` in the default history: the project has a history."""
    from tests.orchestration.test_verdict_attacks_fourth import TOL as RETRIEVAL_TOL
    from tests.orchestration.test_verdict_attacks_fourth import frame, provenance

    verdict = judge_run({"a": frame("a", 100)}, baseline="a", provenance=provenance({"a": "good"}),
                        tolerances=RETRIEVAL_TOL, strict=False, run_id=run_id, limited=False,
                        connection_string=pg_uri, sweep_keys=["a"])
    assert verdict.passed and verdict.eligible


def test_a_strict_first_answer_run_of_a_project_with_history_does_not_blame_an_empty_database(pg_uri):
    """MISLEADS. The project has a retrieval history (r0, eligible) and turns answers on under
    ``answers.gate.strict`` (r1). The answer gate fails, as it must (nothing judged the new
    measurement), but says "the project's first answer run (an empty history: a new state dir
    or database?)": the history is not empty, and the user is sent to check the database URL. The
    code before said "FAILED (strict): a new measurement is judged only once a run of it is
    accepted". ``project_has_history`` for answers is answer history only, so the rule's
    "project's first run" wording (right for retrieval's ``has_runs``) is wrong here."""
    with fresh_default_history(pg_uri):
        _record_retrieval_run(pg_uri, "r0")
        verdict = judge_answers(pg_uri, "r1", {"a": answer_frame("a", 0.9)}, strict=True)
        gate = verdict.gates["a"]["deterministic"]
        assert (gate.passed, gate.state) == (False, "not_compared"), gate.message
        assert "empty history" not in gate.message and "database" not in gate.message, gate.message
        assert "new measurement" in gate.message, gate.message


@pytest.mark.parametrize("strict", [False, True])
def test_a_new_grader_after_answer_runs_that_failed_is_not_the_projects_first_answer_run(pg_uri, strict):
    """MISLEADS. ans0 measured the deterministic grades of `a` and failed (not a yardstick); ans1
    adds the static grader. Its gate passes (not strict) or fails (strict) as before, but says
    it is "the project's first answer run" ("an empty history: a new state dir or database?"
    under strict), while ans0's answers are in the history: ``project_has_history`` is "any
    answer row eligible or accepted", not "any answer run". The code before said "a new
    measurement" (not strict) and "a new measurement is judged only once a run of it is
    accepted" (strict)."""
    with fresh_default_history(pg_uri):
        first = judge_answers(pg_uri, "ans0", {"a": answer_frame("a", 0.9)})
        record_answers(first, pg_uri, "ans0", run_eligible=False)
        graded = pd.concat([answer_frame("a", 0.9), answer_frame("a", 0.5, grader="static")], ignore_index=True)
        later = judge_answers(pg_uri, "ans1", {"a": graded}, strict=strict)
        gate = later.gates["a"]["static"]
        assert gate.passed is not strict, gate.message
        assert "first answer run" not in gate.message and "empty history" not in gate.message, gate.message
