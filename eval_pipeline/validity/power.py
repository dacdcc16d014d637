"""How large a change can this question set detect, and which variant is probably best?

A gate tolerance or a "variant B is better" claim is only meaningful if the question set
is large enough to tell a change of that size from the luck of which questions were
asked. This module answers that for the paired design the pipeline uses (every variant
answers the same questions, so the per-question difference ``d_i = variant_i - baseline_i``
removes question difficulty):

* :func:`minimum_detectable_effect` — the smallest true mean difference that a two-sided
  test at level ``alpha`` detects with probability ``power``, given the spread of the
  observed differences;
* :func:`questions_needed` — how many questions would make a given effect detectable;
* :func:`tolerance_below_mde` — a warning when a gate tolerance is smaller than the MDE;
* :func:`probability_best` — by a paired bootstrap, the probability that each variant has
  the highest mean.

Formulae (normal approximation, two-sided)
------------------------------------------
``z = z_{1 - alpha/2} + z_{power}`` (standard normal quantiles), ``sd`` the sample
standard deviation of the differences (``ddof=1``) and ``n`` their number::

    MDE = z * sd / sqrt(n)
    questions_needed = max(2, ceil((z * sd / effect) ** 2))

The normal (z) quantiles are used throughout, not Student's t: the quantiles come from
:class:`statistics.NormalDist` in the standard library, so this module needs neither
scipy (which loading the pipeline's definitions must not import) nor a t table. For the
usual question sets (``n`` in the hundreds) z and t differ by well under 1 %; below about
30 questions the normal approximation *understates* the MDE. The small probability of
rejecting in the wrong direction is ignored, as in every textbook power formula. The
formula is in the units of the metric; it holds for 0/1 metrics such as hit@k too
(the mean of ``n`` paired differences is approximately normal by the central limit
theorem), which :mod:`tests.test_power` checks by simulation.

Undefined cases
---------------
* fewer than two differences: the spread cannot be estimated, so the MDE is NaN and
  :func:`questions_needed` returns None;
* all differences equal (``sd == 0``): also NaN / None, not 0. A zero spread almost always
  means the two variants returned the same rankings (or scored alike on every question),
  which says nothing about how noisy a *real* change would be; the plug-in value 0 would
  claim that every effect is detectable and would silence :func:`tolerance_below_mde`.

Differences must be finite: a NaN is an abstention question (or a scoring bug) that slipped
in, and dropping it silently would change ``n`` (the rule of
:mod:`eval_pipeline.metrics.statistics`). No function mutates its inputs.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from statistics import NormalDist

import numpy as np

from eval_pipeline.common.checks import check_resamples, check_seed, finite_values, is_real

__all__ = [
    "minimum_detectable_effect",
    "probability_best",
    "questions_needed",
    "tolerance_below_mde",
]

# Upper bound on the float cells one bootstrap batch allocates (variants x resamples x n),
# the same budget as eval_pipeline.metrics.statistics.
_MAX_BATCH_CELLS = 1_000_000

# Means closer than this are a tie (the same slack as eval_pipeline.gates.retrieval.EPSILON).
# Two variants with the same values in another order give means that can differ in the
# last bit; one question in a million moves a mean by 1e-6, so no real difference is lost.
_TIE = 1e-12

# ceil() of a product of floats: a value that is an integer on paper (300) can come out as
# 300.00000000000006 and would be rounded up to 301.
_CEIL_SLACK = 1e-9


# --------------------------------------------------------------------------
# validation helpers
# --------------------------------------------------------------------------


def _check_probability(value: object, name: str) -> float:
    if not is_real(value) or not 0.0 < float(value) < 1.0:
        raise ValueError(f"{name} must be a number strictly between 0 and 1, got {value!r}")
    return float(value)


def _z_sum(alpha: object, power: object) -> float:
    """``z_{1-alpha/2} + z_{power}``; ValueError naming the argument when out of range.

    A power at or below ``alpha / 2`` would make the sum zero or negative (a "detectable"
    effect of zero or less), so it is refused.
    """
    alpha = _check_probability(alpha, "alpha")
    power = _check_probability(power, "power")
    if power <= alpha / 2:
        raise ValueError(f"power must be greater than alpha / 2 = {alpha / 2!r}, got {power!r}")
    std = NormalDist()
    return std.inv_cdf(1.0 - alpha / 2.0) + std.inv_cdf(power)


def _spread(differences: object) -> tuple[int, float]:
    """``(n, sd)`` of the differences; ``sd`` is NaN when it is undefined (n < 2 or zero)."""
    d = finite_values(differences, "differences")
    if d.size < 2:
        return int(d.size), math.nan
    sd = float(np.std(d, ddof=1))
    # Equal values can give an sd of a few ulps rather than exactly 0.
    if sd == 0.0 or np.all(d == d[0]):
        return int(d.size), math.nan
    return int(d.size), sd


# --------------------------------------------------------------------------
# power of the paired design
# --------------------------------------------------------------------------


def minimum_detectable_effect(
    differences: Sequence[float] | np.ndarray, alpha: float = 0.05, power: float = 0.8
) -> float:
    """Smallest true mean paired difference detectable with probability ``power`` by a
    two-sided test at level ``alpha``: ``(z_{1-alpha/2} + z_power) * sd(d) / sqrt(n)``.

    ``differences`` are the observed per-question differences (variant minus baseline, or
    current run minus previous run) on the answerable questions. Their spread stands in
    for the spread under the change being planned for. NaN when fewer than two
    differences are given or all are equal (see the module docstring for why not 0).
    With alpha 0.05 and power 0.8 the factor is 2.8016.
    """
    z = _z_sum(alpha, power)
    n, sd = _spread(differences)
    if math.isnan(sd):
        return math.nan
    return z * sd / math.sqrt(n)


def questions_needed(
    differences: Sequence[float] | np.ndarray,
    effect: float = 0.02,
    alpha: float = 0.05,
    power: float = 0.8,
) -> int | None:
    """Questions needed to detect a true mean difference of ``effect`` (metric units, e.g.
    0.02 = two points of hit rate): ``max(2, ceil(((z_a + z_b) * sd / effect) ** 2))``.

    ``sd`` is estimated from the observed ``differences``, assuming the spread per question
    stays the same on a larger set drawn like this one. None when the spread is undefined
    (fewer than two differences, or all equal). At least 2, the fewest questions a spread
    can be estimated from. ``effect`` must be a finite number > 0 (its sign does not
    matter to a two-sided test, so pass its magnitude).
    """
    if not is_real(effect) or not math.isfinite(float(effect)) or float(effect) <= 0.0:
        raise ValueError(f"effect must be a finite number > 0, got {effect!r}")
    z = _z_sum(alpha, power)
    _, sd = _spread(differences)
    if math.isnan(sd):
        return None
    exact = (z * sd / float(effect)) ** 2
    return max(2, math.ceil(exact - _CEIL_SLACK))


def tolerance_below_mde(tolerance: float, mde: float, *, metric: str | None = None) -> str | None:
    """A warning when a gate ``tolerance`` is smaller than the minimum detectable effect.

    A gate fails when a metric drops by more than its tolerance. If that tolerance is below
    what the question set can tell from noise, a drop of that size is not evidence that the
    change is worse on questions beyond this set, and a pass is no evidence that it is not:
    the gate decides on sampling luck. None when the tolerance is at least the MDE (a
    tolerance exactly equal to it does not warn) and when ``mde`` is NaN (undefined: the
    caller shows that separately rather than implying a problem or its absence).

    ``tolerance`` is a finite number in [0, 1] (the gate's absolute tolerance), ``mde`` a
    number >= 0 or NaN; ``metric`` only labels the text.
    """
    if not is_real(tolerance) or not (0.0 <= float(tolerance) <= 1.0):
        raise ValueError(f"tolerance must be a finite number in [0, 1], got {tolerance!r}")
    if not is_real(mde) or math.isinf(float(mde)) or float(mde) < 0.0:
        raise ValueError(f"mde must be a finite number >= 0 or NaN, got {mde!r}")
    if metric is not None and (not isinstance(metric, str) or not metric):
        raise ValueError(f"metric must be a non-empty string or None, got {metric!r}")
    tolerance, mde = float(tolerance), float(mde)
    if math.isnan(mde) or tolerance >= mde - _TIE:
        return None
    on = f" on {metric}" if metric else ""
    return (
        f"gate tolerance {tolerance:.3f}{on} is below the minimum detectable effect {mde:.3f}: "
        f"a change of that size cannot be told from the noise of which questions were asked, so "
        f"the gate passes or fails on sampling luck. Raise the tolerance to at least {mde:.3f} or "
        f"add questions."
    )


# --------------------------------------------------------------------------
# which variant is best
# --------------------------------------------------------------------------


def probability_best(
    per_question_scores: Mapping[str, Sequence[float] | np.ndarray],
    n_resamples: int = 2000,
    seed: int = 0,
) -> dict[str, float]:
    """Probability that each variant has the highest mean, by a paired bootstrap.

    ``per_question_scores`` maps variant -> its per-question metric values, aligned by
    question (same questions, same order; answerable questions only, no NaN). Each
    resample draws ``n`` question indices with replacement *once* and applies them to every
    variant: the variants stay paired, as in the paired test, so question difficulty
    cancels and a variant that is a little better on every question wins every resample.

    In each resample the variant(s) with the highest mean win; a tie (means within 1e-12)
    splits the win evenly among the tied variants. The result maps every variant (mapping
    order) to its share of the ``n_resamples`` wins; the shares sum to 1 (up to float
    rounding). A single variant gets 1.0. Same inputs and ``seed`` give the same numbers.

    ValueError: an empty mapping, no questions, variants with different numbers of
    questions, non-finite values (naming the variant).
    """
    n_resamples = check_resamples(n_resamples)
    seed = check_seed(seed)
    if not isinstance(per_question_scores, Mapping):
        raise TypeError(f"per_question_scores must be a mapping of variant -> scores, "
                        f"got {type(per_question_scores).__name__}")
    if not per_question_scores:
        raise ValueError("per_question_scores is empty: there is no variant to rank")
    names = list(per_question_scores)
    rows = [finite_values(per_question_scores[v], f"per_question_scores[{v!r}]") for v in names]
    sizes = {v: r.size for v, r in zip(names, rows)}
    if len(set(sizes.values())) != 1:
        raise ValueError(f"per_question_scores must be paired (the same questions for every variant), "
                         f"got sizes {sizes}")
    n = rows[0].size
    if n == 0:
        raise ValueError("per_question_scores has no questions: there is nothing to resample")
    if len(names) == 1:
        return {names[0]: 1.0}

    scores = np.vstack(rows)  # variants x questions
    wins = np.zeros(len(names), dtype="float64")
    rng = np.random.default_rng(seed)
    batch = max(1, min(n_resamples, _MAX_BATCH_CELLS // (n * len(names))))
    done = 0
    while done < n_resamples:
        size = min(batch, n_resamples - done)
        idx = rng.integers(0, n, size=(size, n))
        means = scores[:, idx].mean(axis=2)  # variants x size
        top = means.max(axis=0)
        winners = means >= top - _TIE
        wins += (winners / winners.sum(axis=0)).sum(axis=1)
        done += size
    return {v: float(w / n_resamples) for v, w in zip(names, wins)}
