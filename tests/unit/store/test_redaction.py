"""Passwords never leave `eval_pipeline.store.database`: `redact`, `scrub`, and `connect`'s errors.

libpq's URL parser echoes the connection string, or a piece of it, when the password holds
`%`, `@`, `:` or `/`; `connect` must turn every such failure into a message (and traceback)
that names where it tried to connect and holds no fragment of the password."""

import socket
import threading
import time
import traceback
from urllib.parse import quote

import pytest

from eval_pipeline.store.database import (
    REDACTED,
    DatabaseConnectionError,
    DatabaseError,
    call_redacted,
    connect,
    describe_target,
    parse_conninfo,
    redact,
    scrub,
)

NASTY = "pä%ss@w:rd/x"  # every character libpq's URL parser trips on, and a non-ASCII one


def fragments(secret: str, min_len: int = 4) -> set[str]:
    """Every substring longer than 3 characters, and the encoded forms of the whole."""
    pieces = {secret[i:j] for i in range(len(secret)) for j in range(i + min_len, len(secret) + 1)}
    return pieces | {quote(secret, safe=""), secret.encode().decode("latin-1")}


def leaks(text: str, secret: str) -> list[str]:
    return sorted(f for f in fragments(secret) if f in text)


# --- redact: no password known, works from the shape of the text --------------------------

@pytest.mark.parametrize("password", ["s3cretpw", NASTY, "p%zzsecret", "a@b@c@d", "x/y/z:w", "ünï cødé@1"])
@pytest.mark.parametrize("scheme", ["postgresql", "postgres", "postgresql+psycopg2", "postgresql+asyncpg"])
def test_redact_removes_url_passwords(password, scheme):
    text = f"could not use {scheme}://eval:{password}@db.example.com:5432/eval?sslmode=require, giving up"
    out = redact(text)
    assert leaks(out, password) == [], out
    assert out.startswith(f"could not use {scheme}://eval:{REDACTED}@")
    assert "giving up" in out


def test_redact_keeps_urls_without_password_and_prose():
    text = "connected to postgresql://eval@db:5432/eval and postgresql://db:5432/eval, [::1]:5432 fine"
    assert redact(text) == text
    assert redact("postgresql://postgres:@/eval?host=/tmp/x") == "postgresql://postgres:***@/eval?host=/tmp/x"


def test_redact_two_urls_on_one_line():
    out = redact("a postgresql://u:first1@h1/db b postgres://v:second2@h2/db")
    assert "first1" not in out and "second2" not in out and "h1/db" in out and "h2/db" in out


@pytest.mark.parametrize("text, secret", [
    ("host=db port=5432 password=s3cr3tpw dbname=eval", "s3cr3tpw"),
    ("host=db password='s3 cr\\'3t pw' dbname=eval", "s3 cr\\'3t pw"),
    ("host=db PASSWORD = \"quoted pw!\" dbname=eval", "quoted pw!"),
    ("PGPASSWORD=envsecret9 psql", "envsecret9"),
    ("postgresql://db/eval?user=u&password=querysecret&sslmode=require", "querysecret"),
    ("{'host': 'db', 'password': 'dictsecret', 'port': 5432}", "dictsecret"),
    ('{"password": "jsonsecret"}', "jsonsecret"),
    ("host=db password=unterminated'quote", "unterminated'quote"),
])
def test_redact_removes_key_value_passwords(text, secret):
    out = redact(text)
    assert leaks(out, secret) == [], out
    assert REDACTED in out


def test_redact_is_idempotent_and_total():
    once = redact(f"postgresql://u:{NASTY}@h:1/db password={NASTY}")
    assert redact(once) == once
    assert redact("") == ""


# --- parsing without libpq --------------------------------------------------------------

def test_parse_conninfo_url_and_key_value():
    info = parse_conninfo(f"postgresql://eval:{NASTY}@127.0.0.1:6543/evaldb?connect_timeout=7")
    assert (info["host"], info["port"], info["dbname"], info["user"], info["connect_timeout"]) == (
        "127.0.0.1", "6543", "evaldb", "eval", "7")
    assert NASTY in info["secrets"]
    info = parse_conninfo("host=/tmp/sock dbname=eval user=u password='a b\\'c'")
    assert (info["host"], info["dbname"], info["secrets"]) == ("/tmp/sock", "eval", ["a b'c"])
    info = parse_conninfo("postgresql://postgres:@/eval?host=/tmp/pgdata")
    assert (info["host"], info["dbname"], info["secrets"]) == ("/tmp/pgdata", "eval", [])
    info = parse_conninfo("postgresql://u:pw@[::1]:5433/db")
    assert (info["host"], info["port"]) == ("::1", "5433")


def test_describe_target_names_host_port_database():
    assert describe_target(f"postgresql://eval:{NASTY}@127.0.0.1:6543/evaldb") == (
        "host 127.0.0.1 port 6543 database evaldb user eval")
    assert describe_target("postgresql://postgres:@/eval?host=/tmp/pgdata") == (
        "socket /tmp/pgdata/.s.PGSQL.5432 database eval user postgres")


# --- scrub: the password is known -----------------------------------------------------------

def test_scrub_removes_fragments_libpq_quotes():
    url = f"postgresql://user:{NASTY}@127.0.0.1:5432/eval"
    libpq = 'invalid percent-encoded token: "pä%ss"'  # libpq stops at the first '@'
    out = scrub(libpq, url)
    assert leaks(out, NASTY) == [] and "pä%ss" not in out, out
    assert scrub("failed to resolve host 'w:rd/x@127.0.0.1'", url).count("w:rd") == 0
    encoded = scrub(f"echo {quote(NASTY, safe='')} and {NASTY.encode().decode('latin-1')}", url)
    assert leaks(encoded, NASTY) == [], encoded


def test_scrub_with_a_percent_encoded_password():
    url = f"postgresql://user:{quote(NASTY, safe='')}@127.0.0.1:5432/eval"
    out = scrub(f"the decoded {NASTY} and the encoded {quote(NASTY, safe='')}", url)
    assert leaks(out, NASTY) == [], out


# --- connect: every failure redacted, nothing chained ----------------------------------

def _all_text(exc: BaseException) -> str:
    return str(exc) + "".join(traceback.format_exception(exc)) + repr(exc) + repr(exc.args)


@pytest.mark.parametrize("password", [NASTY, "p%zzsecret", "sec@ret@more", "ab/cdefg", "s%2xcret", "q:wert:yz"])
def test_connect_errors_hold_no_fragment_of_the_password(password):
    url = f"postgresql://user:{password}@127.0.0.1:1/eval"
    with pytest.raises(DatabaseConnectionError) as info:
        connect(url, connect_timeout=2)
    exc = info.value
    assert exc.__cause__ is None and exc.__context__ is None and exc.__suppress_context__
    text = _all_text(exc)
    assert leaks(text, password) == [], text
    assert "could not connect to PostgreSQL at" in str(exc) and "database eval" in str(exc)


def test_connect_key_value_password_with_bad_option():
    password = "kv%secret@x"  # a variable: the traceback shows this test's source lines
    with pytest.raises(DatabaseConnectionError) as info:
        connect(f"host=127.0.0.1 port=1 dbname=eval password='{password}' sslmode=bogus", connect_timeout=2)
    assert leaks(_all_text(info.value), password) == []
    assert "host 127.0.0.1 port 1" in str(info.value)


def test_connect_refused_names_host_and_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound, not listening: refused
        with pytest.raises(DatabaseConnectionError, match=f"host 127.0.0.1 port {port} database eval"):
            connect(f"postgresql://user:{quote(NASTY, safe='')}@127.0.0.1:{port}/eval", connect_timeout=2)


def test_connect_times_out_on_a_server_that_never_answers():
    """Accepts the TCP connection, then says nothing: libpq would wait forever without a timeout."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    port = server.getsockname()[1]
    accepted = []

    def accept():
        while True:
            try:
                accepted.append(server.accept()[0])
            except OSError:
                return

    threading.Thread(target=accept, daemon=True).start()
    password = "hang-secret-" + NASTY
    started = time.monotonic()
    try:
        with pytest.raises(DatabaseConnectionError) as info:
            connect(f"postgresql://user:{quote(password, safe='')}@127.0.0.1:{port}/eval", connect_timeout=1)
    finally:
        server.close()
        for c in accepted:
            c.close()
    assert time.monotonic() - started < 15
    message = str(info.value)
    assert "127.0.0.1" in message and str(port) in message and "connect_timeout" in message
    assert leaks(_all_text(info.value), password) == []


def test_connect_timeout_from_environment_is_validated(monkeypatch):
    monkeypatch.setenv("EVAL_PIPELINE_DB_CONNECT_TIMEOUT", "soon")
    with pytest.raises(ValueError, match="EVAL_PIPELINE_DB_CONNECT_TIMEOUT must be a number"):
        connect("postgresql://u:p@127.0.0.1:1/db")
    with pytest.raises(ValueError, match="connect_timeout must be a number"):
        connect("postgresql://u:p@127.0.0.1:1/db", connect_timeout=0)
    with pytest.raises(ValueError, match="non-empty"):
        connect("")


# --- redacting: errors of libraries that connect on their own ----------------------

def test_call_redacted_replaces_a_leaking_error_and_keeps_a_clean_one():
    url = f"postgresql://user:{NASTY}@h:1/db"

    def leaky():
        try:
            raise ValueError(f"bad url {url}")
        except ValueError as inner:
            raise RuntimeError("wrapper") from inner

    with pytest.raises(DatabaseError) as info:
        call_redacted(url, "writing the store", leaky)
    assert info.value.__cause__ is None and info.value.__context__ is None
    assert leaks(_all_text(info.value), NASTY) == []
    assert str(info.value).startswith("writing the store failed: RuntimeError: wrapper")

    def clean():
        raise KeyError("clean")

    with pytest.raises(KeyError):
        call_redacted(url, "reading", clean)
    assert call_redacted(url, "adding", lambda a, b: a + b, 1, b=2) == 3
