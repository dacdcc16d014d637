"""Ingestion: Haystack cleaner -> splitter -> embedder -> writer into a PgvectorDocumentStore.

The table is named by a fingerprint of (corpus signature, chunking, embedder model), so an
unchanged configuration is never embedded twice and different configurations live side by
side.  The corpus streams through in batches (`chunk_batches`): memory holds one batch of
chunks and vectors, not the corpus's.  A table only counts as built once its row is in the
manifest table; a run that died half-way leaves whole batches and a progress row counting
them, and the next run resumes after them (or, without a usable progress row, drops and
rebuilds the table instead of trusting it).

A build is split into *shards* (`plan_ingest`): contiguous runs of those batches, each written
by `ingest_shard` with its own progress row, in any order, in any process, at the same time;
`finish_ingest` marks the table complete once every shard is in. A one-step build (`ingest`)
is the same three steps with one shard. A shard that failed or was killed is run again alone
and resumes after its last whole batch; a shard already written writes nothing, so no row is
written twice. Postgres advisory locks keep it safe: the table's lock around planning and
finishing (two concurrent runs never plan or finish one table together), one lock per shard
around its writer, one around creating the table. A run waiting for a lock says every
`lock_log_every` seconds who holds it, and gives up after `lock_timeout` with an error that
says what to do (see `eval_pipeline.store.database.advisory_lock`).

Every connection goes through `eval_pipeline.store.database.connect` (connect timeout,
application_name, redacted errors), the document store's too (`open_document_store`), and every
error that leaves this module is scrubbed of the password: IngestError chains the original
only when its whole traceback is clean.
"""

from __future__ import annotations

import hashlib
import importlib.util
import itertools
import json
import time
from dataclasses import asdict, dataclass
from importlib.metadata import version
from typing import Literal

import numpy as np
import psycopg
from psycopg import sql

from eval_pipeline.common import versions
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
from eval_pipeline.store.vectors import Reuse, VectorStore, embed_through_store, store_identity
from eval_pipeline.store.vectors import prepare as _prepare_vector_stores

MANIFEST_TABLE = "eval_ingest_manifest"


class IngestError(RuntimeError):
    """Building a table failed; the table is left unmarked, so the next run rebuilds it."""


# Chunks embedded and written together: what ingest holds at once (about 0.04 MiB a chunk as
# Python objects), and the unit a killed build resumes by.
BATCH_CHUNKS = 512
_CHUNKING_GROUP = 64  # documents split together: the splitter's per-call cost, amortized
# One row per shard of an unfinished build (the table before sharding, eval_ingest_progress, is
# no longer read: a build it counted is started again).
PROGRESS_TABLE = "eval_ingest_shard_progress"
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
        if self.split_by == "sentence" and not sentence_splitting_available():
            raise ValueError("chunking.split_by 'sentence' needs nltk and its punkt sentence model, which are not "
                             "installed here (nothing is downloaded): use word or passage")


def sentence_splitting_available() -> bool:
    """Whether Haystack can split by sentence: it needs nltk (and nltk's punkt data, which it
    would download). Checked without importing either."""
    return importlib.util.find_spec("nltk") is not None


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
    # What building the table took, wall time, as its build recorded it in the manifest: this
    # run's `seconds` when it built the table; None for a table built before builds were timed.
    build_seconds: float | None = None
    # What the table's build took from the model and from the vector store
    # (eval_pipeline.store.vectors), counted with each batch and kept in the manifest, whichever
    # run built it (a resumed build's batches included); None for a table built before they were counted.
    chunks_embedded: int | None = None
    chunks_from_store: int | None = None

    @property
    def chunks_per_second(self) -> float:
        return self.chunk_count / self.seconds if self.seconds > 0 else float("nan")

    @property
    def build_chunks_per_second(self) -> float | None:
        """The build's rate, whichever run built the table (None: not recorded)."""
        seconds = self.build_seconds
        return self.chunk_count / seconds if seconds is not None and seconds > 0 else None


# The code that decides what a table holds besides the model's vectors: this module (the
# cleaning and splitting settings, the chunk ids and metadata, the text embedded, how rows are
# written) and the vector store's (which vector each chunk is given, `embed_through_store`).
# The embedder's own code is in its identity (`eval_pipeline.store.embedders`).
TABLE_CODE = ("eval_pipeline/store/ingest.py", "eval_pipeline/store/vectors.py")
CHUNKING_PACKAGES = ("haystack-ai",)  # its DocumentCleaner and DocumentSplitter cut the text


def table_code() -> str:
    """The code a table's rows come from: the syntax-tree digest of `TABLE_CODE` and the
    installed code of `CHUNKING_PACKAGES`. Not a hand-kept version: a version bump forgotten
    with an edit of `embedding_text` or `chunk_batch` would reuse the table the old code built,
    so the edit would never be measured and its run would become a yardstick. An edit here
    rebuilds the table, not the vectors of unchanged texts (`eval_pipeline.store.vectors`
    keeps them by the embedder's identity and the text)."""
    return f"{versions.source_digest(*TABLE_CODE)}+{versions.package_code_digest(CHUNKING_PACKAGES)}"


def store_fingerprint(corpus_signature: str, chunking: ChunkingConfig, embedder_identity: str) -> str:
    """What a vector table holds: the corpus, the chunking (its settings and the code that
    chunks, `table_code`) and the embedder's identity (its weights by content and the code
    that embeds, see `eval_pipeline.store.embedders`)."""
    payload = json.dumps(
        {"corpus": corpus_signature, "chunking": asdict(chunking), "embedder": embedder_identity,
         "chunker": [table_code(), version("haystack-ai")]}, sort_keys=True
    )
    return hashlib.sha256(payload.encode()).hexdigest()[:16]


# A row's values stay in the row up to about 2 kB (TOAST_TUPLE_THRESHOLD); larger values are
# moved out of line. A 384-d vector (1.5 kB) plus the chunk text and the stored tsvector pass
# it, and a dense scan then fetches every vector from the TOAST table: 7.3 ms instead of about
# 2 ms at SciFact size (bench/RESULTS.md). PLAIN storage keeps the vector in the row, as
# pgvector's documentation recommends, as long as it fits comfortably in a page.
PLAIN_STORAGE_MAX_DIMS = 1000  # 4 kB of floats: half an 8 kB page


def _keep_embeddings_in_row(connection_string: str, table: str, dims: int) -> None:
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
    from haystack import Document as HDocument  # noqa: PLC0415  deferred: Haystack imports torch, ~3 s

    # deferred: Haystack imports torch, ~3 s
    from haystack.components.preprocessors import DocumentCleaner, DocumentSplitter  # noqa: PLC0415

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
    from haystack.utils import Secret  # noqa: PLC0415  deferred: Haystack imports torch, ~3 s

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
        # deferred: Haystack imports torch, ~3 s
        from haystack_integrations.document_stores.pgvector import PgvectorDocumentStore  # noqa: PLC0415

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
    shards: int = 1,
    reuse_vectors: bool = True,
) -> StoreInfo:
    """Build the table for this configuration, or reuse it when the manifest says it is complete.

    The corpus is chunked, embedded and written in batches of about `batch_chunks` chunks
    (`chunk_batches`), so memory does not grow with the corpus. Each batch's rows and the
    progress row that counts it are committed in one transaction: a run that dies (an error,
    an outage, a kill) leaves whole batches, and the next run resumes after the last one
    written instead of embedding them again. The table is marked complete in the manifest only
    after the last batch, the HNSW index and the tsvector column.

    The three steps of a sharded build, one after the other in this process: `plan_ingest`,
    `ingest_shard` for each shard (one shard by default: the whole corpus), `finish_ingest`.
    The pgvector_store asset runs them as separate steps, the shards possibly in parallel.

    Another run building the same table holds its advisory lock; this one waits for it (that
    run's table is then reused), logging through `log` every `lock_log_every` seconds who holds
    it, and raises `eval_pipeline.store.database.LockTimeoutError` after `lock_timeout` seconds
    (default: EVAL_PIPELINE_LOCK_TIMEOUT, else one hour: a large corpus embeds for long)."""
    waits = {"log": log, "lock_timeout": lock_timeout, "lock_log_every": lock_log_every}
    plan = plan_ingest(snapshot, connection_string=connection_string, embedder=embedder, chunking=chunking,
                       batch_chunks=batch_chunks, shards=shards, reuse_vectors=reuse_vectors, **waits)
    for shard in plan.shards:
        ingest_shard(snapshot, plan, shard, connection_string=connection_string, embedder=embedder, **waits)
    return finish_ingest(plan, connection_string=connection_string, **waits)


# --- shards: plan -> ingest_shard (one per shard, in any order, possibly at once) -> finish ------


@dataclass(frozen=True)
class Shard:
    """A contiguous run of the build's batches: the documents [first_doc, first_doc + docs) in
    the signature's order. A batch never spans two shards, so the shards write exactly the
    batches (and rows) one uninterrupted build writes."""

    index: int  # 0-based
    count: int  # shards in the plan
    first_doc: int
    docs: int
    chunks: int | None = None  # as the plan counted them (None: a one-shard plan does not count)
    batches: int | None = None

    @property
    def name(self) -> str:
        return f"shard {self.index + 1}/{self.count}"

    def label(self, table: str) -> str:
        """How logs and errors name what this shard writes: the table alone for a one-shard build."""
        return table if self.count == 1 else f"{table} {self.name}"


@dataclass(frozen=True)
class IngestPlan:
    """What `plan_ingest` decided; small and picklable (it travels between Dagster steps)."""

    table: str
    fingerprint: str
    corpus_signature: str
    embedder: str  # model id
    embedder_identity: str
    embedder_revision: str
    chunking: ChunkingConfig
    batch_chunks: int
    shards: tuple[Shard, ...]
    key: str  # the batch size and every shard's range, digested: recorded with each shard's progress
    started_at: float  # wall clock (time.time()), so finish_ingest can tell the build's seconds in another process
    # (chunks, dims, build seconds, chunks embedded, chunks from the store) of a table already
    # complete: nothing to write
    complete: tuple[int, int, float | None, int | None, int | None] | None = None
    # Ask the vector store before embedding (when the embedder is content-addressed: see
    # eval_pipeline.store.vectors.store_identity), and put what is embedded there.
    reuse_vectors: bool = True


@dataclass(frozen=True)
class ShardResult:
    """What `ingest_shard` did, of the `chunks` the shard holds: `embedded` chunks embedded by
    the model now and `from_store` chunks written now with vectors from the vector store (a
    resumed shard's earlier batches are neither)."""

    index: int
    chunks: int
    embedded: int
    seconds: float
    table: str = ""  # the table the shard belongs to
    started: float = 0.0  # when the step began (epoch seconds): a build's wall span is over its shards
    from_store: int = 0


def shards_wall_seconds(results) -> float | None:
    """From the first shard's start to the last one's end: what writing the shards took, run
    one after the other or side by side (None: no shard says when it started)."""
    timed = [r for r in results if r.started > 0]
    if not timed:
        return None
    return max(r.started + r.seconds for r in timed) - min(r.started for r in timed)


def shard_lock_key(table: str, index: int) -> str:
    """The advisory lock a shard's writer holds while it writes: one writer per shard."""
    return f"{table}:shard:{index}"


def _create_lock_key(table: str) -> str:
    """Held for the moment the table is created (by the first shard to write a batch). Not the
    table's own lock: a run planning or finishing the table may hold that for long."""
    return f"{table}:create"


def plan_ingest(
    snapshot: CorpusSnapshot,
    *,
    connection_string: str,
    embedder: Embedder,
    chunking: ChunkingConfig,
    shards: int = 1,
    log=print,
    lock_timeout: float | None = None,
    lock_log_every: float = DEFAULT_LOCK_LOG_EVERY,
    batch_chunks: int = BATCH_CHUNKS,
    reuse_vectors: bool = True,
) -> IngestPlan:
    """The build's shards, recorded in the progress table under the table's advisory lock; or a
    plan with nothing to write when the manifest says the table is complete.

    `shards` > 1 chunks the corpus once (nothing is embedded) to count its batches, and splits
    them into at most that many contiguous runs of about equal chunk counts; one shard is the
    whole corpus, not counted. An unfinished build with the same plan is kept (each shard
    resumes after its last whole batch); one with another batch size or other shards, or whose
    progress rows disagree with the table's rows, is dropped and started again, once no writer
    of it is left (its shards' locks are taken first)."""
    if not isinstance(batch_chunks, int) or isinstance(batch_chunks, bool) or batch_chunks < 1:
        raise ValueError(f"batch_chunks must be an integer >= 1, got {batch_chunks!r}")
    if not isinstance(shards, int) or isinstance(shards, bool) or shards < 1:
        raise ValueError(f"shards must be an integer >= 1, got {shards!r}")
    lock_timeout = lock_timeout_default(lock_timeout)
    lock_log_every = positive_seconds(lock_log_every, "lock_log_every")
    started_at = time.time()
    fingerprint = store_fingerprint(snapshot.signature, chunking, embedder.identity)
    table = f"chunks_{fingerprint}"
    waits = {"timeout": lock_timeout, "log_every": lock_log_every, "log": log}

    def planned(layout, complete=None) -> IngestPlan:
        key = hashlib.sha256(json.dumps([batch_chunks, [[s.first_doc, s.docs] for s in layout]]).encode()).hexdigest()
        return IngestPlan(table, fingerprint, snapshot.signature, embedder.model_id, embedder.identity,
                          embedder.revision, chunking, batch_chunks, tuple(layout), key[:16], started_at, complete,
                          reuse_vectors=reuse_vectors)

    with connect(connection_string, autocommit=True, application_name=f"eval-pipeline ingest {table}") as conn:
        _prepare_database(conn, lock_timeout=lock_timeout, lock_log_every=lock_log_every, log=log)
        done = _manifest_row(conn, table)  # a reused table needs no counting pass
        layout = None if done else _shard_layout(snapshot, chunking, batch_chunks, shards, table, log)
        advisory_lock(conn, table, what=f"ingest of {table}", **waits)
        try:
            done = _manifest_row(conn, table)
            if done is not None:
                log(f"reusing complete table {table} ({done[0]} chunks)")
                ensure_tsvector_column(connection_string, table, lock_timeout=lock_timeout,  # tables built before it
                                       lock_log_every=lock_log_every, log=log)
                return planned([Shard(0, 1, 0, snapshot.count)], complete=done)
            plan = planned(layout)
            _adopt_or_reset(conn, plan, log=log, waits=waits)
            if len(plan.shards) > 1:
                log(f"{table}: {len(plan.shards)} shards of " + ", ".join(
                    f"{s.chunks} chunks in {s.batches} batches" for s in plan.shards))
            return plan
        finally:
            _unlock_quietly(conn, table)


def ingest_shard(
    snapshot: CorpusSnapshot,
    plan: IngestPlan,
    shard: Shard,
    *,
    connection_string: str,
    embedder: Embedder,
    log=print,
    lock_timeout: float | None = None,
    lock_log_every: float = DEFAULT_LOCK_LOG_EVERY,
) -> ShardResult:
    """Chunk, embed and write one shard's batches after the last one its progress row counts,
    under the shard's advisory lock (a second writer of the same shard waits, then finds it
    written). A shard already written, or a table already complete, writes nothing; its
    progress row is marked written in the transaction after its last batch."""
    lock_timeout = lock_timeout_default(lock_timeout)
    lock_log_every = positive_seconds(lock_log_every, "lock_log_every")
    started, began = time.perf_counter(), time.time()
    if plan.complete is not None:
        return ShardResult(shard.index, plan.complete[0], 0, 0.0, plan.table, began)
    if embedder.identity != plan.embedder_identity:
        raise ValueError(f"{plan.table} was planned for the embedder {plan.embedder_identity}, not "
                         f"{embedder.identity}; materialize pgvector_store again")
    if snapshot.signature != plan.corpus_signature:
        raise ValueError(f"{plan.table} was planned for the corpus {plan.corpus_signature}, not "
                         f"{snapshot.signature}; materialize pgvector_store again")
    table, label = plan.table, shard.label(plan.table)
    key = shard_lock_key(table, shard.index)
    with connect(connection_string, autocommit=True, application_name=_app_name(plan, shard)) as conn:
        advisory_lock(conn, key, what=f"ingest of {label}", timeout=lock_timeout, log_every=lock_log_every, log=log)
        try:
            done = _manifest_row(conn, table)
            if done is not None:  # another run finished the table meanwhile
                return ShardResult(shard.index, done[0], 0, time.perf_counter() - started, table, began)
            progress = _shard_progress(conn, plan, shard)
            if progress.done:
                log(f"{label} is already written ({progress.chunks_written} chunks in {progress.batches_done} batches)")
                return ShardResult(shard.index, progress.chunks_written, 0, time.perf_counter() - started, table,
                                   began)
            _check_rows_agree(conn, table, what=label)
            if progress.batches_done:
                log(f"resuming the build of {label} after batch {progress.batches_done} "
                    f"({progress.chunks_written} chunks already written)")
            reuse = Reuse()
            count, batches = _write_batches(snapshot, plan, shard, progress, connection_string=connection_string,
                                            embedder=embedder, log=log, reuse=reuse)
            if shard.chunks is not None and count != shard.chunks:
                raise IngestError(f"{label} wrote {count} chunks, the plan counted {shard.chunks}: the chunking is "
                                  "not deterministic; the table is not marked complete")
            conn.execute(f"UPDATE {PROGRESS_TABLE} SET done = true, updated_at = now()"
                         " WHERE table_name = %s AND shard = %s AND plan = %s", (table, shard.index, plan.key))
            return ShardResult(shard.index, count, reuse.embedded, time.perf_counter() - started, table, began,
                               from_store=reuse.from_store)
        finally:
            _unlock_quietly(conn, key)


def finish_ingest(
    plan: IngestPlan,
    *,
    connection_string: str,
    log=print,
    lock_timeout: float | None = None,
    lock_log_every: float = DEFAULT_LOCK_LOG_EVERY,
    shard_seconds: float | None = None,
) -> StoreInfo:
    """Mark the table complete once every shard of the plan is in: the HNSW index and the
    tsvector column are built, then the manifest row is written and the progress rows deleted
    in one transaction. Refused, with what is missing, while a shard is not written; a table
    that another run finished meanwhile is reused.

    The build's seconds, recorded in the manifest: `shard_seconds` (what writing the shards
    took, wall time: `shards_wall_seconds`; a step that builds several tables one after the
    other gives each its own) plus this step's, else the wall time since the plan was made.

    The chunks embedded and the chunks whose vectors came from the vector store, counted by
    each batch in its shard's progress row, are summed into the manifest and the StoreInfo."""
    lock_timeout = lock_timeout_default(lock_timeout)
    lock_log_every = positive_seconds(lock_log_every, "lock_log_every")
    table = plan.table
    finishing = time.time()

    def build_time() -> float:
        if shard_seconds is None:
            return max(0.0, time.time() - plan.started_at)
        return max(0.0, shard_seconds + time.time() - finishing)

    def info(count: int, dims: int, build_seconds: float | None, embedded: int | None, from_store: int | None,
             reused: bool) -> StoreInfo:
        seconds = max(0.0, time.time() - plan.started_at)
        return StoreInfo(table, plan.fingerprint, plan.corpus_signature, plan.embedder, plan.chunking, count, dims,
                         seconds, reused=reused, embedder_revision=plan.embedder_revision,
                         build_seconds=build_seconds, chunks_embedded=embedded, chunks_from_store=from_store)

    if plan.complete is not None:
        return info(*plan.complete, reused=True)
    with connect(connection_string, autocommit=True, application_name=f"eval-pipeline ingest {table}") as conn:
        advisory_lock(conn, table, what=f"ingest of {table}", timeout=lock_timeout, log_every=lock_log_every, log=log)
        try:
            done = _manifest_row(conn, table)
            if done is not None:
                log(f"reusing complete table {table} ({done[0]} chunks)")
                return info(*done, reused=True)
            count, dims, embedded, from_store = _check_every_shard_in(conn, plan)
            _finish_table(connection_string, table, dims, count, lock_timeout=lock_timeout,
                          lock_log_every=lock_log_every, log=log)
            built = build_time()
            with conn.transaction():
                conn.execute(
                    f"INSERT INTO {MANIFEST_TABLE} (table_name, fingerprint, corpus_signature, embedder, chunking,"
                    " chunk_count, dims, build_seconds, chunks_embedded, chunks_from_store)"
                    " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
                    (table, plan.fingerprint, plan.corpus_signature, plan.embedder,
                     json.dumps(asdict(plan.chunking)), count, dims, built, embedded, from_store),
                )
                conn.execute(f"DELETE FROM {PROGRESS_TABLE} WHERE table_name = %s", (table,))
            return info(count, dims, built, embedded, from_store, reused=False)
        finally:
            _unlock_quietly(conn, table)


@dataclass(frozen=True)
class _Progress:
    """How far a shard of an unfinished build got: whole batches, counted in the same
    transaction that wrote them."""

    batches_done: int = 0
    chunks_written: int = 0
    dims: int | None = None
    done: bool = False


def chunk_batches(snapshot: CorpusSnapshot, chunking: ChunkingConfig, batch_chunks: int, documents=None):
    """The corpus's chunks in batches of at least `batch_chunks` chunks (the last may be smaller),
    a document's chunks never split between two batches.

    Documents are taken in the signature's order (`CorpusSnapshot.iter_sorted`: doc id order),
    so the batches are the same however the source orders its records (the table's name does
    not depend on that order either), and a resumed build skips exactly the batches an earlier
    one wrote. A spooled snapshot is streamed, and documents are chunked a few at a time: only
    one batch of chunks, and no more of the corpus than that, is ever held.

    `documents` (default: all of them) is a run of them in that order starting at a batch's
    first document (a shard's): a batch ends where it would in the whole corpus's batches."""
    batch: list = []
    documents = snapshot.iter_sorted() if documents is None else iter(documents)
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


def split_contiguous(weights: list[int], parts: int) -> list[tuple[int, int]]:
    """[start, end) ranges cutting `weights` into min(parts, len) contiguous, non-empty runs whose
    sums are as close as the cuts allow to equal (each cut at the prefix sum nearest its share)."""
    parts = max(1, min(parts, len(weights)))
    prefix = list(itertools.accumulate(weights, initial=0))
    total, cuts = prefix[-1], [0]
    for k in range(1, parts):
        target = total * k / parts
        low, high = cuts[-1] + 1, len(weights) - (parts - k)
        cuts.append(min(range(low, high + 1), key=lambda j: (abs(prefix[j] - target), j)))
    cuts.append(len(weights))
    return list(zip(cuts, cuts[1:]))


def _shard_layout(snapshot: CorpusSnapshot, chunking: ChunkingConfig, batch_chunks: int, shards: int, table: str,
                  log) -> list[Shard]:
    """One shard of every document, or (shards > 1) the batches counted by one chunking pass
    and split into contiguous runs: each shard starts at its first batch's first document."""
    if shards == 1:
        return [Shard(0, 1, 0, snapshot.count)]
    started = time.perf_counter()
    sizes = [(sum(1 for c in batch if c.meta["chunk_index"] == 0), len(batch))  # (documents, chunks)
             for batch in chunk_batches(snapshot, chunking, batch_chunks)]
    if not sizes:
        raise IngestError(f"the corpus {snapshot.source} gave no chunk to embed for {table}")
    ranges = split_contiguous([chunks for _, chunks in sizes], shards)
    log(f"{table}: {sum(c for _, c in sizes)} chunks in {len(sizes)} batches counted in "
        f"{time.perf_counter() - started:.1f} s, split into {len(ranges)} shards")
    out, first_doc = [], 0
    for index, (start, end) in enumerate(ranges):
        docs = sum(d for d, _ in sizes[start:end])
        out.append(Shard(index, len(ranges), first_doc, docs, sum(c for _, c in sizes[start:end]), end - start))
        first_doc += docs
    return out


def _shard_documents(snapshot: CorpusSnapshot, shard: Shard):
    """The shard's documents; the rest of a spooled corpus is read through too (not chunked), so
    the spool's check against the signature still runs before the shard's last batch."""
    end = shard.first_doc + shard.docs
    for position, document in enumerate(snapshot.iter_sorted()):
        if shard.first_doc <= position < end:
            yield document


def _manifest_row(conn, table: str) -> tuple[int, int, float | None, int | None, int | None] | None:
    """(chunks, dims, build seconds, chunks embedded, chunks from the vector store) of a complete
    table, else None."""
    return conn.execute(f"SELECT chunk_count, dims, build_seconds, chunks_embedded, chunks_from_store FROM "
                        f"{MANIFEST_TABLE} WHERE table_name = %s", (table,)).fetchone()


def _unlock_quietly(conn, key: str) -> None:
    try:
        advisory_unlock(conn, key)
    except psycopg.Error:
        pass  # the connection is gone (and its session lock with it); keep the original error


def _app_name(plan: IngestPlan, shard: Shard) -> str:
    return f"eval-pipeline ingest {plan.table}" + ("" if shard.count == 1 else f" {shard.name}")


def _rows_and_counted(conn, table: str) -> tuple[int, int]:
    """(rows in the table, chunks its progress rows count), each pair read in one statement and
    so one snapshot: a batch's rows and its count commit together, so they agree even while
    shards are being written."""
    counted_sql = f"(SELECT coalesce(sum(chunks_written), 0) FROM {PROGRESS_TABLE} WHERE table_name = %s)"
    present, counted = conn.execute(f"SELECT to_regclass(%s) IS NOT NULL, {counted_sql}",
                                    (f'public."{table}"', table)).fetchone()
    if not present:
        return 0, counted
    return conn.execute(f'SELECT (SELECT count(*) FROM "{table}"), {counted_sql}', (table,)).fetchone()


def _check_rows_agree(conn, table: str, *, what: str) -> None:
    rows, counted = _rows_and_counted(conn, table)
    if rows != counted:
        raise IngestError(f"{what}: the progress rows count {counted} chunks but the table has {rows}: it was "
                          "changed behind the build's back; materialize pgvector_store again to rebuild it")


def _adopt_or_reset(conn, plan: IngestPlan, *, log, waits: dict) -> None:
    """Keep an unfinished build with the same plan (each shard resumes), else drop the table
    and record this plan's shards. Called under the table's lock; the old shards' locks are
    taken first, so no writer of the old plan is left when its rows are judged or dropped."""
    table = plan.table
    rows = conn.execute(f"SELECT shard, shards, plan, batch_chunks FROM {PROGRESS_TABLE} WHERE table_name = %s"
                        " ORDER BY shard", (table,)).fetchall()
    held = []
    try:
        for shard, *_ in rows:
            advisory_lock(conn, shard_lock_key(table, shard), what=f"ingest of {table} (a writer of shard "
                          f"{shard + 1} of an unfinished build is still running)", **waits)
            held.append(shard)
        reason = None
        if rows:
            sizes, plans = {r[3] for r in rows}, {r[2] for r in rows}
            in_table, counted = _rows_and_counted(conn, table)
            if sizes != {plan.batch_chunks}:
                reason = (f"used batches of {', '.join(map(str, sorted(sizes)))} chunks, this one "
                          f"{plan.batch_chunks}")
            elif plans != {plan.key} or len(rows) != len(plan.shards):
                reason = f"was split into {rows[0][1]} shards, this one into {len(plan.shards)}"
            elif in_table != counted:
                reason = f"counted {counted} chunks but the table has {in_table}"
        if rows and reason is None:
            return
        if reason is not None:
            log(f"an unfinished build of {table} {reason}: building it again")
        # No usable progress: another plan's, absent, or left half-written by code that kept none. Start clean.
        with conn.transaction():
            conn.execute(f'DROP TABLE IF EXISTS "{table}"')
            conn.execute(f"DELETE FROM {PROGRESS_TABLE} WHERE table_name = %s", (table,))
            for s in plan.shards:
                conn.execute(f"INSERT INTO {PROGRESS_TABLE} (table_name, shard, shards, plan, batch_chunks, first_doc,"
                             " docs, planned_chunks) VALUES (%s, %s, %s, %s, %s, %s, %s, %s)",
                             (table, s.index, s.count, plan.key, plan.batch_chunks, s.first_doc, s.docs, s.chunks))
    finally:
        for shard in held:
            _unlock_quietly(conn, shard_lock_key(table, shard))


def _shard_progress(conn, plan: IngestPlan, shard: Shard) -> _Progress:
    row = conn.execute(f"SELECT plan, batches_done, chunks_written, dims, done FROM {PROGRESS_TABLE}"
                       " WHERE table_name = %s AND shard = %s", (plan.table, shard.index)).fetchone()
    if row is None or row[0] != plan.key:
        raise IngestError(f"{shard.label(plan.table)}: the build was planned again since this step's plan (by a run "
                          "with another batch size or shard count, or the table was finished and dropped); "
                          "materialize pgvector_store again")
    return _Progress(row[1], row[2], row[3], row[4])


def _check_every_shard_in(conn, plan: IngestPlan) -> tuple[int, int, int, int]:
    """(chunks, dims, chunks embedded, chunks from the vector store) once every shard of the plan
    is written; else IngestError naming what is missing."""
    table = plan.table
    rows = {r[0]: r[1:] for r in conn.execute(
        f"SELECT shard, plan, done, batches_done, chunks_written, dims, embedded, from_store FROM {PROGRESS_TABLE}"
        " WHERE table_name = %s",
        (table,)).fetchall()}
    missing = []
    for shard in plan.shards:
        row = rows.get(shard.index)
        if row is None or row[0] != plan.key:
            missing.append(f"{shard.name}: planned again by another run")
        elif not row[1]:
            total = f" of {shard.batches}" if shard.batches is not None else ""
            missing.append(f"{shard.name}: {row[2]}{total} batches written")
    if missing:
        raise IngestError(f"{table} cannot be marked complete before every shard is in ({'; '.join(missing)}); "
                          "run the missing shards (re-execute the run's failed steps, or materialize pgvector_store "
                          "again: written batches are kept)")
    if len(rows) != len(plan.shards):
        raise IngestError(f"{table} has progress rows of {len(rows)} shards, its plan {len(plan.shards)}; "
                          "materialize pgvector_store again")
    _check_rows_agree(conn, table, what=table)
    dims = {row[4] for row in rows.values()}
    count = sum(row[3] for row in rows.values())
    if count == 0 or None in dims:
        raise IngestError(f"the corpus gave no chunk to embed for {table}")
    if len(dims) != 1:
        raise IngestError(f"the shards of {table} were embedded with different dimensions {sorted(dims)}")
    return count, dims.pop(), sum(row[5] for row in rows.values()), sum(row[6] for row in rows.values())


def _write_batches(snapshot, plan: IngestPlan, shard: Shard, progress: _Progress, *, connection_string: str,
                   embedder: Embedder, log, reuse: Reuse) -> tuple[int, int]:
    """Embed and write every batch of the shard after `progress`; (chunks the shard holds, batches).
    Each batch's vectors are asked of the vector store first (`reuse` counts what was embedded
    and what came from it)."""
    table, label, batch_chunks = plan.table, shard.label(plan.table), plan.batch_chunks
    count, dims, index = progress.chunks_written, progress.dims, progress.batches_done
    where = "" if shard.count == 1 else f" ({shard.name} of {table})"
    log(f"embedding the chunks of {shard.docs} documents{where} with {embedder.model_id} "
        f"in batches of about {batch_chunks}" + (f", after batch {index}" if index else ""))
    last_log = time.monotonic()
    identity = store_identity(embedder) if plan.reuse_vectors else None
    vector_store = None
    if identity is not None:
        try:
            vector_store = VectorStore(connection_string, identity, embedder.model_id)
        except Exception as exc:
            raise _scrubbed(f"opening the vector store of {label} failed", exc, "nothing is written by this step",
                            connection_string) from (exc if is_clean(exc, connection_string) else None)
    try:
        with connect(connection_string, application_name=_app_name(plan, shard)) as conn:
            batches = chunk_batches(snapshot, plan.chunking, batch_chunks, _shard_documents(snapshot, shard))
            for number, chunks in enumerate(batches):
                if number < progress.batches_done:
                    continue  # written by an earlier run
                what = f"batch {number + 1} of {label}"
                state = (f"{count} chunks in {number} batches are written and the next run resumes after them; "
                         "the table is not marked complete") if number else "nothing is written yet"
                vectors, done = _embed_batch(embedder, chunks, plan.chunking, what, state, connection_string,
                                             vector_store)
                try:
                    if dims is None:
                        dims = vectors[0].count(",") + 1
                        _create_table(connection_string, table, dims, application_name=_app_name(plan, shard))
                    _write_batch(conn, table, chunks, vectors, batches_done=number + 1,
                                 chunks_written=count + len(chunks), shard=shard.index, plan=plan.key, reuse=done)
                except Exception as exc:
                    raise _scrubbed(f"writing {what} failed", exc, state, connection_string) from (
                        exc if is_clean(exc, connection_string) else None)
                reuse.add(done)
                count += len(chunks)
                index = number + 1
                if time.monotonic() - last_log >= PROGRESS_LOG_EVERY:
                    log(f"{label}: {count} chunks written in {index} batches")
                    last_log = time.monotonic()
    finally:
        if vector_store is not None:
            vector_store.close()
    if dims is None:
        raise IngestError(f"the corpus {snapshot.source} gave no chunk to embed for {label}")
    if vector_store is not None:
        log(f"{label}: {reuse.embedded} chunks embedded, {reuse.from_store} from the vector store "
            f"{vector_store.table}")
    return count, index


def _embed_batch(embedder: Embedder, chunks, chunking: ChunkingConfig, what: str, state: str,
                 connection_string: str, vector_store: VectorStore | None) -> tuple[list[str], Reuse]:
    """The batch's vectors in pgvector's text form, from the vector store, or embedded (the
    misses, in one call) and put there; and how many of each."""
    try:
        vectors, done = embed_through_store(embedder, [embedding_text(c, chunking) for c in chunks], vector_store)
    except Exception as exc:
        raise _scrubbed(f"embedding {what} failed", exc, state, connection_string) from (
            exc if is_clean(exc, connection_string) else None)
    if len(vectors) != len(chunks):
        raise IngestError(f"embedder returned {len(vectors)} vectors for {len(chunks)} chunks in {what}; {state}")
    return vectors, done


def _scrubbed(message: str, exc: Exception, state: str, connection_string: str) -> IngestError:
    """IngestError with the original's text scrubbed of the password, and what is left in the
    table; the caller chains the original only when its whole traceback is clean."""
    return IngestError(f"{message} ({error_text(exc, connection_string)}); {state}")


def _create_table(connection_string: str, table: str, dims: int, *, application_name: str) -> None:
    """The store's own table (Haystack's schema and keyword index), vectors kept in the row,
    before any row is written; by the first shard to get here (the others find it), under the
    table's creation lock: CREATE TABLE / INDEX IF NOT EXISTS race between sessions."""
    key = _create_lock_key(table)
    with connect(connection_string, autocommit=True, application_name=application_name) as conn:
        advisory_lock(conn, key, what=f"creating {table}")
        try:
            if not conn.execute("SELECT to_regclass(%s) IS NOT NULL", (f'public."{table}"',)).fetchone()[0]:
                store = open_document_store(connection_string, table, dims, hnsw=False)
                store.count_documents()  # the store creates its table lazily: now, before any row
                store.close()
                _keep_embeddings_in_row(connection_string, table, dims)
        finally:
            _unlock_quietly(conn, key)


def _write_batch(conn, table: str, chunks, vectors, *, batches_done: int, chunks_written: int, shard: int,
                 plan: str, reuse: Reuse) -> None:
    """One batch's rows and its count in the shard's progress row, in one transaction: both or
    neither (and neither if the build was planned again meanwhile)."""
    with conn.transaction():
        with conn.cursor().copy(sql.SQL("COPY {} (id, embedding, content, meta) FROM STDIN").format(
                sql.Identifier(table))) as copy:
            for chunk, vector in zip(chunks, vectors):  # vectors in pgvector's text form
                copy.write_row((chunk.id, vector, chunk.content, json.dumps(chunk.meta)))
        updated = conn.execute(
            f"UPDATE {PROGRESS_TABLE} SET batches_done = %s, chunks_written = %s, dims = %s, updated_at = now(),"
            " embedded = embedded + %s, from_store = from_store + %s"
            " WHERE table_name = %s AND shard = %s AND plan = %s",
            (batches_done, chunks_written, vectors[0].count(",") + 1, reuse.embedded, reuse.from_store, table, shard,
             plan)).rowcount
        if updated != 1:
            raise IngestError(f"{table}: the progress row of shard {shard + 1} is gone (the build was planned again)")


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
    with connect(connection_string, application_name=f"eval-pipeline fetch_chunks {table}") as conn:
        rows = conn.execute(
            sql.SQL("SELECT id, meta->>'doc_id', content FROM {} ORDER BY id").format(sql.Identifier(table))
        ).fetchall()
    return [(r[0], r[1], r[2]) for r in rows]


def fetch_chunk_texts(connection_string: str, table: str, chunk_ids) -> dict[str, str]:
    """{chunk id: content} for the given chunks only (an answer's context: a few per question,
    not the whole table). An id the table does not hold is an error naming it."""
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


def _embedding_array(text: str):
    """pgvector's text form of an embedding as a float32 array."""
    return np.asarray(json.loads(text), dtype=np.float32)


def fetch_chunk_embeddings(connection_string: str, table: str):
    """{chunk id: embedding as a float32 array}; for rerankers that compare candidates (MMR)."""
    with connect(connection_string, application_name=f"eval-pipeline fetch_chunk_embeddings {table}") as conn:
        rows = conn.execute(
            sql.SQL("SELECT id, embedding::text FROM {}").format(sql.Identifier(table))
        ).fetchall()
    return {r[0]: _embedding_array(r[1]) for r in rows}


def fetch_document_chunks(connection_string: str, table: str, doc_ids) -> list[tuple]:
    """(chunk id, doc id, content, embedding as a float32 array or None) of every chunk of
    `doc_ids`, in chunk id order; a document the table does not hold has no row. One query (a
    scan of the table's metadata column) holding only those chunks: what a step needs about a
    few documents (the golds of the questions it ranks), without reading the whole table into
    memory as `fetch_chunks` and `fetch_chunk_embeddings` do."""
    wanted = sorted(set(doc_ids))
    if not wanted:
        return []
    with connect(connection_string, application_name=f"eval-pipeline fetch_document_chunks {table}") as conn:
        rows = conn.execute(
            sql.SQL("SELECT id, meta->>'doc_id', content, embedding::text FROM {} WHERE meta->>'doc_id' = ANY(%s) "
                    "ORDER BY id").format(sql.Identifier(table)), (wanted,)).fetchall()
    return [(r[0], r[1], r[2], _embedding_array(r[3]) if r[3] is not None else None) for r in rows]


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
        _prepare_vector_stores(conn)
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
    # The build's wall time (a sweep reports what each index cost to build, even when reused);
    # added to manifests created before it, NULL for their tables.
    conn.execute(f"ALTER TABLE {MANIFEST_TABLE} ADD COLUMN IF NOT EXISTS build_seconds double precision")
    # What the build embedded and what it took from the vector store (NULL: built before they were counted).
    conn.execute(f"ALTER TABLE {MANIFEST_TABLE} ADD COLUMN IF NOT EXISTS chunks_embedded integer")
    conn.execute(f"ALTER TABLE {MANIFEST_TABLE} ADD COLUMN IF NOT EXISTS chunks_from_store integer")


def _create_progress(conn) -> None:
    """An unfinished build's progress, one row per shard: written with the plan, counted with
    each batch, marked done after the shard's last batch, deleted when the table is marked
    complete. `plan` digests the batch size and every shard's range: a shard writes only under
    the plan it was given."""
    conn.execute(
        f"""CREATE TABLE IF NOT EXISTS {PROGRESS_TABLE} (
            table_name text NOT NULL,
            shard integer NOT NULL,
            shards integer NOT NULL,
            plan text NOT NULL,
            batch_chunks integer NOT NULL,
            first_doc integer NOT NULL,
            docs integer NOT NULL,
            planned_chunks integer,
            batches_done integer NOT NULL DEFAULT 0,
            chunks_written integer NOT NULL DEFAULT 0,
            dims integer,
            done boolean NOT NULL DEFAULT false,
            updated_at timestamptz NOT NULL DEFAULT now(),
            PRIMARY KEY (table_name, shard))"""
    )
    # Chunks the shard's batches embedded, and took from the vector store (added to tables made before).
    conn.execute(f"ALTER TABLE {PROGRESS_TABLE} ADD COLUMN IF NOT EXISTS embedded integer NOT NULL DEFAULT 0")
    conn.execute(f"ALTER TABLE {PROGRESS_TABLE} ADD COLUMN IF NOT EXISTS from_store integer NOT NULL DEFAULT 0")


def storage_bytes(connection_string: str, tables: list[str]) -> dict[str, int]:
    """Each table's size on disk, its TOAST data and indexes (HNSW, GIN) included:
    `pg_total_relation_size`. A table that does not exist is left out."""
    if not tables:
        return {}
    with connect(connection_string, autocommit=True, application_name="eval-pipeline storage") as conn:
        rows = conn.execute("SELECT t, pg_total_relation_size(to_regclass(t)) FROM unnest(%s::text[]) AS t "
                            "WHERE to_regclass(t) IS NOT NULL", (list(tables),)).fetchall()
    return {name: int(size) for name, size in rows}


def chunks_fingerprint(corpus_signature: str, chunking: ChunkingConfig) -> str:
    """What a table's chunks are, whatever embedded them: two tables with one chunks
    fingerprint hold the same chunk ids and texts (the table's fingerprint without the embedder)."""
    return store_fingerprint(corpus_signature, chunking, "(chunks only)")
