import pytest

from tests.integration.cli import job_environment


@pytest.fixture
def job_env(tmp_path, embedded_pg):
    """Environment for `dagster job execute`: run storage in the session server; each named
    state dir gets its own vector server, stopped after the test."""
    from eval_pipeline.store.database import EmbeddedPostgres

    dagster_url = embedded_pg.uri("dagster", driver="psycopg2")
    states = []

    def make(name, **extra):
        state = tmp_path / name
        states.append(state)
        return job_environment(state, dagster_url, **extra)

    yield make
    for state in states:
        EmbeddedPostgres(state).stop()
