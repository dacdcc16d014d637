"""The twentieth review of the verdict: 4dd16af (the placement trigger's function finds the
sequence of the table it fires on when it fires, ``pg_get_serial_sequence(quote_ident(
TG_TABLE_SCHEMA) || '.' || quote_ident(TG_TABLE_NAME), 'seq')``; created only when missing,
never replaced). Runs judged with the eighth review's ``judge`` fixture against the session
Postgres (marked ``integration``); the nineteenth review's archive helpers; a second role as in
the seventeenth review.

Attacked: a function of the history's name left by an older version of this code (9f0315e and
d8f7952 wrote the sequence's name into its body) and reused as is; a history in a schema needing
quotes (mixed case) on a search path whose later schema (public) holds the prefix's function; a
renamed sequence; the archive (tables renamed to another prefix) judged under its own prefix, its
table carrying the old prefix's trigger and its own; a role granted the tables but not the
sequence (accepting needs ``nextval``).

Holes (strict xfails, each confirmed by running it, and with --runxfail: an AssertionError on the
verdict, not a setup error; closed since by the lead, now plain tests: the function's name carries
its body's digest (``measurements.placement_function``), so no older function is found by name,
and ``HAS_PLACEMENT_TRIGGER_SQL`` requires the trigger to call it (``tgfoid``), so a trigger an
older version bound to its own function is bound again on first contact; the lead's
``test_a_trigger_an_older_version_bound_to_another_sequence_is_bound_again_on_first_contact``
fails without that check):

1. an older version's function is reused as is, so the nineteenth review's hole 1 is still open
   on every database that ran 9f0315e or d8f7952 (FAILS OPEN): 4dd16af changed only the body of
   functions created from now on. ``_create_placement_trigger`` (measurements.py:348) creates the
   function only when ``to_regprocedure('"<prefix>_measurements_place_acceptance"()')`` finds none,
   and ``restore_placement_trigger`` (measurements.py:318) and ``create_tables`` (runs.py:203-204)
   never look at a present function's body. Every history 9f0315e (``CREATE OR REPLACE``, on each
   record) or d8f7952 (``CREATE`` when missing) touched has a function whose body reads
   ``nextval('public.<prefix>_measurements_seq_seq'::regclass)``. Archive that history by renaming
   its tables (the sequence keeps its name), start the prefix again: the new table's trigger is
   bound to that function, and an older install's acceptance takes its row position from the
   archive's sequence. The log's DEFAULT (bound by oid, measurements.py:295) places the log entry
   right, but ``ACCEPTED_POSITION`` (measurements.py:494) takes the GREATEST of the row's and the
   log's, so the wrong one wins. In the test: r2 (0.90, failed) accepted by an older install is
   placed at 10001.0 (r2 seq 2, r3 seq 4), stays "the previous run" over r3 (1.00, eligible,
   recorded after it; ``_ORDERS["latest"]``, measurements.py:519), and r4 (0.90, -0.10 from r3)
   passes: "passed: 2 metric(s) within tolerance (the previous run is also the pinned reference)".
   The control (the same older function, no archive) places r2 between r2 and r3, and r4 fails.
   The same reuse is reached without an upgrade by a worker still on 9f0315e/d8f7952 during a
   rolling upgrade (it creates the baked function for a new history, and 4dd16af keeps it); and
   by a history in another schema whose search path finds an older function of the name in
   public (``to_regprocedure`` and ``EXECUTE FUNCTION`` resolve through the path).
   Fix: give the function of the new body a name of its own (e.g. ``..._place_acceptance2``, or
   one ``eval_pipeline_place_acceptance_v2`` for the database: the body names no table, so it is
   never replaced and any role may share it), so no older function is found by name; and make
   ``HAS_PLACEMENT_TRIGGER_SQL`` (measurements.py:303) require that the trigger calls it
   (``pg_trigger.tgfoid``), so a history whose trigger runs an older body is re-pointed on first
   contact by its owner (warned otherwise, as now). Defence in depth: a row position beyond the
   sequence's ``last_value``, or a row position above every log entry of an acceptance that is
   logged, is in doubt: read it as a conflict (``Yardstick.acceptance_conflict``) rather than
   letting GREATEST pick it.

What held (plain tests): the control of hole 1 (an older function on its own history); a history
in the schema ``"Atk20_<hex>"`` (mixed case) on the path ``"Atk20_<hex>",public``, bound to
public's function (left by a reset there) places an older install's acceptance by its own
table's sequence (``quote_ident(TG_TABLE_SCHEMA)``) and r4 (-0.10) fails; a renamed sequence is
found when the trigger fires, and the log's default follows it by oid (an older install's accept
works, r4 fails); the archive judged under its own prefix had two triggers (the old prefix's,
shared with the new history's function, and its own), the first drew from the archive's
sequence and the second saw a new position, and r4 failed (since the twenty-first review the
old prefix's trigger is dropped on first contact: one trigger, its own); a role granted the tables but not the
sequence records (identity columns need no sequence privilege) but cannot accept ("accepting run
'r2' failed: InsufficientPrivilege": nothing stamped or logged, loud), and r3 (0.90) still fails.

By reading (no test): ``pg_get_serial_sequence`` parses its first argument as a qualified
identifier, so ``quote_ident`` on both parts is right for any schema (the table name never needs
quotes: prefixes are lowercase, runs.py:166-173); the cast of its text result to ``regclass`` in
``nextval`` is implicit; the trigger function is SECURITY INVOKER, so an older install's role
needs USAGE/UPDATE on the sequence, as this version's ``accept`` and the log's default do (loud
when missing; the error message, "InsufficientPrivilege", names neither the object nor the grant:
a role granted ``ALL TABLES`` that accepted before 87cb394 now cannot, until the sequence is
granted); an identity sequence cannot be re-owned, and ``DROP IDENTITY`` is refused while the
log's default depends on it; ``accept`` resolves the sequence by the search path
(``_sequence``, measurements.py:361) as every query resolves the table, the trigger by the table
it fires on: the same one; a function left by a reset (``DROP TABLE``) with a baked body names a
dropped sequence, or by chance the new one of the same name: loud or right, never misread; an
acceptance drawn before a run and committed after it is the fifteenth review's.

Not reached: a real rolling upgrade (two versions' workers; simulated by writing the older body);
a function of the name in the ``$user`` schema ahead of the tables' schema (the same reuse as
hole 1); a real standby; the answers fixture (the trigger is the same for answer rows).
"""

from __future__ import annotations

import uuid

import psycopg
import pytest

from tests.unit.verdict import test_verdict_attacks_eighth as eighth
from tests.unit.verdict import test_verdict_attacks_nineteenth as nineteenth
from tests.unit.verdict import test_verdict_attacks_seventeenth as seventeenth
from tests.unit.verdict.test_verdict_attacks_eighth import _why

pytestmark = pytest.mark.integration
judge = eighth.judge  # the eighth review's fixture: runs judged against the session Postgres
other_role, _as_role = seventeenth.other_role, seventeenth._as_role  # a second role of the same database
_archive, _drop_archive = nineteenth._archive, nineteenth._drop_archive

_SUFFIX = "_measurements_place_acceptance"


def _older_install_accepts(uri: str, prefix: str, run_id: str, variant: str = "v") -> None:
    """An older install's acceptance (as the nineteenth review's): the row stamped, then logged,
    no position written (the trigger and the log's default place it)."""
    with psycopg.connect(uri) as conn, conn.transaction():
        conn.execute(f'UPDATE "{prefix}_measurements" SET accepted_at = now() WHERE run_id = %s AND variant = %s'
                     " AND aspect = 'retrieval'", (run_id, variant))
        conn.execute(f'INSERT INTO "{prefix}_references" (variant, run_id, aspect, note)'
                     " VALUES (%s, %s, 'retrieval', 'older install')", (variant, run_id))


def _positions(uri: str, prefix: str, *runs: str) -> dict[str, tuple]:
    """run -> (seq, accepted_position) of its ``v`` retrieval row."""
    with psycopg.connect(uri, autocommit=True) as conn:
        return {run: conn.execute(f'SELECT seq, accepted_position FROM "{prefix}_measurements" WHERE run_id = %s'
                                  " AND variant = 'v' AND aspect = 'retrieval'", (run,)).fetchone() for run in runs}


def _a_function_drawing_from(conn, name: str, sequence: str) -> None:
    """A placement function as 9f0315e and d8f7952 wrote one: the sequence (``sequence``, as
    ``regclass`` text) written into its body (``CREATE OR REPLACE``)."""
    conn.execute(f'CREATE OR REPLACE FUNCTION "{name}"() RETURNS trigger LANGUAGE plpgsql'
                 " AS $$ BEGIN IF NEW.accepted_at IS NOT NULL AND NEW.accepted_position IS NOT DISTINCT FROM"
                 f" OLD.accepted_position THEN NEW.accepted_position := nextval('{sequence}'::regclass); END IF;"
                 " RETURN NEW; END $$")


def _bind(conn, table: str, trigger: str, function: str) -> None:
    """``trigger`` on ``table`` made again, BEFORE UPDATE OF accepted_at FOR EACH ROW, calling ``function``."""
    conn.execute(f'DROP TRIGGER IF EXISTS "{trigger}" ON "{table}"')
    conn.execute(f'CREATE TRIGGER "{trigger}" BEFORE UPDATE OF accepted_at ON "{table}"'
                 f' FOR EACH ROW EXECUTE FUNCTION "{function}"()')


def _as_an_older_version_left_it(judge) -> None:
    """The history's function as 9f0315e and d8f7952 created it (every database that ran either
    has it): the sequence's name written into its body (9f0315e: ``CREATE OR REPLACE``; d8f7952:
    ``CREATE`` when missing), the history's trigger bound to it. 4dd16af created the function only
    when it was missing: this one stayed."""
    from eval_pipeline.history.runs import table_names

    names = table_names(judge.prefix)
    with psycopg.connect(judge.uri, autocommit=True) as conn:
        sequence = conn.execute("SELECT pg_get_serial_sequence(%s, 'seq')", (names["measurements"],)).fetchone()[0]
        older = names["measurements"] + "_place_acceptance"  # those versions named trigger and function alike
        _a_function_drawing_from(conn, older, sequence)
        _bind(conn, names["measurements"], older, older)  # the history's trigger bound to it, as they left it


def _the_slide_after_an_older_install_acceptance(judge, *, uri: str | None = None, prefix: str | None = None,
                                                 runs: tuple[str, str, str] = ("r2", "r3", "r4")) -> tuple:
    """r2 (0.90) recorded failing, accepted by an older install; r3 (1.00) recorded, eligible; r4
    (0.90) judged: -0.10 from r3, the previous run. Returns (r4's verdict, the rows' positions)."""
    settings = {key: value for key, value in (("connection_string", uri), ("history_prefix", prefix)) if value}
    uri, prefix = uri or judge.uri, prefix or judge.prefix
    r2, r3, r4 = runs
    assert not judge(r2, "A", {"v": "good"}, hits={"v": 90}, **settings).gates["v"].passed
    _older_install_accepts(uri, prefix, r2)
    assert judge(r3, "A", {"v": "good"}, **settings).gates["v"].passed
    verdict = judge(r4, "A", {"v": "good"}, hits={"v": 90}, record=False, **settings)
    placed = _positions(uri, prefix, r2, r3)
    return verdict, {"r2": placed[r2], "r3": placed[r3]}


# --------------------------------------------------------------------------------------------
# hole 1: a function of the history's name left by an older version of this code
# --------------------------------------------------------------------------------------------


def _archived_and_started_again(judge, archive: str) -> None:
    """r1 recorded; the history's function and trigger as an older version left them; the history
    archived (renamed to ``archive``) and started again under its prefix with r1."""
    judge("r1", "A", {"v": "good"})
    _as_an_older_version_left_it(judge)
    _archive(judge, archive)
    assert judge("r1", "A", {"v": "good"}).gates["v"].passed


def test_an_older_versions_function_left_behind_by_an_archive_does_not_place_the_new_historys_acceptances(judge):
    """The nineteenth review's hole 1 on a database that ran 9f0315e or d8f7952 (its function's
    body names the sequence): ``eval`` archived, started again, r2 accepted by an older install is
    placed by the archive's sequence (10001), stays "the previous run" over r3, and r4 (-0.10
    from r3) passes against it. 4dd16af fixed only the body of functions created from now on."""
    archive = judge.prefix + "_old"
    try:
        _archived_and_started_again(judge, archive)
        r4, placed = _the_slide_after_an_older_install_acceptance(judge)
        (r2_seq, position), (r3_seq, _) = placed["r2"], placed["r3"]
        assert not r4.gates["v"].passed, f"r2 placed at {position} (r2 seq {r2_seq}, r3 seq {r3_seq}); {_why(r4)}"
        assert position is not None and r2_seq < position < r3_seq, placed
    finally:
        _drop_archive(judge, archive)


def test_a_trigger_an_older_version_bound_to_another_sequence_is_bound_again_on_first_contact(judge):
    """The history's trigger bound by an older version to a function whose body names another
    sequence (a history d8f7952 started after an archive: it reused the archive's function):
    this version's first contact finds the trigger calling a function that is not its own
    (``HAS_PLACEMENT_TRIGGER_SQL`` reads ``tgfoid``) and binds it to its own, so an older
    install's acceptance is placed by the history's own sequence and r4 (-0.10) fails."""
    from eval_pipeline.history.measurements import placement_function
    from eval_pipeline.history.runs import table_names

    names = table_names(judge.prefix)
    other = f"{judge.prefix}_archived_seq"
    judge("r1", "A", {"v": "good"})
    with psycopg.connect(judge.uri, autocommit=True) as conn:
        conn.execute(f'CREATE SEQUENCE "{other}" START 10000')
        older = names["measurements"] + "_place_acceptance"
        _a_function_drawing_from(conn, older, f'"{other}"')
        _bind(conn, names["measurements"], older, older)
    try:
        r4, placed = _the_slide_after_an_older_install_acceptance(judge)
        (r2_seq, position), (r3_seq, _) = placed["r2"], placed["r3"]
        assert not r4.gates["v"].passed, f"r2 placed at {position} (r2 seq {r2_seq}, r3 seq {r3_seq}); {_why(r4)}"
        assert r2_seq < position < r3_seq, placed
        with psycopg.connect(judge.uri, autocommit=True) as conn:
            bound = conn.execute("SELECT p.proname FROM pg_trigger t JOIN pg_proc p ON p.oid = t.tgfoid"
                                 " WHERE t.tgrelid = to_regclass(%s) AND NOT t.tgisinternal",
                                 (names["measurements"],)).fetchall()
        assert bound == [(placement_function(names),)], bound
    finally:
        with psycopg.connect(judge.uri, autocommit=True) as conn:
            conn.execute(f'DROP SEQUENCE IF EXISTS "{other}" CASCADE')


def test_an_older_versions_function_on_its_own_history_places_acceptances(judge):
    """The control of hole 1: the same older function, no archive: its sequence is the history's
    own, r2 is placed between r2 and r3, and r4 fails."""
    judge("r1", "A", {"v": "good"})
    _as_an_older_version_left_it(judge)
    r4, placed = _the_slide_after_an_older_install_acceptance(judge)
    (r2_seq, position), (r3_seq, _) = placed["r2"], placed["r3"]
    assert r2_seq < position < r3_seq, placed
    assert r4.gates["v"].state == "comparable" and not r4.gates["v"].passed, _why(r4)


# --------------------------------------------------------------------------------------------
# what held: another schema (needing quotes), a renamed sequence, a role without the sequence
# --------------------------------------------------------------------------------------------


def _with_search_path(uri: str, path: str) -> str:
    from urllib.parse import quote

    return uri + ("&" if "?" in uri else "?") + "options=" + quote(f"-csearch_path={path}", safe="")


def test_a_history_in_a_schema_needing_quotes_reusing_public_functions_places_in_its_own_sequence(judge):
    """A history of the judge's prefix in schema ``"Atk20_<hex>"`` (mixed case: quoted), search
    path ``"Atk20_<hex>", public``; public holds the prefix's function (left by a history reset
    there: ``DROP TABLE`` keeps it), found by ``to_regprocedure`` and reused. The schema's
    older-install acceptance is placed by its own table's sequence (``quote_ident(TG_TABLE_SCHEMA)``
    of a mixed-case schema), and r4 (-0.10) fails."""
    from eval_pipeline.history.runs import table_names

    schema = f"Atk20_{uuid.uuid4().hex[:8]}"
    uri = _with_search_path(judge.uri, f'"{schema}",public')
    judge("r1", "A", {"v": "good"})
    with psycopg.connect(judge.uri, autocommit=True) as conn:
        for table in reversed(list(table_names(judge.prefix).values())):
            conn.execute(f'DROP TABLE IF EXISTS public."{table}" CASCADE')
        conn.execute(f'CREATE SCHEMA "{schema}"')
    try:
        assert judge("r1", "A", {"v": "good"}, connection_string=uri).gates["v"].passed
        with psycopg.connect(uri, autocommit=True) as conn:
            where = conn.execute(
                "SELECT n.nspname, c.relnamespace::regnamespace::text FROM pg_trigger t"
                " JOIN pg_proc p ON p.oid = t.tgfoid JOIN pg_namespace n ON n.oid = p.pronamespace"
                " JOIN pg_class c ON c.oid = t.tgrelid"
                " WHERE t.tgname = %s", (judge.prefix + _SUFFIX,)).fetchone()
        assert where == ("public", f'"{schema}"'), where  # public's function, the schema's table
        r4, placed = _the_slide_after_an_older_install_acceptance(judge, uri=uri)
        (r2_seq, position), (r3_seq, _) = placed["r2"], placed["r3"]
        assert r2_seq < position < r3_seq, placed
        assert r4.gates["v"].state == "comparable" and not r4.gates["v"].passed, _why(r4)
    finally:
        with psycopg.connect(judge.uri, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def test_a_renamed_sequence_is_found_when_the_trigger_fires(judge):
    """The measurements' sequence renamed (``ALTER SEQUENCE ... RENAME``): the trigger finds it
    through the table's column when it fires, the log's default follows it by oid, and r4 fails."""
    judge("r1", "A", {"v": "good"})
    with psycopg.connect(judge.uri, autocommit=True) as conn:
        sequence = conn.execute("SELECT pg_get_serial_sequence(%s, 'seq')",
                                (f"{judge.prefix}_measurements",)).fetchone()[0]
        conn.execute(f'ALTER SEQUENCE {sequence} RENAME TO "{judge.prefix}_renamed_seq"')
    r4, placed = _the_slide_after_an_older_install_acceptance(judge)
    (r2_seq, position), (r3_seq, _) = placed["r2"], placed["r3"]
    assert r2_seq < position < r3_seq, placed
    assert r4.gates["v"].state == "comparable" and not r4.gates["v"].passed, _why(r4)


def test_a_role_without_the_sequence_records_but_cannot_accept_and_the_drop_still_fails(judge, other_role):
    """A role granted the history's tables (``GRANT ... ON ALL TABLES``) but not its sequences
    records (an identity column needs no sequence privilege) but cannot accept: ``accept`` draws a
    position (``nextval``), "accepting run 'r2' failed: InsufficientPrivilege", nothing stamped or logged (loud, the
    owner accepts); r3 (0.90) after r2 (0.90, failed, not accepted) still fails against r1."""
    from eval_pipeline.history.runs import accept_reference, table_names

    judge("r1", "A", {"v": "good"})
    with psycopg.connect(judge.uri, autocommit=True) as conn:
        for table in table_names(judge.prefix).values():
            if conn.execute("SELECT to_regclass(%s) IS NOT NULL", (table,)).fetchone()[0]:
                conn.execute(f'GRANT SELECT, INSERT, UPDATE, DELETE ON "{table}" TO "{other_role}"')
    uri = _as_role(judge.uri, other_role)
    assert not judge("r2", "A", {"v": "good"}, hits={"v": 90}, connection_string=uri).gates["v"].passed
    with pytest.raises(Exception, match="InsufficientPrivilege"):
        accept_reference(uri, "r2", variants=["v"], prefix=judge.prefix)
    with psycopg.connect(judge.uri, autocommit=True) as conn:
        stamped = conn.execute(f'SELECT count(*) FROM "{judge.prefix}_measurements" WHERE accepted_at IS NOT NULL'
                               ).fetchone()[0]
        logged = conn.execute(f'SELECT count(*) FROM "{judge.prefix}_references"').fetchone()[0]
    assert (stamped, logged) == (0, 0)
    r3 = judge("r3", "A", {"v": "good"}, hits={"v": 90}, connection_string=uri, record=False)
    assert not r3.gates["v"].passed, _why(r3)


def test_an_archive_read_under_its_own_prefix_places_its_acceptances_in_its_own_sequence(judge):
    """The archive (tables renamed to ``<prefix>_old``) judged under its own prefix: its table's
    trigger named after the old prefix (its former life's) is dropped on first contact, and it gets
    one of its own, drawing from the archive's sequence whatever the new history's. r2 accepted by
    an older install in the archive is placed in it, and r4 (-0.10) fails."""
    archive = judge.prefix + "_old"
    try:
        judge("r1", "A", {"v": "good"})
        _archive(judge, archive)  # the archive's sequence at 10000
        assert judge("r1", "A", {"v": "good"}).gates["v"].passed  # the new history, its own sequence
        r4, placed = _the_slide_after_an_older_install_acceptance(judge, prefix=archive, runs=("a2", "a3", "a4"))
        (r2_seq, position), (r3_seq, _) = placed["r2"], placed["r3"]
        assert r2_seq < position < r3_seq, placed
        assert r4.gates["v"].state == "comparable" and not r4.gates["v"].passed, _why(r4)
        with psycopg.connect(judge.uri, autocommit=True) as conn:
            triggers = conn.execute("SELECT count(*) FROM pg_trigger WHERE tgrelid = to_regclass(%s)"
                                    " AND tgname LIKE '%%place_acceptance'", (f"{archive}_measurements",)).fetchone()[0]
        assert triggers == 1  # its own: the old prefix's, from its former life, dropped on first contact
    finally:
        _drop_archive(judge, archive)
