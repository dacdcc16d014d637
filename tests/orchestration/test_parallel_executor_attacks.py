"""A hostile review of cfdf2e0: `retrieval_eval_parallel` forks its steps from a forkserver that
preloaded STEP_PRELOAD (resources/parallel_executor.py) instead of spawning each step. Each hole was
an xfail(strict) test that failed because of it, beside a passing control where useful; all five are
fixed since, and their tests pass; the controls that ran the same toys spawned are gone with the holes
(the line numbers below are cfdf2e0's):

- holes 1 and 4: the server imports eval_pipeline.common.step_preload, which sets the offline
  defaults (eval_pipeline.common.hub) before it imports the packages, and leaves out a package
  whose import raises anything;
- hole 2: the server starts in an empty folder of its own (resources/parallel_executor._start_server);
- hole 3: the first run in a process starts the server and the last one to end stops it, never
  under a running run; a run whose environment differs from the server's spawns its steps;
- hole 5: bench/RESULTS.md section 32 exists.
A run started beside another one whose server holds another environment spawns its steps
(test_a_run_beside_another_with_another_environment_spawns_its_steps_with_its_own, added with the fix).

Holes:

1. A forked step runs with the Hugging Face hub online where a spawned (or in-process) step runs it
   offline. eval_pipeline/store/embedders.py:145 (and ranking/rerankers.py:192) set
   HF_HUB_OFFLINE=1 just before importing Haystack, and huggingface_hub reads it once, at import
   (huggingface_hub/constants.py:194). A spawned step imports it after the setdefault (the
   default model is a local folder, so nothing imported it before); the forkserver imported it
   at its start (resources/parallel_executor.py:37-41, `transformers`, `sentence_transformers`,
   `haystack...`), before any step ran. Seen: a toy step calling LocalEmbedder().warm_up() returns
   huggingface_hub.constants.HF_HUB_OFFLINE == False forked, True spawned, with
   os.environ["HF_HUB_OFFLINE"] == "1" in both. The test suite never sees it: tests/conftest.py:17
   sets HF_HUB_OFFLINE=1 for the whole session, so the forkserver inherits it. The rerankers'
   docstring ("nothing is downloaded (HF_HUB_OFFLINE=1 ...)") no longer holds for this job. Impact
   measured: with the default local model and local_files_only, no network call either way (a
   socket probe around LocalEmbedder().embed counted 0 getaddrinfo/connect calls, preloaded or
   fresh); what is lost is the guard, for any hub call a step or plugin makes.

2. A run started from a folder holding a `token.py` or `yaml.py` (any module the server imports:
   Dagster, numpy, pandas, ... and the stdlib modules they import, e.g. random, json, logging,
   queue, csv, uuid) fails every step. The forkserver is started as `python -c ...` in the run's
   working directory, so its sys.path[0] is that folder, and the preloads (and
   dagster._core.executor.multiprocess, which Dagster always preloads) import the folder's file;
   the import raises AttributeError (not ImportError), the server dies, and each step fails with
   "EOFError: unexpected EOF". Spawned steps (the old default) run. The same mechanism as the
   withdrawn review's second reason (bench/RESULTS.md section 24), for installed names this time.
   Where: resources/parallel_executor.py:43 (the default), Python 3.11 forkserver.main.

3. Two runs of the job in one process at once (threads: a notebook, a service calling
   execute_job) can deadlock. Each run's `stop_forkserver()` (resources/parallel_executor.py:59,
   called at :88 and :92) holds the forkserver's lock and waits for the server to exit; the
   server exits only when every step it forked has closed the "alive" pipe, i.e. when the OTHER
   run's steps have exited. The other run's executor then blocks on the same lock when it launches
   its next step, stops reading its running steps' event queues, and a step that has sent more than
   a pipe's worth of events can never exit (its queue feeder cannot flush): no process moves again.
   Seen: a chatty step (400 events of 4 KB) plus a step launched after 4 s in run A, a one-step run
   B started 2 s later: both threads still running after 25 s (spawn: B 4.4 s, A 15.4 s); killing
   the chatty step by pid released B. Even without the deadlock, B's start waits for all of A's
   running steps.

4. One bad preload takes every step down. A preloaded package that raises anything but ImportError
   at import (the forkserver only skips ImportError) kills the server, and every step of the run
   fails with "EOFError: unexpected EOF", naming neither the package nor the cause; spawned, only a
   step that imports the package fails, with its own error. Seen: MPLBACKEND=nonsense (matplotlib
   raises ValueError at import): a toy step that never imports matplotlib fails under the default,
   runs under spawn. (In the project only the report's plot imports matplotlib.)

5. Docs: README.md:286 and resources/parallel_executor.py:22 cite "bench/RESULTS.md section 32"
   for the figures; RESULTS.md has no section 32 (its last is 31).

Held (plain tests): a forked step's embeddings are the same floats as a spawned step's; the default
(forkserver + STEP_PRELOAD) and spawn configs validate through ResolvedRunConfig, max_concurrent
still reaches the executor, and the default renders as JSON for the launchpad (the job snapshot
serializes too, checked by hand); a step's RetryPolicy retry runs in a new forked process and the run
succeeds; SIGTERM to a `dagster job execute -f ... -d REPO` run process (started from another folder)
stops its forked step and its forkserver within seconds; Python's `random` differs between forked
steps (reseeded at fork), so retry jitter stays per step.

Latent, not a hole in the project's code: numpy's global RandomState is not reseeded at fork, so two
forked steps draw the same np.random numbers (seen: 0.6158145198235422 in both); the project only
uses seeded default_rng Generators, but a plugin drawing from np.random would repeat itself per step.
Same as spawn: SIGKILL of the run process orphans its running step (both start methods); under
forkserver the server also lives on until that step exits.
"""

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from unittest import mock

import pytest
from dagster import DagsterInstance, RetryPolicy, execute_job, job, op, reconstructable

from resources.parallel_executor import forkserver_multiprocess_executor

REPO = Path(__file__).resolve().parents[2]
SPAWN = {"execution": {"config": {"start_method": {"spawn": {}}}}}
# The product's forkserver path with a light preload, for the tests about the server itself, not what
# it preloads (the default's preload imports torch & co: ~8 s a server)
LIGHT = {"execution": {"config": {"start_method": {"forkserver": {"preload_modules": ["dagster"]}}}}}
DAGSTER = Path(sys.executable).parent / "dagster"


def _run(job_def, instance_dir: Path, run_config: dict, nodes=(), cwd: Path | None = None, *, only_nodes=False):
    """Run `job_def` in this process; from the folder `cwd` if given (the job is reconstructed from
    the checkout first, as `-d` would have it: only the run's working folder is `cwd`); with
    `only_nodes`, only the steps of `nodes` (an op selection: a run whose other steps no test reads)."""
    instance_dir.mkdir(parents=True)
    job = reconstructable(job_def)
    here = os.getcwd()
    if cwd is not None:
        os.chdir(cwd)
    try:
        with DagsterInstance.local_temp(str(instance_dir)) as instance:
            with execute_job(job, instance=instance, run_config=run_config, raise_on_error=False,
                             op_selection=list(nodes) if only_nodes else None) as result:
                return result.success, {node: result.output_for_node(node) for node in nodes} if result.success else {}
    finally:
        os.chdir(here)


def _without_hub_offline():
    """The environment of a user who did not set HF_HUB_OFFLINE (the suite's conftest does)."""
    env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")}
    return mock.patch.dict(os.environ, env, clear=True)


# -- hole 1: the hub is online in a forked step ---------------------------------------------------

@op
def hub_offline_after_warm_up() -> tuple:
    """LocalEmbedder.warm_up sets HF_HUB_OFFLINE=1 before it imports Haystack: is the hub offline
    in this step afterwards (the constant huggingface_hub reads at import), and what does the
    environment say?"""
    from eval_pipeline.store.embedders import LocalEmbedder

    LocalEmbedder().warm_up()
    import huggingface_hub.constants  # noqa: PLC0415

    return bool(huggingface_hub.constants.HF_HUB_OFFLINE), os.environ.get("HF_HUB_OFFLINE")


@op
def embed_three() -> list:
    from eval_pipeline.store.embedders import LocalEmbedder

    return LocalEmbedder().embed(["a cat sat on the mat", "retrieval evaluation of a sweep", "forkserver"])


@op
def draw() -> tuple:
    import random

    import numpy as np

    return random.random(), float(np.random.random())


@job(executor_def=forkserver_multiprocess_executor)
def hub_job():
    hub_offline_after_warm_up()
    embed_three()
    draw.alias("draw_one")()  # two steps, each forked: do they draw the same numbers?
    draw.alias("draw_two")()


HUB_NODES = ("hub_offline_after_warm_up", "embed_three", "draw_one", "draw_two")


@pytest.fixture(scope="module")
def forked_hub_run(tmp_path_factory) -> tuple:
    """One run of hub_job with the default start method (the server preloads what a step imports),
    for a user who did not set HF_HUB_OFFLINE: the tests below only read what its steps returned."""
    with _without_hub_offline():
        return _run(hub_job, tmp_path_factory.mktemp("forked_hub") / "fork", {}, HUB_NODES)


@pytest.mark.integration
def test_control_a_spawned_step_embeds_offline_and_a_forked_one_embeds_the_same_floats(tmp_path, forked_hub_run):
    with _without_hub_offline():  # the two steps this test reads (the draws are the forked run's own tests)
        ok_spawn, spawned = _run(hub_job, tmp_path / "spawn", SPAWN, HUB_NODES[:2], only_nodes=True)
    ok_fork, forked = forked_hub_run
    assert ok_spawn and ok_fork
    assert spawned["hub_offline_after_warm_up"] == (True, "1")
    assert forked["embed_three"] == spawned["embed_three"]  # held: the same floats to the last bit


@pytest.mark.integration
def test_a_forked_step_embeds_with_the_hub_offline_as_a_spawned_step_does(forked_hub_run):
    ok, out = forked_hub_run
    assert ok
    assert out["hub_offline_after_warm_up"] == (True, "1")


# -- hole 2: a module in the working folder shadows what the server preloads ----------------------

@op
def quick() -> int:
    return os.getpid()


@job(executor_def=forkserver_multiprocess_executor)
def quick_job():
    quick()


def _folder_with(tmp_path: Path, name: str) -> Path:
    work = tmp_path / "work"
    work.mkdir()
    (work / f"{name}.py").write_text("SHADOW = 'a file of the folder the run was started from'\n")
    return work


@pytest.mark.integration
@pytest.mark.parametrize("name", ["token"])  # the review tried yaml.py too: the same path
def test_a_run_from_a_folder_holding_a_module_named_like_a_dependency_succeeds(tmp_path, monkeypatch, name):
    assert _run(quick_job, tmp_path / "fork", LIGHT, cwd=_folder_with(tmp_path, name))[0]


# -- hole 3: two runs in one process at once ------------------------------------------------------

@op
def chatty(context) -> int:
    """Sends ~1.6 MB of step events to the run over ~8 s (each goes through the step's queue)."""
    from dagster import AssetObservation

    for i in range(400):
        context.log_event(AssetObservation(asset_key="chatty", metadata={"i": i, "blob": "x" * 4000}))
        time.sleep(0.02)
    return os.getpid()


@op
def short() -> int:
    time.sleep(4)
    return os.getpid()


@op
def after_short(pid: int) -> int:
    return os.getpid()


@job(executor_def=forkserver_multiprocess_executor)
def chatty_job():
    chatty()
    after_short(short())


def _children_of(pid: int) -> list[int]:
    children = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                children.append(int(entry))
    return children


def _two_runs_at_once(tmp_path: Path, run_config: dict, budget: float) -> dict:
    """Run A (chatty_job) and, 2 s later, run B (quick_job), each in a thread of this process:
    {name: (success, seconds)} of the runs that ended within `budget` seconds. If any is still
    running then, the steps of this process's forkserver are killed (by pid), which releases B (A's
    thread, a daemon, stays blocked reading the killed step's half-written event)."""
    import multiprocessing.forkserver

    results: dict = {}
    start = time.time()

    def run(name, job_def, delay):
        time.sleep(delay)
        ok, _ = _run(job_def, tmp_path / name, run_config)
        results[name] = (ok, round(time.time() - start, 1))

    threads = [threading.Thread(target=run, args=("a", chatty_job, 0.0), daemon=True),
               threading.Thread(target=run, args=("b", quick_job, 2.0), daemon=True)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=max(0.1, budget - (time.time() - start)))
    ended = dict(results)
    if any(t.is_alive() for t in threads):  # release the deadlock: kill the forkserver's steps, by pid
        server = multiprocessing.forkserver._forkserver._forkserver_pid
        for pid in _children_of(server) if server else []:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        threads[1].join(timeout=10)  # B then ends; A's thread stays blocked on a killed step's half message
    return ended


@pytest.mark.integration
def test_two_forked_runs_in_one_process_at_once_both_end(tmp_path):
    ended = _two_runs_at_once(tmp_path, LIGHT, budget=60)
    assert ended.keys() == {"a", "b"}, ended


# -- hole 4: a preload that raises kills every step ------------------------------------------------

@pytest.mark.integration
def test_a_forked_step_that_never_imports_matplotlib_runs_with_a_bad_mplbackend(tmp_path):
    with mock.patch.dict(os.environ, {"MPLBACKEND": "nonsense"}):
        assert _run(quick_job, tmp_path / "fork", {})[0]


# -- hole 5: the figures' section -----------------------------------------------------------------

def test_the_cited_results_section_exists():
    import re

    sections = set(re.findall(r"^## (\d+)\.", (REPO / "bench" / "RESULTS.md").read_text(), flags=re.M))
    cited = set(re.findall(r"RESULTS\.md`? section (\d+)", (REPO / "README.md").read_text().replace("\n", " ")))
    cited |= set(re.findall(r"RESULTS\.md section (\d+)", (REPO / "resources" / "parallel_executor.py").read_text()))
    assert "32" in cited
    assert cited <= sections, sorted(cited - sections)


# -- what held ------------------------------------------------------------------------------------

def test_the_default_and_spawn_configs_validate_and_max_concurrent_reaches_the_executor():
    from dagster._core.system_config.objects import ResolvedRunConfig

    import definitions
    from resources.parallel_executor import PRELOAD_MODULE

    job_def = definitions.defs.resolve_job_def("retrieval_eval_parallel")

    def executor(run_config):
        config = ResolvedRunConfig.build(job_def, run_config).execution.execution_engine_config
        return forkserver_multiprocess_executor.executor_creation_fn(mock.Mock(executor_config=config))

    default = executor({"execution": {"config": {"max_concurrent": 3, "retries": {"disabled": {}}}}})
    assert (default.start_method, default.preload) == ("forkserver", [PRELOAD_MODULE])
    assert default._inner._max_concurrent == 3
    assert executor(SPAWN).start_method == "spawn"
    start_method = job_def.executor_def.config_schema.as_field().config_type.fields["start_method"]
    assert f'"{PRELOAD_MODULE}"' in start_method.default_value_as_json_str  # what the launchpad shows


_FAILED_ONCE = "TOY_FAILED_ONCE"


@op(retry_policy=RetryPolicy(max_retries=1))
def fails_once() -> int:
    marker = Path(os.environ[_FAILED_ONCE])
    if not marker.exists():
        marker.write_text(str(os.getpid()))
        raise RuntimeError("the first attempt fails")
    return os.getpid()


@job(executor_def=forkserver_multiprocess_executor)
def retry_job():
    fails_once()


@pytest.mark.integration
def test_a_step_that_fails_once_is_retried_in_a_new_forked_process(tmp_path):
    marker = tmp_path / "failed_once"
    with mock.patch.dict(os.environ, {_FAILED_ONCE: str(marker)}):
        ok, out = _run(retry_job, tmp_path / "i", LIGHT, ("fails_once",))
    assert ok
    assert out["fails_once"] != int(marker.read_text())


SLEEPY_JOB = '''
import os, time
from pathlib import Path
from dagster import job, op
from resources.parallel_executor import forkserver_multiprocess_executor


@op
def sleepy():
    Path(os.environ["TOY_PID_FILE"]).write_text(str(os.getpid()))
    time.sleep(120)


@job(executor_def=forkserver_multiprocess_executor)
def sleepy_job():
    sleepy()
'''


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.integration
def test_sigterm_to_the_run_process_stops_its_forked_step_and_its_forkserver(tmp_path):
    (tmp_path / "sleepy.py").write_text(SLEEPY_JOB)
    (tmp_path / "run.yaml").write_text("execution:\n  config:\n    start_method:\n      forkserver:\n"
                                       "        preload_modules: [dagster]\n")
    (tmp_path / "home").mkdir()
    pid_file = tmp_path / "step.pid"
    env = {**os.environ, "TOY_PID_FILE": str(pid_file), "DAGSTER_HOME": str(tmp_path / "home")}
    run = subprocess.Popen([str(DAGSTER), "job", "execute", "-f", str(tmp_path / "sleepy.py"), "-d", str(REPO),
                            "-j", "sleepy_job", "-c", str(tmp_path / "run.yaml")], cwd=tmp_path, env=env,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    step = server = None
    try:
        deadline = time.time() + 25
        while not pid_file.exists() and time.time() < deadline:
            time.sleep(0.2)
        assert pid_file.exists(), "the step never started"
        time.sleep(0.3)
        step = int(pid_file.read_text())
        servers = [pid for pid in _children_of(run.pid) if b"forkserver" in Path(f"/proc/{pid}/cmdline").read_bytes()]
        assert len(servers) == 1, servers
        server = servers[0]
        run.send_signal(signal.SIGTERM)
        run.wait(timeout=20)
        deadline = time.time() + 10
        while (_alive(step) or _alive(server)) and time.time() < deadline:
            time.sleep(0.2)
        assert not _alive(step) and not _alive(server)
    finally:
        for pid in (step, server):
            if pid and _alive(pid):
                os.kill(pid, signal.SIGKILL)
        if run.poll() is None:
            run.kill()
            run.wait()


@pytest.mark.integration
def test_forked_steps_draw_different_random_numbers(forked_hub_run):
    """`random` is reseeded in each forked child (os.register_at_fork), so the jitter of the LLM
    client's and the limiter's retries (eval_pipeline/common/llm.py, store/limiter.py) differs per
    step as when spawned. numpy's global RandomState was not (the review drew 0.6158... in both
    steps; the project only uses seeded Generators, but a plugin might not): step_preload reseeds
    it in each forked step, as a new interpreter seeds it."""
    ok, out = forked_hub_run
    assert ok
    assert out["draw_one"][0] != out["draw_two"][0]
    assert out["draw_one"][1] != out["draw_two"][1]


HOLD_SECONDS = 120  # the longest a held step waits for its release


@op(config_schema={"release": str})
def held(context) -> int:
    """Runs until the file `release` exists (at most HOLD_SECONDS): its run holds the forkserver
    for as long as the test needs."""
    release = Path(context.op_config["release"])
    deadline = time.monotonic() + HOLD_SECONDS
    while not release.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    return os.getpid()


@job(executor_def=forkserver_multiprocess_executor)
def held_job():
    held()


@pytest.mark.integration
def test_a_run_beside_another_with_another_environment_spawns_its_steps_with_its_own(tmp_path):
    """Run A (held_job: one step, running until released) holds this process's forkserver; then
    TOY_MARK is set, and run B (the toy env job) starts and ends while A still runs: B's steps see
    B's environment (they are spawned: the server holds A's), and both runs end."""
    import multiprocessing.forkserver

    from tests.toys.env_job import toy_env_job

    release = tmp_path / "release"
    config_a = {**LIGHT, "ops": {"held": {"config": {"release": str(release)}}}}
    results: dict = {}
    a = threading.Thread(target=lambda: results.update(a=_run(held_job, tmp_path / "a", config_a)[0]), daemon=True)
    a.start()
    try:
        deadline = time.monotonic() + 60
        while multiprocessing.forkserver._forkserver._forkserver_pid is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert multiprocessing.forkserver._forkserver._forkserver_pid is not None, "run A never started its server"
        with mock.patch.dict(os.environ, {"TOY_MARK": "b's own"}):
            ok, outputs = _run(toy_env_job, tmp_path / "b", LIGHT, ("first_mark", "second_mark"))
        assert a.is_alive() and "a" not in results, "run A ended before run B did"  # B ran beside A throughout
    finally:
        release.write_text("")
    a.join(timeout=120)
    assert ok and {mark for mark, _ in outputs.values()} == {"b's own"}, outputs
    assert results == {"a": True}
