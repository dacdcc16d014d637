"""One whole-job run with a secret in every place a user can put one, and a scan of everything
the run left for any fragment of them (#25).

The places:

- the database URL's password (EVAL_PIPELINE_DB=external, EVAL_PIPELINE_DATABASE_URL): a role
  of the state dir's embedded Postgres that must log in with it (scram-sha-256), so the job
  cannot run without really using it;
- the userinfo of OPENAI_BASE_URL (``http://user:<secret>@127.0.0.1:<port>/v1``), which the
  HTTP client sends as basic auth;
- the query of OPENAI_BASE_URL (``?api-key=<secret>``, Azure-style);
- OPENAI_API_KEY;
- EVAL_PIPELINE_JUDGE_API_KEY, the key of the judge's own model (`judge_llm`, #27): the judge
  and decision graders call another model than the generator's (a self-judging run is refused).

The run (`dagster job execute` on the tiny fixture) calls the OpenAI-compatible test server
(tests/openai_stub.py, wrapped here so that a query string on its URL is accepted) for every
kind of model call it can make: the embedder (EVAL_PIPELINE_EMBEDDER=openai: chunks and
questions), question generation, an LLM reranker, LLM answers to the golden prompts, the
`judge` and `decision` graders and the grading of holes; the LLM's concurrency limit is shared
through the database (EVAL_PIPELINE_LLM_SHARED_LIMIT=1), so the limiter's rows are written too.

The scan: every fragment longer than 3 characters of each secret, as written, JSON-escaped,
percent-encoded (upper and lower case hex, `+` for spaces), as a bytes repr, and the basic-auth
header value, in the job's output, every file under the state dir (the embedded Postgres data
dir, the compute logs and the step outputs included, read as bytes), every file under the
results dir, every table of Dagster's database (compressed snapshots decompressed) and every
table of the history database (the `eval_...` tables and the others beside them).

Each secret has a character outside ASCII at every fourth place where a header allows it (all
but the API key), so every fragment is at least five bytes in UTF-8: a chance match in the
binary files of the data dir is out of the question.
"""

from __future__ import annotations

import base64
import json
import re
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import parse_qs, quote, quote_plus, urlsplit

import psycopg
import pytest
import yaml
from psycopg import sql

from eval_pipeline.store.database import EmbeddedPostgres
from tests.fake_llm import backtranslation_chat
from tests.integration.cli import FIXTURES, job_environment, start_job, tiny_job_config
from tests.openai_stub import OpenAIStub

pytestmark = pytest.mark.integration

MIN_FRAGMENT = 4  # "every fragment longer than 3 characters"
DB_ROLE = "secretscan"
BASIC_USER = "proxyuser"
SECRETS = {
    "database password": "Db7äKw%öRz@üMq:ßNv/é",
    "base URL userinfo password": "Uq4öP:zäL@küT%béW/8ß",
    "base URL query api-key": "Qk5ëRm!ïXj2õ+WvçHs9å",
    "OPENAI_API_KEY": "Yh6Jd9Ng3Fc0WsKp7Rx2",  # a header value: ASCII only
    "EVAL_PIPELINE_JUDGE_API_KEY": "Jq8Vt4Lm1Zb6Hn3Cs5Pw",  # a header value: ASCII only
}
CHAT_KINDS = ("rerank", "hole", "judge", "decision", "answer", "generate")


# --------------------------------------------------------------------------------------------
# the fragments
# --------------------------------------------------------------------------------------------


def _lower_hex(text: str) -> str:
    return re.sub(r"%[0-9A-F]{2}", lambda m: m.group().lower(), text)


def _forms(piece: str) -> set[str]:
    """The ways a piece of a secret can be written down: as is, JSON-escaped (both ways),
    percent-encoded (as a URL part, a path, a form; either hex case), as a bytes repr."""
    forms = {piece, json.dumps(piece)[1:-1], json.dumps(piece, ensure_ascii=False)[1:-1],
             str(piece.encode("utf-8"))[2:-1], piece.encode("unicode_escape").decode("ascii")}
    for encoded in (quote(piece, safe=""), quote(piece), quote_plus(piece)):
        forms |= {encoded, _lower_hex(encoded)}
    return forms


def forbidden(secret: str) -> set[str]:
    """Every form of every fragment of `secret` of MIN_FRAGMENT characters: a longer fragment
    contains one, in every form (a piece of an encoded secret that covers fewer than four of
    its characters, like ``%3A8%2F``, is not a fragment "longer than 3 characters")."""
    pieces = {secret[i:i + MIN_FRAGMENT] for i in range(len(secret) - MIN_FRAGMENT + 1)}
    return {form for piece in pieces for form in _forms(piece)}


def basic_auth_value(password: str) -> str:
    return base64.b64encode(f"{BASIC_USER}:{password}".encode()).decode()


def patterns() -> dict[bytes, str]:
    """byte pattern -> the secret it is a fragment of."""
    out: dict[bytes, str] = {}
    for name, secret in SECRETS.items():
        for form in forbidden(secret):
            out[form.encode("utf-8")] = name
    # The basic-auth header value: every run of 8 of its characters that depends on the password.
    token = basic_auth_value(SECRETS["base URL userinfo password"])
    skip = (len(BASIC_USER) + 1) * 4 // 3  # the characters that encode only "user:"
    for i in range(skip, len(token) - 8 + 1):
        out[token[i:i + 8].encode()] = "base URL userinfo password (basic-auth header)"
    return out


PATTERNS = patterns()
ANY_PATTERN = re.compile(b"|".join(re.escape(p) for p in sorted(PATTERNS, key=len, reverse=True)))  # one pass


@dataclass(frozen=True)
class Hit:
    """The fragments of one secret found in one place: how many, and the first (by position)
    with its line and the text around it."""

    where: str  # a file, "job output" or "db <table> <row>"
    line: int  # 1-based line of the first fragment in the file or text
    secret: str
    fragments: int
    fragment: str
    context: str

    def __str__(self):
        return (f"{self.where}:{self.line}: {self.secret}: {self.fragments} fragment(s), first {self.fragment!r} "
                f"in …{self.context}…")


def hits_in(data: bytes | str, where: str) -> list[Hit]:
    if isinstance(data, str):
        data = data.encode("utf-8", "surrogateescape")
    if not ANY_PATTERN.search(data):
        return []
    by_secret: dict[str, list[tuple[int, bytes]]] = {}
    for pattern, name in PATTERNS.items():
        at = data.find(pattern)
        if at >= 0:
            by_secret.setdefault(name, []).append((at, pattern))
    found = []
    for name, matches in sorted(by_secret.items()):
        at, pattern = min(matches)
        context = data[max(0, at - 100):at + len(pattern) + 100].decode("utf-8", "replace").replace("\n", "⏎")
        found.append(Hit(where, data.count(b"\n", 0, at) + 1, name, len(matches), pattern.decode("utf-8", "replace"),
                         context))
    return found


# --------------------------------------------------------------------------------------------
# the test server: an OpenAI-compatible endpoint that takes a query string and basic auth
# --------------------------------------------------------------------------------------------


def chat_kind(body: dict) -> str:
    system = next((m.get("content", "") for m in body.get("messages", []) if m.get("role") == "system"), "")
    for kind, words in (("rerank", "rank search results"), ("hole", "grade how well a document"),
                        ("judge", "grade an answer"), ("decision", "judge how well an answer"),
                        ("answer", "answer a question from numbered documents")):
        if words in system:
            return kind
    return "generate"


def model_reply(body: dict) -> str:
    kind = chat_kind(body)
    user = body["messages"][-1]["content"]
    if kind == "rerank":
        return json.dumps(list(reversed(re.findall(r'"id": "([^"]+)"', user))))
    if kind == "hole":
        return '{"grade": 2, "reason": "It covers part of the question."}'
    if kind == "judge":
        return '{"faithfulness": 4, "relevance": 4, "citations": 5, "reason": "Supported by document 1."}'
    if kind == "decision":
        return '{"level": 4, "reason": "Close to the reference."}'
    if kind == "answer":
        return "The documents say what to do [1]."
    return backtranslation_chat(body)


ROUTES = ("chat/completions", "embeddings")


class SecretStub(OpenAIStub):
    """tests/openai_stub.OpenAIStub routing a request whose base URL had a query string.

    The stub routes by the end of the path. The `openai` client joins the route to the base
    URL's raw path, query included: ``/v1?api-key=K`` + ``chat/completions`` is sent as
    ``/v1/?api-key=Kchat/completions`` (a real server would answer 404). Here the route is
    taken from the end of the whole target instead, and every request's target and
    authorization header are kept in `raw`."""

    def __init__(self, **kwargs):
        super().__init__(chat=model_reply, **kwargs)
        stub, handler = self, self.server.RequestHandlerClass
        self.raw: list[dict] = []

        class WithQuery(handler):
            def do_POST(self):
                parts = urlsplit(self.path)
                route = next((r for r in ROUTES if self.path.endswith(r)), "")
                stub.raw.append({"target": self.path, "path": parts.path, "query": parts.query, "route": route,
                                 "authorization": self.headers.get("Authorization", "")})
                self.path = f"/v1/{route}" if route else parts.path
                super().do_POST()

        self.server.RequestHandlerClass = WithQuery


# --------------------------------------------------------------------------------------------
# the run
# --------------------------------------------------------------------------------------------


VARIANTS = {
    "baseline": "dense",
    "variants": [{"engine": "pg-dense", "name": "dense"},
                 {"engine": "pg-dense", "name": "dense+llm", "reranker": {"kind": "llm"}}],
}


@dataclass
class ScanRun:
    root: Path
    state: Path
    results: Path
    code: int
    log: str
    dagster_uri: str
    history_uri: str
    raw: list[dict]
    requests: list[dict]
    errors: list = field(default_factory=list)

    def __repr__(self):
        return f"ScanRun({self.root}, exit code {self.code}, {len(self.raw)} requests to the test server)"

    def chat_kinds(self) -> dict[str, int]:
        counts = dict.fromkeys(CHAT_KINDS, 0)
        for r in self.requests:
            if r["path"].endswith("/chat/completions"):
                counts[chat_kind(r["body"])] += 1
        return counts


def _password_role(pg: EmbeddedPostgres) -> str:
    """A superuser role of the state dir's server that logs in over its socket with the
    database password only (scram-sha-256; every other role keeps trust); the job's URL."""
    admin = pg.uri("eval")
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute("SET password_encryption = 'scram-sha-256'")
        conn.execute(sql.SQL("CREATE ROLE {} LOGIN SUPERUSER PASSWORD {}").format(
            sql.Identifier(DB_ROLE), sql.Literal(SECRETS["database password"])))
    hba = pg.pgdata / "pg_hba.conf"
    hba.write_text(f"local all {DB_ROLE} scram-sha-256\n" + hba.read_text())
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute("SELECT pg_reload_conf()")
    url = f"postgresql://{DB_ROLE}:{quote(SECRETS['database password'], safe='')}@/eval?host={pg.pgdata}"
    with pytest.raises(psycopg.OperationalError):  # the password is really asked for
        psycopg.connect(f"postgresql://{DB_ROLE}:wrong-password@/eval?host={pg.pgdata}").close()
    psycopg.connect(url).close()
    return url


# The run's Dagster instance in a database of its own on the session server: the scan reads every
# table of it, and the worker's shared "dagster" database holds every other run of the session too
# (22 s of scanning in the loaded lane, for rows this run never wrote).
DAGSTER_DATABASE = "dagster_secret_scan"


@pytest.fixture(scope="module")
def run(tmp_path_factory, embedded_pg):
    root = tmp_path_factory.mktemp("secret_scan")
    state, results = root / "state", root / "results"
    pg = EmbeddedPostgres(state)
    try:
        db_url = _password_role(pg)
        variants = root / "variants.yaml"
        variants.write_text(yaml.safe_dump(VARIANTS, sort_keys=False))
        with SecretStub() as stub:
            port = stub.server.server_address[1]
            base_url = (f"http://{BASIC_USER}:{quote(SECRETS['base URL userinfo password'], safe='')}"
                        f"@127.0.0.1:{port}/v1?api-key={quote(SECRETS['base URL query api-key'], safe='')}")
            env = job_environment(
                state, embedded_pg.uri(DAGSTER_DATABASE, driver="psycopg2"),
                EVAL_PIPELINE_DB="external", EVAL_PIPELINE_DATABASE_URL=db_url,
                OPENAI_BASE_URL=base_url, OPENAI_API_KEY=SECRETS["OPENAI_API_KEY"],
                EVAL_PIPELINE_LLM_MODEL="stub-model", EVAL_PIPELINE_LLM_SHARED_LIMIT="1",
                EVAL_PIPELINE_JUDGE_MODEL="stub-judge",
                EVAL_PIPELINE_JUDGE_API_KEY=SECRETS["EVAL_PIPELINE_JUDGE_API_KEY"],
                EVAL_PIPELINE_EMBEDDER="openai", EVAL_PIPELINE_EMBEDDER_MODEL="stub-embedder",
                EVAL_PIPELINE_VARIANTS=str(variants))
            config = tiny_job_config(results, source="generate", k=2)
            golden = {"source": "file", "path": str(FIXTURES / "tiny_golden.jsonl")}
            config["ops"]["golden_prompts"] = {"config": golden}
            config["ops"]["answers"] = {"config": {"generator": "llm"}}
            config["ops"]["graded_answers"] = {"config": {"graders": ["deterministic", "judge", "decision"]}}
            config["ops"]["findings"] = {"config": {"grade_holes": True}}
            job = start_job(root, "job", env, config)
            code = job.wait(timeout=900)
            log = (root / "job.log").read_text(encoding="utf-8", errors="replace")
            yield ScanRun(root, state, results, code, log, embedded_pg.uri(DAGSTER_DATABASE), pg.uri("eval"),
                          list(stub.raw), list(stub.requests), list(stub.errors))
    finally:
        pg.stop()


# --------------------------------------------------------------------------------------------
# the secrets were in play
# --------------------------------------------------------------------------------------------


def test_the_job_ran_with_every_secret_in_play(run):
    assert run.code == 0, run.log[-5000:]
    assert run.errors == []
    embeddings = [r for r in run.raw if r["route"] == "embeddings"]
    chats = [r for r in run.raw if r["route"] == "chat/completions"]
    assert embeddings and chats
    kinds = run.chat_kinds()
    schemes = sorted({r["authorization"].partition(" ")[0] for r in run.raw})
    print(f"test server: {len(embeddings)} embedding and {len(chats)} chat requests {kinds}, auth {schemes}, "
          f"e.g. {run.raw[0]['target']}")
    assert all(kinds[k] > 0 for k in CHAT_KINDS), kinds  # every kind of model call was made

    userinfo, query = SECRETS["base URL userinfo password"], SECRETS["base URL query api-key"]
    for r in run.raw:
        # the query of the base URL travels with every request (httpx may append the route to it)
        assert any(v.startswith(query) for v in parse_qs(r["query"]).get("api-key", [])), r
        scheme, _, value = r["authorization"].partition(" ")
        # basic auth from the userinfo (httpx puts it in place of the key's bearer header), or the key
        if scheme == "Basic":
            assert base64.b64decode(value).decode() == f"{BASIC_USER}:{userinfo}", r
        else:
            keys = (SECRETS["OPENAI_API_KEY"], SECRETS["EVAL_PIPELINE_JUDGE_API_KEY"])
            assert scheme == "Bearer" and value in keys, r

    # The job wrote its history through the URL with the password: the role that owns the tables.
    with psycopg.connect(run.history_uri) as conn:
        owners = dict(conn.execute(
            "SELECT tablename, tableowner FROM pg_tables WHERE tablename LIKE 'eval\\_%'").fetchall())
    assert owners and set(owners.values()) == {DB_ROLE}, owners


# --------------------------------------------------------------------------------------------
# the scan
# --------------------------------------------------------------------------------------------


def _report(hits: list[Hit]) -> str:
    return "\n".join(str(h) for h in hits)


def test_no_fragment_in_the_job_output(run):
    hits = hits_in(run.log, "job output (stdout+stderr)")
    assert hits == [], _report(hits)


def _files_hits(root: Path) -> tuple[int, list[Hit]]:
    files = [p for p in sorted(root.rglob("*")) if p.is_file() and not p.is_symlink()]
    hits = []
    for path in files:
        try:
            data = path.read_bytes()
        except OSError:  # a socket or a file removed while scanning (a server's temp file)
            continue
        hits += hits_in(data, str(path))
    return len(files), hits


def test_no_fragment_in_any_file_of_the_state_dir(run):
    """The embedded Postgres data dir (its logs, WAL and relations), the compute logs, the
    step outputs, the caches: every file, as bytes."""
    count, hits = _files_hits(run.state)
    assert count > 0
    assert any((run.state / "dagster" / "logs").rglob("*")), "no compute log was written"
    assert hits == [], _report(hits)


def test_no_fragment_in_any_file_of_the_results_dir(run):
    count, hits = _files_hits(run.results)
    assert (run.results / "results.md").exists() and count > 1
    assert hits == [], _report(hits)


def _tables(conn) -> list[tuple[str, str]]:
    return conn.execute(
        "SELECT table_schema, table_name FROM information_schema.tables WHERE table_type = 'BASE TABLE' "
        "AND table_schema NOT IN ('pg_catalog', 'information_schema') ORDER BY 1, 2").fetchall()


def _unpacked(value: bytes) -> bytes:
    try:
        return zlib.decompress(value)
    except zlib.error:
        return value


def _table_hits(uri: str) -> tuple[dict[str, int], list[Hit]]:
    """Every row of every table as text (bytea columns also decompressed when they are zlib:
    Dagster's snapshots); {table: rows} and the hits, each row named by its first column."""
    counts, hits = {}, []
    with psycopg.connect(uri) as conn:
        for schema, table in _tables(conn):
            name = sql.Identifier(schema, table)
            columns = conn.execute(
                "SELECT column_name, data_type FROM information_schema.columns WHERE table_schema = %s "
                "AND table_name = %s ORDER BY ordinal_position", (schema, table)).fetchall()
            first = sql.Identifier(columns[0][0])
            binary = [(sql.Identifier(c), c) for c, kind in columns if kind == "bytea"]
            rows = conn.execute(sql.SQL("SELECT {}::text, t::text FROM {} t").format(first, name)).fetchall()
            counts[f"{schema}.{table}"] = len(rows)
            for key, text in rows:
                where = f"db {schema}.{table} row {columns[0][0]}={key}"
                hits += [Hit(where, h.line, h.secret, h.fragments, h.fragment, h.context) for h in hits_in(text, "")]
            for column, label in binary:
                for key, value in conn.execute(sql.SQL("SELECT {}::text, {} FROM {}").format(first, column, name)):
                    if value is not None:
                        where = f"db {schema}.{table} row {columns[0][0]}={key} column {label} (unzipped)"
                        hits += [Hit(where, h.line, h.secret, h.fragments, h.fragment, h.context)
                                 for h in hits_in(_unpacked(bytes(value)), "")]
    return counts, hits


def test_no_fragment_in_dagsters_tables(run):
    """event_logs, runs, run_tags, snapshots (decompressed) and every other table of the
    Dagster database the run used."""
    counts, hits = _table_hits(run.dagster_uri)
    assert counts.get("public.event_logs") and counts.get("public.runs"), counts
    assert hits == [], _report(hits)


def test_no_fragment_in_the_history_database(run):
    """Every `eval_...` history table of the state dir's database, and every other table in it
    (vector tables, the limiter's slots, manifests)."""
    counts, hits = _table_hits(run.history_uri)
    history = {t: n for t, n in counts.items() if t.split(".", 1)[1].startswith("eval_")}
    assert history and any(history.values()), counts
    assert hits == [], _report(hits)
