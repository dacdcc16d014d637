"""Tests for eval_pipeline.reporting.plots: valid, non-trivial PNGs, byte-identical on re-render."""

from __future__ import annotations

import copy

import pandas as pd
import pytest

from eval_pipeline.reporting.plots import baseline_deltas, hit_at_k_curves, metric_bars

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"

SUMMARY = pd.DataFrame(
    {
        "variant": ["hybrid", "pg-dense", "hybrid+cross-encoder"],
        "hit@1": [0.55, 0.48, 0.63],
        "hit@3": [0.70, 0.62, 0.78],
        "hit@5": [0.78, 0.70, 0.84],
        "hit@10": [0.86, 0.79, 0.90],
        "hit@20": [0.91, 0.85, 0.92],
        "mrr": [0.65, 0.57, 0.72],
    }
)
INTERVALS = pd.DataFrame(
    {
        "variant": ["hybrid", "pg-dense", "hybrid+cross-encoder", "hybrid"],
        "metric": ["ndcg@10", "ndcg@10", "ndcg@10", "mrr"],
        "n": [120, 120, 120, 120],
        "mean": [0.66, 0.58, 0.71, 0.65],
        "low": [0.60, 0.52, 0.66, 0.59],
        "high": [0.72, 0.64, 0.76, 0.71],
    }
)
COMPARISON = pd.DataFrame(
    {
        "variant": ["pg-dense", "hybrid+cross-encoder"],
        "baseline": ["hybrid", "hybrid"],
        "metric": ["ndcg@10", "ndcg@10"],
        "delta": [-0.08, 0.05],
        "ci_low": [-0.12, 0.01],
        "ci_high": [-0.04, 0.09],
        "p_holm": [0.001, 0.03],
        "significant": [True, True],
    }
)


def _check_png(path):
    data = path.read_bytes()
    assert data[:8] == PNG_MAGIC
    assert len(data) > 5_000  # axes, labels and lines, not an empty canvas
    return data


@pytest.mark.parametrize(
    "render",
    [
        lambda p: hit_at_k_curves(SUMMARY, p),
        lambda p: metric_bars(INTERVALS, p),
        lambda p: metric_bars(INTERVALS, p, metric="mrr"),
        lambda p: baseline_deltas(COMPARISON, p),
        lambda p: baseline_deltas(COMPARISON.assign(significant=[False, True]), p),
    ],
)
def test_valid_png_and_deterministic(tmp_path, render):
    first = render(tmp_path / "a" / "plot.png")  # parent folder is created
    second = render(tmp_path / "b.png")
    assert first == tmp_path / "a" / "plot.png"
    assert _check_png(first) == _check_png(second)
    assert not list(tmp_path.rglob("*.tmp"))  # atomic write leaves no temp file


def test_no_software_or_timestamp_metadata(tmp_path):
    data = hit_at_k_curves(SUMMARY, tmp_path / "h.png").read_bytes()
    assert b"Software" not in data and b"matplotlib" not in data.lower()
    assert b"tIME" not in data


def test_inputs_are_not_mutated_and_no_pyplot_figures_leak(tmp_path):
    import matplotlib.pyplot as plt

    before = [copy.deepcopy(df) for df in (SUMMARY, INTERVALS, COMPARISON)]
    open_before = plt.get_fignums()
    hit_at_k_curves(SUMMARY, tmp_path / "1.png")
    metric_bars(INTERVALS, tmp_path / "2.png")
    baseline_deltas(COMPARISON, tmp_path / "3.png")
    assert plt.get_fignums() == open_before
    for df, snapshot in zip((SUMMARY, INTERVALS, COMPARISON), before):
        pd.testing.assert_frame_equal(df, snapshot)


def test_partial_hit_columns_and_nan_bounds_still_render(tmp_path):
    _check_png(hit_at_k_curves(SUMMARY[["variant", "hit@1", "hit@10"]], tmp_path / "h.png"))
    nan_bounds = INTERVALS.assign(low=float("nan"))
    _check_png(metric_bars(nan_bounds, tmp_path / "m.png"))


@pytest.mark.parametrize(
    "call, needle",
    [
        (lambda p: hit_at_k_curves(SUMMARY[["variant", "mrr"]], p), "no hit@k columns"),
        (lambda p: hit_at_k_curves(SUMMARY.iloc[0:0], p), "empty"),
        (lambda p: hit_at_k_curves([1, 2], p), "must be a DataFrame"),
        (lambda p: metric_bars(INTERVALS, p, metric="map"), "no rows for metric 'map'"),
        (lambda p: metric_bars(INTERVALS.drop(columns="low"), p), r"missing column\(s\) \['low'\]"),
        (lambda p: baseline_deltas(COMPARISON, p, metric="hit@1"), "no rows for metric 'hit@1'"),
        (lambda p: baseline_deltas(COMPARISON.drop(columns="significant"), p), "significant"),
    ],
)
def test_bad_inputs_raise_early(tmp_path, call, needle):
    with pytest.raises(ValueError, match=needle):
        call(tmp_path / "x.png")
    assert not (tmp_path / "x.png").exists()
