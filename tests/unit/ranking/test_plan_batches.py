"""plan_batches: how the variants of one run are split into parallel steps."""

import pytest

from eval_pipeline.config.sweep import parse_sweep
from eval_pipeline.ranking.batches import plan_batches


def variants(*items):
    return list(parse_sweep({"variants": list(items)}).variants)


def keys(batches):
    return [[v.key for v in b] for b in batches]


REPO_LIKE = ["pg-keyword", "pg-dense", "hybrid", {"engine": "hybrid", "reranker": "mmr"},
             {"engine": "hybrid", "legs": ["bm25", "dense"], "name": "hybrid-bm25"}, "bm25", "metadata"]


def test_one_worker_is_the_whole_sweep_in_its_order():
    vs = variants(*REPO_LIKE)
    assert keys(plan_batches(vs, 1)) == [[v.key for v in vs]]


def test_variants_sharing_a_first_stage_stay_together():
    vs = variants(*REPO_LIKE)
    batches = keys(plan_batches(vs, 7))
    assert len(batches) == 6  # hybrid and hybrid+mmr share a pool: 6 groups
    assert ["hybrid", "hybrid+mmr"] in batches
    assert sorted(k for b in batches for k in b) == sorted(v.key for v in vs)  # nothing lost, nothing twice


def test_groups_are_dealt_largest_first_to_the_smallest_batch():
    vs = variants(*REPO_LIKE)
    assert keys(plan_batches(vs, 2)) == [["hybrid", "hybrid+mmr", "hybrid-bm25", "metadata"],
                                         ["pg-keyword", "pg-dense", "bm25"]]
    # 3: the pair first, then the singles in order, each to the first of the smallest batches
    assert keys(plan_batches(vs, 3)) == [["hybrid", "hybrid+mmr", "metadata"], ["pg-keyword", "hybrid-bm25"],
                                         ["pg-dense", "bm25"]]


def test_more_workers_than_groups_gives_one_batch_per_group():
    vs = variants("pg-dense", "bm25")
    assert keys(plan_batches(vs, 8)) == [["pg-dense"], ["bm25"]]


def test_api_backed_rerankers_share_one_batch_with_their_pools():
    """Every LLM reranker in one step: one client, one concurrency limit, never two processes
    calling the endpoint at once; their first stages come along so pools are not re-queried."""
    vs = variants(
        "pg-dense",
        {"engine": "hybrid", "reranker": "llm"},
        {"engine": "pg-dense", "reranker": "llm", "name": "dense+llm"},
        {"engine": "hybrid", "reranker": "mmr"},
        "bm25",
    )
    batches = keys(plan_batches(vs, 8))
    (api,) = [b for b in batches if "hybrid+llm" in b]
    assert api == ["pg-dense", "hybrid+llm", "dense+llm", "hybrid+mmr"]
    assert batches == [api, ["bm25"]]


def test_no_variants_no_batches():
    assert plan_batches([], 4) == []


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "2"])
def test_workers_must_be_a_positive_integer(bad):
    with pytest.raises(ValueError, match="workers must be an integer >= 1"):
        plan_batches(variants("pg-dense"), bad)
