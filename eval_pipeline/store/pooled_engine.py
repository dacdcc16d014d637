"""A SQLAlchemy plugin that keeps one connection open per engine, for Dagster's Postgres storage.

dagster-postgres makes each of its run, event-log and schedule storages an engine with NullPool:
every query opens a new connection, and so a new Postgres backend (about 2.5 ms of the client's
time and 3.5 ms of the server's CPU on these machines). One demo run opened 828 of them. Named in the
storage's URL (``…?host=…&plugin=eval_pipeline_pool``; ``python -m eval_pipeline.store.database url
--driver psycopg2 --pooled`` prints such a URL, and `make demo` uses it), this plugin gives each such
engine a pool that keeps one connection open between queries. Nothing else changes:

- as many connections at once as before: past the one kept, a connection is opened when needed and
  closed when given back (``max_overflow=-1``), so nothing ever waits for a free connection;
- a kept connection is checked before each use (``pool_pre_ping``): one the server closed while it
  sat idle (a restart, an idle timeout) is replaced, never met by a query;
- a forked process never uses its parent's connections: in the child, every pool this plugin made
  forgets them without closing them (closing would end the parent's sessions);
- at most ``KEPT`` engines of a process keep a connection: Dagster's storages never dispose their
  engines, so an instance that is dropped leaves its engines to the garbage collector, with their
  kept connections open until then. A process that makes instance after instance (a Celery worker
  makes one per task) would pile them up against the server's ``max_connections``; when a new engine
  is made, every engine but the newest ``KEPT`` closes its kept connection and keeps none from then
  on (one still in use opens a connection per query again, as NullPool did);
- an engine made with a pool other than NullPool keeps its own, and tells the plugin that the
  process pools its connections itself: dagster-webserver replaces each storage's engine by one
  with a pool of its own (``optimize_for_webserver``), and the engines it drops would otherwise keep
  their connection until a full garbage collection. Every engine the plugin pooled so far in the
  process then closes its kept connection and keeps none.

The library never imports Dagster: SQLAlchemy finds this class by the plugin's name
(`eval_pipeline.store.database.POOL_PLUGIN`), through the ``sqlalchemy.plugins`` entry point in
pyproject.toml."""

from __future__ import annotations

import os
import threading
import weakref
from typing import Any

from sqlalchemy.engine import CreateEnginePlugin, Engine
from sqlalchemy.pool import NullPool, QueuePool

POOL = {"pool_size": 1, "max_overflow": -1, "pool_pre_ping": True}
KEPT = 6  # two instances' three storages

_LOCK = threading.Lock()
_ENGINES: list[weakref.ReferenceType[Engine]] = []  # the engines this plugin pooled, oldest first


class KeptPool(QueuePool):
    """QueuePool that keeps its connection only while its engine is one of the newest KEPT: once
    told not to (`keep = False`), a connection given back is closed, as NullPool closes it."""

    keep = True

    def _do_return_conn(self, record: Any) -> None:
        if self.keep:
            super()._do_return_conn(record)
            return
        try:
            record.close()
        finally:
            self._dec_overflow()

    def recreate(self) -> QueuePool:
        pool = super().recreate()  # engine.dispose(): the same pool anew, told the same
        pool.keep = self.keep  # type: ignore[attr-defined]
        return pool


def _forget_in_child() -> None:
    global _LOCK
    _LOCK = threading.Lock()  # another thread of the parent may have held it at the fork: it never ends here
    for ref in _ENGINES:
        engine = ref()
        if engine is not None:
            engine.dispose(close=False)  # the parent's connections: left to the parent


os.register_at_fork(after_in_child=_forget_in_child)


def _stop_keeping(engine: Engine | None) -> None:
    pool = getattr(engine, "pool", None)
    if isinstance(pool, KeptPool) and pool.keep:
        pool.keep = False  # from now on it closes what it is given back, as NullPool did
        pool.dispose()  # and the connection it keeps now; one in use is closed when given back


def _keep_newest(engine: Engine) -> None:
    with _LOCK:
        _ENGINES[:] = [ref for ref in _ENGINES if ref() is not None]
        _ENGINES.append(weakref.ref(engine))
        older = [ref() for ref in _ENGINES[:-KEPT]]
    for old in older:
        _stop_keeping(old)


def _keep_none() -> None:
    with _LOCK:
        pooled = [ref() for ref in _ENGINES]
        _ENGINES.clear()
    for engine in pooled:
        _stop_keeping(engine)


class KeepOneConnection(CreateEnginePlugin):
    """Replaces an engine's NullPool by a pool that keeps one connection (the module's text)."""

    def __init__(self, url: Any, kwargs: dict[str, Any]) -> None:
        super().__init__(url, kwargs)
        self.pooled = kwargs.get("poolclass") is NullPool
        if self.pooled:
            kwargs["poolclass"] = KeptPool
            kwargs.update(POOL)

    def update_url(self, url: Any) -> Any:
        return url  # SQLAlchemy has already taken ``plugin=…`` out of the URL; nothing else is ours

    def engine_created(self, engine: Engine) -> None:
        if self.pooled:
            _keep_newest(engine)
        else:  # the process pools its own (the webserver replaces its storages' engines): ours keep none
            _keep_none()
