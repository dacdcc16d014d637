"""The fifteenth review of the verdict, aimed at 87cb394 first: every acceptance takes its
position (``accepted_position``, the log's ``position``) from the sequence that numbers the
measurements; ``_ORDERS`` (history/measurements.py:439-444: "latest", "logged", "unlogged") and
``moved_reference``'s "accepted since" (history/runs.py:738) read positions; a history from before
positions is placed once by time (``_place_acceptances``, measurements.py:254-281). Runs judged with
the eighth review's ``judge``/``answers`` fixtures against the session Postgres (marked
``integration``); nothing here needs Dagster. "Recorded by the previous version" is simulated by
dropping both position columns (``_as_before_positions``; IF EXISTS, so this file also runs on
older code), an older install's answer acceptance by stamping ``accepted_at`` alone.

Attacked: the backfill (clock-ahead legacy stamps, ties between a logged entry and a stamp, the
log kept monotone), an older install accepting after the upgrade (a stamp without a position, or
over a stale one), an acceptance that can have no log entry (an answer run without a run row),
the latest log entry of a run deleted while an older one stays, positions drawn in one order and
committed in another. Each hole was also run at 87cb394^ (a frozen worktree, this file copied in)
to tell regressions from holes the commit left.

Holes (strict xfails, each confirmed by running it, and with --runxfail; 1, 1b, 2, 3, 4 and 4b
closed since by the lead, now plain tests: the placement of a history from before positions is
bounded by a running minimum from the log's end, log entries in (after, after + 0.5) and a stamp
with no entry at after + 0.75; an acceptance on the row later than its latest log entry is
missing from the log; a trigger on the measurements draws a position for every UPDATE that sets
``accepted_at`` without one, so an older install places its acceptances too. 5 is left: the
product records answers only with their run's row; the conflict message no longer speaks of a
clock):

1. a legacy acceptance stamped ahead is placed after every run recorded before its stamp (FAILS
   OPEN): measurements.py:267-275 places each log entry "after the last measurement recorded by
   then", by its stamp. r1 (0.90) accepted with the clock a day ahead, r2 (1.00) accepted, r3
   (0.97) judged against r2, all by the previous version; upgraded: r1's entry lands after r3;
   r2 deleted: r1 is the reference and, by that position, the previous run too ("the previous
   run is also the pinned reference"), and r4's 0.94 passes. The eleventh review's hole 6, which
   87cb394 closes for histories recorded with positions, stays open for every history recorded
   before them (it also fails at 87cb394^; the control with a right clock is not compared).
   Fix: place conservatively, never after a later log entry's placement (``min(after) OVER
   (ORDER BY seq DESC)``, a running minimum from the log's end, instead of the running maximum
   from its start): a clock that ran ahead makes a stamp too late, never too early, and a stamp
   placed too early only makes a later run "not accepted since", which fails closed.

   b. the blast radius: the running maximum (measurements.py:271) runs over the whole log, every
      variant and aspect, so one acceptance of *another* variant (w) stamped ahead pushes every
      later acceptance of v after r3 as well, though v's stamps were right: the same deletion,
      the same pass (held at 87cb394^, where w's stamp ordered nothing of v's: a regression for
      histories upgraded by 87cb394). Same fix; at least partition the window by (variant, aspect).

2. a legacy acceptance missing from the log ties with the logged one it followed (FAILS OPEN,
   a regression: held at 87cb394^): measurements.py:278 places a stamp with no log entry at
   ``after + 0.5``, and one log entry after the same measurement is placed at ``after + 1/2``
   (``k / (n + 1)``): the same position, and ``_UNLOGGED_AFTER`` (measurements.py:436) asks for
   ``>``. r1 and r2 recorded, r1 accepted, r2 accepted and its log entry deleted (stamp kept),
   by the previous version (which failed this as not compared, as the README says): r1 (0.90)
   is the reference with no conflict, and 1.00 -> 0.97 -> 0.94 passes. The docstring says "a
   stamp with no log entry after them"; the code does not do it. Fix: ``after + (n + 1) / (n +
   2)`` for stamps (or place them after every entry with the same ``after``), or ``>=`` there.

3. the latest acceptance's log entry deleted when the same run keeps an older one (FAILS OPEN,
   not new: fails at 87cb394^ too): "unlogged" (measurements.py:442) needs no log entry at all
   (``LOGGED_POSITION IS NULL``), so a run accepted, then another, then the first again, with that
   last entry deleted, is "logged" at its first position: r1 (1.00) accepted, r2 (0.90, a measured
   drop) accepted by name, r1 accepted again, that entry deleted: r2 is the reference with no
   conflict, r1 (by its kept position) the previous run, r2 "accepted since" r1's seq, and 0.96,
   then 0.92 (-0.08 from the bar in force) pass. Fix, which positions make possible: a
   measurement whose own ``accepted_position`` is after its ``LOGGED_POSITION`` is an acceptance
   missing from the log (a conflict candidate like an unlogged one).

4. an older install's re-acceptance of an answer row without a run row keeps the row's earlier
   position (FAILS OPEN, a regression: held at 87cb394^): the previous version's ``accept``
   stamps ``accepted_at`` only (its log insert joins the run row: nothing is logged), so
   ``ACCEPTED_POSITION`` (measurements.py:416) still reads the row's first acceptance. a0 (0.90)
   accepted, a1 (0.82) accepted, a0 accepted again by an older install: a1 stays the reference and
   the previous run, and a2's 0.75 (-0.15 from a0) passes.

   b. the same with a row never accepted before (FAILS OPEN, a regression): its position is NULL,
      and "unlogged" orders ``ACCEPTED_POSITION DESC NULLS LAST`` (measurements.py:443): any
      acceptance with a position outranks it, whatever its stamp. a0 (0.80) accepted, a1 (0.90)
      accepted by an older install: a0 stays the reference, a2 0.85 passes against a1 (the previous
      run by its seq), and a3's 0.78 (-0.12 from a1) passes against a2 and a0. The commit message
      says a positionless acceptance is placed by its stamp; only ``_UNLOGGED_AFTER`` does so.
   Fix (both): a BEFORE UPDATE trigger on the measurements that draws ``accepted_position`` from
   the sequence whenever ``accepted_at`` changes and ``accepted_position`` does not (as the log's
   column default already does for an older install's log entry); or treat a stamp whose
   position is unknown or older than the stamp's acceptance as a conflict (not compared).

5. an acceptance that can have no log entry is a conflict that accepting it again cannot end
   (fails closed, but stuck; not new: fails at 87cb394^ too): a0 (with a run row: logged), then
   a1 (no run row: ``accept`` writes no log entry, measurements.py ``JOIN {runs}``) accepted: a2
   is not compared, and the message offers "accept a0 ... or accept a1 --variant bm25"; a1
   accepted again is still unlogged and still after a0, so every later run stays not compared
   until a0 (the bar the user replaced) or a run with a run row is accepted. The message still
   says "accepted after run a0 by its stamp ... (the entry deleted, or a clock that ran ahead)"
   (history/runs.py:701), which positions made untrue. Fix: offer only what works (or log an
   acceptance without a run row: the log's foreign key to ``{runs}`` is what forbids it).

What held (plain tests): the control of hole 1 (a legacy history with a right clock, r2 deleted
after the upgrade: not compared); an acceptance that cannot be logged, after a logged one, is a
conflict (not compared, never judged against either bar alone); positions drawn in one order and
committed in another (r2's acceptance drawn before r3's seq, r3 judged against r1): r4 is not
compared (a spurious stop, never a pass), and accepting r2 again ends it (a 0.94 then fails
measured). By reading: ``accept`` draws the measurement's and the log entry's position in one
UPDATE/INSERT pair (the same value); the log's column default (nextval of the measurements'
sequence) places an older install's log entry, and its stale ``accepted_position`` on the row is
outweighed by ``GREATEST``; ``moved_reference`` never takes a NULL position or NULL seq as
"since" (fails closed); placement runs under ``create_tables``' advisory lock, once (the second
caller finds the column); ``accept_reference``/``accept_answer_run`` reach ``history_exists`` (and
so the placement) before ``accept`` writes a position; ``_since_acceptance`` and
``project_history`` order the log by its seq, which the placement keeps monotone, so the windows
and the reference agree (except for two accepts racing: the log's seq and the positions are
drawn in different statements, so they may disagree; not tested); a retried step re-recording a
measurement keeps its seq and acceptance (``write``'s ON CONFLICT), so positions do not move.

Not reached: ``before_run_id``'s cutoff bounds measurements but not acceptance positions (an
acceptance made after the run being re-judged counts; only a re-judged recorded run has a
cutoff: read, not tested); a rename's heirs and lineage with legacy placement; the anchor under
a legacy placement; the CLI ``accept``/``accept latest`` end to end; the oldest shape's
``_upgrade`` (``{prefix}_answer_runs`` accepted rows without ``accepted_at``, placed at their
recording time: too early, so closed).
"""

from __future__ import annotations

import pytest

from tests.unit.verdict import test_verdict_attacks_eighth as eighth
from tests.unit.verdict import test_verdict_attacks_twelfth as twelfth
from tests.unit.verdict.test_verdict_attacks_eighth import _delete_run, _why

pytestmark = pytest.mark.integration
judge, answers = eighth.judge, eighth.answers  # the eighth review's fixtures: runs judged against the session Postgres
_answers, _answer_frame, _retrieval_row = twelfth._answers, twelfth._answer_frame, twelfth._retrieval_row

CONFLICT = "no entry in the acceptance log"


def _accept(judge, run_id, **kw):
    from eval_pipeline.history.runs import accept_reference

    return accept_reference(judge.uri, run_id, prefix=judge.prefix, **kw)


def _as_before_positions(judge) -> None:
    """The history as the previous version left it (no positions), then read once by this one
    (``history_exists`` places every acceptance by time)."""
    from eval_pipeline.history.runs import reference_run

    judge.sql("ALTER TABLE {measurements} DROP COLUMN IF EXISTS accepted_position")  # IF EXISTS: runs on older code
    judge.sql("ALTER TABLE {references} DROP COLUMN IF EXISTS position")
    reference_run(judge.uri, variant="v", identity=None, prefix=judge.prefix)


def _legacy_clock_ahead(judge, *, ahead: bool) -> None:
    """Recorded by the previous version: r1 (0.90) accepted while the clock ran a day ahead (when
    ``ahead``), r2 (1.00) accepted after it was set right, r3 (0.97) judged against r2; then
    upgraded."""
    eighth.two_acceptances(judge)
    if ahead:
        eighth.stamp_ahead(judge, "r1")
    r3 = judge("r3", "A", {"v": "good"}, hits={"v": 97})
    assert r3.gates["v"].passed and r3.reference["v"]["run_id"] == "r2", _why(r3)
    _as_before_positions(judge)


# --------------------------------------------------------------------------------------------
# 1. the backfill: a legacy stamp that ran ahead is placed after the runs recorded since
# --------------------------------------------------------------------------------------------


def test_a_legacy_stamp_ahead_is_not_accepted_since_the_runs_recorded_after_it(judge):
    """The eleventh review's hole 6 in a history recorded before positions: r2 deleted after the
    upgrade, r1 is the reference and, placed after r3 by its stamp, the previous run too; r4's
    0.94 (-0.06 from r2, which r3 was judged against) must not pass against r1's 0.90."""
    _legacy_clock_ahead(judge, ahead=True)
    _delete_run(judge, "r2")
    r4 = judge("r4", "A", {"v": "good"}, hits={"v": 94})
    assert not r4.gates["v"].passed, (r4.previous["v"]["run_id"], _why(r4))


def test_the_control_a_legacy_history_with_a_right_clock_catches_the_deletion(judge):
    """Held (the control): the same history, no clock step: r4 is not compared."""
    _legacy_clock_ahead(judge, ahead=False)
    _delete_run(judge, "r2")
    r4 = judge("r4", "A", {"v": "good"}, hits={"v": 94})
    assert not r4.gates["v"].passed and r4.gates["v"].state == "not_compared", _why(r4)


def test_a_legacy_stamp_ahead_of_another_variant_does_not_push_this_variants_acceptances(judge):
    """Hole 1's blast radius: the placement keeps the whole log monotone (``max(after) OVER (ORDER
    BY seq)``, every variant and aspect), so w's acceptance stamped a day ahead in r0 places every
    later acceptance of v after r3 too (v's own stamps were right). r2 deleted: r1 (0.90) is v's
    reference and previous run, and r4's 0.94 (-0.06 from r2) passes."""
    judge("r0", "A", {"v": "good", "w": "good"}, hits={"v": 90})
    _accept(judge, "r0", variants=["w"])
    eighth.stamp_ahead(judge, "r0", "w")
    assert judge("r1", "A", {"v": "good", "w": "good"}, hits={"v": 90}).gates["v"].passed
    _accept(judge, "r1", variants=["v"])
    assert judge("r2", "A", {"v": "good", "w": "good"}).gates["v"].passed
    _accept(judge, "r2", variants=["v"])
    r3 = judge("r3", "A", {"v": "good", "w": "good"}, hits={"v": 97})
    assert r3.gates["v"].passed and r3.reference["v"]["run_id"] == "r2", _why(r3)
    _as_before_positions(judge)
    _delete_run(judge, "r2")
    r4 = judge("r4", "A", {"v": "good", "w": "good"}, hits={"v": 94})
    assert not r4.gates["v"].passed, (r4.previous["v"]["run_id"], _why(r4))


def test_a_legacy_acceptance_missing_from_the_log_after_the_logged_one_is_a_conflict(judge):
    """Recorded by the previous version: r1 (0.90) and r2 (1.00) recorded, r1 accepted, then r2
    accepted and its log entry deleted by hand (its stamp kept): an acceptance made after the
    logged one and missing from the log, which the previous version (and the README) fail as not
    compared. Placed by time, both come after r2's measurement: the log entry at r2 + 1/2 (one
    entry there), the stamp at r2 + 0.5, the same position, and ``>`` finds no conflict: r1 (0.90)
    is the reference and 1.00 -> 0.97 -> 0.94 passes."""
    judge("r1", "A", {"v": "good"}, hits={"v": 90})
    assert judge("r2", "A", {"v": "good"}).gates["v"].passed
    _accept(judge, "r1")
    _accept(judge, "r2")
    judge.sql("DELETE FROM {references} WHERE run_id = %s", "r2")
    _as_before_positions(judge)
    steps = [judge(run_id, "A", {"v": "good"}, hits={"v": hits}) for run_id, hits in (("r3", 97), ("r4", 94))]
    assert not all(s.gates["v"].passed for s in steps), [_why(s) for s in steps]
    assert CONFLICT in steps[0].gates["v"].message, _why(steps[0])


# --------------------------------------------------------------------------------------------
# 1b. the latest acceptance's log entry deleted when the same run has an older one
# --------------------------------------------------------------------------------------------


def test_a_restored_reference_whose_latest_log_entry_was_deleted_is_a_conflict(judge):
    """r1 (1.00) accepted, r2 (0.90, a measured drop) accepted by name (the bar lowered), r1
    accepted again (the bar restored); that last log entry deleted by hand, r1's stamp and
    position kept. The README: an acceptance made after the logged one but missing from the log
    fails as not compared. But r1 still has its first entry, so it is "logged" (at its first
    position), never "unlogged": r2 is the reference with no conflict; r1 is the previous run (by
    its kept position), r2 "accepted since" r1's seq, so nothing moved; r4 0.96 passes against
    both, and r5 0.92 (-0.08 from the bar in force) passes against r4 and r2."""
    restore_then_delete_its_entry(judge)
    assert_the_slide_is_caught(judge)


def restore_then_delete_its_entry(judge) -> None:
    """r1 (1.00) accepted, r2 (0.90, a measured drop) accepted by name, r1 accepted again; that
    last log entry deleted by hand."""
    judge("r1", "A", {"v": "good"})
    _accept(judge, "r1")
    assert not judge("r2", "A", {"v": "good"}, hits={"v": 90}).gates["v"].passed
    _accept(judge, "r2", variants=["v"])
    _accept(judge, "r1")
    judge.sql("DELETE FROM {references} WHERE seq = (SELECT max(seq) FROM {references})")


def assert_the_slide_is_caught(judge) -> None:
    """r4 0.96, then r5 0.92 (-0.08 from the bar in force, r1's 1.00): not both passed."""
    steps = [judge(run_id, "A", {"v": "good"}, hits={"v": hits}) for run_id, hits in (("r4", 96), ("r5", 92))]
    assert not all(s.gates["v"].passed for s in steps), [_why(s) for s in steps]


# --------------------------------------------------------------------------------------------
# 2. an older install accepting an answer row that has no run row (no log entry): its stamp
# --------------------------------------------------------------------------------------------


def _older_install_accepts(answers, run_id: str) -> None:
    """What the previous version's ``accept`` does to an answer row whose run has no run row:
    stamps ``accepted_at`` (it knows no ``accepted_position``); its log insert joins the run row,
    so nothing is logged."""
    answers.sql("UPDATE eval_measurements SET accepted_at = clock_timestamp() WHERE run_id = %s", run_id)


def test_an_older_installs_re_acceptance_of_an_answer_row_is_the_reference(answers):
    """a0 (0.90) accepted, a1 (0.82, -0.08) accepted (the bar lowered on purpose), then a0
    accepted again by a process still on the previous version (the bar raised back): the row's
    stamp is the latest, its position still its first acceptance's, so a1 stays the reference and
    the previous run, and a2's 0.75 (-0.15 from the bar in force) passes."""
    from eval_pipeline.history.answers import accept_answer_run

    assert answers("a0", {"bm25": 0.90}).passed
    assert accept_answer_run(answers.uri, "a0")[0]
    assert answers("a1", {"bm25": 0.82}).passed
    assert accept_answer_run(answers.uri, "a1")[0]
    _older_install_accepts(answers, "a0")
    verdict = answers("a2", {"bm25": 0.75})
    gate = eighth._answer_gate(verdict)
    assert not gate.passed, gate.message


def test_an_older_installs_acceptance_of_an_answer_row_outranks_an_earlier_one(answers):
    """a0 (0.80) accepted by this version, a1 (0.90) accepted by an older install (a stamp, no
    position): the unlogged order puts a position before any stamp (``NULLS LAST``), so a0 stays
    the reference; a2 0.85 passes against a1, and a3's 0.78 (-0.12 from a1, the bar in force)
    passes against a2 and a0."""
    from eval_pipeline.history.answers import accept_answer_run

    assert answers("a0", {"bm25": 0.80}).passed
    assert accept_answer_run(answers.uri, "a0")[0]
    assert answers("a1", {"bm25": 0.90}).passed
    _older_install_accepts(answers, "a1")
    assert eighth._answer_gate(answers("a2", {"bm25": 0.85})).passed
    gate = eighth._answer_gate(answers("a3", {"bm25": 0.78}))
    assert not gate.passed, gate.message


# --------------------------------------------------------------------------------------------
# 3. an acceptance that can have no log entry (an answer run without a run row)
# --------------------------------------------------------------------------------------------


def _logged_then_unloggable(answers):
    """a0 (0.90, with a run row: its acceptance logged) accepted, a1 (0.82, no run row: its
    acceptance cannot be logged) accepted after it: a2's (0.82) gate."""
    from eval_pipeline.history.answers import accept_answer_run

    _retrieval_row(answers, "a0")
    assert answers("a0", {"bm25": 0.90}).passed
    assert accept_answer_run(answers.uri, "a0")[0]
    assert answers("a1", {"bm25": 0.82}).passed
    assert accept_answer_run(answers.uri, "a1")[0]
    return eighth._answer_gate(answers("a2", {"bm25": 0.82}))


def test_an_unloggable_answer_acceptance_after_a_logged_one_is_a_conflict(answers):
    """Held: a0 (0.90, with a run row: its acceptance logged), a1 (0.82, no run row: its
    acceptance cannot be logged) accepted after it: a2 is not compared (which bar is in force
    cannot be told), never judged against a0 or a1 alone."""
    gate = _logged_then_unloggable(answers)
    assert not gate.passed and gate.state == "not_compared" and CONFLICT in gate.message, gate.message


@pytest.mark.xfail(strict=True, raises=AssertionError,
                   reason="hole (closed, stuck): accepting the unloggable run again, as the message offers, "
                          "cannot clear the conflict")
def test_accepting_the_unloggable_answer_run_again_ends_the_conflict(answers):
    """As above; the message offers "accept a1 --variant bm25": a1 accepted again is still
    unlogged (no run row) and still after the logged a0, so every later run is not compared
    until a0 (the bar the user replaced) or a run with a run row is accepted. a3 equal to a1
    must be compared."""
    from eval_pipeline.history.answers import accept_answer_run

    gate = _logged_then_unloggable(answers)
    assert "accept a1 --variant bm25" in gate.message, gate.message
    assert accept_answer_run(answers.uri, "a1", variants=["bm25"])[0]
    gate = eighth._answer_gate(answers("a3", {"bm25": 0.82}))
    assert gate.state != "not_compared" and gate.passed, gate.message


# --------------------------------------------------------------------------------------------
# 4. positions drawn in one order, committed in another
# --------------------------------------------------------------------------------------------


def test_an_acceptance_drawn_before_a_run_but_committed_after_it_fails_closed(judge):
    """Held (closed, a spurious not-compared): r1 (0.90) accepted, r2 (1.00) recorded; r2's
    acceptance draws its position, then r3 (judged against r1, 0.97) is recorded and commits
    before the acceptance does (simulated: r2's acceptance placed just before r3's seq). r2 is
    the reference but not "accepted since" r3, which was judged against r1: r4 is not compared
    (a 0.94 never passes), and accepting r2 again ends it."""
    judge("r1", "A", {"v": "good"}, hits={"v": 90})
    _accept(judge, "r1")
    assert judge("r2", "A", {"v": "good"}).gates["v"].passed
    r3 = judge("r3", "A", {"v": "good"}, hits={"v": 97})
    assert r3.gates["v"].passed and r3.reference["v"]["run_id"] == "r1", _why(r3)
    _accept(judge, "r2")
    seq3 = "(SELECT min(seq) FROM {measurements} WHERE run_id = 'r3') - 0.5"
    judge.sql("UPDATE {measurements} SET accepted_position = " + seq3 + " WHERE run_id = %s", "r2")
    judge.sql("UPDATE {references} SET position = " + seq3 + " WHERE run_id = %s", "r2")
    r4 = judge("r4", "A", {"v": "good"}, hits={"v": 94})
    # the moved reference not compared; the drop from r2, which recorded it on this benchmark, shown as measured
    assert not r4.gates["v"].passed and r4.gates["v"].state == "comparable", _why(r4)
    assert "which no one accepted since" in r4.gates["v"].message and "against run r2" in r4.gates["v"].message
    _accept(judge, "r2")
    r5 = judge("r5", "A", {"v": "good"}, hits={"v": 94})
    assert not r5.gates["v"].passed and r5.gates["v"].state in ("comparable", "paired"), _why(r5)
