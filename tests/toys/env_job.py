"""A toy job for the parallel executor's forkserver (tests/orchestration/test_parallel_executor.py):
two steps, each returning the process's TOY_MARK and its pid, run with the project's executor."""

import os

from dagster import job, op

from resources.parallel_executor import forkserver_multiprocess_executor


@op
def first_mark() -> tuple[str, int]:
    return os.environ.get("TOY_MARK", ""), os.getpid()


@op
def second_mark() -> tuple[str, int]:
    return os.environ.get("TOY_MARK", ""), os.getpid()


@job(executor_def=forkserver_multiprocess_executor)
def toy_env_job():
    first_mark()
    second_mark()
