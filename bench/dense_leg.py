"""p50/p95 latency of the dense leg at chunk_top_k 500 on SciFact: Haystack's PgvectorEmbeddingRetriever
(what pg-dense runs today, through PgDenseEngine) vs eval_pipeline.ranking.dense.LeanDenseEngine
(HNSW mode as the planner runs it, HNSW mode with the index forced, and exact), with a numpy exact
search over the same stored vectors as the floor.  Goal for the lean HNSW mode: p95 <= 10 ms.

The table is SciFact's 5,183 abstracts, one chunk per document (the chunking of bench/scifact.py),
embedded by the real all-MiniLM-L6-v2 (`--embedder real`, the default; ~3.5 minutes on 2 cores the
first time, reused afterwards from the bench state dir) or by the bench's HashEmbedder
(`--embedder hash`: fast and deterministic; latency does not depend on embedding quality, but the
HNSW graph's recall does).  `--documents N` takes the first N abstracts only.  Queries: SciFact
train claims, embedded by the same embedder.

The same lean modes also run on a copy of the table whose embedding column has STORAGE PLAIN
(kept in the row): as ingest builds it, a row is over the 2 kB TOAST threshold and the embedding
is stored out of line, which is most of a scan's time.

Every query runs through every method in a rotating order (so drift in machine load spreads
evenly); 10 warm-up queries per method are not timed.  The ids and scores of the lean HNSW mode
are checked against Haystack's on every timed query; the forced-index HNSW mode's overlap with the
exact top 500 (its recall) is printed.

    .venv/bin/python bench/dense_leg.py
    .venv/bin/python bench/dense_leg.py --queries 809 --top-k 500
    .venv/bin/python bench/dense_leg.py --embedder hash --documents 1500
"""

from __future__ import annotations

import argparse
import json
import time
from urllib.parse import quote

from common import (
    SCIFACT_DEFAULT,
    BenchDB,
    HashEmbedder,
    add_common_args,
    load_note,
    peak_rss_mb,
    percentile,
    print_machine,
    print_table,
    snapshot_of,
    timed,
)

FORCE_INDEX = "-c enable_seqscan=off"


def with_options(uri: str, options: str) -> str:
    return f"{uri}{'&' if '?' in uri else '?'}options={quote(options)}"


class NumpyExact:
    """Cosine over the stored float32 vectors in memory: one matrix-vector product, a partial sort,
    then (score desc, id) order: the floor any database query is measured against."""

    name = "numpy exact"

    def __init__(self, embeddings: dict, doc_of: dict[str, str], top_k: int):
        import numpy as np

        self.np = np
        self.ids = sorted(embeddings)
        self.doc_ids = [doc_of[i] for i in self.ids]
        matrix = np.stack([embeddings[i] for i in self.ids]).astype(np.float32)
        self.matrix = matrix / np.linalg.norm(matrix, axis=1, keepdims=True)
        self.top_k = min(top_k, len(self.ids))

    def chunk_hits(self, query, vector):
        np = self.np
        q = np.asarray(vector, dtype=np.float32)
        sims = self.matrix @ (q / np.linalg.norm(q))
        top = np.argpartition(-sims, self.top_k - 1)[: self.top_k]
        order = sorted(top.tolist(), key=lambda i: (-sims[i], self.ids[i]))
        return [(self.ids[i], self.doc_ids[i], float(sims[i])) for i in order]


def plain_copy(uri: str, table: str) -> tuple[str, float]:
    """`<table>_plain`: the same rows, indexes and generated column, with the embedding column's
    storage PLAIN (kept in the row, never TOASTed).  Built once; (name, seconds it took, 0 if reused)."""
    import psycopg
    from psycopg import sql

    name = f"{table}_plain"
    started = time.perf_counter()
    with psycopg.connect(uri, autocommit=True) as conn:
        n = conn.execute(sql.SQL("SELECT count(*) FROM {}").format(sql.Identifier(table))).fetchone()[0]
        if conn.execute("SELECT to_regclass(%s)", (name,)).fetchone()[0] is not None:
            if conn.execute(sql.SQL("SELECT count(*) FROM {}").format(sql.Identifier(name))).fetchone()[0] == n:
                return name, 0.0
            conn.execute(sql.SQL("DROP TABLE {}").format(sql.Identifier(name)))
        conn.execute(sql.SQL("CREATE TABLE {} (LIKE {} INCLUDING ALL)").format(sql.Identifier(name), sql.Identifier(table)))
        conn.execute(sql.SQL("ALTER TABLE {} ALTER COLUMN embedding SET STORAGE PLAIN").format(sql.Identifier(name)))
        conn.execute(sql.SQL("INSERT INTO {} (id, embedding, content, blob_data, blob_meta, blob_mime_type, meta) "
                             "SELECT id, embedding, content, blob_data, blob_meta, blob_mime_type, meta FROM {}")
                     .format(sql.Identifier(name), sql.Identifier(table)))
        conn.execute(sql.SQL("VACUUM ANALYZE {}").format(sql.Identifier(name)))
    return name, time.perf_counter() - started


def toast_reads(uri: str, table: str, top_k: int) -> int:
    """Shared buffers an exact lean query touches (EXPLAIN ANALYZE, BUFFERS)."""
    import psycopg
    from psycopg import sql

    from eval_pipeline.ranking.dense import dense_query_sql

    vector = "[" + ",".join(["0.05"] * 384) + "]"
    with psycopg.connect(uri, autocommit=True) as conn:
        line = conn.execute(sql.SQL("EXPLAIN (ANALYZE, BUFFERS) ") + dense_query_sql(table, top_k, exact=True),
                            {"q": vector}).fetchall()
    text = " ".join(r[0] for r in line)
    return int(text.split("shared hit=")[1].split()[0]) if "shared hit=" in text else -1


def plan_of(uri: str, table: str, top_k: int, exact: bool) -> str:
    """The scan node the planner picks for the lean query on this connection's settings."""
    import psycopg
    from psycopg import sql

    from eval_pipeline.ranking.dense import dense_query_sql, ef_search_for

    vector = "[" + ",".join(["0.05"] * 384) + "]"
    with psycopg.connect(uri, autocommit=True) as conn:
        conn.execute("SELECT set_config('hnsw.ef_search', %s, false)", (str(ef_search_for(top_k)),))
        lines = [r[0] for r in conn.execute(sql.SQL("EXPLAIN ") + dense_query_sql(table, top_k, exact=exact),
                                            {"q": vector}).fetchall()]
    scans = [line.strip().split("  (")[0].lstrip("-> ") for line in lines if "Scan on" in line or "Index Scan" in line]
    return "; ".join(s for s in scans if not s.startswith("Subquery")) or lines[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--path", default=str(SCIFACT_DEFAULT), help="BEIR folder")
    parser.add_argument("--documents", type=int, default=None, help="first N abstracts only (default: all 5,183)")
    parser.add_argument("--queries", type=int, default=300, help="SciFact train claims timed (of 809)")
    parser.add_argument("--top-k", type=int, default=500, help="chunk_top_k")
    parser.add_argument("--embedder", choices=("real", "hash"), default="real",
                        help="real: all-MiniLM-L6-v2 (default); hash: the bench's fast deterministic HashEmbedder")
    parser.add_argument("--json", default=None, help="also write the figures to this JSON file")
    add_common_args(parser, "dense_leg")
    args = parser.parse_args()

    machine = print_machine("dense leg latency")
    from eval_pipeline.corpus.sources import load_corpus
    from eval_pipeline.questions.sets import load_beir_questions
    from eval_pipeline.ranking.dense import LeanDenseEngine
    from eval_pipeline.ranking.engines import PgDenseEngine
    from eval_pipeline.store.ingest import (
        ChunkingConfig,
        fetch_chunk_embeddings,
        fetch_chunks,
        ingest,
        open_document_store,
    )

    snapshot = load_corpus("beir", args.path)
    qs = load_beir_questions(args.path, split="train", doc_ids=[d.doc_id for d in snapshot.documents])
    if args.documents:
        snapshot = snapshot_of(snapshot.documents[: args.documents], f"scifact-first-{args.documents}")
    questions = [q.question for q in qs.questions[: args.queries]]
    db = BenchDB(args.state_dir, keep=args.keep_db)
    if args.embedder == "real":
        from eval_pipeline.store.embedders import LocalEmbedder

        embedder = LocalEmbedder(batch_size=64)
    else:
        embedder = HashEmbedder()
    embedder.warm_up()
    chunking = ChunkingConfig(split_length=100_000, split_overlap=0, embed_title=True)  # one chunk per document
    info = ingest(snapshot, connection_string=db.uri, embedder=embedder, chunking=chunking, log=lambda m: print("  " + m))
    print(f"table {info.table}: {info.chunk_count} chunks of {len(snapshot.documents)} SciFact abstracts, "
          f"embedder {embedder.model_id} ({args.embedder}); "
          + ("reused (built earlier)" if info.reused else f"built in {info.seconds:.1f} s"))
    with timed() as t_embed:
        vectors = embedder.embed(questions)
    print(f"{len(questions)} train claims embedded in {t_embed():.1f} s")

    k = args.top_k
    forced = with_options(db.uri, FORCE_INDEX)
    store = open_document_store(db.uri, info.table, info.dims, hnsw=True, ef_search=max(40, k))  # as the sweep does
    embeddings = fetch_chunk_embeddings(db.uri, info.table)
    doc_of = {cid: doc for cid, doc, _ in fetch_chunks(db.uri, info.table)}
    methods = {
        "haystack PgvectorEmbeddingRetriever": PgDenseEngine(store, chunk_top_k=k),
        "lean HNSW (planner's choice)": LeanDenseEngine(db.uri, info.table, chunk_top_k=k),
        "lean HNSW (index forced)": LeanDenseEngine(forced, info.table, chunk_top_k=k),
        "lean exact": LeanDenseEngine(db.uri, info.table, chunk_top_k=k, exact=True),
        "numpy exact (floor)": NumpyExact(embeddings, doc_of, k),
    }
    plain, plain_seconds = plain_copy(db.uri, info.table)
    print(f"copy {plain} with embedding STORAGE PLAIN: " + (f"built in {plain_seconds:.1f} s" if plain_seconds else "reused"))
    print(f"  shared buffers an exact scan touches: {toast_reads(db.uri, info.table, k)} as ingest builds the table "
          f"(embedding out of line, TOASTed), {toast_reads(db.uri, plain, k)} on the PLAIN copy")
    methods.update({
        "lean HNSW (planner's choice), PLAIN copy": LeanDenseEngine(db.uri, plain, chunk_top_k=k),
        "lean HNSW (index forced), PLAIN copy": LeanDenseEngine(forced, plain, chunk_top_k=k),
        "lean exact, PLAIN copy": LeanDenseEngine(db.uri, plain, chunk_top_k=k, exact=True),
    })
    plans = {
        "lean HNSW (planner's choice)": plan_of(db.uri, info.table, k, exact=False),
        "lean HNSW (index forced)": plan_of(forced, info.table, k, exact=False),
        "lean exact": plan_of(db.uri, info.table, k, exact=True),
        "lean HNSW (planner's choice), PLAIN copy": plan_of(db.uri, plain, k, exact=False),
    }
    for name, plan in plans.items():
        print(f"  plan, {name}: {plan}")

    def hits(method, query, vector):
        return [(h.chunk_id, h.doc_id, h.score) if hasattr(h, "chunk_id") else h
                for h in method.chunk_hits(query, vector)]

    names = list(methods)
    for query, vector in zip(questions[:10], vectors[:10]):  # warm-up, not timed
        for name in names:
            hits(methods[name], query, vector)

    times: dict[str, list[float]] = {name: [] for name in names}
    parity_bad, recall, exact_vs_numpy = 0, [], []
    print(f"\ntiming {len(questions)} queries x {len(names)} methods at chunk_top_k {k} ({load_note()})")
    for i, (query, vector) in enumerate(zip(questions, vectors)):
        out = {}
        for name in names[i % len(names):] + names[: i % len(names)]:
            started = time.perf_counter()
            out[name] = hits(methods[name], query, vector)
            times[name].append((time.perf_counter() - started) * 1000.0)
        want = {cid: s for cid, _, s in out["haystack PgvectorEmbeddingRetriever"]}
        got = {cid: s for cid, _, s in out["lean HNSW (planner's choice)"]}
        cut = min(want.values())
        same_above = {c for c, s in want.items() if s > cut + 1e-6} == {c for c, s in got.items() if s > cut + 1e-6}
        if len(want) != len(got) or not same_above or any(abs(want[c] - got[c]) > 1e-6 for c in want.keys() & got.keys()):
            parity_bad += 1
        exact_ids = {cid for cid, _, _ in out["lean exact"]}
        recall.append(len(exact_ids & {cid for cid, _, _ in out["lean HNSW (index forced)"]}) / len(exact_ids))
        exact_vs_numpy.append(len(exact_ids & {cid for cid, _, _ in out["numpy exact (floor)"]}) / len(exact_ids))

    lean_p95 = percentile(times["lean HNSW (planner's choice)"], 95)
    haystack_p95 = percentile(times["haystack PgvectorEmbeddingRetriever"], 95)
    haystack_p50 = percentile(times["haystack PgvectorEmbeddingRetriever"], 50)
    rows, figures = [], {}
    for name in names:
        values = times[name]
        p50, p95 = percentile(values, 50), percentile(values, 95)
        figures[name] = {"p50_ms": p50, "p95_ms": p95, "mean_ms": sum(values) / len(values), "max_ms": max(values)}
        rows.append([name, p50, p95, sum(values) / len(values), max(values), haystack_p50 / p50, haystack_p95 / p95,
                     p95 / lean_p95])
    print()
    print_table(rows, ["method", "p50 ms", "p95 ms", "mean ms", "max ms", "haystack/this p50", "haystack/this p95",
                       "this/lean-HNSW p95"], digits=2)
    mean_recall = sum(recall) / len(recall)
    print(f"\nlean HNSW (planner's choice) vs Haystack: {len(questions) - parity_bad}/{len(questions)} queries with "
          f"the same ids and scores (1e-6, up to ties at the cut)")
    print(f"lean HNSW (index forced, ef_search {max(40, k)}) recall of the exact top {k}: mean {mean_recall:.4f}, "
          f"min {min(recall):.4f}")
    print(f"lean exact vs numpy exact, top-{k} overlap: mean {sum(exact_vs_numpy) / len(exact_vs_numpy):.4f}")
    goal = "met" if lean_p95 <= 10.0 else "NOT met"
    print(f"goal p95 <= 10 ms for the lean HNSW mode: {goal} ({lean_p95:.2f} ms; Haystack {haystack_p95:.1f} ms, "
          f"{haystack_p95 / lean_p95:.0f}x)")
    print(f"peak RSS {peak_rss_mb():.0f} MiB; {load_note()}")
    for method in methods.values():
        if hasattr(method, "close"):
            method.close()
    store.close()
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"machine": machine, "table": info.table, "chunks": info.chunk_count, "embedder": args.embedder,
                       "queries": len(questions), "top_k": k, "plans": plans, "latency": figures,
                       "parity_mismatches": parity_bad, "forced_hnsw_recall_mean": mean_recall,
                       "forced_hnsw_recall_min": min(recall)}, fh, indent=2)


if __name__ == "__main__":
    main()
