"""The thirty-ninth review of the verdict: 15d8776 (``runs.write_acceptance`` calls ``conn.commit()`` inside its
``try``, so a failure at COMMIT becomes ``DatabaseError("accepting run ... failed: X; nothing of it was
accepted")``; the command line reports any ``psycopg.Error`` reading the gate in force after a committed accept
as a warning by its type, exit 0).

Attacked: (a) the early commit: what else the accept's connection holds when it commits (its callers
``runs.accept_reference``, ``answers.accept_answer_run``, ``answers.accept_run``: only the checks'
``history_exists`` repairs and reads, which the ``with connect(...)`` exit committed before as well), and a
caller that wraps it in an outer ``conn.transaction()``. (b) A COMMIT that succeeds on the server whose reply
never reaches the client (a real TCP proxy on 127.0.0.1 that forwards the wire protocol and drops the connection
at the server's ``CommandComplete("COMMIT")`` after an INSERT). (c) The warning path: a psycopg error whose text
quotes a URL with a password.

Holes (strict xfail, with a passing control; fixed since: a connection lost at the commit is reported as an
unknown outcome, `runs.write_acceptance` reading `conn.broken`):

1. SAYS "NOTHING OF IT WAS ACCEPTED" AFTER A COMMIT (exit 2 after a commit; not a gate hole: the gate holds what was
   committed): ``write_acceptance``'s ``except psycopg.Error`` (runs.py:1003) turns every error of its ``try``, the
   ``conn.commit()`` (runs.py:1002) included, into "...; nothing of it was accepted". A connection lost after the
   server committed (the reply lost: a network cut, a proxy/pooler restart, a client-side timeout) is an
   ``OperationalError`` at ``conn.commit()`` whose outcome is unknown, not "nothing": here the log holds both rows,
   the command line prints ``error: accepting run 'r2' failed: OperationalError; nothing of it was accepted``
   (__main__.py:54) and exits 2, stdout empty; ``accept_run`` raises the same DatabaseError; the job's Failure would
   say the same (not run here). Confirmed failing on the last AssertionError with --runxfail. Control: the same proxy
   not dropping exits 0. Fix: at ``conn.commit()`` only, an ``OperationalError`` (a connection lost, not a refusal by
   the server) says the outcome is unknown ("may have been accepted; check ``runs``"), or reads back whether the rows
   exist on a fresh connection before claiming nothing was written. New with 15d8776: before it the same lost
   reply at the ``with connect(...)`` exit was a raw traceback (exit 1), wrong too but claiming nothing.

Held (plain tests): (a) the early commit commits nothing a caller did not mean to commit: the three callers
write nothing after ``write_acceptance`` on that connection and their refusals come before it (rolled back on
the ``with`` exit as before); under an outer ``conn.transaction()`` the commit is refused by psycopg
(ProgrammingError) and becomes the DatabaseError with nothing written (fails closed). (b) A commit-time refusal
(deferred trigger) through accept_run, accept_reference and accept_answer_run is the DatabaseError, nothing
written. (c) The warning after a committed accept names the psycopg error's type only: the URL and password in
its text are not printed, exit 0.

Not tried: a real server crash between the commit record and the reply; the Dagster job with the dropping
proxy (the same ``accept_run`` under it); a pooler (pgbouncer) in between.
"""

from __future__ import annotations

import socket
import threading
import types

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from eval_pipeline.history import answers as new_answers
from eval_pipeline.history import measurements
from eval_pipeline.history import runs as new_runs
from eval_pipeline.store.database import DatabaseError, connect
from tests.unit.verdict import test_verdict_attacks_thirtyeighth as thirtyeighth

pytestmark = pytest.mark.integration
answers = thirtyeighth.answers
judge = thirtyeighth.judge
refuse_at_commit = thirtyeighth.refuse_at_commit

_log = thirtyeighth._log
_job = thirtyeighth._job
_cli_outcome = thirtyeighth._cli_outcome
_setup = thirtyeighth._setup
_DENSE, _ANSWERS = thirtyeighth._DENSE, thirtyeighth._ANSWERS

_COMMIT_COMPLETE = b"C\x00\x00\x00\x0bCOMMIT\x00"  # CommandComplete, length 4 + len("COMMIT\0")


class _DroppingProxy:
    """A wire-protocol TCP proxy on 127.0.0.1 to the test server (its unix socket; SSL and GSS off). With ``drop`` on, a
    connection that sent an INSERT has its first server reply holding ``CommandComplete("COMMIT")`` dropped:
    both sockets closed, the reply never forwarded (the server HAS committed)."""

    def __init__(self, uri: str, *, drop: bool) -> None:
        params = conninfo_to_dict(uri)
        host, port = params.get("host") or "127.0.0.1", int(params.get("port") or 5432)
        # the embedded server listens on a unix socket (host is its directory)
        self.upstream = f"{host}/.s.PGSQL.{port}" if host.startswith("/") else (host, port)
        self.drop, self.dropped = drop, 0
        self.listener = socket.create_server(("127.0.0.1", 0))
        params.update(host="127.0.0.1", port=str(self.listener.getsockname()[1]), sslmode="disable",
                      gssencmode="disable")
        self.uri = make_conninfo(**params)
        self.closed = False
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while not self.closed:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            if isinstance(self.upstream, str):
                server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                server.connect(self.upstream)
            else:
                server = socket.create_connection(self.upstream)
            state = {"wrote": False}
            threading.Thread(target=self._pump, args=(client, server, state, True), daemon=True).start()
            threading.Thread(target=self._pump, args=(server, client, state, False), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, state: dict, upward: bool) -> None:
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                if upward and b"INSERT" in data:
                    state["wrote"] = True
                if not upward and self.drop and state["wrote"] and _COMMIT_COMPLETE in data:
                    self.dropped += 1
                    break  # the server committed; its reply is lost
                dst.sendall(data)
        except OSError:
            pass
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()

    def close(self) -> None:
        self.closed = True
        self.listener.close()


@pytest.fixture
def proxy(answers):
    made: list[_DroppingProxy] = []

    def make(*, drop: bool) -> _DroppingProxy:
        made.append(_DroppingProxy(answers.uri, drop=drop))
        return made[-1]

    yield make
    for p in made:
        p.close()


# --------------------------------------------------------------------------------------------
# (b) a commit the server made, its reply lost
# --------------------------------------------------------------------------------------------


def test_hole_1_a_lost_commit_reply_is_reported_as_nothing_accepted_cli(answers, judge, monkeypatch, capsys, proxy):
    _setup(answers, judge, monkeypatch)
    before = _log(answers.uri)
    through = proxy(drop=True)
    code, out, err = _cli_outcome(types.SimpleNamespace(uri=through.uri), monkeypatch, capsys, "r2")
    assert through.dropped == 1, (through.dropped, code, err)  # holds: the reply was dropped once
    assert _log(answers.uri) == [*before, _DENSE, _ANSWERS]  # holds: the server committed both rows
    # the rule: `error:` and exit 2 only when nothing was committed
    assert not (code == 2 and "nothing of it was accepted" in err), (code, out, err)
    assert "whether it was accepted is unknown" in err, (code, out, err)  # since the fix


def test_hole_1_a_lost_commit_reply_is_reported_as_nothing_accepted_library(answers, judge, monkeypatch, proxy):
    _setup(answers, judge, monkeypatch)
    before = _log(answers.uri)
    through = proxy(drop=True)
    try:
        new_answers.accept_run(through.uri, "r2")
        message = ""
    except DatabaseError as exc:
        message = str(exc)
    assert through.dropped == 1
    assert _log(answers.uri) == [*before, _DENSE, _ANSWERS]
    assert "nothing of it was accepted" not in message, message
    assert "whether it was accepted is unknown" in message, message  # since the fix


def test_hole_1s_control_the_same_proxy_not_dropping_exits_0(answers, judge, monkeypatch, capsys, proxy):
    _setup(answers, judge, monkeypatch)
    before = _log(answers.uri)
    through = proxy(drop=False)
    code, out, err = _cli_outcome(types.SimpleNamespace(uri=through.uri), monkeypatch, capsys, "r2")
    assert code == 0 and "pinned reference of: dense" in out, (code, out, err)
    assert _log(answers.uri) == [*before, _DENSE, _ANSWERS]


# --------------------------------------------------------------------------------------------
# (a) the early commit: nothing the caller did not mean to commit
# --------------------------------------------------------------------------------------------


def test_held_under_an_outer_transaction_the_commit_is_refused_and_nothing_written(answers, judge, monkeypatch):
    _setup(answers, judge, monkeypatch)
    before = _log(answers.uri)
    names = new_runs.table_names("eval")
    with pytest.raises(DatabaseError, match="ProgrammingError; nothing of it was accepted"), \
            connect(answers.uri) as conn, conn.transaction():
        new_runs.write_acceptance(conn, names, "r2", [("dense", measurements.RETRIEVAL)], note="", accepted_by="x")
    assert _log(answers.uri) == before


def test_held_a_refusal_after_the_checks_commits_nothing(answers, judge, monkeypatch):
    """A refusal (a limited run) on the accept's own connection, after history_exists ran on it: nothing."""
    _setup(answers, judge, monkeypatch)
    answers.sql("UPDATE eval_runs SET limited = true WHERE run_id = 'r2'")
    before = _log(answers.uri)
    with pytest.raises(ValueError, match="limited run"):
        new_answers.accept_run(answers.uri, "r2")
    assert _log(answers.uri) == before


@pytest.mark.parametrize("entry", ["accept_run", "accept_reference", "accept_answer_run"])
def test_held_a_refusal_at_commit_is_the_database_error_everywhere(answers, judge, monkeypatch, refuse_at_commit,
                                                                     entry):
    _setup(answers, judge, monkeypatch)
    refuse_at_commit("%")
    before = _log(answers.uri)
    fn = {"accept_run": new_answers.accept_run, "accept_reference": new_runs.accept_reference,
          "accept_answer_run": new_answers.accept_answer_run}[entry]
    with pytest.raises(DatabaseError, match="RaiseException; nothing of it was accepted"):
        fn(answers.uri, "r2")
    assert _log(answers.uri) == before


# --------------------------------------------------------------------------------------------
# (c) the warning path: nothing quoted
# --------------------------------------------------------------------------------------------


def test_held_the_warning_names_the_type_only(answers, judge, monkeypatch, capsys):
    import eval_pipeline.history.runs as gate_reader  # the closing line's gate read (runs.gate_in_force)

    secret = "Zp4wq8Lm-atk39"

    def failing(connection_string: str, **kwargs):
        raise psycopg.OperationalError(f"consuming input failed: postgresql://admin:{secret}@db.example/eval")

    _setup(answers, judge, monkeypatch)
    before = _log(answers.uri)
    monkeypatch.setattr(gate_reader, "project_history", failing)
    code, out, err = _cli_outcome(answers, monkeypatch, capsys, "r2")
    assert code == 0 and "warning:" in err and "OperationalError" in err, (code, out, err)
    assert secret not in err and secret not in out and "db.example" not in err
    assert _log(answers.uri) == [*before, _DENSE, _ANSWERS]
