"""A counting semaphore in Postgres: one concurrency limit shared by every process that uses
the same database and limiter name (see `eval_pipeline.common.limiter`).

Slot `s` of limiter `name` is the session advisory lock `pg_advisory_lock(hashtext(name), s)`
(the two-key form: it never collides with the one-key locks ingest takes). A holder takes a
free slot with `pg_try_advisory_lock`, trying every slot in one statement, and polls with a
jittered, growing pause while all are taken; it holds the slot on its own connection for the
call's duration and unlocks it afterwards, on an error too. A process that dies loses its
sessions and so its slots: nothing is left to clean up. A waiter that gets no slot within
`timeout` raises `LimiterTimeout` naming the sessions that hold them.

Every process must use the same `slots` for a name: the bound is the largest any of them uses.
Each process opens at most `slots` connections for a limiter (kept for reuse, one per thread
holding or waiting for a slot).
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import psycopg

from eval_pipeline.common.checks import is_integer
from eval_pipeline.common.limiter import LimiterTimeout
from eval_pipeline.store.database import HOLDERS_SELECT, connect, describe_holders, holder_rows, positive_seconds

DEFAULT_TIMEOUT = 600.0
_logger = logging.getLogger(__name__)

_TAKE_SQL = """
SELECT s FROM (SELECT (g + %(offset)s::int) %% %(slots)s::int AS s \
FROM generate_series(0, %(slots)s::int - 1) AS g) AS slots
WHERE pg_try_advisory_lock(hashtext(%(name)s), s) LIMIT 1
"""

_HOLDERS_SQL = HOLDERS_SELECT + """  AND l.objsubid = 2
  AND l.classid = (hashtext(%s)::bigint & 4294967295)::oid AND l.objid < %s::int
ORDER BY l.objid
"""


class PostgresLimiter:
    """At most `slots` holders at once among every session of the database using `name`."""

    def __init__(self, connection_string: str, *, name: str, slots: int, timeout: float = DEFAULT_TIMEOUT,
                 poll: float = 0.02, poll_max: float = 0.5, log: Callable[[str], Any] | None = None,
                 log_every: float = 30.0):
        if not is_integer(slots) or slots < 1:
            raise ValueError(f"slots must be an integer >= 1, got {slots!r}")
        if not isinstance(name, str) or not name:
            raise ValueError(f"name must be a non-empty string, got {name!r}")
        self.slots, self.name = slots, name
        self.timeout = positive_seconds(timeout, "timeout")
        self.poll, self.poll_max = positive_seconds(poll, "poll"), positive_seconds(poll_max, "poll_max")
        self.log_every = positive_seconds(log_every, "log_every")
        self._connection_string = connection_string
        self._log = log or _logger.warning
        self._local = threading.BoundedSemaphore(slots)  # this process never opens more than `slots` sessions
        self._idle: list = []
        self._lock = threading.Lock()
        self._random = random.Random()

    def __repr__(self) -> str:  # never the connection string
        return f"PostgresLimiter(name={self.name!r}, slots={self.slots}, timeout={self.timeout:g})"

    def describe(self) -> str:
        return f"shared through Postgres ({self.name!r}), {self.slots} slot(s)"

    @contextmanager
    def slot(self) -> Iterator[int]:
        """Hold a free slot (its number) while the block runs; LimiterTimeout after `timeout`."""
        with self._local:
            conn = self._connection()
            try:
                number = self._take(conn)
            except BaseException:
                self._put_back(conn, None)
                raise
            try:
                yield number
            finally:
                self._put_back(conn, number)

    def close(self) -> None:
        """Close the idle connections (a held slot's connection closes when it is put back)."""
        with self._lock:
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()

    def holders(self, conn) -> list[dict[str, Any]]:
        rows = conn.execute(_HOLDERS_SQL, (self.name, self.slots)).fetchall()
        return holder_rows(r for r in rows if r[0] != conn.info.backend_pid)

    # --- internals -----------------------------------------------------------------------

    def _connection(self):
        with self._lock:
            if self._idle:
                return self._idle.pop()
        return connect(self._connection_string, autocommit=True, application_name=f"eval-pipeline limiter {self.name}")

    def _put_back(self, conn, number: int | None) -> None:
        """Unlock the slot and keep the connection; a broken one is closed (its locks died with it)."""
        try:
            if number is not None:
                conn.execute("SELECT pg_advisory_unlock(hashtext(%s), %s::int)", (self.name, number))
        except psycopg.Error:
            conn.close()
            return
        if conn.closed:
            return
        with self._lock:
            self._idle.append(conn)

    def _take(self, conn) -> int:
        started = time.monotonic()
        next_log, pause = started + self.log_every, self.poll
        while True:
            row = conn.execute(_TAKE_SQL, {"offset": self._random.randrange(self.slots), "slots": self.slots,
                                           "name": self.name}).fetchone()
            if row is not None:
                return row[0]
            now = time.monotonic()
            waited = now - started
            if waited >= self.timeout:
                raise LimiterTimeout(
                    f"no slot of the shared limit {self.name!r} ({self.slots} slot(s)) came free in {waited:.0f} s "
                    f"(timeout {self.timeout:g} s); held by {describe_holders(self.holders(conn))}. "
                    "Other steps or runs "
                    "are calling the same endpoint: wait for them, raise the timeout, or stop a stuck holder with "
                    "`SELECT pg_terminate_backend(pid)`")
            if now >= next_log:
                self._log(f"waiting {waited:.0f} s so far for a slot of the shared limit {self.name!r} "
                          f"({self.slots} slot(s)), held by {describe_holders(self.holders(conn))}")
                next_log = now + self.log_every
            time.sleep(min(pause * self._random.uniform(0.5, 1.0), max(0.0, started + self.timeout - now) + 0.001))
            pause = min(pause * 2, self.poll_max)
