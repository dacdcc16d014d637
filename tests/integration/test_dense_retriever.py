"""The lean dense retriever against Haystack's PgvectorEmbeddingRetriever, on the real embedded
Postgres and the real all-MiniLM-L6-v2: same chunk ids and scores, with the planner's choice and
with the HNSW index forced on both; the exact mode equals a numpy cosine over the stored vectors;
hnsw.ef_search is really raised to top_k; it serializes; bad input fails early."""

import copy
import json
from itertools import pairwise
from urllib.parse import quote

import numpy as np
import psycopg
import pytest
from psycopg import sql

from eval_pipeline.corpus.sources import DEMO_DATA_DIR, load_corpus
from eval_pipeline.ranking.dense import (
    LeanDenseEngine,
    LeanEmbeddingRetriever,
    dense_query_sql,
    vector_literal,
)
from eval_pipeline.ranking.engines import PgDenseEngine
from eval_pipeline.store.ingest import (
    ChunkingConfig,
    fetch_chunk_embeddings,
    ingest,
    open_document_store,
)

pytestmark = pytest.mark.integration

TOL = 1e-6
# Two documents with the same title and body embed to the same vector: exact ties.
TWINS = [
    {"doc_id": f"twin-{s}", "title": "Kettle care", "content": "Descale the office kettle every two weeks with "
     "citric acid; vinegar works too but leaves a smell. Report a broken kettle to facilities."} for s in "ab"
]
QUERIES = [
    "How do I descale the kettle?",
    "Which day do new programmers go and see the warehouse in person?",
    "How many days of annual leave do I get?",
    "expense claims receipts",
    "VPN",
    "Can I buy my old work laptop when it gets replaced?",
    "what is the wifi password for guests",
    "x'); DROP TABLE t;--",
]


def with_options(uri: str, options: str) -> str:
    """`uri` with libpq `options` (server settings for the session) added."""
    return f"{uri}{'&' if '?' in uri else '?'}options={quote(options)}"


FORCE_INDEX = "-c enable_seqscan=off"  # the demo table is small: the planner would scan it


@pytest.fixture(scope="module")
def twins_table(pg_uri, local_embedder, tmp_path_factory):
    path = tmp_path_factory.mktemp("densecorpus") / "corpus.jsonl"
    lines = (DEMO_DATA_DIR / "corpus.jsonl").read_text(encoding="utf-8").splitlines()
    path.write_text("\n".join(lines + [json.dumps(d) for d in TWINS]) + "\n", encoding="utf-8")
    snapshot = load_corpus("jsonl", str(path))
    return ingest(snapshot, connection_string=pg_uri, embedder=local_embedder, chunking=ChunkingConfig(),
                  log=lambda m: None)


@pytest.fixture(scope="module")
def demo_table(pg_uri, local_embedder):
    return ingest(load_corpus("demo"), connection_string=pg_uri, embedder=local_embedder, chunking=ChunkingConfig(),
                  log=lambda m: None)


@pytest.fixture(scope="module")
def query_vectors(local_embedder):
    return dict(zip(QUERIES, local_embedder.embed(QUERIES)))


def _scores(docs) -> dict[str, float]:
    out = {d.id: d.score for d in docs}
    assert len(out) == len(docs), "a chunk id was returned twice"
    return out


def assert_same_up_to_ties_at_the_cut(got: dict[str, float], want: dict[str, float], full: dict[str, float]):
    """Same size; same ids and scores above the k-th score; at the k-th score, either side may
    hold any of the tied chunks (Haystack does not order ties)."""
    assert len(got) == len(want)
    if not want:
        return
    cut = min(want.values())
    assert min(got.values()) == pytest.approx(cut, abs=TOL)
    above_got = {i: s for i, s in got.items() if s > cut + TOL}
    above_want = {i: s for i, s in want.items() if s > cut + TOL}
    assert above_got.keys() == above_want.keys()
    for i, s in above_want.items():
        assert above_got[i] == pytest.approx(s, abs=TOL), i
    tied = {i for i, s in full.items() if abs(s - cut) <= TOL}
    assert {i for i, s in got.items() if abs(s - cut) <= TOL} <= tied


def assert_best_first_ties_by_id(docs):
    keys = [(-d.score, d.id) for d in docs]
    assert keys == sorted(keys)


@pytest.fixture(scope="module", params=["planner", "index"])
def mode_uri(request, pg_uri):
    """Both sides on the same connection settings: the planner's choice (a sequential scan on a
    table this small), or the HNSW index forced."""
    return pg_uri if request.param == "planner" else with_options(pg_uri, FORCE_INDEX)


@pytest.mark.parametrize("top_k", [5, 50])
def test_same_ids_and_scores_as_haystack(mode_uri, twins_table, query_vectors, top_k):
    from haystack_integrations.components.retrievers.pgvector import (
        PgvectorEmbeddingRetriever,
    )

    store = open_document_store(mode_uri, twins_table.table, twins_table.dims, ef_search=max(40, top_k))
    haystack = PgvectorEmbeddingRetriever(document_store=store, top_k=top_k)
    lean = LeanEmbeddingRetriever(connection_string=mode_uri, table=twins_table.table, top_k=top_k)
    full_store = open_document_store(mode_uri, twins_table.table, twins_table.dims, ef_search=1000)
    full = PgvectorEmbeddingRetriever(document_store=full_store, top_k=1000)
    try:
        for query, vector in query_vectors.items():
            want = haystack.run(query_embedding=vector)["documents"]
            got = lean.run(query_embedding=vector)["documents"]
            assert len(got) == top_k, query
            assert_same_up_to_ties_at_the_cut(_scores(got), _scores(want),
                                              _scores(full.run(query_embedding=vector)["documents"]))
            assert_best_first_ties_by_id(got)
            assert all(d.embedding is None and d.content is None for d in got)
            assert {d.id: d.meta["doc_id"] for d in got} == {d.id: d.id.rsplit(":", 1)[0] for d in got}
    finally:
        lean.close()
        store.close()
        full_store.close()


def test_the_index_really_serves_hnsw_mode_and_never_exact_mode(pg_uri, twins_table, query_vectors):
    forced = with_options(pg_uri, FORCE_INDEX)
    vector = vector_literal(query_vectors[QUERIES[0]])
    index = f"{twins_table.table}_hnsw"
    with psycopg.connect(forced, autocommit=True) as conn:
        hnsw_plan = "\n".join(r[0] for r in conn.execute(
            sql.SQL("EXPLAIN ") + dense_query_sql(twins_table.table, 50), {"q": vector}).fetchall())
        exact_plan = "\n".join(r[0] for r in conn.execute(
            sql.SQL("EXPLAIN ") + dense_query_sql(twins_table.table, 50, exact=True), {"q": vector}).fetchall())
    assert f"Index Scan using {index}" in hnsw_plan, hnsw_plan
    assert index not in exact_plan and "Seq Scan" in exact_plan, exact_plan


def test_twins_tie_and_are_ordered_by_id(pg_uri, twins_table, query_vectors):
    lean = LeanEmbeddingRetriever(connection_string=pg_uri, table=twins_table.table, top_k=5)
    docs = lean.run(query_embedding=query_vectors["How do I descale the kettle?"])["documents"]
    lean.close()
    twins = [d for d in docs if d.meta["doc_id"].startswith("twin-")]
    assert [d.id for d in twins] == ["twin-a:0", "twin-b:0"]
    assert twins[0].score == twins[1].score


def _numpy_ranking(embeddings: dict[str, np.ndarray], vector) -> list[tuple[str, float]]:
    ids = sorted(embeddings)
    matrix = np.stack([embeddings[i] for i in ids]).astype(np.float64)
    q = np.asarray(vector, dtype=np.float32).astype(np.float64)  # pgvector stores float32
    sims = matrix @ q / (np.linalg.norm(matrix, axis=1) * np.linalg.norm(q))
    return sorted(zip(ids, sims.tolist()), key=lambda item: (-item[1], item[0]))


@pytest.mark.parametrize("top_k", [1, 10, 50, 10_000])
def test_exact_mode_equals_numpy_cosine(pg_uri, twins_table, query_vectors, top_k):
    embeddings = fetch_chunk_embeddings(pg_uri, twins_table.table)
    assert len(embeddings) > 100
    engine = LeanDenseEngine(pg_uri, twins_table.table, chunk_top_k=top_k, exact=True)
    try:
        for query, vector in query_vectors.items():
            expected = _numpy_ranking(embeddings, vector)
            numpy_score = dict(expected)
            hits = engine.chunk_hits(query, vector)
            assert len(hits) == min(top_k, len(embeddings)), query
            for hit in hits:  # each score is the cosine of the stored vectors (pgvector sums in float32)
                assert hit.score == pytest.approx(numpy_score[hit.chunk_id], abs=TOL), (query, hit)
            # The same ranking: identical where numpy's scores are more than TOL apart, ties by id.
            want = expected[: len(hits)]
            cut = want[-1][1]
            assert {h.chunk_id for h in hits if h.score > cut + TOL} == {i for i, s in want if s > cut + TOL}
            for a, b in pairwise(hits):
                assert numpy_score[a.chunk_id] >= numpy_score[b.chunk_id] - TOL, (query, a, b)
                assert (-a.score, a.chunk_id) < (-b.score, b.chunk_id)
            near_ties = any(abs(x[1] - y[1]) <= TOL and x[1] != y[1] for x, y in pairwise(want))
            if not near_ties:
                assert [h.chunk_id for h in hits] == [i for i, _ in want], query
    finally:
        engine.close()


def test_ef_search_is_raised_to_top_k(pg_uri, demo_table, query_vectors):
    assert demo_table.chunk_count > 100  # 105 at the default chunking
    forced = with_options(pg_uri, FORCE_INDEX)
    vector = query_vectors[QUERIES[2]]
    # The control: on the index at pgvector's default ef_search (40) the same query stops at 40 rows.
    with psycopg.connect(forced, autocommit=True) as conn:
        literal = vector_literal(vector)
        rows = conn.execute(dense_query_sql(demo_table.table, 100), {"q": literal}).fetchall()
        assert conn.execute("SHOW hnsw.ef_search").fetchone()[0] == "40"  # known once the query loaded pgvector
        assert len(rows) == 40
    lean = LeanEmbeddingRetriever(connection_string=forced, table=demo_table.table, top_k=100)
    try:
        docs = lean.run(query_embedding=vector)["documents"]
        assert len(docs) == 100
        assert lean._conn.execute("SHOW hnsw.ef_search").fetchone()[0] == "100"
        plan = "\n".join(r[0] for r in lean._conn.execute(
            sql.SQL("EXPLAIN ") + dense_query_sql(demo_table.table, 100), {"q": literal}).fetchall())
        assert f"Index Scan using {demo_table.table}_hnsw" in plan, plan
        # A shallower query on the same connection sets it down again (max(40, top_k)), a deeper one up.
        assert len(lean.run(query_embedding=vector, top_k=5)["documents"]) == 5
        assert lean._conn.execute("SHOW hnsw.ef_search").fetchone()[0] == "40"
        assert len(lean.run(query_embedding=vector, top_k=105)["documents"]) == 105
        assert lean._conn.execute("SHOW hnsw.ef_search").fetchone()[0] == "105"
    finally:
        lean.close()
    engine = LeanDenseEngine(forced, demo_table.table, chunk_top_k=100)
    assert len(engine.chunk_hits("q", vector)) == 100
    engine.close()


def test_engine_is_a_drop_in_for_pg_dense(pg_uri, twins_table, query_vectors):
    store = open_document_store(pg_uri, twins_table.table, twins_table.dims, ef_search=100)
    old = PgDenseEngine(store, chunk_top_k=100)
    new = LeanDenseEngine(pg_uri, twins_table.table, chunk_top_k=100)
    assert (new.name, new.needs_embedding, new.depth) == (old.name, old.needs_embedding, old.depth)
    for query, vector in query_vectors.items():
        old_hits = {(h.chunk_id, h.doc_id): h.score for h in old.chunk_hits(query, vector)}
        new_hits = {(h.chunk_id, h.doc_id): h.score for h in new.chunk_hits(query, vector)}
        assert old_hits.keys() == new_hits.keys(), query
        assert all(abs(old_hits[k] - new_hits[k]) <= TOL for k in old_hits), query
        assert [(d.doc_id, round(d.score, 6)) for d in new.search(query, vector)] == \
            [(d.doc_id, round(d.score, 6)) for d in old.search(query, vector)], query
    for engine in (old, new):
        with pytest.raises(ValueError, match="needs a query embedding"):
            engine.chunk_hits("q", None)
    new.close()
    store.close()


def test_in_a_haystack_pipeline_and_serializable(pg_uri, twins_table, query_vectors, monkeypatch):
    from haystack import Pipeline
    from haystack.utils import Secret

    monkeypatch.setenv("DENSE_TEST_PG", pg_uri)
    retriever = LeanEmbeddingRetriever(connection_string=Secret.from_env_var("DENSE_TEST_PG"),
                                       table=twins_table.table, top_k=7, exact=True)
    pipeline = Pipeline()
    pipeline.add_component("retriever", retriever)
    vector = query_vectors[QUERIES[0]]
    out = pipeline.run({"retriever": {"query_embedding": vector}})["retriever"]["documents"]
    assert len(out) == 7
    data = retriever.to_dict()
    clone = LeanEmbeddingRetriever.from_dict(copy.deepcopy(data))
    assert clone.to_dict() == data
    assert (clone.table, clone.top_k, clone.exact, clone.schema) == (twins_table.table, 7, True, "public")
    assert [(d.id, d.score) for d in clone.run(query_embedding=vector)["documents"]] == [(d.id, d.score) for d in out]
    # The whole pipeline round-trips too (Haystack deserializes only modules it is told to trust).
    again = Pipeline.from_dict(copy.deepcopy(pipeline.to_dict()), allowed_modules=["eval_pipeline.ranking.dense"])
    assert again.to_dict() == pipeline.to_dict()
    clone.close()
    retriever.close()


@pytest.mark.parametrize("table", ["no_such_dense_table", 'x"; DROP TABLE y;--'])
def test_a_missing_table_fails_early_naming_it(pg_uri, table):
    with pytest.raises(ValueError, match="does not exist") as info:
        LeanDenseEngine(pg_uri, table, chunk_top_k=10)
    assert repr(table) in str(info.value)


def test_a_table_without_a_vector_column_is_refused(pg_uri):
    with psycopg.connect(pg_uri, autocommit=True) as conn:
        conn.execute("DROP TABLE IF EXISTS dense_not_vectors")
        conn.execute("CREATE TABLE dense_not_vectors (id text PRIMARY KEY, embedding text, meta jsonb)")
    with pytest.raises(ValueError, match="'embedding' column is of type text"):
        LeanDenseEngine(pg_uri, "dense_not_vectors")


def test_bad_queries_fail_with_value_errors(pg_uri, twins_table, query_vectors):
    lean = LeanEmbeddingRetriever(connection_string=pg_uri, table=twins_table.table)
    vector = list(query_vectors[QUERIES[0]])
    with pytest.raises(ValueError, match="384"):
        lean.run(query_embedding=vector[:10])
    with pytest.raises(ValueError, match="finite"):
        lean.run(query_embedding=[float("nan")] + vector[1:])
    with pytest.raises(ValueError, match="non-empty"):
        lean.run(query_embedding=[])
    for top_k in (0, -3):
        with pytest.raises(ValueError, match=f"top_k must be an integer >= 1, got {top_k}"):
            lean.run(query_embedding=vector, top_k=top_k)
    with pytest.raises(ValueError, match="top_k 1001"):
        lean.run(query_embedding=vector, top_k=1001)
    exact = LeanEmbeddingRetriever(connection_string=pg_uri, table=twins_table.table, exact=True, top_k=1001)
    assert len(exact.run(query_embedding=vector)["documents"]) == twins_table.chunk_count
    exact.close()
    assert len(lean.run(query_embedding=vector)["documents"]) == 10  # still usable after the errors
    lean.close()


def test_reconnects_after_the_connection_is_lost(pg_uri, twins_table, query_vectors):
    lean = LeanEmbeddingRetriever(connection_string=pg_uri, table=twins_table.table, top_k=60)
    vector = query_vectors[QUERIES[1]]
    first = lean.run(query_embedding=vector)["documents"]
    lean._conn.close()
    again = lean.run(query_embedding=vector)["documents"]
    assert [(d.id, d.score) for d in again] == [(d.id, d.score) for d in first]
    assert lean._conn.execute("SHOW hnsw.ef_search").fetchone()[0] == "60"
    lean.close()


def test_ingest_keeps_small_embeddings_in_the_row(pg_uri, local_embedder, tiny_snapshot):
    """A 384-d vector is 1.5 kB: with the chunk text and the stored tsvector the row passes
    Postgres's 2 kB TOAST threshold, and a dense scan then reads every vector out of line (7 ms
    instead of about 2 at SciFact size). Ingest stores the embedding column PLAIN."""
    import psycopg

    from eval_pipeline.store.ingest import ChunkingConfig, ingest

    # a chunking of its own: the session database is shared, and other tests expect to build theirs
    info = ingest(tiny_snapshot, connection_string=pg_uri, embedder=local_embedder,
                  chunking=ChunkingConfig(split_length=33, split_overlap=3), log=lambda m: None)
    with psycopg.connect(pg_uri) as conn:
        storage = conn.execute(
            "SELECT attstorage FROM pg_attribute WHERE attrelid = %s::regclass AND attname = 'embedding'",
            (info.table,)).fetchone()[0]
    assert storage == "p"
