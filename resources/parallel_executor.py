"""The executor of job `retrieval_eval_parallel`: Dagster's multiprocess executor, with each run's
steps forked from one server that imported the heavy packages once.

Dagster's multiprocess executor starts each step as a new interpreter (`spawn`) by default, and a
step of this project imports Dagster, pandas, pyarrow, scipy, torch, transformers,
sentence-transformers and haystack before its first line runs: most of a step's cost on a small
sweep (the tiny fixture's parallel run has 24 steps). This executor is Dagster's, with Dagster's
config schema, and one default changed: `start_method` is `forkserver`, its server preloading
`eval_pipeline.common.step_preload` (the installed packages a step imports, each left out if its
import fails; the Hugging Face offline defaults set first; numpy reseeded in each step). What a
forked step differs in from a spawned one, and how it is kept the same:

- the code the steps run is never preloaded (only three small modules of eval_pipeline.common
  are): each step imports it after the fork, from the run's `sys.path` and working directory, as
  a spawned step does (multiprocessing restores both in the step);
- the server's first preload is `eval_pipeline.common.server_path`, which drops the folder it was
  started in from its `sys.path`: Python 3.11's forkserver puts that folder first, so a `token.py`
  or `yaml.py` where the run was started would replace the installed module in every step (also
  for a server multiprocessing restarts by itself mid-run, which uses the same list);
- a forkserver lives as long as the process that started it, with the environment of its start:
  the first of this executor's runs in a process starts it and the last one to end stops it, so a
  second run in the same process never forks its steps with the first run's environment. A run
  that starts while another one in the same process still runs forks from that run's server when
  the environment is the same, and otherwise spawns its steps (and says so in its event log); so
  does a run that finds a server this executor did not start (other code's forkserver processes
  hold it, and stopping it would wait for them). Left: the stop at the last run's end waits for
  any process other code forked from that server while the run went on.

`execution: config: start_method: spawn: {}` gives Dagster's default back; `forkserver:
preload_modules: [...]` preloads a list of one's own (imported as Dagster does: a failing import
other than ImportError ends the server). bench/RESULTS.md section 32 has the figures (the tiny
sweep's parallel run takes half the time it takes spawned).
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.forkserver
import os
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from dagster import DagsterEvent, Executor, Field, Shape, executor, multiple_process_executor_requirements
from dagster import multiprocess_executor as dagster_multiprocess_executor
from dagster._core.definitions.executor_definition import _core_multiprocess_executor_creation
from dagster._core.events import EngineEventData

PRELOAD_MODULE = "eval_pipeline.common.step_preload"
PATH_MODULE = "eval_pipeline.common.server_path"  # always the server's first preload (the module docstring)
DEFAULT_START_METHOD = {"forkserver": {"preload_modules": [PRELOAD_MODULE]}}
DAGSTER_PRELOAD = "dagster._core.executor.multiprocess"  # what Dagster's executor preloads before any list


def _config_schema() -> Shape:
    """Dagster's multiprocess config, its `start_method` defaulting to DEFAULT_START_METHOD."""
    fields = dict(dagster_multiprocess_executor.config_schema.as_field().config_type.fields)  # type: ignore[attr-defined]
    start_method = fields["start_method"]
    fields["start_method"] = Field(start_method.config_type, default_value=DEFAULT_START_METHOD,
                                   description=f"{start_method.description} Here the default is `forkserver`, "
                                               f"preloading {PRELOAD_MODULE} (the installed packages a step imports).")
    return Shape(fields)


@dataclass
class _Server:
    """This process's forkserver as this executor's runs use it."""

    runs: int = 0  # runs of this executor in flight in this process
    environment: dict[str, str] = field(default_factory=dict)  # os.environ when the server started
    preload: list[str] = field(default_factory=list)


_SERVER = _Server()
_LOCK = threading.Lock()


def _stop_server() -> None:
    """Stop this process's forkserver, if it runs (the next step forked starts a new one). It
    waits until every process the server forked has exited."""
    multiprocessing.forkserver._forkserver._stop()  # type: ignore[attr-defined]


def _server_running() -> bool:
    """Whether this process has a forkserver (a process that exited but is not reaped yet counts:
    reaping it here would break multiprocessing's own bookkeeping)."""
    pid = multiprocessing.forkserver._forkserver._forkserver_pid  # type: ignore[attr-defined]
    if pid is None:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _start_server(preload: list[str]) -> None:
    """Start this process's forkserver preloading `preload`, the server's whole list
    (`_server_preload`: PATH_MODULE and Dagster's module first)."""
    multiprocessing.set_forkserver_preload(preload)
    multiprocessing.forkserver.ensure_running()
    _SERVER.environment, _SERVER.preload = dict(os.environ), preload


def _server_preload(modules: list[str] | None) -> list[str]:
    """The server's preload list for `modules`: PATH_MODULE, Dagster's module, then `modules`."""
    return [PATH_MODULE, DAGSTER_PRELOAD, *(m for m in modules or () if m not in (PATH_MODULE, DAGSTER_PRELOAD))]


class _ForkserverPerRun(Executor):
    """Dagster's multiprocess executor, with this process's forkserver started and stopped per
    run (the module docstring says how)."""

    def __init__(self, config: dict[str, Any]):
        self._config = config
        self.start_method, start_config = next(iter((config.get("start_method") or {"spawn": {}}).items()))
        self.preload: list[str] | None = (start_config or {}).get("preload_modules")
        self._server_list = _server_preload(self.preload)  # the server's whole list, PATH_MODULE first
        if self.start_method == "forkserver":  # Dagster sets the server's list from it too
            config = {**config, "start_method": {"forkserver": {"preload_modules": self._server_list}}}
        self._inner = _core_multiprocess_executor_creation(config)

    @property
    def retries(self):
        return self._inner.retries

    @property
    def step_dependency_config(self):
        return self._inner.step_dependency_config

    def execute(self, plan_context, execution_plan) -> Iterator:
        if self.start_method != "forkserver":
            yield from self._inner.execute(plan_context, execution_plan)
            return
        with _LOCK:
            if _SERVER.runs == 0 and not _server_running():
                _start_server(self._server_list)
                shared = True
            else:  # a run of this executor, or other code, started the server this process has
                shared = _SERVER.runs > 0 and (_SERVER.environment, _SERVER.preload) == (dict(os.environ),
                                                                                         self._server_list)
            if shared:
                _SERVER.runs += 1
        if not shared:
            yield DagsterEvent.engine_event(
                plan_context, "This process's forkserver was started by another run with another environment or "
                "preload list, or by other code: this run's steps are spawned (a new interpreter each)",
                EngineEventData())
            spawned = _core_multiprocess_executor_creation({**self._config, "start_method": {"spawn": {}}})
            yield from spawned.execute(plan_context, execution_plan)
            return
        try:
            yield from self._inner.execute(plan_context, execution_plan)
        finally:
            with _LOCK:
                _SERVER.runs -= 1
                if _SERVER.runs == 0:
                    _stop_server()


@executor(name="multiprocess", config_schema=_config_schema(), requirements=multiple_process_executor_requirements())
def forkserver_multiprocess_executor(init_context) -> Executor:
    """Dagster's multiprocess executor, each run's steps forked from a server that preloaded the
    installed packages a step imports (resources/parallel_executor.py)."""
    return _ForkserverPerRun(dict(init_context.executor_config))
