"""Job `retrieval_eval_celery` on a real worker pool: Debian's redis-server as the broker, two
workers started with `dagster-celery worker start`, each in its own process group, and the vector
store a password-protected Postgres on 127.0.0.1 reached through `EVAL_PIPELINE_DB=external`
(tests/cluster.py starts and stops all of it; the state dir is on the same disk, as a cluster's
would be on shared storage).

- the whole job on the pool: exit 0, every step in a worker, the two ranking batches on two
  different workers, and per-question metrics identical to the in-process job's;
- a worker SIGKILLed while it runs a ranking task: the task is submitted again and the run
  completes (or, past the retries, fails saying which step and worker were lost); a re-run
  completes with the same metrics;
- the database password is in no log: job output, worker logs, redis' log and keys, the state
  dir (compute logs included) and Dagster's event log and run tables.

Every run is the whole job on the tiny fixture (tests/integration/cli.tiny_job_config) with the
tests' default sweep plus `bm25+llm`, an LLM reranker answered by an OpenAI-compatible stub in
this process (tests/openai_stub.py), in every run, the in-process reference's included. The
variants with an API reranker all rank in one batch (eval_pipeline.ranking.batches.plan_batches),
and the stub can hold their calls: the kill test holds them, kills the worker whose ranking task
is waiting on the stub (so it is surely mid-task: a tiny batch without a held call ranks in
50-90 ms, too fast to be caught running), then answers again, so the resubmitted task does not wait.

One cluster serves the module (module fixtures)."""

import json
import re
import subprocess
import threading
import time
import uuid
from pathlib import Path

import pandas as pd
import psycopg
import pytest
import yaml

from tests import job_zygote
from tests.cluster import Cluster, missing
from tests.integration.cli import FIXTURES, job_environment, metrics_table, start_dagster, tiny_job_config
from tests.openai_stub import OpenAIStub
from tests.orchestration.test_secrets import forbidden

pytestmark = pytest.mark.integration

if missing():
    pytest.skip(missing(), allow_module_level=True)

RANK_STEP = "ranked_results.rank_variants["
LLM_VARIANT = "bm25+llm"
LLM_BATCH = re.sub(r"[^A-Za-z0-9_]", "_", LLM_VARIANT)  # as in its batch's mapping key (ranking.steps.mapping_key)
GATE_SECONDS = 30  # the longest a held LLM call waits (below the client's 60 s timeout: no retry)
VOLATILE = ("latency_ms", "code_version")  # timings, and the checkout's version string


class HeldLLM:
    """The stub's chat answers for the LLM reranker: the candidates' ids in the order given (as
    tests/orchestration/test_verdict_scenario.py's), every run alike. While `hold()` is on, each
    reranking call waits (at most GATE_SECONDS) until `release()`; `waiting` counts the calls
    held at this moment."""

    def __init__(self):
        self.open = threading.Event()
        self.open.set()
        self.waiting = 0
        self._lock = threading.Lock()

    def hold(self):
        self.open.clear()

    def release(self):
        self.open.set()

    def __call__(self, body: dict) -> str:
        user = body["messages"][-1]["content"]
        ids = re.findall(r'"id": "([^"]+)"', user)
        if ids and not self.open.is_set():
            with self._lock:
                self.waiting += 1
            try:
                self.open.wait(GATE_SECONDS)
            finally:
                with self._lock:
                    self.waiting -= 1
        return json.dumps(ids)


def _run_process_env(env: dict) -> dict:
    """The cluster's environment (Cluster.job_env) for `dagster job execute`, with the session's
    PATH and PYTHONPATH: those two are the workers' (`dagster-celery worker start` starts `celery`
    by name; PYTHONPATH is the checkout, which `-m definitions` run from it imports anyway). The run
    process starts no program: it submits each step to the broker (resources/celery_executor.py),
    and every step runs in a worker, a new process of its own. So the run process is forked from
    the job zygote (tests/job_zygote.py) as the in-process reference's is, and each run on the pool
    is still compared with the reference across two hash seeds (the workers' and the zygote's)."""
    out = dict(env)
    for name in ("PATH", "PYTHONPATH"):
        if name in job_zygote.SESSION_ENV:
            out[name] = job_zygote.SESSION_ENV[name]
        else:
            out.pop(name, None)
    return out


def _start(env: dict, job: str, folder: Path, name: str, *, ops: dict | None = None) -> tuple:
    """`dagster job execute` for the tiny job, tagged so that its run can be found; (process, tag).
    Forked from the job zygote, in the run environment `_run_process_env` gives."""
    tag = f"{name}-{uuid.uuid4().hex[:8]}"
    config = tiny_job_config(folder / name)
    config["ops"].update(ops or {})
    cfg = folder / f"{name}.yaml"
    cfg.write_text(yaml.safe_dump(config))
    args = ["job", "execute", "-m", "definitions", "-j", job, "-c", str(cfg),
            "--tags", json.dumps({"test/celery": tag})]
    proc = start_dagster(folder, name, _run_process_env(env), args)
    return proc, tag


def _finish(proc, folder: Path, name: str, timeout: float = 600) -> tuple[int, str]:
    try:
        code = proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise AssertionError(f"{name} did not finish in {timeout:.0f} s: "
                             f"{(folder / f'{name}.log').read_text()[-3000:]}") from None
    return code, (folder / f"{name}.log").read_text(errors="replace")


def _run_id(dagster_uri: str, tag: str) -> str | None:
    with psycopg.connect(dagster_uri) as conn:
        if conn.execute("SELECT to_regclass('run_tags')").fetchone()[0] is None:
            return None
        row = conn.execute("SELECT run_id FROM run_tags WHERE key = 'test/celery' AND value = %s", (tag,)).fetchone()
        return row[0] if row else None


def _events(dagster_uri: str, run_id: str, event_type: str | None = None) -> list:
    from dagster import EventLogEntry
    from dagster._serdes import deserialize_value

    query = "SELECT event FROM event_logs WHERE run_id = %s" + (" AND dagster_event_type = %s" if event_type else "")
    with psycopg.connect(dagster_uri) as conn:
        rows = conn.execute(query + " ORDER BY id", (run_id, event_type) if event_type else (run_id,)).fetchall()
    return [deserialize_value(r[0], EventLogEntry) for r in rows]


def _by_type(entries, name: str):
    return [e.dagster_event for e in entries if e.dagster_event is not None and e.dagster_event.event_type_value == name]


def _worker_of_step(entries) -> dict[str, list[str]]:
    """{step key: [celery worker hostnames]} from the engine events each task writes when it starts."""
    out: dict[str, list[str]] = {}
    for event in _by_type(entries, "ENGINE_EVENT"):
        metadata = event.event_specific_data.metadata if event.event_specific_data else {}
        if event.step_key and "Celery worker" in metadata:
            out.setdefault(event.step_key, []).append(metadata["Celery worker"].value)
    return out


def _per_query(results: Path) -> pd.DataFrame:
    frame = pd.read_json(results / "per_query.jsonl", lines=True, dtype=False)
    frame = frame.drop(columns=[c for c in frame.columns if c in VOLATILE or c.startswith("ms_")])
    return frame.sort_values(["variant", "qid"]).reset_index(drop=True)


def _assert_same_metrics(results: Path, reference: Path) -> None:
    ours, theirs = _per_query(results), _per_query(reference)
    assert list(ours.columns) == list(theirs.columns)
    assert len(ours) == len(theirs) > 0
    scores = ours.pop("scores"), theirs.pop("scores")
    pd.testing.assert_frame_equal(ours, theirs, check_exact=True)
    for a, b in zip(*scores):
        assert a == pytest.approx(b, abs=1e-6)
    assert metrics_table(results) == metrics_table(reference)


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return tmp_path_factory.mktemp("celery")


@pytest.fixture(scope="module")
def dagster_uri(embedded_pg):
    return embedded_pg.uri("dagster")


@pytest.fixture(scope="module")
def first_event_id(dagster_uri):
    with psycopg.connect(dagster_uri) as conn:
        if conn.execute("SELECT to_regclass('event_logs')").fetchone()[0] is None:
            return 0
        return conn.execute("SELECT coalesce(max(id), 0) FROM event_logs").fetchone()[0]


@pytest.fixture(scope="module")
def llm():
    """The stub every run's LLM reranker calls, and its gate (HeldLLM)."""
    held = HeldLLM()
    stub = OpenAIStub(chat=held)
    stub.held = held
    with stub:
        yield stub
        held.release()  # no handler left waiting at shutdown


@pytest.fixture(scope="module")
def llm_env(folder, llm):
    """The tests' default sweep plus `bm25+llm`, and the stub's endpoint: for the workers, the
    runs on the pool and the in-process reference alike."""
    sweep = yaml.safe_load((FIXTURES / "variants_tiny.yaml").read_text())
    sweep["variants"].append({"engine": "bm25", "name": LLM_VARIANT, "reranker": {"kind": "llm", "max_candidates": 5}})
    path = folder / "variants.yaml"
    path.write_text(yaml.safe_dump(sweep, sort_keys=False))
    return {"EVAL_PIPELINE_VARIANTS": str(path), "OPENAI_BASE_URL": llm.base_url,
            "EVAL_PIPELINE_LLM_MODEL": "stub-model", "OPENAI_API_KEY": "sk-test"}


@pytest.fixture(scope="module")
def cluster(folder, embedded_pg, first_event_id, llm_env):
    # quick loss detection for the kill test (defaults: a check every 5 s, lost after 20 s)
    with Cluster(folder / "cluster", dagster_url=embedded_pg.uri("dagster", driver="psycopg2"), workers=2,
                 extra_env={"EVAL_PIPELINE_CELERY_CHECK_EVERY": "1", "EVAL_PIPELINE_CELERY_LOST_AFTER": "4",
                            **llm_env}) as c:
        yield c


@pytest.fixture(scope="module")
def reference(folder, embedded_pg, llm_env):
    """The same tiny job in-process, on its own state dir and embedded vector store."""
    from eval_pipeline.store.database import EmbeddedPostgres

    state = folder / "inprocess-state"
    env = job_environment(state, embedded_pg.uri("dagster", driver="psycopg2"), **llm_env)
    try:
        proc, _ = _start(env, "retrieval_eval", folder, "inprocess")
        code, output = _finish(proc, folder, "inprocess")
        assert code == 0, output[-3000:]
    finally:
        EmbeddedPostgres(state).stop()
    return folder / "inprocess"


@pytest.fixture(scope="module")
def pool_run(cluster, folder, dagster_uri, reference):
    proc, tag = _start(cluster.env, "retrieval_eval_celery", folder, "pool")
    code, output = _finish(proc, folder, "pool")
    return {"code": code, "output": output, "run_id": _run_id(dagster_uri, tag), "results": folder / "pool"}


def test_whole_job_on_two_workers_gives_the_in_process_metrics(pool_run, reference, dagster_uri, cluster):
    assert pool_run["code"] == 0, pool_run["output"][-3000:]
    entries = _events(dagster_uri, pool_run["run_id"])
    where = _worker_of_step(entries)
    started = {e.step_key for e in _by_type(entries, "STEP_START")}
    assert started and started <= set(where), sorted(started - set(where))  # every step ran in a celery worker
    nodes = {cluster.pool.node(n) for n in cluster.pool.procs}
    assert {w for ws in where.values() for w in ws} <= nodes
    rank_steps = sorted(k for k in started if k.startswith(RANK_STEP))
    assert len(rank_steps) == 2, rank_steps  # two batches: the pool's default size
    # both workers took tasks (which worker runs which batch depends on what else is running:
    # the answer steps run beside the ranking, so both batches may land on one worker)
    assert {w for ws in where.values() for w in ws} == nodes and len(nodes) == 2, where
    assert sum(LLM_BATCH in k for k in rank_steps) == 1, rank_steps  # one batch holds the LLM variant
    _assert_same_metrics(pool_run["results"], reference)
    assert LLM_VARIANT in {row[0] for row in metrics_table(reference)}  # the LLM variant is compared too


def test_a_worker_killed_mid_task_is_survived_and_a_rerun_gives_the_same_metrics(
        pool_run, reference, cluster, folder, dagster_uri, llm):
    assert pool_run["code"] == 0
    no_reuse = {"ranked_results": {"config": {"reuse": False}}}
    llm.held.hold()  # the LLM batch's ranking task waits on the stub until its worker is killed
    proc, tag = _start(cluster.env, "retrieval_eval_celery", folder, "killed", ops=no_reuse)
    victim = step = None
    deadline = time.monotonic() + 300
    try:
        while victim is None and proc.poll() is None and time.monotonic() < deadline:
            run_id = _run_id(dagster_uri, tag) if llm.held.waiting else None
            if run_id:
                for event in _by_type(_events(dagster_uri, run_id, "STEP_START"), "STEP_START"):
                    if event.step_key.startswith(RANK_STEP) and LLM_BATCH in event.step_key:
                        name = cluster.pool.group_of(event.pid)
                        if name is not None:
                            cluster.pool.kill(name)  # SIGKILL: the CLI, celery's main process and its pool
                            victim, step = name, event.step_key
                            break
            time.sleep(0.1)
        llm.held.release()  # the resubmitted task's calls are answered at once
        assert victim is not None, "no ranking task was seen running on a worker"
        code, output = _finish(proc, folder, "killed")
    finally:
        llm.held.release()
        if proc.poll() is None:
            proc.kill()
    entries = _events(dagster_uri, _run_id(dagster_uri, tag))
    step_events = [e for e in entries if e.dagster_event is not None and e.dagster_event.step_key == step]
    resubmitted = [e.message for e in step_events if "submitting it again" in (e.message or "")]
    cluster.pool.start(victim)  # the pool is two workers again for the re-run

    if code == 0:  # the task was submitted again and finished on the other worker
        assert resubmitted and cluster.pool.node(victim) in resubmitted[0], resubmitted
        successes = [e for e in step_events if e.dagster_event.event_type_value == "STEP_SUCCESS"]
        assert len(successes) == 1
        assert _worker_of_step(entries)[step][-1] != cluster.pool.node(victim)  # the last attempt: the other worker
        _assert_same_metrics(folder / "killed", reference)
    else:  # the run failed, and says which step and worker were lost
        assert f"step {step} was lost" in output and cluster.pool.node(victim) in output, output[-3000:]

    proc, _ = _start(cluster.env, "retrieval_eval_celery", folder, "rerun", ops=no_reuse)
    code, output = _finish(proc, folder, "rerun")
    assert code == 0, output[-3000:]
    _assert_same_metrics(folder / "rerun", reference)


def _redis_text(url: str) -> str:
    import redis

    parts = []
    for db in (0, 1):
        client = redis.Redis.from_url(f"{url}/{db}")
        for key in client.scan_iter(count=1000):
            kind = client.type(key).decode()
            if kind == "string":
                parts.append(client.get(key) or b"")
            elif kind == "list":
                parts += client.lrange(key, 0, -1)
            elif kind == "hash":
                parts += [k + b"=" + v for k, v in client.hgetall(key).items()]
            elif kind == "set":
                parts += list(client.smembers(key))
            elif kind == "zset":
                parts += client.zrange(key, 0, -1)
            parts.append(key)
        client.close()
    return "\n".join(p.decode("utf-8", "replace") for p in parts)


def test_the_database_password_is_in_no_log(pool_run, cluster, folder, dagster_uri, first_event_id):
    pieces = forbidden(cluster.password)

    def hits(text: str) -> list[str]:
        return sorted(p for p in pieces if p in text)

    assert pool_run["code"] == 0
    leaks = {}
    files = [p for p in folder.rglob("*") if p.is_file() and "pgdata" not in p.parts]
    files.append(cluster.postgres.log)  # the vector store's own server log
    assert any(p.name.startswith("worker-") for p in files) and any(p.suffix == ".log" for p in files)
    assert any("logs" in p.parts for p in files), "no compute logs were written"
    for path in files:
        found = hits(path.read_bytes().decode("utf-8", "replace"))
        if found:
            leaks[str(path)] = found
    found = hits(_redis_text(cluster.redis.url))  # task messages and results in the broker and backend
    if found:
        leaks["redis"] = found
    with psycopg.connect(dagster_uri) as conn:
        events = "\n".join(r[0] for r in conn.execute("SELECT event FROM event_logs WHERE id > %s",
                                                      (first_event_id,)).fetchall())
        assert "retrieval_eval_celery" in events
        if hits(events):
            leaks["event_logs"] = hits(events)
        for table in ("runs", "run_tags", "snapshots"):
            text = "\n".join(r[0] for r in conn.execute(
                psycopg.sql.SQL("SELECT t::text FROM {} t").format(psycopg.sql.Identifier(table))).fetchall())
            if hits(text):
                leaks[table] = hits(text)
    assert leaks == {}
