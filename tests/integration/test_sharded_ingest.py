"""Ingest in shards: each shard (a contiguous run of the build's batches) chunked, embedded and
written by its own step into the same table, the table marked complete only when every shard
is in. The table is the one a one-step ingest writes; a failed or killed shard is run again
alone and no row is written twice."""

import json
import os
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import numpy as np
import psycopg
import pytest

from eval_pipeline.corpus.sources import load_corpus
from eval_pipeline.store.ingest import (
    MANIFEST_TABLE,
    PROGRESS_TABLE,
    ChunkingConfig,
    IngestError,
    finish_ingest,
    ingest,
    ingest_shard,
    plan_ingest,
    split_contiguous,
    store_fingerprint,
)
from tests.integration.cli import FIXTURES, REPO, HashingEmbedder

pytestmark = pytest.mark.integration

CHUNKING = ChunkingConfig(split_length=30, split_overlap=5)
BATCH = 10  # the demo corpus: 494 chunks in 34 batches


@pytest.fixture(scope="module")
def demo():
    return load_corpus("demo")


def _table(snapshot, embedder):
    return f"chunks_{store_fingerprint(snapshot.signature, CHUNKING, embedder.identity)}"


def _forget(uri, table):
    with psycopg.connect(uri, autocommit=True) as conn:
        conn.execute(f'DROP TABLE IF EXISTS "{table}"')
        for bookkeeping in (MANIFEST_TABLE, PROGRESS_TABLE):
            if conn.execute("SELECT to_regclass(%s)", (bookkeeping,)).fetchone()[0]:
                conn.execute(f"DELETE FROM {bookkeeping} WHERE table_name = %s", (table,))


def _rows(uri, table):
    with psycopg.connect(uri) as conn:
        return conn.execute(f'SELECT id, embedding::text, content, meta FROM "{table}" ORDER BY id').fetchall()


def _complete(uri, table):
    with psycopg.connect(uri) as conn:
        return conn.execute(f"SELECT chunk_count FROM {MANIFEST_TABLE} WHERE table_name = %s", (table,)).fetchone()


def _same_table(rows, reference):
    """Same ids, content and metadata; embeddings equal to 1e-6."""
    assert [r[0] for r in rows] == [r[0] for r in reference]
    assert [(r[2], r[3]) for r in rows] == [(r[2], r[3]) for r in reference]
    got = np.array([json.loads(r[1]) for r in rows])
    want = np.array([json.loads(r[1]) for r in reference])
    assert got.shape == want.shape and np.abs(got - want).max() <= 1e-6


def _quiet(**kwargs):
    return {"connection_string": kwargs.pop("uri"), "log": kwargs.pop("log", lambda m: None), **kwargs}


class Renamed:
    """The same embedder under another identity: the same vectors in a table of its own."""

    def __init__(self, inner, suffix):
        self.inner, self.suffix, self.calls = inner, suffix, []

    model_id = property(lambda self: self.inner.model_id)
    revision = property(lambda self: self.inner.revision)
    identity = property(lambda self: f"{self.inner.identity}+{self.suffix}")

    def warm_up(self):
        self.inner.warm_up()

    def embed(self, texts):
        self.calls.append(len(texts))
        return self.inner.embed(texts)


class FailsOnCall(HashingEmbedder):
    def __init__(self, failing_call):
        super().__init__()
        self.failing_call = failing_call

    def embed(self, texts):
        if len(self.calls) + 1 == self.failing_call:
            self.calls.append(0)
            raise RuntimeError("the embedding server went away (injected)")
        return super().embed(texts)


@pytest.fixture
def hashed(demo, pg_uri):
    """The table of the hashing embedder, forgotten before and after; and its one-step rows."""
    table = _table(demo, HashingEmbedder)
    _forget(pg_uri, table)
    ingest(demo, embedder=HashingEmbedder(), chunking=CHUNKING, batch_chunks=BATCH, **_quiet(uri=pg_uri))
    reference = _rows(pg_uri, table)
    _forget(pg_uri, table)
    yield table, reference
    _forget(pg_uri, table)


def test_split_contiguous_cuts_near_equal_runs():
    assert split_contiguous([5, 5, 5, 5], 2) == [(0, 2), (2, 4)]
    assert split_contiguous([1, 1, 1], 5) == [(0, 1), (1, 2), (2, 3)]  # never an empty shard
    assert split_contiguous([9], 1) == [(0, 1)]
    assert split_contiguous([10, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1], 2) == [(0, 1), (1, 11)]


def test_three_shards_write_the_table_a_one_step_ingest_writes(tiny_snapshot, pg_uri, local_embedder):
    """The real model, batches of 4 chunks: the tiny corpus's 10 chunks in 3 batches, 3 shards."""
    one, three = Renamed(local_embedder, "one-step"), Renamed(local_embedder, "sharded")
    tables = [_table(tiny_snapshot, one), _table(tiny_snapshot, three)]
    for table in tables:
        _forget(pg_uri, table)
    try:
        reference = ingest(tiny_snapshot, embedder=one, chunking=CHUNKING, batch_chunks=4, **_quiet(uri=pg_uri))
        lines = []
        info = ingest(tiny_snapshot, embedder=three, chunking=CHUNKING, batch_chunks=4, shards=3,
                      **_quiet(uri=pg_uri, log=lines.append))
        assert any("split into 3 shards" in line for line in lines), lines
        assert len(three.calls) == 3 and sum(three.calls) == info.chunk_count == reference.chunk_count
        assert three.calls == one.calls  # the same batches, each embedded once
        _same_table(_rows(pg_uri, tables[1]), _rows(pg_uri, tables[0]))
        assert _complete(pg_uri, tables[1]) == (info.chunk_count,)
    finally:
        for table in tables:
            _forget(pg_uri, table)


def test_shards_written_at_once_give_the_same_table(demo, pg_uri, hashed):
    table, reference = hashed
    plan = plan_ingest(demo, embedder=HashingEmbedder(), chunking=CHUNKING, batch_chunks=BATCH, shards=4,
                       **_quiet(uri=pg_uri))
    assert len(plan.shards) == 4
    errors = []

    def write(shard):
        try:
            ingest_shard(demo, plan, shard, embedder=HashingEmbedder(), **_quiet(uri=pg_uri))
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(shard,)) for shard in plan.shards]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert errors == []
    info = finish_ingest(plan, **_quiet(uri=pg_uri))
    assert not info.reused and info.chunk_count == len(reference)
    assert _rows(pg_uri, table) == reference


def test_a_failed_shard_is_run_again_alone_and_nothing_is_written_twice(demo, pg_uri, hashed):
    table, reference = hashed
    plan = plan_ingest(demo, embedder=HashingEmbedder(), chunking=CHUNKING, batch_chunks=BATCH, shards=3,
                       **_quiet(uri=pg_uri))
    first, failing, last = plan.shards
    ingest_shard(demo, plan, first, embedder=HashingEmbedder(), **_quiet(uri=pg_uri))
    with pytest.raises(IngestError, match=rf"embedding batch 3 of {table} shard 2/3 failed .*injected.*; \d+ chunks "
                                          "in 2 batches are written and the next run resumes after them"):
        ingest_shard(demo, plan, failing, embedder=FailsOnCall(3), **_quiet(uri=pg_uri))
    ingest_shard(demo, plan, last, embedder=HashingEmbedder(), **_quiet(uri=pg_uri))
    with pytest.raises(IngestError, match=rf"{table} cannot be marked complete before every shard is in "
                                          rf"\(shard 2/3: 2 of {failing.batches} batches written\)"):
        finish_ingest(plan, **_quiet(uri=pg_uri))
    assert _complete(pg_uri, table) is None  # incomplete: nothing downstream may use it

    # Run again: only the failed shard embeds, and only after its two written batches.
    again, lines = [HashingEmbedder() for _ in plan.shards], []
    for shard, embedder in zip(plan.shards, again):
        ingest_shard(demo, plan, shard, embedder=embedder, **_quiet(uri=pg_uri, log=lines.append))
    assert sum(again[0].calls) == 0 and sum(again[2].calls) == 0
    assert sum(again[1].calls) == failing.chunks - _first_batches(demo, failing, 2)
    assert any(f"resuming the build of {table} shard 2/3 after batch 2" in line for line in lines), lines
    assert any(f"{table} shard 1/3 is already written" in line for line in lines), lines
    info = finish_ingest(plan, **_quiet(uri=pg_uri))
    rows = _rows(pg_uri, table)
    assert len(rows) == len({r[0] for r in rows}) == info.chunk_count == len(reference)
    assert rows == reference


def test_finishing_before_every_shard_is_in_is_refused(demo, pg_uri, hashed):
    table, _ = hashed
    plan = plan_ingest(demo, embedder=HashingEmbedder(), chunking=CHUNKING, batch_chunks=BATCH, shards=3,
                       **_quiet(uri=pg_uri))
    ingest_shard(demo, plan, plan.shards[1], embedder=HashingEmbedder(), **_quiet(uri=pg_uri))
    with pytest.raises(IngestError) as refused:
        finish_ingest(plan, **_quiet(uri=pg_uri))
    message = str(refused.value)
    assert f"{table} cannot be marked complete before every shard is in" in message
    assert f"shard 1/3: 0 of {plan.shards[0].batches} batches written" in message
    assert f"shard 3/3: 0 of {plan.shards[2].batches} batches written" in message and "shard 2/3" not in message
    assert "materialize pgvector_store again" in message
    assert _complete(pg_uri, table) is None


def test_a_killed_shard_resumes_alone_under_the_same_plan(demo, pg_uri, hashed):
    """A shard's process killed in the middle of a batch's write: the next run plans the same
    shards, keeps the written ones and the killed shard's whole batches."""
    table, reference = hashed
    child = textwrap.dedent(f"""
        import os, signal
        import eval_pipeline.store.ingest as ingest_module
        from eval_pipeline.corpus.sources import load_corpus
        from eval_pipeline.store.ingest import ChunkingConfig, ingest_shard, plan_ingest
        from tests.integration.cli import HashingEmbedder

        real = ingest_module._write_batch

        def dies_in_batch_3(conn, table, chunks, vectors, *, batches_done, **rest):
            if rest["shard"] == 2 and batches_done == 3:
                os.kill(os.getpid(), signal.SIGKILL)
            return real(conn, table, chunks, vectors, batches_done=batches_done, **rest)

        ingest_module._write_batch = dies_in_batch_3
        demo, chunking = load_corpus("demo"), ChunkingConfig(split_length=30, split_overlap=5)
        kwargs = dict(connection_string={pg_uri!r}, embedder=HashingEmbedder(), log=print)
        plan = plan_ingest(demo, chunking=chunking, batch_chunks={BATCH}, shards=3, **kwargs)
        ingest_shard(demo, plan, plan.shards[0], **kwargs)
        ingest_shard(demo, plan, plan.shards[2], **kwargs)
    """)
    proc = subprocess.run([sys.executable, "-c", child], cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)},
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == -9, proc.stderr[-2000:]
    written = len(_rows(pg_uri, table))

    embedder, lines = HashingEmbedder(), []
    plan = plan_ingest(demo, embedder=embedder, chunking=CHUNKING, batch_chunks=BATCH, shards=3,
                       **_quiet(uri=pg_uri, log=lines.append))
    assert not any("building it again" in line for line in lines), lines
    assert written == plan.shards[0].chunks + _first_batches(demo, plan.shards[2], 2)
    for shard in plan.shards:
        ingest_shard(demo, plan, shard, embedder=embedder, **_quiet(uri=pg_uri))
    info = finish_ingest(plan, **_quiet(uri=pg_uri))
    assert sum(embedder.calls) == info.chunk_count - written  # only what the killed run had not written
    assert _rows(pg_uri, table) == reference


def _first_batches(snapshot, shard, n):
    from eval_pipeline.store.ingest import _shard_documents, chunk_batches

    return sum(len(b) for b, _ in zip(chunk_batches(snapshot, CHUNKING, BATCH, _shard_documents(snapshot, shard)),
                                      range(n)))


def test_a_writer_of_a_plan_made_stale_by_another_run_writes_nothing(demo, pg_uri, hashed):
    table, _ = hashed
    stale = plan_ingest(demo, embedder=HashingEmbedder(), chunking=CHUNKING, batch_chunks=BATCH, shards=3,
                        **_quiet(uri=pg_uri))
    lines = []
    plan_ingest(demo, embedder=HashingEmbedder(), chunking=CHUNKING, batch_chunks=BATCH, shards=2,
                **_quiet(uri=pg_uri, log=lines.append))
    assert any("was split into 3 shards, this one into 2: building it again" in line for line in lines), lines
    embedder = HashingEmbedder()
    with pytest.raises(IngestError, match="planned again"):
        ingest_shard(demo, stale, stale.shards[0], embedder=embedder, **_quiet(uri=pg_uri))
    assert embedder.calls == []


@pytest.mark.parametrize("bad", [0, -1, 2.5, True, "2"])
def test_shards_is_checked_before_anything_is_read(demo, pg_uri, bad):
    with pytest.raises(ValueError, match=rf"shards must be an integer >= 1, got {bad!r}"):
        plan_ingest(demo, embedder=HashingEmbedder(), chunking=CHUNKING, shards=bad, **_quiet(uri=pg_uri))


# --- the graph-backed asset ----------------------------------------------------------------

STORE_SETTINGS = {"split_length": 30, "split_overlap": 5, "batch_chunks": 4}  # the tiny corpus: 3 batches


def _one_step_reference(tiny_snapshot, pg_uri, local_embedder):
    one = Renamed(local_embedder, "graph-reference")
    _forget(pg_uri, _table(tiny_snapshot, one))
    ingest(tiny_snapshot, embedder=one, chunking=CHUNKING, batch_chunks=4, **_quiet(uri=pg_uri))
    rows = _rows(pg_uri, _table(tiny_snapshot, one))
    _forget(pg_uri, _table(tiny_snapshot, one))
    return rows


def test_the_asset_writes_each_shard_in_its_own_step(tmp_path, tiny_snapshot, pg_uri, local_embedder):
    from dagster import DagsterInstance, materialize

    import definitions
    from resources import DatabaseResource, EmbedderResource, LLMResource, RerankerResource, StateResource
    from resources.io import RunScopedPickleIOManager

    reference = _one_step_reference(tiny_snapshot, pg_uri, local_embedder)
    table = _table(tiny_snapshot, local_embedder)
    _forget(pg_uri, table)
    state = StateResource(path=str(tmp_path / "state"))
    resources = {"io_manager": RunScopedPickleIOManager(base_dir=str(tmp_path / "assets")), "state": state,
                 "database": DatabaseResource(kind="external", url=pg_uri, state=state), "embedder": EmbedderResource(),
                 "llm": LLMResource(), "judge_llm": LLMResource(), "rerankers": RerankerResource(llm=LLMResource())}
    config = {"ops": {"corpus_snapshot": {"config": {"source": "jsonl", "path": str(tiny_snapshot.source[6:])}},
                      "pgvector_store": {"config": {**STORE_SETTINGS, "shards": 3}}}}
    try:
        result = materialize([definitions.GRAPH.assets["corpus_snapshot"], definitions.GRAPH.assets["pgvector_store"]], resources=resources, run_config=config,
                             instance=DagsterInstance.ephemeral())
        assert result.success
        steps = sorted(e.step_key for e in result.get_step_success_events() if e.step_key.startswith("pgvector_store."))
        assert steps == ["pgvector_store.finish_ingest", "pgvector_store.ingest_shard[shard_1_of_3]",
                         "pgvector_store.ingest_shard[shard_2_of_3]", "pgvector_store.ingest_shard[shard_3_of_3]",
                         "pgvector_store.plan_ingest"]
        stores = result.output_for_node("pgvector_store")
        assert stores.keys() == ["minilm-w150-o20"]  # no `indexes:`: the one index
        info = stores["minilm-w150-o20"]
        assert info.table == table and not info.reused
        assert info.build_seconds > 0 and stores.storage_bytes[table] > 0
        (materialization,) = result.asset_materializations_for_node("pgvector_store")
        assert materialization.metadata["shards"].value == 3
        _same_table(_rows(pg_uri, table), reference)
    finally:
        _forget(pg_uri, table)


def test_the_parallel_executor_writes_shards_in_separate_processes(tmp_path, job_env, tiny_snapshot, pg_uri,
                                                                     local_embedder, monkeypatch):
    """Two shards under the parallel job's executor (Dagster's multiprocess executor, its steps
    forked from a server that preloaded the installed packages: resources/parallel_executor.py),
    each step in its own process: the same table as a one-step ingest. Started from another
    folder with `-d`, as a forkserver that preloaded the project would fail."""
    import yaml
    from dagster import DagsterInstance

    from eval_pipeline.store.database import EmbeddedPostgres
    from tests.orchestration.shared_runs import run_facts

    reference = _one_step_reference(tiny_snapshot, pg_uri, local_embedder)
    (tmp_path / "ingest_job.py").write_text(textwrap.dedent("""
        import definitions as project
        from dagster import AssetSelection, Definitions, define_asset_job
        from resources.parallel_executor import forkserver_multiprocess_executor

        ingest_parallel = define_asset_job("ingest_parallel", executor_def=forkserver_multiprocess_executor,
                                           selection=AssetSelection.assets("corpus_snapshot", "pgvector_store", "question_set"))
        defs = Definitions(assets=project.ALL_ASSETS, jobs=[ingest_parallel], resources=project.defs.resources)
    """))
    config = {"execution": {"config": {"max_concurrent": 2}},
              "ops": {"corpus_snapshot": {"config": {"source": "jsonl", "path": tiny_snapshot.source[6:]}},
                      "question_set": {"config": {"path": str(FIXTURES / "tiny_questions.jsonl")}},  # preflight
                      "pgvector_store": {"config": STORE_SETTINGS}}}  # shards: the executor's 2
    (tmp_path / "run.yaml").write_text(yaml.safe_dump(config))
    env = job_env("state")
    out = subprocess.run([str(Path(sys.executable).parent / "dagster"), "job", "execute", "-f",
                          str(tmp_path / "ingest_job.py"), "-d", str(REPO), "-j", "ingest_parallel",
                          "-c", str(tmp_path / "run.yaml")], cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=600)
    assert out.returncode == 0, (out.stdout + out.stderr)[-3000:]

    for name in ("DAGSTER_HOME", "EVAL_PIPELINE_DAGSTER_PG_URL", "EVAL_PIPELINE_ARTIFACTS_DIR",
                 "EVAL_PIPELINE_COMPUTE_LOGS_DIR"):
        monkeypatch.setenv(name, env[name])
    instance = DagsterInstance.get()
    (run,) = [r.dagster_run for r in instance.get_run_records() if r.dagster_run.job_name == "ingest_parallel"][:1]
    pids = run_facts(instance, run.run_id).started
    shards = sorted(k for k in pids if k.startswith("pgvector_store.ingest_shard["))
    assert shards == ["pgvector_store.ingest_shard[shard_1_of_2]", "pgvector_store.ingest_shard[shard_2_of_2]"]
    assert len({pids[k] for k in shards}) == 2
    uri = EmbeddedPostgres(env["EVAL_PIPELINE_STATE_DIR"]).uri("eval")
    table = _table(tiny_snapshot, local_embedder)
    _same_table(_rows(uri, table), reference)
    assert _complete(uri, table) == (len(reference),)
