"""The report's caches: statistics and plots are reused only when their inputs are unchanged.

A re-run with nothing changed must not redo 10,000-permutation tests or redraw plots
(bench/warm_rerun.py), but any change to a score, the baseline or the variants must.
"""

from __future__ import annotations

import types

import numpy as np
import pandas as pd
import pandas.testing as pdt
import pytest

import eval_pipeline.plots as plotting
import eval_pipeline.statistics as statistics
from eval_pipeline.report import render_plots
from eval_pipeline.verdict import run_statistics, statistics_key

METRICS = ("ndcg@10", "mrr", "hit@1", "hit@5")


def per_question(seed: int, n: int = 40) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    hits = (rng.random(n) < 0.6).astype(float)
    return pd.DataFrame({
        "qid": [f"q{i:03d}" for i in range(n)], "answerable": True, "errored": False,
        "ndcg@10": hits * rng.uniform(0.3, 1.0, n), "mrr": hits * rng.uniform(0.2, 1.0, n),
        "hit@1": hits * (rng.random(n) < 0.5), "hit@5": hits,
    })


@pytest.fixture
def runs():
    return {"hybrid": per_question(1), "pg-dense": per_question(2), "bm25": per_question(3)}


def _forbid_statistics(monkeypatch):
    def boom(*args, **kwargs):
        raise AssertionError("statistics recomputed although the scores did not change")

    monkeypatch.setattr(statistics, "metric_intervals", boom)
    monkeypatch.setattr(statistics, "compare_to_baseline", boom)


def test_statistics_are_reused_when_the_scores_are_unchanged(tmp_path, runs, monkeypatch):
    intervals, comparison = run_statistics(runs, "hybrid", cache_dir=tmp_path)
    assert len(intervals) == 3 * 4 and len(comparison) == 2 * 4
    _forbid_statistics(monkeypatch)
    again = run_statistics({k: f.copy() for k, f in runs.items()}, "hybrid", cache_dir=tmp_path)
    pdt.assert_frame_equal(again[0], intervals)
    pdt.assert_frame_equal(again[1], comparison)


def test_the_cached_statistics_equal_a_fresh_computation(tmp_path, runs):
    run_statistics(runs, "hybrid", cache_dir=tmp_path)
    cached = run_statistics(runs, "hybrid", cache_dir=tmp_path)
    fresh = run_statistics(runs, "hybrid", cache_dir=None)
    pdt.assert_frame_equal(cached[0], fresh[0])
    pdt.assert_frame_equal(cached[1], fresh[1])


@pytest.mark.parametrize("change", ["one score", "baseline", "variant order", "one question fewer", "answerable"])
def test_any_change_to_the_inputs_changes_the_key(runs, change):
    before = statistics_key(runs, "hybrid")
    changed, baseline = {k: f.copy() for k, f in runs.items()}, "hybrid"
    if change == "one score":
        changed["bm25"].loc[7, "mrr"] += 0.25
    elif change == "baseline":
        baseline = "pg-dense"
    elif change == "variant order":
        changed = dict(reversed(list(changed.items())))
    elif change == "one question fewer":
        changed["pg-dense"] = changed["pg-dense"].iloc[:-1]
    else:
        changed["hybrid"].loc[3, "answerable"] = False
    assert statistics_key(changed, baseline) != before


def test_columns_the_statistics_do_not_read_leave_the_key_alone(runs):
    with_latency = {k: f.assign(latency_ms=np.arange(len(f)) * 1.5) for k, f in runs.items()}
    assert statistics_key(with_latency, "hybrid") == statistics_key(runs, "hybrid")


def test_a_damaged_cache_entry_is_recomputed(tmp_path, runs):
    intervals, _ = run_statistics(runs, "hybrid", cache_dir=tmp_path)
    (entry,) = tmp_path.glob("*.pkl")
    entry.write_bytes(b"\x80\x05 not a pickle")
    again, _ = run_statistics(runs, "hybrid", cache_dir=tmp_path)
    pdt.assert_frame_equal(again, intervals)


def _verdict(runs):
    intervals, comparison = run_statistics(runs, "hybrid")
    summary = pd.DataFrame({"variant": list(runs), **{f"hit@{k}": [0.4 + 0.1 * i for i in range(3)]
                                                      for k in (1, 3, 5, 10, 20)}, "mrr": [0.5, 0.6, 0.7]})
    return types.SimpleNamespace(summary=summary, intervals=intervals, baseline_comparison=comparison)


def test_plots_are_copied_from_the_cache_when_their_tables_are_unchanged(tmp_path, runs, monkeypatch):
    verdict = _verdict(runs)
    first = render_plots(verdict, tmp_path / "a", cache_dir=tmp_path / "cache")
    assert set(first) == {"hit_at_k", "ndcg_intervals", "baseline_deltas"}

    def boom(*args, **kwargs):
        raise AssertionError("plot redrawn although its table did not change")

    for name in ("hit_at_k_curves", "metric_bars", "baseline_deltas"):
        monkeypatch.setattr(plotting, name, boom)
    second = render_plots(verdict, tmp_path / "b", cache_dir=tmp_path / "cache")
    for name, path in first.items():
        assert open(second[name], "rb").read() == open(path, "rb").read()


def test_a_changed_table_redraws_only_its_plot(tmp_path, runs, monkeypatch):
    verdict = _verdict(runs)
    render_plots(verdict, tmp_path / "a", cache_dir=tmp_path / "cache")
    drawn = []
    original = plotting.hit_at_k_curves
    monkeypatch.setattr(plotting, "hit_at_k_curves", lambda *a, **k: drawn.append("hit_at_k") or original(*a, **k))
    monkeypatch.setattr(plotting, "metric_bars", lambda *a, **k: drawn.append("ndcg_intervals"))
    verdict.summary.loc[0, "hit@5"] = 0.99
    render_plots(verdict, tmp_path / "b", cache_dir=tmp_path / "cache")
    assert drawn == ["hit_at_k"]
