"""Dagster's Postgres storage through the eval_pipeline_pool plugin (eval_pipeline/store/pooled_engine.py):
a connection kept per storage engine instead of one per query, and nothing else changed.

Each test counts the connections SQLAlchemy opens (its pool's ``connect`` event, for every pool) while
a real Dagster instance on the session's Postgres answers queries, with the URL `make demo` uses
(``--pooled``) and, as the control, without it."""

from __future__ import annotations

import gc
import os
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest
import yaml
from sqlalchemy import event
from sqlalchemy.pool import Pool

from eval_pipeline.store.database import POOL_PLUGIN, ensure_database, with_pool_plugin

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def opened():
    """The DBAPI connections any SQLAlchemy pool of this process opens during the test."""
    seen: list = []

    def on_connect(dbapi_connection, record):
        seen.append(dbapi_connection)

    event.listen(Pool, "connect", on_connect)
    yield seen
    event.remove(Pool, "connect", on_connect)


@pytest.fixture
def dagster_url(embedded_pg, request):
    name = "pool_" + request.node.name.lower().replace("[", "_").replace("]", "")[:40]
    ensure_database(embedded_pg.uri("postgres"), name)
    return embedded_pg.uri(name, driver="psycopg2")


def _libpq(url: str) -> str:
    """The storage's URL as libpq reads it (psycopg, for the tests' own looks at the server)."""
    return url.replace("postgresql+psycopg2://", "postgresql://")


def _instance(tmp_path: Path, url: str):
    from dagster import DagsterInstance

    home = tmp_path / f"home{len(list(tmp_path.glob('home*')))}"
    home.mkdir()
    (home / "dagster.yaml").write_text(yaml.safe_dump({"storage": {"postgres": {"postgres_url": url}},
                                                       "telemetry": {"enabled": False}}))
    return DagsterInstance.from_config(str(home))


def _queries(instance, n: int = 20) -> None:
    for _ in range(n):
        instance.get_runs(limit=1)
        instance.get_run_records(limit=1)


def test_the_url_names_the_plugin_once():
    url = "postgresql+psycopg2://postgres:@/dagster?host=/tmp/x"
    assert with_pool_plugin(url) == url + f"&plugin={POOL_PLUGIN}"
    assert with_pool_plugin(with_pool_plugin(url)) == with_pool_plugin(url)
    assert with_pool_plugin("postgresql+psycopg2://u@h/db") == f"postgresql+psycopg2://u@h/db?plugin={POOL_PLUGIN}"


def test_make_demo_s_url_names_the_plugin(tmp_path, embedded_pg):
    out = subprocess.run([sys.executable, "-m", "eval_pipeline.store.database", "url", "--state-dir",
                          str(tmp_path / "state"), "--database", "dagster", "--driver", "psycopg2", "--pooled"],
                         capture_output=True, text=True, check=True, cwd=REPO).stdout.strip()
    try:
        assert out.startswith("postgresql+psycopg2://") and out.endswith(f"&plugin={POOL_PLUGIN}"), out
        assert "--pooled" in (REPO / "Makefile").read_text()
    finally:
        subprocess.run([sys.executable, "-m", "eval_pipeline.store.database", "stop", "--state-dir",
                        str(tmp_path / "state")], check=False, cwd=REPO)


def test_forty_queries_on_a_kept_connection_each_storage(tmp_path, dagster_url, opened):
    with _instance(tmp_path, dagster_url) as control:
        _queries(control, 1)  # the tables exist before the counts
        opened.clear()
        _queries(control)
        assert len(opened) >= 40  # NullPool: a connection per query
    with _instance(tmp_path, with_pool_plugin(dagster_url)) as pooled:
        _queries(pooled, 1)
        opened.clear()
        _queries(pooled)
        assert len(opened) == 0, len(opened)  # the run storage's one kept connection answered all forty


def test_a_kept_connection_the_server_closed_is_replaced_not_met(tmp_path, dagster_url, opened):
    with _instance(tmp_path, with_pool_plugin(dagster_url)) as pooled:
        _queries(pooled, 1)
        with psycopg.connect(_libpq(dagster_url), autocommit=True) as conn:
            ended = conn.execute("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                                 "WHERE datname = current_database() AND pid <> pg_backend_pid()").fetchone()[0]
        assert ended >= 1
        opened.clear()
        _queries(pooled, 3)  # no error: the check before use found it closed
        assert len(opened) == 1


def _backend_pid(instance) -> int:
    with instance._run_storage._engine.connect() as conn:  # the run storage's engine: the one the queries used
        return conn.exec_driver_sql("SELECT pg_backend_pid()").scalar()


def test_a_forked_child_never_uses_its_parent_s_connection(tmp_path, dagster_url):
    with _instance(tmp_path, with_pool_plugin(dagster_url)) as pooled:
        _queries(pooled, 1)
        parent = _backend_pid(pooled)
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: a connection of its own
            code = 1
            try:
                os.close(read)
                _queries(pooled, 3)
                os.write(write, str(_backend_pid(pooled)).encode())
                code = 0
            finally:
                os._exit(code)
        os.close(write)
        _, status = os.waitpid(pid, 0)
        child = int(os.read(read, 32) or 0)
        assert os.waitstatus_to_exitcode(status) == 0 and child not in (0, parent), (child, parent)
        _queries(pooled, 3)
        assert _backend_pid(pooled) == parent  # the parent's kept connection still answers


def test_dropped_instances_keep_at_most_kept_connections(tmp_path, dagster_url):
    gc.disable()  # as between two collections: dropped instances' engines are still there
    try:
        for _ in range(6):
            instance = _instance(tmp_path, with_pool_plugin(dagster_url))
            _queries(instance, 1)
            instance.get_runs_count()
            del instance
        with psycopg.connect(_libpq(dagster_url), autocommit=True) as conn:
            idle = conn.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                                "AND pid <> pg_backend_pid()").fetchone()[0]
        assert idle <= 6, idle  # KEPT: two instances' three storages (six instances left 18 before)
    finally:
        gc.enable()
        gc.collect()


def test_an_engine_with_a_pool_of_its_own_keeps_it(dagster_url):
    from sqlalchemy import create_engine
    from sqlalchemy.pool import NullPool, QueuePool, StaticPool

    engine = create_engine(with_pool_plugin(dagster_url), poolclass=StaticPool)
    try:
        assert isinstance(engine.pool, StaticPool)
    finally:
        engine.dispose()
    engine = create_engine(with_pool_plugin(dagster_url), poolclass=NullPool)
    try:
        assert isinstance(engine.pool, QueuePool) and engine.pool.size() == 1
    finally:
        engine.dispose()
