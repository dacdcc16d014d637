"""Each engine on SciFact against its anchor, with the tokenizer settings: one table, one run.

What it measures: every engine setting as the pipeline runs it (parsed as variants at depth 100,
ranked by eval_pipeline.ranking.sweep.Sweep over one table) beside an independent implementation
of the same thing with the same settings, its anchor:

- bm25 (BM25Engine) -> bm25s run directly with the same stemmer, stopwords and fields, its own
  tokenizer, as bench/bm25_anchor.py runs it (`bm25s_rankings`);
- pg-keyword, match all -> Haystack's PgvectorKeywordRetriever over the same table (the parity
  the lean IndexedKeywordEngine is built to; identical rankings expected).  Match any and
  websearch have no external anchor (Haystack has only plainto_tsquery);
- pg-dense (LeanDenseEngine, HNSW mode, ef_search = chunk_top_k) -> exact cosine in numpy over
  the vectors pgvector stores (bench/dense_leg.py's `NumpyExact`); the published
  all-MiniLM-L6-v2 figure (test split) is in the note;
- hybrid and hybrid-bm25: no anchor, for context.

Why: a figure in a report should measure the settings, not the implementation.  An engine more
than 0.005 nDCG@10 below its anchor is flagged in the note column.  Every number, the anchors'
included, is scored by eval_pipeline.metrics.retrieval (score_queries / aggregate), so no
difference is a scoring difference.

Corpus: BEIR SciFact, 5,183 abstracts, whole documents: chunking split_by word, split_length
100,000, overlap 0 (as bench/scifact.py and bench/dense_leg.py), which splits no abstract; the
script checks one chunk per document.  Questions: the 809 train claims (qrels/train.tsv).
Embedder: the real all-MiniLM-L6-v2 (LocalEmbedder), which embeds "title\\nbody"; the lexical
legs read the body (pg-keyword: the stored tsvector of the chunk text) or title + body (bm25
fields title+body).  The first run ingests (~5 min on 2 cores); the table and the query
embeddings are kept in the state dir and reused.

    .venv/bin/python bench/engine_anchors.py               # all 809 train claims
    .venv/bin/python bench/engine_anchors.py --limit 50    # a quick check
"""

from __future__ import annotations

import argparse
from pathlib import Path

from bm25_anchor import bm25s_on_engine_tokens, bm25s_rankings
from bm25_anchor import score as anchor_score
from common import (
    SCIFACT_DEFAULT,
    BenchDB,
    add_common_args,
    load_note,
    print_machine,
    print_table,
    timed,
)
from dense_leg import NumpyExact, plan_of

DEPTH = 100
TOLERANCE = 0.005  # an engine this far below its anchor (nDCG@10) is flagged
CHUNKING = {"split_by": "word", "split_length": 100_000, "split_overlap": 0, "embed_title": True}
PUBLISHED_DENSE = 0.645  # all-MiniLM-L6-v2 on SciFact, nDCG@10, test split (MTEB; the dataset README)
PUBLISHED_BM25S = 0.687  # bm25s on SciFact, title+body, stemmed, English stopwords, test split
ANY_REFERENCE = "~0.57"  # the engines issue's figure for match any "measured here"

# (variant as a variants file gives it, its anchor, a note); every variant at depth DEPTH.
ROWS = (
    ({"engine": "bm25", "name": "bm25", "fields": "title+body"}, "bm25s",
     f"variants.yaml's bm25; bm25s published {PUBLISHED_BM25S} (test split)"),
    ({"engine": "bm25", "name": "bm25-body-nostem", "fields": "body", "stemmer": "none"}, "bm25s",
     "context: body only, unstemmed"),
    ({"engine": "pg-keyword", "name": "pg-keyword-all", "match": "all"}, "haystack",
     "Haystack parity: identical expected"),
    ({"engine": "pg-keyword", "name": "pg-keyword-any", "match": "any"}, None,
     f"no external anchor; issue's reference {ANY_REFERENCE} measured here"),
    ({"engine": "pg-keyword", "name": "pg-keyword-websearch", "match": "websearch"}, None,
     "no external anchor; unquoted words ANDed as in all"),
    ({"engine": "pg-dense", "name": "pg-dense"}, "numpy",
     f"published all-MiniLM-L6-v2 {PUBLISHED_DENSE} is the test split (this: train)"),
    ({"engine": "hybrid", "name": "hybrid"}, None, "no anchor (context): the pipeline default"),
    ({"engine": "hybrid", "name": "hybrid-bm25", "legs": ["bm25", "dense"], "fields": "title+body"}, None,
     "no anchor (context)"),
)
ANCHOR_LABELS = {"bm25s": "bm25s, same settings", "haystack": "Haystack PgvectorKeywordRetriever",
                 "numpy": "numpy exact cosine"}


def leg_description(leg: str, settings: dict, chunk_top_k: int) -> str:
    """A leg's resolved settings as the table prints them: what decides its tokens and ranking."""
    from eval_pipeline.ranking.dense import ef_search_for

    if leg == "bm25":
        return (f"bm25: stemmer {settings['stemmer']}, stopwords {settings['stopwords']}, {settings['fields']}, "
                f"k1 {settings['k1']:g}, b {settings['b']:g}")
    if leg == "keyword":
        return f"keyword: {settings['match']}, {settings['ranking']}/{settings['normalization']}, pg english, body"
    return f"dense: {'exact' if settings['exact'] else f'HNSW, ef_search {ef_search_for(chunk_top_k)}'}"


def describe(variant) -> str:
    from eval_pipeline.ranking.variants import resolved_leg_settings

    legs = [leg_description(leg, resolved_leg_settings(leg, variant.leg_settings(leg)), variant.chunk_top_k)
            for leg in variant.used_legs]
    if variant.engine == "hybrid":
        fusion = f"rrf k {variant.rrf_k}" if variant.fusion == "rrf" else variant.fusion
        return f"{fusion} of " + " + ".join(f"[{leg}]" for leg in legs)
    return legs[0].split(": ", 1)[1]


def as_documents(hits, depth: int) -> list[str]:
    """Chunk hits -> the document ranking, as the sweep turns them (`chunks_to_documents`)."""
    from eval_pipeline.ranking.engines import chunks_to_documents

    return [d.doc_id for d in chunks_to_documents(hits, depth)]


def haystack_keyword_rankings(uri: str, info, questions, chunk_top_k: int) -> dict[str, list[str]]:
    """Haystack's PgvectorKeywordRetriever (plainto_tsquery, ts_rank_cd) over the same table."""
    from haystack_integrations.components.retrievers.pgvector import (
        PgvectorKeywordRetriever,
    )

    from eval_pipeline.ranking.engines import ChunkHit
    from eval_pipeline.store.ingest import open_document_store

    store = open_document_store(uri, info.table, info.dims)
    retriever = PgvectorKeywordRetriever(document_store=store, top_k=chunk_top_k)
    rankings = {}
    for q in questions:
        documents = retriever.run(query=q.question)["documents"]
        rankings[q.qid] = as_documents([ChunkHit(d.id, d.meta["doc_id"], float(d.score)) for d in documents], DEPTH)
    store.close()
    return rankings


def numpy_exact_rankings(sweep, questions, embeddings, chunk_top_k: int) -> dict[str, list[str]]:
    """Exact cosine over the stored vectors (the sweep's own copy of them), top chunk_top_k chunks."""
    from eval_pipeline.ranking.engines import ChunkHit

    exact = NumpyExact(sweep.chunk_embeddings(), {cid: doc for cid, doc, _ in sweep.chunks()}, chunk_top_k)
    return {q.qid: as_documents([ChunkHit(*hit) for hit in exact.chunk_hits(q.question, embeddings[q.qid])], DEPTH)
            for q in questions}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--path", default=str(SCIFACT_DEFAULT), help="BEIR SciFact folder (corpus, queries, qrels/)")
    parser.add_argument("--limit", type=int, default=None, help="first N train claims only (a quick check)")
    add_common_args(parser, "engine_anchors")
    args = parser.parse_args()

    print_machine("Engines on SciFact train against their anchors")
    from eval_pipeline.corpus.sources import load_corpus
    from eval_pipeline.config.sweep import parse_sweep
    from eval_pipeline.questions.sets import load_beir_questions
    from eval_pipeline.ranking.caches import QueryEmbeddingCache
    from eval_pipeline.ranking.sweep import Sweep
    from eval_pipeline.ranking.variants import resolved_leg_settings
    from eval_pipeline.store.embedders import LocalEmbedder
    from eval_pipeline.store.ingest import ChunkingConfig, ingest

    snapshot = load_corpus("beir", args.path)
    qs = load_beir_questions(args.path, split="train", doc_ids=[d.doc_id for d in snapshot.documents])
    questions = list(qs.questions[: args.limit] if args.limit else qs.questions)
    config = parse_sweep({"variants": [{**item, "depth": DEPTH} for item, _, _ in ROWS]})
    chunk_top_k = config.variants[0].chunk_top_k

    db = BenchDB(args.state_dir, keep=args.keep_db)
    embedder = LocalEmbedder(batch_size=64)
    info = ingest(snapshot, connection_string=db.uri, embedder=embedder, chunking=ChunkingConfig(**CHUNKING),
                  log=lambda m: print("  " + m))
    embeddings, embed_seconds, cached = QueryEmbeddingCache(Path(args.state_dir) / "query-embeddings").get_or_compute(
        embedder, questions)
    sweep = Sweep(snapshot=snapshot, connection_string=db.uri, table=info.table, query_embeddings=embeddings,
                  embed_ms_per_query=1000.0 * embed_seconds / len(questions))
    chunks = sweep.chunks()
    if len(chunks) != len(snapshot.documents) or any(not cid.endswith(":0") for cid, _, _ in chunks):
        raise SystemExit(f"{info.table}: {len(chunks)} chunks for {len(snapshot.documents)} documents, "
                         "not one chunk per document")
    longest = max(len(d.content.split()) for d in snapshot.documents)
    print(f"SciFact {len(snapshot.documents)} abstracts, one chunk each (split_by word, split_length "
          f"{CHUNKING['split_length']:,}, overlap 0; longest abstract {longest} words); "
          f"table {info.table} ({'reused' if info.reused else f'built in {info.seconds:.0f} s'}); "
          f"embedder {embedder.model_id} on title\\nbody; {len(questions)} of {len(qs.questions)} train claims, "
          f"query embeddings {'cached' if cached else f'computed in {embed_seconds:.1f} s'}; "
          f"depth {DEPTH}, chunk_top_k {chunk_top_k}")
    print(f"dense plan at chunk_top_k {chunk_top_k} (HNSW mode): {plan_of(db.uri, info.table, chunk_top_k, exact=False)}")

    with timed() as t_sweep:
        results = sweep.run(config.variants, questions)
    anchors, engine_tokens = {}, {}
    with timed() as t_anchors:
        for variant, (_, anchor, _) in zip(config.variants, ROWS):
            if anchor == "bm25s":
                s = resolved_leg_settings("bm25", variant.leg_settings("bm25"))
                settings = (s["fields"], s["stemmer"], s["stopwords"], s["k1"], s["b"])
                anchors[variant.key] = bm25s_rankings(snapshot, questions, *settings)[0]
                # bm25s fed the engine's own tokens: what is left of the gap after it is the tokenizer
                engine_tokens[variant.key] = bm25s_on_engine_tokens(snapshot, questions, *settings)
            elif anchor == "haystack":
                anchors[variant.key] = haystack_keyword_rankings(db.uri, info, questions, chunk_top_k)
            elif anchor == "numpy":
                anchors[variant.key] = numpy_exact_rankings(sweep, questions, embeddings, chunk_top_k)

    rows = []
    for variant, (_, anchor, note) in zip(config.variants, ROWS):
        frame = results[variant.key]
        errors = frame["error"].dropna()
        if len(errors):
            raise SystemExit(f"{variant.key}: {len(errors)} questions errored, first: {errors.iloc[0]}")
        ranked = dict(zip(frame["qid"], frame["doc_ids"]))
        engine = anchor_score(ranked, questions)
        notes = [note]
        if variant.engine == "pg-dense":
            notes.append(f"Δ vs published {engine['ndcg@10'] - PUBLISHED_DENSE:+.3f}")
        if anchor is None:
            rows.append([variant.key, describe(variant), engine["ndcg@10"], engine["recall@100"], "-", None, None,
                         "; ".join(notes)])
            continue
        reference = anchor_score(anchors[variant.key], questions)
        delta = engine["ndcg@10"] - reference["ndcg@10"]
        same = sum(list(ranked[q.qid][:10]) == anchors[variant.key][q.qid][:10] for q in questions)
        same_all = sum(list(ranked[q.qid]) == anchors[variant.key][q.qid] for q in questions)
        notes.append(f"same top-10 {same}/{len(questions)}, same top-{DEPTH} {same_all}/{len(questions)}")
        if variant.key in engine_tokens:
            parity = anchor_score(engine_tokens[variant.key], questions)["ndcg@10"]
            gap = engine["ndcg@10"] - parity
            notes.append(f"bm25s on the engine's tokens {parity:.4f} (engine − it {gap:+.4f}"
                         + (": the gap is the tokenizer)" if abs(gap) < 0.0005 else ")"))
        if delta < -TOLERANCE:
            notes.append(f"BELOW anchor by more than {TOLERANCE}")
        rows.append([variant.key, describe(variant), engine["ndcg@10"], engine["recall@100"], ANCHOR_LABELS[anchor],
                     reference["ndcg@10"], f"{delta:+.4f}", "; ".join(notes)])

    print(f"\n== {len(questions)} SciFact train claims, depth {DEPTH}, chunk_top_k {chunk_top_k}; Δ = engine − anchor "
          f"(nDCG@10); all scored by eval_pipeline.metrics.retrieval; pg english = Postgres's 'english' text search "
          "config (Snowball English stemmer, its stopword list) over the chunk text")
    print_table(rows, ["engine", "settings", "nDCG@10", "Recall@100", "anchor", "anchor nDCG@10", "Δ", "note"],
                digits=4)
    print(f"\nsweep {t_sweep():.1f} s for {len(config.variants)} variants; anchors {t_anchors():.1f} s")
    print(load_note())


if __name__ == "__main__":
    main()
