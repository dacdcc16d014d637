"""A grader that applies to no prompt (the static grader on a golden set without static checks)
records a row that measured nothing. It is never a yardstick, and it must not make the
(variant, grader) "recorded before, never eligible": the next identical run then failed its
answer gate as not compared, every run after the first, forever. A row that measured something
and was never eligible still fails closed."""

import pytest

from eval_pipeline.verdict.answers import judge_answer_run, record_answers
from tests.integration.answer_history_lock import fresh_default_history
from tests.orchestration.test_verdict_attacks_third import answer_frame

pytestmark = pytest.mark.integration


def _nothing_scored(variant):
    frame = answer_frame(variant, float("nan"), grader="static")
    frame[["n_scored", "mean_score"]] = [0, float("nan")]
    return frame


def test_a_grader_that_scored_nothing_does_not_fail_the_next_run(pg_uri):
    with fresh_default_history(pg_uri):
        first = judge_answer_run({"a": _nothing_scored("a")}, order=["a"], corpus_signature="corpus-1",
                                 tolerances={}, strict=False, connection_string=pg_uri, run_id="n0")
        assert first.gates["a"]["static"].passed
        record_answers(first, pg_uri, "n0", run_eligible=True)
        again = judge_answer_run({"a": _nothing_scored("a")}, order=["a"], corpus_signature="corpus-1",
                                 tolerances={}, strict=False, connection_string=pg_uri, run_id="n1")
        gate = again.gates["a"]["static"]
        assert gate.passed and gate.state != "not_compared", gate.message
        # a row that measured something in a failed run still fails closed later
        measured = judge_answer_run({"a": answer_frame("a", 0.9, grader="static")}, order=["a"],
                                    corpus_signature="corpus-1", tolerances={}, strict=False,
                                    connection_string=pg_uri, run_id="n2")
        record_answers(measured, pg_uri, "n2", run_eligible=False)
        later = judge_answer_run({"a": answer_frame("a", 0.5, grader="static")}, order=["a"],
                                 corpus_signature="corpus-1", tolerances={}, strict=False,
                                 connection_string=pg_uri, run_id="n3")
        gate = later.gates["a"]["static"]
        # not compared by any yardstick, and since a gate nothing comparable judged is compared with its
        # recorded rows, the drop from n2's 0.90 is shown: a measured failure
        assert (gate.state, gate.passed) == ("comparable", False), gate.message
        assert "vs recorded run n2: 0.9000 -> 0.5000" in gate.message and "FAILED (not compared)" in gate.message
