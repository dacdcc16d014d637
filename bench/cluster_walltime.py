"""The whole job in-process, with the multiprocess executor and on a Celery worker pool, on one machine.

One cluster from tests/cluster.py (redis-server on 127.0.0.1, a password-protected embedded
Postgres on TCP as the external vector store, N workers started with `dagster-celery worker
start`), and Dagster's run storage in an embedded Postgres of the bench state dir. All three jobs
use the same vector store and state dir: a first in-process run fills them (ingest, query
embeddings), then every measured run ranks every variant again (`reuse: false`), alternating
retrieval_eval / retrieval_eval_parallel / retrieval_eval_celery, `workers` N batches for the
latter two.

Prints, per run: the whole job's wall time (process start to exit), the ranking phase (plan_ranking's
STEP_START to collect_ranked_results' STEP_SUCCESS, from the event log), the rank steps' durations,
and the per-step overhead: how long a step waits from being handed to the executor (the
multiprocess executor's STEP_WORKER_STARTING, the Celery executor's "Submitting celery task"
engine event) to its STEP_START, and the whole job's extra time over in-process per step.
Then, with a hashing embedder (no model), the vector store's write rate through TCP: chunks/s of
`ingest` into the external server.

    .venv/bin/python bench/cluster_walltime.py                     # demo corpus, 2 rounds, 2 workers
    .venv/bin/python bench/cluster_walltime.py --scifact --rounds 1 # SciFact train (../shared/datasets/scifact)
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path

from common import (DEFAULT_STATE_ROOT, REPO_ROOT, SCIFACT_DEFAULT, HashEmbedder, print_machine, print_table,
                    results_beside)

sys.path.insert(0, str(REPO_ROOT))
from tests.cluster import BIN, Cluster, missing  # noqa: E402

JOBS = ("retrieval_eval", "retrieval_eval_parallel", "retrieval_eval_celery")


def run_config(state: Path, name: str, *, reuse: bool, workers: int, scifact: Path | None, split: str) -> Path:
    ops: dict = {"report": {"config": {"results_dir": str(results_beside(state) / name), "record_history": False}},
                 "ranked_results": {"config": {"reuse": reuse, "workers": workers}}}
    if scifact:
        ops["corpus_snapshot"] = {"config": {"source": "beir", "path": str(scifact)}}
        ops["question_set"] = {"config": {"source": "beir", "path": str(scifact), "beir_split": split}}
        ops["pgvector_store"] = {"config": {"split_length": 100000, "split_overlap": 0}}  # each abstract whole
    path = state / f"{name}.json"
    path.write_text(json.dumps({"ops": ops}))
    return path


def events(dagster_uri: str, tag: str) -> list:
    import psycopg
    from dagster import EventLogEntry
    from dagster._serdes import deserialize_value

    with psycopg.connect(dagster_uri) as conn:
        (run_id,) = conn.execute("SELECT run_id FROM run_tags WHERE key = 'bench/run' AND value = %s", (tag,)).fetchone()
        rows = conn.execute("SELECT event FROM event_logs WHERE run_id = %s ORDER BY id", (run_id,)).fetchall()
    return [deserialize_value(r[0], EventLogEntry) for r in rows]


def timings(entries) -> dict:
    """From the run's events: ranking phase, rank steps, and each step's wait from hand-over to start."""
    start, end, handed = {}, {}, {}
    for e in entries:
        ev = e.dagster_event
        if ev is None or ev.step_key is None:
            continue
        kind = ev.event_type_value
        if kind == "STEP_START":
            start.setdefault(ev.step_key, e.timestamp)
        elif kind == "STEP_SUCCESS":
            end[ev.step_key] = e.timestamp
        elif kind == "STEP_WORKER_STARTING" or (kind == "ENGINE_EVENT" and (e.message or "").startswith("Submitting celery")):
            handed.setdefault(ev.step_key, e.timestamp)
    rank = {k.split("[", 1)[1].rstrip("]"): end[k] - start[k] for k in start if "rank_variants[" in k and k in end}
    waits = [start[k] - handed[k] for k in start if k in handed]
    plan, collect = "ranked_results.plan_ranking", "ranked_results.collect_ranked_results"
    return {"ranking": end.get(collect, float("nan")) - start.get(plan, float("nan")), "rank_steps": rank,
            "steps": len(start), "wait_mean": statistics.mean(waits) if waits else 0.0,
            "step_seconds": sum(end[k] - start[k] for k in start if k in end)}


def run_job(job: str, env: dict, config: Path, log: Path, dagster_uri: str) -> dict:
    tag = uuid.uuid4().hex
    started = time.perf_counter()
    proc = subprocess.run([str(BIN / "dagster"), "job", "execute", "-m", "definitions", "-j", job, "-c", str(config),
                           "--tags", json.dumps({"bench/run": tag})],
                          cwd=REPO_ROOT, env=env, stdout=open(log, "w"), stderr=subprocess.STDOUT)
    total = time.perf_counter() - started
    if proc.returncode != 0:
        raise SystemExit(f"{job} failed (exit {proc.returncode}); log {log}")
    return {"job": job, "total": total, **timings(events(dagster_uri, tag))}


def write_rate(uri: str, chunks: int, scifact: Path) -> dict:
    """`ingest` with the hashing embedder into the external server: the database side of ingest."""
    from ingest_throughput import drop_table
    from scale_curve import _documents_needed

    from common import replicate_documents, snapshot_of
    from eval_pipeline.corpus.sources import load_corpus
    from eval_pipeline.store.ingest import ChunkingConfig, ingest, store_fingerprint

    chunking = ChunkingConfig()
    base = load_corpus("beir", str(scifact)).documents
    snapshot = snapshot_of(replicate_documents(base, _documents_needed(base, chunks, chunking)),
                           f"bench:cluster-write:{chunks}")
    embedder = HashEmbedder()
    drop_table(uri, f"chunks_{store_fingerprint(snapshot.signature, chunking, embedder.identity)}")
    lines: list[str] = []
    info = ingest(snapshot, connection_string=uri, embedder=embedder, chunking=chunking, log=lines.append)
    indexed = next((m for m in lines if "chunks indexed (HNSW" in m), "")
    hnsw = float(indexed.split("(HNSW ")[1].split(" s")[0]) if indexed else float("nan")
    tsv = float(indexed.split("tsvector ")[1].split(" s")[0]) if indexed else float("nan")
    return {"chunks": info.chunk_count, "seconds": info.seconds, "hnsw_s": hnsw, "tsvector_s": tsv}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--state-dir", default=str(DEFAULT_STATE_ROOT / "cluster_walltime"))
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--workers", type=int, default=2, help="celery workers, and the ranking batches of both pools")
    parser.add_argument("--scifact", nargs="?", const=str(SCIFACT_DEFAULT), default=None,
                        help=f"run on SciFact (BEIR folder, default {SCIFACT_DEFAULT}) instead of the demo corpus")
    parser.add_argument("--split", default="train")
    parser.add_argument("--write-chunks", type=int, default=20000,
                        help="chunks for the write-rate measurement (0: skip; needs SciFact)")
    args = parser.parse_args()
    if why := missing():
        raise SystemExit(why)
    corpus = Path(args.scifact).resolve() if args.scifact else None
    print_machine(f"whole job in-process / multiprocess / celery ({args.workers} workers), "
                  f"{'SciFact ' + args.split if corpus else 'demo corpus'}")
    from eval_pipeline.store.database import EmbeddedPostgres

    state = Path(args.state_dir).resolve()
    if state.exists():
        EmbeddedPostgres(state / "dagster_pg").stop()
        shutil.rmtree(state)
    state.mkdir(parents=True)
    dagster_pg = EmbeddedPostgres(state / "dagster_pg")
    runs = []
    try:
        dagster_url = dagster_pg.uri("dagster", driver="psycopg2")
        started = time.perf_counter()
        with Cluster(state / "cluster", dagster_url=dagster_url, workers=args.workers) as cluster:
            print(f"cluster up (redis, vector store, {args.workers} workers ready): {time.perf_counter() - started:.1f} s")
            uri = dagster_pg.uri("dagster")
            fill = run_job("retrieval_eval", cluster.env,
                           run_config(state, "fill", reuse=True, workers=1, scifact=corpus, split=args.split),
                           state / "fill.log", uri)
            print(f"fill run (in-process: ingest, query embeddings, first ranking): {fill['total']:.1f} s")
            for round_ in range(args.rounds):
                for job in JOBS:
                    batches = 1 if job == "retrieval_eval" else args.workers
                    name = f"{job}-{round_}"
                    r = run_job(job, cluster.env, run_config(state, name, reuse=False, workers=batches, scifact=corpus,
                                                             split=args.split), state / f"{name}.log", uri)
                    runs.append(r)
                    print(f"round {round_ + 1} {job}: job {r['total']:.1f} s, ranking {r['ranking']:.1f} s, "
                          f"{r['steps']} steps ({r['step_seconds']:.1f} s in steps), hand-over to start "
                          f"{r['wait_mean']:.2f} s/step; rank steps "
                          + ", ".join(f"{k} {v:.1f} s" for k, v in r["rank_steps"].items()), flush=True)
            if args.write_chunks and SCIFACT_DEFAULT.exists():
                w = write_rate(cluster.postgres.url(), args.write_chunks, corpus or SCIFACT_DEFAULT)
                print(f"vector store write rate over TCP (hashing embedder): {w['chunks']} chunks in {w['seconds']:.1f} s "
                      f"= {w['chunks'] / w['seconds']:.0f} chunks/s (of which HNSW build {w['hnsw_s']:.1f} s, "
                      f"tsvector column {w['tsvector_s']:.1f} s)")
    finally:
        dagster_pg.stop()
    rows = []
    base = None
    for job in JOBS:
        mine = [r for r in runs if r["job"] == job]
        total, ranking = statistics.median(r["total"] for r in mine), statistics.median(r["ranking"] for r in mine)
        steps = mine[0]["steps"]
        base = base if base is not None else total
        rows.append([job, total, ranking, steps, statistics.median(r["wait_mean"] for r in mine),
                     (total - base) / steps])
    print()
    print_table(rows, ["job", "whole job s (median)", "ranking s (median)", "steps", "hand-over→start s/step",
                       "extra over in-process s/step"], digits=2)


if __name__ == "__main__":
    main()
