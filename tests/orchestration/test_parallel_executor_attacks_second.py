"""Second hostile review of the forkserver executor (resources/parallel_executor.py, be0825a/69ee29a).

Holes (each was an xfail strict; all three fixed since, and their tests pass): A and B by the
server's first preload, eval_pipeline.common.server_path, which drops the folder the server started
in from its sys.path (no chdir; a server multiprocessing restarts uses the same list); C by a run that
finds a server this executor did not start spawning its steps instead of stopping that server.
The line numbers below are 69ee29a's.

A. `_start_server` changes the whole process's working directory (resources/parallel_executor.py:93-98,
   `os.chdir(_SERVER.folder)` around `ensure_running()`): every other thread of the process sees the
   server's temp folder as its cwd meanwhile. Seen: a thread polling os.getcwd() while five
   `_start_server`/`_stop_server` rounds ran saw all five temp folders (no patching, no sleep). Any
   other thread that opens a relative path, or starts a process (a run beside this one whose steps
   are spawned: multiprocessing records os.getcwd() for the child; a spawned-fallback run B beside
   run C that starts a new server after run A ended) in that window works in a folder that
   `_stop_server` later deletes.

B. The server's "own empty folder" holds only for the server this executor starts. If the server dies
   during a run (OOM killer, a step that kills its parent, ...), multiprocessing's ensure_running()
   (Python 3.11 multiprocessing/forkserver.py:114-124) silently starts a new one at the next step
   launch, in the run's working folder: the review's hole 2 is back for the rest of the run (a
   `token.py` there kills the new server, and every later step fails with EOFError). Seen: see
   test_a_step_after_the_server_died_runs_from_a_folder_holding_token_py.

C. A run of this job hangs at its start while any other forkserver child of the process lives (a
   user's `get_context("forkserver").Pool` in a notebook, torch DataLoader workers with the forkserver
   context, ...): with no run in flight, execute() calls _stop_server() under _LOCK
   (resources/parallel_executor.py:132-133), and forkserver._stop() waits for the server to exit, which
   it does only when every process it forked has exited (they hold its "alive" pipe). Seen: a
   1-worker forkserver Pool alive; quick_job (LIGHT) had not started its step after 45 s; the step
   ran right after pool.terminate() (test uses a 20 s budget). Every later run of the process blocks
   on _LOCK behind it. The same wait happens at a run's end (:148-151) if other code forked from the
   run's server meanwhile (not run; still so: see the closing paragraph).

Held (checked here): no os.environ drift in the parent during a run (toy_env_job LIGHT, in process:
os.environ identical before import, after import, after the run, after importing definitions), so a
second concurrent run with the same environment shares the server and the comparison does not misfire
by itself; the shared path has no code between `_SERVER.runs += 1` and the `try` (no leak of the
counter there); forkserver._stop() does wait for every forked step (children hold the alive fd), so
the folder is not removed under a live step of this executor (and steps chdir to the run's folder).
Left (the lead's note): a run's end still stops the server it started, which waits for any process
other code of the process forked from that server while the run went on.
Not done: step_preload's BaseException catch-all (only reasoned: a half-imported package stays half
in sys.modules, as after a failed import in a spawned step); a generator closed early by Dagster
(GeneratorExit reaches the finally, whose _stop_server would wait for the run's live steps).
"""

import os
import signal
import threading
import time

import pytest

from resources import parallel_executor as pe
from tests.orchestration.test_parallel_executor_attacks import LIGHT, _folder_with, _run, quick_job

# -- A: the chdir is process-global ------------------------------------------------------------

@pytest.mark.integration
def test_another_thread_never_sees_the_servers_folder_as_its_cwd():
    here = os.getcwd()
    seen: set[str] = set()
    done = threading.Event()

    def poll():
        while not done.is_set():
            seen.add(os.getcwd())

    watcher = threading.Thread(target=poll, daemon=True)
    watcher.start()
    time.sleep(0.05)
    try:
        with pe._LOCK:
            assert pe._SERVER.runs == 0
            for _ in range(5):
                pe._stop_server()
                pe._start_server(pe._server_preload(["dagster"]))
            pe._stop_server()
    finally:
        done.set()
        watcher.join(timeout=10)
    assert seen == {here}, seen


# -- B: a server that died is restarted by multiprocessing in the run's folder -----------------

def _forked_exit_code() -> int:
    """What the executor does at each step launch: a forkserver Process (ensure_running first)."""
    import multiprocessing

    process = multiprocessing.get_context("forkserver").Process(target=os.getpid)
    try:
        process.start()
    except Exception:  # the new server died before it answered  # noqa: BLE001
        return -1
    process.join(timeout=30)
    return process.exitcode


@pytest.mark.integration
@pytest.mark.parametrize("shadow", [False, True])
def test_a_step_launched_after_the_server_died_runs_from_a_folder_holding_yaml_py(tmp_path, shadow):
    """The server a run started dies (OOM killer, a kill by hand) while no step runs; the run's next
    step launch restarts it. Control (shadow=False): the step runs. With token.py in the run's folder
    it must still run, as it does while the executor's own server lives. (yaml.py, not token.py: with
    the light preload nothing in the server imports `token`, so a token.py there did not fail even
    with the fix removed; a yaml.py does.)"""
    import multiprocessing.forkserver

    work = _folder_with(tmp_path, "yaml") if shadow else tmp_path
    here = os.getcwd()
    os.chdir(work)
    try:
        with pe._LOCK:
            assert pe._SERVER.runs == 0
            pe._stop_server()
            pe._start_server(pe._server_preload(["dagster"]))
            assert _forked_exit_code() == 0, "the executor's own server (empty folder) forks fine"
            server = multiprocessing.forkserver._forkserver._forkserver_pid
            os.kill(server, signal.SIGKILL)
            time.sleep(0.3)
            restarted = _forked_exit_code()
            pe._stop_server()
    finally:
        os.chdir(here)
    assert restarted == 0


# -- C: a forkserver other code of the process uses hangs the run --------------------------------

@pytest.mark.integration
def test_a_run_starts_beside_a_forkserver_pool_of_the_users_own(tmp_path):
    import multiprocessing

    pool = multiprocessing.get_context("forkserver").Pool(1)
    try:
        assert pool.apply(os.getpid) > 0  # its worker runs, forked from this process's server
        results: dict = {}
        run = threading.Thread(target=lambda: results.update(ok=_run(quick_job, tmp_path / "fork", LIGHT)[0]),
                               daemon=True)
        run.start()
        run.join(timeout=20)
        finished = not run.is_alive()
    finally:
        pool.terminate()  # releases the server: a hung run goes on
        pool.join()
    run.join(timeout=60)
    assert finished, "the run still had not finished after 20 s"
    assert results == {"ok": True}
