"""No silent waits: a step waiting for a lock says who holds it, and gives up saying what to do.

The Postgres advisory locks of ingest (per table, and the one around preparing the database)
and of `ensure_tsvector_column`, and the question cache's flock."""

import json
import os
import socket
import subprocess
import sys
import textwrap
import time

import psycopg
import pytest

from eval_pipeline.questions.cache import CacheLockedError, QuestionCache
from eval_pipeline.store.database import LockTimeoutError, advisory_lock, connect, lock_holders
from eval_pipeline.store.ingest import MANIFEST_TABLE, ChunkingConfig, ingest, store_fingerprint

pytestmark = pytest.mark.integration

CHUNKING = ChunkingConfig(split_length=30, split_overlap=5)


class NeverEmbeds:
    """Ingest must give up waiting before it embeds anything."""

    model_id = identity = "never-embeds"
    revision = "none"

    def embed(self, texts):
        raise AssertionError("ingest embedded although it never got the lock")


def _hold(uri: str, key: str, application_name: str):
    conn = psycopg.connect(uri, autocommit=True, application_name=application_name)
    assert conn.execute("SELECT pg_try_advisory_lock(hashtext(%s))", (key,)).fetchone()[0]
    return conn


@pytest.mark.integration
def test_ingest_waiting_for_the_table_lock_logs_the_holder_and_gives_up(pg_uri, tiny_snapshot):
    table = f"chunks_{store_fingerprint(tiny_snapshot.signature, CHUNKING, NeverEmbeds.identity)}"
    holder = _hold(pg_uri, table, "other-run-holding-the-table")
    holder_pid = holder.info.backend_pid
    lines = []
    started = time.monotonic()
    try:
        with pytest.raises(LockTimeoutError) as info:
            ingest(tiny_snapshot, connection_string=pg_uri, embedder=NeverEmbeds(), chunking=CHUNKING,
                   log=lines.append, lock_timeout=2, lock_log_every=0.5)
    finally:
        holder.close()
    assert time.monotonic() - started < 15
    message = str(info.value)
    assert info.value.holder_pid == holder_pid
    assert table in message and f"pid {holder_pid}" in message and "other-run-holding-the-table" in message
    assert f"pg_terminate_backend({holder_pid})" in message and "wait for it to finish" in message
    waiting = [line for line in lines if "waiting" in line]
    assert waiting, lines
    assert all(f"pid {holder_pid}" in line and "other-run-holding-the-table" in line for line in waiting)


@pytest.mark.integration
def test_preparing_the_database_lock_is_bounded_too(pg_uri, tiny_snapshot):
    holder = _hold(pg_uri, MANIFEST_TABLE, "stuck-preparer")
    lines = []
    try:
        with pytest.raises(LockTimeoutError, match=rf"preparing the database.*pid {holder.info.backend_pid}"):
            ingest(tiny_snapshot, connection_string=pg_uri, embedder=NeverEmbeds(), chunking=CHUNKING,
                   log=lines.append, lock_timeout=1, lock_log_every=0.3)
    finally:
        holder.close()
    assert any("stuck-preparer" in line for line in lines), lines


@pytest.mark.integration
def test_lock_is_taken_once_the_holder_lets_go_and_names_our_connection(pg_uri):
    key = f"test-waits-{os.getpid()}"
    holder = _hold(pg_uri, key, "short-holder")
    lines = []
    with connect(pg_uri, autocommit=True, application_name="eval-pipeline waiter") as conn:
        import threading

        threading.Timer(0.8, holder.close).start()
        waited = advisory_lock(conn, key, what="test", timeout=20, log_every=0.3, log=lines.append, poll=0.1)
        assert 0.5 < waited < 15
        with psycopg.connect(pg_uri, autocommit=True) as other:
            (holder_info,) = lock_holders(other, key)
            assert holder_info["pid"] == conn.info.backend_pid
            assert holder_info["application_name"] == "eval-pipeline waiter"
    assert any("short-holder" in line for line in lines), lines


@pytest.mark.integration
def test_ingest_names_its_connections(pg_uri, tiny_snapshot, local_embedder):
    """While ingest holds the table lock, another session can see who it is."""
    seen = []

    class Peeks:
        model_id, identity, revision = local_embedder.model_id, local_embedder.identity, local_embedder.revision

        def embed(self, texts):
            with psycopg.connect(pg_uri, autocommit=True) as other:
                seen.extend(other.execute(
                    "SELECT application_name FROM pg_stat_activity WHERE application_name LIKE 'eval-pipeline%%'"
                ).fetchall())
            return local_embedder.embed(texts)

    chunking = ChunkingConfig(split_length=29, split_overlap=4)  # a table no other test builds
    ingest(tiny_snapshot, connection_string=pg_uri, embedder=Peeks(), chunking=chunking, log=lambda m: None,
           lock_timeout=60)
    table = f"chunks_{store_fingerprint(tiny_snapshot.signature, chunking, local_embedder.identity)}"
    assert (f"eval-pipeline ingest {table}",) in seen


def test_ingest_validates_lock_settings_before_connecting(tiny_snapshot):
    with pytest.raises(ValueError, match="lock_timeout must be a number of seconds > 0"):
        ingest(tiny_snapshot, connection_string="postgresql://u:p@127.0.0.1:1/x", embedder=NeverEmbeds(),
               chunking=CHUNKING, lock_timeout=0)
    with pytest.raises(ValueError, match="lock_log_every must be a number of seconds > 0"):
        ingest(tiny_snapshot, connection_string="postgresql://u:p@127.0.0.1:1/x", embedder=NeverEmbeds(),
               chunking=CHUNKING, lock_log_every=-1)


# --- the question cache's flock -------------------------------------------------------

def test_question_cache_wait_logs_the_holder_and_times_out_saying_what_to_do(tmp_path):
    path = tmp_path / "cache.jsonl"
    holder = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import sys, time
        from eval_pipeline.questions.cache import QuestionCache
        with QuestionCache({str(path)!r}):
            print("held", flush=True)
            time.sleep(60)
    """)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        recorded = json.loads((tmp_path / "cache.jsonl.lock").read_text())
        assert recorded["pid"] == holder.pid and recorded["host"] == socket.gethostname()
        lines = []
        started = time.monotonic()
        with pytest.raises(CacheLockedError) as info:
            QuestionCache(path, lock_timeout=1.5, lock_log_every=0.4, log=lines.append).open()
        assert time.monotonic() - started < 15
    finally:
        holder.kill()
        holder.wait()
    message = str(info.value)
    assert f"pid {holder.pid}" in message and socket.gethostname() in message
    assert "wait for it" in message.lower() and "lock_timeout" in message
    assert lines and all(f"pid {holder.pid}" in line for line in lines), lines
    with QuestionCache(path, lock_timeout=5) as cache:  # released when the holder died
        assert cache.records() == []
    assert json.loads((tmp_path / "cache.jsonl.lock").read_text() or "{}") == {}  # cleared on close


def test_question_cache_second_fd_in_this_process(tmp_path):
    path = tmp_path / "cache.jsonl"
    lines = []
    with QuestionCache(path):
        with pytest.raises(CacheLockedError, match=rf"pid {os.getpid()}"):
            QuestionCache(path, lock_timeout=0.6, lock_log_every=0.2, log=lines.append).open()
    assert any(f"pid {os.getpid()}" in line for line in lines), lines
    with pytest.raises(ValueError, match="lock_log_every"):
        QuestionCache(path, lock_log_every=0)
    with pytest.raises(ValueError, match="lock_timeout"):
        QuestionCache(path, lock_timeout=-1)
