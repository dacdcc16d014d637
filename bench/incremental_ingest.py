"""A 1 % change of SciFact against a cold ingest: what the vector store saves (#29).

Version one is the SciFact corpus; version two edits 52 documents (a sentence appended), removes
52 and adds 52 (each an existing abstract with its sentences in reverse order, under a new id),
as a nightly run after a day's changes sees it. With the default chunking of the job (150 words,
20 overlap, the title embedded) and the bundled all-MiniLM-L6-v2, it prints:

- the cold ingest of version one on an empty vector store (every chunk embedded and stored);
- the ingest of version two from the store plus its new texts: seconds, chunks embedded and
  from the store, the share from the store, and its time ÷ the cold one;
- with --verify (the default), a cold build of version two without the store (today's path) in
  a database of its own, its seconds, and whether the two tables are equal row for row: ids,
  content, metadata, vectors to 1e-6 (the largest difference printed);
- the store's rows and bytes (`pg_total_relation_size`), per vector.

    .venv/bin/python bench/incremental_ingest.py                 # all 5,183 documents (~2 cold ingests)
    .venv/bin/python bench/incremental_ingest.py --docs 1000     # quicker: the first 1,000 (1 % of them changed)
    .venv/bin/python bench/incremental_ingest.py --no-verify     # skip the second cold build

Each run starts from empty databases (incr_store and incr_cold in the bench state dir).
"""

from __future__ import annotations

import argparse
import json
import random
import time

from common import SCIFACT_DEFAULT, BenchDB, add_common_args, load_note, peak_rss_mb, print_machine, print_table

MARK = " This abstract was revised after publication."


def version_two(documents, fraction: float, seed: int):
    """(documents of version two, edited ids, removed ids, added ids): `fraction` of the corpus
    each edited, removed and added (52 of SciFact's 5,183 at 1 %)."""
    from eval_pipeline.corpus.sources import Document

    docs = sorted(documents, key=lambda d: d.doc_id)
    n = max(1, round(len(docs) * fraction))
    rng = random.Random(seed)
    picked = rng.sample(range(len(docs)), 3 * n)
    edit, remove, source = set(picked[:n]), set(picked[n:2 * n]), picked[2 * n:]
    out = []
    for i, d in enumerate(docs):
        if i in remove:
            continue
        out.append(Document(d.doc_id, d.title, d.description, d.filename, d.content + MARK, d.metadata)
                   if i in edit else d)
    added = []
    for k, i in enumerate(source):
        d = docs[i]
        sentences = [s for s in d.content.split(". ") if s]
        added.append(Document(f"added-{k}", d.title, d.description, d.filename, ". ".join(reversed(sentences)),
                              d.metadata))
    return out + added, [docs[i].doc_id for i in sorted(edit)], [docs[i].doc_id for i in sorted(remove)], \
        [a.doc_id for a in added]


def fresh_database(db: BenchDB, name: str) -> str:
    import psycopg

    with psycopg.connect(db.pg.uri("postgres"), autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
    return db.pg.uri(name)


def rows(uri: str, table: str):
    import psycopg

    with psycopg.connect(uri) as conn:
        return conn.execute(f'SELECT id, content, meta, embedding::text FROM "{table}" ORDER BY id').fetchall()


def compare(a, b) -> tuple[bool, float]:
    """(ids, content and metadata equal row for row, largest vector difference)."""
    import numpy as np

    same = [r[:3] for r in a] == [r[:3] for r in b]
    if not same or not a:
        return same, float("nan")
    va = np.array([json.loads(r[3]) for r in a], dtype=np.float64)
    vb = np.array([json.loads(r[3]) for r in b], dtype=np.float64)
    return same, float(np.abs(va - vb).max())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--path", default=str(SCIFACT_DEFAULT), help="BEIR folder")
    parser.add_argument("--docs", type=int, default=None, help="only the first N documents (id order)")
    parser.add_argument("--fraction", type=float, default=0.01, help="share of documents edited, removed, added")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--verify", action=argparse.BooleanOptionalAction, default=True,
                        help="also build version two cold, without the store, and compare the tables")
    parser.add_argument("--json", default=None, help="also write the figures to this JSON file")
    add_common_args(parser, "incremental")
    args = parser.parse_args()

    machine = print_machine("Incremental ingest: a changed corpus re-embeds only what changed")
    print("   " + load_note())
    from common import snapshot_of

    from eval_pipeline.corpus.sources import load_corpus
    from eval_pipeline.store.embedders import LocalEmbedder
    from eval_pipeline.store.ingest import ChunkingConfig, ingest
    from eval_pipeline.store.vectors import list_stores

    full = load_corpus("beir", args.path)
    documents = sorted(full.documents, key=lambda d: d.doc_id)[: args.docs] if args.docs else list(full.documents)
    one = snapshot_of(documents, f"{args.path} (version one)")
    docs_two, edited, removed, added = version_two(documents, args.fraction, args.seed)
    two = snapshot_of(docs_two, f"{args.path} (version two)")
    print(f"version one {one.count} documents; version two: {len(edited)} edited, {len(removed)} removed, "
          f"{len(added)} added ({two.count} documents)")

    db = BenchDB(args.state_dir, keep=args.keep_db)
    store_uri = fresh_database(db, "incr_store")
    embedder = LocalEmbedder()
    embedder.warm_up()
    chunking = ChunkingConfig()  # the job's default: 150 words, 20 overlap, title embedded
    quiet = lambda m: None  # noqa: E731

    started = time.perf_counter()
    cold_one = ingest(one, connection_string=store_uri, embedder=embedder, chunking=chunking, log=quiet)
    cold_seconds = time.perf_counter() - started
    load_cold = load_note()
    started = time.perf_counter()
    warm_two = ingest(two, connection_string=store_uri, embedder=embedder, chunking=chunking, log=quiet)
    incremental_seconds = time.perf_counter() - started
    load_incremental = load_note()
    stores = list_stores(store_uri)

    table = [
        ["version one, cold (empty store)", cold_one.chunk_count, cold_one.chunks_embedded, cold_one.chunks_from_store,
         f"{cold_seconds:.1f}", "1.000", load_cold],
        ["version two, from the store", warm_two.chunk_count, warm_two.chunks_embedded, warm_two.chunks_from_store,
         f"{incremental_seconds:.1f}", f"{incremental_seconds / cold_seconds:.3f}", load_incremental],
    ]
    figures = {"machine": machine, "documents": one.count, "edited": len(edited), "removed": len(removed),
               "added": len(added), "cold_seconds": cold_seconds, "cold_chunks": cold_one.chunk_count,
               "incremental_seconds": incremental_seconds, "incremental_chunks": warm_two.chunk_count,
               "embedded": warm_two.chunks_embedded, "from_store": warm_two.chunks_from_store,
               "store": [{k: v for k, v in s.items() if k != "oldest_use"} for s in stores]}
    if args.verify:
        cold_uri = fresh_database(db, "incr_cold")
        started = time.perf_counter()
        cold_two = ingest(two, connection_string=cold_uri, embedder=embedder, chunking=chunking, log=quiet,
                          reuse_vectors=False)
        cold_two_seconds = time.perf_counter() - started
        table.append(["version two, cold (no store: today)", cold_two.chunk_count, cold_two.chunks_embedded,
                      cold_two.chunks_from_store, f"{cold_two_seconds:.1f}",
                      f"{cold_two_seconds / cold_seconds:.3f}", load_note()])
        same, largest = compare(rows(store_uri, warm_two.table), rows(cold_uri, cold_two.table))
        figures.update(cold_two_seconds=cold_two_seconds, rows_equal=same, max_vector_difference=largest)
    print_table(table, ["build", "chunks", "embedded", "from store", "seconds", "÷ cold", "load"])
    share = warm_two.chunks_from_store / warm_two.chunk_count
    print(f"share of version two's chunks from the store: {share:.1%}; its ingest took "
          f"{incremental_seconds / cold_seconds:.1%} of the cold one"
          + (f" ({incremental_seconds / figures['cold_two_seconds']:.1%} of today's cold build of it)"
             if args.verify else ""))
    if args.verify:
        print("version two from the store vs cold: ids, content and metadata equal row for row: "
              f"{figures['rows_equal']}; largest vector difference {figures['max_vector_difference']:.2e} (1e-6 required)")
    for s in stores:
        print(f"vector store {s['table']}: {s['rows']} vectors, {s['bytes'] / 1e6:.1f} MB "
              f"({s['bytes'] / max(1, s['rows']):.0f} bytes per vector, {s['dims']} dims)")
    print(f"peak RSS {peak_rss_mb():.0f} MiB; {load_note()}")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(figures, fh, indent=2, default=str)


if __name__ == "__main__":
    main()
