"""The parallel job's executor: Dagster's multiprocess executor, its steps forked from a forkserver
that imported the definitions once, unless the run names a start method."""

from dagster._config import process_config


def test_the_parallel_job_forks_its_steps_from_a_forkserver_unless_told_otherwise():
    import definitions

    executor = definitions.retrieval_eval_parallel.executor_def
    assert executor is definitions.parallel_executor and executor.name == "multiprocess"
    assert definitions._forkserver_by_default({"max_concurrent": 3}) == {
        "max_concurrent": 3, "start_method": {"forkserver": {}}}
    assert definitions._forkserver_by_default({"start_method": {"spawn": {}}})["start_method"] == {"spawn": {}}


def test_the_run_config_still_sets_the_executors_own_settings():
    """The configured executor keeps the multiprocess executor's settings (max_concurrent, a start
    method): a run config naming them is valid for the job, a misspelt one is not."""
    import definitions

    schema = definitions.defs.resolve_job_def("retrieval_eval_parallel").run_config_schema.config_type
    for execution in ({"config": {"max_concurrent": 2}}, {"config": {"start_method": {"spawn": {}}}}):
        result = process_config(schema, {"execution": execution})
        assert result.success, [e.message for e in result.errors or ()]
    assert not process_config(schema, {"execution": {"config": {"max_concurent": 2}}}).success
