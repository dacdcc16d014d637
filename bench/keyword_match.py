"""The keyword leg's match and ranking settings, measured: nDCG@10 of IndexedKeywordEngine for
match all / any / websearch x ranking ts_rank_cd / ts_rank x normalization 0 / 1 / 2, and how many
queries match nothing, on the demo corpus (its committed question set) and on BEIR SciFact
(train split, each document one chunk, as bench/scifact.py).

    .venv/bin/python bench/keyword_match.py                 # both corpora, all 809 SciFact train claims
    .venv/bin/python bench/keyword_match.py --skip-scifact  # demo only (seconds)

The keyword leg reads only the stored tsvector, never the embeddings, so the tables are built
with a trivial fast embedder (8-dim vectors hashed from the text, not a model: the dense
columns of these tables mean nothing and no dense figure is printed); with the real model
the SciFact ingest alone takes ~5 min here.  The keyword results are identical to those on a
table built with the real model: same chunks, same content, same tsvector.

Prints, per corpus, the grid, paired comparisons of each match's default against Haystack's
default (`all`, ts_rank_cd, 0) and which setting to choose when.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import time
from pathlib import Path

from common import SCIFACT_DEFAULT, BenchDB, add_common_args, percentile, print_machine, print_table, timed

MATCHES = ("all", "any", "websearch")
RANKINGS = (("ts_rank_cd", 0), ("ts_rank_cd", 1), ("ts_rank_cd", 2), ("ts_rank", 0), ("ts_rank", 1), ("ts_rank", 2))
KS = (1, 3, 5, 10, 20, 100)
DEPTH = 100
CHUNK_TOP_K = 100


class HashedTextEmbedder:
    """Not a model: an 8-dim vector hashed from each text (never zero), for tables whose only
    reader here is the keyword leg.  Its identity differs from every real model's, so its tables
    never mix with theirs."""

    dims = 8
    model_id = "bench-keyword-match-hashed-8"
    revision = "blake2b-8x1"
    identity = "bench-keyword-match-hashed-8@blake2b-8x1"

    def warm_up(self) -> None:
        pass

    def embed(self, texts):
        out = []
        for text in texts:
            digest = hashlib.blake2b(text.encode(), digest_size=self.dims).digest()
            out.append([1.0 + b / 255.0 for b in digest])
        return out


def run_grid(uri: str, table: str, questions) -> dict[tuple[str, str, int], dict]:
    from eval_pipeline.metrics.retrieval import aggregate, score_queries
    from eval_pipeline.ranking.keyword_index import IndexedKeywordEngine

    qrels = {q.qid: q.qrels() for q in questions}
    answerable = {q.qid for q in questions if q.answerable}
    out = {}
    for match in MATCHES:
        for ranking, normalization in RANKINGS:
            engine = IndexedKeywordEngine(uri, table, chunk_top_k=CHUNK_TOP_K, depth=DEPTH, match=match,
                                          ranking=ranking, normalization=normalization)
            rankings, latencies = {}, []
            for q in questions:
                started = time.perf_counter()
                rankings[q.qid] = [d.doc_id for d in engine.search(q.question)]
                latencies.append((time.perf_counter() - started) * 1000.0)
            engine.close()
            per_query = score_queries(rankings, qrels, ks=KS)
            agg = aggregate(per_query)
            out[(match, ranking, normalization)] = {
                "ndcg@10": agg["ndcg@10"], "recall@100": agg["recall@100"], "mrr": agg["mrr"],
                "hit@10": agg["hit@10"],
                "no_match": sum(1 for qid in answerable if not rankings[qid]),
                "n_answerable": len(answerable),
                "abstention_empty": agg.get("abstention_correct"), "n_abstention": agg.get("n_abstention"),
                "avg_returned": sum(len(rankings[qid]) for qid in answerable) / max(1, len(answerable)),
                "p50_ms": percentile(latencies, 50), "p95_ms": percentile(latencies, 95),
                "per_query_ndcg": per_query.set_index("qid").loc[sorted(answerable), "ndcg@10"].tolist(),
            }
    return out


def default_of(match: str) -> tuple[str, str, int]:
    from eval_pipeline.store.tsvector import keyword_settings

    s = keyword_settings(match)
    return (s["match"], s["ranking"], s["normalization"])


def report(name: str, grid: dict, *, abstention: bool) -> dict:
    from eval_pipeline.metrics.statistics import bootstrap_ci, paired_randomization_test, win_tie_loss

    first = next(iter(grid.values()))
    print(f"\n== {name}: {first['n_answerable']} answerable questions"
          + (f", {first['n_abstention']} abstention questions" if abstention and first["n_abstention"] else "")
          + f"; depth {DEPTH}, chunk_top_k {CHUNK_TOP_K}; * = the match's default")
    rows = []
    for (match, ranking, norm), r in grid.items():
        mark = " *" if (match, ranking, norm) == default_of(match) else ""
        row = [f"{match}{mark}", ranking, norm, r["ndcg@10"], r["recall@100"], r["mrr"], r["hit@10"],
               f"{r['no_match']} / {r['n_answerable']}", r["avg_returned"], r["p50_ms"], r["p95_ms"]]
        if abstention:
            row.insert(8, f"{r['abstention_empty']} / {r['n_abstention']}")
        rows.append(row)
    headers = ["match", "ranking", "norm", "nDCG@10", "R@100", "MRR", "hit@10", "no match", "avg docs", "p50 ms",
               "p95 ms"]
    if abstention:
        headers.insert(8, "abstention empty")
    print_table(rows, headers)

    base_key = default_of("all")
    base = grid[base_key]["per_query_ndcg"]
    comparisons = {}
    best_key = max(grid, key=lambda k: grid[k]["ndcg@10"])
    candidates = [default_of("any"), default_of("websearch"), ("any", "ts_rank_cd", 0)]
    if best_key not in candidates:
        candidates.append(best_key)
    print(f"   paired per-question nDCG@10 against {'/'.join(map(str, base_key))} "
          "(95 % percentile bootstrap of the mean difference, paired randomization p, seed 0):")
    crows = []
    for key in candidates:
        other = grid[key]["per_query_ndcg"]
        diff = [a - b for a, b in zip(other, base)]
        low, high = bootstrap_ci(diff)
        p = paired_randomization_test(other, base)
        w, t, lo = win_tie_loss(other, base)
        comparisons["/".join(map(str, key))] = {"delta": sum(diff) / len(diff), "low": low, "high": high, "p": p,
                                                "wins": w, "ties": t, "losses": lo}
        crows.append(["/".join(map(str, key)), sum(diff) / len(diff), f"{low:+.3f} … {high:+.3f}", p,
                      f"{w} / {t} / {lo}"])
    print_table(crows, ["variant", "Δ nDCG@10", "95 % interval", "p", "wins / ties / losses"], digits=4)
    print(f"   best here: {'/'.join(map(str, best_key))} nDCG@10 {grid[best_key]['ndcg@10']:.3f}")
    return {"best": "/".join(map(str, best_key)), "comparisons": comparisons,
            "grid": {"/".join(map(str, k)): {m: v for m, v in r.items() if m != "per_query_ndcg"}
                     for k, r in grid.items()}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--path", default=str(SCIFACT_DEFAULT), help="BEIR SciFact folder")
    parser.add_argument("--split", default="train", help="qrels/<split>.tsv (only train is shipped)")
    parser.add_argument("--skip-scifact", action="store_true", help="demo corpus only")
    parser.add_argument("--json", default=None, help="also write the figures to this JSON file")
    add_common_args(parser, "keyword_match")
    args = parser.parse_args()

    machine = print_machine("Keyword match / ranking settings (IndexedKeywordEngine)")
    from eval_pipeline.corpus.sources import DEMO_DATA_DIR, load_corpus
    from eval_pipeline.questions.sets import load_beir_questions, load_question_set
    from eval_pipeline.store.ingest import ChunkingConfig, ingest

    db = BenchDB(args.state_dir, keep=args.keep_db)
    embedder = HashedTextEmbedder()
    print(f"embedded Postgres at {db.pg.pgdata}; tables built with {embedder.model_id}: a trivial fast "
          "embedder, NOT a model (the keyword leg reads only the stored tsvector; no dense figure here)")
    results = {"machine": machine}

    with timed() as t_demo:
        demo = load_corpus("demo")
        demo_questions = load_question_set(DEMO_DATA_DIR / "questions.jsonl", corpus_signature=demo.signature,
                                           doc_ids=[d.doc_id for d in demo.documents])
        info = ingest(demo, connection_string=db.uri, embedder=embedder, chunking=ChunkingConfig(), log=lambda m: None)
        grid = run_grid(db.uri, info.table, list(demo_questions.questions))
    print(f"demo: {len(demo.documents)} documents, {info.chunk_count} chunks (default chunking 150/20), "
          f"{len(demo_questions.questions)} questions; {t_demo():.1f} s")
    results["demo"] = report("demo corpus (eval_pipeline/demo_data)", grid, abstention=True)

    if not args.skip_scifact:
        with timed() as t_load:
            snapshot = load_corpus("beir", args.path)
            qs = load_beir_questions(args.path, split=args.split, doc_ids=[d.doc_id for d in snapshot.documents])
            chunking = ChunkingConfig(split_length=100_000, split_overlap=0, embed_title=True)  # one chunk per document
            info = ingest(snapshot, connection_string=db.uri, embedder=embedder, chunking=chunking, log=lambda m: None)
        print(f"\nscifact: {len(snapshot.documents)} documents, {info.chunk_count} chunks, split {args.split} "
              f"{len(qs.questions)} claims; load + ingest {t_load():.1f} s"
              + (" (table reused)" if info.reused else ""))
        with timed() as t_grid:
            grid = run_grid(db.uri, info.table, list(qs.questions))
        print(f"   grid of {len(grid)} settings in {t_grid():.1f} s")
        results["scifact"] = report(f"SciFact {args.split} (BEIR, whole documents, body only)", grid, abstention=False)

    print("\n== Which to choose")
    for corpus, r in results.items():
        if corpus == "machine":
            continue
        g = r["grid"]
        print(f"   {corpus}: best {r['best']} ({g[r['best']]['ndcg@10']:.3f}); "
              f"all/ts_rank_cd/0 {g['all/ts_rank_cd/0']['ndcg@10']:.3f} with "
              f"{g['all/ts_rank_cd/0']['no_match']} of {g['all/ts_rank_cd/0']['n_answerable']} matching nothing; "
              f"any/ts_rank/1 {g['any/ts_rank/1']['ndcg@10']:.3f}; any/ts_rank_cd/0 {g['any/ts_rank_cd/0']['ndcg@10']:.3f}; "
              f"websearch/ts_rank/1 {g['websearch/ts_rank/1']['ndcg@10']:.3f}")
    print("   - match any + ts_rank, normalization 1: questions or claims in natural language (every "
          "multi-word query); ORed terms need a length-normalized term-frequency rank.")
    print("   - match all (Haystack default, ts_rank_cd/0): parity with PgvectorKeywordRetriever, or short "
          "keyword queries where requiring every term is the point (precision; abstains when nothing matches).")
    print("   - match websearch: queries typed by people who use quotes, -term and or; unquoted words are "
          "ANDed as in all, so on natural-language questions it matches as rarely as all.")
    print("   - ts_rank_cd with ORed terms: avoid; every occurrence of any query term is a cover and the "
          "covers add up, so repeats of one common term outscore several distinct terms (ts_rank saturates "
          "each term's frequency and averages over the terms; neither weighs rare terms up).")

    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2, default=float))
        print(f"figures written to {args.json}")


if __name__ == "__main__":
    main()
