"""The sixteenth review of the verdict, aimed at c089045 (and f478654): a history from before
positions placed by a running minimum from the log's end (log entries in (after, after + 0.5), a
stamp with no entry at after + 0.75); an acceptance on the row later than its latest log entry
counts as missing from the log ("unlogged", history/measurements.py:471-472); a BEFORE UPDATE OF
accepted_at trigger (``eval_pipeline_place_acceptance``, created by ``_place_acceptances``,
measurements.py:288-302) draws a position for every stamp written without one, and
``measurements.accept`` (measurements.py:598-619, the stamp at :610) now relies on it. Runs judged with the eighth
review's ``judge``/``answers`` fixtures against the session Postgres (marked ``integration``);
nothing here needs Dagster. "Upgraded by 87cb394" (positions, no trigger: 87cb394's ``accept``
drew positions itself, and its ``_place_acceptances`` created no trigger) is simulated by dropping
the trigger (``_without_trigger``); "recorded before positions" by dropping both position columns
(``_as_before_positions``, as the fifteenth review does).

Attacked: the trigger (who sets accepted_at, and a history that has positions but no trigger),
the "unlogged" rule against legitimate histories (an older install's accept: stamp, then a log
entry drawing its position from the column default), the running-minimum backfill (by reading:
ties, a clock behind, another variant's entry), the anchor and ``_measured_today`` (by reading),
the answer side's accept and lookups (same ``measurements.accept``/``find``).

Holes (strict xfails, each confirmed by running it, and with --runxfail; all closed since by
the lead, now plain tests: ``accept`` draws its position itself again (the trigger only places
what a writer that knows no positions stamps), ``history_exists`` asks for the trigger as well
and a history without it gets it back on first contact, and the backfill places a row stamped
later than all of its own log entries by its stamp, after the log's entries, so the deletion of
its latest entry stays a conflict):

1. a history with positions but no trigger: a re-acceptance keeps its stale position (FAILS
   OPEN). ``create`` (measurements.py:250-251) runs ``_place_acceptances``, and so creates the
   trigger, only when ``{references}`` has no ``position`` column, and ``history_exists``
   (runs.py:279, 292) checks the column, never the trigger: every history 87cb394 upgraded (or
   created fresh) before c089045, and one whose trigger or shared function was dropped (``DROP
   FUNCTION ... CASCADE`` drops every prefix's), stays without it for good. ``accept`` no longer
   draws a position, so ``UPDATE ... SET accepted_at`` leaves ``accepted_position`` as it was, and
   the log entry copies it (an explicit value: the column default does not apply). r1 (1.00)
   accepted, r2 (0.90, a measured drop) accepted by name, r1 accepted again (the bar restored):
   the log entry of r1 lands at r1's first position, r2 stays the latest in the log, so r2 is
   the reference and the previous run, and r3's 0.91 (-0.09 from the bar in force) passes. The
   answer side, through the same ``accept``, the same (a0 0.95, a1 0.84 by name, a0 again: a2 0.83
   passes; with the trigger it fails). Fix: ``accept`` draws the position itself (``SET accepted_at
   = clock_timestamp(), accepted_position = nextval(seq)``: the trigger keeps a new one), the
   trigger being the net for other writers only; and ``history_exists`` checks the trigger
   (``pg_trigger``, in the same round trip) and re-creates it when missing (``create`` creates it
   whenever it is missing, not only with the column).

   b. the same history: accepting a run never accepted before is stuck (closed, STUCK): its row
      keeps ``accepted_position`` NULL and its log entry gets ``position`` NULL, so it is neither
      "logged" (``LOGGED_POSITION`` NULL) nor placed; "unlogged" places it by its stamp after the
      logged r1: every later run is not compared ("run r2 was accepted after run r1 but ... no
      entry in the acceptance log"), and accepting r2 again, as the message offers, writes the
      same NULLs. Only re-accepting r1 (the bar the user replaced) ends it. Same fix.

2. a history from before positions: a restored reference whose latest log entry was deleted is
   "logged" at its first entry (FAILS OPEN; not new: the fifteenth's 1b, closed by c089045 only
   for histories recorded with positions). The backfill (measurements.py:284-285) sets the row's
   ``accepted_position`` to ``COALESCE(LOGGED_POSITION, ...)``: for a row whose stamp is later
   than every log entry it has (its latest entry deleted), that is its first entry's position,
   never "later than its latest log entry", so the new "unlogged" rule cannot see it. r1 (1.00)
   accepted, r2 (0.90) accepted by name, r1 accepted again and that entry deleted, then
   upgraded: r2 is the reference, r4 0.96 and r5 0.92 (-0.08 from the bar in force) pass. Fix:
   in the backfill, a row whose ``accepted_at`` is later than the latest ``accepted_at`` among its
   log entries is placed by its stamp (``after + 0.75``), not at ``LOGGED_POSITION`` (the log
   copies the row's stamp, so the two are equal for every acceptance whose entry is there; an
   older CLI that logged without stamping makes the log later, never the row).

What held (plain tests): with the trigger, the restore of hole 1 fails measured (r3 0.91 against
r1; and a2 0.83 against a0 on the answer side);
an older install's accept (87cb394^: the row stamped, then a log entry with no position, the
column default drawing it after the row's) is no false conflict: the next run is compared and
passes. By reading: ``write``'s ON CONFLICT never sets ``accepted_at`` (the trigger does not fire on
a re-recorded measurement); an UPDATE setting ``accepted_at`` NULL draws nothing and
``ACCEPTED_POSITION`` ignores the row's position then; 87cb394's accept (both columns, a new
position) is kept by the trigger; the running minimum keeps the log's order (non-decreasing left
to right, ties by seq), and moving a logged entry earlier only makes later runs "not accepted
since" (closed, one re-acceptance ends it); with 87cb394^'s monotone stamps (GREATEST(clock, last
+ 1 µs) per variant and aspect) an unlogged stamp after a logged one is never placed before it;
``moved_reference`` checks the conflict first, and neither side calls it with a reference but no
previous run (a reference implies a usable row, so the previous run exists); the anchor is
looked up whenever the reference is paired and ``prev`` exists, and then always exists (``prev``
is usable on today's benchmark: eligible, so "first" finds one, or accepted, so an acceptance
does), its conflict failing the variant closed.

Not reached: a real 87cb394 install (the trigger-less history is simulated by DROP TRIGGER);
histories in two schemas (the shared function is created unqualified in the first schema of the
search path); ``_since_acceptance`` (answers.py:480) and ``project_history`` order the log by seq,
ignoring positions and, in the former, the aspect; the oldest shape's ``_upgrade`` with accepted
answer rows and log entries of the answer aspect; ``before_run_id``'s cutoff vs acceptance
positions (as the fifteenth); the CLI end to end.
"""

from __future__ import annotations

import pytest

from tests.unit.verdict import test_verdict_attacks_eighth as eighth
from tests.unit.verdict import test_verdict_attacks_fifteenth as fifteenth
from tests.unit.verdict import test_verdict_attacks_twelfth as twelfth
from tests.unit.verdict.test_verdict_attacks_eighth import _why

pytestmark = pytest.mark.integration
judge, answers = eighth.judge, eighth.answers  # the eighth review's fixtures: runs judged against the session Postgres
_retrieval_row = twelfth._retrieval_row

CONFLICT = "no entry in the acceptance log"


def _accept(judge, run_id, **kw):
    from eval_pipeline.history.runs import accept_reference

    return accept_reference(judge.uri, run_id, prefix=judge.prefix, **kw)


def _without_trigger(judge) -> None:
    """The history as 87cb394 upgraded it (positions, no trigger: its ``accept`` drew them), or
    with the trigger dropped by hand; then read once by this version (which repairs nothing)."""
    from eval_pipeline.history.runs import reference_run

    judge.sql(f'DROP TRIGGER IF EXISTS "{judge.prefix}_measurements_place_acceptance" ON {{measurements}}')
    reference_run(judge.uri, variant="v", identity=None, prefix=judge.prefix)


def _as_before_positions(judge) -> None:
    """The history as the version before positions left it, then read once by this one."""
    from eval_pipeline.history.runs import reference_run

    judge.sql(f'DROP TRIGGER IF EXISTS "{judge.prefix}_measurements_place_acceptance" ON {{measurements}}')
    judge.sql("ALTER TABLE {measurements} DROP COLUMN IF EXISTS accepted_position")
    judge.sql("ALTER TABLE {references} DROP COLUMN IF EXISTS position")
    reference_run(judge.uri, variant="v", identity=None, prefix=judge.prefix)


def _restore(judge, *, trigger: bool):
    """r1 (1.00) accepted, r2 (0.90, a measured drop) accepted by name, r1 accepted again (the bar
    restored; without the trigger when not ``trigger``); r3 (0.91) judged."""
    judge("r1", "A", {"v": "good"})
    _accept(judge, "r1")
    r2 = judge("r2", "A", {"v": "good"}, hits={"v": 90})
    assert not r2.gates["v"].passed, _why(r2)
    _accept(judge, "r2", variants=["v"])
    if not trigger:
        _without_trigger(judge)
    _accept(judge, "r1")
    return judge("r3", "A", {"v": "good"}, hits={"v": 91})


# --------------------------------------------------------------------------------------------
# 1. a history with positions but no trigger
# --------------------------------------------------------------------------------------------


def test_a_restored_reference_in_a_history_without_the_trigger_is_the_bar(judge):
    """Hole 1: r1 (1.00) restored as the bar after r2 (0.90): r3's 0.91 (-0.09) must not pass."""
    r3 = _restore(judge, trigger=False)
    assert not r3.gates["v"].passed, _why(r3)


def test_the_control_with_the_trigger_the_restored_reference_is_the_bar(judge):
    """Held (the control of hole 1): with the trigger, r3's 0.91 fails against the restored r1."""
    r3 = _restore(judge, trigger=True)
    assert not r3.gates["v"].passed and r3.reference["v"]["run_id"] == "r1", _why(r3)


def _restore_answers(answers, *, trigger: bool):
    """a0 (0.95) accepted, a1 (0.84, a measured drop) accepted by name, a0 accepted again (without
    the trigger when not ``trigger``); the gate of a2 (0.83, -0.12 from a0)."""
    from eval_pipeline.history.answers import accept_answer_run

    _retrieval_row(answers, "a0")  # a run row: the answer acceptances are logged
    assert answers("a0", {"bm25": 0.95}).passed
    assert accept_answer_run(answers.uri, "a0")[0]
    _retrieval_row(answers, "a1")
    assert not eighth._answer_gate(answers("a1", {"bm25": 0.84})).passed
    assert accept_answer_run(answers.uri, "a1", variants=["bm25"])[0]
    if not trigger:
        answers.sql("DROP TRIGGER IF EXISTS eval_measurements_place_acceptance ON eval_measurements")
    assert accept_answer_run(answers.uri, "a0")[0]
    return eighth._answer_gate(answers("a2", {"bm25": 0.83}))


def test_a_restored_answer_reference_in_a_history_without_the_trigger_is_the_bar(answers):
    """Hole 1 on the answer side: a2's 0.83 (-0.12 from the restored a0) must not pass."""
    gate = _restore_answers(answers, trigger=False)
    assert not gate.passed, gate.message


def test_the_control_with_the_trigger_the_restored_answer_reference_is_the_bar(answers):
    """Held (the control): with the trigger, a2's 0.83 fails against the restored a0."""
    gate = _restore_answers(answers, trigger=True)
    assert not gate.passed and gate.state in ("comparable", "paired"), gate.message


def test_accepting_a_new_run_in_a_history_without_the_trigger_is_not_stuck(judge):
    """Hole 1b: r1 accepted, the trigger gone, r2 (1.00, passed) accepted: r3 is not compared
    (a conflict between r1 and r2); accepting r2 again, as offered, must end it."""
    judge("r1", "A", {"v": "good"})
    _accept(judge, "r1")
    _without_trigger(judge)
    assert judge("r2", "A", {"v": "good"}).gates["v"].passed
    _accept(judge, "r2")
    r3 = judge("r3", "A", {"v": "good"})
    if not r3.gates["v"].passed:  # as found: a conflict, whose message offers accepting r2 again
        assert "accept r2 --variant v" in r3.gates["v"].message, _why(r3)
        _accept(judge, "r2")
    r4 = judge("r4", "A", {"v": "good"})
    assert r4.gates["v"].passed and r4.reference["v"]["run_id"] == "r2", _why(r4)


# --------------------------------------------------------------------------------------------
# 2. a history from before positions: the latest log entry of a restored reference deleted
# --------------------------------------------------------------------------------------------


def test_a_legacy_restored_reference_whose_latest_log_entry_was_deleted_is_a_conflict(judge):
    """Hole 2: the fifteenth review's 1b, recorded before positions and then upgraded: r4 0.96
    and r5 0.92 (-0.08 from the bar in force) must not both pass."""
    fifteenth.restore_then_delete_its_entry(judge)
    _as_before_positions(judge)
    fifteenth.assert_the_slide_is_caught(judge)


# --------------------------------------------------------------------------------------------
# what held
# --------------------------------------------------------------------------------------------


def test_an_older_installs_accept_is_no_false_conflict(judge):
    """Held: a process on 87cb394^ accepts r2: it stamps the row (the trigger draws a position)
    and then logs the acceptance without a position (the column default draws a later one): the
    row's position is before its log entry's, never "later than its latest entry"; r3 is
    compared against r2 and passes."""
    judge("r1", "A", {"v": "good"}, hits={"v": 90})
    _accept(judge, "r1")
    assert judge("r2", "A", {"v": "good"}).gates["v"].passed
    judge.sql("UPDATE {measurements} SET accepted_at = clock_timestamp() WHERE run_id = %s", "r2")
    judge.sql("INSERT INTO {references} (corpus_signature, labels_fingerprint, scoring_protocol, benchmark_fingerprint,"
              " variant, run_id, note, aspect, accepted_by, accepted_at)"
              " SELECT r.corpus_signature, r.labels_fingerprint, r.scoring_protocol, m.benchmark, m.variant, m.run_id,"
              " '', m.aspect, 'older', m.accepted_at FROM {measurements} m JOIN {runs} r ON r.run_id = m.run_id"
              " WHERE m.run_id = %s", "r2")
    r3 = judge("r3", "A", {"v": "good"})
    assert r3.gates["v"].passed and r3.reference["v"]["run_id"] == "r2", _why(r3)
    r4 = judge("r4", "A", {"v": "good"}, hits={"v": 94})
    assert not r4.gates["v"].passed and r4.gates["v"].state in ("comparable", "paired"), _why(r4)
