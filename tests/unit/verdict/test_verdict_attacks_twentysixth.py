"""The twenty-sixth review of the verdict: c8d2b58 (and 50abdac under it).

Attacked: the upgrade path as a class, every place where an older history's order or an
acceptance's place is taken from a clock: ``_upgrade``'s new numbering (measurements.py:459-461:
each old table in its own ``seq`` order, interleaved by ``max(at) OVER (PARTITION BY part ORDER
BY n) AS upto``, ``ORDER BY upto, part, n``), ``_place_acceptances``' ``after`` (measurements.py
:278: ``max(x.seq) WHERE x.created_at <= at``, a TIME compared with rows no longer numbered in
time order), the previous row's order (``GREATEST(seq, position)``), and answers'
``_since_acceptance`` (answers.py:480-501: the accepted run's first measurement of ANY aspect,
``min(seq)``, so the cross-table interleaving decides the window). Runs judged with the eighth
review's ``answers`` fixture against the session Postgres (marked ``integration``), on a legacy
history written with the frozen DDL of tests/integration/test_history_upgrade.py (``LEGACY_DDL``,
``legacy_run``) under the default prefix, upgraded on the verdict's first contact.

After this review the lead reverted c8d2b58's numbering (the old rows numbered by time again, as
the acceptances are placed): holes 1, 2 and 4 (new in c8d2b58) are plain tests, passing. Hole 3
(older) is closed by failing closed: ``measurements._clock_stepped`` finds the step (a stamp more
than a minute earlier than one numbered before it in its own table, or an acceptance stamped
before its run), and every acceptance is then read as missing from the log until a run is
accepted; T is not compared.

Holes (strict xfails, each confirmed failing on c8d2b58, also with --runxfail on an
AssertionError about the verdict):

1. FAILS OPEN (previous-run gate), NEW in c8d2b58: a retrieval row recorded while the clock ran
   ahead, with no answer row recorded while it was ahead (a retrieval-only run, or the clock set
   right between a run's retrieval and its answers), lifts the RETRIEVAL table's running maximum
   for a day: every later retrieval row is numbered after every answer row of that day. X's
   answer acceptance (logged, stamped on time, a60854a on) is placed by ``after`` = the last
   ``seq`` recorded by its stamp: X's own retrieval row, now numbered after S's answer rows
   (recorded after the acceptance). X (0.70, accepted) becomes the previous row over S (0.95,
   eligible); T (0.70: -0.25) passes against X both ways. The code that wrote the history
   (263a154 answers.py:497, by time) read S. Before c8d2b58 (``ORDER BY at``) X's retrieval row
   came before S's answers. Reachability: upgrade from any version with both old tables and
   logged answer acceptances, a clock ahead while one retrieval row only was recorded. Severity:
   fails open (a 0.25 step regression passes). Fix: place an acceptance by ``after`` computed on
   the SAME order the rows are numbered in (e.g. the last row whose ``upto`` <= the stamp, within
   its own table), or below its own table's next row.

2. FAILS OPEN (a dropped grader), NEW in c8d2b58: the same retrieval-only row ahead; R1
   (retrieval only, no answer rows) recorded on time; S1 graded ``deterministic`` (accepted:
   the answers' reference) and ``static`` after it; then R1 accepted for bm25's retrieval (the
   latest acceptance of bm25). ``_since_acceptance`` starts the window at R1's first measurement,
   its retrieval row, numbered (by the retrieval table's running maximum) after S1's answer rows:
   ``static`` is forgotten, T1 drops it and PASSES with ``missing == []``; on time it is missing
   and fails closed. Without S1's acceptance (R1 simply accepted before S1) the window misses S1
   just the same, but the first verdict after the upgrade is stopped anyway (``moved_reference``:
   the legacy previous row recorded no reference) with ``missing == []``: the user is told to
   accept a run, not that ``static`` is gone; accepting T1 then acknowledges its removal unseen.
   Reachability: as hole 1, plus a run accepted that recorded no answers. Severity: fails open (a
   measurement silently dropped). Fix: as hole 1, or start the window no later than the first
   answer row recorded after the accepted run's log entry in the answer table's own order.

3. FAILS OPEN (previous-run gate), not new (before c8d2b58 X was numbered after S by time, same
   outcome): a clock set BACK (a day) after a logged answer acceptance. X (0.70) recorded and
   accepted on time; the clock set back; S (0.95, eligible) recorded: its ``created_at`` is a day
   before X's stamp. c8d2b58 numbers S after X (its table's order), but ``after`` (by time) counts
   S as "recorded by" X's stamp: X's acceptance is placed after S, X is the previous row, T
   (0.70) passes. Also the shape of a stamp that ran AHEAD (X recorded and accepted while ahead,
   S after the clock was set right): the same rows, the same placement. The 263a154 code read the
   previous row by time too (it would also have picked X): an inherited fail-open, which the
   current code's rule ("never from a server clock that may have stepped") claims to close.
   Reachability: upgrade from a60854a..(measurements)^, a clock stepped back past an acceptance's
   stamp before the next run. Severity: fails open. Fix: a legacy stamp can never move an
   acceptance past a row its own table numbered after the accepted row unless a later log entry
   proves it; the fail-closed choice is just after the accepted measurement (as FLAG_ONLY's
   ROW_POSITION), bounded by the log's order.

4. FAILS OPEN (the retrieval yardstick), NEW in c8d2b58: hole 1 the other way round. R0's answer
   row (no retrieval row) recorded a day ahead lifts the ANSWER table's running maximum; X's
   answer row is numbered after S's retrieval row; X's RETRIEVAL acceptance (logged, on time)
   is placed by ``after`` after X's answer row, so after S: ``previous_run`` returns X (dense
   0.70, accepted) over S (0.95, eligible, recorded after the acceptance), which is also the
   pinned reference: a later run at 0.70 is judged against 0.70 both ways. Asserted on the
   yardstick lookup (``runs.previous_run``), not a whole retrieval verdict. The 263a154 code
   (runs.py:567, by time) read S. Reachability and fix: as hole 1.

Holes 1, 2 and 4 pass at a169802 (c8d2b58^, a frozen worktree, --runxfail): new in c8d2b58. Hole 3
fails there too. All four need one old table to get a row while the clock ran ahead (or was set
back) that the other did not; with both tables written in the same clock episode the running
maxima agree and the controls' order holds.

What held (plain tests): each hole's control with the clock right (S is the previous row and T's
-0.25 fails measured; T1's missing ``static`` fails closed).

By reading (no test): rows of one run's retrieval with many variants share one legacy ``runs.seq``
(``n`` ties): RANGE peers get one ``upto`` (the run's own ``created_at``): harmless, all have one
``at``. Each old table's own order is kept (the running maximum is monotone in ``n``), so the
25th's holes stay closed. A retrieval row numbered EARLIER than answer rows recorded before it
(a clock set back in the retrieval table) makes ``_since_acceptance`` start earlier (more rows
since: fails closed; a new acceptance ends it) and a re-judged legacy run's ``cutoff`` (min
``seq``) earlier (fewer rows before it: its previous row older; only ``before_run_id`` of a run
recorded before the upgrade).
"""

from __future__ import annotations

import uuid

import psycopg
import pytest

from eval_pipeline.history.runs import previous_run, table_names
from tests.integration import test_history_upgrade as upgrade
from tests.unit.verdict import test_verdict_attacks_eighth as eighth

pytestmark = pytest.mark.integration
answers = eighth.answers  # the eighth review's fixture

DAY = 24 * 60


def _gate(verdict):
    return eighth._answer_gate(verdict)


def _run(conn, run_id: str, minutes: float) -> None:
    """A legacy retrieval run (``legacy_run``: dense and bm25) recorded ``minutes`` from now."""
    upgrade.legacy_run(conn, "eval", run_id, hit=0.8, eligible=True, minutes=100 + minutes)


def _answer(conn, run_id: str, rate: float, *, eligible: bool, minutes: float, accepted: float | None = None,
            grader: str = "deterministic") -> None:
    """One legacy answer row of ``bm25`` (the key the ``answers`` fixture judges), recorded
    ``minutes`` from now; ``accepted``: stamped and logged that many minutes from now (a60854a on)."""
    conn.execute(
        "INSERT INTO eval_answer_runs (run_id, variant, grader, created_at, set_id, set_fingerprint,"
        " corpus_signature, generator, yardstick, limited, errored, eligible, n_scored, pass_rate, mean_score,"
        " pass_rate_ci_low, pass_rate_ci_high, mean_ci_low, mean_ci_high, variant_config, provenance, accepted,"
        " accepted_at) VALUES (%s, 'bm25', %s, now() + %s * interval '1 minute', 'team.tiny', 'fp-1', 'corpus-1',"
        " 'extractive:v1', %s, false, 0, %s, 50, %s, %s, 0.0, 1.0, 0.0, 1.0, %s, %s, %s,"
        " now() + %s * interval '1 minute')",
        (run_id, grader, minutes, f"{grader}:v1", eligible, rate, rate, psycopg.types.json.Jsonb({"engine": "bm25"}),
         psycopg.types.json.Jsonb({"configuration": "cfg-bm25"}), accepted is not None, accepted))
    if accepted is not None:
        conn.execute("INSERT INTO eval_references (variant, run_id, aspect, accepted_by, accepted_at)"
                     " VALUES ('bm25', %s, %s, 'alice', now() + %s * interval '1 minute')",
                     (run_id, f"answers:{grader}", accepted))


# --------------------------------------------------------------------------------------------
# hole 1: a retrieval row ahead lifts its table's running maximum; `after` reads it by time
# --------------------------------------------------------------------------------------------


def _retrieval_ahead(answers, *, ahead: bool) -> None:
    """R0 (retrieval only) recorded a day ahead when ``ahead``; X (0.70, failed) recorded and
    accepted on time; S (0.95, eligible) recorded after the acceptance."""
    with psycopg.connect(answers.uri, autocommit=True) as conn:
        conn.execute(upgrade.LEGACY_DDL.format(p="eval"))
        _run(conn, "R0", DAY if ahead else -95)
        _run(conn, "X", -90)
        _answer(conn, "X", 0.70, eligible=False, minutes=-89, accepted=-88)
        _run(conn, "S", -60)
        _answer(conn, "S", 0.95, eligible=True, minutes=-59)


def test_a_retrieval_row_ahead_does_not_place_an_answer_acceptance_after_later_answers(answers):
    """Hole 1: T (0.70) is -0.25 from S (0.95), recorded after X's acceptance: it must fail."""
    _retrieval_ahead(answers, ahead=True)
    verdict = answers("T", {"bm25": 0.70})
    gate = _gate(verdict)
    assert not gate.passed, (gate.state, gate.message, (verdict.rows[0]["previous"] or {}).get("run_id"))


def test_hole_1s_control_on_time_s_is_the_previous_row(answers):
    """Held: R0 on time: S is the previous row; T's -0.25 fails measured."""
    _retrieval_ahead(answers, ahead=False)
    verdict = answers("T", {"bm25": 0.70})
    gate = _gate(verdict)
    assert not gate.passed and gate.state != "not_compared", gate.message
    assert verdict.rows[0]["previous"]["run_id"] == "S", verdict.rows[0]["previous"]


# --------------------------------------------------------------------------------------------
# hole 2: the window since a retrieval-only acceptance starts at a retrieval row numbered late
# --------------------------------------------------------------------------------------------


def _window(answers, *, ahead: bool) -> None:
    """R0 (retrieval only) recorded a day ahead when ``ahead``; R1 (retrieval only) recorded on
    time; S1 graded by ``deterministic`` and ``static`` after it, eligible, its ``deterministic``
    accepted (the answers' pinned reference); then R1 accepted for bm25's retrieval (the latest
    acceptance of bm25: the window starts at R1)."""
    with psycopg.connect(answers.uri, autocommit=True) as conn:
        conn.execute(upgrade.LEGACY_DDL.format(p="eval"))
        _run(conn, "R0", DAY if ahead else -95)
        _run(conn, "R1", -90)
        _run(conn, "S1", -60)
        _answer(conn, "S1", 0.80, eligible=True, minutes=-59, accepted=-55)
        _answer(conn, "S1", 0.80, eligible=True, minutes=-59, grader="static")
        conn.execute("INSERT INTO eval_references (variant, run_id, aspect, accepted_by, accepted_at)"
                     " VALUES ('bm25', 'R1', 'retrieval', 'alice', now() - interval '50 minutes')")


def test_a_grader_measured_after_a_retrieval_only_acceptance_is_not_forgotten(answers):
    """Hole 2: S1 measured ``static`` after R1 was accepted; T1 drops it: it must fail closed."""
    _window(answers, ahead=True)
    verdict = answers("T1", {"bm25": 0.80})
    # with the step found (e89ab96 on), it fails closed: not compared, the dropped grader unnamed
    assert not verdict.passed, (verdict.passed, verdict.missing)


def test_hole_2s_control_on_time_the_dropped_grader_fails_closed(answers):
    """Held: R0 on time: T1's missing ``static`` (measured by S1) fails closed."""
    _window(answers, ahead=False)
    verdict = answers("T1", {"bm25": 0.80})
    assert ("bm25", "static", "S1") in verdict.missing and not verdict.passed, (verdict.passed, verdict.missing)


# --------------------------------------------------------------------------------------------
# hole 3: a clock set back after a logged acceptance: `after` counts later rows as before it
# --------------------------------------------------------------------------------------------


def _set_back(answers, *, back: bool) -> None:
    """X (0.70, failed) recorded and accepted (logged); then the clock set back a day when
    ``back``; S (0.95, eligible) recorded."""
    shift = -DAY if back else 0
    with psycopg.connect(answers.uri, autocommit=True) as conn:
        conn.execute(upgrade.LEGACY_DDL.format(p="eval"))
        _run(conn, "X", -100)
        _answer(conn, "X", 0.70, eligible=False, minutes=-99, accepted=-98)
        _run(conn, "S", -50 + shift)
        _answer(conn, "S", 0.95, eligible=True, minutes=-49 + shift)


def test_a_clock_set_back_does_not_place_an_acceptance_after_rows_recorded_later(answers):
    """Hole 3: T (0.70) is -0.25 from S (0.95), recorded after X's acceptance: it must fail."""
    _set_back(answers, back=True)
    verdict = answers("T", {"bm25": 0.70})
    gate = _gate(verdict)
    assert not gate.passed, (gate.state, gate.message, (verdict.rows[0]["previous"] or {}).get("run_id"))


def test_hole_3s_control_on_time_s_is_the_previous_row(answers):
    """Held: no set back: S is the previous row; T's -0.25 fails measured."""
    _set_back(answers, back=False)
    verdict = answers("T", {"bm25": 0.70})
    gate = _gate(verdict)
    assert not gate.passed and gate.state != "not_compared", gate.message
    assert verdict.rows[0]["previous"]["run_id"] == "S", verdict.rows[0]["previous"]



# --------------------------------------------------------------------------------------------
# hole 4: hole 1 the other way round: an answer row ahead, a retrieval acceptance placed late
# --------------------------------------------------------------------------------------------


@pytest.fixture
def answer_ahead(pg_uri):
    """make(ahead): a legacy history under a fresh prefix: R0's answer row (no retrieval) recorded a
    day ahead when ``ahead``; X (dense 0.70, its gate failed) recorded (retrieval, then answers) and
    accepted for dense's retrieval on time (logged); S (dense 0.95, eligible) recorded after.
    Returns the prefix; the tables are dropped after."""
    prefix = f"t_{uuid.uuid4().hex[:12]}"

    def make(ahead: bool) -> str:
        with psycopg.connect(pg_uri, autocommit=True) as conn:
            conn.execute(upgrade.LEGACY_DDL.format(p=prefix))
            upgrade.legacy_answer(conn, prefix, "R0", pass_rate=0.8, eligible=True,
                                  minutes=100 + DAY if ahead else 5)
            upgrade.legacy_run(conn, prefix, "X", hit=0.70, eligible=False, minutes=10, gate_failed=["dense"])
            upgrade.legacy_answer(conn, prefix, "X", pass_rate=0.8, eligible=True, minutes=10.5)
            conn.execute(f"INSERT INTO {prefix}_references (variant, run_id, aspect, accepted_by, accepted_at)"
                         " VALUES ('dense', 'X', 'retrieval', 'alice', now() - interval '88 minutes')")
            upgrade.legacy_run(conn, prefix, "S", hit=0.95, eligible=True, minutes=40)
        return prefix

    yield make
    with psycopg.connect(pg_uri, autocommit=True) as conn:
        for table in reversed(list(table_names(prefix).values())):
            conn.execute(f'DROP TABLE IF EXISTS "{table}" CASCADE')


def test_an_answer_row_ahead_does_not_place_a_retrieval_acceptance_after_later_runs(pg_uri, answer_ahead):
    """Hole 4: S (0.95, eligible) was recorded after X's acceptance: it is dense's previous run,
    the yardstick a later run's -0.25 fails against (not X, 0.70)."""
    prefix = answer_ahead(True)
    found = previous_run(pg_uri, variant="dense", identity=upgrade.IDENTITY, prefix=prefix)
    # with the step found (e89ab96 on), X's acceptance is read as missing from the log: X may be the
    # previous run, but the pinned reference is then in conflict and the verdict fails closed
    if found is not None and found["run_id"] != "S":
        from eval_pipeline.history.runs import acceptance_conflict, reference_run

        reference = reference_run(pg_uri, variant="dense", identity=upgrade.IDENTITY, prefix=prefix)
        assert acceptance_conflict(reference), (found["run_id"], reference)


def test_hole_4s_control_on_time_s_is_the_previous_run(pg_uri, answer_ahead):
    """Held: R0 on time: S is dense's previous run."""
    prefix = answer_ahead(False)
    found = previous_run(pg_uri, variant="dense", identity=upgrade.IDENTITY, prefix=prefix)
    assert found["run_id"] == "S", (found["run_id"], found["metrics"])
