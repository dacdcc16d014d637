"""The thirty-sixth review of the verdict: 9dc520d (``runs.accept_reference`` takes ``answered``, the variants
the run has answer rows of, from ``answers.accept_run``: a named variant the run only answered is left to the
answers' acceptance, and when every named variant is answer-only the retrieval accept returns ``[]`` after
the run-level refusals (limited, ``maybe_renamed_from``) and before the errored / fallback checks and
``measurements.accept``; ``measurements._complete_the_marks``: a role that is not the tables' owner, or an
owner that cannot write, is refused with a DatabaseError naming the owner's contact on a history whose only
clock mark is an older ``CHECK (true)``).

Attacked: (1) naming a mix of variants (a retrieval variant with errored questions, with reranker fallbacks;
a limited run; a run whose gate says a variant may be renamed) beside an answer-only one; a whole accept of
a run with a measured retrieval regression and answer-only variants; a variant with both a retrieval
measurement (errored) and answer rows; ``accept latest --variant`` on an answer-only variant; a named
answer-only variant whose answer rows are all refused (errored); the command line and the job in-process
alike. (2) A ``CHECK (true)``-only history met by a non-owner through every lookup the library offers
(``recent_runs``, ``read_run``, ``project_history``, ``read_answer_runs``, ``answer_history_exists``,
``resolve_run_id``, ``accept_run``, ``accept_reference``, the command line's ``runs`` and ``accept``, a
retrieval ``judge_run`` that records); the way out the refusal names (``runs`` as the owner, through
``--url-env``); an owner reached through role membership, with and without INHERIT.

Holes (strict xfail, with a passing control; confirmed failing on its AssertionError with --runxfail; fixed
since: ``accept_run`` raises whenever nothing was accepted, and the command line reports a DatabaseError as an
error line with exit 2):

1. MISREPORTS (an exit code, not a gate hole; new in 9dc520d), answers.py ``accept_run`` (answers.py:688,
   ``if retrieval is None and not answers``) with runs.py ``accept_reference``'s early ``return []``
   (runs.py:957-959): a job-shaped run (a run row) whose named variant the run only answered, with every
   answer row of it refused (errored answers: never a yardstick), accepts NOTHING, yet ``accept r2 --variant
   bm25`` exits 0 ("is now the pinned reference of: no retrieval variant (answers alone)", "answers accepted:
   none") and the ``accept_reference`` job succeeds. ``accept_run``'s docstring says "with nothing accepted, a
   ValueError says why"; before 9dc520d this exited 2. Nothing wrong becomes a yardstick (the next run is
   still compared with the earlier reference), but a script or an operator reading the exit code / the job's
   green status takes the way out as taken. Control: the same answers recorded as a library run (no run row)
   exit 2 and fail the job. Fix: in ``accept_run``, raise the ValueError whenever nothing was accepted
   (``not retrieval and not answers``), naming the refusals.

Held (plain tests): naming ``dense`` (errored questions, or a reranker fallback) beside the answer-only
``bm25`` is refused whole (exit 2, job failed, the log unchanged: bm25's answers are not accepted either);
naming ``bm25`` alone then accepts its answers and nothing of dense. A limited run and a run whose gate
carries ``maybe_renamed_from`` refuse ``--variant bm25`` alone (answer-only) too, command line and job. A whole
accept of a run with a measured retrieval regression and answer-only variants is refused whole; by name,
bm25's answers only are accepted and the next dense run at the regressed level still fails measured against
r1. A variant with both an errored retrieval measurement and answer rows, named, is refused whole.
``accept latest --variant bm25`` takes the newest run row and accepts its answers alone. (2) On a
``CHECK (true)``-only history a non-owner is refused (DatabaseError naming the owner's contact) by every
lookup tried and writes nothing (no mark, no comment change, no row, no log entry, no flag); a retrieval
``judge_run`` as the non-owner is not compared (unjudged, the message naming the owner's contact) and records
nothing. The way out works: ``python -m eval_pipeline.history --url-env VAR runs`` as the owner replaces the
mark (nothing distrusted) and the role then records, its -0.30 failing measured; under another prefix
``--prefix`` as the message says does the same, and the role's retrieval regression then fails measured. An
owner reached through membership with INHERIT replaces the mark itself; one without INHERIT (``pg_has_role``
MEMBER true, ALTER refused) is refused naming InsufficientPrivilege and the owner's contact, and the owning
role's contact ends it. Also noted: a named answer-only variant moves no retrieval window, yet the command line
then prints "the gate in force ... from now on (the accepted run's settings)", which are r1's (read, not run).

Noted, not a gate hole: the command line's ``runs`` and ``accept`` as a refused non-owner end in an uncaught
DatabaseError (a traceback; the message, naming the way out, is its last line), not ``error: ...`` and exit 2
(``__main__`` catches ValueError only; the same for any database refusal, before 9dc520d too).

Not tried: a hot standby (read: ReadOnlySqlTransaction caught on COMMENT, refused as a read-only owner, the
35th's test); the Dagster jobs through a non-owner's ``DatabaseResource`` (read: the verdict's lookups fail
closed as above, the record raises); ``lock_timeout`` during the owner's replacement (LockNotAvailable is not
caught: the lookup raises, retried next contact).
"""

from __future__ import annotations

import uuid

import psycopg
import pytest

from eval_pipeline.history.answers import accept_run, answer_history_exists, read_answer_runs
from eval_pipeline.history.runs import (
    accept_reference,
    ensure_tables,
    project_history,
    read_run,
    recent_runs,
    resolve_run_id,
)
from eval_pipeline.store.database import DatabaseError
from tests.unit.verdict import test_verdict_attacks_eighth as eighth
from tests.unit.verdict import test_verdict_attacks_thirtyfifth as thirtyfifth
from tests.unit.verdict.test_verdict_attacks_seventeenth import _as_role

pytestmark = pytest.mark.integration
answers = eighth.answers
judge = eighth.judge
row_role = thirtyfifth.row_role

_gate = thirtyfifth._gate
_previous = thirtyfifth._previous
_rows = thirtyfifth._rows
_comment = thirtyfifth._comment
_marks = thirtyfifth._marks
_log = thirtyfifth._log
_job = thirtyfifth._job
_cli = thirtyfifth._cli
_record_as = thirtyfifth._record_as


# --------------------------------------------------------------------------------------------
# (1) a named mix of retrieval and answer-only variants
# --------------------------------------------------------------------------------------------


def _r2_with_dense_retrieval_and_bm25_answers(answers, judge, monkeypatch, *, dense: str = "good",
                                             bm25: float = 0.90) -> None:
    """r1: dense retrieval + bm25 answers, accepted whole; r2: dense retrieval (``dense``) + bm25 answers
    (``bm25``) under one run id (retrieval with its run row, answers through the library)."""
    assert judge("r1", "A", {"dense": "good"}, history_prefix="eval").gates["dense"].passed
    answers("r1", {"bm25": 0.90})
    assert _cli(answers, monkeypatch, "r1") == 0
    judge("r2", "A", {"dense": dense}, history_prefix="eval")
    answers("r2", {"bm25": bm25})


_DAMAGE = {
    "errored": ["UPDATE eval_measurements SET errored = 3, eligible = false WHERE run_id = 'r2' AND variant = 'dense'"
                " AND aspect = 'retrieval'"],
    "fallback": ["INSERT INTO eval_variant_metrics (run_id, variant, aspect, metric, value) VALUES ('r2', 'dense',"
                 " 'retrieval', 'n_rerank_fallback', 2) ON CONFLICT (run_id, variant, aspect, metric) DO UPDATE"
                 " SET value = 2"],
    "limited": ["UPDATE eval_runs SET limited = true WHERE run_id = 'r2'"],
    "renamed": ["UPDATE eval_runs SET provenance = jsonb_set(provenance, '{gate,dense,maybe_renamed_from}',"
                " '[\"sparse\"]'::jsonb) WHERE run_id = 'r2'"],
}
_WHY = {"errored": "errored questions", "fallback": "reranker fallbacks", "limited": "limited run",
        "renamed": "renamed"}


@pytest.mark.parametrize("damage", list(_DAMAGE))
def test_held_a_named_mix_keeps_every_refusal_of_the_retrieval_variant(answers, judge, monkeypatch, capsys,
                                                                       damage):
    _r2_with_dense_retrieval_and_bm25_answers(answers, judge, monkeypatch)
    for statement in _DAMAGE[damage]:
        answers.sql(statement)
    before = _log(answers.uri)
    capsys.readouterr()
    assert _cli(answers, monkeypatch, "r2", "--variant", "dense", "--variant", "bm25") == 2
    assert _WHY[damage] in capsys.readouterr().err
    job = _job(answers.uri, run_id="r2", variants=["dense", "bm25"])
    assert not job.success and _WHY[damage] in job.text, job.text
    assert _log(answers.uri) == before  # bm25's answers were not accepted either
    alone = _cli(answers, monkeypatch, "r2", "--variant", "bm25")
    if damage in ("limited", "renamed"):  # run-level: refuses an answer-only name too
        assert alone == 2 and _WHY[damage] in capsys.readouterr().err
        assert _log(answers.uri) == before
    else:  # dense's trouble is dense's: bm25's answers alone, nothing of dense
        assert alone == 0
        assert _log(answers.uri) == [*before, ("r2", "bm25", "answers:deterministic")]


@pytest.mark.parametrize("through", ["cli", "job"])
def test_held_a_measured_retrieval_regression_beside_answer_only_variants_is_refused_whole(
        answers, judge, monkeypatch, capsys, through):
    _r2_with_dense_retrieval_and_bm25_answers(answers, judge, monkeypatch, dense="bad")
    before = _log(answers.uri)
    if through == "cli":
        assert _cli(answers, monkeypatch, "r2") == 2
        assert "accept r2 --variant dense" in capsys.readouterr().err
        assert _cli(answers, monkeypatch, "r2", "--variant", "bm25") == 0
    else:
        job = _job(answers.uri, run_id="r2")
        assert not job.success and "accept r2 --variant dense" in job.text, job.text
        assert _job(answers.uri, run_id="r2", variants=["bm25"]).success
    assert _log(answers.uri) == [*before, ("r2", "bm25", "answers:deterministic")]
    gate = judge("r3", "A", {"dense": "bad"}, history_prefix="eval").gates["dense"]  # at r2's level
    assert gate.state in ("comparable", "paired") and not gate.passed, gate.message


def test_held_a_variant_with_errored_retrieval_and_answer_rows_is_refused_whole_by_name(answers, judge, monkeypatch,
                                                                                       capsys):
    assert judge("r1", "A", {"bm25": "good"}, history_prefix="eval").gates["bm25"].passed
    answers("r1", {"bm25": 0.90})
    assert _cli(answers, monkeypatch, "r1") == 0
    judge("r2", "A", {"bm25": "good"}, history_prefix="eval")
    answers("r2", {"bm25": 0.60})  # a measured answer regression
    answers.sql("UPDATE eval_measurements SET errored = 2, eligible = false WHERE run_id = 'r2'"
                " AND aspect = 'retrieval'")
    before = _log(answers.uri)
    assert _cli(answers, monkeypatch, "r2", "--variant", "bm25") == 2
    assert "errored questions" in capsys.readouterr().err
    assert _log(answers.uri) == before
    assert not _gate(answers("r3", {"bm25": 0.60})).passed  # still measured against r1's answers


def test_held_accept_latest_names_an_answer_only_variant_of_the_newest_run_row(answers, judge, monkeypatch, capsys):
    _r2_with_dense_retrieval_and_bm25_answers(answers, judge, monkeypatch, bm25=0.60)
    answers("T", {"bm25": 0.95})  # newer, no run row: not `latest`
    capsys.readouterr()
    # naming a variant needs the run's id (test_accept_latest.py): refused, naming the newest run row, r2
    assert _cli(answers, monkeypatch, "latest", "--variant", "bm25") == 2
    assert "the newest recorded run is r2" in capsys.readouterr().err
    assert _cli(answers, monkeypatch, "r2", "--variant", "bm25") == 0
    out = capsys.readouterr().out
    assert "no retrieval variant (answers alone)" in out, out
    assert "answers accepted: bm25 deterministic" in out
    assert ("r2", "dense", "retrieval") not in _log(answers.uri)
    assert _log(answers.uri)[-1] == ("r2", "bm25", "answers:deterministic")


def _errored_answers(answers, run_id: str) -> None:
    answers.sql("UPDATE eval_measurements SET errored = 3, eligible = false WHERE run_id = %s"
                " AND aspect <> 'retrieval'", run_id)


def test_hole_1_a_named_answer_only_variant_with_nothing_accepted_is_an_error(answers, judge, monkeypatch, capsys):
    _r2_with_dense_retrieval_and_bm25_answers(answers, judge, monkeypatch)
    _errored_answers(answers, "r2")
    before = _log(answers.uri)
    capsys.readouterr()
    code = _cli(answers, monkeypatch, "r2", "--variant", "bm25")
    job = _job(answers.uri, run_id="r2", variants=["bm25"])
    assert _log(answers.uri) == before  # nothing accepted: holds today
    assert (code, job.success) == (2, False), (capsys.readouterr().out, job.text)


def test_hole_1s_control_a_library_run_with_the_same_answers_exits_2(answers, monkeypatch, capsys):
    answers("r1", {"bm25": 0.90})
    assert _cli(answers, monkeypatch, "r1") == 0
    answers("r2", {"bm25": 0.90})
    _errored_answers(answers, "r2")
    before = _log(answers.uri)
    assert _cli(answers, monkeypatch, "r2", "--variant", "bm25") == 2
    assert "not accepted" in capsys.readouterr().err
    assert not _job(answers.uri, run_id="r2", variants=["bm25"]).success
    assert _log(answers.uri) == before


# --------------------------------------------------------------------------------------------
# (2) a CHECK (true)-only history met by a role that cannot replace the mark
# --------------------------------------------------------------------------------------------


def _check_true_only(answers, judge, monkeypatch) -> None:
    """r1 (dense retrieval, bm25 answers) recorded and accepted, r2 recorded, by this version as the owner;
    then the mark put back as 4fafd48..364fdcb^ left it: ``CHECK (true)`` (the comment kept)."""
    _r2_with_dense_retrieval_and_bm25_answers(answers, judge, monkeypatch)
    answers.sql("ALTER TABLE eval_references DROP CONSTRAINT eval_references_clock_checked")
    answers.sql("ALTER TABLE eval_references ADD CONSTRAINT eval_references_clock_checked CHECK (true)")
    assert _marks(answers.uri) == {"eval_references_clock_checked": []}


def _state(uri: str):
    with psycopg.connect(uri, autocommit=True) as conn:
        runs = conn.execute("SELECT run_id FROM eval_runs ORDER BY seq").fetchall()
    return _marks(uri), _comment(uri), _rows(uri), _log(uri), runs


_REFUSED = "names no column, which only its tables' owner can replace"


def test_held_a_non_owner_is_refused_by_every_lookup_and_writes_nothing(answers, judge, monkeypatch, row_role,
                                                                        capsys):
    _check_true_only(answers, judge, monkeypatch)
    as_role = row_role("eval")
    before = _state(answers.uri)
    lookups = {
        "recent_runs": lambda: recent_runs(as_role),
        "read_run": lambda: read_run(as_role, "r2"),
        "project_history": lambda: project_history(as_role),
        "read_answer_runs": lambda: read_answer_runs(as_role, run_id="r2"),
        "answer_history_exists": lambda: answer_history_exists(as_role),
        "resolve_run_id": lambda: resolve_run_id(as_role, "latest"),
        "accept_run": lambda: accept_run(as_role, "r2", variants=["dense", "bm25"]),
        "accept_reference": lambda: accept_reference(as_role, "r2", variants=["dense"]),
        "record_answers": lambda: _record_as(as_role, "r3", 0.60),
    }
    for name, lookup in lookups.items():
        with pytest.raises(DatabaseError, match=_REFUSED) as refused:
            lookup()
        assert "--url-env VAR runs" in str(refused.value), name
    monkeypatch.setenv("ATK36_ROLE", as_role)
    from eval_pipeline.history.__main__ import main
    for arguments in (["runs"], ["accept", "r2"], ["accept", "latest", "--variant", "bm25"]):
        # a traceback when this review ran; since, an error line and exit 2
        assert main(["--url-env", "ATK36_ROLE", *arguments]) == 2, arguments
        assert _REFUSED in capsys.readouterr().err, arguments
    assert _state(answers.uri) == before  # no mark, no comment, no row, no log entry, no flag


def test_held_a_non_owners_retrieval_run_is_not_compared_and_not_recorded(judge, row_role, monkeypatch):
    assert judge("r1", "A", {"dense": "good"}).gates["dense"].passed
    judge.sql("ALTER TABLE {references} DROP CONSTRAINT " + f'"{judge.prefix}_references_clock_checked"')
    judge.sql("ALTER TABLE {references} ADD CONSTRAINT " + f'"{judge.prefix}_references_clock_checked" CHECK (true)')
    as_role = row_role(judge.prefix)
    gate = judge("r2", "A", {"dense": "bad"}, connection_string=as_role, record=False).gates["dense"]
    assert not gate.passed and gate.state == "not_compared" and gate.unjudged, gate.message
    assert _REFUSED in gate.message and "--url-env VAR runs" in gate.message, gate.message
    with pytest.raises(DatabaseError, match=_REFUSED):  # recording it: refused, the transaction rolled back
        judge("r2", "A", {"dense": "bad"}, connection_string=as_role)
    with psycopg.connect(judge.uri, autocommit=True) as conn:
        runs = [r[0] for r in conn.execute(f'SELECT run_id FROM "{judge.prefix}_runs"').fetchall()]
    assert runs == ["r1"]
    assert _marks(judge.uri, judge.prefix) == {f"{judge.prefix}_references_clock_checked": []}
    monkeypatch.setenv("ATK36_OWNER", judge.uri)  # the way out under another prefix: `--prefix`, as it says
    from eval_pipeline.history.__main__ import main
    assert main(["--url-env", "ATK36_OWNER", "--prefix", judge.prefix, "runs"]) == 0
    assert _marks(judge.uri, judge.prefix) == {f"{judge.prefix}_references_clock_checked": ["position"]}
    gate = judge("r2", "A", {"dense": "bad"}, connection_string=as_role).gates["dense"]
    assert gate.state in ("comparable", "paired") and not gate.passed, gate.message


def test_held_the_named_way_out_runs_as_the_owner_ends_the_refusal(answers, judge, monkeypatch, row_role, capsys):
    _check_true_only(answers, judge, monkeypatch)
    as_role = row_role("eval")
    with pytest.raises(DatabaseError, match=_REFUSED):
        _record_as(as_role, "r3", 0.90)
    rows = _rows(answers.uri)
    monkeypatch.setenv("ATK36_OWNER", answers.uri)
    from eval_pipeline.history.__main__ import main
    assert main(["--url-env", "ATK36_OWNER", "runs"]) == 0
    assert "r2" in capsys.readouterr().out
    assert _marks(answers.uri) == {"eval_references_clock_checked": ["position"]}
    assert _rows(answers.uri) == rows  # nothing distrusted
    assert _record_as(as_role, "r3", 0.90).passed
    gate = _gate(_record_as(as_role, "r4", 0.60))
    assert gate.state == "comparable" and not gate.passed, gate.message


@pytest.fixture
def member_of_the_owner(answers):
    """member(inherit): a role owning the history's tables (NOLOGIN) and a member of it, as a URL."""
    owner, member = f"own_{uuid.uuid4().hex[:8]}", f"mem_{uuid.uuid4().hex[:8]}"
    made: list[str] = []

    def make(inherit: bool) -> tuple[str, str]:
        with psycopg.connect(answers.uri, autocommit=True) as conn:
            conn.execute(f'CREATE ROLE "{owner}" NOLOGIN NOSUPERUSER')
            conn.execute(f'CREATE ROLE "{member}" NOLOGIN NOSUPERUSER {"INHERIT" if inherit else "NOINHERIT"}')
            made.extend([member, owner])
            conn.execute(f'GRANT USAGE ON SCHEMA public TO "{owner}"')
            conn.execute(f'GRANT USAGE ON SCHEMA public TO "{member}"')
            conn.execute(f'GRANT "{owner}" TO "{member}"')
            for (table,) in conn.execute("SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid ="
                                         " c.relnamespace WHERE n.nspname = 'public' AND c.relkind = 'r' AND"
                                         " c.relname LIKE 'eval\\_%'").fetchall():
                conn.execute(f'ALTER TABLE "{table}" OWNER TO "{owner}"')
                conn.execute(f'GRANT SELECT, INSERT, UPDATE, DELETE ON "{table}" TO "{member}"')
            conn.execute(f'GRANT USAGE, SELECT, UPDATE ON ALL SEQUENCES IN SCHEMA public TO "{member}"')
            conn.execute(f'GRANT USAGE, SELECT, UPDATE ON ALL SEQUENCES IN SCHEMA public TO "{owner}"')
        return _as_role(answers.uri, member), _as_role(answers.uri, owner)

    yield make
    with psycopg.connect(answers.uri, autocommit=True) as conn:
        me = conn.execute("SELECT current_user").fetchone()[0]
        for role in made:
            conn.execute(f'REASSIGN OWNED BY "{role}" TO "{me}"')
            conn.execute(f'DROP OWNED BY "{role}" CASCADE')
            conn.execute(f'DROP ROLE "{role}"')


@pytest.mark.parametrize("inherit", [True, False], ids=["inherit", "noinherit"])
def test_held_an_owner_reached_through_membership(answers, judge, monkeypatch, member_of_the_owner, inherit):
    _check_true_only(answers, judge, monkeypatch)
    member, owner = member_of_the_owner(inherit)
    rows = _rows(answers.uri)
    if inherit:  # the owner's privileges: it replaces the mark itself
        assert answer_history_exists(member) is True
    else:  # a member (pg_has_role MEMBER) without the owner's privileges: refused, the owner named
        with pytest.raises(DatabaseError, match=_REFUSED + r".*InsufficientPrivilege.*as the owner"):
            answer_history_exists(member)
        assert _marks(answers.uri) == {"eval_references_clock_checked": []}
        assert answer_history_exists(owner) is True  # the owning role's contact
    assert _marks(answers.uri) == {"eval_references_clock_checked": ["position"]}
    assert _rows(answers.uri) == rows
    assert _record_as(member, "r3", 0.90).passed
    assert not _gate(_record_as(member, "r4", 0.60)).passed


def test_held_a_read_only_owner_is_refused_naming_it_and_the_writable_owner_ends_it(answers, judge, monkeypatch):
    _check_true_only(answers, judge, monkeypatch)
    read_only = answers.uri + ("&" if "?" in answers.uri else "?") + "options=-cdefault_transaction_read_only%3Don"
    with pytest.raises(DatabaseError, match=_REFUSED + r".*ReadOnlySqlTransaction"):
        recent_runs(read_only)
    assert _marks(answers.uri) == {"eval_references_clock_checked": []}
    ensure_tables(answers.uri)
    assert [r["run_id"] for r in recent_runs(read_only)] == ["r2", "r1"]

