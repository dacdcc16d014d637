"""Abstention policies (issue #26): when a variant says "I don't know" and returns nothing.

A variant's ``abstain:`` setting in the variants file::

    abstain: {policy: none}                              # the default: never refuses
    abstain: {policy: threshold, below: 0.45}            # refuses when its confidence < 0.45
    abstain: {policy: auto}                              # the threshold chosen on the tuning questions
    abstain: {policy: auto, objective: f1}               #   ... for the best refusal F1
    abstain: {policy: auto, max_false_refusal: 0.1}      #   ... refusing at most 10% of answerable ones
    abstain: {policy: auto, score: margin}               # with another confidence score

The confidence (``score``) must mean the same across questions, or one threshold cannot serve
them all:

``dense_cosine``  the top cosine of the variant's dense leg (the best chunk's cosine to the
                  question): calibrated by construction, whatever the fusion does with ranks.
                  The default for every variant with a dense leg, and so for rank-fused hybrids,
                  whose fused scores (RRF) say nothing across questions.
``top_score``     the variant's own top score (after its reranker): the default without a dense
                  leg (keyword, bm25, metadata); the legacy ``abstain_below: X`` setting is
                  ``{policy: threshold, below: X, score: top_score}``.
``margin``        the top-1 score minus the top-2 score of the variant's list (the top score
                  alone for a list of one).

A question whose list is empty has no confidence (NaN) and is refused whatever the threshold; a
question is refused when its confidence is strictly below the threshold (equal is answered).

``auto`` chooses the threshold on the tuning part of the question set only (the split fusion
tuning uses, ``tuning:`` in the variants file; never a scored question), by
:func:`eval_pipeline.metrics.selective.choose_threshold`: ``objective: max_false_refusal`` (the
default; at most ``max_false_refusal`` of the answerable tuning questions refused, default 0.05)
or ``objective: f1``. The chosen threshold, its score and what it did on the tuning questions
are recorded with the results (``variant_config``'s ``abstain_tuned``). A tuning part without an
abstention question is refused with an error naming the variant.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from eval_pipeline.common.checks import is_real
from eval_pipeline.metrics.selective import OBJECTIVES
from eval_pipeline.ranking.hits import ChunkHit, RankedDoc

__all__ = ["POLICIES", "SCORES", "AbstainSpec", "confidence", "parse_abstain"]

POLICIES = ("none", "threshold", "auto")
SCORES = ("dense_cosine", "top_score", "margin")
DEFAULT_MAX_FALSE_REFUSAL = 0.05
_KEYS = {"none": {"policy"}, "threshold": {"policy", "below", "score"},
         "auto": {"policy", "score", "objective", "max_false_refusal"}}


@dataclass(frozen=True)
class AbstainSpec:
    """A variant's abstention policy; `below` is the threshold (given, or chosen by `auto`)."""

    policy: str = "none"
    score: str = "top_score"
    below: float | None = None
    objective: str = "max_false_refusal"
    max_false_refusal: float = DEFAULT_MAX_FALSE_REFUSAL

    def describe(self) -> dict[str, Any]:
        """What decides the results (the identity): `below` only when given by the file."""
        if self.policy == "none":
            return {}
        out: dict[str, Any] = {"policy": self.policy, "score": self.score}
        if self.policy == "threshold":
            out["below"] = self.below
        else:
            out["objective"] = self.objective
            if self.objective == "max_false_refusal":
                out["max_false_refusal"] = self.max_false_refusal
        return out


def parse_abstain(raw: Any, where: str, *, has_dense: bool, legacy_below: float | None,
                  at: Callable[..., str] | None = None) -> AbstainSpec:
    """The `abstain:` setting of one variant (`where` names the file, the line of `abstain:` and
    the variant), checked before anything slow: unknown keys, a policy, score or objective not
    listed, a threshold that is not a finite number, a `max_false_refusal` outside [0, 1],
    `dense_cosine` without a dense leg, and `abstain_below` beside `abstain` each raise ValueError
    naming the setting and the bad value. `legacy_below`: the variant's `abstain_below`, the same
    as a threshold policy on its top score. `at(*keys)`: `where` pointing instead at the line of
    the first of these keys of `abstain` in the file (eval_pipeline.ranking.variants.Where), for a
    message about them; without it, `where`."""
    located = at or (lambda *keys: where)
    default_score = "dense_cosine" if has_dense else "top_score"
    if raw is None:
        if legacy_below is not None:
            return AbstainSpec(policy="threshold", score="top_score", below=legacy_below)
        return AbstainSpec(score=default_score)
    if legacy_below is not None:
        raise ValueError(f"{where}: give abstain_below or abstain, not both (abstain_below: X is "
                         "abstain: {policy: threshold, below: X, score: top_score})")
    if isinstance(raw, str):
        raw = {"policy": raw}
    if not isinstance(raw, Mapping):
        raise ValueError(f"{where}: abstain must be a mapping like {{policy: auto}}, got {raw!r}")
    policy = raw.get("policy", "none")
    if policy not in POLICIES:
        raise ValueError(f"{located('policy')}: abstain.policy {policy!r} is not valid; valid: {', '.join(POLICIES)}")
    unknown = sorted(set(raw) - _KEYS[policy], key=str)
    if unknown:
        raise ValueError(f"{located(*unknown)}: abstain with policy {policy} has no setting(s) {unknown}; valid: "
                         f"{', '.join(sorted(_KEYS[policy]))}")
    score = raw.get("score", default_score)
    if score not in SCORES:
        raise ValueError(f"{located('score')}: abstain.score {score!r} is not valid; valid: {', '.join(SCORES)}")
    if score == "dense_cosine" and not has_dense:
        raise ValueError(f"{located('score')}: abstain.score dense_cosine needs a dense leg, and this variant has "
                         "none; use top_score or margin")
    if policy == "none":
        return AbstainSpec(score=default_score)
    if policy == "threshold":
        if "below" not in raw:
            raise ValueError(f"{where}: abstain with policy threshold needs below (the threshold), e.g. "
                             "{policy: threshold, below: 0.4}")
        below = raw["below"]
        if isinstance(below, bool) or not is_real(below) or not math.isfinite(float(below)):
            raise ValueError(f"{located('below')}: abstain.below must be a finite number, got {below!r}")
        return AbstainSpec(policy="threshold", score=score, below=float(below))
    objective = raw.get("objective", "max_false_refusal")
    if objective not in OBJECTIVES:
        raise ValueError(f"{located('objective')}: abstain.objective {objective!r} is not valid; valid: "
                         f"{', '.join(OBJECTIVES)}")
    limit = raw.get("max_false_refusal", DEFAULT_MAX_FALSE_REFUSAL)
    if isinstance(limit, bool) or not is_real(limit) or not 0.0 <= float(limit) <= 1.0:
        raise ValueError(f"{located('max_false_refusal')}: abstain.max_false_refusal must be a number in [0, 1], "
                         f"got {limit!r}")
    if "max_false_refusal" in raw and objective != "max_false_refusal":
        raise ValueError(f"{located('max_false_refusal')}: abstain.max_false_refusal applies to objective "
                         f"max_false_refusal (got objective: {objective})")
    return AbstainSpec(policy="auto", score=score, objective=objective, max_false_refusal=float(limit))


def confidence(score: str, final: Sequence[RankedDoc], dense_hits: Sequence[ChunkHit] | None) -> float:
    """A question's confidence under `score` (see the module docstring): NaN for an empty list
    (and for `dense_cosine` without dense hits)."""
    if not final:
        return math.nan
    if score == "dense_cosine":
        return max((float(h.score) for h in dense_hits or ()), default=math.nan)
    if score == "top_score":
        return float(final[0].score)
    if score == "margin":
        return float(final[0].score) - (float(final[1].score) if len(final) > 1 else 0.0)
    raise ValueError(f"abstain.score {score!r} is not valid; valid: {', '.join(SCORES)}")


def refuses(spec: AbstainSpec, value: float) -> bool:
    """Whether the policy refuses a question of confidence `value` (NaN: an empty list, refused)."""
    if math.isnan(value):
        return True
    return spec.below is not None and value < spec.below
