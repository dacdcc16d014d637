"""The Pareto plot of (index, variant) pairs: quality against p95 latency, or against storage.

Drawn like the report's other plots (`eval_pipeline.reporting.plots`: its fixed style, DPI and
atomic, byte-for-byte deterministic PNG writer), from the frame of pairs
`eval_pipeline.recommend` reads. A cache of drawn plots must key on both files'
source (`SOURCES`), since this one draws with the other's style and writer.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

import matplotlib
import numpy as np
import pandas as pd
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from eval_pipeline.recommend import BYTES_PER_MB, Recommendation, pair_label, pareto_front
from eval_pipeline.reporting.plots import _DPI, _STYLE, _require, _save

__all__ = ["SOURCES", "pareto_plot"]

SOURCES = (Path(__file__).resolve(), Path(__file__).resolve().parent / "plots.py")
# x column -> (axis label, name in the title, scale: the column's unit per shown unit)
AXES = {"p95_ms": ("p95 query latency (ms)", "p95 latency", 1.0),
        "storage_bytes": ("storage, table + index (MB)", "storage", BYTES_PER_MB)}
_FRONT = "#222222"
_BUDGET = "#c0392b"
_LOG_SPAN = 20.0  # a logarithmic x axis when the largest value is this many times the smallest


def pareto_plot(frame: pd.DataFrame, path: str | os.PathLike[str], x: str = "p95_ms", *,
                recommendation: Recommendation | None = None, metric: str = "quality") -> Path:
    """Every measured pair as a point (quality against `x`: `p95_ms` or `storage_bytes`), its
    interval as an error bar, coloured by index; the Pareto front (`pareto_front`) as a step
    line with its pairs labelled. With `recommendation`, its budget on `x` is a dashed line,
    the pair recommended within the budgets a star and the best overall a ring. Pairs missing
    `x` or the quality are left out, and counted in the title. Returns the path written."""
    if x not in AXES:
        raise ValueError(f"x must be one of {', '.join(AXES)}, got {x!r}")
    _require(frame, "pairs", ["index", "variant", "quality", x])
    front = pareto_front(frame, x)  # also checks the frame
    data = frame.assign(quality=pd.to_numeric(frame["quality"], errors="coerce"),
                        **{x: pd.to_numeric(frame[x], errors="coerce")})
    measured = data[data["quality"].notna() & data[x].notna()].sort_values(["index", "variant"], kind="stable")
    if measured.empty:
        raise ValueError(f"no pair has both its quality and {x} measured: nothing to plot")
    label, short, scale = AXES[x]
    unmeasured = len(data) - len(measured)
    indexes = sorted(measured["index"].astype(str).unique())
    colours = {name: matplotlib.colormaps["tab10"](k % 10) for k, name in enumerate(indexes)}
    with matplotlib.rc_context(_STYLE):
        fig = Figure(figsize=(7.5, 5.0), dpi=_DPI)
        FigureCanvasAgg(fig)
        ax = fig.add_subplot()
        for name in indexes:
            rows = measured[measured["index"] == name]
            xs = rows[x].to_numpy(dtype="float64") / scale
            ys = rows["quality"].to_numpy(dtype="float64")
            ax.scatter(xs, ys, color=colours[name], s=28, label=name, zorder=3)
            if {"quality_low", "quality_high"} <= set(rows.columns):
                low = pd.to_numeric(rows["quality_low"], errors="coerce").to_numpy(dtype="float64")
                high = pd.to_numeric(rows["quality_high"], errors="coerce").to_numpy(dtype="float64")
                has = ~(np.isnan(low) | np.isnan(high))
                if has.any():
                    ax.errorbar(xs[has], ys[has], yerr=[(ys - low)[has].clip(min=0), (high - ys)[has].clip(min=0)],
                                fmt="none", ecolor=colours[name], alpha=0.5, capsize=2, zorder=2)
        fx = front[x].to_numpy(dtype="float64") / scale
        fy = front["quality"].to_numpy(dtype="float64")
        ax.step(fx, fy, where="post", color=_FRONT, linewidth=1.2, label="Pareto front", zorder=4)
        last = len(fx) - 1  # the rightmost front pair is labelled to its left, inside the axes
        for k, (xi, yi, i, v) in enumerate(zip(fx, fy, front["index"], front["variant"])):
            # staggered heights: neighbouring front pairs' labels do not print over each other
            ax.annotate(pair_label(i, v), (xi, yi), xytext=(-6 if k == last and last else 4, 4 + 9 * (k % 3)),
                        textcoords="offset points", ha="right" if k == last and last else "left", fontsize=7,
                        zorder=5)
        if recommendation is not None:
            _mark(ax, recommendation, x, scale)
        values = measured[x].to_numpy(dtype="float64") / scale
        positive = values[values > 0]
        if len(positive) == len(values) and positive.max() / positive.min() >= _LOG_SPAN:
            ax.set_xscale("log")
        ax.set_xlabel(label)
        ax.set_ylabel(f"{metric} (mean, interval)")
        note = f" ({unmeasured} pair(s) not measured, not shown)" if unmeasured else ""
        ax.set_title(f"{metric} against {short}: Pareto front{note}")
        ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.13), ncol=3, frameon=False)
        return _save(fig, path)


def _mark(ax, rec: Recommendation, x: str, scale: float) -> None:
    budget = {"p95_ms": rec.budgets.max_p95_ms, "storage_bytes": rec.budgets.max_storage_bytes}[x]
    if budget is not None:
        ax.axvline(budget / scale, color=_BUDGET, linestyle="--", linewidth=1, label="budget", zorder=1)
    if rec.budgets.min_quality is not None:
        ax.axhline(rec.budgets.min_quality, color=_BUDGET, linestyle=":", linewidth=1, label="minimum quality",
                   zorder=1)
    for pick, marker, name in ((rec.within_budget, "*", "recommended (within budgets)"),
                               (rec.best_overall, "o", "best overall")):
        value = None if pick is None else getattr(pick, x)
        if pick is None or value is None or math.isnan(value):
            continue
        face = "gold" if marker == "*" else "none"
        ax.scatter([value / scale], [pick.quality], marker=marker, s=220 if marker == "*" else 160, facecolors=face,
                   edgecolors="black", linewidths=1.2, label=name, zorder=6)
