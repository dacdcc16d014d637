"""One LLM concurrency limit across processes: the Postgres-backed limiter (advisory-lock slots).

Two processes, each with more threads than slots, call an LLM client whose requests are
recorded (enter and exit times): at no moment are more than `slots` requests in flight across
both. A holder killed with SIGKILL frees its slot (its session dies with it)."""

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from eval_pipeline.common.limiter import LimiterTimeout
from eval_pipeline.store.limiter import PostgresLimiter
from tests.integration.cli import REPO

pytestmark = pytest.mark.integration

CALLER = textwrap.dedent("""
    import json, sys, threading, time
    from concurrent.futures import ThreadPoolExecutor
    from types import SimpleNamespace

    from eval_pipeline.common.llm import LLMClient
    from eval_pipeline.store.limiter import PostgresLimiter

    uri, name, slots, calls = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    spans, lock = [], threading.Lock()

    def create(**kwargs):
        entered = time.time()
        time.sleep(0.1)
        with lock:
            spans.append((entered, time.time()))
        return SimpleNamespace(choices=[SimpleNamespace(message=SimpleNamespace(content="ok"))], model="m",
                               usage=SimpleNamespace(prompt_tokens=1, completion_tokens=1))

    client = LLMClient(model="m", base_url="http://127.0.0.1:1/v1", max_concurrency=slots,
                       limiter=PostgresLimiter(uri, name=name, slots=slots, timeout=60))
    client._client = SimpleNamespace(chat=SimpleNamespace(completions=SimpleNamespace(create=create)))
    print("ready", flush=True)
    sys.stdin.readline()  # start together
    with ThreadPoolExecutor(4) as pool:  # more threads than slots
        answers = list(pool.map(lambda i: client.complete([{"role": "user", "content": str(i)}]), range(calls)))
    assert answers == ["ok"] * calls
    print(json.dumps(spans), flush=True)
""")


def _child(args, **kwargs):
    return subprocess.Popen([sys.executable, "-c", *args], cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)},
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kwargs)


def _most_at_once(spans):
    events = sorted([(start, 1) for start, _ in spans] + [(end, -1) for _, end in spans], key=lambda e: (e[0], e[1]))
    now = most = 0
    for _, step in events:
        now += step
        most = max(most, now)
    return most


def test_two_processes_never_have_more_calls_in_flight_than_the_slots(pg_uri):
    name, slots, calls = f"test-limit-{os.getpid()}", 2, 8
    children = [_child([CALLER, pg_uri, name, str(slots), str(calls)]) for _ in range(2)]
    try:
        for child in children:
            assert child.stdout.readline().strip() == "ready", child.stderr.read()[-2000:]
        for child in children:
            child.stdin.write("go\n")
            child.stdin.flush()
        spans = []
        for child in children:
            out, err = child.communicate(timeout=120)
            assert child.returncode == 0, err[-2000:]
            spans += [tuple(s) for s in json.loads(out.strip().splitlines()[-1])]
    finally:
        for child in children:
            if child.poll() is None:
                child.kill()
    assert len(spans) == 2 * calls
    assert _most_at_once(spans) == slots  # never more than the slots, and the slots are used
    started = min(s for s, _ in spans)
    assert max(e for _, e in spans) - started >= (2 * calls / slots) * 0.1 * 0.9  # the calls queued for slots


HOLDER = textwrap.dedent("""
    import sys, time
    from eval_pipeline.store.limiter import PostgresLimiter

    limiter = PostgresLimiter(sys.argv[1], name=sys.argv[2], slots=1, timeout=30)
    with limiter.slot():
        print("held", flush=True)
        time.sleep(120)
""")


def test_a_killed_holder_frees_its_slot(pg_uri):
    name = f"test-killed-{os.getpid()}"
    holder = _child([HOLDER, pg_uri, name], start_new_session=True)
    try:
        assert holder.stdout.readline().strip() == "held", holder.stderr.read()[-2000:]
        waiter = PostgresLimiter(pg_uri, name=name, slots=1, timeout=1)
        with pytest.raises(LimiterTimeout) as timed_out:
            with waiter.slot():
                pass
        message = str(timed_out.value)
        assert f"no slot of the shared limit {name!r} (1 slot(s)) came free" in message
        assert f"eval-pipeline limiter {name}" in message and "pg_terminate_backend" in message
        waiter.close()

        os.kill(holder.pid, signal.SIGKILL)
        holder.wait(timeout=30)
        started = time.monotonic()
        with PostgresLimiter(pg_uri, name=name, slots=1, timeout=20).slot() as number:
            assert number == 0
        assert time.monotonic() - started < 10
    finally:
        if holder.poll() is None:
            holder.kill()


def test_a_slot_is_released_when_the_call_raises(pg_uri):
    limiter = PostgresLimiter(pg_uri, name=f"test-raises-{os.getpid()}", slots=1, timeout=1)
    with pytest.raises(RuntimeError, match="the call failed"):
        with limiter.slot():
            raise RuntimeError("the call failed")
    other = PostgresLimiter(pg_uri, name=limiter.name, slots=1, timeout=1)  # another session: not re-entrant
    with other.slot():
        pass
    limiter.close()
    other.close()


def test_the_llm_resource_shares_its_limit_through_the_database(pg_uri, tmp_path):
    from resources import DatabaseResource, LLMResource, StateResource

    with pytest.raises(ValueError, match="shared_limit needs the llm resource's database"):
        LLMResource(model="m-no-db", shared_limit=True).get()
    database = DatabaseResource(kind="external", url=pg_uri, state=StateResource(path=str(tmp_path)))
    client = LLMResource(model="m-shared", base_url="http://127.0.0.1:1/v1", max_concurrency=3, shared_limit=True,
                         database=database).get()
    limiter = client._limiter
    assert isinstance(limiter, PostgresLimiter)
    assert (limiter.name, limiter.slots) == ("llm http://127.0.0.1:1/v1 m-shared", 3)
    assert type(LLMResource(model="m-local").get()._limiter).__name__ == "LocalLimiter"  # the default
