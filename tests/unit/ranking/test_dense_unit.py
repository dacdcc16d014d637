"""LeanEmbeddingRetriever without a database: validation, serialization, the SQL it builds, and the
query vector written exactly as pgvector-haystack writes it (tests/integration/test_dense_retriever.py
runs it against Postgres and Haystack's retriever)."""

import copy
import math

import numpy as np
import pytest
from haystack.utils import Secret

from eval_pipeline.ranking.dense import (
    MAX_EF_SEARCH,
    LeanEmbeddingRetriever,
    dense_query_sql,
    ef_search_for,
    vector_literal,
)

URI = "postgresql://user:pw@db.invalid:5432/x"


def test_vector_is_written_as_pgvector_haystack_writes_it():
    rng = np.random.default_rng(0)
    for vector in (rng.standard_normal(384).astype(np.float32).tolist(), [0.1, -2.5e-33, 1e-8, 3, 0.0],
                   np.asarray([0.25, -1.0], dtype=np.float32)):
        haystack = f"[{','.join(str(float(el)) for el in vector)}]"  # its _check_and_build_embedding_retrieval_query
        assert vector_literal(vector) == haystack


@pytest.mark.parametrize("bad", [float("nan"), math.inf, -math.inf])
def test_non_finite_vectors_are_refused(bad):
    with pytest.raises(ValueError, match="finite"):
        vector_literal([0.1, bad])


def test_non_numeric_vectors_are_refused():
    with pytest.raises(TypeError, match="sequence of floats"):
        vector_literal([0.1, "x"])


def test_construction_does_not_connect():
    retriever = LeanEmbeddingRetriever(connection_string=URI, table="chunks_x")
    assert retriever._conn is None and retriever.dims is None


@pytest.mark.parametrize("top_k", [0, -1, True, 1.5, "3", None])
def test_bad_top_k_is_refused_naming_it(top_k):
    with pytest.raises(ValueError, match=f"top_k must be an integer >= 1, got {top_k!r}"):
        LeanEmbeddingRetriever(connection_string=URI, table="t", top_k=top_k)


def test_hnsw_top_k_is_capped_by_ef_search_but_exact_is_not():
    with pytest.raises(ValueError, match=f"top_k {MAX_EF_SEARCH + 1}.*exact=True"):
        LeanEmbeddingRetriever(connection_string=URI, table="t", top_k=MAX_EF_SEARCH + 1)
    assert LeanEmbeddingRetriever(connection_string=URI, table="t", top_k=5000, exact=True).top_k == 5000
    assert LeanEmbeddingRetriever(connection_string=URI, table="t", top_k=MAX_EF_SEARCH).top_k == MAX_EF_SEARCH


@pytest.mark.parametrize("table", ["", None, 3, "x" * 64, "a\x00b"])
def test_bad_table_names_are_refused_naming_them(table):
    with pytest.raises(ValueError, match="table must be") as info:
        LeanEmbeddingRetriever(connection_string=URI, table=table)
    assert repr(table) in str(info.value)


def test_bad_schema_exact_and_connection_string_are_refused():
    with pytest.raises(ValueError, match="schema"):
        LeanEmbeddingRetriever(connection_string=URI, table="t", schema="")
    with pytest.raises(ValueError, match="exact must be True or False, got 'yes'"):
        LeanEmbeddingRetriever(connection_string=URI, table="t", exact="yes")
    with pytest.raises(ValueError, match="connection_string"):
        LeanEmbeddingRetriever(connection_string=42, table="t")


def test_to_dict_from_dict_round_trip(monkeypatch):
    monkeypatch.setenv("DENSE_UNIT_PG", URI)
    retriever = LeanEmbeddingRetriever(connection_string=Secret.from_env_var("DENSE_UNIT_PG"), table="chunks_x",
                                       top_k=42, exact=True, schema="other")
    data = retriever.to_dict()
    assert data == {
        "type": "eval_pipeline.ranking.dense.LeanEmbeddingRetriever",
        "init_parameters": {
            "connection_string": {"type": "env_var", "env_vars": ["DENSE_UNIT_PG"], "strict": True},
            "table": "chunks_x", "top_k": 42, "exact": True, "schema": "other",
        },
    }
    clone = LeanEmbeddingRetriever.from_dict(copy.deepcopy(data))
    assert clone.to_dict() == data
    assert clone.connection_string.resolve_value() == URI


def test_a_token_secret_is_not_serialized():
    """Like every Haystack component: a plain string becomes a token Secret, which to_dict refuses
    to write out (the password would land in a pipeline file)."""
    retriever = LeanEmbeddingRetriever(connection_string=URI, table="t")
    with pytest.raises(ValueError, match="[Cc]annot serialize token-based secret"):
        retriever.to_dict()


def test_ef_search_is_at_least_pgvectors_default():
    assert [ef_search_for(k) for k in (1, 40, 41, 500, 1000)] == [40, 40, 41, 500, 1000]


def _text(statement) -> str:
    return statement.as_string(None)


def test_hnsw_sql_orders_by_the_distance_alone_and_reorders_outside():
    text = _text(dense_query_sql("chunks_x", 7))
    assert 'FROM "public"."chunks_x" ORDER BY distance LIMIT 7) AS hits ORDER BY score DESC, id' in text
    assert "embedding <=> %(q)s::vector AS distance" in text and "1 - distance AS score" in text
    assert text.count("<=>") == 1 and "*" not in text


def test_exact_sql_orders_by_an_expression_no_index_serves():
    text = _text(dense_query_sql("chunks_x", 7, exact=True))
    assert "1 - (embedding <=> %(q)s::vector) AS score" in text
    assert 'FROM "public"."chunks_x" ORDER BY score DESC, id LIMIT 7) AS hits ORDER BY score DESC, id' in text
    assert text.count("<=>") == 1 and "*" not in text


def test_table_names_are_quoted_identifiers():
    assert '"public"."x""; DROP TABLE y;--"' in _text(dense_query_sql('x"; DROP TABLE y;--', 5))
