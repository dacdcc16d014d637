"""The parallel job's executor is Dagster's multiprocess executor with its own start method
(`spawn`, a new interpreter per step). A forkserver default was tried and withdrawn
(bench/RESULTS.md section 24): Dagster read the missing `preload_modules` as an empty list, so
the server preloaded none of the project (only Dagster's executor module) while the job's text
said it did; preloading `definitions` imports it from the working directory on Python 3.11 (a
run started elsewhere with `-d` fails every step); and a forkserver lives as long as the process
that started it, so a second in-process run would fork its steps with the first run's
environment."""

from dagster import multiprocess_executor
from dagster._core.definitions.executor_definition import _core_multiprocess_executor_creation
from dagster._core.system_config.objects import ResolvedRunConfig


def _start_method(run_config: dict) -> str:
    import definitions

    job = definitions.defs.resolve_job_def("retrieval_eval_parallel")
    config = ResolvedRunConfig.build(job, run_config).execution.execution_engine_config
    return _core_multiprocess_executor_creation(config)._start_method


def test_the_parallel_job_spawns_each_step_unless_the_run_says_otherwise():
    import definitions

    assert definitions.retrieval_eval_parallel.executor_def is multiprocess_executor
    assert _start_method({}) == "spawn"
    assert _start_method({"execution": {"config": {"max_concurrent": 2}}}) == "spawn"
    assert _start_method({"execution": {"config": {"start_method": {"forkserver": {}}}}}) == "forkserver"
