"""BEIR SciFact through the pipeline's library: ingest (each document embedded whole), a sweep
over pg-keyword, pg-dense, hybrid and bm25 at depth 100, scored with eval_pipeline.scoring.variant.

Prints nDCG@10, Recall@100 and MRR per engine beside the published test-split figures, ingest
time and chunks/s, queries/s per engine, where query time goes (embedding / database / Python),
and the run's peak RSS.  Also prints reference checks that explain gaps: exact (brute-force)
cosine over the same stored embeddings, pg-dense with hnsw.ef_search raised to the depth, and
bm25s over title + text; and the indexed keyword retriever (eval_pipeline.ranking.keyword_index) on the
same queries.

    .venv/bin/python bench/scifact.py                       # train split, all 809 queries
    .venv/bin/python bench/scifact.py --limit-queries 100   # quicker

Embedding the 5,183 abstracts takes ~5.5 minutes on 2 cores; the table is kept in the bench
state dir and reused by later runs (then the ingest line says "reused").
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from common import SCIFACT_DEFAULT, BenchDB, add_common_args, peak_rss_mb, percentile, print_machine, print_table, timed

ENGINES = ("pg-keyword", "pg-dense", "hybrid", "bm25")
KS = (1, 3, 5, 10, 20, 100)
DEPTH = 100
# Published test-split figures (../shared/datasets/scifact/README.md): (nDCG@10, Recall@100)
REFERENCE = {
    "pg-keyword": ("no published figure (ts_rank_cd, every term required)", None, None),
    "pg-dense": ("all-MiniLM-L6-v2, exact cosine (MTEB)", 0.645, 0.925),
    "hybrid": ("no published figure", None, None),
    "bm25": ("BM25: BEIR 0.665, bm25s 0.687", 0.687, None),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--path", default=str(SCIFACT_DEFAULT), help="BEIR folder (corpus.jsonl[.gz], queries.jsonl, qrels/)")
    parser.add_argument("--split", default="train", help="qrels/<split>.tsv (only train is shipped)")
    parser.add_argument("--limit-queries", type=int, default=None, help="first N judged queries (natural qid order)")
    parser.add_argument("--batch-size", type=int, default=64, help="embedder batch size")
    parser.add_argument("--json", default=None, help="also write the figures to this JSON file")
    add_common_args(parser, "scifact")
    args = parser.parse_args()

    machine = print_machine("SciFact through eval_pipeline")
    from eval_pipeline.corpus.sources import load_corpus
    from eval_pipeline.scoring.variant import score_variant, summarize
    from eval_pipeline.config.sweep import parse_sweep
    from eval_pipeline.questions.sets import load_beir_questions
    from eval_pipeline.ranking.caches import QueryEmbeddingCache
    from eval_pipeline.ranking.sweep import Sweep
    from eval_pipeline.store.embedders import LocalEmbedder
    from eval_pipeline.store.ingest import ChunkingConfig, ingest

    run_started = time.perf_counter()
    with timed() as t_load:
        snapshot = load_corpus("beir", args.path)
        qs = load_beir_questions(args.path, split=args.split, doc_ids=[d.doc_id for d in snapshot.documents])
    questions = list(qs.questions[: args.limit_queries] if args.limit_queries else qs.questions)
    print(f"corpus {len(snapshot.documents)} documents, split {args.split}: {len(questions)} queries "
          f"(of {len(qs.questions)}), loaded in {t_load():.1f} s")

    db = BenchDB(args.state_dir, keep=args.keep_db)
    print(f"embedded Postgres at {db.pg.pgdata} (ready in {db.start_seconds:.1f} s)")
    embedder = LocalEmbedder(batch_size=args.batch_size)
    with timed() as t_model:
        embedder.warm_up()
    chunking = ChunkingConfig(split_length=100_000, split_overlap=0, embed_title=True)  # one chunk per document
    info = ingest(snapshot, connection_string=db.uri, embedder=embedder, chunking=chunking, log=lambda m: print("  " + m))
    ingest_line = (f"ingest: {info.chunk_count} chunks, {info.seconds:.1f} s, {info.chunks_per_second:.1f} chunks/s"
                   if not info.reused else f"ingest: reused table {info.table} ({info.chunk_count} chunks, built earlier)")
    print(f"model load {t_model():.1f} s; {ingest_line}")

    # Query embeddings: a fresh cache folder, so the batch embedding is measured, not read back.
    with tempfile.TemporaryDirectory() as tmp:
        embeddings, embed_seconds, _ = QueryEmbeddingCache(tmp).get_or_compute(embedder, questions)
    embed_ms = embed_seconds * 1000.0 / max(1, len(questions))
    config = parse_sweep({"variants": [{"engine": e, "depth": DEPTH} for e in ENGINES]})
    sweep = Sweep(snapshot=snapshot, connection_string=db.uri, table=info.table,
                  query_embeddings=embeddings, embed_ms_per_query=embed_ms)
    with timed() as t_sweep:
        results = sweep.run(config.variants, questions)
    scored = {k: score_variant(frame, questions, ks=KS) for k, frame in results.items()}
    summary = summarize(scored).set_index("variant")
    chunk_top_k = config.variants[0].chunk_top_k

    print(f"\n== Retrieval quality, {args.split} split, {len(questions)} queries, depth {DEPTH} "
          f"(chunk_top_k {chunk_top_k}); reference = published TEST split")
    rows = []
    for key in ENGINES:
        s = summary.loc[key]
        label, ref_ndcg, ref_recall = REFERENCE[key]
        returned = results[key]["doc_ids"].map(len)
        rows.append([key, s["ndcg@10"], s["recall@100"], s["mrr"], s["hit@10"], float(returned.mean()),
                     int((returned == 0).sum()), ref_ndcg, ref_recall, label])
    print_table(rows, ["engine", "nDCG@10", "R@100", "MRR", "hit@10", "avg returned", "empty", "ref nDCG@10",
                       "ref R@100", "reference"])

    # --- reference checks that isolate the gaps ------------------------------------------
    checks = reference_checks(db.uri, info, snapshot, questions, embeddings, chunk_top_k)
    print("\n== Reference checks (same split and queries; explain the gap to the published figures)")
    print_table([[name, c["ndcg@10"], c["recall@100"], c["mrr"], c["avg_returned"], c.get("p50_ms"), c.get("p95_ms"),
                  c["what"]] for name, c in checks.items()],
                ["check", "nDCG@10", "R@100", "MRR", "avg returned", "p50 ms", "p95 ms", "what"])

    # --- timing ----------------------------------------------------------------------------
    leg_ms: dict[str, float] = {}
    for (leg, *_), value in sweep._leg_cache.items():  # (leg, top_k, settings, qid)
        leg_ms[leg] = leg_ms.get(leg, 0.0) + value.ms
    stage_sum_s = sum(leg_ms.values()) / 1000.0
    print(f"\n== Query phase: sweep wall {t_sweep():.1f} s for {len(questions)} queries x {len(ENGINES)} variants; "
          f"query embedding {embed_seconds:.1f} s in one batch ({embed_ms:.1f} ms/query)")
    print("   each leg queried once per question and shared: "
          + ", ".join(f"{leg} {ms / 1000:.1f} s ({ms / len(questions):.1f} ms/q)" for leg, ms in leg_ms.items())
          + f"; the rest of the sweep wall (fusion, chunk->doc, miss diagnosis, DataFrames) "
          f"{t_sweep() - stage_sum_s:.1f} s")
    rows = []
    for key in ENGINES:
        f = results[key]
        mean = f[["ms_embed", "ms_keyword", "ms_dense", "ms_bm25", "ms_fusion"]].fillna(0.0).mean()
        total = float(f["latency_ms"].mean())
        db_ms = float(mean["ms_keyword"] + mean["ms_dense"])
        py_ms = float(mean["ms_bm25"] + mean["ms_fusion"])
        rows.append([key, 1000.0 / total if total else float("nan"), total, percentile(f["latency_ms"], 50),
                     percentile(f["latency_ms"], 95), 100 * mean["ms_embed"] / total, 100 * db_ms / total,
                     100 * py_ms / total])
    print("   per engine, as if run alone (stage ms attributed to every variant that needs the stage):")
    print_table(rows, ["engine", "queries/s", "mean ms", "p50 ms", "p95 ms", "% embed", "% database", "% python"], digits=1)
    print("   database = pg keyword/dense legs, measured in the client: SQL round trip + Haystack Document "
          "conversion; python = bm25s + fusion.")
    total_s = time.perf_counter() - run_started
    print(f"\npeak RSS of this process {peak_rss_mb():.0f} MiB (Postgres server not included); whole run {total_s:.0f} s")

    if args.json:
        out = {
            "machine": machine, "split": args.split, "queries": len(questions), "depth": DEPTH,
            "chunk_top_k": chunk_top_k, "ingest": {"chunks": info.chunk_count, "seconds": info.seconds,
                                                   "chunks_per_second": info.chunks_per_second, "reused": info.reused},
            "metrics": {k: {m: float(summary.loc[k, m]) for m in ("ndcg@10", "recall@100", "mrr", "hit@10")}
                        for k in ENGINES},
            "checks": {k: {m: v for m, v in c.items()} for k, c in checks.items()},
            "latency": {r[0]: {"qps": r[1], "mean_ms": r[2], "p50_ms": r[3], "p95_ms": r[4], "pct_embed": r[5],
                               "pct_db": r[6], "pct_python": r[7]} for r in rows},
            "embed_seconds": embed_seconds, "sweep_seconds": t_sweep(), "leg_seconds": {k: v / 1000 for k, v in leg_ms.items()},
            "peak_rss_mb": peak_rss_mb(), "total_seconds": total_s,
        }
        Path(args.json).write_text(json.dumps(out, indent=2, default=float))
        print(f"figures written to {args.json}")


def _score(rankings: dict[str, list[str]], questions, what: str, latencies_ms=None) -> dict:
    from eval_pipeline.metrics.retrieval import aggregate, score_queries

    qrels = {q.qid: q.qrels() for q in questions}
    agg = aggregate(score_queries(rankings, qrels, ks=KS))
    out = {"ndcg@10": agg["ndcg@10"], "recall@100": agg["recall@100"], "mrr": agg["mrr"],
           "avg_returned": sum(len(r) for r in rankings.values()) / max(1, len(rankings)), "what": what}
    if latencies_ms:
        out["p50_ms"], out["p95_ms"] = percentile(latencies_ms, 50), percentile(latencies_ms, 95)
    return out


def reference_checks(uri, info, snapshot, questions, embeddings, chunk_top_k) -> dict[str, dict]:
    import bm25s
    import numpy as np

    from eval_pipeline.ranking.engines import PgDenseEngine
    from eval_pipeline.ranking.keyword_index import IndexedKeywordEngine, ensure_tsvector_column
    from eval_pipeline.store.ingest import fetch_chunk_embeddings, fetch_chunks, open_document_store

    checks: dict[str, dict] = {}
    # 1. Exact cosine over the very embeddings pgvector stores (what MTEB's 0.645 / 0.925 measure).
    stored = fetch_chunk_embeddings(uri, info.table)
    doc_of = {cid: doc for cid, doc, _ in fetch_chunks(uri, info.table)}
    ids = list(stored)
    matrix = np.stack([stored[i] for i in ids])
    rankings = {}
    for q in questions:
        sims = matrix @ np.asarray(embeddings[q.qid], dtype=np.float32)
        top = np.argsort(-sims, kind="stable")[:DEPTH]
        rankings[q.qid] = [doc_of[ids[i]] for i in top]
    checks["dense exact (numpy)"] = _score(rankings, questions, "brute-force cosine, same stored vectors")

    # 2. pg-dense with hnsw.ef_search raised to chunk_top_k (pgvector returns at most ef_search rows, default 40).
    store = open_document_store(uri, info.table, info.dims, hnsw=True, ef_search=chunk_top_k)
    engine = PgDenseEngine(store, depth=DEPTH, chunk_top_k=chunk_top_k)
    rankings, lat = {}, []
    for q in questions:
        started = time.perf_counter()
        rankings[q.qid] = [d.doc_id for d in engine.search(q.question, embeddings[q.qid])]
        lat.append((time.perf_counter() - started) * 1000)
    store.close()
    checks[f"pg-dense ef_search={chunk_top_k}"] = _score(rankings, questions, "HNSW with hnsw.ef_search = chunk_top_k", lat)

    # 3. bm25s over title + text (the BEIR / bm25s setup reads the title; the pipeline's legs read the body only).
    texts = [f"{d.title} {d.content}" for d in snapshot.documents]
    retriever = bm25s.BM25()
    retriever.index(bm25s.tokenize(texts, stopwords="en", show_progress=False), show_progress=False)
    doc_ids = [d.doc_id for d in snapshot.documents]
    rankings = {}
    for q in questions:
        tokens = bm25s.tokenize([q.question], stopwords="en", show_progress=False)
        if not tokens.vocab:
            rankings[q.qid] = []
            continue
        res, scores = retriever.retrieve(tokens, k=DEPTH, show_progress=False, n_threads=1)
        rankings[q.qid] = [doc_ids[int(i)] for i, s in zip(res[0], scores[0]) if s > 0]
    checks["bm25s title+text"] = _score(rankings, questions, "bm25s, en stopwords, no stemmer, title + text")

    # 4. The indexed keyword engine on its own (the sweep's pg-keyword leg; ingest adds the column).
    ensure_tsvector_column(uri, info.table)
    engine = IndexedKeywordEngine(uri, info.table, chunk_top_k=chunk_top_k, depth=DEPTH)
    rankings, lat = {}, []
    for q in questions:
        started = time.perf_counter()
        rankings[q.qid] = [d.doc_id for d in engine.search(q.question)]
        lat.append((time.perf_counter() - started) * 1000)
    engine.close()
    checks["pg-keyword indexed"] = _score(rankings, questions, "IndexedKeywordEngine (stored tsvector + GIN)", lat)

    return checks


if __name__ == "__main__":
    main()
