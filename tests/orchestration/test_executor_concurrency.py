"""How many steps the run's executor runs at once (assets.ranking.executor_concurrency), which
sets how many batches ranked_results and how many shards pgvector_store split into: the same
number Dagster's multiprocess executor itself uses (its `max_concurrent`, else the environment's
DAGSTER_MULTIPROCESS_EXECUTOR_MAX_CONCURRENT, else the CPU count)."""

import os
from types import SimpleNamespace

from assets.ranking import CELERY_DEFAULT_WORKERS, executor_concurrency

ENV = "DAGSTER_MULTIPROCESS_EXECUTOR_MAX_CONCURRENT"


def _context(executor: str, run_config: dict | None = None):
    return SimpleNamespace(job_def=SimpleNamespace(executor_def=SimpleNamespace(name=executor)),
                           run=SimpleNamespace(run_config=run_config or {}))


def test_in_process_and_celery():
    assert executor_concurrency(_context("in_process")) == 1
    assert executor_concurrency(_context("celery")) == CELERY_DEFAULT_WORKERS


def test_the_multiprocess_executor_counts_as_dagster_does(monkeypatch):
    monkeypatch.delenv(ENV, raising=False)
    assert executor_concurrency(_context("multiprocess")) == (os.cpu_count() or 1)
    monkeypatch.setenv(ENV, "3")
    assert executor_concurrency(_context("multiprocess")) == 3  # Dagster's own default when the config is silent
    config = {"execution": {"config": {"max_concurrent": 5}}}
    assert executor_concurrency(_context("multiprocess", config)) == 5  # the run config first
    nested = {"execution": {"config": {"multiprocess": {"max_concurrent": 4}}}}
    assert executor_concurrency(_context("multiprocess", nested)) == 4
