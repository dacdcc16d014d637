"""Chunks/s of `eval_pipeline.store.ingest.ingest` (split + embed + write to pgvector) against the
raw throughput of the same model encoding the same texts in the same process (LocalEmbedder.embed,
same batch size).  Goal: ingest / raw >= 0.85.  Also times the HNSW index build that ingest
means to do but does not (the store connects lazily), and the ratio with it included.

Texts: the first --docs SciFact documents, each one chunk ("title\\ntext", as bench/scifact.py
ingests them), so ~2,000 chunks by default.  Order: warm-up, raw, ingest, raw again; the ratio
uses the mean of the two raw passes so that drift over the run (the machine's timings vary ~2.5x
between runs) weighs on both sides.  The table is dropped before the ingest so it is really built.

    .venv/bin/python bench/ingest_throughput.py
    .venv/bin/python bench/ingest_throughput.py --docs 500 --source demo   # the demo corpus, replicated
"""

from __future__ import annotations

import argparse
import time

from common import (
    SCIFACT_DEFAULT,
    BenchDB,
    add_common_args,
    peak_rss_mb,
    print_machine,
    print_table,
    replicate_documents,
    snapshot_of,
)


class TimedEmbedder:
    """The real embedder; records the seconds spent inside embed() so ingest's overhead is visible."""

    def __init__(self, inner):
        self.inner, self.seconds, self.texts = inner, 0.0, 0

    @property
    def model_id(self):
        return self.inner.model_id

    def warm_up(self):
        self.inner.warm_up()

    def embed(self, texts):
        started = time.perf_counter()
        try:
            return self.inner.embed(texts)
        finally:
            self.seconds += time.perf_counter() - started
            self.texts += len(texts)


def drop_table(uri: str, table: str) -> None:
    import psycopg
    from psycopg import sql

    from eval_pipeline.store.ingest import MANIFEST_TABLE, PROGRESS_TABLE

    with psycopg.connect(uri, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(sql.Identifier(table)))
        for bookkeeping in (MANIFEST_TABLE, PROGRESS_TABLE):
            if conn.execute("SELECT to_regclass(%s)", (bookkeeping,)).fetchone()[0]:
                conn.execute(f"DELETE FROM {bookkeeping} WHERE table_name = %s", (table,))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--source", choices=["scifact", "demo"], default="scifact")
    parser.add_argument("--path", default=str(SCIFACT_DEFAULT), help="SciFact (BEIR) folder")
    parser.add_argument("--docs", type=int, default=2000, help="documents (scifact: one chunk each)")
    parser.add_argument("--batch-size", type=int, default=64)
    add_common_args(parser, "ingest_throughput")
    args = parser.parse_args()

    print_machine("ingest throughput vs raw model throughput")
    from eval_pipeline.corpus.sources import load_corpus
    from eval_pipeline.store.embedders import LocalEmbedder
    from eval_pipeline.store.ingest import ChunkingConfig, chunk_documents, embedding_text, ingest, store_fingerprint

    if args.source == "scifact":
        base = load_corpus("beir", args.path).documents
        chunking = ChunkingConfig(split_length=100_000, split_overlap=0, embed_title=True)
    else:
        base = load_corpus("demo").documents
        chunking = ChunkingConfig()  # the pipeline default: 150 words, 20 overlap
    snapshot = snapshot_of(replicate_documents(base, args.docs), f"bench:{args.source}:{args.docs}")
    chunks = chunk_documents(snapshot, chunking)
    texts = [embedding_text(c, chunking) for c in chunks]
    print(f"{len(snapshot.documents)} documents -> {len(chunks)} chunks, mean {sum(map(len, texts)) / len(texts):.0f} "
          f"characters; batch size {args.batch_size}")

    db = BenchDB(args.state_dir, keep=args.keep_db)
    model = LocalEmbedder(batch_size=args.batch_size)
    model.warm_up()
    model.embed(texts[: args.batch_size])  # first-batch allocations and thread pools, outside every timing

    def raw_pass() -> float:
        started = time.perf_counter()
        vectors = model.embed(texts)
        seconds = time.perf_counter() - started
        assert len(vectors) == len(texts)
        return seconds

    raw1 = raw_pass()
    print(f"raw pass 1: {raw1:.1f} s, {len(texts) / raw1:.1f} chunks/s")
    table = f"chunks_{store_fingerprint(snapshot.signature, chunking, model.model_id)}"
    drop_table(db.uri, table)
    timed_model = TimedEmbedder(model)
    started = time.perf_counter()
    info = ingest(snapshot, connection_string=db.uri, embedder=timed_model, chunking=chunking, log=lambda m: None)
    ingest_seconds = time.perf_counter() - started
    assert not info.reused and info.chunk_count == len(chunks)
    print(f"ingest:     {ingest_seconds:.1f} s, {info.chunk_count / ingest_seconds:.1f} chunks/s "
          f"(embed {timed_model.seconds:.1f} s, everything else {ingest_seconds - timed_model.seconds:.1f} s)")
    # ingest() means to build the HNSW index (open_document_store(hnsw=True).close()), but the store
    # connects lazily, so nothing is built there; the first dense query builds it.  Time that build.
    from eval_pipeline.store.ingest import open_document_store

    started = time.perf_counter()
    store = open_document_store(db.uri, info.table, info.dims, hnsw=True)
    store.count_documents()  # connects, and creates the HNSW index if it is missing
    store.close()
    hnsw_seconds = time.perf_counter() - started
    print(f"HNSW index build after ingest (not part of ingest today): {hnsw_seconds:.1f} s")
    raw2 = raw_pass()
    print(f"raw pass 2: {raw2:.1f} s, {len(texts) / raw2:.1f} chunks/s")

    raw_rate = len(texts) / ((raw1 + raw2) / 2)
    ingest_rate = info.chunk_count / ingest_seconds
    other = ingest_seconds - timed_model.seconds
    print()
    print_table([
        ["raw model (mean of 2 passes)", raw_rate, (raw1 + raw2) / 2, None],
        ["ingest (whole)", ingest_rate, ingest_seconds, ingest_rate / raw_rate],
        ["  of which embed() inside ingest", info.chunk_count / timed_model.seconds, timed_model.seconds,
         (info.chunk_count / timed_model.seconds) / raw_rate],
        ["  of which split + write + manifest", None, other, None],
        ["ingest + HNSW build (as intended)", info.chunk_count / (ingest_seconds + hnsw_seconds),
         ingest_seconds + hnsw_seconds, info.chunk_count / (ingest_seconds + hnsw_seconds) / raw_rate],
    ], ["", "chunks/s", "seconds", "ratio to raw"], digits=2)
    ratio = ingest_rate / raw_rate
    print(f"\ningest / raw = {ratio:.3f} (goal >= 0.85: {'met' if ratio >= 0.85 else 'missed'}); raw passes differ by "
          f"{abs(raw1 - raw2) / min(raw1, raw2) * 100:.0f}% (the noise floor of this ratio)")
    print(f"peak RSS {peak_rss_mb():.0f} MiB (Postgres server not included)")


if __name__ == "__main__":
    main()
