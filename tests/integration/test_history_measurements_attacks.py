"""Attacks on the one history of measurements (3eb5cd5) and its in-place upgrade.

Each test is a way the change makes the verdict fail open, or loses a history that the code
before it (263a154) kept and read. The legacy schema and rows come from the upgrade's own
tests (tests/integration/test_history_upgrade.py: frozen as the old code wrote them).
"""

from __future__ import annotations

import uuid

import psycopg
import pytest
from psycopg.types.json import Jsonb

from eval_pipeline.history import runs as history
from eval_pipeline.history.answers import (
    accept_answer_run,
    previous_answer_run,
    record_answer_run,
    reference_answer_run,
)
from eval_pipeline.history.runs import previous_run, recorded_run_of, reference_run, table_names
from eval_pipeline.scoring.variant import summarize
from eval_pipeline.verdict.retrieval import judge_run
from tests.integration.test_answer_history import key_of, row
from tests.integration.test_history import record
from tests.integration.test_history_upgrade import ANSWER_KEY, IDENTITY, LEGACY_DDL, legacy_answer, legacy_run
from tests.integration.test_verdict_attacks import TOL, provenance, rank_reference
from tests.verdict_frames import scored_frame

pytestmark = pytest.mark.integration


@pytest.fixture
def prefix(pg_uri):
    """A table prefix of this test's own; every table it may leave behind is dropped."""
    p = f"t_{uuid.uuid4().hex[:12]}"
    yield p
    with psycopg.connect(pg_uri, autocommit=True) as conn:
        for table in reversed(list(table_names(p).values())):
            conn.execute(f'DROP TABLE IF EXISTS "{table}" CASCADE')
        conn.execute(f'DROP SCHEMA IF EXISTS "{p}_elsewhere" CASCADE')


def _a_drop_to_50_fails_closed(pg_uri: str, prefix: str) -> None:
    """Run r1 of `a` at 50 hits, judged against the history under ``prefix``: never a first run,
    and the gate fails."""
    verdict = judge_run({"a": scored_frame("a", 50)}, baseline="a", provenance=provenance("B1", {"a": "bad"}),
                        tolerances=TOL, strict=False, run_id="r1", limited=False, connection_string=pg_uri,
                        history_prefix=prefix, record=False, sweep_keys=["a"], rank_reference=rank_reference)
    assert verdict.gates["a"].state != "first_run"
    assert not verdict.gate_passed


def test_an_upgraded_copy_in_another_schema_does_not_hide_the_legacy_retrieval_history(pg_uri, prefix):
    """The upgrade decides whether ``{prefix}_variant_metrics`` is legacy by asking
    information_schema.columns for an ``aspect`` column by table name only, in every schema.
    The same history in another schema of the database (a staging copy already upgraded, a
    backup) answers yes: the legacy metrics are taken for the new table, nothing is copied, and
    the history on the search path reads as empty: every variant a first run (fail open)."""
    with psycopg.connect(pg_uri, autocommit=True) as conn:
        conn.execute(LEGACY_DDL.format(p=prefix))
        conn.execute(f"DROP TABLE {prefix}_answer_runs")  # a history recorded before answers
        legacy_run(conn, prefix, "r1", hit=0.8, eligible=True, minutes=1)
        legacy_run(conn, prefix, "r2", hit=0.82, eligible=True, minutes=2)
        # another schema, not on the search path, holds an upgraded copy of the same table
        conn.execute(f'CREATE SCHEMA "{prefix}_elsewhere"')
        conn.execute(f'CREATE TABLE "{prefix}_elsewhere".{prefix}_variant_metrics (run_id text, variant text, '
                     "aspect text, metric text, value double precision)")
    previous = previous_run(pg_uri, variant="dense", identity=IDENTITY, prefix=prefix)
    assert previous is not None and previous["run_id"] == "r2"
    assert reference_run(pg_uri, variant="dense", identity=IDENTITY, prefix=prefix)["run_id"] == "r1"


def legacy_judged_run(conn, p, run_id, bench, configs: dict[str, str], hits: int, *, failed=()) -> None:
    """A run of ``configs`` ({variant: knob}) on benchmark ``bench`` (eligible unless a gate
    ``failed``), as the old record_run wrote it: its runs row, its per-run metrics and its
    question rows."""
    prov = {**provenance(bench, configs), "scoring_protocol": history.SCORING_PROTOCOL, "gate_failed": list(failed)}
    per_query = {v: scored_frame(v, hits) for v in configs}
    conn.execute(
        f"INSERT INTO {p}_runs (run_id, limited, corpus_signature, labels_fingerprint, scoring_protocol, "
        "benchmark_fingerprint, variants, provenance, eligible) VALUES (%s, false, %s, %s, %s, %s, %s, %s, %s)",
        (run_id, prov["corpus_signature"], prov["labels_fingerprint"], prov["scoring_protocol"],
         prov["benchmark_fingerprint"], Jsonb(prov["variants"]), Jsonb(prov), not failed))
    with conn.cursor() as cur:
        cur.executemany(f"INSERT INTO {p}_variant_metrics VALUES (%s, %s, %s, %s, %s, %s)",
                        history._metric_rows(run_id, summarize(per_query), None))
        history._insert_question_rows(cur, f"{p}_question_results", history._question_rows(run_id, per_query))


def test_an_upgraded_copy_in_another_schema_lets_a_regression_pass_the_gate(pg_uri, prefix):
    """The same hole at the verdict: a 50-point drop of `a` on the same benchmark, against a
    legacy history whose yardstick is r0 (1.00), is judged a first run and passes."""
    with psycopg.connect(pg_uri, autocommit=True) as conn:
        conn.execute(LEGACY_DDL.format(p=prefix))
        conn.execute(f"DROP TABLE {prefix}_answer_runs")
        legacy_judged_run(conn, prefix, "r0", "B1", {"a": "good"}, hits=100)
        conn.execute(f'CREATE SCHEMA "{prefix}_elsewhere"')
        conn.execute(f'CREATE TABLE "{prefix}_elsewhere".{prefix}_variant_metrics (aspect text)')
    _a_drop_to_50_fails_closed(pg_uri, prefix)


def test_a_legacy_answer_table_from_before_acceptance_does_not_brick_the_whole_history(pg_uri, prefix):
    """An answer table created before answer rows could be accepted (67e91f5, before 19af7bb
    added ``accepted`` and a60854a ``accepted_at``) and not written since has neither column;
    the old code added them on its next write, and its retrieval history never touched that
    table. The upgrade selects ``a.accepted``: it raises on every contact, inside every read
    and every record_run, so the retrieval history cannot be read or written again (and no
    write can heal it) until someone alters the table by hand."""
    with psycopg.connect(pg_uri, autocommit=True) as conn:
        conn.execute(LEGACY_DDL.format(p=prefix))
        conn.execute(f"ALTER TABLE {prefix}_answer_runs DROP COLUMN accepted, DROP COLUMN accepted_at")
        legacy_run(conn, prefix, "r1", hit=0.8, eligible=True, minutes=1)
        conn.execute(
            f"INSERT INTO {prefix}_answer_runs (run_id, variant, grader, created_at, set_id, set_fingerprint, "
            "corpus_signature, generator, yardstick, limited, errored, eligible, n_scored, pass_rate, mean_score, "
            "provenance) VALUES ('r1', 'dense', 'deterministic', now() - interval '98 minutes', 'team.set', 'set-1', "
            "'corpus-1', 'gen-1', 'deterministic:v1+abc', false, 0, true, 7, 0.8, 0.8, %s)",
            (Jsonb({"configuration": "cfg-dense"}),))
    assert previous_run(pg_uri, variant="dense", identity=IDENTITY, prefix=prefix)["run_id"] == "r1"
    record(pg_uri, prefix, "r2")  # the next run is recorded, as the old code recorded it
    assert recorded_run_of(pg_uri, variant="a", prefix=prefix) == "r2"


def test_a_legacy_run_without_question_rows_still_counts_as_recorded(pg_uri, prefix):
    """A variant recorded in a full run (its metrics stored) whose gate failed is not a
    genuinely new measurement: the next run without a yardstick fails as not compared. The old
    recorded_run_of found it by its metrics; the upgrade counts n_scored from the question rows,
    and recorded_of skips a measurement with nothing scored or errored, so a run whose question
    rows are absent (an empty per-question frame, rows pruned) makes the variant look new: a
    first run, passed (fail open)."""
    with psycopg.connect(pg_uri, autocommit=True) as conn:
        conn.execute(LEGACY_DDL.format(p=prefix))
        legacy_run(conn, prefix, "r1", hit=0.5, eligible=False, minutes=1, gate_failed=["dense"])
        conn.execute(f"DELETE FROM {prefix}_question_results WHERE run_id = 'r1'")
    assert previous_run(pg_uri, variant="dense", identity=IDENTITY, prefix=prefix) is None
    assert recorded_run_of(pg_uri, variant="dense", prefix=prefix) == "r1"


def test_a_legacy_failed_run_without_question_rows_does_not_make_the_next_run_a_first_run(pg_uri, prefix):
    """The same hole at the verdict: `a` failed its gate in r0 (never a yardstick, not
    accepted); r1 has nothing to compare with and must fail as not compared, not pass as
    `a`'s first run."""
    with psycopg.connect(pg_uri, autocommit=True) as conn:
        conn.execute(LEGACY_DDL.format(p=prefix))
        legacy_judged_run(conn, prefix, "r0", "B1", {"a": "bad"}, hits=50, failed=["a"])
        conn.execute(f"DELETE FROM {prefix}_question_results WHERE run_id = 'r0'")
    _a_drop_to_50_fails_closed(pg_uri, prefix)


def test_answer_rows_an_older_process_records_after_the_upgrade_are_not_lost(pg_uri, prefix):
    """After the upgrade the old answer table is no longer read, but a process still on the old
    code (a code location not yet redeployed) could write it: those rows would never be seen
    again, and the variant's answers would look like a first measurement to every later run.
    The upgrade closes the table: the old code's write fails loudly, and nothing is lost
    silently (its retrieval record fails the same way: the metrics table is keyed by aspect)."""
    with psycopg.connect(pg_uri, autocommit=True) as conn:
        conn.execute(LEGACY_DDL.format(p=prefix))
        legacy_run(conn, prefix, "r1", hit=0.8, eligible=True, minutes=1)
        legacy_answer(conn, prefix, "r0", pass_rate=0.9, eligible=True, minutes=0)
    assert previous_run(pg_uri, variant="dense", identity=IDENTITY, prefix=prefix)["run_id"] == "r1"  # upgraded
    with psycopg.connect(pg_uri, autocommit=True) as conn, \
            pytest.raises(psycopg.errors.CheckViolation, match=f"{prefix}_answer_runs_moved"):
        legacy_answer(conn, prefix, "r1", pass_rate=0.9, eligible=True, minutes=1)  # the old code's write
    assert previous_answer_run(pg_uri, **ANSWER_KEY, prefix=prefix)["run_id"] == "r0"  # what it held came across


def test_an_accepted_answer_row_re_recorded_without_metrics_is_not_a_yardstick(pg_uri, prefix):
    """Re-recording a run keeps its acceptance (its ``accepted_at``), and a re-recorded row may
    lack its metrics (not eligible: its grading failed this time). The old lookup required
    ``pass_rate`` and ``mean_score`` of every yardstick; the one rule of the measurements does
    not (the metrics are another table now), so the lookup returns a yardstick with no numbers,
    which the answer gate refuses with a ValueError on every later run of the key: no verdict
    at all, where the old code fell back to the first eligible row (r0)."""
    record_answer_run(pg_uri, "r0", [row(0.8, 0.8)], prefix=prefix)
    record_answer_run(pg_uri, "r1", [row(0.85, 0.85)], prefix=prefix)
    assert accept_answer_run(pg_uri, "r1", prefix=prefix)[0] == [("bm25", "decision")]
    record_answer_run(pg_uri, "r1", [row(None, None, eligible=False)], prefix=prefix)  # the retried step
    for found in (previous_answer_run(pg_uri, **key_of(row()), before_run_id="r2", prefix=prefix),
                  reference_answer_run(pg_uri, **key_of(row()), before_run_id="r2", prefix=prefix)):
        assert found is not None and found["run_id"] == "r0"


def test_an_acceptance_an_older_process_logs_after_the_upgrade_is_honoured(pg_uri, prefix):
    """The acceptance record is ``{prefix}_references`` (kept by the change, still written by
    the old code's accept_reference, whose write succeeds after the upgrade), but the lookups
    now read only the measurement's ``accepted_at`` stamp. A run accepted by a process still on
    the old code (the CLI of an older install) is logged as accepted, and project_history
    (which reads the log) treats it so, but it is never the pinned reference nor the previous
    run: the two records of one acceptance disagree."""
    with psycopg.connect(pg_uri, autocommit=True) as conn:
        conn.execute(LEGACY_DDL.format(p=prefix))
        legacy_run(conn, prefix, "r1", hit=0.8, eligible=True, minutes=1)
        legacy_run(conn, prefix, "r2", hit=0.7, eligible=False, minutes=2, gate_failed=["dense"])
    assert reference_run(pg_uri, variant="dense", identity=IDENTITY, prefix=prefix)["run_id"] == "r1"  # upgraded
    with psycopg.connect(pg_uri, autocommit=True) as conn:  # the old accept_reference's write, as it was
        conn.execute(f"INSERT INTO {prefix}_references (corpus_signature, labels_fingerprint, scoring_protocol, "
                     "benchmark_fingerprint, variant, run_id, note, aspect, accepted_by) VALUES ('corpus-1', "
                     "'labels-1', 'v1', 'bench-1', 'dense', 'r2', 'a deliberate trade-off', 'retrieval', 'bob')")
    assert reference_run(pg_uri, variant="dense", identity=IDENTITY, prefix=prefix)["run_id"] == "r2"
    assert previous_run(pg_uri, variant="dense", identity=IDENTITY, prefix=prefix)["run_id"] == "r2"
