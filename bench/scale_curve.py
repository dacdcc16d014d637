"""The pipeline (ingest + a sweep over pg-dense, pg-keyword, bm25, hybrid) at several corpus sizes:
time to ingest, time to query, per-engine latency and peak RSS per size.

Documents are SciFact abstracts; sizes past 5,183 repeat them with new ids (`<id>~r<k>`).
Chunking is the pipeline default (150 words, 20 overlap).  Queries are SciFact train claims
(--queries, default 200), embedded in one batch.  Each size runs in its own child process, so
its peak RSS is its own; the table is dropped first, so the ingest is really measured.

With --fake-embedder a deterministic hashed bag-of-words embedder (384 dims, bench/common.py)
replaces all-MiniLM-L6-v2: the figures then measure everything but the model (chunking,
writing, HNSW build, queries, bm25, fusion).  The model itself runs at ~15 documents/s on
2 cores (bench/ingest_throughput.py), so 20k documents would take ~25 minutes with it.

    .venv/bin/python bench/scale_curve.py --fake-embedder                 # 1k, 5k, 20k
    .venv/bin/python bench/scale_curve.py --sizes 1000                    # real model, 1k only
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import (
    SCIFACT_DEFAULT,
    BenchDB,
    HashEmbedder,
    add_common_args,
    load_note,
    peak_rss_mb,
    print_machine,
    print_table,
    replicate_documents,
    snapshot_of,
)

ENGINES = ("pg-dense", "pg-keyword", "bm25", "hybrid")


def child(args) -> dict:
    from ingest_throughput import drop_table

    from eval_pipeline.corpus.sources import load_corpus
    from eval_pipeline.judging.sweep_file import parse_sweep
    from eval_pipeline.questions.sets import Question
    from eval_pipeline.ranking.caches import QueryEmbeddingCache
    from eval_pipeline.ranking.keyword_index import IndexedKeywordEngine, ensure_tsvector_column
    from eval_pipeline.ranking.sweep import Sweep
    from eval_pipeline.store.embedders import LocalEmbedder
    from eval_pipeline.store.ingest import ChunkingConfig, ingest, store_fingerprint

    n = args.child
    started_all = time.perf_counter()
    base = load_corpus("beir", args.path).documents
    snapshot = snapshot_of(replicate_documents(base, n), f"bench:scifact:{n}")
    present = {d.doc_id for d in snapshot.documents}
    raw = [json.loads(line) for line in Path(args.path, "queries.jsonl").read_text().splitlines() if line.strip()]
    qrels: dict[str, set[str]] = {}
    for line in Path(args.path, "qrels", "train.tsv").read_text().splitlines()[1:]:
        parts = line.strip().split("\t")
        if len(parts) == 3:
            qrels.setdefault(parts[0], set()).add(parts[1])
    questions = [Question(qid=str(o["_id"]), question=o["text"], gold=tuple(sorted(qrels[str(o["_id"])] & present)))
                 for o in raw if str(o["_id"]) in qrels][: args.queries]

    db = BenchDB(args.state_dir, keep=True)  # the parent stops it
    embedder = HashEmbedder() if args.fake_embedder else LocalEmbedder()
    t = time.perf_counter()
    embedder.warm_up()
    model_seconds = time.perf_counter() - t
    chunking = ChunkingConfig()
    table = f"chunks_{store_fingerprint(snapshot.signature, chunking, embedder.model_id)}"
    drop_table(db.uri, table)
    rss_before_ingest = peak_rss_mb()
    info = ingest(snapshot, connection_string=db.uri, embedder=embedder, chunking=chunking, log=lambda m: None)
    rss_after_ingest = peak_rss_mb()
    # ingest() means to build the HNSW index but its store connects lazily, so the index would be
    # built inside the sweep's first dense query; build it here, timed on its own.
    from eval_pipeline.store.ingest import open_document_store

    t = time.perf_counter()
    store = open_document_store(db.uri, info.table, info.dims, hnsw=True)
    store.count_documents()
    store.close()
    hnsw_seconds = time.perf_counter() - t

    with tempfile.TemporaryDirectory() as tmp:
        embeddings, embed_seconds, _ = QueryEmbeddingCache(tmp).get_or_compute(embedder, questions)
    config = parse_sweep({"variants": list(ENGINES)})
    sweep = Sweep(snapshot=snapshot, connection_string=db.uri, table=info.table,
                  query_embeddings=embeddings, embed_ms_per_query=embed_seconds * 1000 / len(questions))
    t = time.perf_counter()
    results = sweep.run(config.variants, questions)
    sweep_seconds = time.perf_counter() - t
    per_engine = {k: float(f["latency_ms"].mean()) for k, f in results.items()}
    dense_returned = float(results["pg-dense"]["doc_ids"].map(len).mean())

    t = time.perf_counter()
    ensure_tsvector_column(db.uri, info.table)
    ensure_seconds = time.perf_counter() - t
    engine = IndexedKeywordEngine(db.uri, info.table, chunk_top_k=config.variants[0].chunk_top_k)
    lat = []
    for q in questions:
        t = time.perf_counter()
        engine.chunk_hits(q.question)
        lat.append((time.perf_counter() - t) * 1000)
    engine.close()
    return {
        "docs": n, "chunks": info.chunk_count, "embedder": embedder.model_id, "model_load_s": model_seconds,
        "ingest_s": info.seconds, "chunks_per_s": info.chunks_per_second, "hnsw_build_s": hnsw_seconds, "queries": len(questions),
        "query_embed_s": embed_seconds, "sweep_s": sweep_seconds, "ms_per_engine": per_engine,
        "indexed_keyword_ms": sum(lat) / len(lat), "ensure_tsv_s": ensure_seconds, "dense_avg_returned": dense_returned,
        "peak_rss_mb": peak_rss_mb(), "rss_before_ingest_mb": rss_before_ingest, "rss_after_ingest_mb": rss_after_ingest,
        "total_s": time.perf_counter() - started_all,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--path", default=str(SCIFACT_DEFAULT))
    parser.add_argument("--sizes", default="1000,5000,20000", help="comma-separated document counts")
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--fake-embedder", action="store_true", help="hashed bag-of-words embedder instead of the model")
    parser.add_argument("--json", default=None, help="also write the figures to this JSON file")
    parser.add_argument("--child", type=int, default=None, help=argparse.SUPPRESS)
    add_common_args(parser, "scale_curve")
    args = parser.parse_args()

    if args.child is not None:
        print("RESULT " + json.dumps(child(args)), flush=True)
        return

    print_machine("scale curve" + (" (FAKE hash embedder: no model time)" if args.fake_embedder else " (all-MiniLM-L6-v2)"))
    db = BenchDB(args.state_dir, keep=args.keep_db)  # started here once, stopped at exit
    out = []
    for size in [int(s) for s in args.sizes.split(",") if s.strip()]:
        cmd = [sys.executable, str(Path(__file__).resolve()), "--child", str(size), "--path", args.path,
               "--queries", str(args.queries), "--state-dir", args.state_dir]
        if args.fake_embedder:
            cmd.append("--fake-embedder")
        t = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True, cwd=Path(__file__).resolve().parent)
        if proc.returncode != 0:
            raise SystemExit(f"size {size} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}")
        result = json.loads(next(line for line in proc.stdout.splitlines() if line.startswith("RESULT "))[7:])
        result["wall_s"] = time.perf_counter() - t
        out.append(result)
        print(f"{size} docs: {result['chunks']} chunks, ingest {result['ingest_s']:.1f} s, "
              f"HNSW build {result['hnsw_build_s']:.1f} s, sweep {result['sweep_s']:.1f} s, "
              f"peak RSS {result['peak_rss_mb']:.0f} MiB, child wall {result['wall_s']:.1f} s", flush=True)
    print()
    print_table([[r["docs"], r["chunks"], r["ingest_s"], r["chunks_per_s"], r["hnsw_build_s"], r["sweep_s"], r["queries"] / r["sweep_s"],
                  *[r["ms_per_engine"][e] for e in ENGINES], r["indexed_keyword_ms"], r["dense_avg_returned"],
                  r["peak_rss_mb"]] for r in out],
                ["docs", "chunks", "ingest s", "chunks/s", "hnsw build s", "sweep s", "questions/s", *[f"{e} ms" for e in ENGINES],
                 "indexed kw ms", "dense avg rows", "peak RSS MiB"], digits=1)
    print(f"\nembedder: {out[0]['embedder'] if out else '-'}; engine ms = mean latency per question as if the engine "
          "ran alone (shared legs counted in each); sweep s = the whole sweep of 4 variants (incl. miss diagnosis, "
          "bm25 index build, chunk fetch); peak RSS = the child process (Postgres server not included).")
    print(load_note())
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
