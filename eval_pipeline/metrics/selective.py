"""Selective retrieval (issue #26): a variant that may refuse ("I don't know") is measured on what
it refuses as well as on what it returns. One pure function per measure, registered in the
measure registry (:data:`eval_pipeline.metrics.retrieval.MEASURES`) as *run* measures: each is
computed once per variant from its per-question rows (:func:`eval_pipeline.metrics.retrieval.aggregate`).

Conventions
-----------
Refused
    A question is refused when the variant returned nothing (``returned == 0``) and did not
    error: its abstention policy refused it, or its engine found nothing (a keyword AND-match).
    An errored question is never a refusal (neither a correct nor a false one).

The rates
    * ``correct_refusal_rate``: abstention questions (no gold document) refused / abstention
      questions; NaN without abstention questions. Higher is better.
    * ``false_refusal_rate``: answerable questions refused / answerable questions; NaN without
      answerable questions. Lower is better (the gate reads a rise as the regression).
    * ``refusal_f1``: F1 of the refusals as a detector of abstention questions:
      2·correct / (refused + abstention questions); NaN without abstention questions, 0.0 when
      nothing is refused.

Confidence and loss (the risk–coverage curve)
    ``confidence`` (a per-question column the sweep fills, see
    :mod:`eval_pipeline.ranking.abstention`): how sure the variant is that it has an answer; a
    missing (NaN) confidence is the least sure. A question's *loss* is 1 when answering it is
    wrong and 0 when right: an answerable question is right when a gold document is in the top
    10 of the variant's list *before* any refusal (column ``hit@10 without refusal``, else
    ``hit@10``); an abstention question is always wrong to answer; an errored one is wrong.

    Answering the most confident questions first, coverage c = answered / all and risk = mean
    loss of the answered. Tied confidences are answered together (the curve steps over the whole
    group: the order among ties is not the variant's to choose).
    * ``aurc``: the area under the risk–coverage curve, the mean over questions of the risk at
      the coverage where each is answered (lower is better).
    * ``rc_nauc``: normalised like MTEB's nAUC: (random − aurc) / (random − oracle), where random
      is the overall risk (the expected AURC of a confidence that knows nothing) and oracle the
      AURC of answering every right question first, one at a time: 1 is perfect, 0 no better
      than chance, below 0 worse (ties in the variant's confidence cost it: they are answered
      together);
      NaN when every loss is equal (nothing to rank).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal

import numpy as np
import pandas as pd

from eval_pipeline.common.checks import is_real
from eval_pipeline.metrics.retrieval import MEASURES, Measure

__all__ = ["OBJECTIVES", "ThresholdChoice", "aurc", "choose_threshold", "correct_refusal_rate",
           "false_refusal_rate", "losses", "rc_nauc", "refusal_f1", "refused", "risk_coverage",
           "risk_coverage_points"]

OBJECTIVES = ("max_false_refusal", "f1")
Objective = Literal["max_false_refusal", "f1"]
UNREFUSED_HIT = "hit@10 without refusal"


def refused(per_query: pd.DataFrame) -> pd.Series:
    """Which questions were refused: nothing returned, no error."""
    return (per_query["returned"] == 0) & ~per_query["errored"].astype(bool)


def _rate(hits: pd.Series, among: pd.Series) -> float:
    n = int(among.sum())
    return float((hits & among).sum()) / n if n else math.nan


def correct_refusal_rate(per_query: pd.DataFrame) -> float:
    """Abstention questions refused / abstention questions (NaN without any)."""
    return _rate(refused(per_query), ~per_query["answerable"].astype(bool))


def false_refusal_rate(per_query: pd.DataFrame) -> float:
    """Answerable questions refused / answerable questions (NaN without any)."""
    return _rate(refused(per_query), per_query["answerable"].astype(bool))


def refusal_f1(per_query: pd.DataFrame) -> float:
    """2·correct refusals / (refusals + abstention questions); NaN without abstention questions."""
    abstention = ~per_query["answerable"].astype(bool)
    n_abst = int(abstention.sum())
    if not n_abst:
        return math.nan
    out = refused(per_query)
    return 2.0 * float((out & abstention).sum()) / (float(out.sum()) + n_abst)


def losses(per_query: pd.DataFrame) -> np.ndarray:
    """Each question's loss when answered (see the module docstring)."""
    hit = per_query[UNREFUSED_HIT] if UNREFUSED_HIT in per_query else per_query["hit@10"]
    answerable = per_query["answerable"].astype(bool).to_numpy()
    errored = per_query["errored"].astype(bool).to_numpy()
    right = answerable & ~errored & (hit.astype("float64").fillna(0.0).to_numpy() > 0)
    return np.where(right, 0.0, 1.0)


def _confidence(per_query: pd.DataFrame) -> np.ndarray:
    if "confidence" not in per_query:
        return np.full(len(per_query), np.nan)
    return per_query["confidence"].astype("float64").to_numpy()


def risk_coverage_points(confidence: Sequence[float] | np.ndarray,
                         loss: Sequence[float] | np.ndarray) -> list[tuple[float, float]]:
    """(coverage, risk) after each group of tied confidences, most confident first (NaN last, one
    group). Empty input: no points."""
    conf = np.asarray(confidence, dtype="float64")
    loss_ = np.asarray(loss, dtype="float64")
    n = len(conf)
    if not n:
        return []
    key = np.where(np.isnan(conf), -np.inf, conf)
    order = np.argsort(-key, kind="stable")
    points = []
    total = 0.0
    i = 0
    while i < n:
        j = i
        while j + 1 < n and key[order[j + 1]] == key[order[i]]:
            j += 1
        total += float(loss_[order[i:j + 1]].sum())
        points.append(((j + 1) / n, total / (j + 1)))
        i = j + 1
    return points


def risk_coverage(confidence: Sequence[float] | np.ndarray, loss: Sequence[float] | np.ndarray) -> float:
    """The area under the risk–coverage curve: each question weighs 1/n at the risk of the
    coverage where its group is answered. NaN for no questions."""
    conf = np.asarray(confidence, dtype="float64")
    n = len(conf)
    if not n:
        return math.nan
    points = risk_coverage_points(conf, loss)
    area, before = 0.0, 0.0
    for coverage, risk in points:
        area += (coverage - before) * risk
        before = coverage
    return area


def _has_losses(per_query: pd.DataFrame) -> bool:
    return UNREFUSED_HIT in per_query or "hit@10" in per_query


def aurc(per_query: pd.DataFrame) -> float:
    """The area under the variant's risk–coverage curve (lower is better); NaN without hit@10."""
    if not _has_losses(per_query):
        return math.nan
    return risk_coverage(_confidence(per_query), losses(per_query))


def _oracle(loss: np.ndarray) -> float:
    """The AURC of answering every right question first, one by one (no ties: the best any
    confidence can do)."""
    ordered = np.sort(loss)
    answered = np.arange(1, len(ordered) + 1)
    return float((np.cumsum(ordered) / answered).mean())


def rc_nauc(per_query: pd.DataFrame) -> float:
    """(random − aurc) / (random − oracle): 1 perfect, 0 chance; NaN when every loss is equal."""
    if not _has_losses(per_query):
        return math.nan
    loss = losses(per_query)
    if not len(loss):
        return math.nan
    random = float(loss.mean())
    oracle = _oracle(loss)
    if math.isclose(random, oracle, abs_tol=1e-15):
        return math.nan
    return (random - aurc(per_query)) / (random - oracle)


def _lost_nothing(row: Mapping[str, object]) -> bool:
    """Whether a summary row's run lost nothing (aurc exactly 0: every question right, so every
    confidence is as good as the oracle): its NaN rc_nauc is at its best, not a run that lost
    everything (aurc 1), whose rc_nauc is NaN too."""
    value = row.get("aurc")
    return is_real(value) and float(value) == 0.0


# --------------------------------------------------------------------------
# the threshold (the abstention policy `auto`)
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class ThresholdChoice:
    """A chosen refusal threshold and what it did on the questions it was chosen on: a question is
    refused when its confidence is below ``threshold`` (None: nothing is refused for its
    confidence; a question with no confidence, an empty list, is refused whatever the threshold)."""

    threshold: float | None
    objective: str
    max_false_refusal: float | None
    n_answerable: int
    n_abstention: int
    correct_refusals: int
    false_refusals: int
    correct_refusal_rate: float
    false_refusal_rate: float
    refusal_f1: float

    def provenance(self) -> dict[str, Any]:
        return asdict(self)


def choose_threshold(confidence: Sequence[float], answerable: Sequence[bool], *, objective: str = "max_false_refusal",
                     max_false_refusal: float = 0.05, where: str = "the tuning questions") -> ThresholdChoice:
    """The refusal threshold for `objective`, from the questions given (the tuning part only: the
    caller's duty). Candidates: no threshold, and each distinct finite confidence c (refuse when
    confidence < c: a question as confident as c is answered).

    * ``max_false_refusal``: among the candidates whose false-refusal rate is at most
      `max_false_refusal`, the one refusing the most abstention questions, then the fewest
      answerable ones, then the lowest threshold.
    * ``f1``: the best refusal F1 (2·correct / (refused + abstention questions)), ties to the
      lowest threshold (fewest refusals); no threshold when no candidate refuses correctly.

    Refused with a ValueError naming `where`: no abstention question (nothing to learn refusal
    from), no answerable question, lengths that differ, an unknown objective or a
    `max_false_refusal` outside [0, 1]."""
    if objective not in OBJECTIVES:
        raise ValueError(f"objective {objective!r} is not valid; valid: {', '.join(OBJECTIVES)}")
    if not (isinstance(max_false_refusal, (int, float)) and not isinstance(max_false_refusal, bool)
            and 0.0 <= float(max_false_refusal) <= 1.0):
        raise ValueError(f"max_false_refusal must be a number in [0, 1], got {max_false_refusal!r}")
    conf = np.asarray(confidence, dtype="float64")
    ans = np.asarray(answerable, dtype=bool)
    if conf.shape != ans.shape:
        raise ValueError(f"{where}: {len(conf)} confidences for {len(ans)} questions")
    n_ans, n_abst = int(ans.sum()), int((~ans).sum())
    if not n_abst:
        raise ValueError(f"{where} hold no abstention question ({n_ans} answerable): a refusal threshold cannot be "
                         "chosen without questions that should be refused; add abstention questions (a generated set's "
                         "abstention_frac) or use abstain: {policy: threshold, below: X}")
    if not n_ans:
        raise ValueError(f"{where} hold no answerable question: a false-refusal rate cannot be measured")
    missing = np.isnan(conf)
    candidates: list[float | None] = [None, *sorted(set(conf[~missing].tolist()))]
    best: tuple | None = None
    chosen: tuple[float | None, int, int] = (None, 0, 0)
    for t in candidates:
        out = missing if t is None else (missing | (np.nan_to_num(conf, nan=-np.inf) < t))
        cr, fr = int((out & ~ans).sum()), int((out & ans).sum())
        low = -math.inf if t is None else t
        if objective == "max_false_refusal":
            if fr / n_ans > max_false_refusal + 1e-12:
                continue
            rank: tuple = (cr, -fr, -low)
        else:
            f1 = 2.0 * cr / (cr + fr + n_abst)
            rank = (f1, -low)
        if best is None or rank > best:
            best, chosen = rank, (t, cr, fr)
    t, cr, fr = chosen
    return ThresholdChoice(threshold=t, objective=objective,
                           max_false_refusal=float(max_false_refusal) if objective == "max_false_refusal" else None,
                           n_answerable=n_ans, n_abstention=n_abst, correct_refusals=cr, false_refusals=fr,
                           correct_refusal_rate=cr / n_abst, false_refusal_rate=fr / n_ans,
                           refusal_f1=2.0 * cr / (cr + fr + n_abst))


_RUN = "run"
for _measure in (
    Measure("correct_refusal_rate", correct_refusal_rate, None, "abstention questions refused (nothing returned, "
            "no error) / abstention questions", scope=_RUN),
    Measure("false_refusal_rate", false_refusal_rate, None, "answerable questions refused / answerable questions",
            scope=_RUN, higher_is_better=False),
    Measure("refusal_f1", refusal_f1, None, "2 * correct refusals / (refusals + abstention questions)", scope=_RUN),
    Measure("aurc", aurc, None, "area under the risk-coverage curve by confidence; loss 1 - hit@10 before refusal, "
            "1 for an abstention question answered", scope=_RUN, higher_is_better=False),
    Measure("rc_nauc", rc_nauc, None, "(random - aurc) / (random - oracle), MTEB-style nAUC", scope=_RUN,
            nan_at_best=_lost_nothing),
):
    MEASURES.register(_measure)
