"""Miss diagnosis on a constructed case for each class."""

import pytest

from eval_pipeline.sweep import MISS_CLASSES, diagnose_miss


def diag(final, *, keyword=(), dense=(), pre_rerank=None, fused=False, abstained=False, errored=False, gold=("g",)):
    return diagnose_miss(gold, final=list(final), k=2, keyword=list(keyword), dense=list(dense),
                         pre_rerank=pre_rerank, fused=fused, abstained=abstained, errored=errored)


@pytest.mark.parametrize(
    "expected, kwargs",
    [
        (None, dict(final=["a", "g"])),                                              # a hit
        ("never_candidate", dict(final=["a", "b"], keyword=["a"], dense=["b"])),
        ("keyword_only", dict(final=["a", "b"], keyword=["a", "b", "g"], dense=["b"])),
        ("dense_only", dict(final=["a", "b"], keyword=["a"], dense=["a", "b", "c", "g"])),
        ("both_legs", dict(final=["a", "b"], keyword=["a", "b", "g"], dense=["b", "c", "g"])),
        ("lost_in_fusion", dict(final=["a", "b"], keyword=["g", "a"], dense=["b", "c"], fused=True)),
        # fused, but no leg had it in its own top k: the legs ranked it low, fusion is not to blame
        ("dense_only", dict(final=["a", "b"], keyword=["a"], dense=["a", "b", "g"], fused=True)),
        ("demoted_by_reranker", dict(final=["a", "b", "g"], keyword=["g"], dense=["g"], pre_rerank=["g", "a"])),
        ("abstained", dict(final=[], keyword=["g"], dense=["g"], abstained=True)),
        ("errored", dict(final=[], errored=True)),
    ],
)
def test_each_class(expected, kwargs):
    assert diag(**kwargs) == expected
    assert expected is None or expected in MISS_CLASSES


def test_abstention_question_is_not_a_miss():
    assert diag(["a"], gold=()) is None


def test_any_gold_in_top_k_is_a_hit():
    assert diag(["x", "h"], gold=("g", "h")) is None
