"""The database password never leaves the environment, even when the URL is malformed.

libpq's URL parser echoes the connection string (or a piece of it) when the password holds
`%`, `@`, `:` or `/`.  The real job, pointed at a database that refuses or never answers, must
fail, saying where it tried to connect, with no fragment of the password in its output, the
files under its state dir (compute logs included) or Dagster's event log."""

import json
import socket
import threading
import time
from pathlib import Path
from urllib.parse import quote

import psycopg
import pytest

from tests.integration.cli import start_job, tiny_job_config

pytestmark = pytest.mark.integration

# Every piece longer than 3 characters is unlikely to occur by chance in a log.
PASSWORD = "Qx7ä%zz@Vk:9/Jwö"


def forbidden(secret: str = PASSWORD) -> set[str]:
    """Every fragment longer than 3 characters, as written, JSON-escaped (the event log is
    JSON) and the whole percent-encoded."""
    pieces = {secret[i:j] for i in range(len(secret)) for j in range(i + 4, len(secret) + 1)}
    pieces |= {quote(secret, safe=""), quote(secret, safe="").lower()}
    return pieces | {json.dumps(p)[1:-1] for p in pieces}


def hits_in(text: str) -> list[str]:
    return sorted(f for f in forbidden() if f in text)


class SilentServer:
    """Accepts TCP connections on 127.0.0.1 and never says a word."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.accepted = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                self.accepted.append(self.sock.accept()[0])
            except OSError:
                return

    def close(self):
        self.sock.close()
        for conn in self.accepted:
            conn.close()


def _refusing_port() -> tuple[socket.socket, int]:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))  # bound, never listening: connections are refused
    return s, s.getsockname()[1]


def _max_event_id(uri: str) -> int:
    with psycopg.connect(uri) as conn:
        if conn.execute("SELECT to_regclass('event_logs')").fetchone()[0] is None:
            return 0  # no run has used this instance yet: Dagster creates its tables on first use
        return conn.execute("SELECT coalesce(max(id), 0) FROM event_logs").fetchone()[0]


@pytest.mark.parametrize("case", ["malformed-url-refused", "encoded-url-silent-server"])
def test_database_password_never_leaves_the_environment(tmp_path, job_env, embedded_pg, case):
    dagster_uri = embedded_pg.uri("dagster")
    if case == "malformed-url-refused":
        holder, port = _refusing_port()
        url = f"postgresql://user:{PASSWORD}@127.0.0.1:{port}/eval"  # raw: libpq trips on '%' and '@'
        close = holder.close
    else:
        server = SilentServer()
        port = server.port
        url = f"postgresql://user:{quote(PASSWORD, safe='')}@127.0.0.1:{port}/eval"
        close = server.close
    env = job_env("state", EVAL_PIPELINE_DB="external", EVAL_PIPELINE_DATABASE_URL=url,
                  EVAL_PIPELINE_DB_CONNECT_TIMEOUT="2")
    state = Path(env["EVAL_PIPELINE_STATE_DIR"])
    before = _max_event_id(dagster_uri)
    started = time.monotonic()
    try:
        job = start_job(tmp_path, "job", env, tiny_job_config(tmp_path / "results"))
        code = job.wait(timeout=600)
    finally:
        close()
    output = (tmp_path / "job.log").read_text(errors="replace")
    assert code != 0, output[-3000:]
    assert time.monotonic() - started < 300
    assert f"could not connect to PostgreSQL at host 127.0.0.1 port {port} database eval" in output, output[-3000:]

    leaks = {}
    if hits_in(output):
        leaks["job output"] = hits_in(output)
    for root in (tmp_path, state):
        for path in root.rglob("*"):
            if path.is_file() and "pgdata" not in path.parts and path.suffix != ".yaml":
                found = hits_in(path.read_bytes().decode("utf-8", "replace"))
                if found:
                    leaks[str(path)] = found
    with psycopg.connect(dagster_uri) as conn:
        rows = conn.execute("SELECT t::text FROM event_logs t WHERE id > %s", (before,)).fetchall()
        assert rows, "the run left no events"
        events = "\n".join(r[0] for r in rows)
        assert f"port {port}" in events  # the failure (redacted) is in the event log
        if hits_in(events):
            leaks["event_logs"] = hits_in(events)
        for table in ("runs", "run_tags", "snapshots"):
            text = "\n".join(r[0] for r in conn.execute(
                psycopg.sql.SQL("SELECT t::text FROM {} t").format(psycopg.sql.Identifier(table))).fetchall())
            if hits_in(text):
                leaks[table] = hits_in(text)
    assert leaks == {}
