"""The twenty-fourth review of the verdict: 76c754d (and 62f8753, 2d9c93e under it).

Attacked: ``measurements._LOGGED_WHEN_MADE`` (measurements.py:656-657: with nothing logged, an
unlogged acceptance is a self-conflict only with a run row AND ``accepted_at <> created_at``; the
upgrade stamps the flag-only answer acceptances of 19af7bb..a60854a^ at ``created_at``,
measurements.py:448), what the exemption lets through: whether a normal flow writes ``accepted_at
= created_at`` (every ``accept`` from 3eb5cd5 to HEAD stamps ``clock_timestamp()``, and
a60854a..3eb5cd5^ too, read with ``git show``; ``write``'s upsert never names ``created_at``);
where ``_place_acceptances`` puts an exempt row (``after(accepted_at) + 0.75``, measurements.py:
300, with no bound by the log's running minimum) and how ``_ORDERS["latest"]`` (GREATEST(seq,
position), measurements.py:570) and ``_latest_acceptance`` (measurements.py:660-681) read it; the
upgrade's interleaving (``ORDER BY at, part, n``, measurements.py:456: by ``created_at`` first); an
exempt row older than a logged acceptance of the same (variant, grader); a logged acceptance
deleted over an exempt one (``moved_reference``, runs.py:734-771); answers' ``_since_acceptance``
(log only); the command line's accept on a conflicted history. Runs judged with the eighth
review's ``answers`` fixture against the session Postgres (marked ``integration``), the twelfth's
``_retrieval_row``, the twenty-third's ``_accepted_as_19af7bb_did`` (flag-only acceptance upgraded,
positions dropped and placed again on first contact, as the fifteenth's ``_as_before_positions``),
and the frozen legacy DDL of tests/integration/test_history_upgrade.py (``LEGACY_DDL``,
``legacy_run``).

Closed since by the lead (the tests below are plain; each fix removed in turn fails its test): a
flag-only acceptance (``measurements.FLAG_ONLY``: stamped by the upgrade at its measurement's own
time) is placed just after its measurement (``ROW_POSITION``: ``seq + 1e-6``), below any logged
entry placed after it and never past later runs by a clock (holes 1 and 2); and two flag-only
acceptances among a lookup's candidates are a conflict until a run is accepted: neither says
when it was made, and the order the upgrade gave them is by time (hole 3, failing closed rather
than recovering the legacy table's order).

Holes (strict xfails, each confirmed failing on 76c754d (HEAD 6c0f7a2, no product change since),
and with --runxfail on an AssertionError about the gate or the yardstick; each also run in frozen
worktrees at 62f8753 and 2d9c93e with --runxfail):

1. FAILS OPEN (previous-run gate): an exempt legacy answer acceptance stamped while the clock ran
   ahead is placed past every run recorded after it. ``_place_acceptances`` (measurements.py:300)
   puts a row with no log entry at ``after(m.accepted_at) + 0.75``, ``after`` = the last
   measurement recorded by that stamp; the upgrade's stamp is the row's own ``created_at``
   (measurements.py:448), which a clock that ran ahead (then set back) makes later than runs
   recorded after it (by 3eb5cd5..87cb394^, which record without positions; placed by a later
   version). Log entries are bounded by the running minimum ("a stamp is only ever moved
   earlier"), this row is not. a1 (0.75) flag-accepted with the clock a day ahead; a2, a3 (0.95,
   eligible) after; placed: a1 at a3.seq + 0.75. GREATEST(seq, position) (measurements.py:570)
   makes a1 the previous run of a4, and (nothing logged, a1 exempt) its reference with no
   conflict; ``moved_reference``: a1's position > its own seq, "accepted since". a4 (0.75, -0.20
   from the previous eligible a3) passes compared. At 62f8753 this was a self-conflict (a2 already
   not compared: closed, spuriously); at 2d9c93e it passed as now: 76c754d re-opened it.
   Reachability: upgrade through an intermediate version, a clock that ran ahead; no hand edit.
   Severity: fails open on the previous-run gate (a4 is within the pinned a1's bar: a step
   regression from a3 passes). Fix: place an entry-less row no later than its own measurement's
   next one (``LEAST(after(accepted_at), m.seq) + 0.75``), or bound it by the running minimum of
   the log entries placed after it, as the entries are.

2. SPURIOUS STOP on upgrade (pre-existing: same at 2d9c93e and 62f8753): an exempt legacy answer
   acceptance OLDER than a logged acceptance of the same (variant, grader) is placed after it.
   a0 (0.90) eligible, a1 (0.75, failed) flag-accepted by 19af7bb..a60854a^; after the upgrade to
   a version logging answer acceptances without positions (a60854a..87cb394^) the user re-accepts
   a0 before recording another run. The placement puts a0's entry at ``after + 0.25`` (entries in
   (after, after + 0.5), measurements.py:285) and a1's row at ``after + 0.75`` (the same
   ``after``): a1 is "an unlogged acceptance placed after the logged one" (measurements.py:679-681);
   a2 (0.90, equal to a0) is not compared: "run a1 was accepted after run a0 but that acceptance
   has no entry". Every flag-only acceptance predates every logged one (the code changed from one
   to the other), so a0 is the reference. Reachability: upgrade, normal use (re-accepting an older
   run first thing after upgrading; a run recorded in between places it right, held below).
   Severity: spurious stop, recoverable (accept a0 again through the command line, held). Fix:
   place an exempt row (no entry, ``accepted_at = created_at``) at ``after`` itself, before every
   entry sharing its ``after``.

3. FAILS OPEN (pinned reference and previous row) on a plain upgrade: two flag-only answer
   acceptances of 19af7bb..a60854a^, the older one's run recorded while the clock ran a day ahead.
   Legacy: r1 (0.80) eligible; r2 (0.70, failed) recorded with the clock ahead and accepted; r3
   (0.95) recorded after the clock was set right, eligible, accepted. That code (and a60854a..
   3eb5cd5^: NULL stamps, ``seq DESC``) read r3 as the reference and the previous row (the accepted
   row latest in ``{prefix}_answer_runs.seq``). ``_upgrade`` interleaves by ``created_at`` first
   (measurements.py:456), so r2 gets the last seq; both rows are stamped at their ``created_at``,
   unlogged, exempt; the latest by position wins: r2 is the reference and the previous row, with
   no conflict, and ``moved_reference`` passes it (its position past its own seq; the legacy rows
   recorded no ``reference_run_id``). The next run at 0.70 is judged against 0.70 both ways: a
   drop of 0.25 from the pinned 0.95 passes. 62f8753 read r2 as a self-conflict (closed); 2d9c93e
   as now (r2, no conflict): 76c754d re-opened it. Reachability: upgrade from 19af7bb..a60854a^
   with a clock that ran ahead while an accepted run was recorded; no intermediate version, no
   hand edit. Severity: fails open on the pinned reference. Fix: ``_upgrade`` orders the legacy
   answer rows by their own ``seq`` (``n``) among themselves (interleave with the retrieval runs
   by time only where the two orders agree), or logs the flag-only acceptances in that order; or
   with more than one exempt acceptance of a key, a conflict (which one is in force cannot be told
   from stamps the upgrade made up).

What held (plain tests): hole 1's control (the same legacy acceptance on time: a3 is the previous
run and a4's -0.20 fails measured); hole 2's control (a run recorded between the legacy acceptance
and the logged re-accept: a0 is the reference, no conflict, a drop from it fails measured); hole
2's stop ends by accepting a0 again through the real command line; hole 3's control (r2 on time:
r3 is the reference and the previous row, no conflict); a logged acceptance (a2) deleted over an
exempt one (a1): a1 comes back with no conflict, but ``moved_reference`` stops a4 (-0.09 from a3,
-0.18 from a2) as "which no one accepted since"; a normal ``accept`` never stamps the row's own
time; a re-recorded accepted row (a retried step) keeps ``created_at`` and its stamp, so a deleted
entry under it stays a self-conflict (that test fails at 2d9c93e, as expected: the 62f8753 rule).

By reading (no test): the exemption is reached only by the upgrade or a hand edit (no version
records and accepts in one transaction). ``_since_acceptance`` (answers.py:480-501) reads the log
only: an exempt acceptance starts no window (the graders-since window and the tolerance floor
start at an older logged one or span the history: stricter, never looser). The conflict message's
command (``accept <run> --variant <v>``, runs.py:714-731) re-accepts that run's retrieval and every
grader of the variant, not only the conflicted one: with a newer acceptance of another grader or of
retrieval, following it moves those references back to that run (an explicit user action; the
message could say so). The Dagster ``accept_reference`` job (assets/reference.py:49-53) makes the
same two calls as the command line.
"""

from __future__ import annotations

import psycopg
import pytest

from tests.integration import test_history_upgrade as upgrade
from tests.unit.verdict import test_verdict_attacks_eighth as eighth
from tests.unit.verdict import test_verdict_attacks_twelfth as twelfth
from tests.unit.verdict import test_verdict_attacks_twentythird as twentythird

pytestmark = pytest.mark.integration
answers = eighth.answers  # the eighth review's fixture
_retrieval_row = twelfth._retrieval_row
_accepted_as_19af7bb_did = twentythird._accepted_as_19af7bb_did


def _gate(verdict):
    return eighth._answer_gate(verdict)


def _run(answers, run_id: str, rate: float):
    _retrieval_row(answers, run_id)
    return answers(run_id, {"bm25": rate})


def _stamped_ahead_as_19af7bb_did(answers, run_id: str) -> None:
    """``run_id``'s answers recorded while the clock ran a day ahead and accepted by the code of
    19af7bb..a60854a^ (flag only): after the upgrade its row's ``created_at`` and stamp are the
    same time, a day ahead. Written around the trigger, as the upgrade's INSERT writes it."""
    with psycopg.connect(answers.uri, autocommit=True) as conn:
        conn.execute("SET session_replication_role = replica")
        conn.execute("UPDATE eval_measurements SET created_at = created_at + interval '1 day',"
                     " accepted_at = created_at + interval '1 day' WHERE run_id = %s AND aspect <> 'retrieval'",
                     (run_id,))


def _placed_again(answers) -> None:
    """The position columns dropped: the next contact places every acceptance by time (the
    history as a version without positions left it)."""
    answers.sql("ALTER TABLE eval_measurements DROP COLUMN IF EXISTS accepted_position")
    answers.sql("ALTER TABLE eval_references DROP COLUMN IF EXISTS position")


# --------------------------------------------------------------------------------------------
# hole 1: an exempt legacy acceptance stamped with the clock ahead is placed past later runs
# --------------------------------------------------------------------------------------------


def _clock_ahead_history(answers, *, ahead: bool) -> None:
    """a0 (0.80) eligible; a1 (0.75) recorded (with the clock a day ahead when ``ahead``) and
    flag-accepted by the code before a60854a, upgraded; a2, a3 (0.95) recorded after the clock was
    set right, eligible; then placed by time again (a version without positions recorded a2, a3)."""
    assert _run(answers, "a0", 0.80).passed
    _run(answers, "a1", 0.75)
    if ahead:
        _stamped_ahead_as_19af7bb_did(answers, "a1")
        _placed_again(answers)  # the upgrade (and a version with positions reading it once)
    else:
        _accepted_as_19af7bb_did(answers, "a1")  # the twenty-third's: stamped at created_at, placed again
    assert _run(answers, "a2", 0.95).passed
    assert _run(answers, "a3", 0.95).passed
    _placed_again(answers)


def test_a_legacy_acceptance_stamped_ahead_is_not_the_previous_run_of_later_runs(answers):
    """Hole 1: a4 (0.75) is -0.20 from the previous eligible run a3 (0.95): it must fail, not pass
    against a1 read as the previous run."""
    _clock_ahead_history(answers, ahead=True)
    verdict = _run(answers, "a4", 0.75)
    gate = _gate(verdict)
    assert not gate.passed, (gate.state, gate.message, verdict.rows[0]["previous"]["run_id"])


def test_hole_1s_control_without_the_clock_ahead_the_step_regression_fails(answers):
    """Held: the same legacy acceptance stamped at its own time (no clock ahead): a3 is the
    previous run, a4 (0.75, -0.20) fails as compared."""
    _clock_ahead_history(answers, ahead=False)
    verdict = _run(answers, "a4", 0.75)
    gate = _gate(verdict)
    assert not gate.passed and gate.state != "not_compared", gate.message
    assert verdict.rows[0]["previous"]["run_id"] == "a3", verdict.rows[0]["previous"]


# --------------------------------------------------------------------------------------------
# hole 3: the upgrade orders two flag-only acceptances by a clock that ran ahead
# --------------------------------------------------------------------------------------------


@pytest.fixture
def flag_only_legacy(pg_uri, request):
    """A history of the code of 19af7bb..a60854a^ (the frozen legacy DDL of test_history_upgrade.py):
    r1 (0.80) eligible; r2 (0.70, its gate failed) recorded while the clock ran a day ahead and
    accepted (a trade-off); r3 (0.95) recorded after the clock was set right, eligible, accepted.
    Answers accepted by the flag alone (``accepted = true``, no stamp, no entry); each run's
    retrieval accepted first and logged, as the job and the command line did. Parametrized False
    (indirect): r2 recorded with the clock right. Returns the prefix."""
    import uuid

    from eval_pipeline.history.runs import table_names

    p = f"t_{uuid.uuid4().hex[:12]}"
    # minutes: legacy_run's created_at is now() - (100 - minutes) minutes
    ahead = 100 + 24 * 60 if getattr(request, "param", True) else 2
    with psycopg.connect(pg_uri, autocommit=True) as conn:
        conn.execute(upgrade.LEGACY_DDL.format(p=p))
        runs = (("r1", 0.80, True, 1, False), ("r2", 0.70, False, ahead, True), ("r3", 0.95, True, 3, True))
        for run_id, rate, eligible, minutes, accepted in runs:
            upgrade.legacy_run(conn, p, run_id, hit=0.8, eligible=True, minutes=minutes)
            conn.execute(
                f"INSERT INTO {p}_answer_runs (run_id, variant, grader, created_at, set_id, set_fingerprint,"
                " corpus_signature, generator, yardstick, limited, errored, eligible, n_scored, pass_rate,"
                " mean_score, provenance, accepted) VALUES (%s, 'dense', 'deterministic',"
                " now() - %s * interval '1 minute', 'team.set', 'set-1', 'corpus-1', 'gen-1',"
                " 'deterministic:v1+abc', false, 0, %s, 7, %s, %s, %s, %s)",
                (run_id, 100 - minutes - 0.5, eligible, rate, rate,
                 psycopg.types.json.Jsonb({"configuration": "cfg-dense"}), accepted))
            if accepted:
                conn.execute(f"INSERT INTO {p}_references (variant, run_id, aspect, accepted_by, accepted_at)"
                             " VALUES ('dense', %s, 'retrieval', 'alice', now() - %s * interval '1 minute')",
                             (run_id, 100 - minutes - 0.75))
    yield p
    with psycopg.connect(pg_uri, autocommit=True) as conn:
        for table in reversed(list(table_names(p).values())):
            conn.execute(f'DROP TABLE IF EXISTS "{table}" CASCADE')


@pytest.mark.parametrize("flag_only_legacy", [True, False], indirect=True)
def test_two_flag_only_acceptances_upgraded_are_a_conflict_until_one_is_accepted(pg_uri, flag_only_legacy):
    """Hole 3, closed by failing closed: the code that made the history read r3 as the reference
    (the accepted row latest in its table's ``seq``); the upgrade orders the rows by time, so a
    clock that ran ahead put r2 (0.70) last, and as the reference a drop of 0.25 from the pinned
    bar passed. Neither flag-only acceptance says when it was made: two of them are a conflict
    (clock ahead or not: the order the upgrade gave them cannot be trusted), until a run is
    accepted (r3 through the library: then r3 is the reference, with no conflict)."""
    from eval_pipeline.history.answers import accept_answer_run, reference_answer_run

    reference = reference_answer_run(pg_uri, **upgrade.ANSWER_KEY, prefix=flag_only_legacy)
    # no trusted reference: a conflict, or none at all (the clock ahead: every row distrusted)
    assert reference is None or reference.get("acceptance_conflict") is not None, reference
    assert accept_answer_run(pg_uri, "r3", variants=["dense"], prefix=flag_only_legacy)[0]
    reference = reference_answer_run(pg_uri, **upgrade.ANSWER_KEY, prefix=flag_only_legacy)
    assert reference["run_id"] == "r3" and reference.get("acceptance_conflict") is None, reference


# --------------------------------------------------------------------------------------------
# hole 2: an exempt legacy acceptance older than a logged re-accept is placed after it
# --------------------------------------------------------------------------------------------


def _legacy_then_reaccepted(answers, *, between: bool) -> None:
    """a0 (0.90) eligible, a1 (0.75, failed) flag-accepted before a60854a; after the upgrade a0
    accepted again (logged) by a version without positions (with a run recorded in between when
    ``between``); then placed by time."""
    from eval_pipeline.history.answers import accept_answer_run

    assert _run(answers, "a0", 0.90).passed
    assert not _gate(_run(answers, "a1", 0.75)).passed
    _accepted_as_19af7bb_did(answers, "a1")
    if between:
        _run(answers, "b1", 0.75)
    assert accept_answer_run(answers.uri, "a0")[0] == [("bm25", "deterministic")]
    _placed_again(answers)


@pytest.mark.parametrize("between", [False, True])
def test_a_legacy_re_accept_of_an_older_run_is_in_doubt_until_accepted_again(answers, between):
    """Hole 2 (a conflict with a1's flag-only acceptance) is closed: a1's sits just after its run.
    But a0's re-accept, placed by its old stamp past a later run (a1, and b1 when ``between``),
    is one only that stamp says came after them, as a clock that ran ahead while accepting would
    (the twenty-seventh review): it is in doubt, a2 is not compared, saying so; the command line's
    accept of a0 then ends it (the test below)."""
    _legacy_then_reaccepted(answers, between=between)
    gate = _gate(_run(answers, "a2", 0.90))
    # in doubt (no entry of its own), or every row distrusted (its stamps step back: the twenty-ninth review)
    assert not gate.passed and gate.state == "not_compared" and (
        "no entry of its own" in gate.message or "distrusted once" in gate.message), gate.message


def test_hole_2s_stop_ends_when_a0_is_accepted_again_through_the_command_line(answers, monkeypatch, capsys):
    """Held (hole 2 is a stop, not stuck): a0 accepted again through the command line; a2 (0.90)
    passes compared, a3 (0.75, -0.15 from a0) fails measured."""
    from eval_pipeline.history.__main__ import main

    _legacy_then_reaccepted(answers, between=False)
    monkeypatch.setenv("ATK24_HISTORY_URL", answers.uri)
    assert main(["--url-env", "ATK24_HISTORY_URL", "accept", "a0", "--variant", "bm25"]) == 0, \
        capsys.readouterr().err
    gate = _gate(_run(answers, "a2", 0.90))
    assert gate.passed and gate.state != "not_compared", gate.message
    gate = _gate(_run(answers, "a3", 0.75))
    assert not gate.passed and gate.state != "not_compared", gate.message


# --------------------------------------------------------------------------------------------
# held: the exemption is not reached by a normal flow
# --------------------------------------------------------------------------------------------


def test_a_normal_accept_never_stamps_a_rows_own_time(answers):
    """Held: ``accept`` stamps ``clock_timestamp()``, after the recording's ``now()``."""
    from eval_pipeline.history.answers import accept_answer_run

    _run(answers, "a0", 0.90)
    assert accept_answer_run(answers.uri, "a0")[0]
    with psycopg.connect(answers.uri, autocommit=True) as conn:
        rows = conn.execute("SELECT accepted_at, created_at FROM eval_measurements WHERE run_id = 'a0'"
                            " AND aspect <> 'retrieval'").fetchall()
    assert rows and all(at is not None and at != created for at, created in rows), rows


def test_a_rerecorded_accepted_row_whose_entry_was_deleted_stays_a_self_conflict(answers):
    """Held: a0 (0.90) eligible, a1 (0.75) accepted by name, its answers recorded again (a retried
    step: same run id; ``created_at`` and the stamp kept), then its log entry deleted: nothing
    logged, a1 not exempt, a self-conflict; a2 (0.75) is not passed silently."""
    from eval_pipeline.history.answers import accept_answer_run

    assert _run(answers, "a0", 0.90).passed
    _run(answers, "a1", 0.75)
    assert accept_answer_run(answers.uri, "a1", variants=["bm25"])[0]
    answers("a1", {"bm25": 0.75})  # recorded again
    with psycopg.connect(answers.uri, autocommit=True) as conn:
        (at, created), = conn.execute("SELECT accepted_at, created_at FROM eval_measurements WHERE run_id = 'a1'"
                                      " AND aspect <> 'retrieval'").fetchall()
    assert at is not None and at != created, (at, created)
    answers.sql("DELETE FROM eval_references WHERE run_id = %s AND aspect <> 'retrieval'", "a1")
    gate = _gate(_run(answers, "a2", 0.75))
    assert not gate.passed, gate.message


def test_a_deleted_logged_acceptance_does_not_hand_the_bar_back_to_an_exempt_legacy_one(answers):
    """Held: a1 (0.75) accepted before the answer log (exempt), a2 (0.95) accepted by this version
    (logged), a3 (0.86, within) judged against a2; then a2's answer measurement deleted (its entry
    stays, with no usable row: nothing logged is found). a1 comes back as the reference with no
    conflict, but ``moved_reference`` sees a3 judged against a2 and a1 not accepted since: a4 (0.77:
    -0.09 from a3, +0.02 from a1, -0.18 from a2) is not passed."""
    from eval_pipeline.history.answers import accept_answer_run

    assert _run(answers, "a0", 0.90).passed
    _run(answers, "a1", 0.75)
    _accepted_as_19af7bb_did(answers, "a1")
    _run(answers, "a2", 0.95)
    assert accept_answer_run(answers.uri, "a2", variants=["bm25"])[0]
    assert _run(answers, "a3", 0.86).passed
    answers.sql("DELETE FROM eval_measurements WHERE run_id = %s AND aspect <> 'retrieval'", "a2")
    gate = _gate(_run(answers, "a4", 0.77))
    assert not gate.passed and "which no one accepted since" in gate.message, gate.message
