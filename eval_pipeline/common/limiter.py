"""Concurrency limits for calls to a rate-limited endpoint (the LLM client's requests).

A limiter hands out *slots*: `with limiter.slot(): ...` holds one for the duration of one call.

- `LocalLimiter` (the LLM client's default) is a semaphore: it bounds the threads of one
  process, which is all a single-process run needs.
- `eval_pipeline.store.limiter.PostgresLimiter` bounds every process that uses the same
  database and limiter name (Dagster's multiprocess steps, other runs, workers on other
  machines): a slot is a Postgres advisory lock, released when the call ends, on an error, and
  when the holding process dies. It lives in `store` because it connects through
  `eval_pipeline.store.database` (this package may import no stage above it).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Protocol

from eval_pipeline.common.checks import is_integer


class LimiterTimeout(RuntimeError):
    """No slot came free within the limiter's timeout; the message says who holds them."""


class Limiter(Protocol):
    slots: int

    def slot(self) -> AbstractContextManager[int]: ...  # yields the slot's number

    def describe(self) -> str: ...  # for logs and reprs; never a secret


class LocalLimiter:
    """At most `slots` holders at once among the threads of this process."""

    def __init__(self, slots: int):
        if not is_integer(slots) or slots < 1:
            raise ValueError(f"slots must be an integer >= 1, got {slots!r}")
        self.slots = slots
        self._semaphore = threading.BoundedSemaphore(slots)

    @contextmanager
    def slot(self) -> Iterator[int]:
        with self._semaphore:
            yield 0

    def describe(self) -> str:
        return f"in-process, {self.slots} slot(s)"
