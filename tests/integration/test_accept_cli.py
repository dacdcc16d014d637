"""`python -m eval_pipeline.history accept RUN_ID` says what the acceptance puts in force for the
whole project: the accepted run's gate settings (strict, tolerances) bind every variant from
then on, also when only one variant was accepted."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import psycopg
import pytest

from eval_pipeline.history.runs import table_names
from eval_pipeline.verdict.retrieval import judge_run
from tests.integration.test_verdict_integrity import TOLERANCES, frame, provenance

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[2]


def test_accept_prints_the_gate_in_force(pg_uri):
    prefix = f"cli_{uuid.uuid4().hex[:12]}"
    try:
        judge_run({"a": frame("a", 90)}, baseline="a", provenance=provenance(), tolerances=TOLERANCES, strict=True,
                  run_id="r0", limited=False, connection_string=pg_uri, history_prefix=prefix)
        out = subprocess.run([sys.executable, "-m", "eval_pipeline.history", "--url-env", "ACCEPT_TEST_URL",
                              "--prefix", prefix, "accept", "r0", "--variant", "a", "--note", "first"],
                             cwd=REPO, capture_output=True, text=True, timeout=120,
                             env={**os.environ, "ACCEPT_TEST_URL": pg_uri})
        assert out.returncode == 0, out.stderr[-2000:]
        assert "run r0 is now the pinned reference of: a" in out.stdout
        line = next(line for line in out.stdout.splitlines() if line.startswith("the gate in force"))
        assert "strict on" in line and "hit@1 0.05" in line and "mrr 0.05" in line
    finally:
        with psycopg.connect(pg_uri, autocommit=True) as conn:
            for table in reversed(list(table_names(prefix).values())):
                conn.execute(f'DROP TABLE IF EXISTS "{table}" CASCADE')


def test_runs_says_where_it_looked_when_it_finds_nothing(pg_uri, pg_state_dir, monkeypatch, capsys):
    """A mistyped --prefix reads as an empty history, so `runs` names the table it read; a mistyped
    --database on the jobs' state dir is refused, naming it, and not created."""
    from eval_pipeline.history.__main__ import main

    monkeypatch.setenv("HISTORY_CLI_TEST_URL", pg_uri)
    assert main(["--url-env", "HISTORY_CLI_TEST_URL", "--prefix", "zzz_never", "runs"]) == 0
    assert "no run recorded in zzz_never_runs (--prefix zzz_never)" in capsys.readouterr().err
    monkeypatch.delenv("EVAL_PIPELINE_DB", raising=False)
    assert main(["--state-dir", str(pg_state_dir), "--database", "no_such_db", "runs"]) == 2
    assert "has no database 'no_such_db' (the jobs' is 'eval'; check --database)" in capsys.readouterr().err
    with psycopg.connect(pg_uri) as conn:
        assert conn.execute("SELECT count(*) FROM pg_database WHERE datname = 'no_such_db'").fetchone()[0] == 0


def test_a_refused_database_name_leaves_a_stopped_server_stopped(tmp_path, monkeypatch, capsys):
    """The check for --database starts the state dir's server when it is stopped; refusing, it stops
    it again (a command line that only reads must leave nothing running)."""
    from eval_pipeline.history.__main__ import main
    from eval_pipeline.store.database import EmbeddedPostgres

    monkeypatch.delenv("EVAL_PIPELINE_DB", raising=False)
    server = EmbeddedPostgres(tmp_path / "state")
    server.uri("eval")  # a state dir a job used: its cluster and database made
    server.stop()
    try:
        assert main(["--state-dir", str(tmp_path / "state"), "--database", "nope", "runs"]) == 2
        assert "has no database 'nope'" in capsys.readouterr().err
        assert server.pid is None
    finally:
        server.stop()
