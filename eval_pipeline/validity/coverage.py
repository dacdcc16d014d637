"""Label completeness: how much of what a variant retrieved carries a relevance judgement.

Every metric in :mod:`eval_pipeline.metrics.retrieval` scores a document that is absent from
the qrels as non-relevant. With one gold document per question that is a strong
assumption: a variant that surfaces *other* documents (a different embedder, a reranker)
is scored as if every one of them were wrong, even when some answer the question. The
comparison is then biased against exactly the variants that differ most from the ones the
labels were written from. Judged@k makes that visible, and :func:`pooled_unjudged` lists
the holes so a grader (an LLM or a person) can fill them.

Conventions (shared with :mod:`eval_pipeline.metrics.retrieval` where they overlap)
------------------------------------------------------------------------------
Ranking
    Document ids best first. Only the first occurrence of a doc id counts (``[a, b, a, c]``
    is read as ``[a, b, c]``); a bare ``str`` is rejected with ``TypeError``. This is the
    same ``_dedupe`` the metrics use, so Judged@k describes the very list they scored.

Judged
    A document is *judged* for a question iff it is a key of that question's qrels, with
    any grade: relevant (``> 0``), judged non-relevant (``0``) or negative. Only its
    presence matters. A document absent from the qrels is *unjudged*.

Cutoff ``k`` and short rankings
    ``judged_at_k`` divides by ``k``, not by the number of documents retrieved, like
    ``P@k`` in the metrics and like the original Judged@k (OpenNIR; ``ir_measures``
    documents it as "P@k with a rel lower than any judgement"). A ranking shorter than
    ``k`` therefore scores ``judged / k``. (The current ``ir_measures`` implementation
    divides by ``min(k, len(ranking))`` instead; the two agree whenever at least ``k``
    documents were retrieved.) The unjudged *count* is not affected by short rankings, so
    the summary reports it next to the share.

Empty rankings
    Score ``0.0`` Judged@k and ``0`` unjudged documents: ``0 / k``, the value the rule
    above gives. Not NaN, because the summary averages over questions, and a NaN would
    either poison the mean or, if skipped, change ``n`` silently.

Empty qrels (abstention questions)
    The per-question functions accept them (everything retrieved is unjudged). The
    run-level functions leave abstention questions (no grade ``> 0``) out by default: their
    label says that *nothing* in the corpus answers them, i.e. every document is implicitly
    judged non-relevant, so "unjudged" has no meaning there.

No function mutates its inputs.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping

import pandas as pd

from eval_pipeline.common.checks import is_real
from eval_pipeline.metrics.retrieval import Qrels, Ranking, _check_k, _dedupe

__all__ = [
    "JUDGED_SUMMARY_COLUMNS",
    "judged_at_k",
    "judged_spread_warning",
    "judged_summary",
    "pooled_unjudged",
    "unjudged_in_top_k",
]

JUDGED_SUMMARY_COLUMNS = [
    "variant", "k", "n_questions", "judged", "unjudged_total", "unjudged_mean", "n_short", "n_errored_excluded",
]

# Same slack as eval_pipeline.gates.retrieval.EPSILON: a spread exactly equal to the threshold
# must not warn because of float noise in the means.
_EPSILON = 1e-12


# --------------------------------------------------------------------------
# validation helpers
# --------------------------------------------------------------------------


def _check_qrels(qrels: object, name: str = "qrels") -> Mapping[str, int]:
    if not isinstance(qrels, Mapping):
        raise TypeError(f"{name} must be a mapping of doc id -> grade, got {type(qrels).__name__}")
    return qrels


def _top_k(ranking: Ranking, k: int) -> list[str]:
    return [str(d) for d in _dedupe(ranking)[:k]]


def _has_relevant(qrels: Mapping[str, int]) -> bool:
    return any(grade > 0 for grade in qrels.values())


def _ranking_value(value: object, where: str) -> list[str]:
    """A stored ``doc_ids`` cell as a list: None/NaN (an errored row) is an empty ranking;
    a numpy array (what a parquet round trip gives back) is accepted like a list."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return []
    if isinstance(value, (str, bytes)):
        raise TypeError(f"{where} must be a sequence of doc ids, not a single string: {value!r}")
    try:
        return [str(d) for d in value]  # type: ignore[attr-defined]  # not iterable: the TypeError below
    except TypeError:
        raise TypeError(f"{where} must be a sequence of doc ids, got {type(value).__name__}") from None


def _rankings_of(source: object, name: str) -> tuple[dict[str, list[str]], set[str]]:
    """``(qid -> ranking, errored qids)`` from one variant's results.

    ``source`` is either a DataFrame with ``qid`` and ``doc_ids`` columns (the ranked results
    of :mod:`eval_pipeline.ranking.results`, whose ``error`` column marks errored questions,
    or the per-question frame of :func:`eval_pipeline.scoring.variant.score_variant`, whose
    ``errored`` column does), or a plain mapping ``qid -> ranking`` (no errors).
    """
    if isinstance(source, pd.DataFrame):
        missing = [c for c in ("qid", "doc_ids") if c not in source.columns]
        if missing:
            raise ValueError(f"{name} is missing column(s) {missing}")
        qids = [str(q) for q in source["qid"]]
        dupes = sorted(q for q, n in Counter(qids).items() if n > 1)
        if dupes:
            raise ValueError(f"{name} has duplicate qid(s) {dupes[:10]}")
        if "errored" in source.columns:
            errored_flags = [bool(v) for v in source["errored"].fillna(False)]
        elif "error" in source.columns:
            errored_flags = list(source["error"].notna())
        else:
            errored_flags = [False] * len(qids)
        rankings = {
            qid: _ranking_value(value, f"{name} doc_ids of {qid!r}")
            for qid, value in zip(qids, source["doc_ids"])
        }
        return rankings, {q for q, e in zip(qids, errored_flags) if e}
    if isinstance(source, Mapping):
        return {str(q): _ranking_value(r, f"{name}[{q!r}]") for q, r in source.items()}, set()
    raise TypeError(f"{name} must be a DataFrame (qid, doc_ids) or a mapping of qid -> ranking, "
                    f"got {type(source).__name__}")


def _check_variants(rankings: object, name: str) -> Mapping[str, object]:
    if not isinstance(rankings, Mapping):
        raise TypeError(f"{name} must be a mapping of variant -> results, got {type(rankings).__name__}")
    if not rankings:
        raise ValueError(f"{name} is empty: there are no variants to look at")
    return rankings


def _check_all_qrels(qrels: object) -> Mapping[str, Mapping[str, int]]:
    if not isinstance(qrels, Mapping):
        raise TypeError(f"qrels must be a mapping of qid -> (doc id -> grade), got {type(qrels).__name__}")
    for qid, q in qrels.items():
        _check_qrels(q, f"qrels[{qid!r}]")
    return qrels


# --------------------------------------------------------------------------
# per question
# --------------------------------------------------------------------------


def judged_at_k(ranking: Ranking, qrels: Qrels, k: int) -> float:
    """Share of the top ``k`` positions filled by a judged document (any grade), over ``k``.

    Divides by ``k`` even when fewer documents were retrieved, so an empty ranking scores
    0.0 (see the module docstring for why, and how this differs from ``ir_measures``).
    """
    k = _check_k(k)
    qrels = _check_qrels(qrels)
    return sum(1 for d in _top_k(ranking, k) if d in qrels) / k


def unjudged_in_top_k(ranking: Ranking, qrels: Qrels, k: int) -> int:
    """Number of retrieved documents in the top ``k`` that have no judgement at all.

    These are the documents the metrics silently count as non-relevant. Unlike
    :func:`judged_at_k` it does not depend on whether the ranking reaches ``k``.
    """
    k = _check_k(k)
    qrels = _check_qrels(qrels)
    return sum(1 for d in _top_k(ranking, k) if d not in qrels)


# --------------------------------------------------------------------------
# run level
# --------------------------------------------------------------------------


def judged_summary(
    per_variant: Mapping[str, pd.DataFrame | Mapping[str, Ranking]],
    qrels: Mapping[str, Qrels],
    k: int = 10,
) -> pd.DataFrame:
    """One row per variant (mapping order) on how completely its top ``k`` is labelled.

    ``per_variant`` maps variant -> its ranked results or per-question frame (columns
    ``qid``, ``doc_ids`` and ``error`` or ``errored``), or a plain ``qid -> ranking``
    mapping. ``qrels`` maps qid -> graded judgements (``{q.qid: q.qrels() for q in
    questions}``).

    The population is the answerable questions (a grade ``> 0`` in the qrels), as for the
    metric means, with two differences, both so that the number speaks about the *labels*:

    * abstention questions are left out (every document is implicitly judged for them);
    * errored questions are left out and counted in ``n_errored_excluded``: an error
      retrieved nothing, and counting it as 0 judged would make an erroring variant look
      under-labelled and raise a label-bias warning that is really an engine error
      (errors are reported and block the run elsewhere).

    A question in the qrels but absent from a variant's results is scored as an empty
    ranking (as :func:`eval_pipeline.metrics.retrieval.score_queries` does); a qid in the
    results but not in the qrels raises ValueError naming it.

    Columns (:data:`JUDGED_SUMMARY_COLUMNS`): ``variant``, ``k``, ``n_questions``,
    ``judged`` (mean Judged@k; NaN with no question), ``unjudged_total``, ``unjudged_mean``
    (NaN with no question), ``n_short`` (questions whose ranking has fewer than ``k``
    documents, which lowers ``judged`` without being a labelling gap) and
    ``n_errored_excluded``.
    """
    k = _check_k(k)
    per_variant = _check_variants(per_variant, "per_variant")
    known = {str(q): judged for q, judged in _check_all_qrels(qrels).items()}
    answerable = sorted(q for q, judged in known.items() if _has_relevant(judged))
    rows = []
    for variant, source in per_variant.items():
        rankings, errored = _rankings_of(source, f"per_variant[{variant!r}]")
        unknown = sorted(set(rankings) - set(known))
        if unknown:
            raise ValueError(f"per_variant[{variant!r}] has qid(s) not in qrels: {unknown[:10]}")
        judged_values: list[float] = []
        unjudged_values: list[int] = []
        n_short = 0
        excluded = 0
        for qid in answerable:
            if qid in errored:
                excluded += 1
                continue
            ranking = rankings.get(qid, [])
            judged = known[qid]
            judged_values.append(judged_at_k(ranking, judged, k))
            unjudged_values.append(unjudged_in_top_k(ranking, judged, k))
            n_short += len(_top_k(ranking, k)) < k
        n = len(judged_values)
        rows.append({
            "variant": variant,
            "k": k,
            "n_questions": n,
            "judged": math.fsum(judged_values) / n if n else math.nan,
            "unjudged_total": int(sum(unjudged_values)),
            "unjudged_mean": sum(unjudged_values) / n if n else math.nan,
            "n_short": int(n_short),
            "n_errored_excluded": int(excluded),
        })
    return pd.DataFrame(rows, columns=JUDGED_SUMMARY_COLUMNS)


def judged_spread_warning(
    per_variant_judged: Mapping[str, float], threshold: float = 0.1, *, k: int = 10
) -> str | None:
    """A warning when Judged@k differs between variants by more than ``threshold``, else None.

    Why it matters: unjudged documents count as non-relevant. With one gold document per
    question, a variant that surfaces documents the labels never looked at is scored as if
    each of them were wrong, so its metrics are biased downwards against variants that
    retrieve what the labels were written from. A large spread in Judged@k says the metric
    comparison is partly a comparison of label coverage.

    ``per_variant_judged`` maps variant -> mean Judged@k in [0, 1] (the ``judged`` column of
    :func:`judged_summary`); NaN values (a variant with no question to measure) are
    skipped. Fewer than two measured variants give None. The warning names every variant
    at the highest and at the lowest value (mapping order). A spread exactly equal to the
    threshold does not warn. ``k`` only labels the text.
    """
    if not isinstance(per_variant_judged, Mapping):
        raise TypeError(f"per_variant_judged must be a mapping of variant -> Judged@k, "
                        f"got {type(per_variant_judged).__name__}")
    if not is_real(threshold) or not (0.0 <= float(threshold) < 1.0):
        raise ValueError(f"threshold must be a number in [0, 1), got {threshold!r}")
    k = _check_k(k)
    values: dict[str, float] = {}
    for variant, value in per_variant_judged.items():
        if not is_real(value):
            raise ValueError(f"per_variant_judged[{variant!r}] must be a number, got {value!r}")
        v = float(value)
        if math.isnan(v):
            continue
        if not 0.0 <= v <= 1.0:
            raise ValueError(f"per_variant_judged[{variant!r}] must be in [0, 1], got {value!r}")
        values[variant] = v
    if len(values) < 2:
        return None
    high, low = max(values.values()), min(values.values())
    spread = high - low
    if spread <= float(threshold) + _EPSILON:
        return None
    highest = ", ".join(f"{v!s}" for v, x in values.items() if x == high)
    lowest = ", ".join(f"{v!s}" for v, x in values.items() if x == low)
    return (
        f"Judged@{k} differs by {spread:.2f} between variants (more than {float(threshold):.2f}): "
        f"highest {highest} ({high:.2f}), lowest {lowest} ({low:.2f}). Documents without a judgement "
        f"count as non-relevant, so with one gold document per question a variant that surfaces "
        f"documents the labels never looked at is scored as if they were wrong: the comparison is "
        f"biased against {lowest}. Grade the unjudged documents of the pooled top {k} before trusting "
        f"the ranking of these variants."
    )


def pooled_unjudged(
    per_variant: Mapping[str, pd.DataFrame | Mapping[str, Ranking]],
    qrels: Mapping[str, Qrels],
    k: int = 10,
    *,
    include_abstention: bool = False,
) -> list[tuple[str, str]]:
    """The holes in the labels: ``(qid, doc_id)`` pairs retrieved in the top ``k`` of at least
    one variant and judged for none, sorted by qid then doc id, each pair once.

    This is the TREC pooling step: the union of every variant's top ``k`` is what a
    grader must look at so that no variant is scored on documents nobody judged.
    ``per_variant`` and ``qrels`` are as in :func:`judged_summary`. Errored questions
    contribute nothing (their ranking counts as empty, as in the metrics).

    Abstention questions are skipped unless ``include_abstention`` is True: their label
    already declares every document non-relevant, but grading their pooled documents is a
    way to check that label (a relevant document found there is a labelling error).
    """
    k = _check_k(k)
    per_variant = _check_variants(per_variant, "per_variant")
    qrels = _check_all_qrels(qrels)
    if not isinstance(include_abstention, bool):
        raise TypeError(f"include_abstention must be True or False, got {include_abstention!r}")
    known = {str(q): judged for q, judged in qrels.items()}
    holes: set[tuple[str, str]] = set()
    for variant, source in per_variant.items():
        rankings, errored = _rankings_of(source, f"per_variant[{variant!r}]")
        unknown = sorted(set(rankings) - set(known))
        if unknown:
            raise ValueError(f"per_variant[{variant!r}] has qid(s) not in qrels: {unknown[:10]}")
        for qid, ranking in rankings.items():
            judged = known[qid]
            if qid in errored or (not include_abstention and not _has_relevant(judged)):
                continue
            holes.update((qid, d) for d in _top_k(ranking, k) if d not in judged)
    return sorted(holes)
