"""Attacks on 47d2449: `judge_run` and `judge_answer_run` open the history session themselves
(`measurements.session`: one autocommit connection per connection string for their lookups).

A direct call (a script, the tests) used to ask each lookup on a connection of its own, in one
transaction; it now asks every lookup on one shared autocommit connection, as the verdict asset
does. The question: does a direct call now decide otherwise than it did (or than the asset)?

The review found three holes, each a strict xfail until the fix in `measurements.connection` (each
lookup on the shared connection is one transaction, and nothing is prepared on the server); each test
now holds, and fails with that part of the fix removed. The other tests held from the start.
"""

from __future__ import annotations

import threading

import psycopg
import pytest
from psycopg.conninfo import make_conninfo

from eval_pipeline.history import measurements
from tests.unit.verdict.test_verdict_attacks_eighth import _frame, answers, judge  # noqa: F401  (fixtures)

pytestmark = pytest.mark.integration


class _NoSession:
    """A stand-in for `measurements._SESSION` that never holds a session: every lookup opens a
    connection of its own (the path of a direct call before 47d2449), the control of a hole."""

    def get(self):
        return None

    def set(self, value):
        return None

    def reset(self, token):
        return None


def _per_lookup(monkeypatch) -> None:
    monkeypatch.setattr(measurements, "_SESSION", _NoSession())


def _rewrite_r1_while_prev_is_read(monkeypatch, judge) -> list:  # noqa: F811
    """While the lookup of v's previous run of today's benchmark (`previous_run(identity=...)`) is
    between finding r1 and reading its metrics, another connection rewrites r1's hit@1 to 0.5 (a
    concurrent re-record of r1, or any writer), committed. Returns the list of rewrites made."""
    real = measurements.find
    done: list = []

    def find(conn, names, **kw):
        found = real(conn, names, **kw)
        if (not done and found is not None and found.run_id == "r1" and kw.get("order") == "latest"
                and kw.get("identity") is not None):
            judge.sql("UPDATE {metrics} SET value = 0.5 WHERE run_id = 'r1' AND variant = 'v'")
            done.append(found)
        return found

    monkeypatch.setattr(measurements, "find", find)
    return done


def _repeatable_read(uri: str) -> str:
    return make_conninfo(uri, options="-c default_transaction_isolation=repeatable\\ read")


def test_control_per_lookup_connections_read_one_snapshot_under_repeatable_read(judge, monkeypatch):  # noqa: F811
    """Control (held): a history server (or role, or connection string) whose default isolation is
    REPEATABLE READ gave every lookup on a connection of its own one snapshot: the previous run
    found and its metrics read are the same record, so the regression 1.0 -> 0.5 fails."""
    assert judge("r1", "A", {"v": "good"}).gates["v"].passed
    done = _rewrite_r1_while_prev_is_read(monkeypatch, judge)
    _per_lookup(monkeypatch)
    verdict = judge("r2", "A", {"v": "bad"}, record=False, connection_string=_repeatable_read(judge.uri))
    assert done, "the rewrite never happened: re-aim this test"
    assert not verdict.gates["v"].passed, verdict.gates["v"].message


# held since the fix (measurements.connection):
# 47d2449: a direct judge_run now reads through the session's AUTOCOMMIT connection, so under
# default_transaction_isolation=repeatable read a lookup's statements (find the previous run, read its
# metrics) no longer share one snapshot: the previous run's metrics are read from a newer state than the run
# found, and a regression 1.0 -> 0.5 passes (fails open) where a connection per lookup failed it
def test_a_direct_judge_under_repeatable_read_reads_the_previous_run_in_one_snapshot(judge, monkeypatch):  # noqa: F811
    assert judge("r1", "A", {"v": "good"}).gates["v"].passed
    done = _rewrite_r1_while_prev_is_read(monkeypatch, judge)
    verdict = judge("r2", "A", {"v": "bad"}, record=False, connection_string=_repeatable_read(judge.uri))
    assert done, "the rewrite never happened: re-aim this test"
    assert not verdict.gates["v"].passed, verdict.gates["v"].message


def _a_pooler_switches_backends(monkeypatch) -> list[int]:
    """Behind a transaction-mode pooler each transaction (an autocommit statement is one) may run on
    another server connection, which holds none of the statements prepared on the last one. Simulated:
    after every lookup's `find`, the server connection forgets its prepared statements behind
    psycopg's back (``DEALLOCATE ALL`` sent through libpq, as a pooler's server reset does)."""
    calls: list[int] = []
    real = measurements.find

    def find(conn, names, **kw):
        found = real(conn, names, **kw)
        conn.pgconn.exec_(b"DEALLOCATE ALL")
        calls.append(1)
        return found

    monkeypatch.setattr(measurements, "find", find)
    return calls


def test_control_per_lookup_connections_never_prepare_a_statement(judge, monkeypatch):  # noqa: F811
    """Control (held): with a connection per lookup (before 47d2449) no query runs five times on
    one connection, so a pooler's switch of server connections changes nothing: the run passes."""
    assert judge("r1", "A", {"v": "good", "w": "good", "x": "good"}).gates["v"].passed
    calls = _a_pooler_switches_backends(monkeypatch)
    _per_lookup(monkeypatch)
    verdict = judge("r2", "A", {"v": "good", "w": "good", "x": "good"}, record=False)
    assert calls and all(g.passed for g in verdict.gates.values()), {v: g.message for v, g in verdict.gates.items()}


# held since the fix (measurements.connection):
# 47d2449: a direct judge_run's lookups (history_exists's probe, find, the metrics read: the same query texts
# each variant) now run on one connection, so psycopg prepares them server-side from their 5th execution
# (prepare_threshold 5 left on; 6 prepared after a 3-variant verdict). Behind a transaction-mode pooler
# (pgbouncer before 1.21, or with max_prepared_statements = 0; the session's docstring names poolers) the next
# statement lands on a server connection without them: 'prepared statement _pg3_N does not exist' (a
# psycopg.Error) fails the variants closed, a spurious stop, where a connection per lookup never prepared
# anything
def test_a_direct_judge_behind_a_transaction_pooler_judges_as_per_lookup_connections(judge, monkeypatch):  # noqa: F811
    assert judge("r1", "A", {"v": "good", "w": "good", "x": "good"}).gates["v"].passed
    calls = _a_pooler_switches_backends(monkeypatch)
    verdict = judge("r2", "A", {"v": "good", "w": "good", "x": "good"}, record=False)
    assert calls and all(g.passed for g in verdict.gates.values()), {v: g.message for v, g in verdict.gates.items()}


def _backends(uri: str) -> int:
    with psycopg.connect(uri) as conn:
        return conn.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                            "AND pid <> pg_backend_pid()").fetchone()[0]


def test_a_callback_that_ends_the_shared_backend_mid_judge_changes_nothing(judge):  # noqa: F811
    """Held: the benchmark changed, so the paired ranking (``rank_reference``, run inside judge_run,
    inside its session) ranks r1's configuration today; meanwhile the server ends every idle backend
    (a restart, an admin's pg_terminate_backend). The next lookup gets a new connection: the
    regression on today's questions still fails, paired, and nothing is left open."""
    assert judge("r1", "A", {"v": "good"}).gates["v"].passed
    before = _backends(judge.uri)
    killed: list[int] = []

    def killing(variant, reference):
        with psycopg.connect(judge.uri, autocommit=True) as admin:
            killed.append(admin.execute(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE datname = current_database()"
                " AND pid <> pg_backend_pid() AND state = 'idle' AND application_name = ''").fetchone()[0])
        return _frame(variant, 100)  # r1's configuration scores 1.0 today

    verdict = judge("r2", "B", {"v": "bad"}, record=False, rank_reference=killing)
    assert killed and killed[0] >= 1, killed  # the shared connection was among them
    gate = verdict.gates["v"]
    assert not gate.passed and gate.state == "paired", gate.message
    assert measurements._SESSION.get() is None
    assert _backends(judge.uri) <= before


class _Abort(BaseException):
    """Not an Exception: nothing in judge_run catches it (a KeyboardInterrupt, a timeout signal)."""


def test_a_judge_aborted_inside_its_session_leaves_no_session_behind(judge, monkeypatch):  # noqa: F811
    """Held: judge_run aborted inside its session (its paired ranking interrupted) resets the
    ContextVar and closes the connection: the next direct call in the same thread opens a session of
    its own (a fresh connection) and decides as before."""
    assert judge("r1", "A", {"v": "good"}).gates["v"].passed
    before = _backends(judge.uri)

    def aborting(variant, reference):
        raise _Abort

    with pytest.raises(_Abort):
        judge("r2", "B", {"v": "bad"}, record=False, rank_reference=aborting)
    assert measurements._SESSION.get() is None
    assert _backends(judge.uri) <= before
    verdict = judge("r3", "A", {"v": "bad"}, record=False)
    assert not verdict.gates["v"].passed and verdict.gates["v"].state == "comparable", verdict.gates["v"].message


def test_direct_judges_in_two_threads_each_have_their_own_session(judge, monkeypatch):  # noqa: F811
    """Held: the decorator is made once at import but enters a new generator per call, and a new
    thread starts with an empty context: two threads judging at once each open one connection of
    their own (never one shared across threads) and both fail the regression."""
    assert judge("r1", "A", {"v": "good", "w": "good"}).gates["v"].passed
    opened: list[tuple[int, int]] = []
    real = measurements.connect

    def connect(*a, **k):
        conn = real(*a, **k)
        opened.append((threading.get_ident(), id(conn)))
        return conn

    monkeypatch.setattr(measurements, "connect", connect)
    gates: dict[str, object] = {}
    barrier = threading.Barrier(2)

    def one(run_id):
        barrier.wait()
        gates[run_id] = judge(run_id, "A", {"v": "bad", "w": "good"}, record=False).gates["v"]

    threads = [threading.Thread(target=one, args=(r,)) for r in ("t1", "t2")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert set(gates) == {"t1", "t2"}
    assert all(not g.passed and g.state == "comparable" for g in gates.values()), gates
    assert len(opened) == 2 and len({t for t, _ in opened}) == 2, opened


def _judge_answers_directly(uri: str, run_id: str, rate: float):
    from eval_pipeline.verdict.answers import judge_answer_run
    from tests.unit.verdict.test_verdict_attacks_eighth import ANSWER_TOL, _answer_frame

    return judge_answer_run({"bm25": _answer_frame("bm25", rate)}, order=["bm25"], corpus_signature="corpus-1",
                            tolerances=ANSWER_TOL, strict=False, connection_string=uri, run_id=run_id,
                            configurations={"bm25": "cfg-bm25"})


def _rewrite_a1_while_its_row_is_read(monkeypatch, answers) -> list:  # noqa: F811
    """While a lookup of bm25's answer yardstick (order latest, exact key) is between finding a1 and
    reading its row, another connection rewrites a1's numbers to 0.70 (committed)."""
    real = measurements.find
    done: list = []

    def find(conn, names, **kw):
        found = real(conn, names, **kw)
        if (not done and found is not None and found.run_id == "a1" and kw.get("order") == "latest"
                and kw.get("identity") is not None and str(kw.get("aspect", "")).startswith("answers:")):
            answers.sql("UPDATE eval_variant_metrics SET value = 0.70 WHERE run_id = 'a1' AND variant = 'bm25'"
                        " AND aspect LIKE 'answers:%%'")
            done.append(found)
        return found

    monkeypatch.setattr(measurements, "find", find)
    return done


def test_control_per_lookup_connections_read_one_answer_snapshot_under_repeatable_read(answers, monkeypatch):  # noqa: F811
    """Control (held): judge_answer_run on a connection per lookup, REPEATABLE READ: 0.90 -> 0.70 fails."""
    assert answers("a1", {"bm25": 0.90}).passed
    done = _rewrite_a1_while_its_row_is_read(monkeypatch, answers)
    _per_lookup(monkeypatch)
    gate = _judge_answers_directly(_repeatable_read(answers.uri), "a2", 0.70).gates["bm25"]["deterministic"]
    assert done, "the rewrite never happened: re-aim this test"
    assert not gate.passed, gate.message


# held since the fix (measurements.connection):
# 47d2449: a direct judge_answer_run now reads through the session's autocommit connection: under
# default_transaction_isolation=repeatable read the answer yardstick found (a1) and its row read are no longer
# one snapshot; a row rewritten in between is read, and 0.90 -> 0.70 passes (fails open)
def test_a_direct_answer_judge_under_repeatable_read_reads_its_yardstick_in_one_snapshot(answers, monkeypatch):  # noqa: F811
    assert answers("a1", {"bm25": 0.90}).passed
    done = _rewrite_a1_while_its_row_is_read(monkeypatch, answers)
    gate = _judge_answers_directly(_repeatable_read(answers.uri), "a2", 0.70).gates["bm25"]["deterministic"]
    assert done, "the rewrite never happened: re-aim this test"
    assert not gate.passed, gate.message


def test_a_recording_judge_writes_and_locks_nothing_on_the_shared_connection(judge, monkeypatch):  # noqa: F811
    """Held: with ``record=True`` the record (record_run: its advisory lock, its writes, one
    transaction) runs on a connection of its own; on a current history the session's autocommit
    connection only reads, so no lock or write of the record can be split into autocommitted
    statements or outlive its transaction, and a failed write cannot leave the lookups' connection
    unusable. The run is recorded and committed."""
    assert judge("r1", "A", {"v": "good"}).gates["v"].passed
    statements: list[str] = []
    real = measurements.connect

    def connect(*a, **k):
        conn = real(*a, **k)
        execute = conn.execute

        def logged(query, *args, **kwargs):
            statements.append(query.as_string(conn) if hasattr(query, "as_string") else str(query))
            return execute(query, *args, **kwargs)

        conn.execute = logged
        return conn

    monkeypatch.setattr(measurements, "connect", connect)
    verdict = judge("r2", "A", {"v": "good"}, hits={"v": 99})
    assert verdict.gates["v"].passed and verdict.eligible, verdict.gates["v"].message
    assert statements, "no lookup went through the session: re-aim this test"
    writes = [s for s in statements if any(w in s.upper() for w in ("INSERT", "UPDATE ", "DELETE", "ALTER ", "CREATE ",
                                                                     "ADVISORY", "LOCK TABLE"))]
    assert not writes, writes[:3]
    with psycopg.connect(judge.uri) as conn:
        rows = conn.execute(f'SELECT count(*) FROM "{judge.prefix}_runs" WHERE run_id = %s', ("r2",)).fetchone()[0]
    assert rows == 1
