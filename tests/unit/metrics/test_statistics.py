"""Tests for eval_pipeline.metrics.statistics: expected values are worked out by hand next to each case."""

from __future__ import annotations

import copy
import math
import warnings

import numpy as np
import pandas as pd
import pytest

from eval_pipeline.metrics.retrieval import score_queries
from eval_pipeline.metrics.statistics import (
    COMPARISON_COLUMNS,
    bootstrap_ci,
    compare_to_baseline,
    holm,
    metric_intervals,
    paired_randomization_test,
    win_tie_loss,
)

METRICS = ("ndcg@10", "mrr", "hit@1", "hit@5")


def frame(values: dict[str, list[float]], *, qids=None, abstention: int = 0) -> pd.DataFrame:
    """A per-question frame like score_variant's: answerable rows with the given metric
    values, then `abstention` non-answerable rows with NaN metrics."""
    n = len(next(iter(values.values())))
    qids = list(qids) if qids is not None else [f"q{i:03d}" for i in range(n)]
    rows = {"qid": qids, "answerable": [True] * n, "errored": [False] * n, **{m: list(v) for m, v in values.items()}}
    df = pd.DataFrame(rows)
    if abstention:
        extra = pd.DataFrame(
            {"qid": [f"a{i:03d}" for i in range(abstention)], "answerable": False, "errored": False,
             **{m: math.nan for m in values}}
        )
        df = pd.concat([df, extra], ignore_index=True)
    return df


def all_metrics(x: list[float]) -> dict[str, list[float]]:
    return {m: list(x) for m in METRICS}


# ---------------------------------------------------------------------------
# bootstrap_ci
# ---------------------------------------------------------------------------


def test_bootstrap_ci_contains_mean_and_is_within_data_range():
    x = [0, 1, 1, 0, 1, 1, 1, 0, 1, 1]  # mean 0.7
    low, high = bootstrap_ci(x)
    assert 0.0 <= low < 0.7 < high <= 1.0


def test_bootstrap_ci_narrows_with_more_questions():
    rng = np.random.default_rng(42)
    small = rng.integers(0, 2, 30).astype(float)
    large = np.tile(small, 16)  # same mean, 16x the questions -> about 1/4 the width
    lo_s, hi_s = bootstrap_ci(small)
    lo_l, hi_l = bootstrap_ci(large)
    assert lo_l <= large.mean() <= hi_l
    assert (hi_l - lo_l) < 0.5 * (hi_s - lo_s)


def test_bootstrap_ci_is_reproducible_with_a_seed_and_varies_without_it():
    x = np.random.default_rng(0).random(50)
    assert bootstrap_ci(x, seed=7) == bootstrap_ci(x, seed=7)
    assert bootstrap_ci(x, seed=7) != bootstrap_ci(x, seed=8)


def test_bootstrap_ci_degenerate_inputs_without_warnings():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert bootstrap_ci([0.25, 0.25, 0.25]) == (0.25, 0.25)  # all equal
        assert bootstrap_ci([0.5]) == (0.5, 0.5)  # n < 2
        low, high = bootstrap_ci([])
    assert math.isnan(low) and math.isnan(high)


def test_bootstrap_ci_wider_at_higher_confidence():
    x = np.random.default_rng(3).random(60)
    lo90, hi90 = bootstrap_ci(x, confidence=0.90)
    lo99, hi99 = bootstrap_ci(x, confidence=0.99)
    assert lo99 <= lo90 and hi90 <= hi99


@pytest.mark.parametrize(
    "kwargs, needle",
    [
        (dict(values=[1.0, float("nan")]), "position 1"),
        (dict(values=[1.0, float("inf")]), "position 1"),
        (dict(values=[[1.0, 2.0]]), "one-dimensional"),
        (dict(values=[1.0, 2.0], confidence=1.0), "confidence"),
        (dict(values=[1.0, 2.0], confidence=True), "confidence"),
        (dict(values=[1.0, 2.0], n_resamples=0), "n_resamples"),
        (dict(values=[1.0, 2.0], seed=-1), "seed"),
        (dict(values=[1.0, 2.0], seed=1.5), "seed"),
    ],
)
def test_bootstrap_ci_rejects_bad_input(kwargs, needle):
    with pytest.raises(ValueError, match=needle):
        bootstrap_ci(**kwargs)


@pytest.mark.parametrize("values", ["0101", {"q1": 1.0}])
def test_bootstrap_ci_rejects_a_string_or_a_mapping_as_a_type_error(values):
    with pytest.raises(TypeError, match="values must be a sequence of numbers"):
        bootstrap_ci(values)


def test_bootstrap_ci_does_not_mutate_input():
    x = np.array([0.0, 1.0, 0.5, 0.25])
    before = x.copy()
    bootstrap_ci(x)
    np.testing.assert_array_equal(x, before)


# ---------------------------------------------------------------------------
# paired_randomization_test
# ---------------------------------------------------------------------------


def test_identical_inputs_give_p_exactly_one():
    a = [0.0, 1.0, 0.5, 0.3]
    assert paired_randomization_test(a, list(a)) == 1.0


def test_constant_shift_is_detected():
    a = np.linspace(0.0, 0.8, 40)
    # every one of 40 differences is +0.1: only the all-positive sign pattern (and its
    # mirror) is as extreme, so p ~ 2 / 10001 with sampled flips
    p = paired_randomization_test(a + 0.1, a)
    assert p < 0.01
    assert p > 0  # a sampled p-value is never 0


def test_exact_enumeration_for_small_n():
    # 5 differences all +1: 2**5 = 32 sign patterns <= n_resamples -> exact test;
    # two of them (all +, all -) are as extreme as observed -> p = 2/32
    assert paired_randomization_test([1] * 5, [0] * 5) == pytest.approx(2 / 32)
    # one difference: flipping it gives an equally extreme value -> p = 1
    assert paired_randomization_test([1.0], [0.0]) == 1.0


def test_randomization_test_is_symmetric_and_reproducible():
    rng = np.random.default_rng(5)
    a, b = rng.random(80), rng.random(80)
    assert paired_randomization_test(a, b, seed=3) == paired_randomization_test(a, b, seed=3)
    assert paired_randomization_test(a, b, seed=3) == pytest.approx(paired_randomization_test(b, a, seed=3))


def test_randomization_test_noise_is_not_significant():
    rng = np.random.default_rng(11)
    a = rng.random(100)
    b = a + rng.normal(0, 0.05, 100) * rng.choice([-1, 1], 100)
    assert paired_randomization_test(a, b) > 0.05


def test_randomization_test_input_errors():
    with pytest.raises(ValueError, match="same length"):
        paired_randomization_test([1, 2, 3], [1, 2])
    with pytest.raises(ValueError, match="b must be finite"):
        paired_randomization_test([1, 2], [1, float("nan")])
    assert math.isnan(paired_randomization_test([], []))


# ---------------------------------------------------------------------------
# holm
# ---------------------------------------------------------------------------


def test_holm_hand_example():
    # sorted: a 0.01, c 0.03, b 0.04; m = 3
    #   a: 3 * 0.01 = 0.03
    #   c: max(0.03, 2 * 0.03 = 0.06) = 0.06
    #   b: max(0.06, 1 * 0.04 = 0.04) = 0.06   (monotone)
    out = holm({"a": 0.01, "b": 0.04, "c": 0.03})
    assert out == pytest.approx({"a": 0.03, "b": 0.06, "c": 0.06})
    assert list(out) == ["a", "b", "c"]  # input order kept


def test_holm_caps_at_one_and_handles_ties_and_edges():
    # sorted 0.4, 0.4, 0.9: 3*0.4 = 1.2 -> 1; tie -> 1; 0.9 -> 1
    assert holm({"x": 0.4, "y": 0.4, "z": 0.9}) == {"x": 1.0, "y": 1.0, "z": 1.0}
    # ties get the same value whatever the order: 0.01*3 = 0.03, max(0.03, 0.02) = 0.03
    assert holm({"p": 0.01, "q": 0.01, "r": 0.5}) == pytest.approx({"p": 0.03, "q": 0.03, "r": 0.5})
    assert holm({}) == {}
    assert holm({"only": 0.02}) == {"only": 0.02}


@pytest.mark.parametrize("bad", [float("nan"), -0.1, 1.5, "0.1", None, True])
def test_holm_rejects_bad_pvalues(bad):
    with pytest.raises(ValueError, match="'v2'"):
        holm({"v1": 0.1, "v2": bad})


# ---------------------------------------------------------------------------
# win_tie_loss
# ---------------------------------------------------------------------------


def test_win_tie_loss_by_hand():
    a = [1.0, 0.0, 0.5, 0.5, 1.0]
    b = [0.0, 0.0, 1.0, 0.5, 0.5]
    # q0 win, q1 tie, q2 loss, q3 tie, q4 win
    assert win_tie_loss(a, b) == (2, 2, 1)
    assert win_tie_loss(b, a) == (1, 2, 2)
    with pytest.raises(ValueError, match="same length"):
        win_tie_loss([1.0], [1.0, 2.0])


# ---------------------------------------------------------------------------
# compare_to_baseline
# ---------------------------------------------------------------------------


def test_identical_variants_have_zero_delta_and_p_one():
    x = [1, 0, 1, 1, 0, 0.5, 0.25, 1]
    per_query = {"base": frame(all_metrics(x)), "same": frame(all_metrics(x))}
    out = compare_to_baseline(per_query, "base")
    assert list(out.columns) == COMPARISON_COLUMNS
    assert list(out["metric"]) == list(METRICS)
    assert (out["delta"] == 0).all()
    assert (out["ci_low"] == 0).all() and (out["ci_high"] == 0).all()
    assert (out["p"] == 1.0).all() and (out["p_holm"] == 1.0).all()
    assert (out["ties"] == 8).all() and (out["wins"] == 0).all() and (out["losses"] == 0).all()
    assert not out["significant"].any()


def test_constant_shift_is_significant_and_noise_is_not():
    rng = np.random.default_rng(1)
    base = rng.uniform(0.0, 0.8, 60)
    better = base + 0.1
    noisy = base + rng.normal(0, 0.02, 60)
    per_query = {
        "base": frame({"mrr": base}),
        "better": frame({"mrr": better}),
        "noisy": frame({"mrr": noisy}),
    }
    out = compare_to_baseline(per_query, "base", metrics=["mrr"]).set_index("variant")
    assert out.loc["better", "delta"] == pytest.approx(0.1)
    assert out.loc["better", "ci_low"] == pytest.approx(0.1) and out.loc["better", "ci_high"] == pytest.approx(0.1)
    assert out.loc["better", "significant"]
    assert out.loc["better", "wins"] == 60
    assert out.loc["better", "mean"] == pytest.approx(base.mean() + 0.1)
    assert out.loc["better", "baseline_mean"] == pytest.approx(base.mean())
    assert not out.loc["noisy", "significant"]
    assert out.loc["noisy", "ci_low"] <= out.loc["noisy", "delta"] <= out.loc["noisy", "ci_high"]
    # Holm over 2 variants: the smaller p is doubled, the larger is max(2*p_min, p_max) bound
    p = out["p"].to_dict()
    assert out.loc["better", "p_holm"] == pytest.approx(min(1.0, 2 * p["better"]))
    assert out.loc["noisy", "p_holm"] == pytest.approx(max(min(1.0, 2 * p["better"]), p["noisy"]))


def test_compare_uses_answerable_questions_aligned_by_qid():
    base = frame({"hit@1": [1, 0, 0]}, qids=["q1", "q2", "q3"], abstention=2)
    # same questions in another order: q3 now a hit (win), q1 a miss (loss), q2 tie
    other = frame({"hit@1": [1, 0, 0]}, qids=["q3", "q2", "q1"], abstention=2).iloc[::-1]
    out = compare_to_baseline({"base": base, "other": other}, "base", metrics=["hit@1"])
    row = out.iloc[0]
    assert row["n"] == 3
    assert (row["wins"], row["ties"], row["losses"]) == (1, 1, 1)
    assert row["delta"] == 0.0


def test_compare_rejects_different_question_sets():
    base = frame({"mrr": [1, 0, 1]}, qids=["q1", "q2", "q3"])
    other = frame({"mrr": [1, 0, 1]}, qids=["q1", "q2", "q4"])
    with pytest.raises(ValueError, match=r"only in 'other': \['q4'\].*only in 'base': \['q3'\]"):
        compare_to_baseline({"base": base, "other": other}, "base", metrics=["mrr"])


@pytest.mark.parametrize(
    "per_query, baseline, metrics, needle",
    [
        ({"base": frame({"mrr": [1.0]})}, "nope", ["mrr"], "baseline 'nope'"),
        ({"base": frame({"mrr": [1.0]})}, "base", ["map"], r"missing column\(s\) \['map'\]"),
        ({"base": frame({"mrr": [1.0, float("nan")]})}, "base", ["mrr"], "non-finite 'mrr'"),
        ({"base": frame({"mrr": [1.0, 0.0]}, qids=["q1", "q1"])}, "base", ["mrr"], "duplicate qid"),
        ({"base": frame({"mrr": [1.0]})}, "base", [], "metrics must be"),
    ],
)
def test_compare_input_errors(per_query, baseline, metrics, needle):
    with pytest.raises(ValueError, match=needle):
        compare_to_baseline(per_query, baseline, metrics=metrics)


def test_compare_only_baseline_gives_empty_frame():
    out = compare_to_baseline({"base": frame(all_metrics([1, 0]))}, "base")
    assert out.empty and list(out.columns) == COMPARISON_COLUMNS


def test_compare_is_reproducible_and_does_not_mutate():
    rng = np.random.default_rng(9)
    per_query = {v: frame(all_metrics(rng.random(40))) for v in ("a", "b", "c")}
    snapshot = copy.deepcopy(per_query)
    first = compare_to_baseline(per_query, "a", seed=4)
    second = compare_to_baseline(per_query, "a", seed=4)
    pd.testing.assert_frame_equal(first, second)
    for key in per_query:
        pd.testing.assert_frame_equal(per_query[key], snapshot[key])


def test_compare_works_on_score_queries_output():
    qrels = {"q1": {"d1": 1}, "q2": {"d2": 1}, "q3": {}}  # q3 is an abstention question
    good = score_queries({"q1": ["d1"], "q2": ["d2"], "q3": []}, qrels)
    bad = score_queries({"q1": ["x", "d1"], "q2": ["x"]}, qrels, errored=["q3"])
    out = compare_to_baseline({"good": good, "bad": bad}, "good").set_index("metric")
    # hit@1: good 1, 1; bad 0, 0 -> delta -1, two losses
    assert out.loc["hit@1", "delta"] == -1.0 and out.loc["hit@1", "losses"] == 2
    # mrr: bad 0.5, 0 vs 1, 1 -> delta mean(-0.5, -1) = -0.75
    assert out.loc["mrr", "delta"] == pytest.approx(-0.75)
    assert (out["n"] == 2).all()


# ---------------------------------------------------------------------------
# metric_intervals
# ---------------------------------------------------------------------------


def test_metric_intervals_means_and_bounds():
    per_query = {
        "a": frame({"hit@1": [1, 0, 1, 1], "mrr": [1, 0.5, 1, 1]}, abstention=1),
        "b": frame({"hit@1": [0, 0, 0, 0], "mrr": [0.2, 0.2, 0.2, 0.2]}),
    }
    out = metric_intervals(per_query, ["hit@1", "mrr"])
    assert list(out.columns) == ["variant", "metric", "n", "mean", "low", "high"]
    assert list(zip(out["variant"], out["metric"])) == [("a", "hit@1"), ("a", "mrr"), ("b", "hit@1"), ("b", "mrr")]
    rows = out.set_index(["variant", "metric"])
    assert rows.loc[("a", "hit@1"), "mean"] == 0.75 and rows.loc[("a", "hit@1"), "n"] == 4
    assert rows.loc[("a", "hit@1"), "low"] <= 0.75 <= rows.loc[("a", "hit@1"), "high"]
    assert rows.loc[("a", "mrr"), "mean"] == pytest.approx(0.875)
    # constant values: degenerate interval
    assert (rows.loc[("b", "mrr"), "low"], rows.loc[("b", "mrr"), "high"]) == pytest.approx((0.2, 0.2))
    assert metric_intervals(per_query, ["hit@1"], seed=3).equals(metric_intervals(per_query, ["hit@1"], seed=3))


def test_metric_intervals_no_answerable_questions():
    df = frame({"mrr": [0.5]}).assign(answerable=False)
    row = metric_intervals({"a": df}, ["mrr"]).iloc[0]
    assert row["n"] == 0 and math.isnan(row["mean"]) and math.isnan(row["low"]) and math.isnan(row["high"])
