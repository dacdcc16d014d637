"""The one history of measurements: retrieval and answers in one table, judged by one rule.

A **measurement** is what one run measured of one variant under one aspect: ``retrieval``,
or ``answers:<grader>``. Both aspects are rows of the same table, with the same columns,
found as yardsticks by the same query, made eligible by the same rule and accepted through
the same record, so the two gates cannot drift apart::

    {prefix}_measurements      run_id, variant, aspect (PRIMARY KEY), seq (insertion order),
                               created_at, corpus_signature, benchmark_id, benchmark,
                               instrument, configuration, generator, limited, errored,
                               eligible, n_scored, accepted_at, accepted_position,
                               variant_config, provenance
    {prefix}_variant_metrics   run_id, variant, aspect, metric, value, ci_low, ci_high: the
                               numbers of a measurement (deleted with it)

What each column holds, by aspect:

============== ================================== ========================================
column         retrieval                          answers:<grader>
============== ================================== ========================================
benchmark_id   ``questions``                      the golden set's id
benchmark      the content fingerprint of the     the golden set's fingerprint (every
               scored questions (texts, golds,    prompt and assertion)
               grades, tuning split)
instrument     the scoring protocol               the grader's yardstick (its version, and
                                                  its model for one that spends tokens)
generator      NULL                               the generating model (a treatment)
errored        questions that errored             answers that could not be generated or graded
n_scored       questions scored                   answers graded
============== ================================== ========================================

**Comparable** (one rule): two measurements of a variant are each other's yardstick only with
the same aspect and the same identity, :data:`IDENTITY_FIELDS` (corpus, benchmark id,
benchmark, instrument), every one of them known. **Usable** as a yardstick (one rule): not
limited, nothing errored, and eligible (its run's whole verdict passed) or accepted by a user;
an answer measurement needs its generator known too. **A variant's history** is its name's, or,
with its configuration fingerprint, that of another name with the same configuration (a
rename keeps its history); a rename records the name it inherited (``provenance.inherits``)
and the lineage follows those records back. **Accepted** (one record): :func:`accept` stamps
``accepted_at`` and logs who accepted what, when and why in ``{prefix}_references``; the
latest acceptance is the pinned reference, whatever order the runs ran in. **Order** (one
sequence): measurements are numbered by ``seq`` and every acceptance takes its position
(``accepted_position``, the log's ``position``) from the same sequence, so what happened after
what is read from positions, never from a server clock that may have stepped.

A history recorded before this table existed (``{prefix}_runs`` with a per-run
``{prefix}_variant_metrics``, and ``{prefix}_answer_runs``) is upgraded in place, in one
transaction, on first contact: every run's variants and every answer row become measurements
in the order they were recorded, their acceptances kept, so no variant with a history becomes
a first run. The old answer table keeps its rows and refuses new ones (a process still on the
older code fails loudly rather than record answers no one reads), as the metrics table, now
keyed by aspect, refuses the older code's retrieval records.
"""

from __future__ import annotations

import hashlib
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from contextvars import ContextVar
from typing import Any, Literal, NamedTuple

import psycopg
from psycopg import sql
from psycopg.types.json import Jsonb

from eval_pipeline.store.database import DatabaseError, connect

__all__ = [
    "IDENTITY_FIELDS",
    "RETRIEVAL",
    "Yardstick",
    "accept",
    "answers_aspect",
    "connection",
    "create",
    "earlier_names",
    "find",
    "recorded_of",
    "session",
    "write",
]

RETRIEVAL = "retrieval"
_ANSWERS = "answers:"
# the numbers of every answer measurement, in [0, 1]
ANSWER_METRICS = ("pass_rate", "mean_score")
# What makes two measurements of a variant measure the same thing (besides the aspect).
IDENTITY_FIELDS = ("corpus_signature", "benchmark_id", "benchmark", "instrument")
# The benchmark id of every retrieval measurement: its benchmark is the scored question set.
RETRIEVAL_BENCHMARK_ID = "questions"
COLUMNS = ("run_id", "variant", "aspect", *IDENTITY_FIELDS, "configuration", "generator", "limited", "errored",
           "eligible", "n_scored", "variant_config", "provenance")

Order = Literal["latest", "reference"]


# The states of a gate that compared numbers (directly, or with the configuration ranked today):
# a failure in one of them is a measured regression, which is accepted only by naming the variant.
MEASURED_STATES = ("comparable", "paired")


def failed_measured(passed: object, state: object) -> bool:
    """Whether a gate (or its recorded ``passed`` and ``state``) failed a measured comparison."""
    return passed is False and state in MEASURED_STATES


def answers_aspect(grader: str) -> str:
    """The aspect of ``grader``'s answer measurements."""
    return f"{_ANSWERS}{grader}"


# The SQL LIKE pattern of every answer aspect: one record call replaces them all for its run,
# as one replaces its run's retrieval measurements (pattern ``retrieval``).
ANSWER_ASPECTS = f"{_ANSWERS}%"


# --------------------------------------------------------------------------
# one connection for a verdict's questions
# --------------------------------------------------------------------------

# The open session's connections (connection string -> connection); None outside a session.
_SESSION: ContextVar[dict[str, Any] | None] = ContextVar("history_session", default=None)


@contextmanager
def session() -> Iterator[None]:
    """Within it, the history's lookups share one connection per connection string (in
    autocommit: a lookup reads, and whatever writes takes its own transaction). A verdict asks
    the history about 180 questions; each on a new connection cost about 4 ms more. Every
    lookup still asks whether the history exists and is whole (one round trip), so a history
    damaged during a long verdict is refused as on a connection of its own. Nested sessions
    are one; the connections close at its end."""
    if _SESSION.get() is not None:
        yield
        return
    opened: dict[str, Any] = {}
    token = _SESSION.set(opened)
    try:
        yield
    finally:
        _SESSION.reset(token)
        for conn in opened.values():
            conn.close()


@contextmanager
def connection(connection_string: str) -> Iterator[Any]:
    """A connection for a lookup: the session's shared one, else a new one closed at the end.
    Each lookup on a shared connection is one transaction, as on a connection of its own: where
    the server's default isolation is REPEATABLE READ its statements read one snapshot (autocommit
    alone would let a rewrite committed between two of them be read). That transaction's BEGIN is
    also the check before reuse (no round trip of its own): a connection the server ended while it
    sat idle (an idle timeout, a pooler, a restart during the paired rankings) fails it, and is
    replaced before the lookup sends anything."""
    opened = _SESSION.get()
    if opened is None:
        with connect(connection_string) as conn:
            yield conn
        return
    # one lookup, one transaction, as on a connection of its own; entered inside the `with`, so that
    # nothing (an interrupt, a signal handler's exception) can leave its BEGIN unprotected
    with ExitStack() as lookup:
        conn = opened.get(connection_string)
        if conn is not None and not (conn.closed or conn.broken):
            try:
                lookup.enter_context(conn.transaction())  # its BEGIN: where the server ended the connection, this fails
            except psycopg.OperationalError:
                conn.close()
        if conn is None or conn.closed or conn.broken:
            # prepare_threshold=None: nothing prepared on the server, where a transaction-mode pooler
            # may hand the next statement to a server connection that never saw it
            conn = opened[connection_string] = connect(connection_string, autocommit=True, prepare_threshold=None)
            lookup.enter_context(conn.transaction())
        yield conn


# --------------------------------------------------------------------------
# the table, and the upgrade of an older history
# --------------------------------------------------------------------------


def _ident(names: Mapping[str, str]) -> dict[str, sql.Identifier]:
    return {key: sql.Identifier(value) for key, value in names.items()}


def _exists(conn: Any, table: str) -> bool:
    return bool(conn.execute("SELECT to_regclass(%s) IS NOT NULL", (table,)).fetchone()[0])


def has_column_sql(table_parameter: str, column: str) -> str:
    """SQL: whether the table named by the query parameter ``table_parameter`` (as the search path
    resolves it: the table every query here reads, not a same-named one in another schema) has
    ``column`` (an identifier from this code, never from input)."""
    if not column.isidentifier():
        raise ValueError(f"not a column name: {column!r}")
    return (f"EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = to_regclass(%({table_parameter})s) "
            f"AND attname = '{column}' AND attnum > 0 AND NOT attisdropped)")


def has_column(conn: Any, table: str, column: str) -> bool:
    """Whether ``table`` has ``column`` (:func:`has_column_sql`)."""
    return bool(conn.execute("SELECT " + has_column_sql("table", column), {"table": table}).fetchone()[0])


def create(conn: Any, names: Mapping[str, str], *, legacy_answers: str, eligible_sql: str) -> None:
    """Create the measurements and their metrics table (idempotent), upgrading an older history
    in place. Runs inside the caller's transaction, under its advisory lock; ``{runs}`` and
    ``{questions}`` exist already. ``eligible_sql`` is the run-level eligibility of a legacy
    run ``r`` (rows recorded before eligibility was stored compute it)."""
    t = _ident(names)
    fresh = not _exists(conn, names["measurements"])
    conn.execute(sql.SQL(
        """CREATE TABLE IF NOT EXISTS {measurements} (
            run_id text NOT NULL,
            variant text NOT NULL,
            aspect text NOT NULL CHECK (aspect = 'retrieval' OR aspect LIKE 'answers:_%'),
            seq bigint GENERATED ALWAYS AS IDENTITY UNIQUE,
            created_at timestamptz NOT NULL DEFAULT now(),
            corpus_signature text,
            benchmark_id text,
            benchmark text,
            instrument text,
            configuration text,
            generator text,
            limited boolean NOT NULL,
            errored integer NOT NULL CHECK (errored >= 0),
            eligible boolean NOT NULL,
            n_scored integer NOT NULL CHECK (n_scored >= 0),
            accepted_at timestamptz,
            variant_config jsonb NOT NULL DEFAULT '{{}}'::jsonb,
            provenance jsonb NOT NULL DEFAULT '{{}}'::jsonb,
            PRIMARY KEY (run_id, variant, aspect),
            CONSTRAINT {check} CHECK (NOT eligible OR (NOT limited AND errored = 0 AND (aspect = 'retrieval'
                OR (generator IS NOT NULL AND corpus_signature IS NOT NULL AND n_scored > 0))))
        )""").format(measurements=t["measurements"], check=sql.Identifier(f"{names['measurements']}_eligible_check")))
    conn.execute(sql.SQL("CREATE INDEX IF NOT EXISTS {idx} ON {measurements} (variant, aspect, seq)").format(
        idx=sql.Identifier(f"{names['measurements']}_variant_idx"), measurements=t["measurements"]))
    legacy_metrics = _exists(conn, names["metrics"]) and not has_column(conn, names["metrics"], "aspect")
    if not legacy_metrics:
        conn.execute(sql.SQL(
            """CREATE TABLE IF NOT EXISTS {metrics} (
                run_id text NOT NULL,
                variant text NOT NULL,
                aspect text NOT NULL,
                metric text NOT NULL,
                value double precision,
                ci_low double precision,
                ci_high double precision,
                PRIMARY KEY (run_id, variant, aspect, metric),
                CONSTRAINT {fkey} FOREIGN KEY (run_id, variant, aspect)
                    REFERENCES {measurements} (run_id, variant, aspect) ON DELETE CASCADE
            )""").format(metrics=t["metrics"], measurements=t["measurements"],
                         fkey=sql.Identifier(f"{names['metrics']}_measurement_fkey")))
    if fresh:
        _upgrade(conn, names, legacy_metrics=legacy_metrics,
                 legacy_answers=legacy_answers if _exists(conn, legacy_answers) else None, eligible_sql=eligible_sql)
    # a measurement recorded before its history was distrusted (`_distrust_everything_recorded`): no
    # yardstick, eligible or accepted, until its run is accepted again
    flagged = has_column(conn, names["measurements"], "distrusted")
    conn.execute(sql.SQL("ALTER TABLE {measurements} ADD COLUMN IF NOT EXISTS distrusted boolean NOT NULL"
                         " DEFAULT false").format(**t))
    if not flagged and clock_checked(conn, names):
        # marked by 4fafd48..dea2bc0^, whose distrust wiped eligibility and moved positions and left some
        # acceptances trusted (one with no run row, one only logged): which rows it distrusted is not
        # recorded, so every row recorded so far is distrusted now, once (the column is added once)
        _distrust_everything_recorded(conn, names)
    if not has_column(conn, names["references"], "position"):
        _place_acceptances(conn, names)
    else:
        check_placement_once(conn, names)
    restore_placement_trigger(conn, names)


def _place_acceptances(conn: Any, names: Mapping[str, str]) -> None:
    """Give every acceptance its position in the history (:data:`ACCEPTED_POSITION`): the
    measurement row's ``accepted_position`` and the log's ``position``, from then on drawn from
    the sequence that numbers the measurements by :func:`accept`, and, for a writer that knows
    no positions (an older install), by the log's column default and the row's trigger
    (:func:`_create_placement_trigger`).

    Acceptances made before positions existed can only be placed by their time, and a clock
    that ran ahead makes a stamp too late, never too early; placed too late, an old acceptance
    would pass for one made after runs it preceded. So each goes after the last measurement
    recorded by its stamp, but never after a later log entry's place (a running minimum from
    the log's end: the log's order is kept, and a stamp is only ever moved earlier, which makes
    a later run "not accepted since": not compared, never passed); a stamp with no log entry
    goes after every log entry placed after the same measurement, and so does a row stamped
    later than all of its own log entries (an entry deleted from the log stays a conflict).
    Runs once, in the caller's transaction."""
    t = _ident(names)
    conn.execute(sql.SQL("ALTER TABLE {measurements} ADD COLUMN IF NOT EXISTS accepted_position double precision")
                 .format(**t))
    conn.execute(sql.SQL("ALTER TABLE {references} ADD COLUMN IF NOT EXISTS position double precision").format(**t))

    def after(stamp: str) -> str:
        """SQL: the last measurement recorded by the time in column ``stamp``: the acceptance comes after it."""
        return f"COALESCE((SELECT max(x.seq) FROM {{measurements}} x WHERE x.created_at <= {stamp}), 0)"

    conn.execute(sql.SQL(
        "WITH placed AS (SELECT f.seq, " + after("f.accepted_at") + " AS after FROM {references} f),"
        " bounded AS (SELECT seq, min(after) OVER (ORDER BY seq DESC) AS after FROM placed),"
        " ranked AS (SELECT seq, after, row_number() OVER (PARTITION BY after ORDER BY seq) AS k,"
        "  count(*) OVER (PARTITION BY after) AS n FROM bounded)"
        # log entries in (after, after + 0.5), a stamp with no log entry at after + 0.75
        " UPDATE {references} f SET position = r.after + 0.5 * r.k::double precision / (r.n + 1)"
        " FROM ranked r WHERE f.seq = r.seq").format(**t))
    # a row stamped later than every entry of its own in the log, with a measurement recorded or an
    # acceptance logged in between, was accepted again with that entry deleted. Nothing in between:
    # the same acceptance (the code before 3eb5cd5 stamped an answer row with clock_timestamp() and
    # logged it with now(), the transaction's start: a little earlier), or one no order can tell apart.
    latest_logged = ("(SELECT max(f.accepted_at) FROM {references} f WHERE f.run_id = m.run_id"
                     " AND f.variant = m.variant AND f.aspect = m.aspect)")
    in_between = (f"(EXISTS (SELECT 1 FROM {{measurements}} x WHERE x.created_at > {latest_logged}"
                  " AND x.created_at <= m.accepted_at)"
                  f" OR EXISTS (SELECT 1 FROM {{references}} g WHERE g.accepted_at > {latest_logged}"
                  " AND g.accepted_at <= m.accepted_at))")
    conn.execute(sql.SQL(
        "UPDATE {measurements} m SET accepted_position = CASE WHEN " + LOGGED_POSITION + " IS NULL"
        f" OR (m.accepted_at > {latest_logged} AND {in_between})"
        " THEN " + after("m.accepted_at") + " + 0.75 ELSE " + LOGGED_POSITION + " END"
        " WHERE m.accepted_at IS NOT NULL").format(**t))
    if _clock_stepped(conn, names):
        _distrust_everything_recorded(conn, names)
    _mark_clock_checked(conn, names)
    conn.execute(sql.SQL("ALTER TABLE {references} ALTER COLUMN position SET DEFAULT nextval({sequence}::regclass)")
                 .format(sequence=sql.Literal(_sequence(conn, names)), **t))


def _distrust_everything_recorded(conn: Any, names: Mapping[str, str]) -> None:
    """What a history gets whose acceptances were placed by time on a clock that stepped, or may
    have: no acceptance's place can be trusted, nor the order of runs recorded around the step.
    Every measurement recorded so far is ``distrusted``: no yardstick at all (`USABLE`), however
    it was recorded (eligible or not) and accepted (stamped, logged, both, with a run row or
    without), until its run is accepted again (`accept` clears it); each variant has run, so it is
    not new: not compared until a run is accepted. What each row recorded (eligible, accepted,
    the log) is left as it was, for the people reading it and for the rules that read it as
    such (which graders a variant has: `answers.answer_graders_of`). Done once
    (`CLOCK_CHECKED_SQL`): done again, it would take back every acceptance made since."""
    conn.execute(sql.SQL("UPDATE {measurements} SET distrusted = true WHERE NOT distrusted").format(**_ident(names)))


# The mark this version leaves once a history's acceptances are placed and its older stamps checked
# for a clock step: a constraint on the acceptance log that holds for every row and names its
# ``position`` column (dropped with it; renamed with it, and then no longer counted), named
# ``<log>_clock_checked`` (4fafd48..364fdcb^ made it ``CHECK (true)``: it counts the same). A
# constraint, not a comment: every dump and copy of the table's definition keeps it (``pg_dump
# --no-comments`` drops comments), and it stays with the table under another name (an archive
# renamed into another prefix keeps its family's suffix). 87cb394..e89ab96^ placed acceptances
# without that check, and e89ab96..f19148d^ with it but left no mark (f19148d's was a comment):
# nothing tells them apart, so a history placed by either is distrusted once on contact
# (`check_placement_once`).
_CLOCK_CHECKED_SUFFIX = "_clock_checked"
# SQL: whether the history (the query parameter ``references``: its acceptance log) has the mark.
# It counts only while it names the log's current ``position`` column (a column renamed by hand
# takes the constraint with it, and an older install then places the history again under a new
# ``position``, by time, unchecked) or no column at all (4fafd48..364fdcb^'s ``CHECK (true)``).
_A_MARK = ("pg_constraint c WHERE c.conrelid = to_regclass(%(references)s) AND c.contype = 'c'"
           f" AND right(c.conname, {len(_CLOCK_CHECKED_SUFFIX)}) = '{_CLOCK_CHECKED_SUFFIX}'")
# SQL: the number of the log's ``position`` column (NULL without one); both marks name it.
_POSITION_ATTNUM = ("(SELECT a.attnum FROM pg_attribute a WHERE a.attrelid = to_regclass(%(references)s)"
                    " AND a.attname = 'position' AND NOT a.attisdropped)")
_NAMES_POSITION = f"{_POSITION_ATTNUM} = ANY (c.conkey)"
CLOCK_CHECKED_SQL = (f"EXISTS (SELECT 1 FROM {_A_MARK}"
                     f" AND (COALESCE(cardinality(c.conkey), 0) = 0 OR {_NAMES_POSITION}))")
# SQL: whether the history has this version's mark, the one naming ``position`` (an older
# ``CHECK (true)`` mark counts, but is replaced by this one on the owner's contact: it would
# count whatever later happens to the column).
_NAMING_MARK_SQL = f"EXISTS (SELECT 1 FROM {_A_MARK} AND {_NAMES_POSITION})"


def clock_checked(conn: Any, names: Mapping[str, str]) -> bool:
    """Whether the history's acceptances were placed by this version, its stamps checked for a
    clock step (:data:`CLOCK_CHECKED_SQL`)."""
    return bool(conn.execute("SELECT " + CLOCK_CHECKED_SQL, dict(names)).fetchone()[0])


# f19148d's mark (a comment on the log's ``position`` column), left beside this version's: an
# f19148d install that met a history without it would distrust it by its own means (eligibility
# wiped, flag-only stamps moved), under this version's rules too.
_F19148D_MARK = "eval-pipeline: acceptances placed; the stamps before them checked for a clock step"


# SQL: whether the history carries f19148d's mark too.
_F19148D_MARKED_SQL = (f"COALESCE(col_description(to_regclass(%(references)s), {_POSITION_ATTNUM}::integer)"
                       f" = '{_F19148D_MARK}', false)")
# SQL: whether the history carries both marks (this version's, naming ``position``, and f19148d's):
# `runs.history_exists`.
BOTH_MARKS_SQL = f"({_NAMING_MARK_SQL} AND {_F19148D_MARKED_SQL})"


def _leave_f19148d_mark(conn: Any, names: Mapping[str, str]) -> None:
    conn.execute(sql.SQL("COMMENT ON COLUMN {references}.position IS {mark}").format(
        mark=sql.Literal(_F19148D_MARK), **_ident(names)))


def _mark_clock_checked(conn: Any, names: Mapping[str, str]) -> None:
    """Mark the history as placed by this version, its clock checked (both marks: f19148d's and
    this version's), in the caller's transaction; the tables' owner only. This version's names
    the ``position`` column (always true), so dropping that column by hand drops the mark too,
    and renaming it leaves a mark that no longer counts: such a stale mark, and an older
    ``CHECK (true)`` one (which would count whatever happens to the column), are replaced."""
    _leave_f19148d_mark(conn, names)
    if conn.execute("SELECT " + _NAMING_MARK_SQL, dict(names)).fetchone()[0]:
        return  # f19148d's comment was all it lacked
    t = _ident(names)
    for (stale,) in conn.execute(f"SELECT c.conname FROM {_A_MARK}", dict(names)).fetchall():
        conn.execute(sql.SQL("ALTER TABLE {references} DROP CONSTRAINT {mark}").format(mark=sql.Identifier(stale), **t))
    conn.execute(sql.SQL("ALTER TABLE {references} ADD CONSTRAINT {mark} CHECK (position IS NULL OR position IS NOT"
                         " NULL)").format(mark=sql.Identifier(names["references"] + _CLOCK_CHECKED_SUFFIX), **t))


# The way out of a refusal only the history's owner can end.
_OWNERS_CONTACT = ("as the owner, run python -m eval_pipeline.history --url-env VAR runs with the owner's database "
                   "URL in VAR (and --prefix, for a history under another prefix than eval), or any run of the job")


def _complete_the_marks(conn: Any, names: Mapping[str, str]) -> None:
    """On a history already checked, leave what marks it lacks: f19148d's (marked by
    4fafd48..a7f1507^, or its comment lost in a dump), so an f19148d install never distrusts it
    by its own means; and this version's in place of an older ``CHECK (true)``
    (4fafd48..364fdcb^), which names no column and so would still count after ``position`` is
    renamed by hand and an older install places the history again, unchecked. Its owner only:
    anyone else reads on without f19148d's mark (it protects only against that install), and is
    refused (:class:`DatabaseError`) on a history whose only mark is ``CHECK (true)`` until the
    owner's contact replaces it."""
    marked, named, owner = conn.execute(
        "SELECT " + _F19148D_MARKED_SQL + ", " + _NAMING_MARK_SQL + ", pg_has_role((SELECT relowner FROM pg_class"
        " WHERE oid = to_regclass(%(references)s)), 'MEMBER')", dict(names)).fetchone()
    if marked and named:
        return
    refused = "not the tables' owner"
    if owner:
        try:
            with _under_the_history_lock(conn, names):
                _mark_clock_checked(conn, names)
            return
        except (psycopg.errors.InsufficientPrivilege, psycopg.errors.ReadOnlySqlTransaction) as exc:
            refused = type(exc).__name__
    if not named:  # only CHECK (true): read on, and an older install's re-placement would pass unseen
        raise DatabaseError(
            f"the history {names['measurements']} carries a mark of an older version (2026-12-06) that names no "
            f"column, which only its tables' owner can replace, and this connection cannot ({refused}): "
            f"{_OWNERS_CONTACT}")


@contextmanager
def _under_the_history_lock(conn: Any, names: Mapping[str, str]) -> Iterator[None]:
    """A savepoint (a transaction when the caller has none) holding the history's advisory lock,
    the one its first writers take: a repair of the history made once, by one process, and rolled
    back whole when it fails (the caller's transaction left usable)."""
    savepoint = (conn.connection if isinstance(conn, psycopg.Cursor) else conn).transaction
    with savepoint():
        conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (names["runs"],))
        yield


def check_placement_once(conn: Any, names: Mapping[str, str]) -> None:
    """Distrust, once, what a history placed without this version's mark holds (by 87cb394..e89ab96^:
    acceptances placed by their times with no check of the clock; e89ab96..f19148d^ checked but
    left no mark that can be told from theirs: :data:`CLOCK_CHECKED_SQL`), then mark it.

    Checking its stamps now cannot stand in for the check it missed: what showed the step may be
    gone since (a legacy table the placement read, dropped as closed), and rows recorded since by
    position would be read as if placed by time. So everything it recorded so far is distrusted
    (`_distrust_everything_recorded`: each variant not compared until a run is accepted), whether
    its clock stepped or not: the cost is one accept per variant, once. The marking and the mark
    are one savepoint, so it never runs twice (it would take back acceptances made since). A role
    that cannot leave the mark (not the tables' owner, a read-only connection) leaves nothing and
    is refused (:class:`DatabaseError`: the verdict fails closed) until the owner's contact, even
    on a history with nothing recorded (what it recorded would be distrusted then)."""
    if clock_checked(conn, names):
        _complete_the_marks(conn, names)
        return
    try:
        with _under_the_history_lock(conn, names):
            if clock_checked(conn, names):
                return
            _distrust_everything_recorded(conn, names)
            _mark_clock_checked(conn, names)
    except (psycopg.errors.InsufficientPrivilege, psycopg.errors.ReadOnlySqlTransaction) as exc:
        # refused even with nothing recorded yet: what this role recorded now would be distrusted by
        # the owner's first contact
        raise DatabaseError(
            f"the history {names['measurements']} was placed by a version of 2026-12-06 that left no mark of "
            "checking the clock its acceptances were placed by, so nothing in it can be trusted until its "
            f"tables' owner marks it, and this connection cannot ({type(exc).__name__}): {_OWNERS_CONTACT}; "
            "then accept a run of each variant") from None


# How far a stamp may fall behind the one recorded before it (by the table's own numbering)
# before the clock is taken to have stepped: concurrent writers stamp their transaction's start,
# so a row numbered later may carry a stamp a few seconds earlier.
CLOCK_STEP = "interval '1 minute'"


def _clock_stepped(conn: Any, names: Mapping[str, str]) -> bool:
    """Whether an older history's clock stepped (set back, or corrected after it ran ahead): a
    stamp more than `CLOCK_STEP` earlier than one numbered before it in its own table (the old
    runs and answer tables, the measurements, the acceptance log), or an acceptance stamped
    before its measurement was recorded. Its acceptances were placed by time, which then
    cannot be trusted."""
    checks = []
    for table, stamp in (("runs", "created_at"), ("answer_runs", "created_at"), ("measurements", "created_at"),
                         ("references", "accepted_at")):
        if _exists(conn, names[table]) and has_column(conn, names[table], stamp):
            checks.append(sql.SQL(
                "EXISTS (SELECT 1 FROM (SELECT {stamp} AS at, max({stamp}) OVER (ORDER BY seq ROWS BETWEEN"
                " UNBOUNDED PRECEDING AND 1 PRECEDING) AS before FROM {table}) x"
                " WHERE x.at < x.before - " + CLOCK_STEP + ")").format(
                    stamp=sql.Identifier(stamp), table=sql.Identifier(names[table])))
    checks.append(sql.SQL(
        "EXISTS (SELECT 1 FROM {references} f JOIN {measurements} m ON m.run_id = f.run_id"
        " AND m.variant = f.variant AND m.aspect = f.aspect WHERE f.accepted_at < m.created_at - "
        + CLOCK_STEP + ")").format(**_ident(names)))
    return bool(conn.execute(sql.SQL("SELECT ") + sql.SQL(" OR ").join(checks)).fetchone()[0])


_TRIGGER_SUFFIX = "_place_acceptance"
# The placement function's body: it names no table and no sequence (it finds the sequence of the
# table it fires on when it fires), so one function serves any history of its prefix.
# An older install's acceptance (a new stamp, its position drawn by itself or not) is an
# acceptance: it ends the row's distrust as `accept` does. The one stamp change that is not one:
# e89ab96..dea2bc0^'s own distrust, which moved a flag-only stamp (one equal to its row's
# creation) by 1 microsecond and set its position in the same statement. (5f6eaca..87cb394^
# stamped a re-acceptance 1 microsecond past the latest stamp when the clock had stepped back:
# that one moves no position, and ends the distrust.)
_PLACEMENT_BODY = (
    "BEGIN IF NEW.accepted_at IS NOT NULL AND NEW.accepted_at IS DISTINCT FROM OLD.accepted_at"
    " AND NOT COALESCE(OLD.accepted_at = OLD.created_at AND NEW.accepted_at = OLD.accepted_at"
    " + interval '1 microsecond' AND NEW.accepted_position IS DISTINCT FROM OLD.accepted_position, false)"
    " THEN NEW.distrusted := false; END IF;"
    " IF NEW.accepted_at IS NOT NULL AND NEW.accepted_position IS NOT DISTINCT FROM OLD.accepted_position"
    " THEN NEW.accepted_position := nextval(pg_get_serial_sequence("
    "quote_ident(TG_TABLE_SCHEMA) || '.' || quote_ident(TG_TABLE_NAME), 'seq')); END IF; RETURN NEW; END")
# The function's name carries its body's digest: a function an older version of this code left
# under the history's name (a body naming one sequence, which after an archive by rename is
# another history's) is never found by name and reused; a body changed later gets a name of its
# own. At most 43 + 7 + 8 bytes: within Postgres's 63.
_PLACEMENT_DIGEST = hashlib.sha256(_PLACEMENT_BODY.encode()).hexdigest()[:8]
_FUNCTION_SUFFIX = "_place_" + _PLACEMENT_DIGEST
# Every history's trigger is named so (``<prefix>_measurements_place_acceptance``); a table renamed
# from another prefix (an archive) keeps its former life's, which fires before or after this
# one's by name and may draw from another history's sequence.
_TRIGGER_FAMILY = "_measurements" + _TRIGGER_SUFFIX
# SQL: whether the measurements table (the query parameter ``measurements``) has the trigger that
# places an acceptance as this version makes it, and no other of its family: named for the
# table, enabled, BEFORE UPDATE OF accepted_at FOR EACH ROW (``tgtype`` 19, ``tgattr``) with no
# WHEN condition, calling this version's function
# (its name and its body's digest). A history upgraded without it, whose trigger was dropped,
# disabled or bound by an older version to its own function, or which carries a trigger of
# another prefix, gets it back on first contact (`runs.history_exists`). What a connection that
# cannot restore it reads is safe anyway: a row's position above its log entry's is an
# acceptance missing from the log (`_latest_acceptance`).
HAS_PLACEMENT_TRIGGER_SQL = (
    "(EXISTS (SELECT 1 FROM pg_trigger t JOIN pg_proc p ON p.oid = t.tgfoid"
    f" WHERE t.tgrelid = to_regclass(%(measurements)s) AND t.tgname = %(measurements)s || '{_TRIGGER_SUFFIX}'"
    " AND t.tgenabled IN ('O', 'A') AND t.tgtype = 19 AND t.tgqual IS NULL"
    " AND t.tgattr::text = (SELECT a.attnum::text FROM pg_attribute a WHERE a.attrelid = t.tgrelid"
    "  AND a.attname = 'accepted_at')"
    f" AND p.proname = %(measurements)s || '{_FUNCTION_SUFFIX}'"
    f" AND left(encode(sha256(convert_to(p.prosrc, 'UTF8')), 'hex'), 8) = '{_PLACEMENT_DIGEST}')"
    " AND NOT EXISTS (SELECT 1 FROM pg_trigger o WHERE o.tgrelid = to_regclass(%(measurements)s)"
    f" AND NOT o.tgisinternal AND right(o.tgname, {len(_TRIGGER_FAMILY)}) = '{_TRIGGER_FAMILY}'"
    f" AND o.tgname <> %(measurements)s || '{_TRIGGER_SUFFIX}'))")


def has_placement_trigger(conn: Any, names: Mapping[str, str]) -> bool:
    """Whether the measurements table has the trigger that places an acceptance."""
    return bool(conn.execute("SELECT " + HAS_PLACEMENT_TRIGGER_SQL, dict(names)).fetchone()[0])


def restore_placement_trigger(conn: Any, names: Mapping[str, str]) -> None:
    """Create the placement trigger when it is missing or calls another function than this
    version's (a history upgraded before it existed, one whose trigger was dropped, or one an
    older version bound to a function of its own, whose body may name another history's
    sequence). It only places an older install's acceptances (this
    version's :func:`accept` draws its positions itself), so a role that cannot create it (not
    the tables' owner; a read-only connection or a standby) reads and records on without it,
    warned: its owner restores it on its next contact."""
    if has_placement_trigger(conn, names):
        return
    try:
        with _under_the_history_lock(conn, names):
            if not has_placement_trigger(conn, names):
                _create_placement_trigger(conn, names)
    except (psycopg.errors.InsufficientPrivilege, psycopg.errors.ReadOnlySqlTransaction) as exc:
        warnings.warn(f"the history {names['measurements']} has no trigger of this version placing an older install's "
                      f"acceptances, and this connection cannot restore it ({exc}); its owner does on "
                      "its next contact", stacklevel=2)


def _trigger_name(names: Mapping[str, str]) -> str:
    return names["measurements"] + _TRIGGER_SUFFIX


def placement_function(names: Mapping[str, str]) -> str:
    """The name of the history's placement function (this version's body)."""
    return names["measurements"] + _FUNCTION_SUFFIX


def _create_placement_trigger(conn: Any, names: Mapping[str, str]) -> None:
    """The trigger that places every acceptance stamped on a measurement row by a writer that
    does not draw its position (an older install): every UPDATE that sets ``accepted_at``
    without a new ``accepted_position`` draws one from the sequence of the table it fires on
    (`_PLACEMENT_BODY`). Its function is the history's own (named after its table and its body):
    one shared by every history in the database could only be replaced by its owner, so another
    role's history could never be created. A trigger bound to another function (an older
    version's) is bound to this one."""
    t = _ident(names)
    trigger, function = sql.Identifier(_trigger_name(names)), sql.Identifier(placement_function(names))
    # created when missing: one left behind by a dropped history (DROP TABLE keeps a function) may
    # belong to another role, and the trigger needs only to run it; its name pins its body, so one of
    # that name with another body was written by hand, and is replaced (by its owner only)
    found = conn.execute("SELECT p.prosrc FROM pg_proc p WHERE p.oid = to_regprocedure(%s)",
                         (f'"{placement_function(names)}"()',)).fetchone()
    if found is None or found[0] != _PLACEMENT_BODY:
        conn.execute(sql.SQL("CREATE {replace}FUNCTION {function}() RETURNS trigger LANGUAGE plpgsql AS {body}").format(
            replace=sql.SQL("" if found is None else "OR REPLACE "), function=function,
            body=sql.Literal(_PLACEMENT_BODY)))
    # the family's triggers of the table's former lives (an archive renamed from another prefix)
    others = conn.execute("SELECT tgname FROM pg_trigger WHERE tgrelid = to_regclass(%s) AND NOT tgisinternal"
                          " AND right(tgname, %s) = %s AND tgname <> %s",
                          (names["measurements"], len(_TRIGGER_FAMILY), _TRIGGER_FAMILY, _trigger_name(names)))
    for (other,) in others.fetchall():
        conn.execute(sql.SQL("DROP TRIGGER {trigger} ON {measurements}").format(trigger=sql.Identifier(other), **t))
    conn.execute(sql.SQL("DROP TRIGGER IF EXISTS {trigger} ON {measurements}").format(trigger=trigger, **t))
    conn.execute(sql.SQL(
        "CREATE TRIGGER {trigger} BEFORE UPDATE OF accepted_at ON {measurements} FOR EACH ROW"
        " EXECUTE FUNCTION {function}()").format(trigger=trigger, function=function, **t))


def _sequence(conn: Any, names: Mapping[str, str]) -> str:
    """The sequence that numbers the measurements (``seq``): one sequence for every position."""
    return str(conn.execute("SELECT pg_get_serial_sequence(%s, 'seq')", (names["measurements"],)).fetchone()[0])


def _upgrade(conn: Any, names: Mapping[str, str], *, legacy_metrics: bool, legacy_answers: str | None,
             eligible_sql: str) -> None:
    """Copy an older history into the measurements, interleaved in the order it was recorded."""
    t = _ident(names)
    parts: list[str] = []
    if legacy_metrics:
        parts.append(
            "SELECT r.created_at AS at, r.seq AS n, 0 AS part, m.run_id, m.variant, 'retrieval' AS aspect,"
            f" r.created_at, r.corpus_signature, {RETRIEVAL_BENCHMARK_ID!r} AS benchmark_id,"
            " r.benchmark_fingerprint AS benchmark,"
            " r.scoring_protocol AS instrument, r.provenance->'configurations'->>m.variant AS configuration,"
            " NULL::text AS generator, r.limited,"
            " (SELECT count(*) FROM {questions} q WHERE q.run_id = m.run_id AND q.variant = m.variant"
            "  AND q.errored)::integer AS errored,"
            f" COALESCE(({eligible_sql}), false) AS eligible,"
            " (SELECT count(*) FROM {questions} q WHERE q.run_id = m.run_id AND q.variant = m.variant)::integer"
            "  AS n_scored,"
            " (SELECT max(f.accepted_at) FROM {references} f WHERE f.run_id = m.run_id AND f.variant = m.variant"
            "  AND f.aspect = 'retrieval') AS accepted_at,"
            " COALESCE(r.variants->m.variant, '{{}}'::jsonb) AS variant_config,"
            " jsonb_strip_nulls(jsonb_build_object('configuration', r.provenance->'configurations'->m.variant,"
            "  'inherits', r.provenance->'inherits'->m.variant, 'gate', r.provenance->'gate'->m.variant))"
            "  AS provenance"
            " FROM (SELECT DISTINCT run_id, variant FROM {metrics}) m JOIN {runs} r ON r.run_id = m.run_id")
    if legacy_answers is not None:
        parts.append(
            "SELECT a.created_at AS at, a.seq AS n, 1 AS part, a.run_id, a.variant, 'answers:' || a.grader,"
            " a.created_at, a.corpus_signature, a.set_id, a.set_fingerprint, a.yardstick,"
            " a.provenance->>'configuration', a.generator, a.limited, a.errored, a.eligible, a.n_scored,"
            # a table from before acceptances has neither column: read through its row as json
            " CASE WHEN COALESCE((to_jsonb(a)->>'accepted')::boolean, false)"
            "  THEN COALESCE((to_jsonb(a)->>'accepted_at')::timestamptz, a.created_at) END,"
            " a.variant_config, a.provenance FROM {answers} a")
    if not parts:
        return
    columns = ("run_id", "variant", "aspect", "created_at", *IDENTITY_FIELDS, "configuration", "generator",
               "limited", "errored", "eligible", "n_scored", "accepted_at", "variant_config", "provenance")
    conn.execute(sql.SQL(
        # Numbered by time, as `_place_acceptances` places the acceptances: the two must agree (each
        # table numbered in its own order and interleaved otherwise let a clock that ran ahead in one
        # table carry an acceptance past rows recorded after it: the twenty-sixth review).
        "INSERT INTO {measurements} ({columns}) SELECT {columns} FROM (" + " UNION ALL ".join(parts) + ") old"
        " ORDER BY at, part, n").format(
            columns=sql.SQL(", ").join(map(sql.Identifier, columns)),
            answers=sql.Identifier(legacy_answers or "-"), **t))
    if legacy_metrics:
        # the per-run metrics table becomes the measurements' own: keyed by aspect, deleted with them
        constraints = [row[0] for row in conn.execute(
            "SELECT conname FROM pg_constraint WHERE conrelid = %s::regclass AND contype IN ('p', 'f')",
            (names["metrics"],)).fetchall()]
        for name in constraints:
            conn.execute(sql.SQL("ALTER TABLE {metrics} DROP CONSTRAINT {name}").format(
                name=sql.Identifier(name), **t))
        conn.execute(sql.SQL("ALTER TABLE {metrics} ADD COLUMN aspect text NOT NULL DEFAULT 'retrieval'").format(**t))
        conn.execute(sql.SQL("ALTER TABLE {metrics} ALTER COLUMN aspect DROP DEFAULT").format(**t))
        conn.execute(sql.SQL(
            "ALTER TABLE {metrics} ADD PRIMARY KEY (run_id, variant, aspect, metric), ADD CONSTRAINT {fkey}"
            " FOREIGN KEY (run_id, variant, aspect) REFERENCES {measurements} (run_id, variant, aspect)"
            " ON DELETE CASCADE").format(fkey=sql.Identifier(f"{names['metrics']}_measurement_fkey"), **t))
    if legacy_answers is not None:
        # read once, then closed: a process still on the older code that records answers into it
        # fails loudly (the CHECK is not validated against the rows already there) instead of
        # writing rows no one reads
        conn.execute(sql.SQL("ALTER TABLE {answers} ADD CONSTRAINT {closed} CHECK (false) NOT VALID").format(
            answers=sql.Identifier(legacy_answers), closed=sql.Identifier(f"{legacy_answers}_moved")))
        for metric, low, high in (("pass_rate", "pass_rate_ci_low", "pass_rate_ci_high"),
                                  ("mean_score", "mean_ci_low", "mean_ci_high")):
            conn.execute(sql.SQL(
                "INSERT INTO {metrics} (run_id, variant, aspect, metric, value, ci_low, ci_high)"
                " SELECT run_id, variant, 'answers:' || grader, %s, {metric}, {low}, {high} FROM {answers}").format(
                    metric=sql.Identifier(metric), low=sql.Identifier(low), high=sql.Identifier(high),
                    answers=sql.Identifier(legacy_answers), **t), (metric,))


# --------------------------------------------------------------------------
# recording
# --------------------------------------------------------------------------


def write(cur: Any, names: Mapping[str, str], run_id: str, aspect_family: str, rows: Sequence[Mapping[str, Any]],
          metrics: Mapping[tuple[str, str], Iterable[tuple[str, float | None, float | None, float | None]]]) -> None:
    """Record ``rows`` (dicts of :data:`COLUMNS`, all of ``run_id``, aspects of
    ``aspect_family``) and their ``metrics`` ((variant, aspect) -> (metric, value, ci_low,
    ci_high) ...) in the caller's transaction. A measurement recorded again keeps its place in
    the history (``seq``, ``created_at``) and its acceptance; one of the family no longer
    present is deleted with its metrics."""
    t = _ident(names)
    updated = [c for c in COLUMNS if c not in ("run_id", "variant", "aspect")]
    cur.executemany(sql.SQL(
        "INSERT INTO {measurements} ({cols}) VALUES ({vals}) ON CONFLICT (run_id, variant, aspect) DO UPDATE SET {set}"
    ).format(cols=sql.SQL(", ").join(map(sql.Identifier, COLUMNS)),
             vals=sql.SQL(", ").join(sql.Placeholder(c) for c in COLUMNS),
             set=sql.SQL(", ").join(sql.SQL("{c} = EXCLUDED.{c}").format(c=sql.Identifier(c)) for c in updated),
             **t),
        [{**row, "variant_config": Jsonb(dict(row.get("variant_config") or {})),
          "provenance": Jsonb(dict(row.get("provenance") or {}))} for row in rows])
    kept = [(str(r["variant"]), str(r["aspect"])) for r in rows]
    cur.execute(sql.SQL(
        "DELETE FROM {measurements} WHERE run_id = %s AND aspect LIKE %s AND (variant, aspect) NOT IN"
        " (SELECT * FROM unnest(%s::text[], %s::text[]))").format(**t),
        (run_id, aspect_family, [k[0] for k in kept], [k[1] for k in kept]))
    cur.execute(sql.SQL("DELETE FROM {metrics} WHERE run_id = %s AND aspect LIKE %s").format(**t),
                (run_id, aspect_family))
    cur.executemany(sql.SQL(
        "INSERT INTO {metrics} (run_id, variant, aspect, metric, value, ci_low, ci_high)"
        " VALUES (%s, %s, %s, %s, %s, %s, %s)").format(**t),
        [(run_id, variant, aspect, *values) for (variant, aspect), each in metrics.items() for values in each])


# --------------------------------------------------------------------------
# the yardsticks
# --------------------------------------------------------------------------

# A variant's measurements: its own name's, or, with its configuration fingerprint, another
# name's with the same configuration (with ``heirs``, only those names: a live variant's
# history is its own).
SAME_VARIANT = ("(m.variant = %(variant)s OR (%(configuration)s::text IS NOT NULL"
                 " AND (%(heirs)s::text[] IS NULL OR m.variant = ANY(%(heirs)s::text[]))"
                 " AND m.configuration = %(configuration)s::text))")
# When measurement ``m`` was last accepted: its stamp, or the acceptance log's latest entry for
# it, whichever is later (an older install's CLI logs an acceptance without stamping it: the two
# records of one acceptance never disagree). A time, for people: no rule orders by it.
ACCEPTED_AT = ("GREATEST(m.accepted_at, (SELECT max(f.accepted_at) FROM {references} f WHERE f.run_id = m.run_id"
               " AND f.variant = m.variant AND f.aspect = m.aspect))")
# Where measurement ``m``'s latest acceptance stands in the history: every acceptance takes its
# position from the sequence that numbers the measurements (`accept`), so "accepted after run X
# was recorded" is ``position > X's seq``, never a comparison of clocks (a server clock that ran
# ahead and was set back leaves a stamp later than everything done since). In the log
# (`LOGGED_POSITION`) and on the measurement row, which keeps it when the log entry is gone.
LOGGED_POSITION = ("(SELECT max(f.position) FROM {references} f WHERE f.run_id = m.run_id AND f.variant = m.variant"
                   " AND f.aspect = m.aspect)")
# A flag-only acceptance: the code from 19af7bb to a60854a^ accepted answers by a flag, with no
# time and no log entry; the upgrade stamps it at its measurement's own time, which no version's
# accept stamps (it stamps the time it runs).
FLAG_ONLY = "m.accepted_at = m.created_at"
# Where measurement ``m``'s own row places its acceptance: its ``accepted_position``. A flag-only
# one was made at an unknown time after its measurement and before any answer acceptance was
# logged (a60854a on): just after its measurement (1e-6: below any logged entry placed after it,
# `_place_acceptances`), never later by a clock (a stamp that ran ahead, placed by time, made it
# the previous run over runs recorded after it). So it is "accepted since" only its own run.
ROW_POSITION = (f"CASE WHEN m.accepted_at IS NULL THEN NULL WHEN {FLAG_ONLY} THEN m.seq + 1e-6"
                " ELSE m.accepted_position END")
ACCEPTED_POSITION = f"GREATEST({ROW_POSITION}, {LOGGED_POSITION})"
# SQL: whether measurement ``m``'s latest log entry was placed by time past a run recorded after
# ``m``'s own. Only `_place_acceptances` (an old history's acceptances, placed once by their
# stamps) gives a log entry a fractional position; every later position is drawn from the
# sequence. Past a later run, the stamp alone says the acceptance came after that run: a clock
# that ran ahead while accepting, or stepped by less than anything can see, says the same, so
# such an acceptance is in doubt (an acceptance of an older run made after later ones is one
# `accept` away from being trusted).
PLACED_PAST_LATER_RUNS = (f"({LOGGED_POSITION} <> floor({LOGGED_POSITION}) AND EXISTS (SELECT 1 FROM"
                          " {measurements} x WHERE x.run_id <> m.run_id AND x.seq > m.seq"
                          f" AND x.seq < {LOGGED_POSITION}))")
# The one eligibility rule of a yardstick, both aspects: not distrusted (`_distrust_everything_recorded`),
# not limited, nothing errored, eligible or accepted; an answer measurement also needs its
# generator and both its numbers (a retried step may re-record an accepted row whose grading
# failed this time: never a yardstick); a retrieval measurement, its run's row (deleted by hand,
# the run is gone: its measurements are no yardstick, and a pinned reference that moves so is
# `runs.moved_reference`'s to catch).
USABLE = (f"NOT m.distrusted AND NOT m.limited AND m.errored = 0 AND (m.eligible OR {ACCEPTED_AT} IS NOT NULL)"
          " AND (m.aspect <> 'retrieval' OR EXISTS (SELECT 1 FROM {runs} r WHERE r.run_id = m.run_id))"
          " AND (m.aspect = 'retrieval' OR (m.generator IS NOT NULL AND (SELECT count(v.value) FROM {metrics} v"
          "  WHERE v.run_id = m.run_id AND v.variant = m.variant AND v.aspect = m.aspect"
          f"  AND v.metric IN {tuple(ANSWER_METRICS)!r}) = {len(ANSWER_METRICS)}))")
# SQL: measurement ``m`` is not of the run ``before`` being judged, nor recorded after that run began
# (its first measurement), when it is recorded; where it begins is read in the same statement (one
# snapshot, and no round trip of its own: against a hosted database each is a network's latency).
_BEFORE = (" AND (%(before)s::text IS NULL OR m.run_id <> %(before)s::text)"
           " AND (m.seq < (SELECT min(c.seq) FROM {measurements} c WHERE c.run_id = %(before)s::text)) IS NOT FALSE")
# previous ("latest"): the measurement that most recently became a yardstick, by position
# (recorded eligible: its seq; or accepted later: its acceptance's position, so re-accepting an
# older run makes it the previous run again); the pinned reference: the latest acceptance
# (`_latest_acceptance`), else the first eligible ("first"). Which acceptance is the latest: among
# the logged ones, the latest in the log; an acceptance missing from the log (no entry at all:
# deleted, or its run has no run row to log against; or the row's acceptance later than its latest
# entry: that entry deleted) placed after it makes the reference ambiguous
# (`Yardstick.acceptance_conflict`); a stamp with no position (written around the trigger) is
# placed by its time.
_UNLOGGED_AFTER = (f" AND (%(after_position)s::double precision IS NULL OR {ROW_POSITION} > %(after_position)s"
                   f" OR ({ROW_POSITION} IS NULL AND {ACCEPTED_AT} > %(after)s::timestamptz))")
_ORDERS: dict[str, tuple[str, str]] = {
    "latest": (USABLE, f"GREATEST(m.seq, COALESCE({ACCEPTED_POSITION}, m.seq)) DESC, m.seq DESC"),
    "logged": (f"{USABLE} AND {ACCEPTED_AT} IS NOT NULL AND {LOGGED_POSITION} IS NOT NULL",
               f"{LOGGED_POSITION} DESC, m.seq DESC"),
    "unlogged": (f"{USABLE} AND {ACCEPTED_AT} IS NOT NULL AND ({LOGGED_POSITION} IS NULL"
                 f" OR {ROW_POSITION} > {LOGGED_POSITION})" + _UNLOGGED_AFTER,
                 f"{ACCEPTED_POSITION} DESC NULLS LAST, {ACCEPTED_AT} DESC, m.seq DESC"),
    "first": (USABLE + " AND m.eligible", "m.seq ASC"),
}


def _lookup_params(*, aspect: str, variant: str | None, configuration: str | None, heirs: Sequence[str] | None,
                   before_run_id: str | None) -> dict[str, Any]:
    """The parameters of `SAME_VARIANT` and `_BEFORE` for one variant's lookup."""
    return {"variant": variant, "aspect": aspect, "configuration": configuration,
            "heirs": None if heirs is None else [str(h) for h in heirs], "before": before_run_id}


class Yardstick(NamedTuple):
    """A measurement found as a yardstick: its run, the variant's name in that run, and, for a
    pinned reference, the run of an acceptance with no log entry made after it
    (``acceptance_conflict``): which acceptance is in force cannot be told, and the verdict
    fails closed (`runs.moved_reference`)."""

    run_id: str
    variant: str
    acceptance_conflict: str | None = None

    def conflict_mark(self) -> dict[str, str]:
        """What a row read for this yardstick carries of the conflict: ``{"acceptance_conflict":
        run}`` when there is one (`runs.moved_reference` fails it closed), else nothing."""
        return {} if self.acceptance_conflict is None else {"acceptance_conflict": self.acceptance_conflict}


def _of_identity(identity: Mapping[str, Any]) -> tuple[str, dict[str, str]] | None:
    """(SQL, parameters) matching measurement ``m`` of exactly ``identity`` (:data:`IDENTITY_FIELDS`),
    or None when it is incomplete (a field missing or not a non-empty string): such an identity
    matches nothing, so a run with it is never judged as comparable."""
    values = {k: identity.get(k) for k in IDENTITY_FIELDS}
    if not all(isinstance(v, str) and v.strip() for v in values.values()):
        return None
    return "".join(f" AND m.{k} = %({k})s" for k in IDENTITY_FIELDS), {k: str(v) for k, v in values.items()}


def find(conn: Any, names: Mapping[str, str], *, aspect: str, variant: str, order: Order,
         identity: Mapping[str, Any] | None = None, configuration: str | None = None,
         heirs: Sequence[str] | None = None, before_run_id: str | None = None) -> Yardstick | None:
    """``variant``'s ``aspect`` yardstick, or None: with ``order="latest"`` its previous run,
    with ``"reference"`` its pinned reference (the latest acceptance, else the first eligible
    run). With ``identity`` (:data:`IDENTITY_FIELDS`), only measurements of exactly that
    identity; an incomplete identity (a field missing or not a non-empty string) matches
    nothing: such a run is never judged as comparable. Without, any identity's (the history a
    changed benchmark is paired with). ``before_run_id`` itself is never returned."""
    matches, values = "", dict[str, str]()
    if identity is not None:
        exactly = _of_identity(identity)
        if exactly is None:
            return None
        matches, values = exactly
    params = {**_lookup_params(aspect=aspect, variant=variant, configuration=configuration, heirs=heirs,
                               before_run_id=before_run_id), **values}

    def pick(one: str, after: tuple[Any, Any] = (None, None)) -> tuple[str, str, Any, Any, bool, int, bool] | None:
        """The first candidate in order ``one`` (``after``: an acceptance's (stamp, logged
        position); only the acceptances after it): its run, variant, stamp, logged position,
        whether the version that made its acceptance logged it (`_LOGGED_WHEN_MADE`), how many
        of the candidates are flag-only acceptances (`FLAG_ONLY`), and whether its entry was
        placed by time past a later run (`PLACED_PAST_LATER_RUNS`)."""
        condition, ordering = _ORDERS[one]
        found = conn.execute(sql.SQL(
            "SELECT m.run_id, m.variant, " + ACCEPTED_AT + ", " + LOGGED_POSITION + ","
            " " + _LOGGED_WHEN_MADE + ", count(*) FILTER (WHERE " + FLAG_ONLY + ") OVER (), "
            + PLACED_PAST_LATER_RUNS + " FROM {measurements} m"
            " WHERE m.aspect = %(aspect)s AND " + SAME_VARIANT + " AND " + condition + matches + _BEFORE
            # the variant's own name first when a run has it under both
            + " ORDER BY " + ordering + ", (m.variant = %(variant)s) DESC LIMIT 1").format(
                **_ident(names)), {**params, "after": after[0], "after_position": after[1]}).fetchone()
        return None if found is None else (str(found[0]), str(found[1]), *found[2:7])

    if order != "reference":
        found = pick(order)
        return None if found is None else Yardstick(*found[:2])
    return _latest_acceptance(pick) or (None if (first := pick("first")) is None else Yardstick(*first[:2]))


# SQL: whether measurement ``m``'s acceptance was logged by the version that made it: every
# version logs the acceptance of a run with a run row, except a flag-only one (`FLAG_ONLY`). An
# answer run recorded without a run row (through the library) cannot be logged.
_LOGGED_WHEN_MADE = f"(EXISTS (SELECT 1 FROM {{runs}} r WHERE r.run_id = m.run_id) AND NOT {FLAG_ONLY})"


def _latest_acceptance(pick: Callable[..., tuple[str, str, Any, Any, bool, int, bool] | None]) -> Yardstick | None:
    """The latest acceptance among a lookup's candidates: the logged one latest in the log (none
    logged: the unlogged one latest by position). An acceptance with no log entry after the
    logged one's entry is its ``acceptance_conflict``: the log is the record of which acceptance
    is in force, and an entry missing from it (deleted by hand, say) leaves that unknown. The
    logged one's own row counts too when its position is past its entry's: this version logs the
    row's position, an older install's row is placed before its entry (stamped, then logged), so
    a row past its entry was accepted again with that entry deleted, or placed by a trigger this
    version did not make (one an older version bound to another history's sequence). With nothing
    logged, an unlogged acceptance its version logged (`_LOGGED_WHEN_MADE`) conflicts with itself
    too (its entry was deleted), and so does any when two flag-only acceptances (`FLAG_ONLY`, of
    a version that recorded no time) are among the candidates."""
    logged = pick("logged")
    if logged is None:
        unlogged = pick("unlogged")
        if unlogged is None:
            return None
        # one its version logged had its entry deleted; of two flag-only ones, neither says when it
        # was made: which bar is in force cannot be told either
        return Yardstick(*unlogged[:2], acceptance_conflict=unlogged[0] if unlogged[4] or unlogged[5] > 1 else None)
    later = pick("unlogged", after=logged[2:4])
    if later is None and logged[6]:  # placed by an old stamp past a later run: in doubt
        later = logged
    return Yardstick(*logged[:2], acceptance_conflict=None if later is None else later[0])


# SQL: measurement ``m`` measured something: not limited (a subset, a smoke run), and an answer
# measurement graded or errored something (one that graded nothing measured nothing); a retrieval run
# counts whatever its question rows (an older history may have pruned them).
_MEASURED_SOMETHING = "NOT m.limited AND (m.aspect = 'retrieval' OR m.n_scored > 0 OR m.errored > 0)"


def recorded_of(conn: Any, names: Mapping[str, str], *, aspect: str, variant: str, configuration: str | None = None,
                heirs: Sequence[str] | None = None, before_run_id: str | None = None) -> str | None:
    """The run id of ``variant``'s latest ``aspect`` measurement recorded at all (eligible or
    not), or None: only then is it a genuinely new measurement. One that measured nothing
    does not count: a limited run (a subset, a smoke run), or an answer measurement with
    nothing scored and nothing errored (a grader that applies to no prompt of the set)."""
    found = conn.execute(sql.SQL(
        "SELECT m.run_id FROM {measurements} m WHERE m.aspect = %(aspect)s AND " + _MEASURED_SOMETHING
        + " AND " + SAME_VARIANT + _BEFORE
        + " ORDER BY m.seq DESC LIMIT 1").format(measurements=sql.Identifier(names["measurements"])),
        _lookup_params(aspect=aspect, variant=variant, configuration=configuration, heirs=heirs,
                       before_run_id=before_run_id)).fetchone()
    return None if found is None else str(found[0])


# SQL: measurement ``m`` is ``%(variant)s``'s under its name, or (with ``%(configuration)s``) its
# configuration's under a retired name: one the variants file no longer has with that configuration
# (``%(live)s``, today's names, and ``%(live_configurations)s``, each one's configuration today, NULL
# when unknown: then the name is taken as live). Gone from the file, or kept for another configuration
# (the old setting moved to a new name): either way a variant renamed before any run of it was eligible
# never became known, so nothing "vanished", and its runs are under the name it left. No acceptance
# limits it: an acceptance acknowledges what it was shown, and a name never known was never shown gone
# (an acceptance of another variant, by name or whole, must not hide it); the same configuration on the
# same benchmark is the same measurement, under any name.
_OWN_OR_RETIRED_NAME = (
    "(m.variant = %(variant)s OR (%(configuration)s::text IS NOT NULL AND m.configuration = %(configuration)s::text"
    " AND NOT EXISTS (SELECT 1 FROM unnest(%(live)s::text[], %(live_configurations)s::text[]) AS l(name, setting)"
    " WHERE l.name = m.variant AND (l.setting IS NULL OR l.setting = m.configuration))))")


def _recorded_params(*, aspect: str, variant: str | None, configuration: str | None, live: Mapping[str, str | None],
                     before_run_id: str | None) -> dict[str, Any]:
    """The parameters of `_OWN_OR_RETIRED_NAME` and `_BEFORE` (``variant`` None: no name of its own;
    ``live``: today's names and each one's configuration, None when unknown)."""
    return {**_lookup_params(aspect=aspect, variant=variant, configuration=configuration, heirs=None,
                             before_run_id=before_run_id),
            "live": [str(n) for n in live], "live_configurations": [live[n] for n in live]}


def recorded_rows(conn: Any, names: Mapping[str, str], *, aspect: str, variant: str, configuration: str | None = None,
                  live: Mapping[str, str | None] | None = None,
                  before_run_id: str | None = None) -> list[tuple[Any, Any, Any, Any]]:
    """(run id, name, the run's provenance, the measurement's metrics as a JSON object) of every full
    run that recorded ``variant``'s ``aspect`` measurement (`_OWN_OR_RETIRED_NAME`), eligible or
    not, newest first."""
    return conn.execute(sql.SQL(
        "SELECT m.run_id, m.variant, r.provenance, (SELECT json_object_agg(x.metric, x.value) FROM {metrics} x"
        " WHERE x.run_id = m.run_id AND x.variant = m.variant AND x.aspect = m.aspect)"
        " FROM {measurements} m JOIN {runs} r ON r.run_id = m.run_id"
        " WHERE m.aspect = %(aspect)s AND NOT m.limited AND " + _OWN_OR_RETIRED_NAME + _BEFORE
        + " ORDER BY m.seq DESC").format(**_ident(names)),
        _recorded_params(aspect=aspect, variant=variant, configuration=configuration, live=live or {},
                         before_run_id=before_run_id)).fetchall()


def recorded_of_identity(conn: Any, names: Mapping[str, str], *, aspect: str, variant: str,
                         identity: Mapping[str, Any], configuration: str | None = None,
                         live: Mapping[str, str | None] | None = None,
                         before_run_id: str | None = None) -> list[Yardstick]:
    """Every full (not limited) ``aspect`` measurement of ``variant`` (`_OWN_OR_RETIRED_NAME`) of
    exactly ``identity`` (:data:`IDENTITY_FIELDS`), eligible or not, newest first: none is a
    yardstick, but each measured this variant on this benchmark with this instrument, so a drop from
    it is shown when nothing comparable can judge a run. An incomplete identity matches nothing."""
    exactly = _of_identity(identity)
    if exactly is None:
        return []
    matches, values = exactly
    found = conn.execute(sql.SQL(
        "SELECT m.run_id, m.variant FROM {measurements} m WHERE m.aspect = %(aspect)s AND NOT m.limited AND "
        + _OWN_OR_RETIRED_NAME + matches + _BEFORE
        + " ORDER BY m.seq DESC").format(**_ident(names)),
        {**_recorded_params(aspect=aspect, variant=variant, configuration=configuration, live=live or {},
                            before_run_id=before_run_id), **values}).fetchall()
    return [Yardstick(str(run_id), str(name)) for run_id, name in found]


def recorded_elsewhere(conn: Any, names: Mapping[str, str], *, aspect: str, configuration: str,
                       live: Mapping[str, str | None], before_run_id: str | None = None) -> tuple[str, str] | None:
    """(run id, name) of the latest full ``aspect`` measurement of ``configuration`` under a name
    retired (`_OWN_OR_RETIRED_NAME` without a name of its own), or None. One that measured
    nothing does not count (`recorded_of`)."""
    found = conn.execute(sql.SQL(
        "SELECT m.run_id, m.variant FROM {measurements} m WHERE m.aspect = %(aspect)s AND " + _MEASURED_SOMETHING
        + " AND " + _OWN_OR_RETIRED_NAME + _BEFORE
        + " ORDER BY m.seq DESC LIMIT 1").format(**_ident(names)),
        _recorded_params(aspect=aspect, variant=None, configuration=configuration, live=live or {},
                         before_run_id=before_run_id)).fetchone()
    return None if found is None else (str(found[0]), str(found[1]))


def earlier_names(conn: Any, names: Mapping[str, str], *, aspect: str, variant: str,
                  before_run_id: str | None = None) -> list[str]:
    """The names ``variant``'s ``aspect`` measurement had before, nearest first: a rename (the
    new name inherited a vanished name's history, same configuration) records the name it
    inherited, and the lineage follows those records back; a loop ends the walk."""
    lineage: list[str] = []
    current = variant
    while True:
        row = conn.execute(sql.SQL(
            "SELECT m.provenance->>'inherits' FROM {measurements} m WHERE m.variant = %(variant)s"
            " AND m.aspect = %(aspect)s AND m.provenance ? 'inherits'" + _BEFORE
            + " ORDER BY m.seq ASC LIMIT 1").format(measurements=sql.Identifier(names["measurements"])),
            {"variant": current, "aspect": aspect, "before": before_run_id}).fetchone()
        parent = None if row is None else row[0]
        if not parent or parent in lineage or parent == variant:
            return lineage
        lineage.append(str(parent))
        current = str(parent)


def accept(conn: Any, names: Mapping[str, str], run_id: str, measured: Iterable[tuple[str, str]], *,
           note: str, accepted_by: str) -> None:
    """Accept ``run_id``'s (variant, aspect) measurements as their pinned reference, in the
    caller's transaction: each is stamped (``accepted_at``, the time, for people; and
    ``accepted_position``, its place in the history, which the rules read) and logged in
    ``{references}`` with who, when, why and the benchmark accepted on (when the run itself is
    recorded, which the log's foreign key needs)."""
    t = _ident(names)
    sequence = _sequence(conn, names)
    for variant, aspect in measured:
        # the acceptance's position comes from the sequence that numbers the measurements: after every
        # one recorded so far, before every later one (drawn here, not left to the table's trigger,
        # which only places what a writer that knows no positions stamps)
        conn.execute(sql.SQL(
            "UPDATE {measurements} SET accepted_at = clock_timestamp(),"
            " accepted_position = nextval(%(sequence)s::regclass), distrusted = false"
            " WHERE run_id = %(run)s AND variant = %(variant)s AND aspect = %(aspect)s").format(**t),
            {"run": run_id, "variant": variant, "aspect": aspect, "sequence": sequence})
        conn.execute(sql.SQL(
            "INSERT INTO {references} (corpus_signature, labels_fingerprint, scoring_protocol, benchmark_fingerprint,"
            " variant, run_id, note, aspect, accepted_by, accepted_at, position)"
            " SELECT r.corpus_signature, r.labels_fingerprint, r.scoring_protocol, m.benchmark, m.variant, m.run_id,"
            " %s, m.aspect, %s, m.accepted_at, m.accepted_position FROM {measurements} m JOIN {runs} r"
            " ON r.run_id = m.run_id WHERE m.run_id = %s AND m.variant = %s AND m.aspect = %s").format(**t),
            (str(note), accepted_by, run_id, variant, aspect))
