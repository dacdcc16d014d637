"""The plots stay readable (issue #28, item 7): coinciding hit@k lines stay visible (a marker,
a dash and a small offset each, the legend outside the axes), and a plot of 30 pairs is no
wider than the UI's markdown dialog shows."""

from __future__ import annotations

import pandas as pd
from PIL import Image

from eval_pipeline.reporting import plots
from eval_pipeline.reporting.plots import MAX_WIDTH_INCHES, hit_at_k_curves, metric_bars


def test_identical_hit_at_k_lines_are_drawn_apart_with_their_own_markers(tmp_path, monkeypatch):
    summary = pd.DataFrame([{"variant": f"v{i}", "hit@1": 0.5, "hit@3": 0.7, "hit@5": 0.8, "hit@10": 0.9,
                             "hit@20": 0.95} for i in range(7)])
    drawn = []
    save = plots._save

    def keep(fig, path):
        ax = fig.axes[0]
        drawn.extend((tuple(line.get_xdata()), line.get_marker(), line.get_linestyle()) for line in ax.get_lines())
        legend = ax.get_legend()
        drawn.append(("legend anchored at", tuple(round(v, 2) for v in legend.get_bbox_to_anchor().bounds[:1])))
        return save(fig, path)

    monkeypatch.setattr(plots, "_save", keep)
    hit_at_k_curves(summary, tmp_path / "hit.png")
    lines = drawn[:-1]
    assert len(lines) == 7
    assert len({x for x, _, _ in lines}) == 7  # no two lines at the same x positions
    assert len({(m, ls) for _, m, ls in lines}) == 7  # each its own marker and dash


def test_thirty_pairs_fit_the_dialog(tmp_path):
    intervals = pd.DataFrame([{"variant": f"sre-w150-o20/hybrid-{i}", "metric": "ndcg@10", "mean": 0.7,
                               "low": 0.65, "high": 0.75} for i in range(30)])
    path = metric_bars(intervals, tmp_path / "bars.png", metric="ndcg@10")
    width, _ = Image.open(path).size
    assert width <= (MAX_WIDTH_INCHES + 1) * plots._DPI
