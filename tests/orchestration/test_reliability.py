"""Faults injected into real runs, concurrent runs, hostile input and secrets."""

import json
import os
import re
import signal
import stat
import time
from pathlib import Path

import psycopg
import pytest

from eval_pipeline.corpus.sources import CorpusError, load_corpus
from eval_pipeline.scoring.variant import score_variant, summarize
from eval_pipeline.config.sweep import parse_sweep
from eval_pipeline.ranking.sweep import Sweep
from eval_pipeline.store.database import EmbeddedPostgres
from eval_pipeline.store.ingest import MANIFEST_TABLE, ChunkingConfig, IngestError, fetch_chunks, ingest
from tests.integration.cli import CountingEmbedder, metrics_table, start_job, tiny_job_config

pytestmark = pytest.mark.integration

CHUNKING = ChunkingConfig(split_length=30, split_overlap=5)


@pytest.fixture
def own_pg(tmp_path):
    """A server of its own: these tests stop it on purpose."""
    pg = EmbeddedPostgres(tmp_path / "own")
    pg.start()
    yield pg
    pg.stop()


class StopsDatabase(CountingEmbedder):
    """The real embedder, stopping the database right after it has embedded."""

    def __init__(self, inner, pg):
        super().__init__(inner)
        self.pg = pg

    def embed(self, texts):
        vectors = super().embed(texts)
        self.pg.stop()
        return vectors


class FailingEmbedder(StopsDatabase):
    def embed(self, texts):
        raise RuntimeError("CUDA out of memory (injected)")


def _manifest_rows(uri):
    with psycopg.connect(uri) as conn:
        return conn.execute(f"SELECT table_name FROM {MANIFEST_TABLE}").fetchall()


def test_database_gone_mid_ingest(own_pg, local_embedder, tiny_snapshot):
    uri = own_pg.uri("eval")
    with pytest.raises(IngestError, match=r"writing batch 1 of chunks_\w+ failed \(.*could not connect.*\); nothing is written yet"):
        ingest(tiny_snapshot, connection_string=uri, embedder=StopsDatabase(local_embedder, own_pg),
               chunking=CHUNKING, log=lambda m: None)
    assert own_pg.pid is None
    uri = own_pg.uri("eval")  # the next run starts the server again
    assert _manifest_rows(uri) == []  # nothing looks complete
    info = ingest(tiny_snapshot, connection_string=uri, embedder=local_embedder, chunking=CHUNKING, log=lambda m: None)
    assert not info.reused and len(fetch_chunks(uri, info.table)) == info.chunk_count
    assert _manifest_rows(uri) == [(info.table,)]


def test_embedder_failure_marks_nothing_complete(own_pg, local_embedder, tiny_snapshot):
    uri = own_pg.uri("eval")
    with pytest.raises(IngestError, match=r"embedding batch 1 of chunks_\w+ failed \(.*CUDA out of memory.*\); nothing is written yet"):
        ingest(tiny_snapshot, connection_string=uri, embedder=FailingEmbedder(local_embedder, own_pg),
               chunking=CHUNKING, log=lambda m: None)
    assert _manifest_rows(uri) == []


def test_database_gone_mid_retrieval(own_pg, local_embedder, tiny_snapshot, tiny_questions):
    """Questions after the outage are errored, counted and scored as misses; nothing is
    reported as if complete."""
    uri = own_pg.uri("eval")
    info = ingest(tiny_snapshot, connection_string=uri, embedder=local_embedder, chunking=CHUNKING, log=lambda m: None)
    questions = tiny_questions.questions
    embeddings = dict(zip([q.qid for q in questions], local_embedder.embed([q.question for q in questions])))

    class OutageAfterTwoQuestions(Sweep):
        def leg_hits(self, name, top_k, q, settings=None):
            if q.qid == questions[2].qid and own_pg.pid is not None:
                own_pg.stop()
            return super().leg_hits(name, top_k, q, settings)

    sweep = OutageAfterTwoQuestions(snapshot=tiny_snapshot, connection_string=uri, table=info.table,
                                    query_embeddings=embeddings, embed_ms_per_query=0.0)
    (variant,) = parse_sweep({"variants": ["hybrid"]}).variants
    results = sweep.run_variant(variant, questions)
    assert len(results) == len(questions)
    assert results["error"].iloc[:2].isna().all() and results["error"].iloc[2:].notna().all()
    summary = summarize({"hybrid": score_variant(results, questions)}).iloc[0]
    assert summary["n_errored"] == len(questions) - 2
    assert summary["hit@1"] <= 2 / 5  # errored answerable questions count as misses

    from assets import no_errored_questions

    check = no_errored_questions(report={"summary": summarize({"hybrid": score_variant(results, questions)})})
    assert not check.passed and check.metadata["errored_total"].value == len(questions) - 2


def test_socket_directory_is_private(embedded_pg):
    pgdata = embedded_pg.pgdata
    mode = stat.S_IMODE(pgdata.stat().st_mode)
    assert mode & 0o077 == 0, oct(mode)  # only the server's user can enter
    assert (pgdata / ".s.PGSQL.5432").exists()
    with psycopg.connect(embedded_pg.uri("eval")) as conn:
        assert conn.execute("SHOW listen_addresses").fetchone()[0] == ""


# --- hostile input ------------------------------------------------------------------------

def test_huge_document_is_refused_or_skipped(tmp_path):
    folder = tmp_path / "kb"
    folder.mkdir()
    (folder / "ok.md").write_text("# Fine\nA normal page about the coffee machine.")
    (folder / "dump.txt").write_text("log line " * 600_000)  # 5.4 MB: over the cap by its characters
    with pytest.raises(CorpusError, match=r"doc 'dump': 5,400,000 characters, more than max_document_chars"):
        load_corpus("folder", str(folder))
    snapshot = load_corpus("folder", str(folder), lenient=True)
    assert [d.doc_id for d in snapshot.documents] == ["ok"]
    assert [s.location for s in snapshot.skipped] == ["doc 'dump'"]
    (folder / "dump.txt").write_text("log line " * 6_000_000)  # ~54 MB: refused from its size, before it is read
    with pytest.raises(CorpusError, match=r"dump.txt: 54,000,000 bytes on disk, more than 4 × max_document_chars"):
        load_corpus("folder", str(folder))
    snapshot = load_corpus("folder", str(folder), lenient=True)
    assert [d.doc_id for d in snapshot.documents] == ["ok"]
    assert [s.location for s in snapshot.skipped] == [str(folder / "dump.txt")]


def test_hundred_thousand_tiny_documents(tmp_path):
    path = tmp_path / "tiny.jsonl"
    with open(path, "w") as fh:
        for i in range(100_000):
            fh.write(json.dumps({"doc_id": f"d{i}", "title": "", "content": f"note {i}"}) + "\n")
    snapshot = load_corpus("jsonl", str(path))
    assert len(snapshot.documents) == 100_000 and len(snapshot.signature) == 16


def test_ids_with_quotes_and_sql_reach_postgres_as_data(own_pg, local_embedder, tmp_path):
    path = tmp_path / "evil.jsonl"
    ids = ["it's", 'say "hi"', "a/b\\c", "x'); DROP TABLE eval_ingest_manifest;--", "ünïcødé"]
    path.write_text("".join(json.dumps({"doc_id": i, "title": i, "content": f"text about topic {n} " * 5}) + "\n"
                            for n, i in enumerate(ids)))
    snapshot = load_corpus("jsonl", str(path))
    uri = own_pg.uri("eval")
    info = ingest(snapshot, connection_string=uri, embedder=local_embedder, chunking=CHUNKING, log=lambda m: None)
    assert {doc for _, doc, _ in fetch_chunks(uri, info.table)} == set(ids)
    assert _manifest_rows(uri) == [(info.table,)]  # the manifest table survived


# --- whole-job faults: SIGKILL, concurrency, secrets --------------------------------------

@pytest.mark.parametrize("step", ['"pgvector_store.ingest_shard[', '"ranked_results.rank_variants['])
def test_sigkill_then_rerun_gives_the_same_metrics(tmp_path, job_env, clean_run, step):
    clean_run = clean_run.get()  # a fresh state dir of its own, the session's: shared with test_parallel.py
    assert clean_run.code == 0, clean_run.log[-3000:]

    env = job_env("state")  # cold, like a first nightly run
    killed = start_job(tmp_path, "killed", env, tiny_job_config(tmp_path / "killed"))
    marker = f"Started execution of step {step}"
    deadline = time.monotonic() + 300
    while marker not in (tmp_path / "killed.log").read_text():
        assert killed.poll() is None and time.monotonic() < deadline, "the step never started"
        time.sleep(0.05)
    os.killpg(killed.pid, signal.SIGKILL)
    killed.wait(timeout=60)
    assert not (tmp_path / "killed" / "results.md").exists()

    # forked: the run it is compared with, the clean run, is a new process (shared_runs.make_clean_run),
    # so the two still have different string-hash seeds (tests/job_zygote.py)
    rerun = start_job(tmp_path, "rerun", env, tiny_job_config(tmp_path / "rerun"))
    assert rerun.wait(timeout=600) == 0, (tmp_path / "rerun.log").read_text()[-3000:]
    assert metrics_table(tmp_path / "rerun") == metrics_table(clean_run.results)


def test_two_runs_at_once(tmp_path, job_env):
    env = job_env("state")  # both start cold and race for the same table
    a = start_job(tmp_path, "a", env, tiny_job_config(tmp_path / "a"))
    b = start_job(tmp_path, "b", env, tiny_job_config(tmp_path / "b"), fresh=True)  # another hash seed than a
    assert a.wait(timeout=600) == 0, (tmp_path / "a.log").read_text()[-3000:]
    assert b.wait(timeout=600) == 0, (tmp_path / "b.log").read_text()[-3000:]
    assert metrics_table(tmp_path / "a") == metrics_table(tmp_path / "b")
    logs = (tmp_path / "a.log").read_text() + (tmp_path / "b.log").read_text()
    assert len(re.findall(r"embedding the chunks of 5 documents", logs)) == 1  # one writer per table
    assert logs.count("reusing complete table") == 1


def test_secrets_never_leave_the_environment(tmp_path, job_env, embedded_pg):
    """A recognizable fake key, used for real against the local LLM server, appears nowhere."""
    from tests.fake_llm import backtranslation_chat
    from tests.openai_stub import OpenAIStub

    secret = "sk-FAKE-SECRET-7f3a9c1e5b"
    with OpenAIStub(chat=backtranslation_chat) as stub:
        env = job_env("state", OPENAI_API_KEY=secret, OPENAI_BASE_URL=stub.base_url, EVAL_PIPELINE_LLM_MODEL="fake-model")
        state = Path(env["EVAL_PIPELINE_STATE_DIR"])
        job = start_job(tmp_path, "secret", env, tiny_job_config(tmp_path / "results", source="generate", k=2))
        assert job.wait(timeout=600) == 0, (tmp_path / "secret.log").read_text()[-3000:]
        auth = {k.lower(): v for k, v in stub.chat_requests()[0]["headers"].items()}["authorization"]
        assert auth == f"Bearer {secret}"  # the key was really used

    hits = []
    for root in (tmp_path, state):
        for path in root.rglob("*"):
            if path.is_file() and "pgdata" not in path.parts and secret.encode() in path.read_bytes():
                hits.append(str(path))
    for uri in (embedded_pg.uri("dagster"), EmbeddedPostgres(state).uri("eval")):
        with psycopg.connect(uri) as conn:
            tables = [r[0] for r in conn.execute(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = 'public'").fetchall()]
            for table in tables:
                found = conn.execute(
                    psycopg.sql.SQL("SELECT count(*) FROM {} t WHERE t::text LIKE %s").format(psycopg.sql.Identifier(table)),
                    (f"%{secret}%",)).fetchone()[0]
                if found:
                    hits.append(f"{uri}: {table}")
    assert hits == []


def test_first_ingests_racing_on_a_fresh_database_all_succeed(embedded_pg):
    """Two cold runs started together both find the vector extension and the manifest missing;
    creating them is serialized, so neither fails with a catalog unique violation."""
    import threading

    from eval_pipeline.store.ingest import _prepare_database

    name = f"race_{os.getpid()}_{int(time.time() * 1000) % 100000}"
    uri = embedded_pg.uri(name)
    errors, barrier = [], threading.Barrier(6)

    def prepare():
        try:
            with psycopg.connect(uri, autocommit=True) as conn:
                barrier.wait(timeout=30)
                _prepare_database(conn)
        except Exception as exc:  # collected: an assertion in a thread would be lost
            errors.append(exc)

    threads = [threading.Thread(target=prepare) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert errors == []
    with psycopg.connect(uri) as conn:
        assert conn.execute("SELECT count(*) FROM pg_extension WHERE extname = 'vector'").fetchone()[0] == 1
        assert conn.execute("SELECT to_regclass(%s)", (MANIFEST_TABLE,)).fetchone()[0] is not None
