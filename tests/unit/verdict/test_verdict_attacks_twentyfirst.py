"""The twenty-first review of the verdict: 1a35039 (the placement trigger
``<prefix>_measurements_place_acceptance`` calls ``<prefix>_measurements_place_<8 hex of the body's
sha256>`` (``measurements.placement_function``), created when missing, never replaced;
``HAS_PLACEMENT_TRIGGER_SQL`` requires the trigger of that name on the table AND that it calls a
function of that name, else ``restore_placement_trigger`` (owner only; others warned) re-binds it).
Runs judged with the eighth review's ``judge`` fixture against the session Postgres (marked
``integration``); the seventeenth's ``other_role``, the nineteenth's ``_archive``/``_drop_archive``,
the twentieth's ``_as_an_older_version_left_it``, ``_older_install_accepts`` and
``_the_slide_after_an_older_install_acceptance``.

Attacked: another placement trigger on the same table (one an older version left under an
earlier prefix's name) firing before ours; a connection that is not the tables' owner meeting a
trigger an older version bound to its own function; a function of the digest name with another
body; the trigger disabled (``tgenabled``); the check's cost and concurrency (by reading).

Holes (strict xfails, each confirmed failing on 1a35039, and with --runxfail on an AssertionError
about the verdict; closed since by the lead, now plain tests):

- the class (holes 1 and 2, and any trigger this version did not make): a row's position above
  its own latest log entry's is an acceptance missing from the log, so the logged acceptance's
  own row conflicts with it (`measurements._latest_acceptance` compares with the log's position,
  not the GREATEST of row and log): this version logs the row's own position, and an older install
  stamps before it logs, so only a deleted entry or a foreign trigger puts a row past its entry.
  Fails closed for a connection that cannot restore the trigger, and says how to end it (accept
  again);
- ``HAS_PLACEMENT_TRIGGER_SQL`` requires the trigger enabled, BEFORE UPDATE FOR EACH ROW
  (``tgtype`` 19), calling a function of this version's name whose body has this version's digest,
  and no other trigger of the family (``*_measurements_place_acceptance``) on the table; the
  owner's restore drops the family's others and replaces a function of the name with another body.

1. another ``*_place_acceptance`` trigger on the table, bound by an older version to a function
   naming another history's sequence, fires before ours and ours does nothing (FAILS OPEN;
   reachable without malice on a database that ran 9f0315e/d8f7952 and archived twice, or whose
   history changed prefix). ``HAS_PLACEMENT_TRIGGER_SQL`` (measurements.py:316-319) looks at one
   trigger, the one named after the prefix it is read under; triggers fire in name order, and our
   body only draws when ``NEW.accepted_position IS NOT DISTINCT FROM OLD.accepted_position``
   (measurements.py:304), so any earlier trigger that writes a position wins. Story (old era):
   ``p`` (sequence ``p_measurements_seq_seq``, function ``p_measurements_place_acceptance`` baked
   to that name) archived as ``p_a`` (the sequence keeps its name, now far ahead); ``p`` started
   again (d8f7952 reused the baked function: the twentieth's hole, new sequence ``..._seq1``), and
   that history archived by rename as ``p_old`` before any 1a35039 contact under ``p``. Read
   under ``p_old`` by 1a35039: its own trigger ``p_old_measurements_place_acceptance`` is created,
   but ``p_measurements_place_acceptance`` ('m' < 'o') fires first and draws from ``p_a``'s
   sequence: o2 (0.90, accepted by an older install) is placed at 10001.0 (its seq 2, o3's 4), stays
   "the previous run", and o4 (0.90, -0.10 from o3) passes. The control with an archive name
   sorting before ``measurements`` (``p_b``) holds: ours fires first.
   Fix: the check must cover every trigger of the table that may write ``accepted_position``: e.g.
   require that no non-internal trigger on the table other than ours calls a function whose name
   does not end in ``_FUNCTION_SUFFIX`` (or: no other ``%_place_acceptance`` trigger at all), and
   let the owner's restore drop or re-bind the others; and defence in depth (the twentieth's): a
   row position above the log's position for a logged acceptance is in doubt (a conflict), not the
   GREATEST.

2. a connection that is not the tables' owner meeting a trigger an older version bound to its
   own function warns and reads on, and an older install's acceptance then slides a -0.10 drop
   through (FAILS OPEN; reachable with an application role, the seventeenth's deployment, on a
   database where 9f0315e/d8f7952 archived a history and started it again: the twentieth's hole 1,
   open for every role but the owner until the owner's next contact; r2 placed at 10001.0, r4
   "passed: 2 metric(s) within tolerance"). ``restore_placement_trigger``
   (measurements.py:327-347) warns on ``InsufficientPrivilege`` and the lookups go on reading
   ``ACCEPTED_POSITION`` (GREATEST of row and log, measurements.py:512) from a row a foreign
   function placed. The docstring's reason ("it only places an older install's acceptances") is
   exactly the case that fails.
   Fix: when the trigger is not this version's and cannot be restored, do not trust the rows'
   ``accepted_position`` (read the log's position when the acceptance is logged; or treat row > log
   as an ``acceptance_conflict``) or fail the comparison closed (not compared) rather than warn.

3. (weak: needs a hand-made function with the exact digest name, by someone allowed to replace it
   or to create it in a schema earlier on the search path) the check reads the function's name,
   not its body nor its schema: ``CREATE OR REPLACE`` of ``placement_function(names)`` with a body
   drawing from a sequence at 10000 passes ``HAS_PLACEMENT_TRIGGER_SQL`` and r4 (-0.10) passes
   (FAILS OPEN). Whoever can do this can also UPDATE ``accepted_position`` directly, so this is
   tamper-evidence, not a privilege boundary. Fix (cheap, in the same query):
   ``AND p.prosrc = <_PLACEMENT_BODY>`` (and ``p.pronamespace`` = the table's, or
   ``pg_function_is_visible``), so a replaced body is re-created under its own name.

4. (weak: needs ``ALTER TABLE ... DISABLE TRIGGER`` by the owner, left so, then an older install's
   re-acceptance whose log entry is deleted) a disabled trigger passes the check (``tgenabled`` is
   not read, nor ``tgtype``: a BEFORE INSERT, AFTER or FOR EACH STATEMENT trigger of the right name
   calling the right function passes too, and does nothing, silently: tested for FOR EACH
   STATEMENT). The log's default places every older-install
   acceptance, so the plain slide holds (below); what is lost is the conflict the row's position
   makes when the log entry of a re-acceptance is deleted: r1 (1.00) accepted, r2 (0.90) accepted,
   r1 accepted again by an older install, that log entry deleted; with the trigger (the control)
   the row's new position is past every log entry: r1 is the previous run (r4 -0.10 fails) and the
   deleted entry is an ``acceptance_conflict``; disabled, the row keeps r1's first position, r2 is
   silently the previous run and the reference, and r4 (0.90) passes (FAILS OPEN). Three hand steps
   (disable, older install, delete): the least reachable here.
   Fix: ``HAS_PLACEMENT_TRIGGER_SQL`` also requires ``t.tgenabled IN ('O', 'A')`` and ``t.tgtype``
   = BEFORE | ROW | UPDATE (19), so the owner's restore re-creates it enabled.

What held (plain tests): the control of hole 1 (archive name before ``measurements``: ours fires
first, the slide fails); the twentieth's slide with the trigger disabled, and with a FOR EACH
STATEMENT trigger of the right name and function (it passes the check and does nothing, silently:
``NEW`` is NULL; the log's default places the acceptance: r4 fails); the control of hole 4 (the
trigger enabled: the deleted re-acceptance is a conflict); the owner's first contact re-binds a
trigger bound to an older function even when it is also disabled (``DROP TRIGGER`` + ``CREATE``:
enabled again).

By reading (no test): the check runs in ``history_exists``' one round trip (runs.py:293-300), a
join of ``pg_trigger`` (indexed by ``tgrelid``) and ``pg_proc`` by oid: negligible. A non-owner
whose trigger is not this version's retries the restore on EVERY lookup (savepoint, the history's
advisory lock, ``CREATE FUNCTION`` when it may create in the schema, ``DROP TRIGGER`` refused) and
warns each time: cost and noise, and the advisory lock makes its lookups wait on the owner's
records; the owner re-binding (``DROP TRIGGER`` takes ACCESS EXCLUSIVE) while a non-owner's
session transaction holds ACCESS SHARE and then waits on the advisory lock can deadlock: Postgres
aborts one, loud, never stuck or passed. Two owners re-binding serialize on the advisory lock and
the second re-checks (catalog reads see the committed re-binding). A single archive whose
sequence was renamed with it frees the old name for the new history's sequence, so the archive's
older trigger (hole 1's kind) draws from the live history's sequence: too low while the archive is
longer (the log's position wins the GREATEST: safe), too high once the live history is longer
(hole 1 again, when the archive is read). A function of the digest name in a schema earlier on the
search path is one this code made (same body, self-locating) unless hand-made (hole 3). Nothing
here makes a legitimate user stuck: every restore failure other than privilege/read-only raises
(loud), and the owner's next contact fixes it.
"""

from __future__ import annotations

import warnings

import psycopg
import pytest

from tests.unit.verdict import test_verdict_attacks_eighth as eighth
from tests.unit.verdict import test_verdict_attacks_nineteenth as nineteenth
from tests.unit.verdict import test_verdict_attacks_seventeenth as seventeenth
from tests.unit.verdict import test_verdict_attacks_twentieth as twentieth
from tests.unit.verdict.test_verdict_attacks_eighth import _why

pytestmark = pytest.mark.integration
judge = eighth.judge  # the eighth review's fixture: runs judged against the session Postgres
other_role, _as_role = seventeenth.other_role, seventeenth._as_role  # a second role of the same database
_archive, _drop_archive = nineteenth._archive, nineteenth._drop_archive
_as_an_older_version_left_it = twentieth._as_an_older_version_left_it
_older_install_accepts = twentieth._older_install_accepts
_positions = twentieth._positions
_the_slide = twentieth._the_slide_after_an_older_install_acceptance
_a_function_drawing_from, _bind = twentieth._a_function_drawing_from, twentieth._bind


def _names(prefix: str) -> dict[str, str]:
    from eval_pipeline.history.runs import table_names

    return table_names(prefix)


def _bind_to_the_older_function(judge) -> None:
    """The history's trigger bound to the function an older version left (``<prefix>_measurements_
    place_acceptance``), as d8f7952 bound a history it created (it reused a function found by name)."""
    table = _names(judge.prefix)["measurements"]
    with psycopg.connect(judge.uri, autocommit=True) as conn:
        _bind(conn, table, f"{table}_place_acceptance", f"{table}_place_acceptance")


def _rename(judge, to: str) -> None:
    """The judge's history renamed to prefix ``to`` (tables only, the sequence as it is)."""
    with psycopg.connect(judge.uri, autocommit=True) as conn:
        for key, table in _names(judge.prefix).items():
            if conn.execute("SELECT to_regclass(%s) IS NOT NULL", (table,)).fetchone()[0]:
                conn.execute(f'ALTER TABLE "{table}" RENAME TO "{_names(to)[key]}"')


def _an_older_era_second_archive(judge, second: str) -> str:
    """The old era's story: ``p`` recorded, its function baked to its sequence's name, archived as
    ``p_a`` (that sequence at 10000, keeping its name); ``p`` started again, bound (as d8f7952 did)
    to the baked function, r1 recorded; then archived too, as ``second``, before any contact under
    ``p`` by this version. Returns the first archive's prefix."""
    first = judge.prefix + "_a"
    judge("r1", "A", {"v": "good"})
    _as_an_older_version_left_it(judge)
    _archive(judge, first)
    assert judge("r1", "A", {"v": "good"}).gates["v"].passed  # stands for the older version's record
    _bind_to_the_older_function(judge)
    _rename(judge, second)
    return first


def _triggers(uri: str, table: str) -> list[tuple[str, str]]:
    with psycopg.connect(uri, autocommit=True) as conn:
        return conn.execute("SELECT t.tgname, p.proname FROM pg_trigger t JOIN pg_proc p ON p.oid = t.tgfoid"
                            " WHERE t.tgrelid = to_regclass(%s) AND NOT t.tgisinternal ORDER BY t.tgname",
                            (table,)).fetchall()


# --------------------------------------------------------------------------------------------
# hole 1: another placement trigger on the table fires before ours
# --------------------------------------------------------------------------------------------


def test_an_older_versions_trigger_under_an_earlier_prefix_name_does_not_place_an_archives_acceptances(judge):
    second = judge.prefix + "_old"  # "..._old_measurements_place_acceptance" sorts after "..._measurements_..."
    first = None
    try:
        first = _an_older_era_second_archive(judge, second)
        o4, placed = _the_slide(judge, prefix=second, runs=("o2", "o3", "o4"))
        (o2_seq, position), (o3_seq, _) = placed["r2"], placed["r3"]
        triggers = _triggers(judge.uri, _names(second)["measurements"])
        assert not o4.gates["v"].passed, (
            f"o2 placed at {position} (o2 seq {o2_seq}, o3 seq {o3_seq}); triggers {triggers}; {_why(o4)}")
        assert o2_seq < position < o3_seq, placed
    finally:
        for prefix in (second, first):
            if prefix:
                _drop_archive(judge, prefix)


def test_the_control_of_hole_1_an_archive_name_before_measurements_has_ours_fire_first(judge):
    """The same story archived as ``p_b`` ('b' < 'm'): ``p_b_measurements_place_acceptance`` fires
    before the older ``p_measurements_place_acceptance``, draws from the archive's own sequence,
    the older one sees a new position and does nothing; o4 (-0.10) fails."""
    second = judge.prefix + "_b"
    first = None
    try:
        first = _an_older_era_second_archive(judge, second)
        o4, placed = _the_slide(judge, prefix=second, runs=("o2", "o3", "o4"))
        (o2_seq, position), (o3_seq, _) = placed["r2"], placed["r3"]
        assert o2_seq < position < o3_seq, placed
        assert o4.gates["v"].state == "comparable" and not o4.gates["v"].passed, _why(o4)
        # the older prefix's trigger dropped on first contact: the table's one placement trigger is its own
        assert [name for name, _ in _triggers(judge.uri, _names(second)["measurements"])] == [
            _names(second)["measurements"] + "_place_acceptance"]
    finally:
        for prefix in (second, first):
            if prefix:
                _drop_archive(judge, prefix)


def test_another_prefixs_trigger_beside_this_versions_own_is_dropped_on_first_contact(judge):
    """The history's own trigger in shape, and beside it one of the family under another prefix's
    name that sorts first (``<prefix>_a_measurements_place_acceptance``), bound to a function that
    draws from another sequence: the check is not met while it is there, the owner's first contact
    drops it, and an older install's acceptance of r2 is placed between r2 and r3 (r4 fails)."""
    names = _names(judge.prefix)
    table, other = names["measurements"], f"{judge.prefix}_foreign_seq"
    foreign = f"{judge.prefix}_a_measurements_place_acceptance"
    judge("r1", "A", {"v": "good"})
    with psycopg.connect(judge.uri, autocommit=True) as conn:
        conn.execute(f'CREATE SEQUENCE "{other}" START 10000')
        _a_function_drawing_from(conn, foreign, f'"{other}"')
        _bind(conn, table, foreign, foreign)
    try:
        r4, placed = _the_slide(judge)
        (r2_seq, position), (r3_seq, _) = placed["r2"], placed["r3"]
        assert r2_seq < position < r3_seq, placed
        assert r4.gates["v"].state == "comparable" and not r4.gates["v"].passed, _why(r4)
        assert [name for name, _ in _triggers(judge.uri, table)] == [table + "_place_acceptance"]
    finally:
        with psycopg.connect(judge.uri, autocommit=True) as conn:
            conn.execute(f'DROP FUNCTION IF EXISTS "{foreign}" CASCADE')
            conn.execute(f'DROP SEQUENCE IF EXISTS "{other}" CASCADE')


# --------------------------------------------------------------------------------------------
# hole 2: a connection that is not the owner meets an older version's trigger
# --------------------------------------------------------------------------------------------


def test_a_non_owner_meeting_an_older_versions_trigger_does_not_let_a_drop_slide_through(judge, other_role):
    """The twentieth's hole 1 (an archive, ``p`` started again by d8f7952 with its baked function)
    met by an application role that does not own the tables: 1a35039 cannot re-bind the trigger,
    warns, and reads on; r2 (0.90) accepted by an older install is placed at 10001 (the archive's
    sequence), stays the previous run over r3 (1.00), and r4 (0.90) must not pass. Closed: a row
    placed past its own log entry is an acceptance missing from the log (a conflict): r3 is not
    compared, saying so and how to end it, and so is r4."""
    archive = judge.prefix + "_old"
    try:
        twentieth._archived_and_started_again(judge, archive)
        _bind_to_the_older_function(judge)  # as d8f7952 created the new history
        with psycopg.connect(judge.uri, autocommit=True) as conn:
            for table in _names(judge.prefix).values():
                if conn.execute("SELECT to_regclass(%s) IS NOT NULL", (table,)).fetchone()[0]:
                    conn.execute(f'GRANT SELECT, INSERT, UPDATE, DELETE ON "{table}" TO "{other_role}"')
            conn.execute(f'GRANT USAGE, SELECT, UPDATE ON ALL SEQUENCES IN SCHEMA public TO "{other_role}"')
        uri = _as_role(judge.uri, other_role)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            assert not judge("r2", "A", {"v": "good"}, hits={"v": 90}, connection_string=uri).gates["v"].passed
            _older_install_accepts(uri, judge.prefix, "r2")
            r3 = judge("r3", "A", {"v": "good"}, connection_string=uri)
            r4 = judge("r4", "A", {"v": "good"}, hits={"v": 90}, record=False, connection_string=uri)
        assert any("cannot restore it" in str(w.message) for w in caught), [str(w.message) for w in caught]
        position = _positions(judge.uri, judge.prefix, "r2")["r2"]
        assert position[1] > 1000, position  # placed by the archive's sequence: the rows' position is foreign
        assert r3.gates["v"].state == "not_compared" and "no entry of its own" in r3.gates["v"].message, _why(r3)
        assert not r4.gates["v"].passed, f"r2 placed at {position}; {_why(r4)}"
    finally:
        _drop_archive(judge, archive)


# --------------------------------------------------------------------------------------------
# hole 3 (weak): a function of the digest name with another body
# --------------------------------------------------------------------------------------------


def test_a_function_of_the_digest_name_with_another_body_is_not_taken_for_this_versions(judge):
    from eval_pipeline.history.measurements import has_placement_trigger, placement_function

    names = _names(judge.prefix)
    other = f"{judge.prefix}_foreign_seq"
    judge("r1", "A", {"v": "good"})
    with psycopg.connect(judge.uri, autocommit=True) as conn:
        conn.execute(f'CREATE SEQUENCE "{other}" START 10000')
        _a_function_drawing_from(conn, placement_function(names), f'"{other}"')
    try:
        r4, placed = _the_slide(judge)
        (r2_seq, position), (r3_seq, _) = placed["r2"], placed["r3"]
        with psycopg.connect(judge.uri, autocommit=True) as conn:
            checked = has_placement_trigger(conn, names)
        assert not r4.gates["v"].passed, (
            f"r2 placed at {position} (r2 seq {r2_seq}, r3 seq {r3_seq}); check says {checked}; {_why(r4)}")
    finally:
        with psycopg.connect(judge.uri, autocommit=True) as conn:
            conn.execute(f'DROP SEQUENCE IF EXISTS "{other}" CASCADE')


# --------------------------------------------------------------------------------------------
# hole 4 (weak) and what held: the trigger disabled
# --------------------------------------------------------------------------------------------


def _disable(judge) -> None:
    table = _names(judge.prefix)["measurements"]
    with psycopg.connect(judge.uri, autocommit=True) as conn:
        conn.execute(f'ALTER TABLE "{table}" DISABLE TRIGGER "{table}_place_acceptance"')


def test_a_disabled_trigger_is_enabled_again_on_first_contact_and_the_slide_fails(judge):
    """Held (the check did not read ``tgenabled``, and the log's default placed the entry: r4
    failed); since hole 4's fix the owner's first contact creates the trigger again, enabled: an
    older install's acceptance of r2 is placed between r2 and r3 on the row too, and r4 (-0.10
    from r3) fails."""
    judge("r1", "A", {"v": "good"})
    _disable(judge)
    r4, placed = _the_slide(judge)
    (r2_seq, position), (r3_seq, _) = placed["r2"], placed["r3"]
    assert r2_seq < position < r3_seq, placed
    assert r4.gates["v"].state == "comparable" and not r4.gates["v"].passed, _why(r4)


def test_a_disabled_trigger_bound_to_an_older_function_is_bound_again_and_enabled(judge):
    """Held: a trigger an older version bound to its own function, then disabled, is dropped and
    created again by the owner's first contact: enabled, bound to this version's function."""
    from eval_pipeline.history.measurements import placement_function

    names = _names(judge.prefix)
    judge("r1", "A", {"v": "good"})
    _as_an_older_version_left_it(judge)
    _disable(judge)
    judge("r2", "A", {"v": "good"})
    with psycopg.connect(judge.uri, autocommit=True) as conn:
        bound = conn.execute("SELECT p.proname, t.tgenabled FROM pg_trigger t JOIN pg_proc p ON p.oid = t.tgfoid"
                             " WHERE t.tgrelid = to_regclass(%s) AND NOT t.tgisinternal",
                             (names["measurements"],)).fetchall()
    assert bound == [(placement_function(names), "O")], bound


def _re_acceptance_with_its_log_entry_deleted(judge):
    """r1 (1.00) accepted, r2 (0.90, failed) accepted: the reference; r1 accepted again by an older
    install (stamp and log), that log entry deleted by hand. r4 (0.90) judged, not recorded."""
    from eval_pipeline.history.runs import accept_reference

    judge("r1", "A", {"v": "good"})
    accept_reference(judge.uri, "r1", variants=["v"], prefix=judge.prefix)
    assert not judge("r2", "A", {"v": "good"}, hits={"v": 90}).gates["v"].passed
    accept_reference(judge.uri, "r2", variants=["v"], prefix=judge.prefix)
    _older_install_accepts(judge.uri, judge.prefix, "r1")
    judge.sql("DELETE FROM {references} WHERE run_id = %s AND note = 'older install'", "r1")
    return judge("r4", "A", {"v": "good"}, hits={"v": 90}, record=False)


def test_the_control_of_hole_4_an_enabled_trigger_makes_a_deleted_re_acceptance_a_conflict(judge):
    """With the trigger enabled, r1's re-acceptance is placed past every log entry: r1 is the
    previous run (r4 -0.10 fails) and the deleted entry is an ``acceptance_conflict`` ("r1 was
    accepted after run r2 but that acceptance has no entry in the acceptance log")."""
    judge("r0", "A", {"v": "good"})
    r4 = _re_acceptance_with_its_log_entry_deleted(judge)
    assert not r4.gates["v"].passed, _why(r4)
    assert "has no entry in the acceptance log" in r4.gates["v"].message, _why(r4)


def test_a_disabled_trigger_is_restored_so_a_deleted_re_acceptance_stays_a_conflict(judge):
    judge("r0", "A", {"v": "good"})
    _disable(judge)  # the owner's next contact (r1's record) must restore it
    r4 = _re_acceptance_with_its_log_entry_deleted(judge)
    assert not r4.gates["v"].passed, _why(r4)


def test_a_statement_level_trigger_of_the_right_name_and_function_is_made_a_row_trigger_again(judge):
    """Hole 4's mechanism: the check did not read ``tgtype``; a FOR EACH STATEMENT trigger of the
    right name calling this version's function passed it and silently did nothing (``NEW`` is NULL
    in a statement trigger: the condition is NULL, no error). Since the fix it fails the check, and
    the owner's first contact creates the row trigger again: an older install's acceptance of r2 is
    placed on the row between r2 and r3, r4 fails."""
    from eval_pipeline.history.measurements import has_placement_trigger, placement_function

    names = _names(judge.prefix)
    table = names["measurements"]
    judge("r1", "A", {"v": "good"})
    with psycopg.connect(judge.uri, autocommit=True) as conn:
        conn.execute(f'DROP TRIGGER "{table}_place_acceptance" ON "{table}"')
        conn.execute(f'CREATE TRIGGER "{table}_place_acceptance" BEFORE UPDATE OF accepted_at ON "{table}"'
                     f' FOR EACH STATEMENT EXECUTE FUNCTION "{placement_function(names)}"()')
    with psycopg.connect(judge.uri, autocommit=True) as conn:
        assert not has_placement_trigger(conn, names)  # not taken for this version's trigger
    r4, placed = _the_slide(judge)
    with psycopg.connect(judge.uri, autocommit=True) as conn:
        assert has_placement_trigger(conn, names)  # made again, for each row
    (r2_seq, position), (r3_seq, _) = placed["r2"], placed["r3"]
    assert r2_seq < position < r3_seq, placed
    assert r4.gates["v"].state == "comparable" and not r4.gates["v"].passed, _why(r4)
