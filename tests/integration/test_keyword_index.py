"""The indexed keyword retriever against Haystack's PgvectorKeywordRetriever, on the real embedded
Postgres: same chunk ids and scores for every query, the GIN index on the stored column is used,
and the column/index DDL is idempotent and safe under concurrent callers."""

import threading

import psycopg
import pytest
from psycopg import sql

from eval_pipeline.corpus.sources import load_corpus
from eval_pipeline.ranking.hits import ChunkHit, chunks_to_documents
from eval_pipeline.ranking.keyword_index import (
    TSV_COLUMN,
    IndexedKeywordEngine,
    IndexedKeywordRetriever,
    ensure_tsvector_column,
    tsv_index_name,
)
from eval_pipeline.store.ingest import ChunkingConfig, ingest, open_document_store
from tests.integration.cli import demo_corpus_with

pytestmark = pytest.mark.integration

CHUNKING = ChunkingConfig(split_length=30, split_overlap=5)
ALL = 10_000  # larger than any match set here: every matching chunk is returned

EXTRA_DOCS = [
    # Two identical bodies: every query that matches one matches both with the same score (ties).
    {"doc_id": "twin-a", "title": "Twin A", "content": "Kettle descaling twice a month keeps the kettle quiet. "
     "Vinegar works; citric acid works faster on the kettle element."},
    {"doc_id": "twin-b", "title": "Twin B", "content": "Kettle descaling twice a month keeps the kettle quiet. "
     "Vinegar works; citric acid works faster on the kettle element."},
    {"doc_id": "unicode", "title": "Café notes", "content": "The café in Zürich serves crème brûlée and naïve "
     "coffee; the Straße outside is busy. 東京 office opens at nine. Park the 🚲 by the façade. Ελληνικά κείμενο."},
    {"doc_id": "punct", "title": "Punctuation", "content": "C++ and C# developers read e-mail about "
     "state-of-the-art tooling in the U.S.A.; pi is 3.14, foo_bar is a name, and a & b | !c is not a query."},
    {"doc_id": "bobby", "title": "Little Bobby Tables", "content": "Robert'); DROP TABLE students;-- is the "
     "name a school gave to its student records table, which was then dropped."},
    {"doc_id": "dense-kettle", "title": "Kettle kettle", "content": "kettle " * 40 + "limescale vinegar."},
]

QUERIES = [
    "kettle",
    "kettle vinegar",
    "limescale kettle vinegar",
    "citric acid kettle element",
    "expense claims receipts",
    "How do I submit an expense claim?",
    "the",                      # stopword only: empty tsquery, no match for either
    "the and of a",
    "!!!",                      # punctuation only
    "?",
    "café",
    "crème brûlée Zürich",
    "Straße",
    "東京",
    "🚲",
    "Ελληνικά",
    "x'); DROP TABLE t;--",     # SQL-looking: a bound parameter, never SQL
    "Robert'); DROP TABLE students;--",
    "C++",
    "state-of-the-art",
    "e-mail",
    "U.S.A.",
    "foo_bar",
    "a & b | !c",               # tsquery operators are plain text to plainto_tsquery
    "kettle:*",                 # prefix syntax is plain text too
    "kettle <-> vinegar",
    "%s %(x)s {}",              # driver placeholders inside the value
    "back\\slash 'quote' \"double\"",
    "nonexistentwordzzz",
    "VPN",
    "records table dropped",
]


@pytest.fixture(scope="module")
def corpus_path(tmp_path_factory):
    return demo_corpus_with(tmp_path_factory.mktemp("kwcorpus"), EXTRA_DOCS)


@pytest.fixture(scope="module")
def table(pg_uri, local_embedder, corpus_path):
    snapshot = load_corpus("jsonl", str(corpus_path))
    info = ingest(snapshot, connection_string=pg_uri, embedder=local_embedder, chunking=CHUNKING, log=lambda m: None)
    ensure_tsvector_column(pg_uri, info.table)
    return info


@pytest.fixture(scope="module")
def haystack_retriever(pg_uri, table):
    from haystack_integrations.components.retrievers.pgvector import PgvectorKeywordRetriever

    store = open_document_store(pg_uri, table.table, table.dims)
    yield PgvectorKeywordRetriever(document_store=store, top_k=10)
    store.close()


@pytest.fixture(scope="module")
def indexed_retriever(pg_uri, table):
    retriever = IndexedKeywordRetriever(connection_string=pg_uri, table=table.table, top_k=10)
    retriever.warm_up()
    yield retriever
    retriever.close()


def _scores(docs):
    out = {d.id: d.score for d in docs}
    assert len(out) == len(docs), "a chunk id was returned twice"
    return out


@pytest.mark.parametrize("query", QUERIES)
def test_same_ids_and_scores_as_haystack(query, haystack_retriever, indexed_retriever):
    expected = haystack_retriever.run(query=query, top_k=ALL)["documents"]
    got = indexed_retriever.run(query=query, top_k=ALL)["documents"]
    want, have = _scores(expected), _scores(got)
    assert set(have) == set(want)
    for chunk_id, score in want.items():
        assert have[chunk_id] == pytest.approx(score, abs=1e-6), chunk_id
    # Same content and meta (Haystack also files the new column under meta["content_tsv"]).
    by_id = {d.id: d for d in expected}
    for d in got:
        assert d.content == by_id[d.id].content
        assert d.meta == {k: v for k, v in by_id[d.id].meta.items() if k != TSV_COLUMN}
        assert d.embedding is None
    # Best first, equal scores in id order.
    assert [(-d.score, d.id) for d in got] == sorted((-d.score, d.id) for d in got)


@pytest.mark.parametrize("query", ["kettle", "kettle vinegar", "expense claims receipts", "VPN", "records table"])
@pytest.mark.parametrize("top_k", [1, 3, 5])
def test_same_top_k_up_to_ties_at_the_cut(query, top_k, haystack_retriever, indexed_retriever):
    """With a LIMIT, the chunks above the k-th score are the same; at the k-th score either side
    may pick any of the tied chunks (Haystack does not order ties)."""
    full = _scores(haystack_retriever.run(query=query, top_k=ALL)["documents"])
    expected = _scores(haystack_retriever.run(query=query, top_k=top_k)["documents"])
    got = _scores(indexed_retriever.run(query=query, top_k=top_k)["documents"])
    assert len(got) == len(expected) == min(top_k, len(full))
    if not got:
        return
    cut = min(expected.values())
    assert min(got.values()) == pytest.approx(cut, abs=1e-6)
    assert {i for i, s in got.items() if s > cut + 1e-6} == {i for i, s in expected.items() if s > cut + 1e-6}
    tied = {i for i, s in full.items() if abs(s - cut) <= 1e-6}
    assert {i for i, s in got.items() if abs(s - cut) <= 1e-6} <= tied


def test_corpus_exercises_ties_and_several_chunks(indexed_retriever):
    """The fixture corpus is meant to have exact ties (twin documents) and multi-chunk documents."""
    docs = indexed_retriever.run(query="citric acid kettle element", top_k=ALL)["documents"]
    assert {d.meta["doc_id"] for d in docs} >= {"twin-a", "twin-b"}
    twins = [d.score for d in docs if d.meta["doc_id"] in ("twin-a", "twin-b")]
    assert len(set(twins)) == 1
    assert any(d.id.endswith(":1") for d in indexed_retriever.run(query="expense", top_k=ALL)["documents"])


def test_gin_index_on_the_stored_column_is_used(pg_uri, table):
    from eval_pipeline.ranking.keyword_index import keyword_query_sql

    with psycopg.connect(pg_uri, autocommit=True) as conn:
        conn.execute("SET enable_seqscan = off")
        statement = sql.SQL("EXPLAIN ") + keyword_query_sql(table.table)
        plan = "\n".join(r[0] for r in conn.execute(statement, ("kettle vinegar", 100)).fetchall())
    assert tsv_index_name(table.table) in plan, plan
    assert "Bitmap Index Scan" in plan and TSV_COLUMN in plan, plan
    assert "to_tsvector" not in plan, plan  # nothing re-parsed at query time


def _column_and_index_count(conn, table_name):
    columns = conn.execute(
        "SELECT count(*) FROM information_schema.columns WHERE table_name = %s AND column_name = %s",
        (table_name, TSV_COLUMN),
    ).fetchone()[0]
    indexes = conn.execute(
        "SELECT count(*) FROM pg_indexes WHERE tablename = %s AND indexdef LIKE %s", (table_name, f"%({TSV_COLUMN})%")
    ).fetchone()[0]
    return columns, indexes


def test_ensure_is_idempotent(pg_uri, table):
    assert ensure_tsvector_column(pg_uri, table.table) is False  # the fixture made them already
    assert ensure_tsvector_column(pg_uri, table.table) is False
    with psycopg.connect(pg_uri) as conn:
        assert _column_and_index_count(conn, table.table) == (1, 1)


def test_ensure_is_safe_concurrently_and_fills_existing_rows(pg_uri):
    name = "kwidx_concurrent"
    with psycopg.connect(pg_uri, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(sql.Identifier(name)))
        conn.execute(sql.SQL("CREATE TABLE {} (id varchar(128) PRIMARY KEY, content text, meta jsonb)").format(
            sql.Identifier(name)))
        conn.execute(sql.SQL("INSERT INTO {} VALUES ('a', 'the kettle boils', '{{\"doc_id\": \"a\"}}'), "
                             "('b', NULL, '{{\"doc_id\": \"b\"}}')").format(sql.Identifier(name)))
    results, errors = [], []

    def call():
        try:
            results.append(ensure_tsvector_column(pg_uri, name))
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=call) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert sorted(results) == [False, False, False, True]
    with psycopg.connect(pg_uri) as conn:
        assert _column_and_index_count(conn, name) == (1, 1)
        rows = dict(conn.execute(sql.SQL("SELECT id, {}::text FROM {} ORDER BY id").format(
            sql.Identifier(TSV_COLUMN), sql.Identifier(name))).fetchall())
    assert rows == {"a": "'boil':3 'kettl':2", "b": ""}  # NULL content gives an empty vector
    # Rows written after the column exists are indexed too (it is generated).
    with psycopg.connect(pg_uri, autocommit=True) as conn:
        conn.execute(sql.SQL("INSERT INTO {} (id, content, meta) VALUES ('c', 'a new kettle', '{{\"doc_id\": \"c\"}}')")
                     .format(sql.Identifier(name)))
    retriever = IndexedKeywordRetriever(connection_string=pg_uri, table=name)
    assert [d.id for d in retriever.run(query="kettle")["documents"]] == ["a", "c"]
    retriever.close()


def test_language_is_validated_and_must_match(pg_uri, table):
    with pytest.raises(ValueError, match="not a text search configuration"):
        ensure_tsvector_column(pg_uri, table.table, language="klingon'); DROP TABLE x;--")
    with pytest.raises(ValueError, match="built for language 'english'"):
        ensure_tsvector_column(pg_uri, table.table, language="simple")
    with pytest.raises(ValueError, match="does not exist"):
        ensure_tsvector_column(pg_uri, "no_such_table_kw")
    with pytest.raises(ValueError, match="no content_tsv column"):
        IndexedKeywordRetriever(connection_string=pg_uri, table=table.table, language="simple").warm_up()


def test_empty_query_and_bad_top_k_raise_like_haystack(indexed_retriever, haystack_retriever):
    for retriever in (indexed_retriever, haystack_retriever):
        with pytest.raises(ValueError, match="non-empty"):
            retriever.run(query="")
    with pytest.raises(ValueError, match="top_k"):
        indexed_retriever.run(query="kettle", top_k=-1)
    with pytest.raises(ValueError, match="top_k"):
        IndexedKeywordRetriever(connection_string="postgresql://x", table="t", top_k=0)


def test_table_without_column_is_refused_until_ensured(pg_uri, corpus_path, local_embedder):
    name = "kwidx_plain"
    with psycopg.connect(pg_uri, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(sql.Identifier(name)))
        conn.execute(sql.SQL("CREATE TABLE {} (id varchar(128) PRIMARY KEY, content text, meta jsonb)").format(
            sql.Identifier(name)))
    with pytest.raises(ValueError, match="ensure_tsvector_column"):
        IndexedKeywordRetriever(connection_string=pg_uri, table=name).warm_up()
    retriever = IndexedKeywordRetriever(connection_string=pg_uri, table=name, ensure_column=True)
    retriever.warm_up()
    assert retriever.run(query="kettle")["documents"] == []
    retriever.close()


def test_in_a_haystack_pipeline_and_serializable(pg_uri, table, monkeypatch):
    from haystack import Pipeline
    from haystack.utils import Secret

    monkeypatch.setenv("KWIDX_TEST_PG", pg_uri)
    retriever = IndexedKeywordRetriever(connection_string=Secret.from_env_var("KWIDX_TEST_PG"), table=table.table,
                                        top_k=3)
    pipeline = Pipeline()
    pipeline.add_component("retriever", retriever)
    out = pipeline.run({"retriever": {"query": "kettle vinegar"}})["retriever"]["documents"]
    assert 0 < len(out) <= 3 and all(d.score > 0 for d in out)
    clone = IndexedKeywordRetriever.from_dict(retriever.to_dict())
    assert clone.table == table.table and clone.top_k == 3
    assert [d.id for d in clone.run(query="kettle vinegar")["documents"]] == [d.id for d in out]
    clone.close()
    retriever.close()


class PgKeywordEngine:
    """Haystack's own PgvectorKeywordRetriever as an engine: the reference the indexed one is held to."""

    name = "pg-keyword"
    needs_embedding = False

    def __init__(self, document_store, *, depth: int = 20, chunk_top_k: int = 100):
        from haystack_integrations.components.retrievers.pgvector import PgvectorKeywordRetriever

        self.depth = depth
        self.retriever = PgvectorKeywordRetriever(document_store=document_store, top_k=chunk_top_k)

    def chunk_hits(self, query: str, query_embedding=None) -> list[ChunkHit]:
        return [ChunkHit(d.id, d.meta["doc_id"], float(d.score if d.score is not None else 0.0))
                for d in self.retriever.run(query=query)["documents"]]

    def search(self, query, query_embedding=None):
        return chunks_to_documents(self.chunk_hits(query), self.depth)


def test_engine_is_a_drop_in_for_pg_keyword(pg_uri, table):
    store = open_document_store(pg_uri, table.table, table.dims)
    old = PgKeywordEngine(store, chunk_top_k=100)
    new = IndexedKeywordEngine(pg_uri, table.table, chunk_top_k=100)
    assert (new.name, new.needs_embedding) == (old.name, old.needs_embedding)
    for query in QUERIES:
        old_hits = {(h.chunk_id, h.doc_id): h.score for h in old.chunk_hits(query)}
        new_hits = {(h.chunk_id, h.doc_id): h.score for h in new.chunk_hits(query)}
        assert old_hits.keys() == new_hits.keys(), query
        assert all(abs(old_hits[k] - new_hits[k]) <= 1e-6 for k in old_hits), query
        # Documents: same ids, order and scores (chunks_to_documents orders equal scores by doc id).
        assert [(d.doc_id, round(d.score, 6)) for d in new.search(query)] == \
            [(d.doc_id, round(d.score, 6)) for d in old.search(query)], query
    new.close()
    store.close()
