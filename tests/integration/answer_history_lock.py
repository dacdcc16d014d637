"""The project-wide answer table (`eval_answer_runs`, no prefix) and the default `eval_*`
history, held fresh by one test at a time: every test that judges answers against them takes
the same advisory lock, drops the tables before, and drops them after."""

import zlib
from collections.abc import Iterator
from contextlib import contextmanager

import psycopg

from eval_pipeline.history.answers import answer_table_name
from eval_pipeline.history.runs import table_names

# one lock for every test of the answer table (its name is historical)
ANSWER_TABLE_LOCK = zlib.crc32(b"tests.integration.test_verdict_attacks:eval_answer_runs")


@contextmanager
def fresh_default_history(pg_uri: str) -> Iterator[None]:
    """Hold the lock; the answer table and the default retrieval history dropped before and after."""
    tables = [answer_table_name("eval"), *reversed(list(table_names("eval").values()))]
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
