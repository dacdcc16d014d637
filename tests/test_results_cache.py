"""Reusing a variant's results only when nothing that decides them changed."""

import pandas as pd

from eval_pipeline.sweep import ResultsCache
from eval_pipeline.variants import parse_sweep


def _variant(**knobs):
    return parse_sweep({"variants": [{"engine": "hybrid", **knobs}]}).variants[0]


def _key(**overrides):
    args = dict(table="chunks_abc", questions_fingerprint="q1", variant=_variant(), miss_k=10, code_version="v1-3-gabc")
    args.update(overrides)
    return ResultsCache.key(**args)


def test_key_changes_with_everything_that_decides_results():
    base = _key()
    assert base is not None
    for change in (dict(table="chunks_def"), dict(questions_fingerprint="q2"), dict(miss_k=20),
                   dict(code_version="v1-4-gdef"), dict(variant=_variant(rrf_k=30)),
                   dict(variant=_variant(reranker="mmr")), dict(variant=_variant(abstain_below=0.5))):
        assert _key(**change) != base, change
    assert _key() == base


def test_unknown_or_dirty_code_is_never_cached():
    assert _key(code_version="unknown") is None
    assert _key(code_version="v1-3-gabc-dirty") is None
    assert _key(code_version="") is None


def test_round_trip_and_misses(tmp_path):
    cache = ResultsCache(tmp_path)
    frame = pd.DataFrame({"qid": ["q1"], "doc_ids": [["a", "b"]], "latency_ms": [1.5]})
    assert cache.get(_key()) is None
    cache.put(_key(), frame)
    back = cache.get(_key())
    assert back["qid"].tolist() == ["q1"] and [list(x) for x in back["doc_ids"]] == [["a", "b"]]
    assert back["latency_ms"].tolist() == [1.5]
    cache.put(None, frame)  # no key: nothing stored
    assert len(list(tmp_path.glob("*.parquet"))) == 1
    (tmp_path / f"{_key()}.parquet").write_bytes(b"garbage")
    assert cache.get(_key()) is None  # a damaged entry is a miss, not an error
