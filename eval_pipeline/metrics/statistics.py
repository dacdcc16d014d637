"""Is a difference between two retrieval variants real, or noise from the question sample?

A mean over a couple of hundred questions moves by several points when a handful of
questions flip, so a change is only reported as better or worse together with

* a **confidence interval** (percentile bootstrap over questions, :func:`bootstrap_ci`),
* a **paired randomization test** (sign-flipping of per-question differences,
  :func:`paired_randomization_test`): both variants answered the *same* questions, so the
  per-question difference removes question difficulty, which is the largest source of
  variance, and the test needs no normality assumption on 0/1 hit metrics;
* a **Holm–Bonferroni** correction (:func:`holm`) across the variants compared with one
  baseline, because comparing ten variants at p < 0.05 finds a "winner" by chance;
* **wins / ties / losses** per question (:func:`win_tie_loss`), which a reader can check
  against the per-question file.

The resampling is done by :mod:`scipy.stats` (``bootstrap``, ``permutation_test``) with a
seeded :class:`numpy.random.Generator`, so the same inputs and seed always give the same
numbers (a re-run of the pipeline must not change a verdict by chance).

Only **answerable** questions enter the statistics (abstention questions have NaN metrics
by the conventions of :mod:`eval_pipeline.metrics.retrieval`); errored questions are misses with
metric 0 and do enter. No function mutates its inputs.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats

from eval_pipeline.common.checks import check_resamples, check_seed, finite_values, is_real
from eval_pipeline.metrics.retrieval import COMPARED, metric_names

__all__ = [
    "DEFAULT_COMPARE_METRICS",
    "bootstrap_ci",
    "compare_to_baseline",
    "holm",
    "metric_intervals",
    "paired_randomization_test",
    "win_tie_loss",
]

DEFAULT_COMPARE_METRICS = metric_names(COMPARED)

COMPARISON_COLUMNS = [
    "variant", "baseline", "metric", "n", "mean", "baseline_mean", "delta", "ci_low", "ci_high",
    "p", "p_holm", "wins", "ties", "losses", "significant",
]
INTERVAL_COLUMNS = ["variant", "metric", "n", "mean", "low", "high"]

# Upper bound on the resample matrix scipy builds per batch (n_questions x batch floats):
# a large question set does not allocate n_resamples x n at once, and ~1M cells measured
# 1.5-3x faster than one big batch (cache-friendly). Batching does not change results.
_MAX_BATCH_CELLS = 1_000_000


# --------------------------------------------------------------------------
# validation helpers
# --------------------------------------------------------------------------


def _check_paired(a: object, b: object) -> tuple[np.ndarray, np.ndarray]:
    x, y = finite_values(a, "a"), finite_values(b, "b")
    if x.shape != y.shape:
        raise ValueError(f"a and b must be paired (same length), got {len(x)} and {len(y)} values")
    return x, y


def _check_confidence(confidence: object) -> float:
    if not is_real(confidence) or not 0 < float(confidence) < 1:
        raise ValueError(f"confidence must be a number strictly between 0 and 1, got {confidence!r}")
    return float(confidence)


def _batch(n_values: int, n_resamples: int) -> int:
    return max(1, min(n_resamples, _MAX_BATCH_CELLS // max(n_values, 1)))


# --------------------------------------------------------------------------
# primitives
# --------------------------------------------------------------------------


def bootstrap_ci(
    values: Sequence[float] | np.ndarray,
    *,
    confidence: float = 0.95,
    n_resamples: int = 2000,
    seed: int = 0,
) -> tuple[float, float]:
    """Percentile-bootstrap confidence interval of the mean over questions.

    Resamples questions with replacement (``scipy.stats.bootstrap``, ``method="percentile"``,
    seeded ``numpy.random.Generator``). The percentile method is used rather than BCa
    because BCa's jackknife acceleration is unstable on the 0/1, heavily tied values that
    hit@k produces, and because it stays well defined for tiny samples.

    Degenerate inputs, where there is no spread to resample, return ``(mean, mean)``
    without warnings: fewer than two values, or all values equal. An empty input returns
    ``(nan, nan)`` (there is no mean). Non-finite values raise ValueError.
    """
    confidence = _check_confidence(confidence)
    n_resamples = check_resamples(n_resamples)
    seed = check_seed(seed)
    x = finite_values(values, "values")
    if x.size == 0:
        return (math.nan, math.nan)
    mean = float(x.mean())
    if x.size < 2 or np.all(x == x[0]):
        return (mean, mean)
    result = stats.bootstrap(
        (x,),
        np.mean,
        n_resamples=n_resamples,
        batch=_batch(x.size, n_resamples),
        vectorized=True,
        confidence_level=confidence,
        method="percentile",
        rng=np.random.default_rng(seed),
    )
    low, high = float(result.confidence_interval.low), float(result.confidence_interval.high)
    # Percentiles of resampled means can land one ulp outside [min, max]; clamp so an
    # interval never claims values the data cannot produce.
    return (max(low, float(x.min())), min(high, float(x.max())))


def paired_randomization_test(
    a: Sequence[float] | np.ndarray,
    b: Sequence[float] | np.ndarray,
    *,
    n_resamples: int = 10000,
    seed: int = 0,
) -> float:
    """Two-sided p-value that the mean paired difference ``mean(a - b)`` is zero.

    Under the null hypothesis the two variants are exchangeable on every question, so the
    sign of each per-question difference is a coin flip. ``scipy.stats.permutation_test``
    on the one sample of differences with ``permutation_type="samples"`` flips each sign
    independently (equivalent to swapping ``a[i]`` and ``b[i]``, and faster); it
    enumerates all ``2**n`` flips when that is no more than ``n_resamples`` and otherwise
    samples them, reporting ``(count + 1) / (n_resamples + 1)`` so a sampled p-value is
    never 0.

    Identical inputs (every difference 0) and a single question return exactly 1.0
    without resampling (flipping the only sign is as extreme as the observed value). An empty
    input returns NaN (there is nothing to test). ``a`` and ``b`` must have equal length
    and finite values (ValueError otherwise).
    """
    n_resamples = check_resamples(n_resamples)
    seed = check_seed(seed)
    x, y = _check_paired(a, b)
    if x.size == 0:
        return math.nan
    if np.all(x == y):
        return 1.0
    if x.size == 1:
        # Both sign patterns of a single difference are equally extreme (scipy refuses n=1).
        return 1.0
    d = x - y
    result = stats.permutation_test(
        (d,),
        np.mean,
        permutation_type="samples",
        vectorized=True,
        n_resamples=n_resamples,
        batch=_batch(x.size, n_resamples),
        alternative="two-sided",
        rng=np.random.default_rng(seed),
    )
    return float(min(1.0, result.pvalue))


def holm(pvalues: Mapping[str, float]) -> dict[str, float]:
    """Holm–Bonferroni adjusted p-values, keyed like the input.

    With ``m`` p-values sorted ascending, the ``i``-th smallest (0-based) is multiplied by
    ``m - i``; a running maximum keeps the adjusted values monotone in the raw ones, and
    they are capped at 1. Compared with plain Bonferroni it is uniformly more powerful and
    still controls the family-wise error rate with no independence assumption (the
    variants share a baseline, so their tests are correlated).

    Every p-value must be a finite number in [0, 1] (ValueError naming the key otherwise).
    Tied p-values receive the same adjusted value, so the result does not depend on the
    mapping's order. An empty mapping gives an empty dict.
    """
    if not isinstance(pvalues, Mapping):
        raise ValueError(f"pvalues must be a mapping of name -> p-value, got {type(pvalues).__name__}")
    checked: dict[str, float] = {}
    for key, p in pvalues.items():
        if not is_real(p) or not (0.0 <= float(p) <= 1.0):
            raise ValueError(f"p-value for {key!r} must be a finite number in [0, 1], got {p!r}")
        checked[key] = float(p)
    m = len(checked)
    order = sorted(checked, key=lambda k: checked[k])
    adjusted: dict[str, float] = {}
    running = 0.0
    for i, key in enumerate(order):
        running = max(running, min(1.0, (m - i) * checked[key]))
        adjusted[key] = running
    return {key: adjusted[key] for key in checked}


def win_tie_loss(
    a: Sequence[float] | np.ndarray, b: Sequence[float] | np.ndarray
) -> tuple[int, int, int]:
    """Per-question ``(wins, ties, losses)`` of ``a`` against ``b``.

    A tie is exact equality. The metric functions are deterministic, so two variants that
    return the same ranking for a question get bit-identical scores; no tolerance is
    needed and none is applied.
    """
    x, y = _check_paired(a, b)
    return int(np.sum(x > y)), int(np.sum(x == y)), int(np.sum(x < y))


# --------------------------------------------------------------------------
# per-variant tables
# --------------------------------------------------------------------------


def _answerable_metrics(frame: pd.DataFrame, variant: str, metrics: Sequence[str]) -> pd.DataFrame:
    """Answerable rows of one variant, indexed by qid and sorted, with only ``metrics``."""
    if not isinstance(frame, pd.DataFrame):
        raise ValueError(f"per_query[{variant!r}] must be a DataFrame, got {type(frame).__name__}")
    missing = [c for c in ("qid", "answerable", *metrics) if c not in frame.columns]
    if missing:
        raise ValueError(f"per_query[{variant!r}] is missing column(s) {missing}")
    rows = frame.loc[frame["answerable"].astype(bool), ["qid", *metrics]]
    duplicated = rows["qid"][rows["qid"].duplicated()].tolist()
    if duplicated:
        raise ValueError(f"per_query[{variant!r}] has duplicate qid(s) {sorted(set(duplicated))[:10]}")
    out = rows.set_index("qid").sort_index().astype("float64")
    for metric in metrics:
        bad = out[metric][~np.isfinite(out[metric])]
        if len(bad):
            raise ValueError(
                f"per_query[{variant!r}] has a non-finite {metric!r} on answerable question "
                f"{bad.index[0]!r}: {bad.iloc[0]!r}"
            )
    return out


def _check_metrics(metrics: object) -> tuple[str, ...]:
    if isinstance(metrics, str):
        metrics = (metrics,)
    names: tuple[Any, ...] = tuple(metrics)  # type: ignore[arg-type]  # not iterable: tuple() raises the TypeError
    if not names or not all(isinstance(m, str) and m for m in names):
        raise ValueError(f"metrics must be a non-empty sequence of metric column names, got {names!r}")
    if len(set(names)) != len(names):
        raise ValueError(f"metrics has duplicates: {names!r}")
    return names


def compare_to_baseline(
    per_query: Mapping[str, pd.DataFrame],
    baseline: str,
    metrics: Sequence[str] = DEFAULT_COMPARE_METRICS,
    *,
    alpha: float = 0.05,
    confidence: float = 0.95,
    n_bootstrap: int = 2000,
    n_permutations: int = 10000,
    seed: int = 0,
) -> pd.DataFrame:
    """Every non-baseline variant against ``baseline``, per metric, paired by question.

    ``per_query`` maps variant key -> the per-question frame of
    :func:`eval_pipeline.scoring.variant.score_variant`. Only answerable questions are used, and
    the two variants must have scored the same answerable qids (ValueError naming the
    variant and the differing qids otherwise): pairing is what makes the test sensitive,
    and silently comparing different question sets would be wrong.

    One row per (variant, metric), variants in mapping order, metrics in the given order:

    ``variant, baseline, metric, n`` (paired questions), ``mean`` (variant),
    ``baseline_mean``, ``delta`` (mean − baseline mean), ``ci_low``/``ci_high`` (percentile
    bootstrap of the per-question differences, i.e. a paired bootstrap), ``p`` (paired
    randomization test), ``p_holm`` (Holm across the variants, separately for each metric,
    because each metric answers its own question), ``wins``/``ties``/``losses`` (variant
    vs baseline per question) and ``significant`` (``p_holm < alpha``).

    With only the baseline in ``per_query`` the result is an empty frame with these
    columns. No answerable questions is an error: there would be nothing to compare.
    """
    if not isinstance(per_query, Mapping):
        raise ValueError(f"per_query must be a mapping of variant -> DataFrame, got {type(per_query).__name__}")
    if baseline not in per_query:
        raise ValueError(f"baseline {baseline!r} is not among the variants {list(per_query)}")
    if not is_real(alpha) or not 0 < float(alpha) < 1:
        raise ValueError(f"alpha must be a number strictly between 0 and 1, got {alpha!r}")
    metrics = _check_metrics(metrics)
    base = _answerable_metrics(per_query[baseline], baseline, metrics)
    if base.empty:
        raise ValueError(f"baseline {baseline!r} has no answerable questions to compare on")

    rows: list[dict[str, object]] = []
    for variant, frame in per_query.items():
        if variant == baseline:
            continue
        cur = _answerable_metrics(frame, variant, metrics)
        if not cur.index.equals(base.index):
            only_variant = sorted(set(cur.index) - set(base.index))
            only_base = sorted(set(base.index) - set(cur.index))
            raise ValueError(
                f"variant {variant!r} and baseline {baseline!r} scored different answerable questions: "
                f"only in {variant!r}: {only_variant[:10]}, only in {baseline!r}: {only_base[:10]}"
            )
        for metric in metrics:
            a = cur[metric].to_numpy()
            b = base[metric].to_numpy()
            low, high = bootstrap_ci(a - b, confidence=confidence, n_resamples=n_bootstrap, seed=seed)
            wins, ties, losses = win_tie_loss(a, b)
            rows.append(
                {
                    "variant": variant,
                    "baseline": baseline,
                    "metric": metric,
                    "n": int(a.size),
                    "mean": float(a.mean()),
                    "baseline_mean": float(b.mean()),
                    "delta": float(np.mean(a - b)),
                    "ci_low": low,
                    "ci_high": high,
                    "p": paired_randomization_test(a, b, n_resamples=n_permutations, seed=seed),
                    "wins": wins,
                    "ties": ties,
                    "losses": losses,
                }
            )
    if not rows:
        return pd.DataFrame(columns=COMPARISON_COLUMNS)

    out = pd.DataFrame(rows)
    out["p_holm"] = np.nan
    for metric in metrics:
        mask = out["metric"] == metric
        adjusted = holm(dict(zip(out.loc[mask, "variant"], out.loc[mask, "p"])))
        out.loc[mask, "p_holm"] = out.loc[mask, "variant"].map(adjusted)
    out["significant"] = out["p_holm"] < float(alpha)
    return out[COMPARISON_COLUMNS].reset_index(drop=True)


def metric_intervals(
    per_query: Mapping[str, pd.DataFrame],
    metrics: Sequence[str] = DEFAULT_COMPARE_METRICS,
    *,
    confidence: float = 0.95,
    n_resamples: int = 2000,
    seed: int = 0,
) -> pd.DataFrame:
    """Mean and percentile-bootstrap interval per variant and metric.

    Columns ``variant, metric, n, mean, low, high``; one row per (variant, metric), in
    mapping order then metric order. Only answerable questions are used (the same
    population as :func:`eval_pipeline.metrics.retrieval.aggregate`, so ``mean`` equals the summary
    value). A variant with no answerable questions gets ``n = 0`` and NaN everywhere.
    """
    if not isinstance(per_query, Mapping):
        raise ValueError(f"per_query must be a mapping of variant -> DataFrame, got {type(per_query).__name__}")
    metrics = _check_metrics(metrics)
    rows: list[dict[str, object]] = []
    for variant, frame in per_query.items():
        values = _answerable_metrics(frame, variant, metrics)
        for metric in metrics:
            x = values[metric].to_numpy()
            low, high = bootstrap_ci(x, confidence=confidence, n_resamples=n_resamples, seed=seed)
            rows.append(
                {
                    "variant": variant,
                    "metric": metric,
                    "n": int(x.size),
                    "mean": float(x.mean()) if x.size else math.nan,
                    "low": low,
                    "high": high,
                }
            )
    return pd.DataFrame(rows, columns=INTERVAL_COLUMNS)
