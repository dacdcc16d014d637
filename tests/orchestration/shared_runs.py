"""Whole-job runs made once per session for tests that only read what they left (or continue
from a copy of their state dir); the fixtures are in tests/orchestration/conftest.py.

A shared run stands for a run the test would have made itself only while the code is the one it
ran: the engine's identity includes the code (ranking.caches.engine_identity), so a run made
before an edit is judged "not comparable" by a run made after it. `Shared` makes its run again
whenever the code under the engine's code paths changed since (never in CI; often while the code
is being edited during a test run).

Under pytest-xdist a shared run is made once for all the workers, not once per worker: the first
worker to need it makes it under a file lock in the workers' common temp dir (as pytest-xdist's
documentation does for session data), the others wait for it and load what it stored (the state
dir, results and log it left are read and copied, never written). What a test reads of a run in
the Dagster instance is read by the maker right after the run (`RunFacts`): the run's records are
in the session Postgres of the worker that made it."""

from __future__ import annotations

import hashlib
import os
import pickle
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar
from unittest import mock

from tests.integration.cli import job_environment, start_job, tiny_job_config
from tests.orchestration.verdict_runs import INSTANCE_ENV, RUN_ID, copy_state

COLLECT_STEP = "ranked_results.collect_ranked_results"


@dataclass(frozen=True)
class RunFacts:
    """A run's structured facts from the Dagster instance it wrote to: its job and status, the
    process id recorded with each step's STEP_START and with its STEP_SUCCESS (the process that
    ran the step; the orchestrator logs a step's worker events itself), and the output metadata
    of ranked_results' collect step."""

    job_name: str
    status: Any  # DagsterRunStatus
    started: dict[str, int | None]
    succeeded: dict[str, int | None]
    collect_metadata: dict[str, Any] | None


def run_facts(instance, run_id: str) -> RunFacts:
    from dagster import DagsterEventType

    run = instance.get_run_by_id(run_id)
    started, succeeded, collect_metadata = {}, {}, None
    for record in instance.get_records_for_run(run_id, limit=100_000).records:
        event = record.event_log_entry.dagster_event
        if event is None or event.step_key is None:
            continue
        if event.event_type == DagsterEventType.STEP_START:
            started[event.step_key] = event.pid
        elif event.event_type == DagsterEventType.STEP_SUCCESS:
            succeeded[event.step_key] = event.pid
        elif event.event_type == DagsterEventType.STEP_OUTPUT and event.step_key == COLLECT_STEP:
            collect_metadata = {k: v.value for k, v in event.event_specific_data.metadata.items()}
    return RunFacts(run.job_name, run.status, started, succeeded, collect_metadata)


@dataclass(frozen=True)
class CleanRun:
    """`dagster job execute -j retrieval_eval` on the tiny fixture with the default variants, in
    a fresh state dir (its vector server stopped after the run): exit code, results folder, log."""

    state: Path
    results: Path
    code: int
    log: str
    facts: RunFacts | None  # read from the instance right after the run (None: no run id in the log)

    @property
    def run_id(self) -> str:
        match = RUN_ID.search(self.log)
        assert match, self.log[-3000:]
        return match.group(1)

    def copy_state(self, to: Path) -> Path:
        """A copy of the state dir the run left, for a test to run on from there."""
        return copy_state(self.state, to)


def make_clean_run(root: Path, dagster_url: str) -> CleanRun:
    from dagster import DagsterInstance

    from eval_pipeline.store.database import EmbeddedPostgres

    state = root / "state-clean"
    env = job_environment(state, dagster_url)  # the project's dagster.yaml, as every run's
    try:
        # a new process: the lane's own check that a run needs nothing the warmed-up interpreter
        # had imported (tests/job_zygote.py)
        job = start_job(root, "clean", env, tiny_job_config(root / "clean"), fresh=True)
        code = job.wait(timeout=600)
    finally:
        EmbeddedPostgres(state).stop()
    log = (root / "clean.log").read_text(errors="replace")
    facts = None
    if (match := RUN_ID.search(log)) is not None:
        with mock.patch.dict(os.environ, {k: env[k] for k in INSTANCE_ENV}):
            instance = DagsterInstance.from_config(env["DAGSTER_HOME"])
            try:
                facts = run_facts(instance, match.group(1))
            finally:
                instance.dispose()
    return CleanRun(state, root / "clean", code, log, facts)


def code_fingerprint() -> str:
    """Every .py file under the engine's code paths, as bytes (stricter than the engine's own
    digest, which ignores comments and formatting: a shared run is made again too often rather
    than too seldom)."""
    from eval_pipeline.common.state import PROJECT_ROOT
    from eval_pipeline.ranking.caches import CODE_PATHS

    digest = hashlib.sha256()
    for name in CODE_PATHS:
        top = PROJECT_ROOT / name
        files = [top] if top.is_file() else sorted(top.rglob("*.py")) if top.is_dir() else []
        for path in files:
            if "__pycache__" not in path.parts:
                digest.update(str(path.relative_to(PROJECT_ROOT)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


T = TypeVar("T")


class Shared(Generic[T]):
    """A run made on first use and again whenever the code changed since it was made; with a
    `store` (a file the test workers share), made by one worker for all of them."""

    def __init__(self, make: Callable[[], T], store: Path | None = None):
        self._make, self._store, self._made, self._code = make, store, None, None

    def get(self) -> T:
        code = code_fingerprint()  # taken before the run: an edit during it makes the next use run again
        if self._made is not None and code == self._code:
            return self._made
        if self._store is None:
            self._made, self._code = self._make(), code
            return self._made
        from filelock import FileLock

        with FileLock(f"{self._store}.lock"):  # another worker making it: wait for it
            stored = pickle.loads(self._store.read_bytes()) if self._store.exists() else None
            if stored is not None and stored[0] == code:
                made = stored[1]
            else:
                made = self._make()
                self._store.write_bytes(pickle.dumps((code, made)))
        self._made, self._code = made, code
        return made


def worker_store(tmp_path_factory, name: str) -> Path | None:
    """Where the pytest-xdist workers of this test run share the run `name` (their basetemps'
    common parent), or None without xdist (one process: the run is made in it)."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return None
    run = os.environ.get("PYTEST_XDIST_TESTRUNUID", "run")
    return tmp_path_factory.getbasetemp().parent / f"shared-{name}-{run}.pickle"
