"""p50/p95 latency of the keyword leg on 50,000 chunks: Haystack's PgvectorKeywordRetriever (what
pg-keyword runs today) vs eval_pipeline.ranking.keyword_index.IndexedKeywordRetriever.  Goal for the
indexed one: p95 < 20 ms.

The 50,000 chunks are SciFact abstracts repeated with new ids (`<id>~r<k>`), written straight
into a pgvector table created by Haystack's PgvectorDocumentStore (same schema, same
to_tsvector GIN expression index as ingest makes) with RANDOM unit embeddings via binary COPY:
embeddings play no part in keyword search, and nothing is embedded.  Each abstract appears ~10
times, so a query matches ~10x the rows it would in SciFact (and there are many exact ties).

Queries: SciFact train claims (--queries, default 200), as is: plainto_tsquery requires every
term, so most long claims match few rows.  A second set takes the first two non-stopword words
of each claim (--short-queries, default 50): those match thousands of rows, the expensive case
(the rank is computed for every matching row before the LIMIT).

Phases: (1) Haystack on the table as ingest builds it; (2) ensure_tsvector_column (timed);
(3) indexed and Haystack interleaved, per query, in alternating order; Haystack now also ships
the new column (its `table.*`), which is the side effect of adding it.

    .venv/bin/python bench/keyword_scale.py
    .venv/bin/python bench/keyword_scale.py --chunks 20000 --queries 100
"""

from __future__ import annotations

import argparse
import re
import time

from common import (
    SCIFACT_DEFAULT,
    BenchDB,
    add_common_args,
    load_note,
    peak_rss_mb,
    percentile,
    print_machine,
    print_table,
    replicate_documents,
)


def build_table(uri: str, table: str, documents, *, dims: int = 384, seed: int = 0) -> float:
    """Create the table with Haystack's store (schema + keyword GIN index) and COPY the rows in."""
    import numpy as np
    import psycopg
    from pgvector.psycopg import register_vector
    from psycopg import sql
    from psycopg.types.json import Jsonb

    from eval_pipeline.store.ingest import open_document_store

    started = time.perf_counter()
    with psycopg.connect(uri, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
        conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(sql.Identifier(table)))
    store = open_document_store(uri, table, dims, hnsw=False)
    store.count_documents()  # creates the table and its to_tsvector GIN index
    store.close()
    rng = np.random.default_rng(seed)
    with psycopg.connect(uri) as conn:
        register_vector(conn)
        with conn.cursor() as cur:
            statement = sql.SQL("COPY {} (id, embedding, content, meta) FROM STDIN WITH (FORMAT BINARY)").format(
                sql.Identifier(table))
            with cur.copy(statement) as copy:
                copy.set_types(["varchar", "vector", "text", "jsonb"])
                for start in range(0, len(documents), 1000):
                    batch = documents[start:start + 1000]
                    vectors = rng.standard_normal((len(batch), dims)).astype(np.float32)
                    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
                    for d, v in zip(batch, vectors):
                        copy.write_row((f"{d.doc_id}:0", v, d.content,
                                        Jsonb({"doc_id": d.doc_id, "chunk_index": 0, "title": d.title, "filename": ""})))
        conn.commit()
    with psycopg.connect(uri, autocommit=True) as conn:
        conn.execute(sql.SQL("VACUUM ANALYZE {}").format(sql.Identifier(table)))
    return time.perf_counter() - started


def table_state(uri: str, table: str) -> tuple[int, bool]:
    import psycopg
    from psycopg import sql

    from eval_pipeline.ranking.keyword_index import TSV_COLUMN

    with psycopg.connect(uri) as conn:
        if conn.execute("SELECT to_regclass(%s)", (table,)).fetchone()[0] is None:
            return 0, False
        rows = conn.execute(sql.SQL("SELECT count(*) FROM {}").format(sql.Identifier(table))).fetchone()[0]
        has = conn.execute("SELECT 1 FROM information_schema.columns WHERE table_name = %s AND column_name = %s",
                           (table, TSV_COLUMN)).fetchone() is not None
    return rows, has


def drop_column(uri: str, table: str) -> None:
    import psycopg
    from psycopg import sql

    from eval_pipeline.ranking.keyword_index import TSV_COLUMN

    with psycopg.connect(uri, autocommit=True) as conn:
        conn.execute(sql.SQL("ALTER TABLE {} DROP COLUMN IF EXISTS {}").format(sql.Identifier(table),
                                                                                sql.Identifier(TSV_COLUMN)))
        conn.execute(sql.SQL("VACUUM FULL ANALYZE {}").format(sql.Identifier(table)))


def short_query(text: str, stopwords: set[str]) -> str:
    words = [w for w in re.findall(r"[^\W_]+", text.lower()) if w not in stopwords and len(w) > 2]
    return " ".join(words[:2]) or text


def timed_run(retriever, query: str, top_k: int):
    started = time.perf_counter()
    docs = retriever.run(query=query, top_k=top_k)["documents"]
    return (time.perf_counter() - started) * 1000.0, docs


def stats(values):
    return [percentile(values, 50), percentile(values, 95), sum(values) / len(values), max(values)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--path", default=str(SCIFACT_DEFAULT))
    parser.add_argument("--chunks", type=int, default=50_000)
    parser.add_argument("--queries", type=int, default=200, help="SciFact claims, as is")
    parser.add_argument("--short-queries", type=int, default=50, help="two-word queries from the claims (0: skip)")
    parser.add_argument("--top-k", type=int, default=100, help="chunk_top_k (the pipeline's default for depth 20)")
    parser.add_argument("--rebuild", action="store_true", help="rebuild the table even if it exists")
    add_common_args(parser, "keyword_scale")
    args = parser.parse_args()

    print_machine("keyword leg latency at scale")
    import bm25s.stopwords
    from haystack_integrations.components.retrievers.pgvector import PgvectorKeywordRetriever

    from eval_pipeline.corpus.sources import load_corpus
    from eval_pipeline.questions.sets import load_beir_questions
    from eval_pipeline.ranking.keyword_index import IndexedKeywordRetriever, ensure_tsvector_column, keyword_query_sql
    from eval_pipeline.store.ingest import open_document_store

    snapshot = load_corpus("beir", args.path)
    qs = load_beir_questions(args.path, split="train", doc_ids=[d.doc_id for d in snapshot.documents])
    claims = [q.question for q in qs.questions[: args.queries]]
    stop = set(bm25s.stopwords.STOPWORDS_EN)
    shorts = [short_query(c, stop) for c in claims[: args.short_queries]]
    db = BenchDB(args.state_dir, keep=args.keep_db)
    table = f"kwscale_{args.chunks}"
    rows, has_column = table_state(db.uri, table)
    if args.rebuild or rows != args.chunks:
        seconds = build_table(db.uri, table, replicate_documents(snapshot.documents, args.chunks))
        print(f"built {table}: {args.chunks} chunks (SciFact abstracts repeated, random embeddings) in {seconds:.1f} s")
    else:
        if has_column:
            drop_column(db.uri, table)
        print(f"reusing {table} ({rows} chunks)")

    store = open_document_store(db.uri, table, 384, hnsw=False)
    haystack = PgvectorKeywordRetriever(document_store=store, top_k=args.top_k)
    sets = [("claims", claims)] + ([("2-word", shorts)] if shorts else [])
    for _, queries in sets:  # warm the buffer cache and the connection (not measured)
        for q in queries[:10]:
            haystack.run(query=q, top_k=args.top_k)

    print(f"\nphase 1: Haystack PgvectorKeywordRetriever, table as ingest builds it, top_k {args.top_k}")
    before = {}
    for name, queries in sets:
        before[name] = [timed_run(haystack, q, args.top_k)[0] for q in queries]
        print(f"  {name}: {len(queries)} queries, p50 {percentile(before[name], 50):.1f} ms, "
              f"p95 {percentile(before[name], 95):.1f} ms")

    started = time.perf_counter()
    ensure_tsvector_column(db.uri, table)
    ensure_seconds = time.perf_counter() - started
    print(f"\nphase 2: ensure_tsvector_column (ALTER TABLE ... STORED rewrite + GIN build + ANALYZE) {ensure_seconds:.1f} s")

    # A connection that ran Haystack's query >= 5 times holds it as a prepared statement (psycopg's
    # prepare_threshold); its `table.*` result type changed with the new column, so that connection
    # now fails with "cached plan must not change result type".  Open a new store.
    store.close()
    store = open_document_store(db.uri, table, 384, hnsw=False)
    haystack = PgvectorKeywordRetriever(document_store=store, top_k=args.top_k)
    indexed = IndexedKeywordRetriever(connection_string=db.uri, table=table, top_k=args.top_k)
    indexed.warm_up()
    for _, queries in sets:
        for q in queries[:10]:
            indexed.run(query=q, top_k=args.top_k)
            haystack.run(query=q, top_k=args.top_k)
    after_h, after_i, matches, parity_ok, parity_n = {}, {}, {}, 0, 0
    import psycopg
    from psycopg import sql

    from eval_pipeline.ranking.keyword_index import TSV_COLUMN

    with psycopg.connect(db.uri) as conn:
        count_sql = sql.SQL("SELECT count(*) FROM {}, plainto_tsquery('english', %s) q WHERE {} @@ q").format(
            sql.Identifier(table), sql.Identifier(TSV_COLUMN))
        for name, queries in sets:
            matches[name] = [conn.execute(count_sql, (q,)).fetchone()[0] for q in queries]
        plan = conn.execute(sql.SQL("EXPLAIN ") + keyword_query_sql(table), (claims[0], args.top_k)).fetchall()
        plan_short = conn.execute(sql.SQL("EXPLAIN ") + keyword_query_sql(table), (shorts[0] if shorts else claims[0],
                                                                                     args.top_k)).fetchall()
    for name, queries in sets:
        after_h[name], after_i[name] = [], []
        for n, q in enumerate(queries):
            order = [("i", indexed), ("h", haystack)] if n % 2 == 0 else [("h", haystack), ("i", indexed)]
            got = {}
            for label, retriever in order:
                ms, docs = timed_run(retriever, q, args.top_k)
                (after_i if label == "i" else after_h)[name].append(ms)
                got[label] = docs
            # Parity with a LIMIT and many exact ties: the sorted score lists must agree.
            si = sorted(round(d.score, 6) for d in got["i"])
            sh = sorted(round(d.score, 6) for d in got["h"])
            parity_n += 1
            parity_ok += si == sh
    indexed.close()
    store.close()

    print(f"\nphase 3: interleaved, top_k {args.top_k}; ms (client side: SQL round trip + Document building)")
    rows = []
    for name, queries in sets:
        m = matches[name]
        rows.append([f"{name}: Haystack, before the column", *stats(before[name])])
        rows.append([f"{name}: Haystack, column present", *stats(after_h[name])])
        rows.append([f"{name}: IndexedKeywordRetriever", *stats(after_i[name])])
        print(f"  {name}: {len(queries)} queries; matching rows per query p50 {percentile(m, 50):.0f}, "
              f"p95 {percentile(m, 95):.0f}, max {max(m)}; {sum(x == 0 for x in m)} match nothing")
    print()
    print_table(rows, ["retriever", "p50 ms", "p95 ms", "mean ms", "max ms"], digits=2)
    print()
    for name, _ in sets:
        b, h, i = stats(before[name]), stats(after_h[name]), stats(after_i[name])
        print(f"{name}: Haystack(before) / indexed: p50 {b[0] / i[0]:.1f}x, p95 {b[1] / i[1]:.1f}x; "
              f"Haystack(column present) / indexed: p50 {h[0] / i[0]:.1f}x, p95 {h[1] / i[1]:.1f}x; "
              f"indexed p95 {i[1]:.1f} ms (goal < 20 ms: {'met' if i[1] < 20 else 'missed'})")
    print(f"score parity (sorted score lists equal, ties at the cut allowed): {parity_ok}/{parity_n} queries")
    print("plan (claim):   " + " | ".join(r[0].strip() for r in plan[:4]))
    print("plan (2-word):  " + " | ".join(r[0].strip() for r in plan_short[:4]))
    print(f"peak RSS {peak_rss_mb():.0f} MiB (Postgres server not included); {load_note()}")


if __name__ == "__main__":
    main()
