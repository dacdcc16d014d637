"""The fourteenth review of the verdict, aimed at 5f6eaca only: ``measurements.accept`` stamps
each acceptance ``GREATEST(clock_timestamp(), max earlier accepted_at of its variant name and
aspect + 1 us)`` (history/measurements.py:521-530), and the anchor's ``acceptance_conflict``
makes the variant not compared (verdict/retrieval.py:447, history/runs.py:686). Runs judged
with the eighth review's ``judge``/``answers`` fixtures against the session Postgres (marked
``integration``); a clock that ran ahead is simulated as the twelfth review does (``_ahead``:
the acceptance's stamp, measurement and log, moved a day ahead).

Attacked: whether a stamp pushed into the future (every acceptance made while an earlier one,
stamped by a clock that ran ahead, is still in the future) lets a regression pass, through the
previous run chosen by time (``_ORDERS["latest"]``: GREATEST(created_at, accepted_at)),
``moved_reference``'s "accepted since" (``accepted_at > created_at``), the answer side, a
rename, and the anchor's conflict on a legitimate history.

Holes (strict xfails, each confirmed by running it; both closed since, now plain tests, by one
sequence across measurements and acceptances: every acceptance takes its position from the
sequence that numbers the measurements, "the previous run" and "accepted since" are decided by
position, and ``accept`` stamps the plain time again, which no rule orders by; see
tests/unit/verdict/test_acceptance_positions.py):

1. a pushed stamp hides a deleted acceptance (FAILS OPEN): measurements.py:521-530 stamps r1
   a day ahead because r0 (an earlier acceptance of v) was stamped ahead, so r1 stays "the latest
   by time" for a day: ``_ORDERS["latest"]`` (measurements.py:391) picks r1 as the previous run of
   any benchmark though r3 was recorded eligible after it, and ``moved_reference``
   (history/runs.py:727, ``accepted_at > created_at``) calls r1 "accepted since" every run
   recorded before the clock catches up. r0 (0.90) accepted ahead, r1 (0.90) accepted, r2 (1.00)
   accepted, r3 (0.97) passes against r2; r2 deleted (the eighth review's attack): r4's 0.94
   passes against r1 (the control without the clock step fails, eighth review). Specific to
   5f6eaca in the variant where the old run r0 is deleted too (a history purged of its oldest
   run): before it, r1 was stamped at the time it was accepted, r3 was the previous run and
   ``moved_reference`` caught the move; now the future is inherited by every later acceptance.
   The variant with r0 kept fails open before 5f6eaca as well (r0 itself is then the previous run
   by time). Fix: never trust a timestamp for "since": ``moved_reference`` should compare the
   reference's acceptance log position (references.seq) with the previous run's first
   measurement seq (as ``_since_acceptance`` does), and ``_ORDERS["latest"]`` order by position
   (the later of the measurement's seq and its latest log entry's position in one sequence), not
   by a clock; or at least refuse an ``accepted_at`` later than ``clock_timestamp()`` as
   "accepted since".
2. the same on the answer side (FAILS OPEN): ``accept_answer_run`` -> ``measurements.accept``
   pushes a1's stamp; the answer row recorded later is not the previous row by time, and
   ``moved_reference`` (runs.py:727) from verdict/answers.py:192 calls the older reference
   "accepted since". Same fix. Specific to 5f6eaca (z0, the row stamped ahead, deleted too).

Left open at first (the lead, after the review), then closed by the one sequence: the minimum
fix, an ``accepted_at`` in the future never "since" in ``moved_reference``, was tried and
reverted: every acceptance after one stamped ahead is pushed into the future, so every run after
it, in a history with no deletion, became not compared until the clock caught up
(``_pushed_history``'s r2 failed). Both holes need a clock that ran ahead *and* runs or
acceptances deleted by hand; closing them needs one sequence across measurements and acceptances
(a schema change with a migration of the existing acceptances), which is also what the eleventh
review's hole 6 needs.

Checked against 5f6eaca^ (a frozen worktree, this file copied in): the purged retrieval variant
of hole 1 and hole 2 pass there (held before 5f6eaca: regressions of the commit); the r0-kept
variant of hole 1 fails there too (previous run r0 by its own stamp), so it predates 5f6eaca,
which moves the "latest by time" from r0 to r1 but keeps the timestamp as the judge of "since".

Held (plain tests): a clock-ahead history with no deletion: the later acceptance is the
reference and the previous run, a slide 1.00 -> 0.97 -> 0.94 fails at 0.94; the anchor's
conflict never arises in a legitimate history (acceptances on two benchmarks, one stamped
ahead, all logged): the slide on the new benchmark is judged, no "no entry in the acceptance
log"; a rename (w -> w2, same configuration) after w's acceptance stamped ahead: w2 accepted
(stamped now, the max is per name) is w2's reference and a later 0.94 fails against it. By
reading: ``_since_acceptance`` and ``answer_tolerance_floor`` (history/answers.py:479-560) and
``project_history``/``_pinned_gate`` (runs.py) order acceptances by the log's seq, never by a
stamp, so a pushed stamp cannot move their windows; retrieval and answers are separate aspects
(the max is per aspect), so an answer stamp ahead does not push retrieval; a rename's lookups
mix names only while the new name has no yardstick of its own (``heirs``, retrieval.py:404-409;
answers: ``answer_history_of`` None), so the per-name max is never compared with another name's
stamp in ``_latest_acceptance``.

Not reached: ties of a pushed stamp with a measurement's created_at; a clock set back by more
than the skew between two acceptances within one ``accept`` transaction; the Dagster accept job.
"""

from __future__ import annotations

import pytest

from tests.unit.verdict import test_verdict_attacks_eighth as eighth
from tests.unit.verdict import test_verdict_attacks_twelfth as twelfth
from tests.unit.verdict.test_verdict_attacks_eighth import _delete_run, _why

judge, answers = eighth.judge, eighth.answers  # the eighth review's fixtures: runs judged against the session Postgres
_ahead, _answers, _answer_frame = twelfth._ahead, twelfth._answers, twelfth._answer_frame

CONFLICT = "no entry in the acceptance log"


def _accept(judge, run_id, **kw):
    from eval_pipeline.history.runs import accept_reference

    return accept_reference(judge.uri, run_id, prefix=judge.prefix, **kw)


def _pushed_history(judge):
    """r0 (0.90) accepted by a clock a day ahead (logged), r1 (0.90) and r2 (1.00) accepted since
    (pushed after r0's stamp, logged), r3 (0.97) passes against r2."""
    judge("r0", "A", {"v": "good"}, hits={"v": 90})
    _accept(judge, "r0")
    _ahead(judge, "r0")
    eighth.two_acceptances(judge)
    r3 = judge("r3", "A", {"v": "good"}, hits={"v": 97})
    assert r3.gates["v"].passed and r3.reference["v"]["run_id"] == "r2", _why(r3)


# --------------------------------------------------------------------------------------------
# 1. the retrieval gate: a pushed stamp and "accepted since"
# --------------------------------------------------------------------------------------------


@pytest.mark.integration
def test_a_pushed_stamp_does_not_hide_a_deleted_acceptance_when_the_ahead_run_is_purged(judge):
    """r0 accepted ahead, r1 and r2 accepted (pushed), r3 0.97; r0 and r2 deleted: r4's 0.94 is
    -0.06 from r2, which r3 was judged against, and must not pass against r1 (0.90)."""
    _pushed_history(judge)
    _delete_run(judge, "r0")
    _delete_run(judge, "r2")
    step = judge("r4", "A", {"v": "good"}, hits={"v": 94})
    assert not step.gates["v"].passed, (step.previous["v"]["run_id"], _why(step))


@pytest.mark.integration
def test_a_pushed_stamp_does_not_hide_a_deleted_acceptance(judge):
    """As above, r0 kept."""
    _pushed_history(judge)
    _delete_run(judge, "r2")
    step = judge("r4", "A", {"v": "good"}, hits={"v": 94})
    assert not step.gates["v"].passed, (step.previous["v"]["run_id"], _why(step))


@pytest.mark.integration
def test_the_control_without_the_clock_step_catches_the_deletion(judge):
    """Held (the control): no stamp ahead, r2 deleted: r4 fails (the reference moved)."""
    judge("r0", "A", {"v": "good"}, hits={"v": 90})
    _accept(judge, "r0")
    eighth.two_acceptances(judge)
    assert judge("r3", "A", {"v": "good"}, hits={"v": 97}).gates["v"].passed
    _delete_run(judge, "r0")
    _delete_run(judge, "r2")
    step = judge("r4", "A", {"v": "good"}, hits={"v": 94})
    assert not step.gates["v"].passed, _why(step)


@pytest.mark.integration
def test_a_clock_ahead_history_without_deletion_catches_the_slide(judge):
    """Held: r0 ahead, r1 and r2 accepted (pushed): r2 is the reference and the previous run; the
    slide 1.00 -> 0.97 -> 0.94 fails at 0.94 (a measured failure, never 'accepted since')."""
    _pushed_history(judge)
    step = judge("r4", "A", {"v": "good"}, hits={"v": 94})
    assert step.reference["v"]["run_id"] == "r2" and not step.gates["v"].passed, _why(step)
    assert step.gates["v"].state in ("comparable", "paired"), _why(step)


# --------------------------------------------------------------------------------------------
# 2. the anchor's conflict on a legitimate history
# --------------------------------------------------------------------------------------------


@pytest.mark.integration
def test_the_anchor_has_no_conflict_in_a_legitimate_clock_ahead_history(judge):
    """Held: r1 on A accepted ahead; r2 (0.90) and r3 (1.00) on B accepted (pushed, logged); r1
    accepted again (pushed after them): the reference is r1 (paired), the B anchor is r3; the
    slide 0.97 -> 0.94 -> 0.91 on B is judged (no conflict) and fails."""
    def stale(hits):
        return lambda variant, reference: eighth._frame(variant, hits)

    judge("r1", "A", {"v": "good"})
    _accept(judge, "r1")
    _ahead(judge, "r1")
    judge("r2", "B", {"v": "good"}, hits={"v": 90})
    judge("r3", "B", {"v": "good"}, hits={"v": 100})
    for run_id in ("r2", "r3", "r1"):
        _accept(judge, run_id, variants=["v"])
    steps = [judge(run_id, "B", {"v": "good"}, hits={"v": hits}, rank_reference=stale(hits))
             for run_id, hits in (("r5", 97), ("r6", 94), ("r7", 91))]
    seen = [(s.gates["v"].state, _why(s)) for s in steps]
    assert all(CONFLICT not in s.gates["v"].message for s in steps), seen
    assert not all(s.gates["v"].passed for s in steps), seen
    assert any(not s.gates["v"].passed and s.gates["v"].state in ("comparable", "paired") for s in steps), seen


# --------------------------------------------------------------------------------------------
# 3. a rename: the max is per name
# --------------------------------------------------------------------------------------------


@pytest.mark.integration
def test_a_rename_after_an_acceptance_stamped_ahead_keeps_the_new_names_acceptance(judge):
    """Held: w (0.90) accepted ahead in r1; r2 renames w -> w2 (same configuration, 1.00); w2
    accepted in r2 (stamped now: the max is per name, so before w's stamp); r3 0.97 passes,
    r4 0.94 fails against w2's reference r2 (w's stamp ahead does not outrank it)."""
    judge("r1", "A", {"w": "good"}, hits={"w": 90})
    _accept(judge, "r1")
    _ahead(judge, "r1")
    r2 = judge("r2", "A", {"w2": "good"})
    assert r2.gates["w2"].passed, _why(r2, "w2")
    _accept(judge, "r2", variants=["w2"])
    r3 = judge("r3", "A", {"w2": "good"}, hits={"w2": 97})
    r4 = judge("r4", "A", {"w2": "good"}, hits={"w2": 94})
    assert r4.reference["w2"]["run_id"] == "r2" and not r4.gates["w2"].passed, (_why(r3, "w2"), _why(r4, "w2"))
    assert CONFLICT not in r4.gates["w2"].message, _why(r4, "w2")


# --------------------------------------------------------------------------------------------
# 4. the answer gate: a pushed stamp and "accepted since"
# --------------------------------------------------------------------------------------------


@pytest.mark.integration
def test_a_pushed_answer_stamp_does_not_hide_a_deleted_acceptance(answers):
    """The eighth review's answer deletion attack after a clock step: z0 (0.80) accepted a day
    ahead, a0 (0.80) and a1 (0.90) accepted since (pushed after z0's stamp), a2 0.85 passes; z0
    and a1 deleted: a3's 0.78 (-0.07 from a2, -0.12 from a1) must not pass against a0."""
    from eval_pipeline.history.answers import accept_answer_run

    assert answers("z0", {"bm25": 0.80}).passed
    assert accept_answer_run(answers.uri, "z0")[0] == [("bm25", "deterministic")]
    _ahead(answers, "z0")
    assert answers("a0", {"bm25": 0.80}).passed
    assert accept_answer_run(answers.uri, "a0")[0] == [("bm25", "deterministic")]
    assert answers("a1", {"bm25": 0.90}).passed
    assert accept_answer_run(answers.uri, "a1")[0] == [("bm25", "deterministic")]
    assert answers("a2", {"bm25": 0.85}).passed
    answers.sql("DELETE FROM eval_measurements WHERE run_id = ANY(%s)", ["z0", "a1"])
    gate = eighth._answer_gate(answers("a3", {"bm25": 0.78}))
    assert not gate.passed, gate.message
