"""The default `eval_*` history (retrieval and answer measurements), held fresh by one test at
a time: every test that judges answers against it takes the same advisory lock, drops the
tables (or forgets the answers) before, and again after."""

import zlib
from collections.abc import Iterator
from contextlib import contextmanager

import psycopg

from eval_pipeline.history.runs import table_names

# one lock for every test of the answer table (its name is historical)
ANSWER_TABLE_LOCK = zlib.crc32(b"tests.integration.test_verdict_attacks:eval_answer_runs")


@contextmanager
def fresh_default_history(pg_uri: str) -> Iterator[None]:
    """Hold the lock; the default history dropped before and after."""
    tables = list(reversed(list(table_names("eval").values())))
    with psycopg.connect(pg_uri, autocommit=True) as lock:
        lock.execute("SELECT pg_advisory_lock(%s)", (ANSWER_TABLE_LOCK,))
        try:
            for table in tables:
                lock.execute(f'DROP TABLE IF EXISTS "{table}" CASCADE')
            yield
        finally:
            for table in tables:
                lock.execute(f'DROP TABLE IF EXISTS "{table}" CASCADE')
            lock.execute("SELECT pg_advisory_unlock(%s)", (ANSWER_TABLE_LOCK,))


def forget_answers(conn: psycopg.Connection) -> None:
    """The default history's answer measurements deleted (its retrieval ones kept): a fresh answer
    history for a test that judges answers alone."""
    if conn.execute("SELECT to_regclass('eval_measurements') IS NOT NULL").fetchone()[0]:
        conn.execute("DELETE FROM eval_measurements WHERE aspect LIKE 'answers:%'")
