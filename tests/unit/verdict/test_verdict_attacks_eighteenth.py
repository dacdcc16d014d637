"""The eighteenth review of the verdict: 9f0315e (each history's own placement function, and a
role that cannot restore a missing trigger reading on with a warning). Runs judged with the eighth
review's ``judge``/``answers`` fixtures against the session Postgres (marked ``integration``); a
second database role is made with ``CREATE ROLE`` and acted as through the connection string
(``options=-crole=...``), dropped after the test, as in the seventeenth review.

Attacked: the length of the function/trigger name (a prefix of 30 characters, Postgres's 63-byte
identifier limit), the function left behind when a history's tables are dropped, a role that owns
the tables but not the function, a reader that cannot run DDL for another reason than a missing
privilege (a read-only transaction: a reporting role, a standby), ``history_exists`` caught inside
a caller's transaction (accept_reference's connection is not autocommit), a role with every row
privilege that does not own the tables, recording.

Holes (strict xfails, each confirmed by running it, and with --runxfail; all three closed since
by the lead, now plain tests: the trigger's function is created when missing and never replaced
(one left by a dropped history serves the next); a connection that cannot restore a missing
trigger (not the owner, read-only, a standby) reads and records on with a warning
(``measurements.restore_placement_trigger``); ``create_tables`` runs no DDL on a history already
in shape (``_COMPLETE_SQL``), so a role with row privileges only records):

1. the function outlives its history, and blocks the next one under another role (STUCK, from
   9f0315e): ``DROP TABLE`` drops the trigger but not ``<prefix>_measurements_place_acceptance``
   (nothing makes it depend on the table: the eighth review's fixture drops it by hand). A history
   reset (its tables dropped) and recreated under the same prefix by another role (a new team, a
   new application role, a restore as another user) runs ``CREATE OR REPLACE FUNCTION`` on the
   first role's function in ``_create_placement_trigger`` (measurements.py:325-326), called from
   ``create`` (measurements.py:252-253) on every record: "must be owner of function", every run
   fails to record, for ever, until someone finds and drops the function by hand. Fix: create the
   function only when it is missing or its body differs (``pg_proc.prosrc`` for that name in the
   table's schema); an existing identical body (same sequence name) is reused (CREATE TRIGGER
   needs only EXECUTE on it); or put the sequence in ``TG_ARGV`` again and create the function
   only when missing. The same cause in reverse (by reading): the tables' owner, on a history whose trigger is
   missing and whose function another role owns, reads on with a warning but cannot record.

2. a reader that cannot run DDL for another reason than privilege is still refused (STUCK, from
   abfa520, not closed by 9f0315e): ``history_exists`` catches only ``InsufficientPrivilege``
   (runs.py:304-308). A read-only connection (``default_transaction_read_only`` for a reporting
   role, a hot standby) on a history without its trigger raises ``ReadOnlySqlTransaction`` from
   the restore (``CREATE TABLE IF NOT EXISTS`` / ``ALTER TABLE``): "the history could not be read",
   every variant not compared, until the owner connects to the primary. Fix: catch
   ``ReadOnlySqlTransaction`` too (the restore is optional in that branch: any
   ``psycopg.errors`` class of SQLSTATE 42501 or 25006; or check ``transaction_read_only`` and
   ``pg_has_role(owner, 'USAGE')`` before trying).

3. a role that may read and write the history but does not own it can never record (STUCK,
   pre-existing; the case 9f0315e names as legitimate): ``record_run`` (runs.py:505-507) and the
   answer writer (answers.py:329-330) run ``create_tables`` in every record, whose
   ``ALTER TABLE {runs} ADD COLUMN IF NOT EXISTS`` (runs.py:216) needs ownership even when the
   column exists: "must be owner of table", every run unrecorded, with the trigger present. Fix:
   in ``create_tables``, run each ``ALTER``/``CREATE`` only when ``to_regclass``/``has_column``/
   ``has_placement_trigger`` say it is missing (one catalog query, as ``history_exists`` does),
   so a whole history needs no DDL at all.

What held (plain tests): a 30-character prefix's function/trigger name is 60 bytes (prefix <= 30,
runs.py:131), so nothing is truncated, no two prefixes collide, and the existence check matches
(no DDL on a lookup); a role without the privilege, on a history without its trigger, read from
``accept_reference``'s own non-autocommit connection (the restore rolled back to its savepoint
inside the caller's transaction) accepts, and the acceptance gets its position (accept draws it):
the next run of a drop is compared and fails.

By reading (no test): the function is created unqualified, in the first existing schema of the
creator's search path, as are the tables; ``EXECUTE FUNCTION`` resolves it by the same path at
CREATE TRIGGER (stored by oid), so a later search_path does not matter; ``to_regclass`` in
``HAS_PLACEMENT_TRIGGER_SQL`` resolves the table by the reader's path, as every query does. A
trigger present but disabled (``ALTER TABLE ... DISABLE TRIGGER``) or pointing at a replaced
function passes the check; only an older install's acceptances would then go unplaced (this
version's accept draws its positions). The caught restore is retried by every lookup (about 180
per verdict): a transaction, an advisory lock and a failed DDL each, and a warning shown once.

Not reached: a real hot standby (read-only simulated by ``default_transaction_read_only``); two
schemas with one prefix each under two roles.
"""

from __future__ import annotations

import uuid

import psycopg
import pytest

from eval_pipeline.history.measurements import placement_function
from tests.unit.verdict import test_verdict_attacks_eighth as eighth
from tests.unit.verdict import test_verdict_attacks_seventeenth as seventeenth
from tests.unit.verdict.test_verdict_attacks_eighth import _why

pytestmark = pytest.mark.integration
judge, answers = eighth.judge, eighth.answers  # the eighth review's fixtures: runs judged against the session Postgres
other_role, _as_role = seventeenth.other_role, seventeenth._as_role  # a second role of the same database

_SUFFIX = "_measurements_place_acceptance"


def _read_only(uri: str) -> str:
    """``uri`` whose every transaction is read-only (a reporting role, or a hot standby)."""
    return uri + ("&" if "?" in uri else "?") + "options=-cdefault_transaction_read_only%3Don"


def _grant_rows(judge, role: str) -> None:
    """Every row privilege on the judge's history (and its sequences) to ``role``, not ownership."""
    from eval_pipeline.history.runs import table_names

    with psycopg.connect(judge.uri, autocommit=True) as conn:
        for table in table_names(judge.prefix).values():
            if conn.execute("SELECT to_regclass(%s) IS NOT NULL", (table,)).fetchone()[0]:
                conn.execute(f'GRANT SELECT, INSERT, UPDATE, DELETE ON "{table}" TO "{role}"')
        conn.execute(f'GRANT USAGE, SELECT, UPDATE ON ALL SEQUENCES IN SCHEMA public TO "{role}"')


def _drop_trigger(judge) -> None:
    judge.sql(f'DROP TRIGGER IF EXISTS "{judge.prefix}{_SUFFIX}" ON {{measurements}}')


# --------------------------------------------------------------------------------------------
# the history's own function: its name, and its life after the history
# --------------------------------------------------------------------------------------------


def test_a_thirty_character_prefix_keeps_its_trigger_name_whole_and_found(judge):
    """The longest prefix allowed (30 characters): its trigger and function are named in 60 bytes,
    under Postgres's 63: created whole, found by ``HAS_PLACEMENT_TRIGGER_SQL``, and two prefixes
    that differ only in their last character get two functions."""
    from eval_pipeline.history.measurements import has_placement_trigger
    from eval_pipeline.history.runs import table_names

    stem = f"a18_{uuid.uuid4().hex[:25]}"  # 29 characters
    prefixes = [stem + "x", stem + "y"]
    try:
        for prefix in prefixes:
            assert len(prefix) == 30
            verdict = judge("r1", "A", {"v": "good"}, history_prefix=prefix)
            assert verdict.gates["v"].passed, _why(verdict)
        with psycopg.connect(judge.uri, autocommit=True) as conn:
            for prefix in prefixes:
                assert has_placement_trigger(conn, table_names(prefix))
            functions = {r[0] for r in conn.execute(
                "SELECT proname FROM pg_proc WHERE proname LIKE %s", (stem + "%",)).fetchall()}
        assert functions == {placement_function(table_names(p)) for p in prefixes}
        assert all(len(f.encode()) <= 63 for f in functions)
    finally:
        with psycopg.connect(judge.uri, autocommit=True) as conn:
            for prefix in prefixes:
                for table in reversed(list(table_names(prefix).values())):
                    conn.execute(f'DROP TABLE IF EXISTS "{table}" CASCADE')
                conn.execute(f'DROP FUNCTION IF EXISTS "{placement_function(table_names(prefix))}"')


def test_a_history_recreated_by_another_role_after_its_tables_were_dropped_records(judge, other_role):
    """A history reset: its tables dropped (``DROP TABLE ... CASCADE``, the trigger goes with them,
    the function stays), and a history with the same prefix started again under another role (a
    new application role, a restore as another user): its first run records, not fail for ever."""
    from eval_pipeline.history.runs import table_names

    judge("r1", "A", {"v": "good"})
    with psycopg.connect(judge.uri, autocommit=True) as conn:
        for table in reversed(list(table_names(judge.prefix).values())):
            conn.execute(f'DROP TABLE IF EXISTS "{table}" CASCADE')
        function = placement_function(table_names(judge.prefix))
        assert conn.execute("SELECT to_regproc(%s) IS NOT NULL", (function,)).fetchone()[0], \
            "the function was dropped with the tables"
    error = None
    try:
        verdict = judge("s1", "A", {"v": "good"}, connection_string=_as_role(judge.uri, other_role))
    except Exception as exc:  # noqa: BLE001 - what the new owner sees
        error = f"{type(exc).__name__}: {exc}"
    assert error is None, error
    assert verdict.gates["v"].passed, _why(verdict)
    verdict = judge("s2", "A", {"v": "good"}, hits={"v": 90}, connection_string=_as_role(judge.uri, other_role))
    assert verdict.gates["v"].state == "comparable" and not verdict.gates["v"].passed, _why(verdict)


# --------------------------------------------------------------------------------------------
# the caught restore: other errors, and inside a caller's transaction
# --------------------------------------------------------------------------------------------


def test_a_read_only_reader_of_a_history_without_its_trigger_compares(judge):
    """The history without its trigger (as 87cb394 left it), read by its owner on a read-only
    connection (a reporting role's default, a standby): the restore cannot run, and need not (this
    version's accept draws positions): r2's drop is compared and fails."""
    judge("r1", "A", {"v": "good"})
    _drop_trigger(judge)
    verdict = judge("r2", "A", {"v": "good"}, hits={"v": 90}, connection_string=_read_only(judge.uri), record=False)
    gate = verdict.gates["v"]
    assert "could not be read" not in gate.message, _why(verdict)
    assert gate.state == "comparable" and not gate.passed, _why(verdict)


def test_read_only_control_the_same_reader_with_the_trigger_present_compares(judge):
    """The control of hole 2: with the trigger in place the read-only reader runs no DDL and compares."""
    judge("r1", "A", {"v": "good"})
    verdict = judge("r2", "A", {"v": "good"}, hits={"v": 90}, connection_string=_read_only(judge.uri), record=False)
    assert verdict.gates["v"].state == "comparable" and not verdict.gates["v"].passed, _why(verdict)


def test_a_role_that_cannot_restore_the_trigger_accepts_inside_its_own_transaction(judge, other_role):
    """``accept_reference`` looks the history up on a connection that is not autocommit: the failed
    restore is a savepoint inside that transaction, rolled back; the acceptance goes on in the same
    transaction, gets its position (drawn by accept, no trigger), and the next run is judged
    against it: r1 (1.00) recorded, r2 (0.90) recorded (failed), accepted by name by the other
    role; r3 (0.80) is -0.10 from r2 and fails; r4 (0.90) passes."""
    from eval_pipeline.history.runs import accept_reference

    judge("r1", "A", {"v": "good"})
    assert not judge("r2", "A", {"v": "good"}, hits={"v": 90}).gates["v"].passed
    _grant_rows(judge, other_role)
    _drop_trigger(judge)
    with pytest.warns(UserWarning, match="cannot restore it"):
        assert accept_reference(_as_role(judge.uri, other_role), "r2", variants=["v"], prefix=judge.prefix) == ["v"]
    with psycopg.connect(judge.uri, autocommit=True) as conn:
        position, seq = conn.execute(
            f'SELECT accepted_position, (SELECT max(seq) FROM "{judge.prefix}_measurements") '
            f'FROM "{judge.prefix}_measurements" WHERE run_id = %s AND variant = %s', ("r2", "v")).fetchone()
    assert position is not None and position > seq - 1
    r3 = judge("r3", "A", {"v": "good"}, hits={"v": 80}, record=False)
    assert r3.gates["v"].state == "comparable" and not r3.gates["v"].passed, _why(r3)
    r4 = judge("r4", "A", {"v": "good"}, hits={"v": 90}, record=False)
    assert r4.gates["v"].passed, _why(r4)


# --------------------------------------------------------------------------------------------
# a role with every row privilege, not the owner: recording
# --------------------------------------------------------------------------------------------


def test_a_role_with_every_row_privilege_records_its_runs(judge, other_role):
    """The role 9f0315e names as legitimate (every row privilege, not the owner), on a whole history
    (its trigger in place): its run records, and the next run is judged against it."""
    judge("r1", "A", {"v": "good"})
    _grant_rows(judge, other_role)
    error = None
    try:
        verdict = judge("r2", "A", {"v": "good"}, hits={"v": 97}, connection_string=_as_role(judge.uri, other_role))
    except Exception as exc:  # noqa: BLE001 - what the application role sees
        error = f"{type(exc).__name__}: {exc}"
    assert error is None, error
    assert verdict.gates["v"].passed, _why(verdict)
    with psycopg.connect(judge.uri, autocommit=True) as conn:
        recorded = conn.execute(f'SELECT count(*) FROM "{judge.prefix}_runs" WHERE run_id = %s', ("r2",)).fetchone()
    assert recorded[0] == 1, "r2 was not recorded"
