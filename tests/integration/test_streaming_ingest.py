"""Ingest streams the corpus in batches and resumes a build that died after the last batch it
wrote: whatever stopped it (an error, a kill in the middle of a write), the finished table is
the one a single uninterrupted build writes."""

import os
import subprocess
import sys
import textwrap

import psycopg
import pytest

from eval_pipeline.corpus.sources import load_corpus
from eval_pipeline.store.ingest import (
    MANIFEST_TABLE,
    PROGRESS_TABLE,
    ChunkingConfig,
    IngestError,
    chunk_documents,
    ingest,
    store_fingerprint,
)
from tests.integration.cli import REPO, HashingEmbedder

pytestmark = pytest.mark.integration

CHUNKING = ChunkingConfig(split_length=30, split_overlap=5)
BATCH = 10


@pytest.fixture(scope="module")
def demo():
    return load_corpus("demo")


@pytest.fixture(scope="module")
def table(demo):
    return f"chunks_{store_fingerprint(demo.signature, CHUNKING, HashingEmbedder.identity)}"


def _forget(uri, table):
    with psycopg.connect(uri, autocommit=True) as conn:
        conn.execute(f'DROP TABLE IF EXISTS "{table}"')
        for bookkeeping in (MANIFEST_TABLE, PROGRESS_TABLE):
            if conn.execute("SELECT to_regclass(%s)", (bookkeeping,)).fetchone()[0]:
                conn.execute(f"DELETE FROM {bookkeeping} WHERE table_name = %s", (table,))


def _rows(uri, table):
    with psycopg.connect(uri) as conn:
        return conn.execute(f'SELECT id, embedding::text, content, meta FROM "{table}" ORDER BY id').fetchall()


def _progress(uri, table):
    with psycopg.connect(uri) as conn:
        return conn.execute(f"SELECT batches_done, chunks_written FROM {PROGRESS_TABLE} WHERE table_name = %s",
                            (table,)).fetchone()


def _build(demo, uri, embedder, batch_chunks=BATCH, log=lambda m: None):
    return ingest(demo, connection_string=uri, embedder=embedder, chunking=CHUNKING, log=log,
                  batch_chunks=batch_chunks)


@pytest.fixture(scope="module")
def reference(demo, pg_uri, table):
    """The table one uninterrupted build in a single batch writes."""
    _forget(pg_uri, table)
    info = _build(demo, pg_uri, HashingEmbedder(), batch_chunks=10**6)
    rows = _rows(pg_uri, table)
    _forget(pg_uri, table)
    assert len(rows) == info.chunk_count == len(chunk_documents(demo, CHUNKING))
    return rows


@pytest.fixture
def clean(pg_uri, table):
    _forget(pg_uri, table)
    yield
    _forget(pg_uri, table)


class FailsOnCall(HashingEmbedder):
    def __init__(self, failing_call):
        super().__init__()
        self.failing_call = failing_call

    def embed(self, texts):
        if len(self.calls) + 1 == self.failing_call:
            self.calls.append(0)
            raise RuntimeError("CUDA out of memory (injected)")
        return super().embed(texts)


def test_the_embedder_sees_one_batch_at_a_time_and_the_table_is_the_same(demo, pg_uri, table, reference, clean):
    embedder = HashingEmbedder()
    info = _build(demo, pg_uri, embedder)
    longest = max(c.meta["chunk_index"] for c in chunk_documents(demo, CHUNKING)) + 1
    assert len(embedder.calls) >= len(reference) // (BATCH + longest)
    assert max(embedder.calls) < BATCH + longest  # a batch ends at the first document boundary past BATCH
    assert sum(embedder.calls) == info.chunk_count
    assert _rows(pg_uri, table) == reference
    assert _progress(pg_uri, table) is None  # complete: the progress row is gone with the manifest row


def test_a_failed_build_resumes_after_its_last_written_batch(demo, pg_uri, table, reference, clean):
    first = FailsOnCall(3)
    with pytest.raises(IngestError, match=r"embedding batch 3 of chunks_\w+ failed \(.*CUDA out of memory.*\); "
                                          r"\d+ chunks in 2 batches are written and the next run resumes after them"):
        _build(demo, pg_uri, first)
    written = sum(first.calls)
    assert _progress(pg_uri, table) == (2, written)
    assert len(_rows(pg_uri, table)) == written
    with psycopg.connect(pg_uri) as conn:
        assert conn.execute(f"SELECT 1 FROM {MANIFEST_TABLE} WHERE table_name = %s", (table,)).fetchone() is None

    again, lines = HashingEmbedder(), []
    info = _build(demo, pg_uri, again, log=lines.append)
    assert not info.reused and info.chunk_count == len(reference)
    assert sum(again.calls) == len(reference) - written  # the two written batches are not embedded again
    assert any(f"resuming the build of {table} after batch 2 ({written} chunks already written)" in m for m in lines)
    assert _rows(pg_uri, table) == reference


def test_a_build_killed_in_the_middle_of_a_write_keeps_only_whole_batches(demo, pg_uri, table, reference, clean):
    child = textwrap.dedent(f"""
        import os, signal
        import eval_pipeline.store.ingest as ingest_module
        from eval_pipeline.corpus.sources import load_corpus
        from eval_pipeline.store.ingest import ChunkingConfig, ingest
        from psycopg import sql
        from tests.integration.cli import HashingEmbedder

        real = ingest_module._write_batch

        def dies_half_way(conn, table, chunks, vectors, *, batches_done, chunks_written, **shard):
            if batches_done < 3:
                return real(conn, table, chunks, vectors, batches_done=batches_done, chunks_written=chunks_written,
                            **shard)
            with conn.transaction():
                with conn.cursor().copy(sql.SQL("COPY {{}} (id, embedding, content, meta) FROM STDIN").format(
                        sql.Identifier(table))) as copy:
                    for chunk, vector in list(zip(chunks, vectors))[: len(chunks) // 2]:
                        copy.write_row((chunk.id, str(vector).replace(" ", ""), chunk.content, "{{}}"))
                os.kill(os.getpid(), signal.SIGKILL)

        ingest_module._write_batch = dies_half_way
        ingest(load_corpus("demo"), connection_string={pg_uri!r}, embedder=HashingEmbedder(),
               chunking=ChunkingConfig(split_length=30, split_overlap=5), log=print, batch_chunks={BATCH})
    """)
    proc = subprocess.run([sys.executable, "-c", child], cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)},
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == -9, proc.stderr[-2000:]
    batches, written = _progress(pg_uri, table)
    assert batches == 2 and len(_rows(pg_uri, table)) == written  # the half-written third batch rolled back

    again = HashingEmbedder()
    info = _build(demo, pg_uri, again)
    assert sum(again.calls) == info.chunk_count - written
    assert _rows(pg_uri, table) == reference


def test_a_build_with_another_batch_size_starts_again(demo, pg_uri, table, reference, clean):
    with pytest.raises(IngestError):
        _build(demo, pg_uri, FailsOnCall(3))
    again, lines = HashingEmbedder(), []
    _build(demo, pg_uri, again, batch_chunks=BATCH + 5, log=lines.append)
    assert sum(again.calls) == len(reference)  # other batches: what was written cannot be skipped by batch
    assert any(f"used batches of {BATCH} chunks, this one {BATCH + 5}: building it again" in m for m in lines)
    assert _rows(pg_uri, table) == reference


def test_a_progress_row_that_disagrees_with_the_table_starts_again(demo, pg_uri, table, reference, clean):
    with pytest.raises(IngestError):
        _build(demo, pg_uri, FailsOnCall(3))
    with psycopg.connect(pg_uri, autocommit=True) as conn:  # a row lost behind the progress row's back
        conn.execute(f'DELETE FROM "{table}" WHERE id = (SELECT min(id) FROM "{table}")')
    again, lines = HashingEmbedder(), []
    _build(demo, pg_uri, again, log=lines.append)
    assert sum(again.calls) == len(reference)
    assert any("building it again" in m for m in lines)
    assert _rows(pg_uri, table) == reference


@pytest.mark.parametrize("bad", [0, -1, 2.5, True, "10"])
def test_batch_chunks_is_checked_before_anything_is_read(demo, pg_uri, bad):
    with pytest.raises(ValueError, match=rf"batch_chunks must be an integer >= 1, got {bad!r}"):
        _build(demo, pg_uri, HashingEmbedder(), batch_chunks=bad)
