"""The thirty-fifth review of the verdict: 804b061 (``answers.accept_run``: the command line's ``accept`` and the
``accept_reference`` job accept a run through it, ``runs.accept_reference`` for retrieval then
``accept_answer_run``; a run with no run row, ``runs.NoRecordedRun``, has its answers accepted alone) and
c4f4979 (``measurements._complete_the_marks``: the owner's contact replaces an older ``CHECK (true)`` clock mark,
and any stale ``*_clock_checked`` constraint on the log, by the mark naming ``position``; ``BOTH_MARKS_SQL``
requires the naming mark, so every lookup of a history with only ``CHECK (true)`` + comment goes through
``check_placement_once``). Older versions run as their own code (the thirty-first's to thirty-fourth's helpers:
``git archive`` into tmp, a subprocess).

Attacked: (1) what ``accept_run`` can make a yardstick: a library answer run (no run row) with a measured
regression, with errored answers, limited; a job-shaped run (retrieval run row + answer rows on one history)
whose run row is deleted by hand so its answers are accepted alone while its retrieval regression stays
unaccepted; a whole accept where retrieval is accepted and the answer regression refused (partial acceptance,
exit code); ``latest`` when the newest answers are a library run; the same cases through the
``accept_reference`` job in-process (``execute_in_process``), compared with the command line. (2) The mark
replacement: a non-owner's and a read-only owner's lookups of a history carrying only ``CHECK (true)`` + the
comment (errors, writes, the gate they judge); c2a64d9, 364fdcb and f19148d, run as themselves, meeting the
replaced mark; an older install's contact while this version's replacement is uncommitted; a user's own
check constraint whose name ends in ``_clock_checked``.

Holes (strict xfails, each with a passing control; each confirmed failing on its AssertionError with
--runxfail; both fixed since: ``accept_run`` tells ``accept_reference`` which named variants the run only
answered, and a role that cannot replace a ``CHECK (true)`` mark is refused until the owner's contact):

1. STUCK by message (pre-existing; 804b061's "one accept for a run, retrieval and answers" keeps it), answers.py
   ``accept_run`` (answers.py:672) calling runs.py ``accept_reference`` first, which refuses a named variant its
   retrieval did not measure (runs.py:943 ``absent``: "run 'r2' has no variant(s) ['bm25']; it has: dense")
   before ``accept_answer_run`` is reached: a run whose retrieval (dense) and answers (bm25) were recorded
   through the library under one run id, bm25's answers a measured regression; the whole accept refuses them
   and names ``accept r2 --variant bm25`` (answers.py:638), which exits 2, and the job fails the same; every
   later run names its own id the same way (and a not-compared answer gate after a distrust names the same
   command). Control: ``accept_answer_run(uri, "r2", variants=["bm25"])`` (the library) ends it. Reach: library
   users recording retrieval and answers of different variant sets under one run id (not seen in the job,
   whose answer variants are its retrieval variants: not proven). Fix: in ``accept_run``, pass
   ``accept_reference`` only the named variants its retrieval measured (refuse only a name that has neither a
   retrieval measurement nor an answer row), or let the answer accept run when every absent name has answer
   rows.

2. FAILS OPEN (the thirty-fourth's hole 1, left open wherever this version's contacts are a non-owner's),
   measurements.py ``_complete_the_marks`` (:417, ``or not owner``: returns) with ``CLOCK_CHECKED_SQL``'s
   ``COALESCE(cardinality(c.conkey), 0) = 0`` arm (:357): a history marked by a7f1507..364fdcb^ (``CHECK
   (true)`` + the comment) used by this version only through an application role that does not own the tables
   (the fix replaces the mark on the OWNER's contact only); X (0.70) accepted, S (0.95, eligible) after a clock
   step; ``position`` renamed by hand; aa3ae5c (an older install run by the owner) re-places (S's eligibility
   wiped): the role's next lookup still counts ``CHECK (true)``: T (-0.25 from S) PASSES against X. Control:
   one owner's contact of this version before the rename replaces the mark: T is then refused or not
   compared. Reach: a deployment whose pipeline role is not the tables' owner, on a history older than
   364fdcb, plus the thirty-fourth's hand rename and older install. Fix: a non-owner whose only mark is a
   ``CHECK (true)`` (``named`` false in ``_complete_the_marks``) is refused as on an unmarked history
   (DatabaseError: the owner's contact marks it; the README already asks for that once), instead of reading on.

Held (plain tests): a library run with a measured regression is refused whole by the command line and the job
alike (exit 2 / Failure, naming ``--variant``); the named command then accepts it and the next run is compared
with it. Errored or limited library answers are refused even when named (exit 2 / Failure; nothing in the
log). A job-shaped run whose run row was deleted by hand: its answers are accepted alone (exit 0, "no run row")
and the next retrieval run at the regressed level still FAILS against the earlier reference (nothing of its
retrieval accepted). A whole accept with a retrieval improvement and an answer regression: retrieval accepted,
answers refused (exit 0, "answers accepted: none", the reason and the named command printed); the next answer
run at the regressed level still fails measured; named, it is accepted deliberately. ``latest`` resolves to the
newest run row (a newer library run is not it) and says which it took. The job and the command line agree on
each case tried (accepted rows, refusals). A non-owner's lookups (repeated) and a read-only owner's lookups of a
``CHECK (true)`` + comment history raise nothing and write nothing (mark, comment, flags unchanged), and what
the non-owner records is judged (a -0.30 fails measured); the owner's next lookup replaces the mark and
distrusts nothing (these tests also accept a DatabaseError naming the owner: hole 2's proposed fix). After the
replacement, c2a64d9, 364fdcb and f19148d contact the history and change nothing (one mark, naming
``position``; the comment kept; nothing distrusted), and T (-0.25 from S) still fails measured against S.
c2a64d9's contact started while this version's replacement is uncommitted reads the committed ``CHECK (true)``
without waiting (it takes no lock on the log) and finishes first; after the commit: one mark, nothing
distrusted, the gate measures.

Noted, not a gate hole: a user's own check constraint on the log whose name ends in ``_clock_checked`` (any
rule, on any column) is dropped silently by the owner's contact on a ``CHECK (true)`` history
(measurements.py ``_mark_clock_checked``: the loop over ``_A_MARK``); the gate is unaffected, the rule is lost
(asserted as a fact below). The replacement takes an ACCESS EXCLUSIVE lock on the log on the owner's first
lookup (before c4f4979 a ``CHECK (true)`` + comment history took no DDL lock on lookups): read, not measured.
A non-owner's lookup on such a history costs two more round trips each time until the owner's contact (read).
``accept latest`` on a history of library runs only (no run row) says "the history is empty" (runs.py
``resolve_run_id``): a wrong message, not a stuck way out (every not-compared message names its run id).

Not tried: a hot standby (advisory lock then COMMENT: ReadOnlySqlTransaction, caught, by reading); ``lock_timeout``
on the owner's role (LockNotAvailable is not caught: the lookup raises, fails closed, retried next contact);
inherited constraints (a DROP of one raises outside the caught errors: hand DDL only, as the thirty-fourth);
``accept`` under ``--prefix`` for a run only in another prefix (read: NoRecordedRun then no answer row: exit 2).
"""

from __future__ import annotations

import threading
import time
import uuid

import psycopg
import pytest

from eval_pipeline.history import measurements
from eval_pipeline.history.answers import accept_answer_run, accept_run, answer_history_exists, read_answer_runs
from eval_pipeline.history.runs import ensure_tables, table_names
from eval_pipeline.store.database import DatabaseError
from eval_pipeline.verdict.answers import judge_answer_run, record_answers
from tests.unit.verdict import test_clock_checked_once as once
from tests.unit.verdict import test_verdict_attacks_eighth as eighth
from tests.unit.verdict import test_verdict_attacks_thirtyfirst as thirtyfirst
from tests.unit.verdict import test_verdict_attacks_thirtyfourth as thirtyfourth
from tests.unit.verdict import test_verdict_attacks_thirtysecond as thirtysecond
from tests.unit.verdict import test_verdict_attacks_twentyninth as twentyninth

pytestmark = pytest.mark.integration
answers = eighth.answers  # answer runs through the library (no run row) on a fresh default history
judge = eighth.judge  # retrieval runs (here under the default prefix too: history_prefix="eval")
row_role = once.row_role

_gate = thirtysecond._gate
_previous = thirtysecond._previous
_rows = thirtysecond._rows
_comment = thirtysecond._comment
_code = thirtysecond._code
_contacted_by = thirtysecond._contacted_by
_marks = thirtyfourth._marks
_C2A, _364, _F19 = thirtysecond._C2A, thirtyfourth._364, thirtysecond._F19


def _cli(answers, monkeypatch, *arguments: str) -> int:
    return twentyninth._accept_through_the_cli(answers, monkeypatch, *arguments)


def _job(uri: str, **config):
    """The ``accept_reference`` job in-process against ``uri`` (as tests/orchestration/test_accept_latest.py)."""
    from dagster import DagsterInstance

    from assets.reference import accept_reference_job
    from resources import DatabaseResource, StateResource

    instance = DagsterInstance.ephemeral()
    database = DatabaseResource(kind="external", url=uri, state=StateResource())
    result = accept_reference_job.execute_in_process(
        run_config={"ops": {"accept_reference_run": {"config": config}}}, resources={"database": database},
        raise_on_error=False, instance=instance)
    result.text = " ".join([e.user_message or "" for e in instance.all_logs(result.run_id)]
                           + [ev.step_failure_data.error.message for ev in result.all_events if ev.is_step_failure])
    return result


def _log(uri: str) -> list[tuple[str, str, str]]:
    with psycopg.connect(uri, autocommit=True) as conn:
        return conn.execute("SELECT run_id, variant, aspect FROM eval_references ORDER BY seq").fetchall()


def _retrieval(judge, run_id: str, hits: int):
    """A retrieval run of bm25 recorded (with its run row) in the default history the answers fixture uses."""
    return judge(run_id, "A", {"bm25": "good"}, hits={"bm25": hits}, history_prefix="eval").gates["bm25"]


# --------------------------------------------------------------------------------------------
# (1) accept_run: what it may make a yardstick, command line and job alike
# --------------------------------------------------------------------------------------------


def _regressed_library_run(answers) -> None:
    """a0 (0.90, a first row) accepted; T (0.60, -0.30: a measured regression) through the library."""
    answers("a0", {"bm25": 0.90})
    assert accept_run(answers.uri, "a0").answers == [("bm25", "deterministic")]
    gate = _gate(answers("T", {"bm25": 0.60}))
    assert gate.state == "comparable" and not gate.passed, gate.message


def test_held_a_library_runs_measured_regression_is_refused_whole_then_accepted_by_name(answers, monkeypatch,
                                                                                       capsys):
    _regressed_library_run(answers)
    before = _log(answers.uri)
    assert _cli(answers, monkeypatch, "T") == 2
    err = capsys.readouterr().err
    assert "no recorded run 'T'" in err and "accept T --variant bm25" in err, err
    job = _job(answers.uri, run_id="T")
    assert not job.success and "accept T --variant bm25" in job.text
    assert _log(answers.uri) == before  # neither accepted anything
    assert _cli(answers, monkeypatch, "T", "--variant", "bm25") == 0
    assert "answers accepted: bm25 deterministic" in capsys.readouterr().out
    gate = _gate(answers("U", {"bm25": 0.60}))
    assert gate.passed and gate.state == "comparable" and _previous(answers("V", {"bm25": 0.60})) == "U"


@pytest.mark.parametrize("damage", ["errored = 3, eligible = false", "limited = true, eligible = false"])
def test_held_errored_or_limited_library_answers_are_refused_even_by_name(answers, monkeypatch, capsys, damage):
    answers("a0", {"bm25": 0.90})
    answers.sql(f"UPDATE eval_measurements SET {damage} WHERE run_id = 'a0'")
    for arguments in (["a0"], ["a0", "--variant", "bm25"]):
        assert _cli(answers, monkeypatch, *arguments) == 2
        err = capsys.readouterr().err
        assert "nor any answer row" in err or "not accepted" in err, err
    for config in ({"run_id": "a0"}, {"run_id": "a0", "variants": ["bm25"]}):
        job = _job(answers.uri, **config)
        assert not job.success and "its answer rows were not accepted" in job.text, job.text
    assert _log(answers.uri) == []


def test_held_a_run_row_deleted_by_hand_accepts_its_answers_alone_and_its_retrieval_regression_still_fails(
        answers, judge, monkeypatch, capsys):
    assert _retrieval(judge, "r1", 100).passed
    answers("r1", {"bm25": 0.90})
    assert _cli(answers, monkeypatch, "r1") == 0
    gate = _retrieval(judge, "r2", 50)
    assert gate.state == "comparable" and not gate.passed, gate.message  # a measured retrieval regression
    answers("r2", {"bm25": 0.90})
    assert _cli(answers, monkeypatch, "r2") == 2  # refused whole: the regression is not named
    capsys.readouterr()
    answers.sql("DELETE FROM eval_question_results WHERE run_id = 'r2'")
    answers.sql("DELETE FROM eval_variant_metrics WHERE run_id = 'r2' AND aspect = 'retrieval'")
    answers.sql("DELETE FROM eval_runs WHERE run_id = 'r2'")
    assert _cli(answers, monkeypatch, "r2") == 0
    out = capsys.readouterr().out
    assert "no run row" in out and "answers accepted: bm25 deterministic" in out, out
    assert ("r2", "bm25", "retrieval") not in _log(answers.uri)
    gate = _retrieval(judge, "r3", 50)  # at r2's level: still measured against r1
    assert gate.state == "comparable" and not gate.passed, gate.message


@pytest.mark.parametrize("through", ["cli", "job"])
def test_held_a_whole_accept_takes_retrieval_and_refuses_the_answer_regression(answers, judge, monkeypatch, capsys,
                                                                               through):
    assert _retrieval(judge, "r1", 90).passed
    answers("r1", {"bm25": 0.90})
    assert _cli(answers, monkeypatch, "r1") == 0
    assert _retrieval(judge, "r2", 100).passed  # a retrieval improvement
    gate = _gate(answers("r2", {"bm25": 0.60}))  # an answer regression
    assert gate.state == "comparable" and not gate.passed
    capsys.readouterr()
    if through == "cli":
        assert _cli(answers, monkeypatch, "r2") == 0
        out = capsys.readouterr().out
        assert "answers accepted: none" in out and "accept r2 --variant bm25" in out, out
    else:
        job = _job(answers.uri, run_id="r2")
        assert job.success and "accept r2 --variant bm25" in job.text
    assert _log(answers.uri)[-1] == ("r2", "bm25", "retrieval")
    assert ("r2", "bm25", "answers:deterministic") not in _log(answers.uri)
    gate = _gate(answers("r3", {"bm25": 0.60}))  # the refused level: still measured against r1
    assert gate.state == "comparable" and not gate.passed, gate.message
    assert _cli(answers, monkeypatch, "r2", "--variant", "bm25") == 0  # by name: deliberately
    assert _gate(answers("r4", {"bm25": 0.60})).passed


def test_held_latest_is_the_newest_run_row_and_says_so(answers, judge, monkeypatch, capsys):
    assert _retrieval(judge, "r1", 100).passed
    answers("r1", {"bm25": 0.90})
    answers("T", {"bm25": 0.95})  # newer, through the library: no run row
    assert _cli(answers, monkeypatch, "latest") == 0
    out = capsys.readouterr().out
    assert "latest: the newest recorded run, r1" in out, out
    job = _job(answers.uri, run_id="latest")
    assert job.success and "the newest recorded run, r1" in job.text
    assert {run for run, _, _ in _log(answers.uri)} == {"r1"}


# --------------------------------------------------------------------------------------------
# (2) the CHECK (true) mark replaced on the owner's contact
# --------------------------------------------------------------------------------------------


def _check_true_and_comment(answers, tmp_path) -> None:
    """a7f1507..364fdcb^'s marks: c2a64d9's ``CHECK (true)`` and f19148d's comment, nothing recorded."""
    thirtysecond._marked_by(answers, _code(_C2A, tmp_path / "c2a"))
    answers.sql(f"COMMENT ON COLUMN eval_references.position IS '{measurements._F19148D_MARK}'")
    assert _marks(answers.uri) == {"eval_references_clock_checked": []}


def _record_as(uri: str, run_id: str, rate: float):
    """The answers fixture's run, through another connection string (a role's)."""
    verdict = judge_answer_run({"bm25": eighth._answer_frame("bm25", rate)}, order=["bm25"],
                               corpus_signature="corpus-1", tolerances=eighth.ANSWER_TOL, strict=False,
                               connection_string=uri, run_id=run_id, configurations={"bm25": "cfg-bm25"})
    record_answers(verdict, uri, run_id, run_eligible=verdict.passed)
    return verdict


def _reads_on_or_is_refused(lookup) -> None:
    """A lookup that cannot replace the mark reads on (this version) or is refused (fails closed: the fix
    proposed for hole 2), never anything else."""
    try:
        lookup()
    except DatabaseError as refused:
        assert "owner" in str(refused), refused


def test_held_a_non_owner_on_a_check_true_history_writes_no_mark_and_passes_no_regression(answers, row_role,
                                                                                          tmp_path):
    _check_true_and_comment(answers, tmp_path)
    as_role = row_role("eval")
    for _ in range(3):
        _reads_on_or_is_refused(lambda: answer_history_exists(as_role))
        _reads_on_or_is_refused(lambda: read_answer_runs(as_role))
    gates = []
    _reads_on_or_is_refused(lambda: _record_as(as_role, "a0", 0.90))
    _reads_on_or_is_refused(lambda: gates.append(_gate(_record_as(as_role, "a1", 0.60))))
    assert all(g.state == "comparable" and not g.passed for g in gates), gates
    assert _marks(answers.uri) == {"eval_references_clock_checked": []}  # nothing written by the role
    assert _comment(answers.uri) == measurements._F19148D_MARK
    assert not any(r[0] for r in _rows(answers.uri).values())
    assert answer_history_exists(answers.uri) is bool(gates)  # the owner's lookup: replaced, nothing distrusted
    assert _marks(answers.uri) == {"eval_references_clock_checked": ["position"]}
    assert not any(r[0] for r in _rows(answers.uri).values())


def test_held_a_read_only_owner_on_a_check_true_history_writes_nothing(answers, tmp_path):
    _check_true_and_comment(answers, tmp_path)
    read_only = answers.uri + ("&" if "?" in answers.uri else "?") + "options=-cdefault_transaction_read_only%3Don"
    for _ in range(3):
        _reads_on_or_is_refused(lambda: answer_history_exists(read_only))
    assert _marks(answers.uri) == {"eval_references_clock_checked": []}
    answers("a0", {"bm25": 0.90})  # the owner's contact
    assert _marks(answers.uri) == {"eval_references_clock_checked": ["position"]}
    assert answer_history_exists(read_only) is True


@pytest.mark.parametrize("older", [_C2A, _364, _F19])
def test_held_an_older_install_meeting_the_replaced_mark_changes_nothing(answers, tmp_path, older):
    code = _code(older, tmp_path / older)
    _check_true_and_comment(answers, tmp_path)
    thirtyfirst._accepted_x_then_s_after_a_step(answers)  # this version's contacts: the mark replaced
    assert _marks(answers.uri) == {"eval_references_clock_checked": ["position"]}
    rows = _rows(answers.uri)
    _contacted_by(code, answers.uri)
    assert _marks(answers.uri) == {"eval_references_clock_checked": ["position"]}
    assert _comment(answers.uri) == measurements._F19148D_MARK
    assert _rows(answers.uri) == rows  # nothing distrusted, no eligibility wiped
    verdict = answers("T", {"bm25": 0.70})  # -0.25 from S
    gate = _gate(verdict)
    assert gate.state == "comparable" and not gate.passed and _previous(verdict) == "S", gate.message


def test_held_an_older_contact_during_the_uncommitted_replacement_leaves_one_mark(answers, tmp_path):
    code = _code(_C2A, tmp_path / "c2a")
    _check_true_and_comment(answers, tmp_path)
    names = table_names("eval")
    done: list[str] = []
    with psycopg.connect(answers.uri) as conn:  # a transaction, left open
        assert measurements.clock_checked(conn, names)
        measurements.check_placement_once(conn, names)  # replaced, not committed
        older = threading.Thread(target=lambda: done.append(_contacted_by(code, answers.uri)))
        older.start()
        waited = False
        with psycopg.connect(answers.uri, autocommit=True) as watch:
            for _ in range(300):  # until it waits on this transaction's locks, or has finished without
                waited = bool(watch.execute("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
                                            " AND pid <> %s", (conn.info.backend_pid,)).fetchone()[0])
                if waited or done:
                    break
                time.sleep(0.1)
        finished_first = bool(done)  # it read the committed CHECK (true) while the replacement was open
        conn.commit()
    older.join(timeout=60)
    assert done, "the older install's contact did not finish"
    assert waited or finished_first, "the older install's contact never met the uncommitted replacement"
    assert _marks(answers.uri) == {"eval_references_clock_checked": ["position"]}
    assert not any(r[0] for r in _rows(answers.uri).values())
    assert answers("a0", {"bm25": 0.90}).passed
    gate = _gate(answers("a1", {"bm25": 0.60}))
    assert gate.state == "comparable" and not gate.passed


def test_fact_a_users_own_clock_checked_constraint_is_dropped_by_the_replacement(answers, tmp_path):
    """Not a gate hole: the rule is lost, the verdict is unaffected."""
    _check_true_and_comment(answers, tmp_path)
    mine = f"note_short_{uuid.uuid4().hex[:6]}_clock_checked"
    answers.sql(f"ALTER TABLE eval_references ADD CONSTRAINT {mine} CHECK (char_length(note) < 500)")
    answers("a0", {"bm25": 0.90})
    assert _marks(answers.uri) == {"eval_references_clock_checked": ["position"]}  # `mine` is gone
    gate = _gate(answers("a1", {"bm25": 0.60}))
    assert gate.state == "comparable" and not gate.passed




# --------------------------------------------------------------------------------------------
# hole 1: an answer variant the run's retrieval did not measure cannot be accepted by name
# --------------------------------------------------------------------------------------------


def _answers_of_a_variant_retrieval_did_not_measure(answers, judge, monkeypatch) -> None:
    """Retrieval (dense) and answers (bm25) recorded through the library under one run id: r1 accepted
    whole, r2's bm25 answers a measured regression (-0.30), refused by a whole accept that names the
    command accepting it by name."""
    assert judge("r1", "A", {"dense": "good"}, history_prefix="eval").gates["dense"].passed
    answers("r1", {"bm25": 0.90})
    assert _cli(answers, monkeypatch, "r1") == 0
    assert judge("r2", "A", {"dense": "good"}, history_prefix="eval").gates["dense"].passed
    gate = _gate(answers("r2", {"bm25": 0.60}))
    assert gate.state == "comparable" and not gate.passed, gate.message
    assert accept_run(answers.uri, "r2").refused[0].endswith("(python -m eval_pipeline.history accept r2 "
                                                           "--variant bm25)")


@pytest.mark.parametrize("through", ["cli", "job"])
def test_the_named_command_accepts_an_answer_variant_the_retrieval_did_not_measure(answers, judge, monkeypatch,
                                                                                     capsys, through):
    _answers_of_a_variant_retrieval_did_not_measure(answers, judge, monkeypatch)
    capsys.readouterr()
    if through == "cli":
        assert _cli(answers, monkeypatch, "r2", "--variant", "bm25") == 0, capsys.readouterr().err
    else:
        job = _job(answers.uri, run_id="r2", variants=["bm25"])
        assert job.success, job.text
    assert ("r2", "bm25", "answers:deterministic") in _log(answers.uri)


def test_hole_1s_control_the_library_accept_by_name_ends_it(answers, judge, monkeypatch):
    _answers_of_a_variant_retrieval_did_not_measure(answers, judge, monkeypatch)
    assert accept_answer_run(answers.uri, "r2", variants=["bm25"])[0] == [("bm25", "deterministic")]
    verdict = answers("r3", {"bm25": 0.60})
    assert _gate(verdict).passed and _gate(verdict).state == "comparable" and _previous(verdict) == "r2"


# --------------------------------------------------------------------------------------------
# hole 2: a history only non-owners of this version contact keeps CHECK (true) (the thirty-fourth's hole 1)
# --------------------------------------------------------------------------------------------


def _used_by_a_non_owner_then_renamed_and_replaced(answers, row_role, tmp_path, older: str) -> str:
    """a7f1507..364fdcb^'s marks (``CHECK (true)`` + the comment); this version's owner contacts it once
    (the fix replaces the mark); then an application role that does not own the tables uses it: X (0.70)
    recorded and accepted, S (0.95, eligible) after a clock step; ``position`` renamed by hand; ``older``
    (the owner's older install) re-places."""
    code = _code(older, tmp_path / older)
    _check_true_and_comment(answers, tmp_path)
    ensure_tables(answers.uri)  # the owner's contact
    assert _marks(answers.uri) == {"eval_references_clock_checked": ["position"]}
    as_role = row_role("eval")
    assert _record_as(as_role, "X", 0.70).passed
    assert accept_answer_run(as_role, "X", variants=["bm25"])[0] == [("bm25", "deterministic")]
    assert _record_as(as_role, "S", 0.95).passed
    with psycopg.connect(answers.uri, autocommit=True) as conn:
        conn.execute("SET session_replication_role = replica")
        conn.execute("UPDATE eval_measurements SET created_at = created_at - interval '1 day' WHERE run_id = 'S'")
    answers.sql("ALTER TABLE eval_references RENAME COLUMN position TO position_by_hand")
    _contacted_by(code, answers.uri)  # no `position`: re-placed by the older install's means (S's eligibility wiped)
    return as_role


def test_a_non_owner_is_refused_on_a_history_whose_only_mark_is_check_true(answers, row_role, tmp_path):
    """Hole 2 closed: a role that cannot replace ``CHECK (true)`` (not the owner) is refused, writing
    nothing, until the owner's contact replaces it; then it records."""
    _check_true_and_comment(answers, tmp_path)
    as_role = row_role("eval")
    with pytest.raises(DatabaseError, match="names no column, which only its tables' owner can replace"):
        _record_as(as_role, "X", 0.70)
    assert _marks(answers.uri) == {"eval_references_clock_checked": []} and not _rows(answers.uri)
    ensure_tables(answers.uri)  # the owner's contact
    assert _marks(answers.uri) == {"eval_references_clock_checked": ["position"]}
    assert _record_as(as_role, "X", 0.70).passed


@pytest.mark.parametrize("older", [thirtysecond._AA3, _F19])
def test_hole_2s_control_the_owners_contact_before_the_rename_replaces_the_mark(answers, row_role, tmp_path, older):
    """The role is refused or T fails; the owner's contact then distrusts once. Since the answer gate
    compares a not-compared row with every row of its key recorded before, T's -0.25 from the distrusted
    S is shown: a measured failure against the recorded S (no yardstick)."""
    as_role = _used_by_a_non_owner_then_renamed_and_replaced(answers, row_role, tmp_path, older)
    try:
        gate = _gate(_record_as(as_role, "T", 0.70))
        assert not gate.passed, gate.message
    except DatabaseError as refused:  # the role cannot distrust: refused until the owner's contact
        assert "owner" in str(refused)
    gate = _gate(answers("T", {"bm25": 0.70}))  # the owner's contact: distrusted once
    thirtysecond._shown_against_recorded(gate)


