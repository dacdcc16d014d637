"""The thirty-eighth review of the verdict: d5c4f01 (``runs.accept_reference`` split into ``retrieval_to_accept``,
which checks and writes nothing, and ``write_acceptance``, one transaction whose psycopg error becomes
``DatabaseError("accepting run ... failed: X; nothing of it was accepted")``; ``answers.accept_answer_run`` into
the pure ``answers_to_accept`` and a write; ``answers.accept_run`` deciding both then writing both on one
connection; the command line reading the gate in force outside its error handler; the ``accept_reference`` job
turning ValueError and DatabaseError into a Failure).

Attacked: (a) every refusal, old against new: the pre-refactor ``runs.py`` and ``answers.py`` (``git show
d5c4f01^:...``) are loaded in memory (``_old``) and run on the same database as the current code, the old first
(a refusal writes nothing), and the two refusals' messages compared verbatim: a limited run, errored questions,
reranker fallbacks, a renamed variant (each whole, by the retrieval name, and the named mix), an unknown variant,
a measured retrieval regression unnamed, an unjudged variant unnamed, a named answer-only variant whose rows are
all refused, an unknown run; and the acceptances that must still be taken, old and new each on its own database
(a measured regression by name, an unjudged variant by name, a whole run whose answer rows are all refused, an
answer regression in a whole run): the same log delta and the same ``RunAcceptance``. Also through
``runs.accept_reference`` (no ``answered`` any more) and ``accept_answer_run`` alone. (b) The one transaction:
``connect`` is not autocommit, so ``retrieval_to_accept``'s reads open the transaction and ``write_acceptance``'s
``conn.transaction()`` is a SAVEPOINT; the commit is the ``with connect(...)`` exit, outside
``write_acceptance``'s ``except psycopg.Error``. A DEFERRABLE INITIALLY DEFERRED constraint trigger on
``eval_references`` raising at COMMIT for the answers' aspect stands in for any commit-time failure (a deferred
constraint, a serialization failure, a connection lost at commit). (e) The command line's gate read after the
commit failing with a real lock timeout (``eval_runs`` held ACCESS EXCLUSIVE by another session, the read's
connection with ``lock_timeout=300ms``). (c) Secrets: the database's own error text
(here a trigger's message holding a fake password) in the new DatabaseError. (d) Two whole accepts of the same
run at once, serialized by a held table lock.

Holes (fixed since: the command line reports any error reading the gate in force after a committed accept as a
warning, and ``write_acceptance`` commits inside its own error handling; strict xfail, with a passing control;
confirmed failing on their AssertionError with --runxfail):

1. MISREPORTS A COMMITTED ACCEPTANCE (exit code; not a gate hole; older than d5c4f01, which fixed only the
   DatabaseError form of the thirty-seventh's hole 2): history/__main__.py ``main``, the ``except DatabaseError``
   around ``_print_the_gate_in_force`` (__main__.py:55-59). ``project_history`` (runs.py:810) runs its queries on
   ``measurements.connection``, which converts only connection failures (``connect``) to DatabaseError; a query's
   own error (here a real ``LockNotAvailable``: a lock timeout while another session holds eval_runs; equally a
   statement timeout or a connection dropped mid-query, ``psycopg.OperationalError``) is a raw psycopg error, not
   caught: after stdout said ``run r2 is now the pinned reference of: dense`` and the log holds both rows, the
   command line ends in a traceback, exit 1. A script reading the exit code takes the committed acceptance as
   failed. Control: the same read unlocked exits 0. Fix: catch ``(DatabaseError, psycopg.Error)`` (or
   ``Exception``) there, or convert project_history's query errors to DatabaseError (redacted).

Held (plain tests): (a) every refusal listed is refused by the new code with the OLD message, verbatim, the log
unchanged, through ``accept_run``; the acceptances are the same (log delta and result), old and new; the
``runs.accept_reference`` / ``accept_answer_run`` entry points keep their refusals. (b) A commit-time failure of
the answers' aspect leaves nothing written (the retrieval row of the same accept rolled back too): one
transaction, truly; ``connect`` gives a non-autocommit connection. (c) The DatabaseError carries the error's type
name only, not the server's text. (d) Two accepts at once both commit (the second waits on the first's row
locks), four log rows in order; neither reports a failure.

Noted (fact tests, not holes by the rule, fail closed): (b) the commit-time failure does NOT become the promised
``DatabaseError("... nothing of it was accepted")``: in ``accept_run`` the commit is the ``with connect(...)``
exit (answers.py:698; the same in ``runs.accept_reference``, runs.py:923), outside ``write_acceptance``'s
``except psycopg.Error`` (runs.py:1001), whose ``conn.transaction()`` is only a SAVEPOINT there,
so the raw ``psycopg.errors.RaiseException`` escapes:
the command line ends in a traceback (not ``error:``/exit 2), the job's step fails on an uncaught error (not the
Failure). ``accept_answer_run`` alone, whose ``conn.transaction()`` is the outermost block, does convert it.
Nothing is written and nothing says accepted, so it fails closed; only the message form differs.

Not tried: a real serialization failure or server shutdown at COMMIT (the deferred trigger stands in); READ
COMMITTED races between ``read_answer_runs`` (its own connection, before the transaction) and the write (an answer
row recorded or changed in between); the whole Dagster job under orchestration (in-process only); accepts racing a
run being recorded.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
import types
import uuid
from pathlib import Path

import psycopg
import pytest

from eval_pipeline.history import answers as new_answers
from eval_pipeline.history import runs as new_runs
from eval_pipeline.store.database import DatabaseError, connect
from tests.unit.verdict import test_verdict_attacks_thirtyseventh as thirtyseventh
from tests.unit.verdict import test_verdict_attacks_thirtysixth as thirtysixth

pytestmark = pytest.mark.integration
answers = thirtyseventh.answers
judge = thirtyseventh.judge
refuse = thirtyseventh.refuse

_log = thirtyseventh._log
_job = thirtyseventh._job
_cli_outcome = thirtyseventh._cli_outcome
_setup = thirtyseventh._setup
_errored_answers = thirtyseventh._errored_answers
_DAMAGE = thirtysixth._DAMAGE
_DENSE, _ANSWERS = thirtyseventh._DENSE, thirtyseventh._ANSWERS
_ROOT = Path(__file__).resolve().parents[3]
_BEFORE = "d5c4f01^"


def _load(module: str, name: str) -> types.ModuleType:
    source = subprocess.run(["git", "-C", str(_ROOT), "show", f"{_BEFORE}:eval_pipeline/history/{module}.py"],
                            capture_output=True, text=True, check=True).stdout
    mod = types.ModuleType(name)
    mod.__file__ = f"<{_BEFORE}:{module}.py>"
    sys.modules[name] = mod  # dataclasses look their module up
    exec(compile(source, mod.__file__, "exec"), mod.__dict__)  # noqa: S102 - the pre-refactor code, to compare
    return mod


_OLD: dict[str, types.ModuleType] = {}


def _old() -> tuple[types.ModuleType, types.ModuleType]:
    """(runs, answers) as they were before d5c4f01; the old answers call the old ``accept_reference``."""
    if not _OLD:
        _OLD["runs"] = _load("runs", "_atk38_old_runs")
        _OLD["answers"] = _load("answers", "_atk38_old_answers")
        _OLD["answers"].accept_reference = _OLD["runs"].accept_reference
        _OLD["answers"].NoRecordedRun = _OLD["runs"].NoRecordedRun  # the class the old runs raise
    return _OLD["runs"], _OLD["answers"]


def _outcome(fn, *args, **kwargs):
    try:
        result = fn(*args, **kwargs)
    except Exception as exc:  # noqa: BLE001 - the refusal is the finding
        # NameTheRun (94ce5d1) is the ValueError the old code raised, the run and the variants it
        # names now also fields (the accept_reference job words the same refusal for its Launchpad)
        kind = "ValueError" if type(exc).__name__ == "NameTheRun" else type(exc).__name__
        return ("refused", kind, str(exc))
    if hasattr(result, "retrieval"):
        return ("accepted", result.retrieval, result.answers, result.refused)
    return ("accepted", result)


def _unjudged_dense(answers) -> None:
    answers.sql("UPDATE eval_runs SET provenance = jsonb_set(provenance, '{gate,dense,unjudged}', 'true'::jsonb)"
                " WHERE run_id = 'r2'")


# --------------------------------------------------------------------------------------------
# (a) every refusal: old and new, the same message
# --------------------------------------------------------------------------------------------

_REFUSALS = [(d, v) for d in _DAMAGE for v in (None, ["dense"], ["dense", "bm25"])] + [
    ("unknown variant", ["nope"]), ("unknown variant", ["nope", "bm25"]), ("regressed", None), ("unjudged", None),
    ("answers refused", ["bm25"]), ("no run", None), ("empty variants", [])]


def _prepare(answers, judge, monkeypatch, case: str) -> str:
    _setup(answers, judge, monkeypatch, dense="bad" if case == "regressed" else "good")
    if case in _DAMAGE:
        for statement in _DAMAGE[case]:
            answers.sql(statement)
    elif case == "unjudged":
        _unjudged_dense(answers)
    elif case == "answers refused":
        _errored_answers(answers, "r2")
    return "nope" if case == "no run" else "r2"


@pytest.mark.parametrize(("case", "variants"), _REFUSALS, ids=lambda x: str(x))
def test_held_every_refusal_is_refused_with_the_old_message(answers, judge, monkeypatch, case, variants):
    run_id = _prepare(answers, judge, monkeypatch, case)
    _, old_answers = _old()
    before = _log(answers.uri)
    old = _outcome(old_answers.accept_run, answers.uri, run_id, variants=variants)
    assert old[0] == "refused", old
    assert _log(answers.uri) == before
    new = _outcome(new_answers.accept_run, answers.uri, run_id, variants=variants)
    assert new == old
    assert _log(answers.uri) == before


@pytest.mark.parametrize("case", [*_DAMAGE, "regressed", "unjudged"])
def test_held_accept_reference_alone_keeps_its_refusals(answers, judge, monkeypatch, case):
    run_id = _prepare(answers, judge, monkeypatch, case)
    old_runs, _ = _old()
    before = _log(answers.uri)
    old = _outcome(old_runs.accept_reference, answers.uri, run_id)
    new = _outcome(new_runs.accept_reference, answers.uri, run_id)
    assert old[0] == "refused" and new == old, (old, new)
    assert _log(answers.uri) == before


_ACCEPTED = [("regressed", ["dense"]), ("unjudged", ["dense"]), ("answers refused", None),
             ("answer regression", None), ("answer regression", ["dense", "bm25"])]


@pytest.mark.parametrize("impl", ["old", "new"])
@pytest.mark.parametrize(("case", "variants"), _ACCEPTED, ids=lambda x: str(x))
def test_held_what_was_accepted_still_is_the_same(answers, judge, monkeypatch, case, variants, impl):
    if case == "answer regression":
        _setup(answers, judge, monkeypatch, bm25=0.60)
    else:
        _prepare(answers, judge, monkeypatch, case)
    accept_run = (_old()[1] if impl == "old" else new_answers).accept_run
    before = _log(answers.uri)
    got = _outcome(accept_run, answers.uri, "r2", variants=variants)
    delta = _log(answers.uri)[len(before):]
    expected = {
        ("regressed", ("dense",)): [_DENSE],  # a named variant: dense's answer rows only (none)
        ("unjudged", ("dense",)): [_DENSE],
        ("answers refused", None): [_DENSE],
        ("answer regression", None): [_DENSE],
        ("answer regression", ("dense", "bm25")): [_DENSE, _ANSWERS],
    }[(case, tuple(variants) if variants else None)]
    assert got[0] == "accepted" and got[1] == ["dense"], got
    assert delta == expected, (got, delta)


def test_held_accept_answer_run_alone_keeps_its_refusals(answers, judge, monkeypatch):
    _setup(answers, judge, monkeypatch, bm25=0.60)
    _, old_answers = _old()
    before = _log(answers.uri)
    old = old_answers.accept_answer_run(answers.uri, "r2")
    assert _log(answers.uri) == before and old[0] == []
    new = new_answers.accept_answer_run(answers.uri, "r2")
    assert new[0] == old[0] and _log(answers.uri) == before
    # the same refusals, each now naming the answers-only command: accept_answer_run takes the answers alone
    # (tests/unit/verdict/test_accept_answer_run_is_answers_only.py), and the whole one would pin retrieval too
    assert [n.replace(" --answers-only)", ")") for n in new[1]] == old[1]
    assert all("--answers-only)" in n for n in new[1])
    assert "a measured regression" in new[1][0]


# --------------------------------------------------------------------------------------------
# (b) one transaction, truly? a failure at COMMIT
# --------------------------------------------------------------------------------------------


@pytest.fixture
def refuse_at_commit(answers):
    made = []

    def make(aspect_like: str, message: str = "atk38: refused at commit") -> None:
        function = f"atk38_commit_{uuid.uuid4().hex[:10]}"
        with psycopg.connect(answers.uri, autocommit=True) as conn:
            conn.execute(f"CREATE FUNCTION {function}() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
                         f"IF NEW.aspect LIKE '{aspect_like}' THEN RAISE EXCEPTION '{message}'; END IF; "
                         f"RETURN NEW; END $$")
            conn.execute(f"CREATE CONSTRAINT TRIGGER {function} AFTER INSERT ON eval_references DEFERRABLE "
                         f"INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION {function}()")
        made.append(function)

    yield make
    with psycopg.connect(answers.uri, autocommit=True) as conn:
        for function in made:
            conn.execute(f"DROP FUNCTION IF EXISTS {function}() CASCADE")


def test_held_connect_is_not_autocommit(answers):
    with connect(answers.uri) as conn:
        assert conn.autocommit is False


def test_held_a_failure_at_commit_leaves_nothing_of_the_run_accepted(answers, judge, monkeypatch, refuse_at_commit):
    _setup(answers, judge, monkeypatch)
    refuse_at_commit("answers:%")
    before = _log(answers.uri)
    got = _outcome(new_answers.accept_run, answers.uri, "r2")
    assert got[0] == "refused", got
    assert _log(answers.uri) == before  # dense's row, in the same transaction, rolled back too


@pytest.mark.parametrize("through", ["cli", "job"])
def test_noted_a_failure_at_commit_is_the_promised_database_error(answers, judge, monkeypatch, capsys,
                                                                  refuse_at_commit, through):
    """Noted when this review ran: a raw RaiseException (a traceback); since, `write_acceptance` commits
    inside its own error handling: `error:` and exit 2 saying nothing was accepted, the job's Failure."""
    _setup(answers, judge, monkeypatch)
    refuse_at_commit("answers:%")
    before = _log(answers.uri)
    if through == "cli":
        code, out, err = _cli_outcome(answers, monkeypatch, capsys, "r2")
        assert code == 2, (code, out, err)
        assert "pinned" not in out and "nothing of it was accepted" in err, (out, err)
    else:
        job = _job(answers.uri, run_id="r2")
        assert not job.success and "nothing of it was accepted" in job.text, job.text
    assert _log(answers.uri) == before  # fails closed


def test_held_accept_answer_run_alone_converts_a_failure_at_commit(answers, judge, monkeypatch, refuse_at_commit):
    _setup(answers, judge, monkeypatch)
    refuse_at_commit("answers:%")
    before = _log(answers.uri)
    with pytest.raises(DatabaseError, match="nothing of it was accepted"):
        new_answers.accept_answer_run(answers.uri, "r2")
    assert _log(answers.uri) == before


# --------------------------------------------------------------------------------------------
# (c) secrets in the new message
# --------------------------------------------------------------------------------------------


def test_held_the_database_error_carries_no_server_text(answers, judge, monkeypatch, refuse):
    _setup(answers, judge, monkeypatch)
    secret = "Qx7zzVk9Jw-atk38"
    function = f"atk38_secret_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(answers.uri, autocommit=True) as conn:
        conn.execute(f"CREATE FUNCTION {function}() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
                     f"RAISE EXCEPTION 'postgresql://u:{secret}@h/eval'; END $$")
        conn.execute(f"CREATE TRIGGER {function} BEFORE INSERT ON eval_references FOR EACH ROW "
                     f"EXECUTE FUNCTION {function}()")
    try:
        with pytest.raises(DatabaseError) as raised:
            new_answers.accept_run(answers.uri, "r2")
        assert secret not in str(raised.value) and raised.value.__cause__ is None
        assert "RaiseException; nothing of it was accepted" in str(raised.value)
    finally:
        with psycopg.connect(answers.uri, autocommit=True) as conn:
            conn.execute(f"DROP FUNCTION IF EXISTS {function}() CASCADE")


# --------------------------------------------------------------------------------------------
# (d) two accepts at once
# --------------------------------------------------------------------------------------------


def test_held_two_accepts_at_once_both_commit(answers, judge, monkeypatch):
    _setup(answers, judge, monkeypatch)
    before = _log(answers.uri)
    results: dict[str, object] = {}
    holder = psycopg.connect(answers.uri)
    try:
        holder.execute("LOCK TABLE eval_references IN SHARE ROW EXCLUSIVE MODE")

        def accept(note: str) -> None:
            results[note] = _outcome(new_answers.accept_run, answers.uri, "r2", note=note)

        threads = [threading.Thread(target=accept, args=(n,)) for n in ("first", "second")]
        for t in threads:
            t.start()
            time.sleep(0.3)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            waiting = holder.execute("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
                                     " AND pid <> pg_backend_pid()").fetchone()[0]
            if waiting >= 2 or all(not t.is_alive() for t in threads):
                break
            time.sleep(0.1)
    finally:
        holder.rollback()
        holder.close()
    for t in threads:
        t.join(30)
    assert all(r[0] == "accepted" for r in results.values()), results
    assert _log(answers.uri) == [*before, _DENSE, _ANSWERS, _DENSE, _ANSWERS]
    in_force = new_runs.project_history(answers.uri)
    assert in_force is not None


# --------------------------------------------------------------------------------------------
# (e) the gate in force, read after the commit: a lock timeout there
# --------------------------------------------------------------------------------------------


def _with_lock_timeout(uri: str) -> str:
    return uri + ("&" if "?" in uri else "?") + "options=-c%20lock_timeout%3D300"


def _gate_read_after(answers, monkeypatch, *, locked: bool) -> None:
    """The command line's gate read (the real ``project_history``, its connection with lock_timeout=300ms),
    with eval_runs locked ACCESS EXCLUSIVE by another session for its duration (a migration, a vacuum full, a
    long job's DDL): a real lock timeout, a raw ``psycopg.errors.LockNotAvailable``."""
    import eval_pipeline.history.runs as gate_reader  # the closing line's gate read (runs.gate_in_force)

    real = gate_reader.project_history

    def read(connection_string: str, **kwargs):
        with psycopg.connect(answers.uri) as holder:
            if locked:
                holder.execute("LOCK TABLE eval_runs IN ACCESS EXCLUSIVE MODE")
            return real(_with_lock_timeout(connection_string), **kwargs)

    monkeypatch.setattr(gate_reader, "project_history", read)


def test_hole_1_a_lock_timeout_reading_the_gate_after_the_accept_is_a_traceback(answers, judge, monkeypatch,
                                                                                 capsys):
    _setup(answers, judge, monkeypatch)
    before = _log(answers.uri)
    _gate_read_after(answers, monkeypatch, locked=True)
    code, out, err = _cli_outcome(answers, monkeypatch, capsys, "r2")
    assert _log(answers.uri) == [*before, _DENSE, _ANSWERS]  # holds: committed
    assert "pinned reference of: dense" in out  # holds: printed
    assert code == 0 and "warning:" in err, (code, err)  # a committed acceptance: a warning, exit 0


def test_hole_1s_control_the_same_read_unlocked_exits_0(answers, judge, monkeypatch, capsys):
    _setup(answers, judge, monkeypatch)
    _gate_read_after(answers, monkeypatch, locked=False)
    code, out, err = _cli_outcome(answers, monkeypatch, capsys, "r2")
    assert code == 0 and "the gate in force" in out, (code, out, err)
