"""Ingestion: Haystack cleaner -> splitter -> embedder -> writer into a PgvectorDocumentStore.

The table is named by a fingerprint of (corpus signature, chunking, embedder model), so an
unchanged configuration is never embedded twice and different configurations live side by
side.  A table only counts as built once its row is in the manifest table; a run that died
half-way leaves no manifest row, and the next run drops and rebuilds that table instead of
trusting it.  Builds of the same table are serialized with a Postgres advisory lock, so two
concurrent runs never write one table together.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import asdict, dataclass, replace
from typing import Literal

from eval_pipeline.corpus import CorpusSnapshot
from eval_pipeline.embedders import Embedder
from eval_pipeline.tsvector import ensure_tsvector_column

MANIFEST_TABLE = "eval_ingest_manifest"


class IngestError(RuntimeError):
    """Building a table failed; the table is left unmarked, so the next run rebuilds it."""
WRITE_BATCH = 256


@dataclass(frozen=True)
class ChunkingConfig:
    split_by: Literal["word", "sentence", "passage"] = "word"
    split_length: int = 150
    split_overlap: int = 20
    embed_title: bool = True  # embed "title\\nchunk" so a chunk keeps its document's context

    def __post_init__(self):
        if self.split_by not in ("word", "sentence", "passage"):
            raise ValueError(f"chunking.split_by is {self.split_by!r}; valid: word, sentence, passage")
        if not isinstance(self.split_length, int) or self.split_length < 1:
            raise ValueError(f"chunking.split_length must be an integer >= 1, got {self.split_length!r}")
        if not isinstance(self.split_overlap, int) or not 0 <= self.split_overlap < self.split_length:
            raise ValueError(
                f"chunking.split_overlap must be an integer in [0, split_length), got {self.split_overlap!r}"
            )


@dataclass(frozen=True)
class StoreInfo:
    """What downstream steps need to open the store; small and picklable."""

    table: str
    fingerprint: str
    corpus_signature: str
    embedder: str
    chunking: ChunkingConfig
    chunk_count: int
    dims: int
    seconds: float
    reused: bool

    @property
    def chunks_per_second(self) -> float:
        return self.chunk_count / self.seconds if self.seconds > 0 else float("nan")


def store_fingerprint(corpus_signature: str, chunking: ChunkingConfig, embedder_id: str) -> str:
    payload = json.dumps(
        {"corpus": corpus_signature, "chunking": asdict(chunking), "embedder": embedder_id}, sort_keys=True
    )
    return hashlib.sha256(payload.encode()).hexdigest()[:16]


def chunk_documents(snapshot: CorpusSnapshot, chunking: ChunkingConfig):
    """Split every document into Haystack Documents with ids `doc_id:index` and parent metadata."""
    from haystack import Document as HDocument
    from haystack.components.preprocessors import DocumentCleaner, DocumentSplitter

    cleaner = DocumentCleaner(remove_empty_lines=True, remove_extra_whitespaces=True)
    splitter = DocumentSplitter(
        split_by=chunking.split_by, split_length=chunking.split_length, split_overlap=chunking.split_overlap
    )
    splitter.warm_up()
    parents = [HDocument(id=d.doc_id, content=d.content, meta={"doc_id": d.doc_id}) for d in snapshot.documents]
    cleaned = cleaner.run(documents=parents)["documents"]
    split = splitter.run(documents=cleaned)["documents"]
    by_id = snapshot.by_id()
    counters: dict[str, int] = {}
    chunks = []
    for piece in split:
        doc_id = piece.meta["doc_id"]
        parent = by_id[doc_id]
        index = counters.get(doc_id, 0)
        counters[doc_id] = index + 1
        chunks.append(
            HDocument(
                id=f"{doc_id}:{index}",
                content=piece.content,
                meta={
                    "doc_id": doc_id,
                    "chunk_index": index,
                    "title": parent.title,
                    "filename": parent.filename,
                },
            )
        )
    missing = set(by_id) - set(counters)
    if missing:
        raise RuntimeError(f"the splitter produced no chunk for documents: {sorted(missing)[:10]}")
    return chunks


def embedding_text(chunk, chunking: ChunkingConfig) -> str:
    if chunking.embed_title and chunk.meta.get("title"):
        return f"{chunk.meta['title']}\n{chunk.content}"
    return chunk.content


def open_document_store(connection_string: str, table: str, dims: int, *, hnsw: bool = True, ef_search: int = 40):
    """A PgvectorDocumentStore on `table` with per-table index names (index names are
    schema-global in Postgres, so the defaults would collide between tables).

    `ef_search` bounds how many rows an HNSW scan can return (pgvector's default, 40, would
    silently cut a top-100 query to 40): callers pass at least the top_k they will ask for."""
    from haystack.utils import Secret
    from haystack_integrations.document_stores.pgvector import PgvectorDocumentStore

    return PgvectorDocumentStore(
        connection_string=Secret.from_token(connection_string),
        table_name=table,
        embedding_dimension=dims,
        vector_function="cosine_similarity",
        search_strategy="hnsw" if hnsw else "exact_nearest_neighbor",
        hnsw_index_name=f"{table}_hnsw",
        hnsw_ef_search=ef_search if hnsw else None,
        keyword_index_name=f"{table}_kw",
        language="english",
    )


def ingest(
    snapshot: CorpusSnapshot,
    *,
    connection_string: str,
    embedder: Embedder,
    chunking: ChunkingConfig,
    log=print,
) -> StoreInfo:
    """Build the table for this configuration, or reuse it when the manifest says it is complete."""
    import psycopg

    fingerprint = store_fingerprint(snapshot.signature, chunking, embedder.model_id)
    table = f"chunks_{fingerprint}"
    started = time.perf_counter()
    with psycopg.connect(connection_string, autocommit=True) as lock_conn:
        _prepare_database(lock_conn)
        lock_conn.execute("SELECT pg_advisory_lock(hashtext(%s))", (table,))
        try:
            done = lock_conn.execute(
                f"SELECT chunk_count, dims FROM {MANIFEST_TABLE} WHERE table_name = %s", (table,)
            ).fetchone()
            if done is not None:
                log(f"reusing complete table {table} ({done[0]} chunks)")
                ensure_tsvector_column(connection_string, table)  # tables built before it existed
                return StoreInfo(table, fingerprint, snapshot.signature, embedder.model_id, chunking,
                                 done[0], done[1], time.perf_counter() - started, reused=True)
            # No manifest row: absent, or left half-written by a run that died. Start clean.
            lock_conn.execute(f'DROP TABLE IF EXISTS "{table}"')
            chunks = chunk_documents(snapshot, chunking)
            texts = [embedding_text(c, chunking) for c in chunks]
            log(f"embedding {len(chunks)} chunks of {len(snapshot.documents)} documents with {embedder.model_id}")
            try:
                vectors = embedder.embed(texts)
            except Exception as exc:
                raise IngestError(f"embedding the chunks for {table} failed ({type(exc).__name__}: {exc}); "
                                  "nothing was written") from exc
            if len(vectors) != len(chunks):
                raise IngestError(f"embedder returned {len(vectors)} vectors for {len(chunks)} chunks")
            dims = len(vectors[0])
            chunks = [replace(chunk, embedding=vector) for chunk, vector in zip(chunks, vectors)]
            written = 0
            try:
                store = open_document_store(connection_string, table, dims, hnsw=False)
                for start in range(0, len(chunks), WRITE_BATCH):
                    written += store.write_documents(chunks[start : start + WRITE_BATCH])
                store.close()
                # Build the HNSW index once, after the bulk insert (faster than growing it row by
                # row). The store connects lazily: a query makes it create the index now, not in
                # the first question's timed dense query.
                indexed = open_document_store(connection_string, table, dims, hnsw=True)
                indexed.count_documents()
                indexed.close()
                # The keyword leg's stored, indexed tsvector (see keyword_index), before any
                # reader prepares a query on the table.
                ensure_tsvector_column(connection_string, table)
            except Exception as exc:
                raise IngestError(
                    f"writing {table} failed after {written} of {len(chunks)} chunks ({type(exc).__name__}: {exc}); "
                    "the table is not marked complete and the next run rebuilds it"
                ) from exc
            lock_conn.execute(
                f"INSERT INTO {MANIFEST_TABLE} (table_name, fingerprint, corpus_signature, embedder, chunking,"
                " chunk_count, dims) VALUES (%s, %s, %s, %s, %s, %s, %s)",
                (table, fingerprint, snapshot.signature, embedder.model_id, json.dumps(asdict(chunking)),
                 len(chunks), dims),
            )
            seconds = time.perf_counter() - started
            return StoreInfo(table, fingerprint, snapshot.signature, embedder.model_id, chunking,
                             len(chunks), dims, seconds, reused=False)
        finally:
            try:
                lock_conn.execute("SELECT pg_advisory_unlock(hashtext(%s))", (table,))
            except psycopg.Error:
                pass  # the connection is gone (and its session lock with it); keep the original error


def fetch_chunks(connection_string: str, table: str) -> list[tuple[str, str, str]]:
    """(chunk id, doc id, content) for every chunk, in id order; used by in-memory engines."""
    import psycopg
    from psycopg import sql

    with psycopg.connect(connection_string) as conn:
        rows = conn.execute(
            sql.SQL("SELECT id, meta->>'doc_id', content FROM {} ORDER BY id").format(sql.Identifier(table))
        ).fetchall()
    return [(r[0], r[1], r[2]) for r in rows]


def fetch_chunk_embeddings(connection_string: str, table: str):
    """{chunk id: embedding as a float32 array}; for rerankers that compare candidates (MMR)."""
    import numpy as np
    import psycopg
    from psycopg import sql

    with psycopg.connect(connection_string) as conn:
        rows = conn.execute(
            sql.SQL("SELECT id, embedding::text FROM {}").format(sql.Identifier(table))
        ).fetchall()
    return {r[0]: np.asarray(json.loads(r[1]), dtype=np.float32) for r in rows}


def _prepare_database(conn) -> None:
    """The vector extension and the manifest table, created if missing.

    CREATE EXTENSION / CREATE TABLE IF NOT EXISTS still race between two sessions (both see
    "missing", one fails with a unique violation in the catalog: seen with two cold runs
    started together), so they run under an advisory lock."""
    conn.execute("SELECT pg_advisory_lock(hashtext(%s))", (MANIFEST_TABLE,))
    try:
        conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
        _create_manifest(conn)
    finally:
        conn.execute("SELECT pg_advisory_unlock(hashtext(%s))", (MANIFEST_TABLE,))


def _create_manifest(conn) -> None:
    conn.execute(
        f"""CREATE TABLE IF NOT EXISTS {MANIFEST_TABLE} (
            table_name text PRIMARY KEY,
            fingerprint text NOT NULL,
            corpus_signature text NOT NULL,
            embedder text NOT NULL,
            chunking jsonb NOT NULL,
            chunk_count integer NOT NULL,
            dims integer NOT NULL,
            completed_at timestamptz NOT NULL DEFAULT now())"""
    )
