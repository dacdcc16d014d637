"""Reusing a variant's results only when nothing that decides them changed."""

import pandas as pd
import pytest

from eval_pipeline.config.sweep import parse_sweep
from eval_pipeline.ranking.caches import ResultsCache, result_environment


def _variant(**knobs):
    return parse_sweep({"variants": [{"engine": "hybrid", **knobs}]}).variants[0]


LLM = {"kind": "llm", "model": "m@http://127.0.0.1:1/v1", "version": "listwise-2+abc;temperature=0"}


def _key(**overrides):
    args = dict(table="chunks_abc", questions_fingerprint="q1", variant=_variant(), miss_k=10,
                code_version="v1-3-gabc", reranker=None, environment={"torch": "2.13.0"},
                query_embedder="minilm@sha256:aa")
    args.update(overrides)
    return ResultsCache.key(**args)


def test_key_changes_with_everything_that_decides_results():
    base = _key()
    assert base is not None
    for change in (dict(table="chunks_def"), dict(questions_fingerprint="q2"), dict(miss_k=20),
                   dict(code_version="v1-4-gdef"), dict(variant=_variant(rrf_k=30)),
                   dict(variant=_variant(reranker="mmr")), dict(variant=_variant(abstain_below=0.5)),
                   dict(environment={"torch": "2.14.0"}), dict(reranker=LLM),
                   dict(query_embedder="minilm@sha256:bb")):
        assert _key(**change) != base, change
    assert _key() == base


def test_key_covers_the_rerankers_full_identity():
    """Same variant config, another LLM endpoint, model, temperature or weights: another key."""
    spec = _variant(reranker={"kind": "llm"})
    base = _key(variant=spec, reranker=LLM)
    for field, value in (("model", "m@http://127.0.0.1:2/v1"), ("model", "other@http://127.0.0.1:1/v1"),
                         ("version", "listwise-2+abc;temperature=0.7"), ("weights", "sha256:beef")):
        assert _key(variant=spec, reranker={**LLM, field: value}) != base, (field, value)


def test_unknown_or_dirty_code_is_never_cached():
    assert _key(code_version="unknown") is None
    assert _key(code_version="v1-3-gabc-dirty") is None
    assert _key(code_version="") is None


def test_environment_names_the_packages_that_decide_rankings():
    env = result_environment()
    for package in ("numpy", "haystack-ai", "sentence-transformers", "torch", "bm25s", "pgvector-haystack"):
        assert package in env, package
    assert all(isinstance(v, str) and v for v in env.values())


def test_round_trip_and_misses(tmp_path):
    cache = ResultsCache(tmp_path)
    frame = pd.DataFrame({"qid": ["q1"], "doc_ids": [["a", "b"]], "latency_ms": [1.5], "error": [None]})
    assert cache.get(_key()) is None
    assert cache.put(_key(), frame)
    back = cache.get(_key())
    assert back["qid"].tolist() == ["q1"] and [list(x) for x in back["doc_ids"]] == [["a", "b"]]
    assert back["latency_ms"].tolist() == [1.5]
    assert not cache.put(None, frame)  # no key: nothing stored
    assert len(list(tmp_path.glob("*.parquet"))) == 1
    (tmp_path / f"{_key()}.parquet").write_bytes(b"garbage")
    assert cache.get(_key()) is None  # a damaged entry is a miss, not an error


@pytest.mark.parametrize("column, value", [("error", "OperationalError: connection refused"),
                                           ("diagnosis_error", "keyword leg: OperationalError")])
def test_results_with_an_error_are_never_cached(tmp_path, column, value):
    """A 2-second outage must not be replayed by every later run: errored results are not stored."""
    cache = ResultsCache(tmp_path)
    frame = pd.DataFrame({"qid": ["q1", "q2"], "doc_ids": [["a"], []], "error": [None, None],
                          "diagnosis_error": [None, None]})
    frame.loc[1, column] = value
    assert not cache.put(_key(), frame)
    assert cache.get(_key()) is None and not list(tmp_path.iterdir())
