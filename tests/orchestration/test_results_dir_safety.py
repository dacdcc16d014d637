"""`report.results_dir` at, above or inside the state dir is refused by the run's first step,
before anything is embedded: publishing swaps the whole results folder, and one holding the
embedded Postgres's data would take the running server's files with it (issue #25)."""

from __future__ import annotations

import pytest

from tests.integration.cli import start_job, tiny_job_config

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("where", ["state", "above"])
def test_a_results_folder_holding_the_state_dir_fails_the_first_step_and_destroys_nothing(tmp_path, job_env, where):
    env = job_env("state")
    state = tmp_path / "state"
    (state / "keep.txt").parent.mkdir(parents=True, exist_ok=True)
    (state / "keep.txt").write_text("still here")
    results = state if where == "state" else tmp_path
    code = start_job(tmp_path, "run", env, tiny_job_config(results)).wait(timeout=600)
    log = (tmp_path / "run.log").read_text(errors="replace")
    assert code != 0
    assert "ops.report.config.results_dir" in log and "the state dir" in log, log[-3000:]
    assert 'Started execution of step "corpus_snapshot"' in log
    assert 'Started execution of step "pgvector_store' not in log  # nothing embedded, nothing published
    assert (state / "keep.txt").read_text() == "still here"
    assert not (state / "results.md").exists() and not (tmp_path / "results.md").exists()
