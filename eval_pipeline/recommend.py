"""Which (index, variant) pair to use: the Pareto fronts and the recommendation in the headline.

Pure functions over a frame of pairs, one row per (index, variant):

    index          the index's partition key (`minilm-w150-o20`)
    variant        the variant's partition key (`hybrid+mmr`)
    quality        the quality metric's mean (for example nDCG@10); larger is better
    quality_low    its interval's bounds (optional columns; shown, never judged on)
    quality_high
    p95_ms         the pair's p95 query latency in milliseconds
    p95_low        its interval's bounds, the run's measured noise on it (optional columns; a
    p95_high       difference inside them never decides: see below)
    storage_bytes  the index's table plus index size in bytes
    results_digest a digest of the pair's ranked documents for every question (optional; pairs
                   with the same digest returned identical results: one candidate)

NaN or None means *not measured*. A pair is never recommended on a measurement it lacks: the
best overall needs its quality, the best within budgets also each measurement a budget is set
on; and never below the minimum quality (compared with the mean, inclusive).

Budgets come from the variants file's `recommend:` section (`parse_budgets`), every setting
optional, each a finite number > 0, inclusive:

    recommend:
      max_p95_ms: 50        # p95 query latency, milliseconds
      max_storage_mb: 200   # table plus index, MB of 1,000,000 bytes
      min_quality: 0.5      # the quality metric's mean, in (0, 1]

Order, used by `recommend` and stated in every reason: higher quality first (qualities equal to
`QUALITY_DECIMALS` decimals are a tie: a mean computed in another order differs in its last
bits), then lower p95, then lower storage (a measured value before an unmeasured one), then the
pair's key order (index, then variant, as strings). The same order on the same numbers always
gives the same pick.

Noise never decides (the machines' timings vary 2.5x run to run). Among the pairs tied on
quality, pairs with identical results are one candidate (represented by the lower storage, then
key order; latency never splits them), and p95 decides only when the fastest candidate's p95
interval lies wholly below every other candidate's; otherwise the candidates are a tie on
latency too, broken by storage, then key order, and the pick and the headline say it was a tie.
Without intervals (the `p95_low`/`p95_high` columns absent or NaN) p95 decides as measured.

`pareto_front` gives the pairs no other pair beats on both axes (lower x, higher quality); pairs
at the same point are all kept, and each names the others (`tied_with`). The plot is
`eval_pipeline.reporting.pareto.pareto_plot`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from eval_pipeline.common.checks import is_finite

__all__ = [
    "QUALITY_DECIMALS",
    "Budgets",
    "Pick",
    "Recommendation",
    "headline",
    "pair_label",
    "pareto_front",
    "parse_budgets",
    "recommend",
]

PAIR_COLUMNS = ("index", "variant", "quality", "quality_low", "quality_high", "p95_ms", "p95_low", "p95_high",
                "storage_bytes", "results_digest")
REQUIRED_COLUMNS = ("index", "variant", "quality", "p95_ms", "storage_bytes")
_NUMERIC = ("quality", "quality_low", "quality_high", "p95_ms", "p95_low", "p95_high", "storage_bytes")
QUALITY_DECIMALS = 9
BYTES_PER_MB = 1_000_000
BUDGET_SETTINGS = ("max_p95_ms", "max_storage_mb", "min_quality")
SEPARATOR = " × "


def pair_label(index: str, variant: str) -> str:
    """`minilm-w150-o20 × hybrid+mmr`."""
    return f"{index}{SEPARATOR}{variant}"


@dataclass(frozen=True)
class Budgets:
    """What a recommended pair must stay within (None: no budget on it)."""

    max_p95_ms: float | None = None
    max_storage_bytes: float | None = None
    min_quality: float | None = None

    def __post_init__(self):
        for name in ("max_p95_ms", "max_storage_bytes", "min_quality"):
            value = getattr(self, name)
            if value is not None and (not is_finite(value) or value <= 0):
                raise ValueError(f"{name} must be a finite number > 0 (or None for no budget), got {value!r}")

    def kwargs(self) -> dict[str, float | None]:
        """The keyword arguments of `recommend`."""
        return {"max_p95_ms": self.max_p95_ms, "max_storage_bytes": self.max_storage_bytes,
                "min_quality": self.min_quality}

    @property
    def any(self) -> bool:
        return any(v is not None for v in self.kwargs().values())

    def describe(self, metric: str = "quality") -> str:
        """`p95 ≤ 50 ms, storage ≤ 200.0 MB, nDCG@10 ≥ 0.5`, or `no budgets`."""
        parts = []
        if self.max_p95_ms is not None:
            parts.append(f"p95 ≤ {_ms(self.max_p95_ms)}")
        if self.max_storage_bytes is not None:
            parts.append(f"storage ≤ {_size(self.max_storage_bytes)}")
        if self.min_quality is not None:
            parts.append(f"{metric} ≥ {self.min_quality:g}")
        return ", ".join(parts) or "no budgets"


@dataclass(frozen=True)
class Pick:
    """A recommended pair, its numbers and why it was chosen."""

    index: str
    variant: str
    quality: float
    quality_low: float | None
    quality_high: float | None
    p95_ms: float | None
    storage_bytes: float | None
    reason: str
    identical: tuple[str, ...] = ()  # pairs whose results were identical: one candidate with this one
    tied_with: tuple[str, ...] = ()  # pairs it tied with on quality and (within noise) latency: chosen by key order

    @property
    def label(self) -> str:
        return pair_label(self.index, self.variant)

    @property
    def pair(self) -> tuple[str, str]:
        return (self.index, self.variant)


@dataclass(frozen=True)
class Recommendation:
    """The best pair within the budgets and the best overall (either None when no pair
    qualifies), each with the reason it was (or none was) chosen. `excluded` lists every pair
    not eligible within the budgets, with why, in key order."""

    within_budget: Pick | None
    best_overall: Pick | None
    within_reason: str
    overall_reason: str
    budgets: Budgets = field(default_factory=Budgets)
    metric: str = "quality"
    excluded: tuple[tuple[str, str], ...] = ()


# ---- the frame ----------------------------------------------------------------------------


def _pairs(frame: Any) -> pd.DataFrame:
    """A checked copy: required columns, one row per pair, numbers as float64 (NaN: not
    measured), sorted by key; the interval columns added (NaN) when absent."""
    if not isinstance(frame, pd.DataFrame):
        raise ValueError(f"pairs must be a DataFrame, got {type(frame).__name__}")
    missing = [c for c in REQUIRED_COLUMNS if c not in frame.columns]
    if missing:
        raise ValueError(f"pairs are missing column(s) {missing}; has {list(frame.columns)}")
    df = frame.copy()
    for column in ("quality_low", "quality_high", "p95_low", "p95_high"):
        if column not in df.columns:
            df[column] = np.nan
    if "results_digest" not in df.columns:
        df["results_digest"] = None
    df["results_digest"] = [d if isinstance(d, str) and d else None for d in df["results_digest"]]
    for column in ("index", "variant"):
        bad = [v for v in df[column] if not isinstance(v, str) or not v]
        if bad:
            raise ValueError(f"pairs column {column!r} must hold non-empty strings (partition keys), got {bad[0]!r}")
    for column in _NUMERIC:
        try:
            values = pd.to_numeric(df[column].astype(object).where(df[column].notna(), np.nan), errors="raise")
        except (TypeError, ValueError) as exc:
            raise ValueError(f"pairs column {column!r} must hold numbers (NaN or None: not measured): {exc}") from None
        if values.dtype == bool:
            raise ValueError(f"pairs column {column!r} must hold numbers, got booleans")
        values = values.astype("float64")
        if np.isinf(values).any():
            raise ValueError(f"pairs column {column!r} holds an infinite value: a measurement is finite, or NaN "
                             "when not measured")
        if column in ("p95_ms", "p95_low", "p95_high", "storage_bytes") and (values < 0).any():
            raise ValueError(f"pairs column {column!r} holds a negative value")
        df[column] = values
    duplicated = df.duplicated(["index", "variant"], keep=False)
    if duplicated.any():
        first = df[duplicated].iloc[0]
        raise ValueError(f"pairs hold {pair_label(first['index'], first['variant'])} more than once")
    return df.sort_values(["index", "variant"], kind="stable").reset_index(drop=True)


def _ranked(df: pd.DataFrame) -> pd.DataFrame:
    """`df` in the recommendation's order (see the module docstring)."""
    keyed = df.assign(_q=-df["quality"].round(QUALITY_DECIMALS),
                      _p_missing=df["p95_ms"].isna(), _s_missing=df["storage_bytes"].isna())
    return keyed.sort_values(["_q", "_p_missing", "p95_ms", "_s_missing", "storage_bytes", "index", "variant"],
                             kind="stable", na_position="last").drop(columns=["_q", "_p_missing", "_s_missing"])


# ---- the Pareto front ---------------------------------------------------------------------


def pareto_front(frame: pd.DataFrame, x: str, y: str = "quality") -> pd.DataFrame:
    """The pairs not dominated for minimising `x` and maximising `y`: no other pair has an `x`
    at most as large and a `y` at least as large, one of them strictly. Pairs missing `x` or
    `y` are left out. Pairs at the same point (`y` compared to `QUALITY_DECIMALS` decimals) are
    all on the front or all off it; `tied_with` names, for each, the others at its point (an
    empty tuple when none). Rows sorted by `x` ascending, then `y` descending, then key."""
    df = _pairs(frame)
    for column in (x, y):
        if column not in df.columns:
            raise ValueError(f"pairs have no column {column!r}; has {list(frame.columns)}")
        if column in ("index", "variant"):
            raise ValueError(f"{column!r} is a key, not a measurement")
    df = df.assign(**{x: pd.to_numeric(df[x], errors="coerce"), y: pd.to_numeric(df[y], errors="coerce")})
    measured = df[df[x].notna() & df[y].notna()].reset_index(drop=True)
    xs = measured[x].to_numpy(dtype="float64")
    ys = measured[y].to_numpy(dtype="float64").round(QUALITY_DECIMALS)
    keep = []
    for i in range(len(measured)):
        dominated = np.any((xs <= xs[i]) & (ys >= ys[i]) & ((xs < xs[i]) | (ys > ys[i])))
        keep.append(not dominated)
    front = measured[np.array(keep, dtype=bool)].copy() if len(measured) else measured.copy()
    labels = [pair_label(i, v) for i, v in zip(front["index"], front["variant"])]
    points = list(zip(front[x].to_numpy(dtype="float64"), front[y].to_numpy(dtype="float64").round(QUALITY_DECIMALS)))
    front["tied_with"] = [tuple(lab for lab, pt in zip(labels, points) if pt == point and lab != own)
                          for own, point in zip(labels, points)]
    front = front.assign(_y=-front[y].round(QUALITY_DECIMALS))
    return front.sort_values([x, "_y", "index", "variant"], kind="stable").drop(columns="_y").reset_index(drop=True)


# ---- the recommendation -------------------------------------------------------------------


def recommend(frame: pd.DataFrame, *, max_p95_ms: float | None = None, max_storage_bytes: float | None = None,
              min_quality: float | None = None, metric: str = "quality") -> Recommendation:
    """The best pair within the budgets and the best overall, in the order of the module
    docstring. A pair without a quality, below `min_quality`, or (for the budgeted pick)
    without a measurement a budget is set on or over a budget, is never recommended; when none
    qualifies the pick is None and the reason says why. `metric` names the quality in texts."""
    budgets = Budgets(max_p95_ms=max_p95_ms, max_storage_bytes=max_storage_bytes, min_quality=min_quality)
    df = _pairs(frame)
    if df.empty:
        reason = "no pairs were measured"
        return Recommendation(None, None, reason, reason, budgets, metric)

    overall_why = {}  # label -> why the pair cannot be the best overall
    budget_why = {}  # label -> why it is outside the budgets (it may still be the best overall)
    for row in df.itertuples(index=False):
        label = pair_label(row.index, row.variant)
        if math.isnan(row.quality):
            overall_why[label] = f"{metric} not measured"
        elif min_quality is not None and round(row.quality, QUALITY_DECIMALS) < min_quality:
            overall_why[label] = f"{metric} {row.quality:.3f} below the minimum {min_quality:g}"
        reasons = []
        if max_p95_ms is not None:
            if math.isnan(row.p95_ms):
                reasons.append("p95 not measured")
            elif row.p95_ms > max_p95_ms:
                reasons.append(f"p95 {_ms(row.p95_ms)} over the budget {_ms(max_p95_ms)}")
        if max_storage_bytes is not None:
            if math.isnan(row.storage_bytes):
                reasons.append("storage not measured")
            elif row.storage_bytes > max_storage_bytes:
                reasons.append(f"storage {_size(row.storage_bytes)} over the budget {_size(max_storage_bytes)}")
        if reasons:
            budget_why[label] = "; ".join(reasons)

    ranked = _ranked(df)
    labels = [pair_label(i, v) for i, v in zip(ranked["index"], ranked["variant"])]
    overall_rows = [k for k, lab in enumerate(labels) if lab not in overall_why]
    within_rows = [k for k in overall_rows if labels[k] not in budget_why]
    excluded = tuple((lab, "; ".join(r for r in (overall_why.get(lab), budget_why.get(lab)) if r))
                     for lab in sorted(set(overall_why) | set(budget_why), key=_label_key(df)))

    best_overall = within = None
    if overall_rows:
        pool = f"the {len(overall_rows)} measured pair(s)" + (f" reaching {metric} {min_quality:g}"
                                                                if min_quality is not None else "")
        best_overall = _pick(ranked, overall_rows, labels, pool, metric)
        overall_reason = best_overall.reason
        if best_overall.label in budget_why:
            overall_reason += f"; outside the budgets: {budget_why[best_overall.label]}"
    else:
        overall_reason = _nobody(df, metric, min_quality)
    if within_rows:
        pool = (f"the {len(within_rows)} pair(s) within the budgets ({budgets.describe(metric)})" if budgets.any
                else f"the {len(within_rows)} measured pair(s) (no budgets set)")
        within = _pick(ranked, within_rows, labels, pool, metric)
        within_reason = within.reason
    elif not overall_rows:
        within_reason = overall_reason
    else:
        within_reason = _none_within(overall_rows, labels, budget_why, budgets, metric)
    return Recommendation(within, best_overall, within_reason, overall_reason, budgets, metric, excluded)


def _label_key(df: pd.DataFrame):
    order = {pair_label(i, v): k for k, (i, v) in enumerate(zip(df["index"], df["variant"]))}
    return lambda label: order[label]


def _pick(ranked: pd.DataFrame, rows: list[int], labels: list[str], pool: str, metric: str) -> Pick:
    quality = round(float(ranked.iloc[rows[0]]["quality"]), QUALITY_DECIMALS)
    tied = [k for k in rows if round(float(ranked.iloc[k]["quality"]), QUALITY_DECIMALS) == quality]
    winner, how, tied_with = _break_tie(ranked, tied, labels)
    first = ranked.iloc[winner]
    identical = tuple(labels[k] for k in tied if k != winner and _same_results(first, ranked.iloc[k]))
    reason = f"highest {metric} ({_quality(first)}) of {pool}"
    if identical:
        reason += f"; identical results to {', '.join(identical)}: one candidate"
    others = [k for k in tied if k != winner and labels[k] not in identical]
    if others:
        reason += f"; tied on {metric} with {', '.join(labels[k] for k in others)}, chosen by {how}"
    runners = [k for k in rows if k not in tied]
    if not others and runners:
        runner = ranked.iloc[runners[0]]
        low = first["quality_low"]
        if not math.isnan(low) and runner["quality"] >= low:
            reason += (f"; the runner-up {labels[runners[0]]} ({float(runner['quality']):.3f}) lies within its "
                       "interval: the order between them is not settled")
    return Pick(index=str(first["index"]), variant=str(first["variant"]), quality=float(first["quality"]),
                quality_low=_opt(first["quality_low"]), quality_high=_opt(first["quality_high"]),
                p95_ms=_opt(first["p95_ms"]), storage_bytes=_opt(first["storage_bytes"]), reason=reason,
                identical=identical, tied_with=tied_with)


def _same_results(a: pd.Series, b: pd.Series) -> bool:
    return a["results_digest"] is not None and a["results_digest"] == b["results_digest"]


def _measured(row: pd.Series, column: str) -> bool:
    return not math.isnan(row[column])


def _static_key(row: pd.Series) -> tuple:
    """The order once latency cannot decide: a measured p95 first, then lower storage (measured
    first), then the key."""
    return (not _measured(row, "p95_ms"), not _measured(row, "storage_bytes"),
            row["storage_bytes"] if _measured(row, "storage_bytes") else 0.0, row["index"], row["variant"])


def _faster_beyond_noise(a: pd.Series, b: pd.Series) -> bool:
    """Whether `a`'s p95 is lower than `b`'s by more than the run's measured noise (their
    intervals apart); without intervals, whether it is lower. A measured p95 beats none."""
    if not _measured(a, "p95_ms"):
        return False
    if not _measured(b, "p95_ms"):
        return True
    if all(_measured(r, c) for r in (a, b) for c in ("p95_low", "p95_high")):
        return bool(a["p95_high"] < b["p95_low"])
    return bool(a["p95_ms"] < b["p95_ms"])


def _break_tie(ranked: pd.DataFrame, tied: list[int], labels: list[str]) -> tuple[int, str, tuple[str, ...]]:
    """(the winner among pairs tied on quality, the rule that chose it, the pairs it is a tie
    with): identical results are one candidate; p95 decides only beyond the measured noise (see
    the module docstring); then storage, then key order (a tie, named)."""
    if len(tied) == 1:
        return tied[0], "", ()
    candidates: list[int] = []  # one row per distinct results: its group's lowest storage, then key
    for k in sorted(tied, key=lambda k: _static_key(ranked.iloc[k])):
        if not any(_same_results(ranked.iloc[k], ranked.iloc[c]) for c in candidates):
            candidates.append(k)
    if len(candidates) == 1:
        return candidates[0], "", ()
    rows = {k: ranked.iloc[k] for k in candidates}
    for k in candidates:
        if all(_faster_beyond_noise(rows[k], rows[c]) for c in candidates if c != k):
            a = rows[k]
            timed = [rows[c] for c in candidates if c != k and _measured(rows[c], "p95_ms")]
            if not timed:
                other = rows[next(c for c in candidates if c != k)]
                return k, (f"its measured p95 ({_ms(a['p95_ms'])}; {pair_label(other['index'], other['variant'])} "
                           "has none)"), ()
            b = min(timed, key=lambda r: r["p95_ms"])
            noise = ", beyond its measured noise" if _measured(a, "p95_high") and _measured(b, "p95_low") else ""
            return k, f"lower p95 ({_ms(a['p95_ms'])} against {_ms(b['p95_ms'])}{noise})", ()
    winner, runner = rows[candidates[0]], rows[candidates[1]]
    p95s = [r["p95_ms"] for r in rows.values() if _measured(r, "p95_ms")]
    noise = (f": p95 {_ms(min(p95s))} against {_ms(max(p95s))} is within its measured noise"
             if len(p95s) > 1 and min(p95s) != max(p95s) else "")
    if _measured(winner, "storage_bytes") and _measured(runner, "storage_bytes") \
            and winner["storage_bytes"] != runner["storage_bytes"]:
        return candidates[0], (f"lower storage ({_size(winner['storage_bytes'])} against "
                               f"{_size(runner['storage_bytes'])}){noise}"), ()
    return candidates[0], f"key order (index, then variant){noise}", tuple(labels[c] for c in candidates[1:])


def _nobody(df: pd.DataFrame, metric: str, min_quality: float | None) -> str:
    measured = df[df["quality"].notna()]
    if measured.empty:
        return f"no pair has a measured {metric} ({len(df)} pair(s), none measured)"
    best = _ranked(measured).iloc[0]
    return (f"no pair reaches the minimum {metric} {min_quality:g} (best measured: "
            f"{pair_label(best['index'], best['variant'])} at {float(best['quality']):.3f})")


def _none_within(rows: list[int], labels: list[str], why: Mapping[str, str], budgets: Budgets, metric: str) -> str:
    counts: dict[str, int] = {}
    for k in rows:
        for part in why[labels[k]].split("; "):
            if part.startswith("p95"):
                kind = "p95 not measured" if part.startswith("p95 not") else "over the p95 budget"
            else:
                kind = "storage not measured" if part.startswith("storage not") else "over the storage budget"
            counts[kind] = counts.get(kind, 0) + 1
    listed = ", ".join(f"{n} {kind}" for kind, n in counts.items())
    return (f"no pair fits the budgets ({budgets.describe(metric)}): of the {len(rows)} pair(s) that qualify on "
            f"{metric}, {listed}")


# ---- the variants file's section ----------------------------------------------------------


def parse_budgets(raw: Any, source: str = "<config>") -> Budgets:
    """The variants file's `recommend:` section (None: no budgets). A ValueError names
    `source` (with the section's line when the strict loader recorded it) and the setting:
    an unknown setting (listing the valid ones), or a value that is not a finite number > 0
    (`min_quality` also at most 1)."""
    line = getattr(raw, "line", None)
    where = f"{source}:{line}" if line else source
    if raw is None:
        return Budgets()
    if not isinstance(raw, Mapping):
        raise ValueError(f"{where}: recommend must be a mapping with some of {', '.join(BUDGET_SETTINGS)}, "
                         f"got {raw!r}")
    unknown = sorted((k for k in raw if k not in BUDGET_SETTINGS), key=str)
    if unknown:
        hint = " (give storage in MB: max_storage_mb)" if "max_storage_bytes" in unknown else ""
        raise ValueError(f"{where}: unknown recommend setting(s) {unknown}{hint}; valid: {', '.join(BUDGET_SETTINGS)}")
    values: dict[str, float] = {}
    for name in BUDGET_SETTINGS:
        if name not in raw:
            continue
        value = raw[name]
        if not is_finite(value) or float(value) <= 0:
            raise ValueError(f"{where}: recommend.{name} must be a finite number > 0, got {value!r}")
        if name == "min_quality" and float(value) > 1:
            raise ValueError(f"{where}: recommend.min_quality must be at most 1 (a quality metric's mean), "
                             f"got {value!r}")
        values[name] = float(value)
    storage = values.get("max_storage_mb")
    return Budgets(max_p95_ms=values.get("max_p95_ms"),
                   max_storage_bytes=None if storage is None else storage * BYTES_PER_MB,
                   min_quality=values.get("min_quality"))


# ---- the headline -------------------------------------------------------------------------


def headline(rec: Recommendation) -> str:
    """One sentence: the pick within the budgets, and the best overall when it is another
    pair (or when nothing fits), with their numbers; a pick that stands for pairs with
    identical results, or won a tie by key order alone, says so."""
    within, best, metric = rec.within_budget, rec.best_overall, rec.metric
    if best is None:
        return f"No pair can be recommended: {rec.overall_reason}."
    if within is not None and within.pair == best.pair:
        scope = (f"the best overall and within the budgets ({rec.budgets.describe(metric)})" if rec.budgets.any
                 else "the best overall (no budgets set)")
        return f"Recommended: {best.label} ({_numbers(best, metric)}), {scope}{_caveats(best, metric)}."
    if within is not None:
        outside = dict(rec.excluded).get(best.label, "outside the budgets")
        return (f"Recommended within the budgets: {within.label} ({_numbers(within, metric)}){_caveats(within, metric)}"
                f"; the best overall, {best.label} ({_numbers(best, metric)}), is outside them ({outside}).")
    return (f"No pair is recommended: {rec.within_reason}; the best overall is {best.label} "
            f"({_numbers(best, metric)}){_caveats(best, metric)}.")


def _caveats(pick: Pick, metric: str) -> str:
    out = ""
    if pick.identical:
        out += f"; identical results to {', '.join(pick.identical)} (one candidate)"
    if pick.tied_with:
        out += (f"; a tie with {', '.join(pick.tied_with)} on {metric} and, within its measured noise, p95 "
                "(chosen by key order)")
    return out


def _numbers(pick: Pick, metric: str) -> str:
    interval = (f" [{pick.quality_low:.3f}, {pick.quality_high:.3f}]"
                if pick.quality_low is not None and pick.quality_high is not None else "")
    parts = [f"{metric} {pick.quality:.3f}{interval}"]
    parts.append(f"p95 {_ms(pick.p95_ms)}" if pick.p95_ms is not None else "p95 not measured")
    parts.append(_size(pick.storage_bytes) if pick.storage_bytes is not None else "storage not measured")
    return ", ".join(parts)


def _quality(row: pd.Series) -> str:
    low, high = row["quality_low"], row["quality_high"]
    interval = "" if math.isnan(low) or math.isnan(high) else f" [{low:.3f}, {high:.3f}]"
    return f"{float(row['quality']):.3f}{interval}"


def _opt(value: Any) -> float | None:
    return None if value is None or math.isnan(float(value)) else float(value)


def _ms(value: float) -> str:
    if value is None or math.isnan(value):
        return "not measured"
    return f"{value:.1f} ms" if value >= 1 else f"{value:.2f} ms"


def _size(value: float) -> str:
    if value is None or math.isnan(value):
        return "not measured"
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if value >= scale:
            return f"{value / scale:.1f} {unit}"
    return f"{value:.0f} B"
