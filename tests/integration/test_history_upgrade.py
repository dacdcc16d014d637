"""A history recorded before measurements existed keeps every yardstick after the upgrade.

Until 2026-12-05 retrieval runs lived in `{prefix}_runs` + `{prefix}_variant_metrics` (keyed by
run, variant, metric) and answer rows in their own `{prefix}_answer_runs`. Both are now rows of
one `{prefix}_measurements` table. The upgrade is where a history could silently fail open: a
project whose yardsticks did not come across would see every variant as a first run and pass
anything. So the legacy schema is written here as it was (its DDL, frozen), filled the way the
old code filled it, and every lookup is asserted to find what it found before.
"""

from __future__ import annotations

import threading
import uuid

import psycopg
import pytest

from eval_pipeline.history.answers import previous_answer_run, read_answer_runs, reference_answer_run
from eval_pipeline.history.runs import (
    earlier_names,
    previous_run,
    project_history,
    read_run,
    recorded_run_of,
    reference_run,
    table_names,
)
from eval_pipeline.store.database import DatabaseError

pytestmark = pytest.mark.integration

IDENTITY = {"corpus_signature": "corpus-1", "benchmark_fingerprint": "bench-1", "scoring_protocol": "v1"}
ANSWER_KEY = {"variant": "dense", "grader": "deterministic", "set_id": "team.set", "set_fingerprint": "set-1",
              "corpus_signature": "corpus-1", "yardstick": "deterministic:v1+abc"}

# The schema as the code before measurements created it (eval_pipeline/history/runs.py and
# answers.py at 263a154), and no later than that: frozen, never to follow the code.
LEGACY_DDL = """
CREATE TABLE {p}_runs (
    run_id text PRIMARY KEY, seq bigint GENERATED ALWAYS AS IDENTITY UNIQUE,
    created_at timestamptz NOT NULL DEFAULT now(), limited boolean NOT NULL, corpus_signature text,
    question_set_fingerprint text, labels_fingerprint text, embedder text, embedder_revision text,
    chunking jsonb, scoring_protocol text, code_version text, variants jsonb NOT NULL DEFAULT '{{}}'::jsonb,
    provenance jsonb NOT NULL, eligible boolean, benchmark_fingerprint text);
CREATE TABLE {p}_variant_metrics (
    run_id text NOT NULL REFERENCES {p}_runs (run_id) ON DELETE CASCADE, variant text NOT NULL,
    metric text NOT NULL, value double precision, ci_low double precision, ci_high double precision,
    PRIMARY KEY (run_id, variant, metric));
CREATE TABLE {p}_question_results (
    run_id text NOT NULL REFERENCES {p}_runs (run_id) ON DELETE CASCADE, variant text NOT NULL,
    qid text NOT NULL, answerable boolean NOT NULL, errored boolean NOT NULL, "hit@10" double precision,
    mrr double precision, "ndcg@10" double precision, miss_class text, doc_ids jsonb,
    PRIMARY KEY (run_id, variant, qid));
CREATE TABLE {p}_references (
    seq bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, corpus_signature text, labels_fingerprint text,
    scoring_protocol text, variant text NOT NULL,
    run_id text NOT NULL REFERENCES {p}_runs (run_id) ON DELETE CASCADE,
    accepted_at timestamptz NOT NULL DEFAULT now(), note text NOT NULL DEFAULT '',
    aspect text NOT NULL DEFAULT 'retrieval', accepted_by text NOT NULL DEFAULT '', benchmark_fingerprint text);
CREATE TABLE {p}_answer_runs (
    run_id text NOT NULL, variant text NOT NULL, grader text NOT NULL,
    seq bigint GENERATED ALWAYS AS IDENTITY UNIQUE, created_at timestamptz NOT NULL DEFAULT now(),
    set_id text NOT NULL, set_fingerprint text NOT NULL, corpus_signature text, generator text,
    yardstick text NOT NULL, limited boolean NOT NULL, errored integer NOT NULL CHECK (errored >= 0),
    eligible boolean NOT NULL, n_scored integer NOT NULL CHECK (n_scored >= 0), pass_rate double precision,
    mean_score double precision, pass_rate_ci_low double precision, pass_rate_ci_high double precision,
    mean_ci_low double precision, mean_ci_high double precision,
    variant_config jsonb NOT NULL DEFAULT '{{}}'::jsonb, provenance jsonb NOT NULL DEFAULT '{{}}'::jsonb,
    accepted boolean NOT NULL DEFAULT false, accepted_at timestamptz, PRIMARY KEY (run_id, variant, grader));
"""


def legacy_run(conn, p, run_id, *, hit, eligible, minutes, gate_failed=(), errored=False, renamed=None):
    """One run of `dense` (and `bm25`) as record_run wrote it; `renamed` records dense as
    inheriting that name's history, as a rename did."""
    provenance = {**IDENTITY, "configurations": {"dense": "cfg-dense", "bm25": "cfg-bm25"},
                  "gate_failed": list(gate_failed), **({"inherits": {"dense": renamed}} if renamed else {})}
    conn.execute(
        f"INSERT INTO {p}_runs (run_id, created_at, limited, corpus_signature, labels_fingerprint, scoring_protocol, "
        "benchmark_fingerprint, variants, provenance, eligible) VALUES (%s, now() - %s * interval '1 minute', "
        "false, 'corpus-1', 'labels-1', 'v1', 'bench-1', %s, %s, %s)",
        (run_id, 100 - minutes, psycopg.types.json.Jsonb({"dense": {"engine": "pg"}, "bm25": {"engine": "bm25"}}),
         psycopg.types.json.Jsonb(provenance), eligible))
    for variant, value in (("dense", hit), ("bm25", 0.5)):
        conn.execute(f"INSERT INTO {p}_variant_metrics VALUES (%s, %s, 'hit@10', %s, %s, %s)",
                     (run_id, variant, value, value - 0.1, value + 0.1))
        for qid in ("q1", "q2"):
            conn.execute(f"INSERT INTO {p}_question_results (run_id, variant, qid, answerable, errored, \"hit@10\") "
                         "VALUES (%s, %s, %s, true, %s, %s)", (run_id, variant, qid, errored and qid == "q2", value))


def legacy_answer(conn, p, run_id, *, pass_rate, eligible, minutes, accepted=False):
    conn.execute(
        f"INSERT INTO {p}_answer_runs (run_id, variant, grader, created_at, set_id, set_fingerprint, "
        "corpus_signature, generator, yardstick, limited, errored, eligible, n_scored, pass_rate, mean_score, "
        "pass_rate_ci_low, pass_rate_ci_high, provenance, accepted, accepted_at) VALUES (%s, 'dense', "
        "'deterministic', now() - %s * interval '1 minute', 'team.set', 'set-1', 'corpus-1', 'gen-1', "
        "'deterministic:v1+abc', false, 0, %s, 7, %s, %s, %s, %s, %s, %s,"
        " CASE WHEN %s THEN now() - interval '98 minutes' END)",
        (run_id, 100 - minutes - 0.5, eligible, pass_rate, pass_rate, pass_rate - 0.1, pass_rate + 0.1,
         psycopg.types.json.Jsonb({"configuration": "cfg-dense"}), accepted, accepted))


@pytest.fixture
def legacy(pg_uri):
    """A legacy history: r1 (accepted for dense, retrieval and answers, before r2 ran), r2 (its gate failed),
    r3 (recorded before eligibility was stored: computed eligible), r4 (an errored question:
    never a yardstick), r5 (dense renamed from `old-dense`); returns the table prefix."""
    p = f"t_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(pg_uri, autocommit=True) as conn:
        conn.execute(LEGACY_DDL.format(p=p))
        legacy_run(conn, p, "r1", hit=0.8, eligible=True, minutes=1)
        legacy_answer(conn, p, "r1", pass_rate=0.8, eligible=True, minutes=1, accepted=True)
        conn.execute(f"INSERT INTO {p}_references (variant, run_id, aspect, accepted_by, accepted_at) "
                     "VALUES ('dense', 'r1', 'retrieval', 'alice', now() - interval '98 minutes')")
        # the answers' acceptance logged too, as every version that stamped `accepted_at` did (a60854a on)
        conn.execute(f"INSERT INTO {p}_references (variant, run_id, aspect, accepted_by, accepted_at) "
                     "VALUES ('dense', 'r1', 'answers:deterministic', 'alice', now() - interval '98 minutes')")
        legacy_run(conn, p, "r2", hit=0.5, eligible=False, minutes=2, gate_failed=["dense"])
        legacy_answer(conn, p, "r2", pass_rate=0.4, eligible=False, minutes=2)
        legacy_run(conn, p, "r3", hit=0.85, eligible=None, minutes=3)
        legacy_answer(conn, p, "r3", pass_rate=0.85, eligible=True, minutes=3)
        legacy_run(conn, p, "r4", hit=0.9, eligible=None, minutes=4, errored=True)
        legacy_run(conn, p, "r5", hit=0.86, eligible=True, minutes=5, renamed="old-dense")
    yield p
    with psycopg.connect(pg_uri, autocommit=True) as conn:
        for table in reversed(list(table_names(p).values())):
            conn.execute(f'DROP TABLE IF EXISTS "{table}" CASCADE')


def test_every_retrieval_yardstick_survives_the_upgrade(pg_uri, legacy):
    previous = previous_run(pg_uri, variant="dense", identity=IDENTITY, prefix=legacy)
    assert previous["run_id"] == "r5"  # r4 errored: never a yardstick
    assert previous["metrics"] == {"hit@10": pytest.approx(0.86)}
    assert previous["intervals"]["hit@10"] == (pytest.approx(0.76), pytest.approx(0.96))
    assert previous["provenance"]["configurations"]["dense"] == "cfg-dense"
    reference = reference_run(pg_uri, variant="dense", identity=IDENTITY, prefix=legacy)
    assert (reference["run_id"], reference["accepted"]) == ("r1", True)  # the acceptance came across
    assert reference_run(pg_uri, variant="bm25", identity=IDENTITY, prefix=legacy)["run_id"] == "r1"
    assert previous_run(pg_uri, variant="dense", identity=IDENTITY, before_run_id="r4", prefix=legacy)["run_id"] \
        == "r3"  # computed eligible (no gate failed, nothing errored), and the order kept
    assert recorded_run_of(pg_uri, variant="dense", prefix=legacy) == "r5"
    assert earlier_names(pg_uri, variant="dense", prefix=legacy) == ["old-dense"]
    # a rename finds dense's history by its configuration
    assert previous_run(pg_uri, variant="dense-v2", configuration="cfg-dense", heirs=["dense"], identity=IDENTITY,
                        prefix=legacy)["run_id"] == "r5"
    project = project_history(pg_uri, prefix=legacy)
    assert project["has_yardstick"] and sorted(project["known"]) == ["bm25", "dense"]
    run = read_run(pg_uri, "r4", prefix=legacy)
    assert run["eligible"] is False and len(run["metrics"]) == 2 and run["questions"]["errored"].sum() == 2


def test_every_answer_yardstick_survives_the_upgrade(pg_uri, legacy):
    previous = previous_answer_run(pg_uri, **ANSWER_KEY, prefix=legacy)
    assert previous["run_id"] == "r3" and previous["pass_rate"] == pytest.approx(0.85)
    reference = reference_answer_run(pg_uri, **ANSWER_KEY, prefix=legacy)
    assert (reference["run_id"], reference["accepted"]) == ("r1", True)
    assert (reference["pass_rate_ci_low"], reference["pass_rate_ci_high"]) == (pytest.approx(0.7),
                                                                               pytest.approx(0.9))
    rows = read_answer_runs(pg_uri, prefix=legacy)
    assert [(r["run_id"], r["eligible"]) for r in rows] == [("r1", True), ("r2", False), ("r3", True)]


def test_the_upgrade_interleaves_both_histories_in_recording_order(pg_uri, legacy):
    previous_run(pg_uri, variant="dense", prefix=legacy)  # the first contact upgrades
    with psycopg.connect(pg_uri) as conn:
        order = conn.execute(f"SELECT run_id, aspect FROM {legacy}_measurements WHERE variant = 'dense' "
                             "ORDER BY seq").fetchall()
        # the metrics now belong to the measurements: deleting one deletes its numbers
        conn.execute(f"DELETE FROM {legacy}_measurements WHERE run_id = 'r2' AND variant = 'dense' "
                     "AND aspect = 'retrieval'")
        left = conn.execute(f"SELECT variant, aspect, metric FROM {legacy}_variant_metrics WHERE run_id = 'r2' "
                            "ORDER BY 1, 2, 3").fetchall()
        old = conn.execute(f"SELECT count(*) FROM {legacy}_answer_runs").fetchone()[0]
    assert order == [("r1", "retrieval"), ("r1", "answers:deterministic"), ("r2", "retrieval"),
                     ("r2", "answers:deterministic"), ("r3", "retrieval"), ("r3", "answers:deterministic"),
                     ("r4", "retrieval"), ("r5", "retrieval")]
    assert left == [("bm25", "retrieval", "hit@10"), ("dense", "answers:deterministic", "mean_score"),
                    ("dense", "answers:deterministic", "pass_rate")]
    assert old == 3  # the old answer table is left as it was


def test_concurrent_first_readers_upgrade_once(pg_uri, legacy):
    found, errors = [], []

    def read():
        try:
            found.append(previous_run(pg_uri, variant="dense", identity=IDENTITY, prefix=legacy)["run_id"])
        except Exception as exc:  # noqa: BLE001 - every failure is the test's finding
            errors.append(repr(exc))

    threads = [threading.Thread(target=read) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and found == ["r5"] * 4
    with psycopg.connect(pg_uri) as conn:
        assert conn.execute(f"SELECT count(*) FROM {legacy}_measurements").fetchone()[0] == 5 * 2 + 3


@pytest.mark.parametrize("dropped", ["measurements", "runs"])
def test_a_history_missing_a_table_is_damaged_not_empty(pg_uri, legacy, dropped):
    """Measurements dropped (or the runs, CASCADE) under an upgraded history: rebuilt empty,
    every variant would be a first run. It is refused as damaged, which the verdict fails closed on."""
    previous_run(pg_uri, variant="dense", prefix=legacy)  # upgraded
    with psycopg.connect(pg_uri, autocommit=True) as conn:
        conn.execute(f'DROP TABLE "{table_names(legacy)[dropped]}" CASCADE')
    with pytest.raises(DatabaseError, match="damaged"):
        previous_run(pg_uri, variant="dense", identity=IDENTITY, prefix=legacy)
