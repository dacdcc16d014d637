"""The ``accept_reference`` job logs the retrieval gate in force after its acceptance, in the words of the
command line's closing line: after the answers alone, that it stays as it was; after a whole acceptance, the
accepted run's settings. A user who accepts from the Launchpad reads in the run's log what judges the next run."""

from __future__ import annotations

import pytest

from tests.unit.verdict import test_answer_accept_attacks as previous_review
from tests.unit.verdict.test_answer_accept_attacks import LOOSE, _dropped

pytestmark = pytest.mark.integration

history = previous_review.history  # its fixture: each run judged and recorded as the assets do


@pytest.mark.parametrize("answers_only", [True, False])
def test_the_job_logs_the_gate_in_force(history, answers_only):
    from tests.unit.verdict import test_verdict_attacks_thirtyfifth as thirtyfifth

    _dropped(history, tolerances=LOOSE)  # r1 asks hit@1/mrr 0.5; judged at 0.05 until a run is accepted
    result = thirtyfifth._job(history.uri, run_id="r1", variants=["a"], answers_only=answers_only)
    assert result.success, result.text
    if answers_only:
        assert "the retrieval gate in force stays as it was (answers alone were accepted): " in result.text
        assert "hit@1 0.05" in result.text, result.text
    else:
        assert "the gate in force for the whole project from now on (the accepted run's settings" in result.text
        assert "hit@1 0.5" in result.text, result.text
