"""PNG plots for the report: hit@k curves, metric bars with intervals, deltas vs baseline.

Rendering uses matplotlib's object API (``Figure`` + the Agg canvas) rather than
``pyplot``: no display is needed, the process-wide pyplot backend and figure registry are
left alone (a Dagster worker or a notebook importing this module keeps its own), and
there is no global figure to leak; each figure is released when its function returns.

Output is byte-for-byte deterministic for the same inputs and matplotlib version: fixed
size, DPI and style, and ``metadata={"Software": None}`` so no version or timestamp is
embedded. Files are written atomically (temp file + rename), so a reader never sees half
a PNG. Every function returns the path it wrote.
"""

from __future__ import annotations

import io
import math
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import matplotlib
import numpy as np
import pandas as pd
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from eval_pipeline.common.atomic import atomic_write_bytes
from eval_pipeline.metrics.retrieval import DEFAULT_KS, PRIMARY_METRIC
from eval_pipeline.metrics.selective import losses, risk_coverage, risk_coverage_points

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.typing import RcKeyType

__all__ = ["baseline_deltas", "hit_at_k_curves", "metric_bars", "risk_coverage_curves"]

_DPI = 120
# Fixed style so a user's matplotlibrc cannot change the bytes between two renders.
_STYLE: dict[RcKeyType, Any] = {
    "font.size": 10,
    "axes.titlesize": 11,
    "axes.labelsize": 10,
    "xtick.labelsize": 9,
    "ytick.labelsize": 9,
    "legend.fontsize": 9,
    "axes.grid": True,
    "grid.alpha": 0.3,
}
# Colour says direction only when the difference is significant: green better, red worse.
_BETTER = "#2e8b57"
_WORSE = "#c0392b"
_NOT_SIGNIFICANT = "#9aa5a6"


def _require(df: object, name: str, columns: list[str]) -> pd.DataFrame:
    if not isinstance(df, pd.DataFrame):
        raise ValueError(f"{name} must be a DataFrame, got {type(df).__name__}")
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise ValueError(f"{name} is missing column(s) {missing}; has {list(df.columns)}")
    if df.empty:
        raise ValueError(f"{name} is empty: nothing to plot")
    return df


def _rows_for(df: pd.DataFrame, name: str, metric: object) -> pd.DataFrame:
    if not isinstance(metric, str) or not metric:
        raise ValueError(f"metric must be a metric name, got {metric!r}")
    rows = df[df["metric"] == metric]
    if rows.empty:
        raise ValueError(f"{name} has no rows for metric {metric!r}; metrics present: {sorted(df['metric'].unique())}")
    return rows


MAX_WIDTH_INCHES = 12.0  # wider plots are cut off in the UI's markdown dialog (30 pairs drew 2,400 px)
_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "<", ">", "h")
_LINESTYLES = ("-", "--", "-.", ":")


def _figure(n_items: int) -> tuple[Figure, Axes]:
    # Grow with the number of variants so labels stay readable, up to a width a dialog shows.
    fig = Figure(figsize=(min(MAX_WIDTH_INCHES, max(6.0, 1.0 + 0.8 * n_items)), 4.5), dpi=_DPI)
    FigureCanvasAgg(fig)
    return fig, fig.add_subplot()


def _save(fig: Figure, path: str | os.PathLike[str]) -> Path:
    """Render to memory, then write atomically; the figure is cleared afterwards."""
    path = Path(path)
    buf = io.BytesIO()
    try:
        fig.savefig(buf, format="png", dpi=_DPI, metadata={"Software": None}, bbox_inches="tight")
    finally:
        fig.clear()
    atomic_write_bytes(path, buf.getvalue())
    return path


def _rotate(ax: Axes, labels: list[str]) -> None:
    long = max((len(s) for s in labels), default=0) > 8 or len(labels) > 4
    crowded = len(labels) > 14  # the width is capped: many labels stand upright, smaller
    ax.set_xticks(range(len(labels)), labels, rotation=90 if crowded else 30 if long else 0,
                  ha="center" if crowded or not long else "right", fontsize=7 if crowded else None)


def hit_at_k_curves(summary: pd.DataFrame, path: str | os.PathLike[str]) -> Path:
    """hit@k against k (1, 3, 5, 10, 20), one line per variant.

    ``summary`` is :func:`eval_pipeline.scoring.variant.summarize` output (``variant`` and
    ``hit@k`` columns; ks missing from it are left out, at least one is required). The x
    axis is logarithmic so the top ranks, where users look, are not squeezed together. Lines
    that coincide stay visible: each variant has its own marker and dash and a small offset
    along k, and the legend sits outside the axes.
    """
    _require(summary, "summary", ["variant"])
    ks = [k for k in DEFAULT_KS if f"hit@{k}" in summary.columns]
    if not ks:
        raise ValueError(f"summary has no hit@k columns (expected some of {[f'hit@{k}' for k in DEFAULT_KS]})")
    with matplotlib.rc_context(_STYLE):
        fig, ax = _figure(0)
        n = len(summary)
        for i, (_, row) in enumerate(summary.iterrows()):
            values = [float(row[f"hit@{k}"]) for k in ks]
            shift = 1.0 + 0.025 * (i - (n - 1) / 2)  # a few percent along the log axis: no line hides another
            ax.plot([k * shift for k in ks], values, marker=_MARKERS[i % len(_MARKERS)],
                    linestyle=_LINESTYLES[(i // len(_MARKERS)) % len(_LINESTYLES)], markersize=5,
                    label=str(row["variant"]))
        ax.set_xscale("log")
        ax.set_xticks(ks, [str(k) for k in ks])
        ax.minorticks_off()
        ax.set_ylim(0, 1.02)
        ax.set_xlabel("k (cutoff rank)")
        ax.set_ylabel("hit@k (share of answerable questions)")
        ax.set_title("hit@k by variant")
        ax.legend(loc="center left", bbox_to_anchor=(1.01, 0.5), frameon=False)
        return _save(fig, path)


def metric_bars(intervals: pd.DataFrame, path: str | os.PathLike[str], metric: str = PRIMARY_METRIC) -> Path:
    """One bar per variant for ``metric`` with its bootstrap interval as an error bar.

    ``intervals`` is :func:`eval_pipeline.metrics.statistics.metric_intervals` output (``variant,
    metric, mean, low, high``). Variants keep the order they have in ``intervals``. A NaN
    bound draws no error bar on that side.
    """
    df = _rows_for(_require(intervals, "intervals", ["variant", "metric", "mean", "low", "high"]), "intervals", metric)
    labels = [str(v) for v in df["variant"]]
    means = df["mean"].astype("float64").to_numpy()
    lower = np.nan_to_num(means - df["low"].astype("float64").to_numpy(), nan=0.0).clip(min=0)
    upper = np.nan_to_num(df["high"].astype("float64").to_numpy() - means, nan=0.0).clip(min=0)
    with matplotlib.rc_context(_STYLE):
        fig, ax = _figure(len(labels))
        x = np.arange(len(labels))
        ax.bar(x, np.nan_to_num(means), color="#4c72b0", width=0.6)
        ax.errorbar(x, np.nan_to_num(means), yerr=[lower, upper], fmt="none", ecolor="black", capsize=4)
        tops = np.where(np.isnan(means), 0.0, np.nan_to_num(means) + upper)
        for xi, m, top in zip(x, means, tops):
            if not math.isnan(m):
                ax.annotate(f"{m:.3f}", (xi, top), xytext=(0, 4), textcoords="offset points", ha="center", fontsize=8)
        _rotate(ax, labels)
        ax.set_ylim(0, 1.05)
        ax.set_ylabel(f"{metric} (mean, bootstrap CI)")
        ax.set_title(f"{metric} by variant")
        return _save(fig, path)


def baseline_deltas(comparison: pd.DataFrame, path: str | os.PathLike[str], metric: str = PRIMARY_METRIC) -> Path:
    """Each variant's difference from the baseline on ``metric``, with its paired interval.

    ``comparison`` is :func:`eval_pipeline.metrics.statistics.compare_to_baseline` output.
    Significant differences (Holm-adjusted) are marked ``*`` and coloured by direction
    (green better, red worse); others are grey. The zero line is the baseline, so an
    interval crossing it means "no detectable change".
    """
    df = _rows_for(
        _require(comparison, "comparison", ["variant", "metric", "delta", "ci_low", "ci_high", "significant"]),
        "comparison",
        metric,
    )
    labels = [str(v) + (" *" if bool(s) else "") for v, s in zip(df["variant"], df["significant"])]
    deltas = df["delta"].astype("float64").to_numpy()
    lower = np.nan_to_num(deltas - df["ci_low"].astype("float64").to_numpy(), nan=0.0).clip(min=0)
    upper = np.nan_to_num(df["ci_high"].astype("float64").to_numpy() - deltas, nan=0.0).clip(min=0)
    colors = [
        (_BETTER if d > 0 else _WORSE) if bool(s) and not math.isnan(d) else _NOT_SIGNIFICANT
        for d, s in zip(deltas, df["significant"])
    ]
    baseline = str(df["baseline"].iloc[0]) if "baseline" in df.columns else "baseline"
    with matplotlib.rc_context(_STYLE):
        fig, ax = _figure(len(labels))
        x = np.arange(len(labels))
        ax.axhline(0.0, color="black", linewidth=1)
        ax.bar(x, np.nan_to_num(deltas), color=colors, width=0.6)
        ax.errorbar(x, np.nan_to_num(deltas), yerr=[lower, upper], fmt="none", ecolor="black", capsize=4)
        _rotate(ax, labels)
        ax.set_ylabel(f"Δ {metric} vs {baseline} (paired bootstrap CI)")
        ax.set_title(f"{metric}: difference from baseline {baseline!r} (* = significant, Holm)")
        return _save(fig, path)


def risk_coverage_curves(per_query: pd.DataFrame, path: str | os.PathLike[str]) -> Path:
    """Risk against coverage, one line per variant (eval_pipeline.metrics.selective): answering
    its most confident questions first, the share of answered questions that are wrong. The
    legend gives each curve's area (AURC, lower is better). ``per_query`` holds every variant's
    per-question rows with ``confidence``."""
    _require(per_query, "per_query", ["variant", "answerable", "errored", "confidence"])
    with matplotlib.rc_context(_STYLE):
        fig, ax = _figure(0)
        for variant, frame in per_query.groupby("variant", sort=False):
            loss = losses(frame)
            confidence = frame["confidence"].astype("float64").to_numpy()
            points = risk_coverage_points(confidence, loss)
            area = risk_coverage(confidence, loss)
            ax.step([0.0] + [c for c, _ in points], [points[0][1]] + [r for _, r in points], where="post",
                    label=f"{variant} (AURC {area:.3f})")
        ax.set_xlim(0, 1.0)
        ax.set_ylim(0, 1.02)
        ax.set_xlabel("coverage (share of questions answered, most confident first)")
        ax.set_ylabel("risk (share of answered questions that are wrong)")
        ax.set_title("risk-coverage by variant")
        ax.legend(loc="upper left", frameon=False, fontsize=8)
        return _save(fig, path)
