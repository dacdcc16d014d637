"""The parallel job's executor (resources/parallel_executor.py): Dagster's multiprocess executor, each
run's steps forked from a server that preloaded the installed packages a step imports.

A forkserver default was tried once and withdrawn (bench/RESULTS.md section 24), for three reasons
these tests hold: Dagster read a missing `preload_modules` as an empty list, so the server preloaded
nothing of what a step imports (here the list is explicit, and each name imports); preloading
`definitions` imported it from the server's working directory (here nothing of the project's steps is
preloaded); a forkserver outlives its run, so a second run in the same process forked its steps with
the first run's environment (here the last run to end stops it). The review of the second try
(test_parallel_executor_attacks.py) holds the rest."""

import importlib
import importlib.util
import os
from pathlib import Path
from unittest import mock

import pytest
from dagster import DagsterInstance, execute_job, reconstructable
from dagster._core.system_config.objects import ResolvedRunConfig

from eval_pipeline.common.step_preload import PACKAGES
from resources.parallel_executor import DEFAULT_START_METHOD, PRELOAD_MODULE, forkserver_multiprocess_executor


def _executor(run_config: dict):
    import definitions

    job = definitions.defs.resolve_job_def("retrieval_eval_parallel")
    config = ResolvedRunConfig.build(job, run_config).execution.execution_engine_config
    return forkserver_multiprocess_executor.executor_creation_fn(mock.Mock(executor_config=config))


def test_the_parallel_job_forks_its_steps_from_a_preloaded_server_unless_the_run_says_otherwise():
    import definitions

    assert definitions.retrieval_eval_parallel.executor_def is forkserver_multiprocess_executor
    for run_config in ({}, {"execution": {"config": {"max_concurrent": 2}}}):
        executor = _executor(run_config)
        assert (executor.start_method, executor.preload) == ("forkserver", [PRELOAD_MODULE]), run_config
    assert _executor({"execution": {"config": {"max_concurrent": 2}}})._inner._max_concurrent == 2
    assert _executor({"execution": {"config": {"start_method": {"spawn": {}}}}}).start_method == "spawn"
    own = _executor({"execution": {"config": {"start_method": {"forkserver": {"preload_modules": ["numpy"]}}}}})
    assert (own.start_method, own.preload) == ("forkserver", ["numpy"])
    assert DEFAULT_START_METHOD == {"forkserver": {"preload_modules": [PRELOAD_MODULE]}}


@pytest.mark.parametrize("name", PACKAGES)
def test_every_preloaded_module_is_an_installed_package_that_imports(name):
    """A name that does not import is left out without a word, and a module of the project would be
    frozen in every step at the server's start instead of imported from the run's path."""
    spec = importlib.util.find_spec(name)
    assert spec is not None and spec.origin is not None, name
    origin = Path(spec.origin).resolve()
    assert "site-packages" in origin.parts, origin  # the project's own packages resolve to the checkout
    importlib.import_module(name)


@pytest.mark.integration
def test_a_second_run_in_one_process_forks_its_steps_with_its_own_environment(tmp_path):
    """Two runs of a toy job in this process, each with its own TOY_MARK: each run's steps see their
    run's value, and no step of the second run is forked by the first run's server."""
    from tests.toys.env_job import toy_env_job

    config = {"execution": {"config": {"start_method": {"forkserver": {"preload_modules": ["dagster"]}}}}}
    marks = []
    (tmp_path / "instance").mkdir()
    with DagsterInstance.local_temp(str(tmp_path / "instance")) as instance:
        for mark in ("first", "second"):
            with mock.patch.dict(os.environ, {"TOY_MARK": mark}):
                with execute_job(reconstructable(toy_env_job), instance=instance, run_config=config) as result:
                    assert result.success
                    outputs = [result.output_for_node(step) for step in ("first_mark", "second_mark")]
            marks.append({mark for mark, _ in outputs})
            assert all(pid != os.getpid() for _, pid in outputs)  # each step in a process of its own
    assert marks == [{"first"}, {"second"}]
