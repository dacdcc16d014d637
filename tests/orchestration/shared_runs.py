"""Whole-job runs made once per session for tests that only read what they left (or continue
from a copy of their state dir); the fixtures are in tests/orchestration/conftest.py.

A shared run stands for a run the test would have made itself only while the code is the one it
ran: the engine's identity includes the code (ranking.caches.engine_identity), so a run made
before an edit is judged "not comparable" by a run made after it. `Shared` makes its run again
whenever the code under the engine's code paths changed since (never in CI; often while the code
is being edited during a test run)."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Generic, TypeVar

from tests.integration.cli import job_environment, start_job, tiny_job_config
from tests.orchestration.verdict_runs import RUN_ID, copy_state


@dataclass(frozen=True)
class CleanRun:
    """`dagster job execute -j retrieval_eval` on the tiny fixture with the default variants, in
    a fresh state dir (its vector server stopped after the run): exit code, results folder, log."""

    state: Path
    results: Path
    code: int
    log: str

    @property
    def run_id(self) -> str:
        match = RUN_ID.search(self.log)
        assert match, self.log[-3000:]
        return match.group(1)

    def copy_state(self, to: Path) -> Path:
        """A copy of the state dir the run left, for a test to run on from there."""
        return copy_state(self.state, to)


def make_clean_run(root: Path, dagster_url: str) -> CleanRun:
    from eval_pipeline.store.database import EmbeddedPostgres

    state = root / "state-clean"
    try:
        # a new process: the lane's own check that a run needs nothing the warmed-up interpreter
        # had imported (tests/job_zygote.py)
        job = start_job(root, "clean", job_environment(state, dagster_url), tiny_job_config(root / "clean"),
                        fresh=True)
        code = job.wait(timeout=600)
    finally:
        EmbeddedPostgres(state).stop()
    return CleanRun(state, root / "clean", code, (root / "clean.log").read_text(errors="replace"))


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
    """A run made on first use and again whenever the code changed since it was made."""

    def __init__(self, make: Callable[[], T]):
        self._make, self._made, self._code = make, None, None

    def get(self) -> T:
        code = code_fingerprint()  # taken before the run: an edit during it makes the next use run again
        if self._made is None or code != self._code:
            self._made, self._code = self._make(), code
        return self._made
