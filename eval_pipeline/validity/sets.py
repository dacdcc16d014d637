"""Set-versus-set validity: do two question sets on the same corpus rank the variants alike?

A generated question set is worth using only if it orders the variants the way the questions of
real users do. Given the per-question metrics of the same variants on two sets (set A, set B:
a human and a generated one, or two generators), for each metric:

* each set's **mean** per variant, over its answerable questions (the report's means), and the
  variants' **ranks** (1 = best; tied means share the average of their ranks);
* **Kendall's τ-b** between the two sets' means: over the pairs of variants,
  ``(C - D) / sqrt((P - T_A) (P - T_B))`` with C concordant pairs (both sets order them the same
  way), D discordant ones, P = n(n-1)/2 pairs, T_A and T_B the pairs tied in A and in B. 1: the
  same order; -1: reversed; undefined (NaN) with fewer than two variants or when either set ties
  every pair;
* a **bootstrap interval** for τ over questions: each resample draws set A's questions with
  replacement and, independently, set B's (they are different questions), every variant keeping
  its own values on the drawn questions (the variants stay paired within a set), and computes τ
  between the resampled means; the interval is the percentile interval of the resamples where τ
  is defined (those where it is not are counted). Seeded: the same inputs and seed give the same
  interval;
* the **flips**: the pairs of variants that one set orders one way and the other the opposite
  way (discordant pairs), the better one under set A first. A pair tied in one set only is not a
  flip; it is counted in the ties.

Means closer than 1e-12 are a tie (the rule of eval_pipeline.validity.power). A variant missing
from either set, a question one variant has and another lacks, or a missing value on an
answerable question is a ValueError naming it: nothing is dropped silently. Abstention questions
(``answerable`` false) have no metric and are left out, as in every mean of the report.
Functions are pure and do not mutate their inputs.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from itertools import combinations
from typing import Any

import numpy as np
import pandas as pd

from eval_pipeline.common.checks import check_resamples, check_seed, is_real
from eval_pipeline.scoring.variant import HEADLINE_METRICS

__all__ = [
    "MetricAgreement",
    "SetComparison",
    "bootstrap_tau",
    "compare_sets",
    "flipped_pairs",
    "kendall_tau",
    "question_matrix",
    "rank_variants",
]

TIE = 1e-12
DEFAULT_RESAMPLES = 1000
DEFAULT_CONFIDENCE = 0.95
_MAX_BATCH_CELLS = 2_000_000  # resample weights held at once (resamples x questions)


def _sign(d: np.ndarray) -> np.ndarray:
    return np.where(np.abs(d) <= TIE, 0, np.sign(d)).astype(np.int8)


def rank_variants(means: Mapping[str, float]) -> dict[str, float]:
    """Rank 1 for the highest mean; means within 1e-12 share the average of their ranks
    ({a: 0.5, b: 0.7, c: 0.5} -> {b: 1, a: 2.5, c: 2.5})."""
    names = list(means)
    values = np.array([float(means[n]) for n in names], dtype=float)
    if not np.all(np.isfinite(values)):
        bad = [n for n, v in zip(names, values) if not math.isfinite(v)]
        raise ValueError(f"a mean is not a finite number for variant(s) {bad}")
    ranks: dict[str, float] = {}
    for i, name in enumerate(names):
        higher = int(np.sum(values - values[i] > TIE))
        tied = int(np.sum(np.abs(values - values[i]) <= TIE))
        ranks[name] = higher + (tied + 1) / 2
    return ranks


def _pair_signs(values: np.ndarray) -> np.ndarray:
    """(..., pairs) signs of values[i] - values[j] for every pair i < j of the last axis."""
    n = values.shape[-1]
    i, j = np.triu_indices(n, k=1)
    return _sign(values[..., i] - values[..., j])


def _tau_from_signs(sa: np.ndarray, sb: np.ndarray) -> np.ndarray:
    """Kendall's τ-b from the pair signs of two rankings (last axis: pairs); NaN where undefined."""
    pairs = sa.shape[-1]
    s = (sa.astype(np.int64) * sb).sum(axis=-1)  # C - D
    untied_a = pairs - (sa == 0).sum(axis=-1)
    untied_b = pairs - (sb == 0).sum(axis=-1)
    denominator = np.sqrt(untied_a.astype(float) * untied_b.astype(float))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(denominator > 0, s / np.where(denominator > 0, denominator, 1.0), np.nan)


def _aligned(a: Mapping[str, float], b: Mapping[str, float]) -> tuple[list[str], np.ndarray, np.ndarray]:
    if set(a) != set(b):
        raise ValueError(f"the two sets rank different variants: only in A {sorted(set(a) - set(b))}, "
                         f"only in B {sorted(set(b) - set(a))}")
    names = list(a)
    return names, np.array([float(a[n]) for n in names]), np.array([float(b[n]) for n in names])


def kendall_tau(a: Mapping[str, float], b: Mapping[str, float]) -> float:
    """Kendall's τ-b between two scorings of the same variants (see the module docstring)."""
    names, va, vb = _aligned(a, b)
    if len(names) < 2:
        return math.nan
    return float(_tau_from_signs(_pair_signs(va), _pair_signs(vb)))


def flipped_pairs(a: Mapping[str, float], b: Mapping[str, float]) -> list[tuple[str, str]]:
    """The discordant pairs: (better under A, better under B), in the order of A's ranking, then B's."""
    names, va, vb = _aligned(a, b)
    order = sorted(range(len(names)), key=lambda i: (-va[i], names[i]))
    out = []
    for x, y in combinations(order, 2):  # x ranks above (or ties with) y under A
        sa, sb = _sign(np.array([va[x] - va[y]]))[0], _sign(np.array([vb[x] - vb[y]]))[0]
        if sa * sb < 0:
            out.append((names[x], names[y]) if sa > 0 else (names[y], names[x]))
    return out


def question_matrix(per_variant: Mapping[str, pd.DataFrame], metric: str, where: str = "set"
                    ) -> tuple[list[str], list[str], np.ndarray]:
    """(variants, qids, values[variant, question]) of `metric` over the answerable questions, the
    questions in the first variant's order; every variant must have a finite value on each."""
    if not per_variant:
        raise ValueError(f"{where}: no variant")
    variants = list(per_variant)
    columns: list[pd.Series] = []
    qids: list[str] | None = None
    for name in variants:
        frame = per_variant[name]
        if metric not in frame.columns or "qid" not in frame.columns:
            raise ValueError(f"{where}: variant {name!r} has no {metric!r} (or no 'qid') column")
        rows = frame[frame["answerable"].astype(bool)] if "answerable" in frame.columns else frame
        series = pd.Series(rows[metric].to_numpy(dtype=float), index=rows["qid"].astype(str).to_numpy())
        if series.index.has_duplicates:
            raise ValueError(f"{where}: variant {name!r} has a question twice: "
                             f"{sorted(set(series.index[series.index.duplicated()]))[:5]}")
        if qids is None:
            qids = list(series.index)
        elif set(series.index) != set(qids):
            extra, lacking = sorted(set(series.index) - set(qids)), sorted(set(qids) - set(series.index))
            raise ValueError(f"{where}: variant {name!r} was scored on other questions than {variants[0]!r}: "
                             f"extra {extra[:5]}, lacking {lacking[:5]}")
        bad = series.index[~np.isfinite(series.to_numpy())]
        if len(bad):
            raise ValueError(f"{where}: variant {name!r} has no finite {metric} on answerable question(s) "
                             f"{list(bad[:5])}")
        columns.append(series)
    assert qids is not None
    if not qids:
        raise ValueError(f"{where}: no answerable question")
    return variants, qids, np.vstack([s.reindex(qids).to_numpy() for s in columns])


def _resampled_means(values: np.ndarray, n_resamples: int, rng: np.random.Generator) -> np.ndarray:
    """(resamples, variants) means over questions drawn with replacement, the variants paired."""
    n = values.shape[1]
    out = np.empty((n_resamples, values.shape[0]))
    step = max(1, _MAX_BATCH_CELLS // max(1, n))
    for start in range(0, n_resamples, step):
        size = min(step, n_resamples - start)
        weights = rng.multinomial(n, np.full(n, 1.0 / n), size=size).astype(float)  # (size, n)
        out[start:start + size] = weights @ values.T / n
    return out


def bootstrap_tau(values_a: np.ndarray, values_b: np.ndarray, *, n_resamples: int = DEFAULT_RESAMPLES,
                  seed: int = 0, confidence: float = DEFAULT_CONFIDENCE) -> tuple[float, float, int]:
    """(low, high, undefined resamples) of τ between the two sets' means, from `values_a`
    (variants x set A's questions) and `values_b` (the same variants, same order, x set B's)."""
    n_resamples = check_resamples(n_resamples)
    rng = np.random.default_rng(check_seed(seed))
    if not is_real(confidence) or not 0 < confidence < 1:
        raise ValueError(f"confidence must be a number in (0, 1), got {confidence!r}")
    if values_a.shape[0] != values_b.shape[0]:
        raise ValueError(f"{values_a.shape[0]} variants in set A, {values_b.shape[0]} in set B")
    if values_a.shape[0] < 2:
        return math.nan, math.nan, n_resamples
    means_a = _resampled_means(values_a, n_resamples, rng)
    means_b = _resampled_means(values_b, n_resamples, rng)
    taus = _tau_from_signs(_pair_signs(means_a), _pair_signs(means_b))
    finite = taus[np.isfinite(taus)]
    undefined = int(n_resamples - finite.size)
    if not finite.size:
        return math.nan, math.nan, undefined
    tail = (1 - confidence) / 2 * 100
    low, high = np.percentile(finite, [tail, 100 - tail])
    return float(low), float(high), undefined


@dataclass(frozen=True)
class MetricAgreement:
    """One metric: each set's means and ranks, τ with its interval, the flips."""

    metric: str
    means_a: Mapping[str, float]
    means_b: Mapping[str, float]
    ranks_a: Mapping[str, float]
    ranks_b: Mapping[str, float]
    tau: float
    low: float
    high: float
    undefined_resamples: int
    flips: tuple[tuple[str, str], ...]
    questions_a: int
    questions_b: int

    def table(self) -> pd.DataFrame:
        """One row per variant, in set A's order: mean and rank under each set, the rank shift."""
        rows = [{"variant": v, "mean A": self.means_a[v], "rank A": self.ranks_a[v], "mean B": self.means_b[v],
                 "rank B": self.ranks_b[v], "shift": self.ranks_b[v] - self.ranks_a[v]} for v in self.means_a]
        return pd.DataFrame(rows).sort_values(["rank A", "variant"], kind="stable").reset_index(drop=True)


@dataclass(frozen=True)
class SetComparison:
    variants: tuple[str, ...]
    metrics: tuple[MetricAgreement, ...]
    n_resamples: int
    seed: int
    confidence: float
    notes: tuple[str, ...] = field(default=())

    def get(self, metric: str) -> MetricAgreement | None:
        return next((m for m in self.metrics if m.metric == metric), None)

    def to_json(self) -> dict[str, Any]:
        def num(x: float) -> float | None:
            return None if not math.isfinite(x) else float(x)

        return {"variants": list(self.variants), "n_resamples": self.n_resamples, "seed": self.seed,
                "confidence": self.confidence, "notes": list(self.notes),
                "metrics": {m.metric: {"tau": num(m.tau), "low": num(m.low), "high": num(m.high),
                                       "undefined_resamples": m.undefined_resamples,
                                       "flips": [list(f) for f in m.flips],
                                       "questions_a": m.questions_a, "questions_b": m.questions_b,
                                       "means_a": dict(m.means_a), "means_b": dict(m.means_b),
                                       "ranks_a": dict(m.ranks_a), "ranks_b": dict(m.ranks_b)}
                            for m in self.metrics}}


def compare_sets(per_variant_a: Mapping[str, pd.DataFrame], per_variant_b: Mapping[str, pd.DataFrame], *,
                 metrics: Sequence[str] | None = None, n_resamples: int = DEFAULT_RESAMPLES, seed: int = 0,
                 confidence: float = DEFAULT_CONFIDENCE) -> SetComparison:
    """The agreement of two question sets on each metric (default: the report's headline metrics
    that both sets' frames carry). The variants are those of set A, which set B must have too."""
    n_resamples, seed = check_resamples(n_resamples), check_seed(seed)
    if set(per_variant_a) != set(per_variant_b):
        raise ValueError(f"the two sets were ranked by different variants: only on A "
                         f"{sorted(set(per_variant_a) - set(per_variant_b))}, only on B "
                         f"{sorted(set(per_variant_b) - set(per_variant_a))}")
    if metrics is None:
        first_a, first_b = next(iter(per_variant_a.values()), None), next(iter(per_variant_b.values()), None)
        metrics = [m for m in HEADLINE_METRICS if first_a is not None and first_b is not None
                   and m in first_a.columns and m in first_b.columns]
    variants = tuple(per_variant_a)
    notes = [] if len(variants) >= 3 else [f"{len(variants)} variant(s): τ says little with fewer than 3"]
    out = []
    for metric in metrics:
        names, qa, values_a = question_matrix(per_variant_a, metric, "set A")
        _, qb, values_b = question_matrix({v: per_variant_b[v] for v in names}, metric, "set B")
        means_a = dict(zip(names, values_a.mean(axis=1).tolist()))
        means_b = dict(zip(names, values_b.mean(axis=1).tolist()))
        low, high, undefined = bootstrap_tau(values_a, values_b, n_resamples=n_resamples, seed=seed,
                                             confidence=confidence)
        out.append(MetricAgreement(metric, means_a, means_b, rank_variants(means_a), rank_variants(means_b),
                                   kendall_tau(means_a, means_b), low, high, undefined,
                                   tuple(flipped_pairs(means_a, means_b)), len(qa), len(qb)))
    return SetComparison(variants, tuple(out), n_resamples, seed, float(confidence), tuple(notes))
