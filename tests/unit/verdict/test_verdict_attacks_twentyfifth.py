"""The twenty-fifth review of the verdict: 50abdac (and 76c754d, 62f8753, 2d9c93e under it).

Attacked: ``measurements.FLAG_ONLY`` (``accepted_at = created_at``), ``ROW_POSITION`` (a flag-only
acceptance at ``m.seq + 1e-6``), ``ACCEPTED_POSITION`` and the previous run's order
(``GREATEST(seq, position)``, measurements.py:579), the two-flag-only conflict (``count(*) FILTER
(WHERE FLAG_ONLY) OVER ()`` in ``find``'s ``pick``, measurements.py:650, read by
``_latest_acceptance``, measurements.py:682-690), and what ``m.seq`` itself is for a legacy row:
``_upgrade`` numbers every legacy row by ``ORDER BY at, part, n`` (measurements.py:465, ``at`` =
the row's ``created_at``). Runs judged with the eighth review's ``answers`` fixture against the
session Postgres (marked ``integration``), on a legacy history written with the frozen DDL of
tests/integration/test_history_upgrade.py (``LEGACY_DDL``) under the default prefix, upgraded on
the verdict's first contact.

The lead's c8d2b58 numbered the old rows in each old table's own order, interleaved by each row's
running maximum time within its table; it closed both holes, but the twenty-sixth review found it
opened three others (``_place_acceptances`` places by time, so the two orders disagreed) and it was
reverted. Then the class was closed by failing closed (``measurements._clock_stepped``): when an old
history's stamps step back by more than a minute along a table's own order (or an acceptance is
stamped before its run), every acceptance is read as missing from the log until a run is accepted.
Hole 2 and hole 1 with run rows (as the command line and the job leave a run) are plain tests;
hole 1 as first written, answers with no run row (the library path only), stayed a strict xfail
(such an acceptance was never a conflict) until the twenty-ninth review's fix: on a step every
measurement is distrusted, no yardstick however it was accepted, until a run is accepted again.

Holes (strict xfails, each confirmed failing on 50abdac, and with --runxfail on an AssertionError
about the verdict; both also fail with --runxfail at 76c754d in a frozen worktree: not new in
50abdac, and not closed by its fix of the twenty-fourth's hole 1; one root cause, the upgrade's
clock order):

1. FAILS OPEN (previous-run gate) on a plain upgrade from 19af7bb..a60854a^, one flag-only
   acceptance: the twenty-fourth's hole 1 through the upgrade's own numbering. 50abdac places a
   flag-only acceptance at ``m.seq + 1e-6`` ("never later by a clock"), but a legacy row's ``seq``
   IS a clock: ``_upgrade`` interleaves by ``created_at`` (measurements.py:465). Legacy: a1 (0.80)
   eligible; a2 (0.70, its gate failed) recorded while the clock ran a day ahead and accepted (a
   trade-off, flag only); a3 (0.95) recorded after the clock was set right, eligible. That code
   (``git show 19af7bb:eval_pipeline/judging/answer_history.py``, lines 516-527) read the previous
   row as the latest eligible-or-accepted row by its table's ``seq``: a3. After the upgrade a2 has
   the last ``seq``; ``_ORDERS["latest"]`` makes it the previous row; it is the only acceptance
   (no conflict: one flag-only row among the candidates) and the pinned reference; and
   ``moved_reference`` takes it as "accepted since" (its position ``seq + 1e-6`` past its own
   ``seq``; legacy rows recorded no ``reference_run_id``). a4 (0.70: -0.25 from the previous
   eligible a3) is judged against 0.70 both ways and PASSES. The two-flag-only conflict does not
   reach it (one acceptance); the twenty-fourth's hole 1 test wrote its later runs with the
   current code (their ``seq`` in real order), so it did not see it. Reachability: upgrade from
   19af7bb..a60854a^ directly, a clock that ran ahead while one row that was later accepted was
   recorded; no intermediate version, no hand edit. Severity: fails open on the previous-run gate
   (a step regression of 0.25 passes). Fix: ``_upgrade`` numbers the legacy answer rows in their
   own table's ``seq`` order (``n``) among themselves (interleaving with the retrieval runs by
   time only where both orders agree), as the twenty-fourth suggested for its hole 3.

2. FAILS OPEN (a dropped grader) on a plain upgrade from 19af7bb..a60854a^, the same numbering:
   ``_since_acceptance`` (answers.py:480-501) starts "since the latest acceptance" at the accepted
   run's first measurement by ``seq`` ("never by a clock"). Legacy: r1 recorded while the clock ran
   a day ahead and accepted (its retrieval logged, as the job and the command line did; its
   answers by the flag), graded by ``deterministic`` only; s1 (clock set right) graded by
   ``deterministic`` and ``static``, eligible. The upgrade numbers r1 after s1: s1 is not "since",
   ``answer_graders_of`` forgets ``static``; r1 is both the previous row (last ``seq``) and the
   reference (one flag-only acceptance), "accepted since" itself. t1 (``deterministic`` 0.80, no
   ``static``) PASSES with ``missing == []``; on time, ``static`` is missing and t1 fails closed.
   Reachability: as hole 1. Severity: fails open (a measurement silently dropped: its regressions
   are never judged again). Fix: as hole 1 (the legacy rows numbered in their own order).

What held (plain tests): hole 1's control (a2 recorded on time: a3 is the previous row and a4's
-0.25 fails measured); hole 2's control (r1 recorded on time: t1's missing ``static``, measured
by s1, fails closed).

By reading (no test): no normal flow writes ``accepted_at = created_at``: every ``accept`` from
3eb5cd5 on stamps ``clock_timestamp()`` (5f6eaca: ``GREATEST(clock_timestamp(), max + 1 us)``) in a
transaction after the recording's ``now()`` (``write``'s upsert never names ``created_at`` or
``accepted_at``; no flow records and accepts in one transaction: the only callers of
``measurements.accept`` are ``accept_reference``/``accept_answer_run``, from the command line and
the Dagster ``accept_reference`` job); equal needs the same microsecond. The legacy retrieval
log's ``accepted_at`` (DEFAULT now(), the accept's own transaction) never equals the run's
``created_at`` (record_run's transaction). Float precision: ``m.seq + 1e-6`` is numeric, cast to
double; it collapses to ``m.seq`` only past seq 2^34 (1.7e10 measurements). ``count(*) OVER ()``
split: by identity (another key is another yardstick), by ``before_run_id`` (a re-judged run
sees what came before it), by a rename (the new name's own flag-only acceptance is after the old
name's by construction): none hands the bar to the wrong one. A flag-only acceptance of an older
run made after later runs (legacy: "an accepted run is the previous run") is now placed before
them: a stricter previous row, the pinned reference unchanged (a spurious stop at worst, ended by
accepting). Every legacy answer row records no ``reference_run_id``: the first run after an
upgrade whose reference is older than the previous row is stopped by ``moved_reference`` ("judged
without recording its reference"), by design and before 50abdac alike.
"""

from __future__ import annotations

import psycopg
import pytest

from tests.integration import test_history_upgrade as upgrade
from tests.unit.verdict import test_verdict_attacks_eighth as eighth
from tests.unit.verdict import test_verdict_attacks_twentyseventh as twentyseventh

pytestmark = pytest.mark.integration
answers = eighth.answers  # the eighth review's fixture


def _gate(verdict):
    return eighth._answer_gate(verdict)


def _legacy_answer(conn, run_id: str, rate: float, *, eligible: bool, minutes: float, accepted: bool,
                   grader: str = "deterministic") -> None:
    """One answer row of ``bm25`` as the code of 19af7bb..a60854a^ recorded it under the default
    prefix, with the key the ``answers`` fixture judges (tests/verdict_frames.py's
    ``answer_frame``), recorded ``minutes`` from now (negative: before), accepted by the flag
    alone (no stamp, no log entry)."""
    conn.execute(
        "INSERT INTO eval_answer_runs (run_id, variant, grader, created_at, set_id, set_fingerprint,"
        " corpus_signature, generator, yardstick, limited, errored, eligible, n_scored, pass_rate, mean_score,"
        " pass_rate_ci_low, pass_rate_ci_high, mean_ci_low, mean_ci_high, variant_config, provenance, accepted)"
        " VALUES (%s, 'bm25', %s, now() + %s * interval '1 minute', 'team.tiny', 'fp-1', 'corpus-1',"
        " 'extractive:v1', %s, false, 0, %s, 50, %s, %s, 0.0, 1.0, 0.0, 1.0, %s, %s, %s)",
        (run_id, grader, minutes, f"{grader}:v1", eligible, rate, rate, psycopg.types.json.Jsonb({"engine": "bm25"}),
         psycopg.types.json.Jsonb({"configuration": "cfg-bm25"}), accepted))


def _legacy_clock_ahead(answers, *, ahead: bool, run_rows: bool = False) -> None:
    """The default history as the code of 19af7bb..a60854a^ left it (the frozen legacy DDL): a1
    (0.80) eligible; a2 (0.70, failed) recorded (a day ahead when ``ahead``) and accepted by the
    flag; a3 (0.95) recorded after the clock was set right, eligible. Its table's ``seq``: a1, a2,
    a3. Upgraded on the next verdict's first contact."""
    with psycopg.connect(answers.uri, autocommit=True) as conn:
        conn.execute(upgrade.LEGACY_DDL.format(p="eval"))
        runs = (("a1", 0.80, True, -100, False), ("a2", 0.70, False, 24 * 60 if ahead else -75, True),
                ("a3", 0.95, True, -50, False))
        for run_id, rate, eligible, minutes, accepted in runs:
            if run_rows:  # its retrieval run row too (legacy_run's minutes count from 100 minutes ago)
                upgrade.legacy_run(conn, "eval", run_id, hit=0.8, eligible=True, minutes=100 + minutes)
            _legacy_answer(conn, run_id, rate, eligible=eligible, minutes=minutes, accepted=accepted)


def test_a_legacy_acceptance_recorded_ahead_is_not_the_previous_row_after_the_upgrade(answers):
    """Hole 1: a4 (0.70) is -0.25 from the previous eligible row a3 (0.95), the row the code that
    made the history read as the previous one: it must fail, not pass against a2 numbered last
    by the upgrade's clock order. Closed for runs with no run row (the library path) too since
    the twenty-ninth review: on a step every row is distrusted, however it was accepted."""
    _legacy_clock_ahead(answers, ahead=True)
    verdict = answers("a4", {"bm25": 0.70})
    gate = _gate(verdict)
    assert not gate.passed, (gate.state, gate.message, (verdict.rows[0]["previous"] or {}).get("run_id"))


def test_hole_1_with_run_rows_the_stepped_clock_fails_closed(answers):
    """Hole 1 as the command line and the job leave it (each run with its run row): the old
    tables' stamps step back by a day along their own order, so no acceptance's place is
    trusted: a4 (0.70) is not compared, saying every run was distrusted (since the twenty-ninth
    review; before, that the acceptance had no entry of its own). Since the answer gate compares a
    not-compared row with every row of its key recorded before, newest first, a4's -0.25 from a3 is
    shown (a2, numbered last, at 0.70, shows no drop): a measured failure, still saying why."""
    _legacy_clock_ahead(answers, ahead=True, run_rows=True)
    gate = _gate(answers("a4", {"bm25": 0.70}))
    twentyseventh._shown_against_recorded(gate, "a3")
    assert "distrusted once" in gate.message, gate.message


def test_hole_1s_control_on_time_the_step_regression_fails_measured(answers):
    """Held: a2 recorded on time: a3 is the previous row; a4 (0.70, -0.25) fails measured."""
    _legacy_clock_ahead(answers, ahead=False)
    verdict = answers("a4", {"bm25": 0.70})
    gate = _gate(verdict)
    assert not gate.passed and gate.state != "not_compared", gate.message
    assert verdict.rows[0]["previous"]["run_id"] == "a3", verdict.rows[0]["previous"]


# --------------------------------------------------------------------------------------------
# hole 2: the graders-since-acceptance window starts at an accepted run numbered by the clock
# --------------------------------------------------------------------------------------------


def _legacy_window(answers, *, ahead: bool) -> None:
    """The default history as the code of 19af7bb..a60854a^ left it: r1 recorded (a day ahead
    when ``ahead``) and accepted for bm25 (its retrieval logged, as the job and the command line
    did; its answers by the flag), graded by ``deterministic`` only; s1 recorded after (the clock
    set right), graded by ``deterministic`` and ``static``, eligible. Upgraded on the next
    verdict's first contact."""
    minutes = 24 * 60 if ahead else -100
    with psycopg.connect(answers.uri, autocommit=True) as conn:
        conn.execute(upgrade.LEGACY_DDL.format(p="eval"))
        upgrade.legacy_run(conn, "eval", "r1", hit=0.8, eligible=True, minutes=100 + minutes)
        conn.execute("INSERT INTO eval_references (variant, run_id, aspect, accepted_by, accepted_at)"
                     " VALUES ('bm25', 'r1', 'retrieval', 'alice', now() + %s * interval '1 minute')",
                     (minutes + 1,))
        _legacy_answer(conn, "r1", 0.80, eligible=True, minutes=minutes, accepted=True)
        _legacy_answer(conn, "s1", 0.80, eligible=True, minutes=-50, accepted=False)
        _legacy_answer(conn, "s1", 0.80, eligible=True, minutes=-50, accepted=False, grader="static")


def test_a_grader_measured_after_an_accepted_run_recorded_ahead_is_not_forgotten(answers):
    """Hole 2: s1 measured ``static`` after r1 was accepted; t1 drops it. The window "since the
    latest acceptance" (``_since_acceptance``: the accepted run's first measurement by ``seq``)
    misses s1 when the upgrade numbered r1 by a clock ahead. Closed by failing closed: the old
    tables' stamps step back along their own order, so the acceptance is read as missing from the
    log and t1 is not compared (``missing`` stays empty: the user who accepts a run then is not
    told of ``static``)."""
    _legacy_window(answers, ahead=True)
    verdict = answers("t1", {"bm25": 0.80})
    assert not verdict.passed, (verdict.passed, verdict.missing)


def test_hole_2s_control_on_time_the_dropped_grader_fails_closed(answers):
    """Held: r1 recorded on time: t1's missing ``static`` (measured by s1) fails closed."""
    _legacy_window(answers, ahead=False)
    verdict = answers("t1", {"bm25": 0.80})
    assert ("bm25", "static", "s1") in verdict.missing and not verdict.passed, (verdict.passed, verdict.missing)
