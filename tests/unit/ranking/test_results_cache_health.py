"""Only healthy results are cached: an errored question, a failed diagnosis leg, or an LLM
reranker that fell back to the first-stage order (its endpoint answered 200 with no usable id)
keeps a variant's results out of the cache. Cached, a fallback would be replayed after the
endpoint is fixed, and the endpoint never asked again."""

import numpy as np
import pandas as pd
import pytest

from eval_pipeline.config.sweep import parse_sweep
from eval_pipeline.ranking.caches import ResultsCache


def _key():
    variant = parse_sweep({"variants": [{"engine": "hybrid", "reranker": {"kind": "llm"}}]}).variants[0]
    return ResultsCache.key(table="chunks_abc", questions_fingerprint="q1", variant=variant, miss_k=10,
                            code_version="v1-3-gabc", environment={"torch": "2.13.0"}, query_embedder="m@sha256:aa",
                            reranker={"kind": "llm", "model": "m@http://127.0.0.1:1/v1", "version": "listwise-2"})


def _frame(fallbacks):
    n = len(fallbacks)
    return pd.DataFrame({"qid": [f"q{i}" for i in range(n)], "doc_ids": [["a", "b"]] * n, "error": [None] * n,
                         "diagnosis_error": [None] * n, "rerank_fallback": fallbacks})


@pytest.mark.parametrize("flag", [True, np.True_, 1])
def test_one_fallback_row_keeps_the_results_out_of_the_cache(tmp_path, flag):
    cache = ResultsCache(tmp_path)
    frame = _frame([False, flag, False])
    assert not ResultsCache.cacheable(frame)
    assert cache.put(_key(), frame) is False
    assert not list(tmp_path.iterdir())  # nothing written, not even a temporary file
    assert not cache.has(_key()) and cache.get(_key()) is None


@pytest.mark.parametrize("fallbacks", [[False, False], [None, False], [np.nan, False], [None, None],
                                       [np.nan, np.nan], [np.False_, 0]])
def test_rows_without_a_fallback_are_cached(tmp_path, fallbacks):
    """False, None and NaN (a variant without an LLM reranker, or a frame built before the
    column) mean no fallback: those results are stored and read back."""
    cache = ResultsCache(tmp_path)
    frame = _frame(fallbacks)
    assert ResultsCache.cacheable(frame)
    assert cache.put(_key(), frame) is True
    assert cache.get(_key())["qid"].tolist() == ["q0", "q1"]


def test_a_nullable_boolean_column_is_read_by_its_values(tmp_path):
    cache = ResultsCache(tmp_path)
    healthy = _frame([False, None]).astype({"rerank_fallback": "boolean"})
    assert healthy["rerank_fallback"].isna().iloc[1]
    assert cache.put(_key(), healthy)
    (tmp_path / f"{_key()}.parquet").unlink()
    fell_back = _frame([pd.NA, True]).astype({"rerank_fallback": "boolean"})
    assert not cache.put(_key(), fell_back) and not list(tmp_path.iterdir())


def test_a_frame_without_the_column_is_cached(tmp_path):
    frame = _frame([False]).drop(columns=["rerank_fallback"])
    assert ResultsCache(tmp_path).put(_key(), frame)


@pytest.mark.parametrize("column, value", [("error", "RerankError: llm reranker call failed"),
                                           ("diagnosis_error", "dense leg: OperationalError")])
def test_an_error_still_keeps_results_out(tmp_path, column, value):
    frame = _frame([False, False])
    frame.loc[0, column] = value
    assert not ResultsCache(tmp_path).put(_key(), frame) and not list(tmp_path.iterdir())


def test_an_unhealthy_entry_already_on_disk_is_a_miss(tmp_path):
    """An entry written before fallbacks were refused (or by any other writer) is not
    replayed: `get` treats it as a miss, so the variant is ranked again."""
    cache = ResultsCache(tmp_path)
    _frame([False, True]).to_parquet(tmp_path / f"{_key()}.parquet", index=False)
    assert cache.get(_key()) is None
