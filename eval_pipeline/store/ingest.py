"""Ingestion: Haystack cleaner -> splitter -> embedder -> writer into a PgvectorDocumentStore.

The table is named by a fingerprint of (corpus signature, chunking, embedder model), so an
unchanged configuration is never embedded twice and different configurations live side by
side.  A table only counts as built once its row is in the manifest table; a run that died
half-way leaves no manifest row, and the next run drops and rebuilds that table instead of
trusting it.  Builds of the same table are serialized with a Postgres advisory lock, so two
concurrent runs never write one table together; a run waiting for that lock says every
`lock_log_every` seconds who holds it, and gives up after `lock_timeout` with an error that
says what to do (see `eval_pipeline.store.database.advisory_lock`).

Every connection goes through `eval_pipeline.store.database.connect` (connect timeout,
application_name, redacted errors), the document store's too (`open_document_store`), and every
error that leaves this module is scrubbed of the password: IngestError chains the original
only when its whole traceback is clean.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import asdict, dataclass, replace
from typing import Literal

from eval_pipeline.corpus.sources import CorpusSnapshot
from eval_pipeline.store.database import (
    DEFAULT_LOCK_LOG_EVERY,
    advisory_lock,
    advisory_unlock,
    connect,
    error_text,
    is_clean,
    lock_timeout_default,
    positive_seconds,
)
from eval_pipeline.store.embedders import Embedder
from eval_pipeline.store.tsvector import ensure_tsvector_column

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
    embedder_revision: str = "unknown"  # the weights the table was embedded with (see Embedder.revision)

    @property
    def chunks_per_second(self) -> float:
        return self.chunk_count / self.seconds if self.seconds > 0 else float("nan")


# Bump when chunk_documents or embedding_text change what is stored: a table built by the
# old code must not be reused as if the new code had built it.
CHUNKER_VERSION = 3  # 3: embeddings stored PLAIN (in the row)


def store_fingerprint(corpus_signature: str, chunking: ChunkingConfig, embedder_identity: str) -> str:
    """What a vector table holds: the corpus, the chunking (our chunker's version and the
    installed Haystack's, whose splitter does the splitting) and the embedder's identity (its
    weights by content, see `eval_pipeline.common.weights`)."""
    from importlib.metadata import version

    payload = json.dumps(
        {"corpus": corpus_signature, "chunking": asdict(chunking), "embedder": embedder_identity,
         "chunker": [CHUNKER_VERSION, version("haystack-ai")]}, sort_keys=True
    )
    return hashlib.sha256(payload.encode()).hexdigest()[:16]


# A row's values stay in the row up to about 2 kB (TOAST_TUPLE_THRESHOLD); larger values are
# moved out of line. A 384-d vector (1.5 kB) plus the chunk text and the stored tsvector pass
# it, and a dense scan then fetches every vector from the TOAST table: 7.3 ms instead of about
# 2 ms at SciFact size (bench/RESULTS.md). PLAIN storage keeps the vector in the row, as
# pgvector's documentation recommends, as long as it fits comfortably in a page.
PLAIN_STORAGE_MAX_DIMS = 1000  # 4 kB of floats: half an 8 kB page


def _keep_embeddings_in_row(connection_string: str, table: str, dims: int) -> None:
    from psycopg import sql

    from eval_pipeline.store.database import connect

    if dims > PLAIN_STORAGE_MAX_DIMS:
        return
    with connect(connection_string, autocommit=True, application_name=f"eval-pipeline store {table}") as conn:
        conn.execute(sql.SQL("ALTER TABLE {} ALTER COLUMN embedding SET STORAGE PLAIN").format(sql.Identifier(table)))


def check_store_matches(store: "StoreInfo", embedder: Embedder) -> None:
    """The store was built by this embedder (its weights, by content). A report on a store
    materialized before the embedder's weights changed would show the new revision next to
    the old numbers: refuse, naming what to do."""
    expected = store_fingerprint(store.corpus_signature, store.chunking, embedder.identity)
    if expected != store.fingerprint:
        raise ValueError(
            f"the vector table {store.table} was built by another embedder or other weights than the current "
            f"{embedder.model_id} ({embedder.revision}); materialize pgvector_store again"
        )


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

    return _store_class()(
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


_STORE_CLASS = None


def _store_class():
    """PgvectorDocumentStore connecting through `eval_pipeline.store.database.connect`.

    The store opens its own connection (`_create_connection`, documented as the hook to
    override), and its error chains libpq's message, which can quote the password; through
    `connect` it gets a connect timeout, an application_name naming the table, and an error
    that names host and port but no secret.  Built on first use: Haystack is a heavy import."""
    global _STORE_CLASS
    if _STORE_CLASS is None:
        from haystack_integrations.document_stores.pgvector import PgvectorDocumentStore

        class RedactingPgvectorDocumentStore(PgvectorDocumentStore):
            def _create_connection(self):
                return connect(self.connection_string.resolve_value() or "",
                               application_name=f"eval-pipeline store {self.table_name}")

        _STORE_CLASS = RedactingPgvectorDocumentStore
    return _STORE_CLASS


def ingest(
    snapshot: CorpusSnapshot,
    *,
    connection_string: str,
    embedder: Embedder,
    chunking: ChunkingConfig,
    log=print,
    lock_timeout: float | None = None,
    lock_log_every: float = DEFAULT_LOCK_LOG_EVERY,
) -> StoreInfo:
    """Build the table for this configuration, or reuse it when the manifest says it is complete.

    Another run building the same table holds its advisory lock; this one waits for it (that
    run's table is then reused), logging through `log` every `lock_log_every` seconds who holds
    it, and raises `eval_pipeline.store.database.LockTimeoutError` after `lock_timeout` seconds
    (default: EVAL_PIPELINE_LOCK_TIMEOUT, else one hour: a large corpus embeds for long)."""
    import psycopg

    lock_timeout = lock_timeout_default(lock_timeout)
    lock_log_every = positive_seconds(lock_log_every, "lock_log_every")
    fingerprint = store_fingerprint(snapshot.signature, chunking, embedder.identity)
    table = f"chunks_{fingerprint}"
    started = time.perf_counter()
    waits = {"timeout": lock_timeout, "log_every": lock_log_every, "log": log}
    with connect(connection_string, autocommit=True, application_name=f"eval-pipeline ingest {table}") as lock_conn:
        _prepare_database(lock_conn, lock_timeout=lock_timeout, lock_log_every=lock_log_every, log=log)
        advisory_lock(lock_conn, table, what=f"ingest of {table}", **waits)
        try:
            done = lock_conn.execute(
                f"SELECT chunk_count, dims FROM {MANIFEST_TABLE} WHERE table_name = %s", (table,)
            ).fetchone()
            if done is not None:
                log(f"reusing complete table {table} ({done[0]} chunks)")
                ensure_tsvector_column(connection_string, table, lock_timeout=lock_timeout,  # tables built before it
                                       lock_log_every=lock_log_every, log=log)
                return StoreInfo(table, fingerprint, snapshot.signature, embedder.model_id, chunking,
                                 done[0], done[1], time.perf_counter() - started, reused=True,
                                 embedder_revision=embedder.revision)
            # No manifest row: absent, or left half-written by a run that died. Start clean.
            lock_conn.execute(f'DROP TABLE IF EXISTS "{table}"')
            chunks = chunk_documents(snapshot, chunking)
            texts = [embedding_text(c, chunking) for c in chunks]
            log(f"embedding {len(chunks)} chunks of {len(snapshot.documents)} documents with {embedder.model_id}")
            failure = cause = None
            try:
                vectors = embedder.embed(texts)
            except Exception as exc:
                failure = IngestError(f"embedding the chunks for {table} failed ({error_text(exc, connection_string)}); "
                                      "nothing was written")
                cause = exc if is_clean(exc, connection_string) else None
            if failure is not None:
                raise failure from cause
            if len(vectors) != len(chunks):
                raise IngestError(f"embedder returned {len(vectors)} vectors for {len(chunks)} chunks")
            dims = len(vectors[0])
            chunks = [replace(chunk, embedding=vector) for chunk, vector in zip(chunks, vectors)]
            written = 0
            try:
                store = open_document_store(connection_string, table, dims, hnsw=False)
                store.count_documents()  # the store creates its table lazily: now, before any row
                _keep_embeddings_in_row(connection_string, table, dims)
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
                ensure_tsvector_column(connection_string, table, lock_timeout=lock_timeout,
                                       lock_log_every=lock_log_every, log=log)
            except Exception as exc:
                # The text is scrubbed; the original is chained only when its whole traceback is
                # clean (raised here, outside the except block, it is not even __context__ otherwise).
                failure = IngestError(
                    f"writing {table} failed after {written} of {len(chunks)} chunks "
                    f"({error_text(exc, connection_string)}); "
                    "the table is not marked complete and the next run rebuilds it"
                )
                cause = exc if is_clean(exc, connection_string) else None
            if failure is not None:
                raise failure from cause
            lock_conn.execute(
                f"INSERT INTO {MANIFEST_TABLE} (table_name, fingerprint, corpus_signature, embedder, chunking,"
                " chunk_count, dims) VALUES (%s, %s, %s, %s, %s, %s, %s)",
                (table, fingerprint, snapshot.signature, embedder.model_id, json.dumps(asdict(chunking)),
                 len(chunks), dims),
            )
            seconds = time.perf_counter() - started
            return StoreInfo(table, fingerprint, snapshot.signature, embedder.model_id, chunking,
                             len(chunks), dims, seconds, reused=False, embedder_revision=embedder.revision)
        finally:
            try:
                advisory_unlock(lock_conn, table)
            except psycopg.Error:
                pass  # the connection is gone (and its session lock with it); keep the original error


def fetch_chunks(connection_string: str, table: str) -> list[tuple[str, str, str]]:
    """(chunk id, doc id, content) for every chunk, in id order; used by in-memory engines."""
    from psycopg import sql

    with connect(connection_string, application_name=f"eval-pipeline fetch_chunks {table}") as conn:
        rows = conn.execute(
            sql.SQL("SELECT id, meta->>'doc_id', content FROM {} ORDER BY id").format(sql.Identifier(table))
        ).fetchall()
    return [(r[0], r[1], r[2]) for r in rows]


def fetch_chunk_embeddings(connection_string: str, table: str):
    """{chunk id: embedding as a float32 array}; for rerankers that compare candidates (MMR)."""
    import numpy as np
    from psycopg import sql

    with connect(connection_string, application_name=f"eval-pipeline fetch_chunk_embeddings {table}") as conn:
        rows = conn.execute(
            sql.SQL("SELECT id, embedding::text FROM {}").format(sql.Identifier(table))
        ).fetchall()
    return {r[0]: np.asarray(json.loads(r[1]), dtype=np.float32) for r in rows}


def _prepare_database(conn, *, lock_timeout: float | None = None, lock_log_every: float = DEFAULT_LOCK_LOG_EVERY,
                      log=None) -> None:
    """The vector extension and the manifest table, created if missing.

    CREATE EXTENSION / CREATE TABLE IF NOT EXISTS still race between two sessions (both see
    "missing", one fails with a unique violation in the catalog: seen with two cold runs
    started together), so they run under an advisory lock (held for milliseconds, unless a
    session is stuck inside it: then the wait is logged and bounded like the table's)."""
    advisory_lock(conn, MANIFEST_TABLE, what="preparing the database (vector extension, manifest table)",
                  timeout=lock_timeout, log_every=lock_log_every, log=log)
    try:
        conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
        _create_manifest(conn)
    finally:
        advisory_unlock(conn, MANIFEST_TABLE)


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
