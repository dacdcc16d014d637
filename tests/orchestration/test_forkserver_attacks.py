"""What the parallel job's forkserver imports before it forks a step (definitions.parallel_executor).

The job's text (definitions.py, README) says its steps fork from a forkserver that has imported
the definitions once per run. Dagster preloads the job's module only when the executor's config
gives no `preload_modules` (None); its config reading turns the missing key into [], so with
`start_method: {forkserver: {}}` the server imports `dagster._core.executor.multiprocess` alone
and every step imports `definitions` (and the library under it) again, as under spawn.
(Seen end to end on a two-op job with this executor: the module's top level ran in the run
process and in each step process, never in the forkserver.)"""

from dagster._core.definitions.executor_definition import _core_multiprocess_executor_creation
from dagster._core.system_config.objects import ResolvedRunConfig


def _preload_of(run_config: dict) -> list[str]:
    """The modules Dagster's multiprocess executor asks the forkserver to import for this job
    (MultiprocessExecutor.execute: the explicit list, else the job's module, else `dagster`)."""
    import definitions

    job = definitions.defs.resolve_job_def("retrieval_eval_parallel")
    config = ResolvedRunConfig.build(job, run_config).execution.execution_engine_config
    executor = _core_multiprocess_executor_creation(config)
    assert executor._start_method == "forkserver"
    explicit = executor._explicit_forkserver_preload
    return list(explicit) if explicit is not None else ["definitions"]


def test_the_parallel_jobs_forkserver_imports_the_definitions_before_it_forks_a_step():
    assert "definitions" in _preload_of({})
    assert "definitions" in _preload_of({"execution": {"config": {"max_concurrent": 2}}})
