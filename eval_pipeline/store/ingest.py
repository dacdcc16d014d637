"""Ingestion: Haystack cleaner -> splitter -> embedder -> writer into a PgvectorDocumentStore.

The table is named by a fingerprint of (corpus signature, chunking, embedder model), so an
unchanged configuration is never embedded twice and different configurations live side by
side.  The corpus streams through in batches (`chunk_batches`): memory holds one batch of
chunks and vectors, not the corpus's.  A table only counts as built once its row is in the
manifest table; a run that died half-way leaves whole batches and a progress row counting
them, and the next run resumes after them (or, without a usable progress row, drops and
rebuilds the table instead of trusting it).  Builds of the same table are serialized with a Postgres advisory lock, so two
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
import itertools
import json
import time
from dataclasses import asdict, dataclass
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


# Chunks embedded and written together: what ingest holds at once (about 0.04 MiB a chunk as
# Python objects), and the unit a killed build resumes by.
BATCH_CHUNKS = 512
_CHUNKING_GROUP = 64  # documents split together: the splitter's per-call cost, amortized
PROGRESS_TABLE = "eval_ingest_progress"
PROGRESS_LOG_EVERY = 30.0  # seconds between progress lines of a long build


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
    return chunk_batch(snapshot.documents, chunking)


def chunk_batch(documents, chunking: ChunkingConfig):
    """`chunk_documents` for some of a corpus's documents (their ids unique)."""
    from haystack import Document as HDocument
    from haystack.components.preprocessors import DocumentCleaner, DocumentSplitter

    cleaner = DocumentCleaner(remove_empty_lines=True, remove_extra_whitespaces=True)
    splitter = DocumentSplitter(
        split_by=chunking.split_by, split_length=chunking.split_length, split_overlap=chunking.split_overlap
    )
    splitter.warm_up()
    by_id = {d.doc_id: d for d in documents}
    parents = [HDocument(id=d.doc_id, content=d.content, meta={"doc_id": d.doc_id}) for d in documents]
    cleaned = cleaner.run(documents=parents)["documents"]
    split = splitter.run(documents=cleaned)["documents"]
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
    batch_chunks: int = BATCH_CHUNKS,
) -> StoreInfo:
    """Build the table for this configuration, or reuse it when the manifest says it is complete.

    The corpus is chunked, embedded and written in batches of about `batch_chunks` chunks
    (`chunk_batches`), so memory does not grow with the corpus. Each batch's rows and the
    progress row that counts it are committed in one transaction: a run that dies (an error,
    an outage, a kill) leaves whole batches, and the next run resumes after the last one
    written instead of embedding them again. The table is marked complete in the manifest only
    after the last batch, the HNSW index and the tsvector column.

    Another run building the same table holds its advisory lock; this one waits for it (that
    run's table is then reused), logging through `log` every `lock_log_every` seconds who holds
    it, and raises `eval_pipeline.store.database.LockTimeoutError` after `lock_timeout` seconds
    (default: EVAL_PIPELINE_LOCK_TIMEOUT, else one hour: a large corpus embeds for long)."""
    import psycopg

    if not isinstance(batch_chunks, int) or isinstance(batch_chunks, bool) or batch_chunks < 1:
        raise ValueError(f"batch_chunks must be an integer >= 1, got {batch_chunks!r}")
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
            progress = _resume_point(lock_conn, table, batch_chunks, log)
            count, dims = _write_batches(snapshot, table, progress, connection_string=connection_string,
                                         embedder=embedder, chunking=chunking, batch_chunks=batch_chunks, log=log)
            _finish_table(connection_string, table, dims, count, lock_timeout=lock_timeout,
                          lock_log_every=lock_log_every, log=log)
            with lock_conn.transaction():
                lock_conn.execute(
                    f"INSERT INTO {MANIFEST_TABLE} (table_name, fingerprint, corpus_signature, embedder, chunking,"
                    " chunk_count, dims) VALUES (%s, %s, %s, %s, %s, %s, %s)",
                    (table, fingerprint, snapshot.signature, embedder.model_id, json.dumps(asdict(chunking)),
                     count, dims),
                )
                lock_conn.execute(f"DELETE FROM {PROGRESS_TABLE} WHERE table_name = %s", (table,))
            seconds = time.perf_counter() - started
            return StoreInfo(table, fingerprint, snapshot.signature, embedder.model_id, chunking,
                             count, dims, seconds, reused=False, embedder_revision=embedder.revision)
        finally:
            try:
                advisory_unlock(lock_conn, table)
            except psycopg.Error:
                pass  # the connection is gone (and its session lock with it); keep the original error


@dataclass(frozen=True)
class _Progress:
    """How far an unfinished build of a table got: whole batches, counted in the same
    transaction that wrote them."""

    batches_done: int = 0
    chunks_written: int = 0
    dims: int | None = None


def chunk_batches(snapshot: CorpusSnapshot, chunking: ChunkingConfig, batch_chunks: int):
    """The corpus's chunks in batches of at least `batch_chunks` chunks (the last may be smaller),
    a document's chunks never split between two batches.

    Documents are taken in the signature's order (`CorpusSnapshot.iter_sorted`: doc id order),
    so the batches are the same however the source orders its records (the table's name does
    not depend on that order either), and a resumed build skips exactly the batches an earlier
    one wrote. A spooled snapshot is streamed, and documents are chunked a few at a time: only
    one batch of chunks, and no more of the corpus than that, is ever held."""
    batch: list = []
    documents = snapshot.iter_sorted()
    while True:
        group = list(itertools.islice(documents, _CHUNKING_GROUP))
        if not group:
            break
        for chunk in chunk_batch(group, chunking):
            if len(batch) >= batch_chunks and chunk.meta["chunk_index"] == 0:
                yield batch
                batch = []
            batch.append(chunk)
    if batch:
        yield batch


def _resume_point(conn, table: str, batch_chunks: int, log) -> _Progress:
    """Where to start: after the batches an earlier, unfinished build wrote (with the same
    batch size, so the batches are the same), else from nothing on a dropped table."""
    row = conn.execute(f"SELECT batch_chunks, batches_done, chunks_written, dims FROM {PROGRESS_TABLE}"
                       " WHERE table_name = %s", (table,)).fetchone()
    if row is not None and row[1] > 0:
        size, batches, written, dims = row
        present = conn.execute("SELECT to_regclass(%s) IS NOT NULL", (f'public."{table}"',)).fetchone()[0]
        rows = conn.execute(f'SELECT count(*) FROM "{table}"').fetchone()[0] if present else None
        if size != batch_chunks:
            log(f"an unfinished build of {table} used batches of {size} chunks, this one {batch_chunks}: "
                "building it again")
        elif rows != written:
            log(f"an unfinished build of {table} counted {written} chunks but the table has {rows}: building it again")
        else:
            log(f"resuming the build of {table} after batch {batches} ({written} chunks already written)")
            return _Progress(batches, written, dims)
    # No usable progress: absent, or left half-written by code that kept none. Start clean.
    conn.execute(f'DROP TABLE IF EXISTS "{table}"')
    conn.execute(f"DELETE FROM {PROGRESS_TABLE} WHERE table_name = %s", (table,))
    return _Progress()


def _write_batches(snapshot, table: str, progress: _Progress, *, connection_string: str, embedder: Embedder,
                   chunking: ChunkingConfig, batch_chunks: int, log) -> tuple[int, int]:
    """Embed and write every batch after `progress`; (chunks in the table, dimensions)."""
    count, dims, index = progress.chunks_written, progress.dims, progress.batches_done
    log(f"embedding the chunks of {snapshot.count} documents with {embedder.model_id} "
        f"in batches of about {batch_chunks}" + (f", after batch {index}" if index else ""))
    last_log = time.monotonic()
    with connect(connection_string, application_name=f"eval-pipeline ingest {table}") as conn:
        for number, chunks in enumerate(chunk_batches(snapshot, chunking, batch_chunks)):
            if number < progress.batches_done:
                continue  # written by an earlier run
            what = f"batch {number + 1} of {table}"
            state = (f"{count} chunks in {number} batches are written and the next run resumes after them; "
                     "the table is not marked complete") if number else "nothing is written yet"
            vectors = _embed_batch(embedder, chunks, chunking, what, state, connection_string)
            try:
                if dims is None:
                    dims = len(vectors[0])
                    _create_table(conn, connection_string, table, dims, batch_chunks=batch_chunks)
                _write_batch(conn, table, chunks, vectors, batches_done=number + 1, chunks_written=count + len(chunks))
            except Exception as exc:
                raise _scrubbed(f"writing {what} failed", exc, state, connection_string) from (
                    exc if is_clean(exc, connection_string) else None)
            count += len(chunks)
            index = number + 1
            if time.monotonic() - last_log >= PROGRESS_LOG_EVERY:
                log(f"{table}: {count} chunks written in {index} batches")
                last_log = time.monotonic()
    if dims is None:
        raise IngestError(f"the corpus {snapshot.source} gave no chunk to embed for {table}")
    return count, dims


def _embed_batch(embedder: Embedder, chunks, chunking: ChunkingConfig, what: str, state: str,
                 connection_string: str):
    try:
        vectors = embedder.embed([embedding_text(c, chunking) for c in chunks])
    except Exception as exc:
        raise _scrubbed(f"embedding {what} failed", exc, state, connection_string) from (
            exc if is_clean(exc, connection_string) else None)
    if len(vectors) != len(chunks):
        raise IngestError(f"embedder returned {len(vectors)} vectors for {len(chunks)} chunks in {what}; {state}")
    return vectors


def _scrubbed(message: str, exc: Exception, state: str, connection_string: str) -> IngestError:
    """IngestError with the original's text scrubbed of the password, and what is left in the
    table; the caller chains the original only when its whole traceback is clean."""
    return IngestError(f"{message} ({error_text(exc, connection_string)}); {state}")


def _create_table(conn, connection_string: str, table: str, dims: int, *, batch_chunks: int) -> None:
    """The store's own table (Haystack's schema and keyword index), vectors kept in the row,
    and the progress row that the batches will count, before any row is written."""
    store = open_document_store(connection_string, table, dims, hnsw=False)
    store.count_documents()  # the store creates its table lazily: now, before any row
    store.close()
    _keep_embeddings_in_row(connection_string, table, dims)
    with conn.transaction():
        conn.execute(f"INSERT INTO {PROGRESS_TABLE} (table_name, batch_chunks, batches_done, chunks_written, dims)"
                     " VALUES (%s, %s, 0, 0, %s)", (table, batch_chunks, dims))


def _write_batch(conn, table: str, chunks, vectors, *, batches_done: int, chunks_written: int) -> None:
    """One batch's rows and its count in the progress row, in one transaction: both or neither."""
    from psycopg import sql

    with conn.transaction():
        with conn.cursor().copy(sql.SQL("COPY {} (id, embedding, content, meta) FROM STDIN").format(
                sql.Identifier(table))) as copy:
            for chunk, vector in zip(chunks, vectors):
                copy.write_row((chunk.id, "[" + ",".join(map(str, vector)) + "]", chunk.content,
                                json.dumps(chunk.meta)))
        conn.execute(f"UPDATE {PROGRESS_TABLE} SET batches_done = %s, chunks_written = %s, updated_at = now()"
                     " WHERE table_name = %s", (batches_done, chunks_written, table))


def _finish_table(connection_string: str, table: str, dims: int, count: int, *, lock_timeout: float,
                  lock_log_every: float, log) -> None:
    """The HNSW index, built once after the bulk insert (faster than growing it row by row; the
    store connects lazily, so a query makes it create the index now, not in the first question's
    timed dense query), and the keyword leg's stored, indexed tsvector (see keyword_index)."""
    try:
        started = time.perf_counter()
        indexed = open_document_store(connection_string, table, dims, hnsw=True)
        indexed.count_documents()
        indexed.close()
        hnsw_seconds = time.perf_counter() - started
        ensure_tsvector_column(connection_string, table, lock_timeout=lock_timeout,
                               lock_log_every=lock_log_every, log=log)
        log(f"{table}: {count} chunks indexed (HNSW {hnsw_seconds:.1f} s, tsvector "
            f"{time.perf_counter() - started - hnsw_seconds:.1f} s)")
    except Exception as exc:
        raise _scrubbed(f"indexing {table} failed", exc, f"all {count} chunks are written, the next run indexes "
                        "them again and the table is not marked complete", connection_string) from (
            exc if is_clean(exc, connection_string) else None)


def fetch_chunks(connection_string: str, table: str) -> list[tuple[str, str, str]]:
    """(chunk id, doc id, content) for every chunk, in id order; used by in-memory engines."""
    from psycopg import sql

    with connect(connection_string, application_name=f"eval-pipeline fetch_chunks {table}") as conn:
        rows = conn.execute(
            sql.SQL("SELECT id, meta->>'doc_id', content FROM {} ORDER BY id").format(sql.Identifier(table))
        ).fetchall()
    return [(r[0], r[1], r[2]) for r in rows]


def fetch_chunk_texts(connection_string: str, table: str, chunk_ids) -> dict[str, str]:
    """{chunk id: content} for the given chunks only (an answer's context: a few per question,
    not the whole table). An id the table does not hold is an error naming it."""
    from psycopg import sql

    wanted = sorted(set(chunk_ids))
    if not wanted:
        return {}
    with connect(connection_string, application_name=f"eval-pipeline fetch_chunk_texts {table}") as conn:
        rows = conn.execute(sql.SQL("SELECT id, content FROM {} WHERE id = ANY(%s)").format(sql.Identifier(table)),
                            (wanted,)).fetchall()
    found = {r[0]: r[1] for r in rows}
    missing = [c for c in wanted if c not in found]
    if missing:
        raise ValueError(f"the vector table {table} has no chunk {missing[0]!r} ({len(missing)} missing): the "
                         "ranked results are from another build of the table; materialize pgvector_store again")
    return found


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
        _create_progress(conn)
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


def _create_progress(conn) -> None:
    """An unfinished build's progress: its row is written with each batch and deleted when the
    table is marked complete."""
    conn.execute(
        f"""CREATE TABLE IF NOT EXISTS {PROGRESS_TABLE} (
            table_name text PRIMARY KEY,
            batch_chunks integer NOT NULL,
            batches_done integer NOT NULL,
            chunks_written integer NOT NULL,
            dims integer NOT NULL,
            updated_at timestamptz NOT NULL DEFAULT now())"""
    )
