"""The embedded database resource: starts, is reused, is attached to by another process, stops."""

import subprocess
import sys

import psycopg
import pytest

from eval_pipeline.store.database import EmbeddedPostgres

pytestmark = pytest.mark.integration


def test_start_reuse_attach_stop(tmp_path):
    pg = EmbeddedPostgres(tmp_path / "state")
    assert pg.pid is None
    uri = pg.uri("eval")
    pid = pg.pid
    assert pid is not None
    try:
        with psycopg.connect(uri) as conn:
            conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
            assert conn.execute("SELECT extversion FROM pg_extension WHERE extname = 'vector'").fetchone()
            # no TCP listener: only the unix socket
            assert conn.execute("SHOW listen_addresses").fetchone()[0] == ""

        # A second handle in this process reuses the running server.
        again = EmbeddedPostgres(tmp_path / "state")
        assert again.uri("eval") == uri
        assert again.pid == pid

        # Another process attaches to the same server instead of starting one.
        out = subprocess.run(
            [sys.executable, "-m", "eval_pipeline.store.database", "url", "--state-dir", str(tmp_path / "state"),
             "--database", "eval"],
            capture_output=True, text=True, check=True, timeout=60,
        )
        assert out.stdout.strip() == uri
        assert pg.pid == pid

        # The psycopg2 URL that dagster-postgres needs.
        assert pg.uri("dagster", driver="psycopg2").startswith("postgresql+psycopg2://")
    finally:
        pg.stop()
    assert pg.pid is None
    with pytest.raises(psycopg.OperationalError):
        psycopg.connect(uri, connect_timeout=2)


def test_stop_from_another_process(tmp_path):
    pg = EmbeddedPostgres(tmp_path / "state")
    pg.start()
    assert pg.pid is not None
    subprocess.run(
        [sys.executable, "-m", "eval_pipeline.store.database", "stop", "--state-dir", str(tmp_path / "state")],
        check=True, timeout=60, capture_output=True,
    )
    assert pg.pid is None


def test_database_name_is_validated(embedded_pg):
    with pytest.raises(ValueError, match="not a plain lowercase identifier"):
        embedded_pg.uri('x"; DROP DATABASE postgres; --')
