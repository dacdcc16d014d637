"""Ingest and the two database legs at growing corpus sizes: chunks/s, peak RSS, HNSW build
time, and dense and keyword latency (p50 / p95 a query).

The question it answers: does ingest stream (the issue's goal: peak RSS at 200k chunks within
15 % of 20k), and how do index build and query latency grow. Each size runs in its own child
process, so its peak RSS is its own; the table is dropped first, so the ingest is really
measured. As in the pipeline, a first child builds the corpus snapshot and spools it to disk
(`CorpusSnapshot.spool_to`, what the `corpus_snapshot` asset hands on), and the measured child
unpickles that reference and ingests it, streaming the file: its peak RSS is what the ingest
step needs. The first child's RSS growth (the corpus in memory) is printed beside it.

Documents are SciFact abstracts, repeated with new ids (`<id>~r<k>`) past the 5,183 of the
corpus until the chunk count is reached. Chunking is the pipeline default (150 words, 20
overlap). The embedder is a deterministic hashed bag-of-words (384 dims, bench/common.py
HashEmbedder) unless --model: the figures then measure everything but the model (the model
embeds ~15 chunks/s on 2 cores, see bench/ingest_throughput.py: 200k chunks would take 4 h).
Queries are SciFact train claims (--queries), embedded by the same embedder; dense = the
pipeline's dense leg (LeanDenseEngine, HNSW, ef_search = chunk_top_k), keyword = the indexed
tsvector leg with `match: any` (IndexedKeywordEngine), both at chunk_top_k 100.

    .venv/bin/python bench/scale_curve.py                          # 20k, 100k, 200k chunks
    .venv/bin/python bench/scale_curve.py --chunks 2000 --model    # the real model, small
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

from common import (
    SCIFACT_DEFAULT,
    BenchDB,
    HashEmbedder,
    add_common_args,
    current_rss_mb,
    load_note,
    peak_rss_mb,
    percentile,
    print_machine,
    print_table,
    replicate_documents,
    snapshot_of,
)


def _documents_needed(base, chunks: int, chunking) -> int:
    """How many repeated documents give `chunks` chunks (the per-document ratio of the base corpus)."""
    from eval_pipeline.store.ingest import chunk_documents

    sample = base[:2000]
    per_doc = len(chunk_documents(snapshot_of(sample, "sample"), chunking)) / len(sample)
    return max(1, round(chunks / per_doc))


def _latencies(engine, queries, embeddings) -> list[float]:
    out = []
    for text, vector in zip(queries, embeddings):
        t = time.perf_counter()
        engine.chunk_hits(text, vector) if vector is not None else engine.chunk_hits(text)
        out.append((time.perf_counter() - t) * 1000)
    return out


def spool_child(args) -> dict:
    """Build the corpus of `args.spool` chunks, spool it and pickle the reference to a file."""
    import pickle

    from eval_pipeline.corpus.sources import load_corpus
    from eval_pipeline.store.ingest import ChunkingConfig

    base = load_corpus("beir", args.path).documents
    n = _documents_needed(base, args.spool, ChunkingConfig())
    snapshot = snapshot_of(replicate_documents(base, n), f"bench:scifact:{args.spool}-chunks")
    held = sum(sys.getsizeof(d) + sum(sys.getsizeof(getattr(d, f)) for f in ("doc_id", "title", "description",
               "filename", "content", "metadata")) for d in snapshot.documents)  # what holding the corpus costs
    spooled = snapshot.spool_to(Path(args.state_dir) / "spools")
    reference = Path(args.state_dir) / "spools" / f"{args.spool}.pickle"
    reference.write_bytes(pickle.dumps(spooled))
    return {"reference": str(reference), "corpus_mb": held / 2**20, "docs": snapshot.count, "spool_mb": spooled.spool.stat().st_size / 2**20}


def child(args) -> dict:
    import pickle

    from ingest_throughput import drop_table

    from eval_pipeline.ranking.dense import LeanDenseEngine
    from eval_pipeline.ranking.keyword_index import IndexedKeywordEngine
    from eval_pipeline.store.embedders import LocalEmbedder
    from eval_pipeline.store.ingest import ChunkingConfig, ingest, store_fingerprint

    rss_start = current_rss_mb()
    chunking = ChunkingConfig()
    snapshot = pickle.loads(Path(args.reference).read_bytes())  # a spooled snapshot: a reference
    embedder = LocalEmbedder() if args.model else HashEmbedder()
    embedder.warm_up()
    embedder.embed(["warm"])  # the embedder's own buffers, before the baseline
    rss_before = current_rss_mb()

    db = BenchDB(args.state_dir, keep=True)  # the parent stops it
    table = f"chunks_{store_fingerprint(snapshot.signature, chunking, embedder.identity)}"
    drop_table(db.uri, table)
    lines: list[str] = []
    info = ingest(snapshot, connection_string=db.uri, embedder=embedder, chunking=chunking, log=lines.append,
                  batch_chunks=args.batch_chunks)
    peak_ingest = peak_rss_mb()
    indexed = next((m for m in lines if "chunks indexed (HNSW" in m), "")
    hnsw_s = float(indexed.split("(HNSW ")[1].split(" s")[0]) if indexed else float("nan")
    tsv_s = float(indexed.split("tsvector ")[1].split(" s")[0]) if indexed else float("nan")

    raw = [json.loads(line) for line in Path(args.path, "queries.jsonl").read_text().splitlines() if line.strip()]
    queries = [o["text"] for o in raw][: args.queries]
    vectors = embedder.embed(queries)
    dense = LeanDenseEngine(db.uri, info.table, chunk_top_k=100)
    _latencies(dense, queries[:10], vectors[:10])  # connection and plan warm-up
    dense_ms = _latencies(dense, queries, vectors)
    dense.close()
    keyword = IndexedKeywordEngine(db.uri, info.table, chunk_top_k=100, match="any")
    _latencies(keyword, queries[:10], [None] * 10)
    keyword_ms = _latencies(keyword, queries, [None] * len(queries))
    keyword.close()
    ingest_s = info.seconds
    assert not snapshot.loaded, "ingest loaded the whole corpus"
    return {
        "chunks": info.chunk_count, "docs": snapshot.count, "embedder": embedder.model_id,
        "ingest_s": ingest_s, "chunks_per_s": info.chunk_count / ingest_s, "hnsw_s": hnsw_s, "tsvector_s": tsv_s,
        "rss_start_mb": rss_start, "rss_before_mb": rss_before, "peak_ingest_mb": peak_ingest,
        "ingest_adds_mb": peak_ingest - rss_before, "dense_p50": percentile(dense_ms, 50),
        "dense_p95": percentile(dense_ms, 95), "keyword_p50": percentile(keyword_ms, 50),
        "keyword_p95": percentile(keyword_ms, 95), "queries": len(queries),
    }


def _run(cmd: list[str], what: str) -> dict:
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=Path(__file__).resolve().parent)
    if proc.returncode != 0:
        raise SystemExit(f"{what} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}")
    return json.loads(next(line for line in proc.stdout.splitlines() if line.startswith("RESULT "))[7:])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--path", default=str(SCIFACT_DEFAULT))
    parser.add_argument("--chunks", default="20000,100000,200000", help="comma-separated chunk counts")
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--batch-chunks", type=int, default=512, help="ingest's batch (the pipeline default: 512)")
    parser.add_argument("--model", action="store_true", help="all-MiniLM-L6-v2 instead of the hashed embedder")
    parser.add_argument("--json", default=None, help="also write the figures to this JSON file")
    parser.add_argument("--child", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--spool", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--reference", default=None, help=argparse.SUPPRESS)
    add_common_args(parser, "scale_curve")
    args = parser.parse_args()

    if args.spool is not None:
        print("RESULT " + json.dumps(spool_child(args)), flush=True)
        return
    if args.child is not None:
        print("RESULT " + json.dumps(child(args)), flush=True)
        return

    print_machine("scale curve" + (" (all-MiniLM-L6-v2)" if args.model else " (hashed embedder: no model time)"))
    db = BenchDB(args.state_dir, keep=args.keep_db)  # started here once, stopped at exit
    out = []
    for size in [int(s) for s in args.chunks.split(",") if s.strip()]:
        base = [sys.executable, str(Path(__file__).resolve()), "--path", args.path, "--state-dir", args.state_dir]
        spooled = _run(base + ["--spool", str(size)], f"{size} chunks (spool)")
        cmd = base + ["--child", str(size), "--reference", spooled["reference"], "--queries", str(args.queries),
                      "--batch-chunks", str(args.batch_chunks)] + (["--model"] if args.model else [])
        t = time.perf_counter()
        result = {**_run(cmd, f"{size} chunks"), "corpus_mb": spooled["corpus_mb"], "spool_mb": spooled["spool_mb"]}
        result["wall_s"] = time.perf_counter() - t
        out.append(result)
        print(f"{result['chunks']} chunks ({result['docs']} docs): ingest {result['ingest_s']:.1f} s, HNSW "
              f"{result['hnsw_s']:.1f} s, peak RSS {result['peak_ingest_mb']:.0f} MiB, child wall "
              f"{result['wall_s']:.1f} s", flush=True)
    print()
    print_table([[r["chunks"], r["docs"], r["ingest_s"], r["chunks_per_s"], r["hnsw_s"], r["tsvector_s"],
                  r["corpus_mb"], r["spool_mb"], r["ingest_adds_mb"], r["peak_ingest_mb"],
                  r["dense_p50"], r["dense_p95"], r["keyword_p50"], r["keyword_p95"]] for r in out],
                ["chunks", "docs", "ingest s", "chunks/s", "HNSW s", "tsvector s", "corpus held MiB",
                 "spool MiB", "ingest adds MiB", "ingest peak RSS MiB", "dense p50 ms", "dense p95 ms", "kw p50 ms",
                 "kw p95 ms"], digits=1)
    if len(out) > 1:
        first, last = out[0], out[-1]
        print(f"\npeak RSS {last['chunks']} / {first['chunks']} chunks: {last['peak_ingest_mb'] / first['peak_ingest_mb']:.3f}; "
              f"what ingest adds over its start: {last['ingest_adds_mb']:.0f} vs {first['ingest_adds_mb']:.0f} MiB")
    print(f"embedder: {out[0]['embedder'] if out else '-'}; ingest s includes the HNSW and tsvector builds; corpus held "
          "= what the documents take as Python objects (sys.getsizeof; the corpus_snapshot step holds them, ingest "
          "does not); ingest peak RSS = "
          "the ingest child, which streams the spool (the Postgres server is another process); latency over "
          f"{out[0]['queries'] if out else 0} SciFact claims, chunk_top_k 100, keyword leg with match: any.")
    print(load_note())
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
