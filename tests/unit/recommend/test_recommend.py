"""The recommendation respects budgets on constructed numbers; Pareto fronts checked by hand; the
`recommend:` section validated naming the setting; the Pareto plot deterministic."""

from __future__ import annotations

import math
import textwrap

import numpy as np
import pandas as pd
import pytest
import yaml

from eval_pipeline.recommend import (
    BYTES_PER_MB,
    Budgets,
    Recommendation,
    headline,
    pareto_front,
    parse_budgets,
    recommend,
)
from eval_pipeline.config.sweep import _strict_loader

MB = BYTES_PER_MB
NAN = float("nan")


def pairs(*rows) -> pd.DataFrame:
    """Rows of (index, variant, quality, p95_ms, storage_mb[, low, high])."""
    out = []
    for row in rows:
        index, variant, quality, p95, storage, *interval = row
        low, high = interval or (NAN if quality is None else quality - 0.05, NAN if quality is None else quality + 0.05)
        out.append({"index": index, "variant": variant, "quality": quality, "quality_low": low, "quality_high": high,
                    "p95_ms": p95, "storage_bytes": None if storage is None else storage * MB})
    return pd.DataFrame(out)


# Four pairs on two indexes: the best overall (big × hybrid+ce) is slow and large.
SWEEP = pairs(
    ("small", "hybrid", 0.70, 20.0, 100),
    ("small", "hybrid+ce", 0.74, 90.0, 100),
    ("big", "hybrid", 0.73, 35.0, 400),
    ("big", "hybrid+ce", 0.80, 120.0, 400),
)


# ---- recommend ----------------------------------------------------------------------------


def test_without_budgets_the_best_overall_is_recommended():
    rec = recommend(SWEEP, metric="nDCG@10")
    assert rec.within_budget.pair == rec.best_overall.pair
    assert rec.best_overall.pair == ("big", "hybrid+ce") and rec.best_overall.quality == 0.80
    assert rec.best_overall.storage_bytes == 400 * MB and rec.best_overall.p95_ms == 120.0
    assert "highest nDCG@10 (0.800 [0.750, 0.850]) of the 4 measured pair(s)" in rec.overall_reason
    assert headline(rec) == ("Recommended: big × hybrid+ce (nDCG@10 0.800 [0.750, 0.850], p95 120.0 ms, 400.0 MB), "
                             "the best overall (no budgets set).")


def test_a_latency_budget_excludes_the_best_overall():
    rec = recommend(SWEEP, max_p95_ms=50, metric="nDCG@10")
    assert rec.within_budget.pair == ("big", "hybrid")  # 0.73 at 35 ms beats 0.70 at 20 ms
    assert rec.best_overall.pair == ("big", "hybrid+ce")
    assert "of the 2 pair(s) within the budgets (p95 ≤ 50.0 ms)" in rec.within_reason
    assert rec.overall_reason.endswith("; outside the budgets: p95 120.0 ms over the budget 50.0 ms")
    assert dict(rec.excluded) == {"small × hybrid+ce": "p95 90.0 ms over the budget 50.0 ms",
                                  "big × hybrid+ce": "p95 120.0 ms over the budget 50.0 ms"}
    assert headline(rec) == (
        "Recommended within the budgets: big × hybrid (nDCG@10 0.730 [0.680, 0.780], p95 35.0 ms, 400.0 MB); the best "
        "overall, big × hybrid+ce (nDCG@10 0.800 [0.750, 0.850], p95 120.0 ms, 400.0 MB), is outside them (p95 120.0 "
        "ms over the budget 50.0 ms).")


def test_latency_and_storage_budgets_together():
    rec = recommend(SWEEP, max_p95_ms=100, max_storage_bytes=200 * MB)
    assert rec.within_budget.pair == ("small", "hybrid+ce")  # the only small pair under 100 ms with the best quality
    rec = recommend(SWEEP, max_p95_ms=50, max_storage_bytes=200 * MB)
    assert rec.within_budget.pair == ("small", "hybrid")
    assert dict(rec.excluded)["big × hybrid"] == "storage 400.0 MB over the budget 200.0 MB"
    assert dict(rec.excluded)["big × hybrid+ce"] == ("p95 120.0 ms over the budget 50.0 ms; storage 400.0 MB over "
                                                     "the budget 200.0 MB")
    # budgets are inclusive
    assert recommend(SWEEP, max_p95_ms=20, max_storage_bytes=100 * MB).within_budget.pair == ("small", "hybrid")


def test_nothing_fits_the_budget_gives_no_recommendation_and_a_clear_reason():
    rec = recommend(SWEEP, max_p95_ms=10, max_storage_bytes=50 * MB, metric="nDCG@10")
    assert rec.within_budget is None
    assert rec.best_overall.pair == ("big", "hybrid+ce")
    assert rec.within_reason == ("no pair fits the budgets (p95 ≤ 10.0 ms, storage ≤ 50.0 MB): of the 4 pair(s) "
                                 "that qualify on nDCG@10, 4 over the p95 budget, 4 over the storage budget")
    assert len(rec.excluded) == 4
    line = headline(rec)
    assert line.startswith("No pair is recommended: no pair fits the budgets (p95 ≤ 10.0 ms, storage ≤ 50.0 MB)")
    assert line.endswith("the best overall is big × hybrid+ce (nDCG@10 0.800 [0.750, 0.850], p95 120.0 ms, 400.0 MB).")
    assert line.count(".") >= 1 and "\n" not in line


def test_a_pair_missing_a_measurement_it_is_judged_on_is_never_recommended():
    frame = pairs(
        ("a", "best-but-unmeasured-latency", 0.90, None, 100),
        ("a", "no-quality", None, 5.0, 100),
        ("a", "no-storage", 0.85, 5.0, None),
        ("a", "measured", 0.60, 40.0, 100),
    )
    # no budgets: judged on quality only, so a missing latency does not matter
    assert recommend(frame).best_overall.variant == "best-but-unmeasured-latency"
    # a latency budget: the pair without a p95 is out of the budgeted pick (not of the best overall)
    rec = recommend(frame, max_p95_ms=50)
    assert rec.within_budget.variant == "no-storage" and rec.best_overall.variant == "best-but-unmeasured-latency"
    assert dict(rec.excluded)["a × best-but-unmeasured-latency"] == "p95 not measured"
    assert dict(rec.excluded)["a × no-quality"] == "quality not measured"
    assert "is outside them (p95 not measured)" in headline(rec)
    # a storage budget too: only the fully measured pair is left
    rec = recommend(frame, max_p95_ms=50, max_storage_bytes=500 * MB)
    assert rec.within_budget.variant == "measured"
    assert dict(rec.excluded)["a × no-storage"] == "storage not measured"
    # nobody measured
    empty = recommend(pairs(("a", "x", None, None, None), ("b", "x", None, 3.0, 1)), max_p95_ms=50)
    assert empty.within_budget is None and empty.best_overall is None
    assert empty.overall_reason == "no pair has a measured quality (2 pair(s), none measured)"
    assert headline(empty) == "No pair can be recommended: no pair has a measured quality (2 pair(s), none measured)."
    nothing = recommend(pairs(("a", "x", 0.5, 1, 1)).iloc[:0])
    assert nothing.best_overall is None and headline(nothing) == "No pair can be recommended: no pairs were measured."


def test_a_pair_below_the_minimum_quality_is_never_recommended():
    rec = recommend(SWEEP, max_p95_ms=30, min_quality=0.72, metric="nDCG@10")
    # small × hybrid is the only pair within 30 ms, and it is below 0.72
    assert rec.within_budget is None and rec.best_overall.pair == ("big", "hybrid+ce")
    assert dict(rec.excluded)["small × hybrid"] == "nDCG@10 0.700 below the minimum 0.72"
    assert "of the 3 pair(s) that qualify on nDCG@10, 3 over the p95 budget" in rec.within_reason
    # the minimum is inclusive
    assert recommend(SWEEP, max_p95_ms=30, min_quality=0.70).within_budget.pair == ("small", "hybrid")
    # nobody reaches it
    rec = recommend(SWEEP, min_quality=0.9, metric="nDCG@10")
    assert rec.best_overall is None and rec.within_budget is None
    assert rec.overall_reason == "no pair reaches the minimum nDCG@10 0.9 (best measured: big × hybrid+ce at 0.800)"
    assert headline(rec).startswith("No pair can be recommended: no pair reaches the minimum nDCG@10 0.9")


def test_ties_are_broken_by_p95_then_storage_then_key_order():
    by_latency = pairs(("a", "slow", 0.7, 30.0, 100), ("b", "fast", 0.7, 10.0, 900), ("c", "worse", 0.6, 1.0, 1))
    rec = recommend(by_latency)
    assert rec.best_overall.pair == ("b", "fast")
    assert "tied on quality with a × slow, chosen by lower p95 (10.0 ms against 30.0 ms)" in rec.best_overall.reason
    by_storage = pairs(("a", "big", 0.7, 10.0, 300), ("b", "small", 0.7, 10.0, 100))
    assert recommend(by_storage).best_overall.pair == ("b", "small")
    assert "chosen by lower storage (100.0 MB against 300.0 MB)" in recommend(by_storage).best_overall.reason
    by_key = pairs(("b", "x", 0.7, 10.0, 100), ("a", "y", 0.7, 10.0, 100), ("a", "x", 0.7, 10.0, 100))
    rec = recommend(by_key)
    assert rec.best_overall.pair == ("a", "x")
    assert "tied on quality with a × y, b × x, chosen by key order (index, then variant)" in rec.best_overall.reason
    # a measured p95 wins a tie over an unmeasured one
    measured_first = pairs(("a", "unmeasured", 0.7, None, 100), ("b", "measured", 0.7, 80.0, 100))
    assert recommend(measured_first).best_overall.pair == ("b", "measured")
    # qualities equal but for the last bits of a float sum are a tie
    sums = pairs(("a", "x", 0.1 + 0.2, 50.0, 1), ("b", "x", 0.3, 10.0, 1))
    assert recommend(sums).best_overall.pair == ("b", "x")


def test_the_order_does_not_depend_on_the_rows_order():
    shuffled = SWEEP.sample(frac=1.0, random_state=7).reset_index(drop=True)
    for budgets in ({}, {"max_p95_ms": 50}, {"max_p95_ms": 100, "max_storage_bytes": 200 * MB}):
        assert recommend(shuffled, **budgets) == recommend(SWEEP, **budgets)


def test_a_runner_up_within_the_interval_is_said():
    rec = recommend(pairs(("a", "x", 0.71, 10, 1, 0.65, 0.77), ("a", "y", 0.70, 10, 1, 0.64, 0.76)))
    assert "the runner-up a × y (0.700) lies within its interval" in rec.best_overall.reason
    rec = recommend(pairs(("a", "x", 0.90, 10, 1, 0.88, 0.92), ("a", "y", 0.70, 10, 1, 0.64, 0.76)))
    assert "runner-up" not in rec.best_overall.reason


def test_the_interval_columns_are_optional_and_bad_frames_are_refused():
    bare = SWEEP.drop(columns=["quality_low", "quality_high"])
    rec = recommend(bare)
    assert rec.best_overall.quality_low is None and "(0.800)" in rec.best_overall.reason
    assert "nDCG" not in headline(rec) and "quality 0.800, p95" in headline(rec)
    with pytest.raises(ValueError, match=r"missing column\(s\) \['p95_ms'\]"):
        recommend(SWEEP.drop(columns=["p95_ms"]))
    with pytest.raises(ValueError, match="small × hybrid more than once"):
        recommend(pd.concat([SWEEP, SWEEP.iloc[:1]]))
    with pytest.raises(ValueError, match="'p95_ms' holds an infinite value"):
        recommend(SWEEP.assign(p95_ms=[1.0, 2.0, math.inf, 3.0]))
    with pytest.raises(ValueError, match="'storage_bytes' holds a negative value"):
        recommend(SWEEP.assign(storage_bytes=[1.0, -2.0, 3.0, 4.0]))
    with pytest.raises(ValueError, match="'quality' must hold numbers"):
        recommend(SWEEP.assign(quality=["high", 0.1, 0.2, 0.3]))
    with pytest.raises(ValueError, match="'index' must hold non-empty strings"):
        recommend(SWEEP.assign(index=["a", "", "b", "c"]))
    with pytest.raises(ValueError, match="must be a DataFrame"):
        recommend([{"index": "a"}])
    with pytest.raises(ValueError, match="max_p95_ms must be a finite number > 0"):
        recommend(SWEEP, max_p95_ms=0)
    with pytest.raises(ValueError, match="min_quality must be a finite number > 0"):
        recommend(SWEEP, min_quality=float("nan"))


# ---- the Pareto front ---------------------------------------------------------------------


def _front(frame, x):
    return [(r.index, r.variant) for r in pareto_front(frame, x).itertuples()]


def test_the_pareto_front_by_hand():
    # p95: each pair is faster or better than every other (20 ms .70, 35 ms .73, 90 ms .74, 120 ms .80):
    # all four are on the front, sorted by p95.
    assert _front(SWEEP, "p95_ms") == [("small", "hybrid"), ("big", "hybrid"), ("small", "hybrid+ce"),
                                       ("big", "hybrid+ce")]
    # storage: at 100 MB small×hybrid+ce (.74) beats small×hybrid (.70); at 400 MB only big×hybrid+ce (.80)
    # beats it; big×hybrid (.73, 400 MB) is dominated by small×hybrid+ce (.74, 100 MB).
    assert _front(SWEEP, "storage_bytes") == [("small", "hybrid+ce"), ("big", "hybrid+ce")]
    dominated = pairs(("a", "x", 0.5, 50.0, 1), ("a", "y", 0.6, 40.0, 1), ("a", "z", 0.6, 45.0, 1))
    assert _front(dominated, "p95_ms") == [("a", "y")]  # equal quality, slower: dominated


def test_ties_on_the_front_are_explicit_and_unmeasured_pairs_left_out():
    frame = pairs(("b", "x", 0.7, 10.0, 1), ("a", "x", 0.7, 10.0, 1), ("a", "y", 0.8, 30.0, 1),
                  ("a", "fast-unmeasured", None, 1.0, 1), ("a", "good-no-latency", 0.99, None, 1))
    front = pareto_front(frame, "p95_ms")
    assert [(r.index, r.variant) for r in front.itertuples()] == [("a", "x"), ("b", "x"), ("a", "y")]
    assert list(front["tied_with"]) == [("b × x",), ("a × x",), ()]
    # a tie at a dominated point: both off the front
    frame = pairs(("a", "x", 0.7, 10.0, 1), ("b", "x", 0.7, 10.0, 1), ("c", "x", 0.9, 5.0, 1))
    assert _front(frame, "p95_ms") == [("c", "x")]
    assert pareto_front(frame.iloc[:0], "p95_ms").empty
    with pytest.raises(ValueError, match="no column 'recall'"):
        pareto_front(frame, "recall")


# ---- the variants file's `recommend:` -----------------------------------------------------


def _section(text: str):
    return yaml.load(textwrap.dedent(text), Loader=_strict_loader())["recommend"]  # noqa: S506 - a SafeLoader


def test_budgets_are_read_from_the_variants_file():
    budgets = parse_budgets(_section("""
        variants: [hybrid]
        recommend: {max_p95_ms: 50, max_storage_mb: 200, min_quality: 0.5}
    """), "variants.yaml")
    assert budgets == Budgets(max_p95_ms=50.0, max_storage_bytes=200 * MB, min_quality=0.5)
    assert budgets.describe("nDCG@10") == "p95 ≤ 50.0 ms, storage ≤ 200.0 MB, nDCG@10 ≥ 0.5"
    assert recommend(SWEEP, **budgets.kwargs()).within_budget.pair == ("small", "hybrid")
    assert parse_budgets(None, "variants.yaml") == Budgets() and not Budgets().any
    assert parse_budgets({"max_p95_ms": 7}, "v.yaml") == Budgets(max_p95_ms=7.0)


@pytest.mark.parametrize("text, expected", [
    ("recommend: {max_p95_ms: 0}", "variants.yaml:2: recommend.max_p95_ms must be a finite number > 0, got 0"),
    ("recommend: {max_p95_ms: -5}", "recommend.max_p95_ms must be a finite number > 0, got -5"),
    ("recommend: {max_p95_ms: .inf}", "recommend.max_p95_ms must be a finite number > 0, got inf"),
    ("recommend: {max_p95_ms: .nan}", "recommend.max_p95_ms must be a finite number > 0, got nan"),
    ("recommend: {max_storage_mb: fifty}", "recommend.max_storage_mb must be a finite number > 0, got 'fifty'"),
    ("recommend: {max_storage_mb: true}", "recommend.max_storage_mb must be a finite number > 0, got True"),
    ("recommend: {min_quality: 1.5}", "variants.yaml:2: recommend.min_quality must be at most 1"),
    ("recommend: {min_quality: 0}", "recommend.min_quality must be a finite number > 0, got 0"),
    ("recommend: {max_latency_ms: 50}", ("variants.yaml:2: unknown recommend setting(s) ['max_latency_ms']; valid: "
                                        "max_p95_ms, max_storage_mb, min_quality")),
    ("recommend: {max_storage_bytes: 5}", ("unknown recommend setting(s) ['max_storage_bytes'] (give storage in MB: "
                                          "max_storage_mb)")),
    ("recommend: [50]", ("variants.yaml: recommend must be a mapping with some of max_p95_ms, max_storage_mb, "
                        "min_quality")),
])
def test_bad_budgets_name_the_setting(text, expected):
    with pytest.raises(ValueError) as info:
        parse_budgets(_section("variants: [hybrid]\n" + text), "variants.yaml")
    assert expected in str(info.value), str(info.value)


# ---- the Pareto plot ----------------------------------------------------------------------


PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("x", ["p95_ms", "storage_bytes"])
def test_the_pareto_plot_is_a_png_byte_identical_on_re_render(tmp_path, x):
    from eval_pipeline.reporting.pareto import pareto_plot

    frame = pd.concat([SWEEP, pairs(("big", "unmeasured", None, 3.0, 400))], ignore_index=True)
    rec = recommend(frame, max_p95_ms=50, max_storage_bytes=200 * MB, min_quality=0.5)
    first = pareto_plot(frame, tmp_path / "a.png", x, recommendation=rec, metric="nDCG@10")
    second = pareto_plot(frame.copy(), tmp_path / "b.png", x, recommendation=rec, metric="nDCG@10")
    data = first.read_bytes()
    assert data[:8] == PNG_MAGIC and len(data) > 5_000
    assert data == second.read_bytes()
    plain = pareto_plot(frame, tmp_path / "c.png", x)
    assert plain.read_bytes() != data  # the budget and the picks are drawn


def test_the_pareto_plot_refuses_what_it_cannot_draw(tmp_path):
    from eval_pipeline.reporting.pareto import pareto_plot

    with pytest.raises(ValueError, match="x must be one of p95_ms, storage_bytes"):
        pareto_plot(SWEEP, tmp_path / "x.png", "quality")
    with pytest.raises(ValueError, match="no pair has both its quality and p95_ms measured"):
        pareto_plot(pairs(("a", "x", None, 3.0, 1)), tmp_path / "x.png", "p95_ms")
    with pytest.raises(ValueError, match="is empty"):
        pareto_plot(SWEEP.iloc[:0], tmp_path / "x.png", "p95_ms")
    assert not (tmp_path / "x.png").exists()


def test_a_recommendation_is_plain_data():
    rec = recommend(SWEEP, max_p95_ms=50)
    assert isinstance(rec, Recommendation)
    assert rec == recommend(SWEEP.copy(), max_p95_ms=50)
    assert np.isclose(rec.within_budget.quality, 0.73)


def test_the_module_docstrings_section_parses():
    import eval_pipeline.recommend as module

    block = module.__doc__.split("inclusive:\n\n", 1)[1].split("\n\n", 1)[0]
    assert parse_budgets(_section(block), "variants.yaml") == Budgets(50.0, 200 * MB, 0.5)
