"""The twenty-seventh review of the verdict: e89ab96 (and the placement under it).

Attacked: ``measurements._clock_stepped`` (measurements.py:321-341: a stamp more than
``CLOCK_STEP``, one minute, earlier than the running maximum of the stamps numbered before it in
its own table: the old runs, the old answer rows, the measurements, the acceptance log; or a log
entry stamped more than a minute before its measurement) and the marking it triggers in
``_place_acceptances`` (measurements.py:302-311: every stamped row's ``accepted_position`` =
``COALESCE(LOGGED_POSITION, seq) + 0.25``, a flag-only row's stamp moved 1 microsecond so it is
no longer ``FLAG_ONLY``). ``_place_acceptances`` runs once, when the log has no ``position``
column. Runs judged with the eighth review's ``answers`` fixture, or looked up with
``runs.previous_run`` / ``reference_run`` / ``accept_reference``, against the session Postgres
(marked ``integration``), on a legacy history written with the frozen DDL of
tests/integration/test_history_upgrade.py (``LEGACY_DDL``, ``legacy_run``) and the twenty-sixth
review's builders (``_run``, ``_answer``, ``_set_back``, ``answer_ahead``), upgraded on first contact.

Closed since by the lead: holes 1 and 2 (plain tests; without the rule both fail): a log
entry placed by its old stamp (a fractional position: only ``_place_acceptances`` gives one)
past a run recorded after its own is in doubt, a conflict until a run is accepted
(``measurements.PLACED_PAST_LATER_RUNS``): only the stamp says it came after that run. The cost:
a legacy re-accept of an older run stops once after the upgrade (the twenty-fourth's tests).
Hole 3 closed too (a plain test): on a step, no measurement recorded so far is eligible, so each
variant has run, never eligibly, and is not compared until a run is accepted. Left open (a strict
xfail): hole 4, a history whose acceptances 87cb394..e89ab96^ placed is never checked for a step.
Proposed: run the check once on histories already placed (a marker that it ran). Closed since
by the lead (a plain test): a history placed without the mark (``measurements.CLOCK_CHECKED_SQL``)
is distrusted once on contact (``check_placement_once``).

Holes (strict xfails, each confirmed failing on e89ab96, also with --runxfail, on an
AssertionError about the verdict or the yardstick; each control passes):

1. FAILS OPEN (previous-run gate): a step no table's own order shows. X (0.70, failed) recorded
   on time; the server clock runs a day ahead while X is accepted (logged, a60854a on), and is
   set right before S (0.95, eligible) is recorded. Every table's stamps rise along its own
   ``seq`` (the log has one entry; the acceptance is stamped after its measurement), so
   ``_clock_stepped`` is False, and ``after`` (the last measurement stamped by +1 day) places X's
   acceptance after S: X is the previous row, T (0.70, -0.25 from S) PASSES against X. The rule
   "never after a later log entry's place" needs a later entry; with none, nothing bounds a stamp
   that ran ahead. Reachability: an upgrade from a60854a..(positions)^, the clock ahead while
   only an acceptance was made (nothing recorded during the fault). Severity: fails open (a 0.25
   step regression passes). Fix (holes 1 and 2): a stamp alone cannot show such a step; the
   fail-closed choice is to trust no time-placed acceptance that ``after`` moves past another run's
   row (mark it as the stepped case does), at the cost of one accept per such variant.

2. FAILS OPEN (previous-run gate): a step under ``CLOCK_STEP``. X recorded,
   accepted at stamp a; S recorded with a stamp 30 s before a (a clock set back 45 s after the
   accept). No stamp falls a minute behind its table's running maximum:
   not marked; ``after`` places X's acceptance after S; T (0.70) PASSES against X. Reachability:
   narrow (a sub-minute step, S recorded within seconds of the acceptance). A record transaction
   begun (``now()``) before an accept and committed after it gives the same rows with no clock
   fault, but then which came first is genuinely ambiguous: not claimed. Severity: fails open.
   Inherited (the pre-measurements code read by time too), but ``CLOCK_STEP`` makes any
   reordering under a minute silently trusted.

3. FAILS OPEN (the retrieval yardstick): a stepped clock with NO acceptance. R0, X (dense 0.70,
   eligible), then the clock set back 25 minutes, S (0.95, eligible): legacy ``runs.seq`` R0, X,
   S. ``_clock_stepped`` is True (S 25 min behind X), but the marking only touches acceptances:
   with none, nothing fails closed; ``_upgrade`` numbers the rows by time (R0, S, X), X is dense's
   previous run; a later run at 0.70 is judged against 0.70 both ways (the reference is the
   first eligible, R0, 0.70). The commit says "nor the order of runs recorded around the step" can
   be trusted, then trusts it. Asserted on ``previous_run``. Reachability: any upgrade from before
   measurements with the clock set back between two runs. Severity: fails open. Fix: when the old
   tables' stamps stepped, number the old rows in their own tables' order (one table: exact), or
   fail every variant closed (not compared) until a run is accepted, acceptances or not.

4. FAILS OPEN: a history placed by an earlier version (87cb394..e89ab96^, simulated by placing
   with ``_clock_stepped`` forced False, exactly the code before e89ab96) is never marked: the
   log has ``position``, ``_place_acceptances`` never runs again. The twenty-sixth's hole 3 stays
   open there (T 0.70 passes against X). Reachability: any history first read by 87cb394..e89ab96^
   whose clock stepped. Severity: fails open, silently. Fix: record that the marking
   ran (or re-run ``_clock_stepped`` on the old tables, kept as they are) on contact.

What held (plain tests): each hole's control; STUCK: after the marking, accepting again ends the
conflict: answers (``accept_answer_run`` of X, which has a run row, as the message says: V is
compared) and retrieval (``accept_reference`` of S: no conflict; bm25, never accepted, never
marked). Accepting T through the library (no run row, so no log entry) leaves the conflict, but
the message names the way out (``accept X --variant bm25``, or a run with a run row): pre-existing
design, not new here.

By reading (no test): SPURIOUS: the legacy writers stamp ``now()`` (transaction start) and draw
``seq`` after ``pg_advisory_xact_lock``; waiters are granted in queue order, so a later ``seq``
with a stamp a minute earlier needs a transaction open a minute before its lock (not found in
record_run, the answer writer or accept). A re-recorded run keeps ``created_at`` (263a154
runs.py:477 updates no ``created_at``), and an acceptance is logged after its run committed, so the
"acceptance before its measurement" check needs a minute-long transaction too. A marked row's
+0.25 stays below the next ``seq`` (log positions lie in (after, after + 0.5)), so the order
among runs is unchanged; after a new accept, its position exceeds every marked one.
"""

from __future__ import annotations

import uuid

import psycopg
import pytest

from eval_pipeline.history import measurements
from eval_pipeline.history.answers import accept_answer_run
from eval_pipeline.history.runs import (
    accept_reference,
    acceptance_conflict,
    ensure_tables,
    previous_run,
    reference_run,
    table_names,
)
from tests.integration import test_history_upgrade as upgrade
from tests.unit.verdict import test_verdict_attacks_eighth as eighth
from tests.unit.verdict import test_verdict_attacks_twentysixth as twentysixth

pytestmark = pytest.mark.integration
answers = eighth.answers  # the eighth review's fixture
answer_ahead = twentysixth.answer_ahead  # the twenty-sixth review's fixture

DAY = 24 * 60
_run, _answer = twentysixth._run, twentysixth._answer


def _gate(verdict):
    return eighth._answer_gate(verdict)


def _previous(verdict):
    return (verdict.rows[0]["previous"] or {}).get("run_id")


def _shown_against_recorded(gate, run_id: str = "S", drop: str = "0.9500 -> 0.7000") -> None:
    """An answer gate nothing comparable judged (no eligible, trusted row of its key), compared since with
    every row of its key recorded before, eligible (or trusted) or not: the drop from ``run_id`` is shown, a
    measured failure (state ``comparable``, every row ``against: recorded`` and ``run_id``), and the reason it
    was not compared is kept in the message (``gates.answers.shown_against_recorded``)."""
    assert not gate.passed and gate.state == "comparable", (gate.state, gate.message)
    assert f"vs recorded run {run_id}: {drop} (delta" in gate.message, gate.message
    assert f"(against run {run_id}, which recorded it" in gate.message, gate.message
    assert ": FAILED (not compared)" in gate.message, gate.message  # why nothing comparable judged it, kept
    assert {(r["against"], r["yardstick_run_id"]) for r in gate.rows} == {("recorded", run_id)}, gate.rows


def _compared_with_a_yardstick(gate, previous: str | None = None) -> None:
    """Compared with a yardstick the rules trust (its previous row, its pinned reference), not merely
    shown against a row recorded before (``_shown_against_recorded``, which is ``comparable`` too):
    ``previous``, when given, is the previous row's run."""
    assert gate.state == "comparable" and gate.rows, (gate.state, gate.message)
    assert all(r["against"] in ("previous", "reference") for r in gate.rows), (gate.message, gate.rows)
    if previous is not None:
        assert any(r["against"] == "previous" and r["yardstick_run_id"] == previous for r in gate.rows), gate.rows


# --------------------------------------------------------------------------------------------
# hole 1: the acceptance alone stamped ahead: a step no table's own order shows
# --------------------------------------------------------------------------------------------


def _accepted_ahead(answers, *, ahead: bool) -> None:
    """X (0.70, failed) recorded on time, accepted (logged) a day ahead when ``ahead``; S (0.95,
    eligible) recorded on time after."""
    with psycopg.connect(answers.uri, autocommit=True) as conn:
        conn.execute(upgrade.LEGACY_DDL.format(p="eval"))
        _run(conn, "X", -90)
        _answer(conn, "X", 0.70, eligible=False, minutes=-89, accepted=DAY if ahead else -88)
        _run(conn, "S", -50)
        _answer(conn, "S", 0.95, eligible=True, minutes=-49)


def test_an_acceptance_stamped_ahead_alone_is_not_placed_after_later_runs(answers):
    """Hole 1: T (0.70) is -0.25 from S (0.95), recorded after X's acceptance: it must not pass."""
    _accepted_ahead(answers, ahead=True)
    verdict = answers("T", {"bm25": 0.70})
    gate = _gate(verdict)
    assert not gate.passed, (gate.state, gate.message, _previous(verdict))


def test_hole_1s_control_on_time_s_is_the_previous_row(answers):
    """Held: the acceptance on time: S is the previous row; T's -0.25 fails measured."""
    _accepted_ahead(answers, ahead=False)
    verdict = answers("T", {"bm25": 0.70})
    gate = _gate(verdict)
    assert not gate.passed and gate.state != "not_compared", gate.message
    assert _previous(verdict) == "S", _previous(verdict)


# --------------------------------------------------------------------------------------------
# hole 2: a reordering under CLOCK_STEP
# --------------------------------------------------------------------------------------------


def _under_a_minute(answers, *, step: bool) -> None:
    """X (0.70, failed) recorded, accepted (logged) at -89 min; S (0.95, eligible) recorded after,
    stamped -89.5 min when ``step`` (30 s before the acceptance: a clock set back 45 s), else -88.5."""
    with psycopg.connect(answers.uri, autocommit=True) as conn:
        conn.execute(upgrade.LEGACY_DDL.format(p="eval"))
        _run(conn, "X", -90)
        _answer(conn, "X", 0.70, eligible=False, minutes=-89.9, accepted=-89)
        at = -89.5 if step else -88.5
        _run(conn, "S", at)
        _answer(conn, "S", 0.95, eligible=True, minutes=at + 0.1)


def test_a_run_recorded_after_an_acceptance_under_a_minute_earlier_by_its_stamp_is_the_previous_row(answers):
    """Hole 2: S was recorded (numbered) after X's acceptance; T (0.70) must not pass."""
    _under_a_minute(answers, step=True)
    verdict = answers("T", {"bm25": 0.70})
    gate = _gate(verdict)
    assert not gate.passed, (gate.state, gate.message, _previous(verdict))


def test_hole_2s_control_s_stamped_after_the_acceptance(answers):
    """Held: S stamped after the acceptance: T's -0.25 fails measured, against S as its yardstick (not merely
    shown against a recorded row: nothing is distrusted here)."""
    _under_a_minute(answers, step=False)
    verdict = answers("T", {"bm25": 0.70})
    gate = _gate(verdict)
    assert not gate.passed, gate.message
    _compared_with_a_yardstick(gate, previous="S")


# --------------------------------------------------------------------------------------------
# hole 3: a stepped clock with no acceptance: nothing to mark, the time order trusted
# --------------------------------------------------------------------------------------------


@pytest.fixture
def legacy_prefix(pg_uri):
    """A fresh prefix; its tables are dropped after."""
    prefix = f"t_{uuid.uuid4().hex[:12]}"
    yield prefix
    with psycopg.connect(pg_uri, autocommit=True) as conn:
        for table in reversed(list(table_names(prefix).values())):
            conn.execute(f'DROP TABLE IF EXISTS "{table}" CASCADE')


def _set_back_no_acceptance(pg_uri, prefix, *, back: bool) -> None:
    """R0 and X (dense 0.70, eligible), then S (dense 0.95, eligible) after the clock was set back
    25 minutes when ``back``; nothing accepted."""
    with psycopg.connect(pg_uri, autocommit=True) as conn:
        conn.execute(upgrade.LEGACY_DDL.format(p=prefix))
        upgrade.legacy_run(conn, prefix, "R0", hit=0.70, eligible=True, minutes=10)
        upgrade.legacy_run(conn, prefix, "X", hit=0.70, eligible=True, minutes=40)
        upgrade.legacy_run(conn, prefix, "S", hit=0.95, eligible=True, minutes=15 if back else 45)


def test_a_stepped_clock_with_no_acceptance_does_not_make_an_older_run_the_previous_one(pg_uri, legacy_prefix):
    """Hole 3: S was recorded after X: it is dense's previous run, or the lookup fails closed.
    Closed by failing closed: on a step, no measurement recorded so far is eligible, so dense has
    no previous run (it has run, never eligibly: not compared until a run is accepted)."""
    _set_back_no_acceptance(pg_uri, legacy_prefix, back=True)
    found = previous_run(pg_uri, variant="dense", identity=upgrade.IDENTITY, prefix=legacy_prefix)
    assert found is None or found["run_id"] == "S", (found["run_id"], found["metrics"])


def test_hole_3s_control_on_time_s_is_the_previous_run(pg_uri, legacy_prefix):
    """Held: no set back: S is dense's previous run."""
    _set_back_no_acceptance(pg_uri, legacy_prefix, back=False)
    found = previous_run(pg_uri, variant="dense", identity=upgrade.IDENTITY, prefix=legacy_prefix)
    assert found["run_id"] == "S", (found["run_id"], found["metrics"])


# --------------------------------------------------------------------------------------------
# hole 4: a history placed by an earlier version is never marked
# --------------------------------------------------------------------------------------------


def test_a_history_placed_before_e89ab96_is_checked_for_a_stepped_clock(answers, monkeypatch):
    """Hole 4: the twenty-sixth's hole 3 history, first contacted by the code before e89ab96
    (``_clock_stepped`` forced False and no ``CLOCK_CHECKED_SQL`` mark: the only differences), then
    judged by this version: T (0.70, -0.25 from S) must not pass. Closed since: a history placed
    without the mark is distrusted once on contact (tests/unit/verdict/test_clock_checked_once.py)."""
    twentysixth._set_back(answers, back=True)
    with monkeypatch.context() as patched:
        patched.setattr(measurements, "_clock_stepped", lambda conn, names: False)
        ensure_tables(answers.uri)
    # 87cb394..e89ab96^ left no mark
    answers.sql("ALTER TABLE eval_references DROP CONSTRAINT IF EXISTS eval_references_clock_checked")
    verdict = answers("T", {"bm25": 0.70})
    gate = _gate(verdict)
    assert not gate.passed, (gate.state, gate.message, _previous(verdict))


# --------------------------------------------------------------------------------------------
# held: STUCK: accepting a run ends the marking's stop
# --------------------------------------------------------------------------------------------


def test_after_the_marking_accepting_a_run_ends_the_answer_stop(answers):
    """Held: the twenty-sixth's hole 3 history (marked): T not compared; accepting T, even through
    the library (no run row, so no log entry), ends it: every row recorded before the marking is
    distrusted (no yardstick at all since the twenty-ninth review), so T's acceptance is the only
    one in force, and U is compared. (Before, the marking made every acceptance a conflict, and an
    acceptance with no log entry could not end it.) Since the answer gate compares a not-compared
    row with every row of its key recorded before, T's -0.25 from the distrusted S is shown: a
    measured failure, so accepting T whole is refused and T is accepted by naming its variant."""
    twentysixth._set_back(answers, back=True)
    gate = _gate(answers("T", {"bm25": 0.70}))
    _shown_against_recorded(gate)
    accepted, refused = accept_answer_run(answers.uri, "T")
    assert accepted == [] and "name the variant to accept it" in " ".join(refused), (accepted, refused)
    assert accept_answer_run(answers.uri, "T", variants=["bm25"])[0] == [("bm25", "deterministic")]
    gate = _gate(answers("U", {"bm25": 0.70}))
    assert gate.state != "not_compared" and gate.passed, gate.message


def test_after_the_marking_accepting_a_run_ends_the_retrieval_stop(pg_uri, answer_ahead):
    """Held: the twenty-sixth's hole 4 history (marked: the answer table steps back a day): dense
    has no reference at all (every measurement distrusted); ``accept_reference`` of S makes S its
    reference, with no conflict; bm25, never accepted, has none until a run is accepted."""
    prefix = answer_ahead(True)
    assert reference_run(pg_uri, variant="dense", identity=upgrade.IDENTITY, prefix=prefix) is None
    assert accept_reference(pg_uri, "S", variants=["dense"], prefix=prefix) == ["dense"]
    ref = reference_run(pg_uri, variant="dense", identity=upgrade.IDENTITY, prefix=prefix)
    assert ref["run_id"] == "S" and not acceptance_conflict(ref), ref
    assert reference_run(pg_uri, variant="bm25", identity=upgrade.IDENTITY, prefix=prefix) is None
