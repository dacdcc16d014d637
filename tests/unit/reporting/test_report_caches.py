"""The report's caches: statistics and plots are reused only when their inputs are unchanged.

A re-run with nothing changed must not redo 10,000-permutation tests or redraw plots
(bench/warm_rerun.py), but any change to a score, the baseline or the variants must.

The expensive functions (eval_pipeline.metrics.statistics.metric_intervals / compare_to_baseline and
the three functions of eval_pipeline.reporting.plots) are wrapped to count their calls, so each test
says how many computations a call did: a cache that is never read, never written or keyed on
the wrong thing shows up as a wrong count, not as equal-looking output.
"""

from __future__ import annotations

import pickle
import types
from collections import Counter

import numpy as np
import pandas as pd
import pandas.testing as pdt
import pytest

import eval_pipeline.metrics.statistics as statistics
import eval_pipeline.reporting.plots as plotting
from eval_pipeline.common.keyed_pickle import write_keyed
from eval_pipeline.verdict.retrieval import run_statistics, statistics_key
from eval_pipeline.reporting.report import render_plots

METRICS = ("ndcg@10", "mrr", "hit@1", "hit@5")
PLOT_FUNCTIONS = {"hit_at_k": "hit_at_k_curves", "ndcg_intervals": "metric_bars", "baseline_deltas": "baseline_deltas"}


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


def _copy(runs):
    return {k: f.copy() for k, f in runs.items()}


@pytest.fixture
def stats_calls(monkeypatch):
    """Counts calls of the two expensive statistics functions (still computing for real)."""
    calls = Counter()
    for name in ("metric_intervals", "compare_to_baseline"):
        original = getattr(statistics, name)

        def counted(*args, _name=name, _original=original, **kwargs):
            calls[_name] += 1
            return _original(*args, **kwargs)

        monkeypatch.setattr(statistics, name, counted)
    return calls


@pytest.fixture
def plot_calls(monkeypatch):
    """Counts calls of each plotting function (still drawing for real)."""
    calls = Counter()
    for function in PLOT_FUNCTIONS.values():
        original = getattr(plotting, function)

        def counted(*args, _name=function, _original=original, **kwargs):
            calls[_name] += 1
            return _original(*args, **kwargs)

        monkeypatch.setattr(plotting, function, counted)
    return calls


# --- statistics cache -----------------------------------------------------------------


def test_without_a_cache_every_call_computes(tmp_path, runs, stats_calls):
    # the counters see real computations: this is what a cache must save
    run_statistics(runs, "hybrid", cache_dir=None)
    run_statistics(runs, "hybrid", cache_dir=None)
    assert stats_calls == {"metric_intervals": 2, "compare_to_baseline": 2}
    assert list(tmp_path.iterdir()) == []


def test_statistics_are_reused_when_the_scores_are_unchanged(tmp_path, runs, stats_calls):
    intervals, comparison = run_statistics(runs, "hybrid", cache_dir=tmp_path)
    assert stats_calls == {"metric_intervals": 1, "compare_to_baseline": 1}
    assert len(intervals) == 3 * 4 and len(comparison) == 2 * 4
    # one entry, named by the key
    assert [p.name for p in tmp_path.iterdir()] == [f"{statistics_key(runs, 'hybrid')}.pkl"]

    again = run_statistics(_copy(runs), "hybrid", cache_dir=tmp_path)  # equal frames, not the same objects
    assert stats_calls == {"metric_intervals": 1, "compare_to_baseline": 1}  # nothing recomputed
    pdt.assert_frame_equal(again[0], intervals)
    pdt.assert_frame_equal(again[1], comparison)
    assert len(list(tmp_path.iterdir())) == 1


def test_the_cache_entry_is_what_is_returned(tmp_path, runs, stats_calls):
    """The second call really reads the file: a (planted) different entry under the same key comes back."""
    run_statistics(runs, "hybrid", cache_dir=tmp_path)
    (entry,) = tmp_path.glob("*.pkl")
    planted = (pd.DataFrame({"marker": [1]}), pd.DataFrame({"marker": [2]}))
    write_keyed(entry, entry.stem, planted)
    intervals, comparison = run_statistics(runs, "hybrid", cache_dir=tmp_path)
    pdt.assert_frame_equal(intervals, planted[0])
    pdt.assert_frame_equal(comparison, planted[1])
    assert stats_calls["metric_intervals"] == 1


def test_an_entry_for_another_key_is_not_used(tmp_path, runs, stats_calls):
    """A file copied or renamed into another entry's place carries its own key: recomputed."""
    run_statistics(runs, "hybrid", cache_dir=tmp_path)
    (entry,) = tmp_path.glob("*.pkl")
    write_keyed(entry, "0" * 64, (pd.DataFrame({"marker": [1]}), pd.DataFrame()))
    intervals, _ = run_statistics(runs, "hybrid", cache_dir=tmp_path)
    assert "marker" not in intervals and stats_calls["metric_intervals"] == 2


def test_the_cached_statistics_equal_a_fresh_computation(tmp_path, runs):
    run_statistics(runs, "hybrid", cache_dir=tmp_path)
    cached = run_statistics(runs, "hybrid", cache_dir=tmp_path)
    fresh = run_statistics(runs, "hybrid", cache_dir=None)
    pdt.assert_frame_equal(cached[0], fresh[0])
    pdt.assert_frame_equal(cached[1], fresh[1])


def _change(runs, change):
    changed, baseline = _copy(runs), "hybrid"
    if change == "one score":
        changed["bm25"].loc[7, "mrr"] += 0.25
    elif change == "baseline":
        baseline = "pg-dense"
    elif change == "variant order":
        changed = dict(reversed(list(changed.items())))
    elif change == "one question fewer":
        changed["pg-dense"] = changed["pg-dense"].iloc[:-1]
    elif change == "a variant fewer":
        del changed["bm25"]
    elif change == "answerable":
        changed["hybrid"].loc[3, "answerable"] = False
    # the two below keep every variant on the same questions, so the comparison can be computed
    elif change == "one question fewer everywhere":
        changed = {k: f.iloc[:-1] for k, f in changed.items()}
    elif change == "one question unanswerable everywhere":
        for frame in changed.values():
            frame.loc[3, "answerable"] = False
    else:
        raise AssertionError(change)
    return changed, baseline


CHANGES = ["one score", "baseline", "variant order", "one question fewer", "a variant fewer", "answerable"]


@pytest.mark.parametrize("change", CHANGES + ["one question fewer everywhere", "one question unanswerable everywhere"])
def test_any_change_to_the_inputs_changes_the_key(runs, change):
    changed, baseline = _change(runs, change)
    assert statistics_key(changed, baseline) != statistics_key(runs, "hybrid")


COMPUTABLE_CHANGES = ["one score", "baseline", "variant order", "a variant fewer", "one question fewer everywhere",
                      "one question unanswerable everywhere"]


@pytest.mark.parametrize("change", COMPUTABLE_CHANGES)
def test_any_change_to_the_inputs_recomputes(tmp_path, runs, stats_calls, change):
    run_statistics(runs, "hybrid", cache_dir=tmp_path)
    changed, baseline = _change(runs, change)
    intervals, comparison = run_statistics(changed, baseline, cache_dir=tmp_path)
    assert stats_calls == {"metric_intervals": 2, "compare_to_baseline": 2}
    assert len(list(tmp_path.glob("*.pkl"))) == 2  # a new entry beside the old one
    fresh = run_statistics(changed, baseline, cache_dir=None)
    pdt.assert_frame_equal(intervals, fresh[0])
    pdt.assert_frame_equal(comparison, fresh[1])


def test_a_changed_score_gives_the_new_statistics_not_the_cached_ones(tmp_path, runs):
    before, _ = run_statistics(runs, "hybrid", cache_dir=tmp_path)
    changed = _copy(runs)
    changed["bm25"]["mrr"] = 0.0
    after, _ = run_statistics(changed, "hybrid", cache_dir=tmp_path)
    row = lambda frame: frame[(frame["variant"] == "bm25") & (frame["metric"] == "mrr")].iloc[0]  # noqa: E731
    assert row(before)["mean"] > 0
    assert row(after)["mean"] == 0.0


def test_columns_the_statistics_do_not_read_leave_the_key_alone(tmp_path, runs, stats_calls):
    with_latency = {k: f.assign(latency_ms=np.arange(len(f)) * 1.5) for k, f in runs.items()}
    assert statistics_key(with_latency, "hybrid") == statistics_key(runs, "hybrid")
    run_statistics(runs, "hybrid", cache_dir=tmp_path)
    run_statistics(with_latency, "hybrid", cache_dir=tmp_path)
    assert stats_calls["metric_intervals"] == 1


@pytest.mark.parametrize("damage", [b"\x80\x05 not a pickle", b"", b"\x80"])
def test_a_damaged_cache_entry_is_recomputed_and_repaired(tmp_path, runs, stats_calls, damage):
    intervals, comparison = run_statistics(runs, "hybrid", cache_dir=tmp_path)
    (entry,) = tmp_path.glob("*.pkl")
    entry.write_bytes(damage)
    again = run_statistics(runs, "hybrid", cache_dir=tmp_path)
    assert stats_calls == {"metric_intervals": 2, "compare_to_baseline": 2}  # recomputed, not raised
    pdt.assert_frame_equal(again[0], intervals)
    pdt.assert_frame_equal(again[1], comparison)
    # the entry was overwritten with a good one: the next call reads it
    stored_key, reloaded = pickle.loads(entry.read_bytes())
    assert stored_key == entry.stem
    pdt.assert_frame_equal(reloaded[0], intervals)
    run_statistics(runs, "hybrid", cache_dir=tmp_path)
    assert stats_calls["metric_intervals"] == 2


# --- plot cache -----------------------------------------------------------------------


def _verdict(runs):
    intervals, comparison = run_statistics(runs, "hybrid")
    summary = pd.DataFrame({"variant": list(runs), **{f"hit@{k}": [0.4 + 0.1 * i for i in range(3)]
                                                      for k in (1, 3, 5, 10, 20)}, "mrr": [0.5, 0.6, 0.7]})
    return types.SimpleNamespace(summary=summary, intervals=intervals, baseline_comparison=comparison)


@pytest.fixture
def verdict(runs):
    return _verdict(runs)


def test_without_a_plot_cache_every_render_draws(tmp_path, verdict, plot_calls):
    render_plots(verdict, tmp_path / "a")
    render_plots(verdict, tmp_path / "b")
    assert plot_calls == {f: 2 for f in PLOT_FUNCTIONS.values()}


def test_plots_are_copied_from_the_cache_when_their_tables_are_unchanged(tmp_path, verdict, plot_calls):
    first = render_plots(verdict, tmp_path / "a", cache_dir=tmp_path / "cache")
    assert set(first) == set(PLOT_FUNCTIONS)
    assert plot_calls == {f: 1 for f in PLOT_FUNCTIONS.values()}
    assert len(list((tmp_path / "cache").glob("*.png"))) == 3

    same = types.SimpleNamespace(summary=verdict.summary.copy(), intervals=verdict.intervals.copy(),
                                 baseline_comparison=verdict.baseline_comparison.copy())
    second = render_plots(same, tmp_path / "b", cache_dir=tmp_path / "cache")
    assert plot_calls == {f: 1 for f in PLOT_FUNCTIONS.values()}  # nothing redrawn
    for name, path in first.items():
        assert second[name] == str(tmp_path / "b" / f"{name}.png")
        with open(second[name], "rb") as got, open(path, "rb") as want:
            data = got.read()
            assert data == want.read()
        assert data.startswith(b"\x89PNG\r\n\x1a\n")


def test_the_cached_plot_is_what_is_copied(tmp_path, verdict, plot_calls):
    render_plots(verdict, tmp_path / "a", cache_dir=tmp_path / "cache")
    planted = b"\x89PNG\r\n\x1a\n planted " + b"IEND\xaeB`\x82"
    for entry in (tmp_path / "cache").glob("*.png"):
        entry.write_bytes(planted)
    second = render_plots(verdict, tmp_path / "b", cache_dir=tmp_path / "cache")
    assert all(open(p, "rb").read() == planted for p in second.values())


def test_a_truncated_cached_plot_is_drawn_again(tmp_path, verdict, plot_calls):
    render_plots(verdict, tmp_path / "a", cache_dir=tmp_path / "cache")
    for entry in (tmp_path / "cache").glob("*.png"):
        entry.write_bytes(entry.read_bytes()[:100])
    second = render_plots(verdict, tmp_path / "b", cache_dir=tmp_path / "cache")
    assert all(open(p, "rb").read().endswith(b"IEND\xaeB`\x82") for p in second.values())
    assert set(plot_calls.values()) == {2}


@pytest.mark.parametrize("table, plot", [("summary", "hit_at_k"), ("intervals", "ndcg_intervals"),
                                         ("baseline_comparison", "baseline_deltas")])
def test_a_changed_table_redraws_only_its_plot(tmp_path, verdict, plot_calls, table, plot):
    first = render_plots(verdict, tmp_path / "a", cache_dir=tmp_path / "cache")
    frame = getattr(verdict, table).copy()
    if table == "summary":
        frame.loc[0, "hit@5"] += 0.05
    else:  # the two other plots show ndcg@10 only: change a value they draw
        column = "mean" if table == "intervals" else "delta"
        (row,) = frame.index[(frame["metric"] == "ndcg@10") & (frame["variant"] == "bm25")]
        frame.loc[row, column] += 0.05
    changed = types.SimpleNamespace(**{**vars(verdict), table: frame})
    second = render_plots(changed, tmp_path / "b", cache_dir=tmp_path / "cache")
    expected = {f: 1 for f in PLOT_FUNCTIONS.values()}
    expected[PLOT_FUNCTIONS[plot]] = 2
    assert plot_calls == expected
    for name in PLOT_FUNCTIONS:
        same = open(first[name], "rb").read() == open(second[name], "rb").read()
        assert same == (name != plot), name


# The risk-coverage plot (drawn when the variants give a confidence) goes through the same cache: a
# warm run drew it again each time, importing matplotlib for it (1.1 s of an 18 s warm demo run).

def _per_query(confidence_shift: float = 0.0) -> pd.DataFrame:
    frames = []
    for i, variant in enumerate(("dense", "bm25")):
        frame = per_question(i)
        frame["variant"] = variant
        frame["hit@10"] = frame["hit@5"]
        frame["confidence"] = np.linspace(0.0, 1.0, len(frame)) + confidence_shift
        frames.append(frame)
    return pd.concat(frames, ignore_index=True)


@pytest.fixture
def risk_calls(monkeypatch):
    calls = []
    original = plotting.risk_coverage_curves
    monkeypatch.setattr(plotting, "risk_coverage_curves", lambda *a, **k: calls.append(1) or original(*a, **k))
    return calls


def test_the_risk_coverage_plot_is_cached_with_the_others(tmp_path, verdict, risk_calls):
    first = render_plots(verdict, tmp_path / "a", cache_dir=tmp_path / "cache", per_query=_per_query())
    assert list(first) == [*PLOT_FUNCTIONS, "risk_coverage"]
    second = render_plots(verdict, tmp_path / "b", cache_dir=tmp_path / "cache", per_query=_per_query())
    assert risk_calls == [1]
    assert open(second["risk_coverage"], "rb").read() == open(first["risk_coverage"], "rb").read()
    render_plots(verdict, tmp_path / "c", cache_dir=tmp_path / "cache", per_query=_per_query(0.5))
    assert risk_calls == [1, 1]  # other confidences: drawn again


def test_no_confidence_no_risk_coverage_plot(tmp_path, verdict, risk_calls):
    per_query = _per_query().drop(columns=["confidence"])
    assert "risk_coverage" not in render_plots(verdict, tmp_path / "a", per_query=per_query)
    assert risk_calls == []


def test_an_unwritable_cache_costs_the_cache_not_the_statistics(tmp_path, runs, stats_calls):
    """A state dir that cannot be written (a read-only mount, a full disk) costs the next run a
    recompute, never this run's verdict: the statistics are returned, as the audit's, the
    answer intervals' and the scored partitions' caches already did."""
    blocked = tmp_path / "not-a-dir"
    blocked.write_text("a file where the cache folder should be")
    intervals, comparison = run_statistics(runs, "hybrid", cache_dir=blocked)
    assert len(intervals) and len(comparison)
