"""The nineteenth review of the verdict: d8f7952 (``create_tables`` runs no DDL on a history
already in shape, ``_COMPLETE_SQL``; ``measurements.restore_placement_trigger`` restores a missing
trigger in a savepoint and reads and records on, warned, when the connection cannot; the trigger's
function is created only when missing, ``to_regprocedure``, never replaced). Runs judged with the
eighth review's ``judge``/``answers`` fixtures against the session Postgres (marked
``integration``); a second role as in the seventeenth review.

Attacked: a function of the history's name left by another history (an archived history renamed to
another prefix keeps its function, its trigger and its sequence's name; a new history under the old
prefix reuses the function), the early return beside a complete history (columns, index, legacy
tables), two first writers at once, two restorers of a missing trigger at once.

Holes (strict xfails, each confirmed by running it, and with --runxfail; closed since by the
lead, now a plain test: the trigger function finds the sequence of the table it fires on when it
fires, so a function left by a history renamed or dropped away serves the new one correctly):

1. a history started again under a prefix whose previous history was renamed (archived) draws an
   older install's acceptance positions from the archived history's sequence (misread, from
   d8f7952): ``ALTER TABLE eval_measurements RENAME TO eval2024_measurements`` (the natural way to
   archive a history and start anew) keeps the sequence's name ``eval_measurements_seq_seq`` and
   the function ``eval_measurements_place_acceptance`` whose body reads
   ``nextval('public.eval_measurements_seq_seq')``. The new ``eval`` history's identity sequence
   is then ``eval_measurements_seq_seq1``; ``_create_placement_trigger`` (measurements.py:347)
   finds the function by name (``to_regprocedure``) and reuses it, never replaced, so every
   acceptance an older install stamps on the new history takes a position from the archive's
   sequence (thousands ahead): the row reads as accepted after every later run. Before d8f7952
   ``CREATE OR REPLACE`` rewrote the body with the right sequence (the test passes at d8f7952^).
   In the test (FAILS OPEN): r2 (0.90) accepted by an older install is placed at 10001, so it
   stays "the previous run" over r3 (1.00, eligible, recorded after it), and r4 (0.90, -0.10 from
   r3) passes against r2 ("the previous run is also the pinned reference"); without the archive
   (the control) r2 is placed between r2 and r3 and r4 fails.
   Fix: reuse the function only when its body (``pg_proc.prosrc``) names this
   table's sequence (``pg_get_serial_sequence``), else create one under a name of its own (a
   suffix with the table's oid), or pass the sequence in ``TG_ARGV`` (the trigger is per table,
   so the function's body never names a sequence), or read the sequence in the function from
   ``TG_RELID`` (``pg_get_serial_sequence(TG_TABLE_SCHEMA || '.' || TG_TABLE_NAME, 'seq')``).

What held (plain tests): two first writers of a new prefix at once both record (the early return
reads only committed catalog rows; an incomplete history takes the advisory lock and
``IF NOT EXISTS``); two restorers of a dropped trigger at once (the lock, and the check again
under it) leave one trigger and both record; this version's own acceptance on a history started
after an archive draws its position itself, and the next drop fails.

By reading (no test): every ALTER/CREATE ``create_tables`` runs on a history that has its five
tables is listed in ``_COMPLETE_SQL`` (``eligible``, ``benchmark_fingerprint``, ``aspect``,
``accepted_by``, ``position``, ``accepted_position``, the metrics' ``aspect``, the variant index);
the legacy ``answer_runs`` and per-run metrics are read by ``_upgrade`` only when the measurements
table is new (``fresh``), before and after d8f7952 alike, so an ``answer_runs`` written by an older
install after the upgrade was never read on either side of the early return (when it did not
exist at the upgrade, it has no ``CHECK (false)`` and the older install's answers are recorded
where no one reads them: not a failing-open, the current yardstick stays; pre-existing). The
``_variant_idx`` is checked by name, not by table: after a rename the archive's index holds the
name and the new history gets none (``CREATE INDEX IF NOT EXISTS`` skips): slower, not wrong.
The errors swallowed by ``restore_placement_trigger`` come only from its savepoint (lock, check,
CREATE FUNCTION/TRIGGER); this version's ``accept`` draws its positions, and a stamp without a
position is placed by its time (designed). The same reuse after the archive is dropped too
(``DROP TABLE`` takes the sequence, not the function): the new history's trigger names a sequence
that no longer exists, and an older install's acceptance fails loudly ("relation does not
exist"); this version's never fires it.

Not reached: a function of the same name in another schema earlier on the search path (tables are
created in the same first schema, so it is the renamed/dropped case above in another form); a
real standby.
"""

from __future__ import annotations

import threading

import psycopg
import pytest

from eval_pipeline.history.measurements import placement_function
from tests.unit.verdict import test_verdict_attacks_eighth as eighth
from tests.unit.verdict import test_verdict_attacks_seventeenth as seventeenth
from tests.unit.verdict.test_verdict_attacks_eighth import _why

pytestmark = pytest.mark.integration
judge, answers = eighth.judge, eighth.answers  # the eighth review's fixtures: runs judged against the session Postgres
other_role, _as_role = seventeenth.other_role, seventeenth._as_role  # a second role of the same database

_SUFFIX = "_measurements_place_acceptance"


def _archive(judge, archive: str) -> None:
    """Rename the judge's history to the prefix ``archive`` (tables only, as a user archives it),
    and move its sequence far ahead (an archive of a long history)."""
    from eval_pipeline.history.runs import table_names

    with psycopg.connect(judge.uri, autocommit=True) as conn:
        for key, table in table_names(judge.prefix).items():
            if conn.execute("SELECT to_regclass(%s) IS NOT NULL", (table,)).fetchone()[0]:
                conn.execute(f'ALTER TABLE "{table}" RENAME TO "{table_names(archive)[key]}"')
        sequence = conn.execute("SELECT pg_get_serial_sequence(%s, 'seq')",
                                (table_names(archive)["measurements"],)).fetchone()[0]
        conn.execute("SELECT setval(%s, 10000)", (sequence,))


def _drop_archive(judge, archive: str) -> None:
    from eval_pipeline.history.runs import table_names

    with psycopg.connect(judge.uri, autocommit=True) as conn:
        for table in reversed(list(table_names(archive).values())):
            conn.execute(f'DROP TABLE IF EXISTS "{table}" CASCADE')
        conn.execute(f'DROP FUNCTION IF EXISTS "{placement_function(table_names(archive))}"')


def _older_install_accepts(judge, run_id: str, variant: str = "v") -> None:
    """An older install's acceptance: the row stamped and logged, no position written (the
    trigger and the log's default place it)."""
    from eval_pipeline.history.runs import table_names

    names = table_names(judge.prefix)
    with psycopg.connect(judge.uri) as conn, conn.transaction():
        conn.execute(f'UPDATE "{names["measurements"]}" SET accepted_at = now() WHERE run_id = %s AND variant = %s'
                     " AND aspect = 'retrieval'", (run_id, variant))
        conn.execute(f'INSERT INTO "{names["references"]}" (variant, run_id, aspect, note)'
                     " VALUES (%s, %s, 'retrieval', 'older install')", (variant, run_id))


# --------------------------------------------------------------------------------------------
# a function of the history's name left by another history
# --------------------------------------------------------------------------------------------


def _archived_then_a_failing_run(judge) -> str:
    """r1 recorded, the history archived (its tables renamed to ``<prefix>_old``, which is
    returned), ``<prefix>`` started again: r1 (1.00) recorded, r2 (0.90) recorded failing."""
    archive = judge.prefix + "_old"
    judge("r1", "A", {"v": "good"})
    _archive(judge, archive)
    assert judge("r1", "A", {"v": "good"}).gates["v"].passed
    assert not judge("r2", "A", {"v": "good"}, hits={"v": 90}).gates["v"].passed
    return archive


def test_an_older_install_acceptance_on_a_history_started_after_an_archive_is_placed_in_its_own_history(judge):
    """``eval`` archived as ``eval_old`` (tables renamed), ``eval`` started again: r1 (1.00) recorded,
    r2 (0.90) recorded failing, accepted by an older install (stamp and log, no position); r3 (1.00)
    recorded, eligible. r2's position must come from the new history's sequence (just after r2's
    seq, before r3's); and r4 (0.90), -0.10 from r3 (the previous run), must not pass."""
    from eval_pipeline.history.runs import table_names

    archive = _archived_then_a_failing_run(judge)
    try:
        _older_install_accepts(judge, "r2")
        r3 = judge("r3", "A", {"v": "good"})
        names = table_names(judge.prefix)
        with psycopg.connect(judge.uri, autocommit=True) as conn:
            position, r2_seq = conn.execute(
                f'SELECT accepted_position, seq FROM "{names["measurements"]}" WHERE run_id = %s AND variant = %s',
                ("r2", "v")).fetchone()
            r3_seq = conn.execute(f'SELECT seq FROM "{names["measurements"]}" WHERE run_id = %s AND variant = %s',
                                  ("r3", "v")).fetchone()[0]
        r4 = judge("r4", "A", {"v": "good"}, hits={"v": 90}, record=False)
        assert not r4.gates["v"].passed, _why(r4)
        assert position is not None and r2_seq < position < r3_seq, (
            f"r2 accepted at position {position}: r2 is seq {r2_seq}, r3 seq {r3_seq}; r3: {_why(r3)}")
    finally:
        _drop_archive(judge, archive)


def test_an_older_install_acceptance_without_an_archive_is_placed_and_the_next_drop_fails(judge):
    """The control of hole 1, without the archive (the function created for this history): r2's
    older-install acceptance is placed between r2 and r3, and r4 (0.90) after r3 (1.00) fails."""
    from eval_pipeline.history.runs import table_names

    judge("r1", "A", {"v": "good"})
    assert not judge("r2", "A", {"v": "good"}, hits={"v": 90}).gates["v"].passed
    _older_install_accepts(judge, "r2")
    assert judge("r3", "A", {"v": "good"}).gates["v"].passed
    names = table_names(judge.prefix)
    with psycopg.connect(judge.uri, autocommit=True) as conn:
        (position,), (r2_seq,), (r3_seq,) = (conn.execute(sql, params).fetchone() for sql, params in (
            (f'SELECT accepted_position FROM "{names["measurements"]}" WHERE run_id = %s', ("r2",)),
            (f'SELECT seq FROM "{names["measurements"]}" WHERE run_id = %s', ("r2",)),
            (f'SELECT seq FROM "{names["measurements"]}" WHERE run_id = %s', ("r3",))))
    assert r2_seq < position < r3_seq
    r4 = judge("r4", "A", {"v": "good"}, hits={"v": 90}, record=False)
    assert r4.gates["v"].state == "comparable" and not r4.gates["v"].passed, _why(r4)


def test_a_history_started_after_an_archive_records_and_compares(judge):
    """This version's own acceptances draw their positions: with the archive renamed away, the
    new history records, accepts r2 (0.90), r3 (1.00) records, and r4 (0.90) after it fails."""
    from eval_pipeline.history.runs import accept_reference

    archive = _archived_then_a_failing_run(judge)
    try:
        assert accept_reference(judge.uri, "r2", variants=["v"], prefix=judge.prefix) == ["v"]
        assert judge("r3", "A", {"v": "good"}).gates["v"].passed
        r4 = judge("r4", "A", {"v": "good"}, hits={"v": 90}, record=False)
        assert r4.gates["v"].state == "comparable" and not r4.gates["v"].passed, _why(r4)
    finally:
        _drop_archive(judge, archive)


# --------------------------------------------------------------------------------------------
# two at once: first writers, restorers
# --------------------------------------------------------------------------------------------


def _at_once(*calls):
    errors: list[str] = []
    results: list[object] = [None] * len(calls)
    barrier = threading.Barrier(len(calls))

    def go(i, call):
        try:
            barrier.wait()
            results[i] = call()
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(f"{type(exc).__name__}: {exc}")

    threads = [threading.Thread(target=go, args=(i, c)) for i, c in enumerate(calls)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results, errors


def test_two_first_writers_of_a_new_history_both_record(judge):
    """Two runs recorded at once on a prefix with no history: both record, once each."""
    from eval_pipeline.history.measurements import has_placement_trigger
    from eval_pipeline.history.runs import table_names

    results, errors = _at_once(lambda: judge("r1", "A", {"v": "good"}), lambda: judge("r2", "A", {"v": "good"}))
    assert not errors, errors
    with psycopg.connect(judge.uri, autocommit=True) as conn:
        count = conn.execute(f'SELECT count(*) FROM "{judge.prefix}_runs"').fetchone()[0]
        assert has_placement_trigger(conn, table_names(judge.prefix))
    assert count == 2


def test_two_restorers_of_a_dropped_trigger_at_once_leave_one_and_both_record(judge):
    """The trigger dropped; two runs recorded at once restore it (one does, the other finds it
    under the lock): both record, one trigger."""
    judge("r1", "A", {"v": "good"})
    judge.sql(f'DROP TRIGGER IF EXISTS "{judge.prefix}{_SUFFIX}" ON {{measurements}}')
    results, errors = _at_once(lambda: judge("r2", "A", {"v": "good"}), lambda: judge("r3", "A", {"v": "good"}))
    assert not errors, errors
    assert all(r.gates["v"].passed for r in results), [_why(r) for r in results]
    with psycopg.connect(judge.uri, autocommit=True) as conn:
        triggers = conn.execute("SELECT count(*) FROM pg_trigger WHERE tgname = %s",
                                (judge.prefix + _SUFFIX,)).fetchone()[0]
        count = conn.execute(f'SELECT count(*) FROM "{judge.prefix}_runs"').fetchone()[0]
    assert triggers == 1 and count == 3
