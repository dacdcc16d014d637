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

- the project's own code is never preloaded: each step imports it after the fork, from the run's
  `sys.path` and working directory, as a spawned step does (multiprocessing restores both in the
  step);
- the server starts in an empty folder of its own: Python 3.11's forkserver puts the folder it
  starts in first on its `sys.path`, so a `token.py` or `yaml.py` where the run was started
  would replace the installed module in every step;
- a forkserver lives as long as the process that started it, with the environment of its start:
  the first of this executor's runs in a process starts it and the last one to end stops it (one
  an earlier run or other code left is stopped first), so a second run in the same process never
  forks its steps with the first run's environment. A run that starts while another one in the
  same process still runs forks from that run's server when the environment is the same, and
  otherwise spawns its steps (and says so in its event log): the server is never stopped under
  a running run, whose steps hold it.

`execution: config: start_method: spawn: {}` gives Dagster's default back; `forkserver:
preload_modules: [...]` preloads a list of one's own (imported as Dagster does: a failing import
other than ImportError ends the server). bench/RESULTS.md section 32 has the figures (the tiny
sweep's parallel run takes half the time it takes spawned).
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.forkserver
import os
import shutil
import tempfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from dagster import DagsterEvent, Executor, Field, Shape, executor, multiple_process_executor_requirements
from dagster import multiprocess_executor as dagster_multiprocess_executor
from dagster._core.definitions.executor_definition import _core_multiprocess_executor_creation
from dagster._core.events import EngineEventData

PRELOAD_MODULE = "eval_pipeline.common.step_preload"
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
    folder: str | None = None  # the empty folder it started in


_SERVER = _Server()
_LOCK = threading.Lock()


def _stop_server() -> None:
    """Stop this process's forkserver, if it runs, and remove its folder (the next step forked
    starts a new server). It waits until every step the server forked has exited."""
    multiprocessing.forkserver._forkserver._stop()  # type: ignore[attr-defined]
    if _SERVER.folder is not None:
        shutil.rmtree(_SERVER.folder, ignore_errors=True)
        _SERVER.folder = None


def _start_server(preload: list[str]) -> None:
    """Start this process's forkserver with `preload`, in an empty folder of its own (see the
    module docstring: the folder it starts in leads its sys.path)."""
    multiprocessing.set_forkserver_preload(preload)
    _SERVER.folder = tempfile.mkdtemp(prefix="eval-pipeline-forkserver-")
    here = os.getcwd()
    os.chdir(_SERVER.folder)
    try:
        multiprocessing.forkserver.ensure_running()
    finally:
        os.chdir(here)
    _SERVER.environment, _SERVER.preload = dict(os.environ), preload


class _ForkserverPerRun(Executor):
    """Dagster's multiprocess executor, with this process's forkserver started and stopped per
    run (the module docstring says how)."""

    def __init__(self, config: dict[str, Any]):
        self._config = config
        self._inner = _core_multiprocess_executor_creation(config)

    @property
    def start_method(self) -> str | None:
        return self._inner._start_method

    @property
    def preload(self) -> list[str] | None:
        return self._inner._explicit_forkserver_preload

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
        preload = [DAGSTER_PRELOAD, *(m for m in self.preload or () if m != DAGSTER_PRELOAD)]
        with _LOCK:
            if _SERVER.runs == 0:
                _stop_server()  # one an earlier run, or other code of this process, left
                _start_server(preload)
            shared = (_SERVER.environment, _SERVER.preload) == (dict(os.environ), preload)
            if shared:
                _SERVER.runs += 1
        if not shared:
            yield DagsterEvent.engine_event(
                plan_context, "Another run in this process holds the forkserver, started with another environment "
                "or preload list: this run's steps are spawned (a new interpreter each)", EngineEventData())
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
