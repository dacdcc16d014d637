"""Whole-job runs that several tests only read, or continue from a copy of, made once per test run
for all its pytest-xdist workers (again if the code changed meanwhile: shared_runs.Shared); the
browser tests' page."""

import pytest

from tests.orchestration import shared_runs, verdict_runs


@pytest.fixture(scope="session")
def first_run(tmp_path_factory, embedded_pg) -> shared_runs.Shared[verdict_runs.FirstRun]:
    """A brand-new project's first run (`dense` and `bm25`, no answers; verdict_runs.make_first_run):
    the verdict tests that start from it copy its state dir instead of running it again."""
    dagster_url = embedded_pg.uri("dagster", driver="psycopg2")
    return shared_runs.Shared(lambda: verdict_runs.make_first_run(tmp_path_factory.mktemp("first-run"), dagster_url),
                              shared_runs.worker_store(tmp_path_factory, "first-run"))


@pytest.fixture(scope="session")
def clean_run(tmp_path_factory, embedded_pg) -> shared_runs.Shared[shared_runs.CleanRun]:
    """The tiny job with the default variants in a fresh state dir (shared_runs.make_clean_run):
    the reference metrics a killed-and-rerun job must give (test_reliability.py) and the in-process
    run the multiprocess executor must agree with (test_parallel.py)."""
    dagster_url = embedded_pg.uri("dagster", driver="psycopg2")
    return shared_runs.Shared(lambda: shared_runs.make_clean_run(tmp_path_factory.mktemp("clean-run"), dagster_url),
                              shared_runs.worker_store(tmp_path_factory, "clean-run"))


@pytest.fixture
def browser(tmp_path):
    """Headless Chromium through its DevTools protocol (test_ui.Browser), closed after the test:
    the browser tests' one page."""
    pytest.importorskip("websockets", reason="the DevTools client (websockets) is not installed")
    from tests.orchestration.test_ui import Browser

    page = Browser(tmp_path / "chromium")
    yield page
    page.close()
