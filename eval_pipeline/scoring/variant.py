"""Scores a variant's ranked results: per-question rows, and one summary row per variant."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from eval_pipeline.metrics.retrieval import (
    DEFAULT_KS,
    HEADLINE,
    SLICED,
    aggregate,
    is_metric,
    metric_names,
    score_queries,
)
from eval_pipeline.questions.sets import Question, question_set_fingerprint
from eval_pipeline.ranking.diagnosis import MISS_CLASSES
from eval_pipeline.ranking.microscope import DENSE_CAUSES, TRIAGE_LABELS
from eval_pipeline.ranking.results import PROVENANCE_COLUMNS, STAGE_COLUMNS

_SCORE_COLUMNS = ("qid", "answerable", "errored", "returned", "first_relevant_rank")
HEADLINE_METRICS = metric_names(HEADLINE)  # live: a measure registered later is in


def score_variant(results: pd.DataFrame, questions: Sequence[Question], ks=DEFAULT_KS) -> pd.DataFrame:
    """One row per question with every metric, the question's labels, what the variant
    returned, its latency by stage and, for a miss, the diagnosis; the columns that say what
    produced the results are kept (see `eval_pipeline.ranking.results.PROVENANCE_COLUMNS`).

    The results must be for exactly these questions and labels: results ranked for another
    question set (a partition materialized before the questions or their labels changed)
    are refused, naming the difference, instead of being scored against labels they were
    not ranked for."""
    if "questions_fingerprint" in results:
        ranked_for = sorted(set(results["questions_fingerprint"].dropna()))
        current = question_set_fingerprint(questions)
        if ranked_for != [current]:
            raise ValueError(f"the results were ranked for another question set ({ranked_for or 'unknown'}) "
                             f"than the one being scored ({current!r}); rank this variant again")
    expected, got = [q.qid for q in questions], list(results["qid"])
    if sorted(expected) != sorted(got):
        missing, extra = sorted(set(expected) - set(got)), sorted(set(got) - set(expected))
        raise ValueError(f"the ranked results are for other questions than the question set: missing "
                         f"{missing[:5]}{' …' if len(missing) > 5 else ''} ({len(missing)}), not in the set "
                         f"{extra[:5]}{' …' if len(extra) > 5 else ''} ({len(extra)}); rank this variant again")
    qrels = {q.qid: q.qrels() for q in questions}
    rankings = dict(zip(results["qid"], results["doc_ids"]))
    errored = set(results.loc[results["error"].notna(), "qid"])
    scored = score_queries(rankings, qrels, errored=errored, ks=ks)
    scored = _without_refusal(scored, results, qrels, errored, ks)
    info = pd.DataFrame(
        {
            "qid": [q.qid for q in questions],
            "question": [q.question for q in questions],
            "gold": [list(q.gold) for q in questions],
            "form": [q.form for q in questions],
            "hard_class": [q.hard_class for q in questions],
        }
    )
    keep = ["qid", "doc_ids", "chunk_ids", "scores", "latency_ms", *STAGE_COLUMNS, "error", "abstained", "confidence",
            "miss_class",
            "triage", "dense_cause", "microscope", "rerank_fallback", "diagnosis_error", "index", "tuning_fingerprint",
            *PROVENANCE_COLUMNS]
    scored = scored.merge(info, on="qid", how="left").merge(results[[c for c in keep if c in results]], on="qid",
                                                            how="left")
    variant = results["variant"].iloc[0] if len(results) else ""
    scored.insert(0, "variant", variant)
    return scored


# The answerable metrics reported both with the variant's refusals and without them (its list
# before the refusal), and the per-question column each "without" lands in.
UNREFUSED_METRICS = ("hit@1", "hit@5", "hit@10", "mrr", "ndcg@10")
WITHOUT_REFUSAL = " without refusal"


def _without_refusal(scored: pd.DataFrame, results: pd.DataFrame, qrels, errored, ks) -> pd.DataFrame:
    """`scored` with a `<metric> without refusal` column per UNREFUSED_METRICS: the metric of the
    list the variant would have returned had it not refused (`unrefused_doc_ids`); equal to the
    metric for every question it did not refuse (and NaN for abstention questions, as the metric)."""
    out = scored.copy()
    for m in UNREFUSED_METRICS:
        out[m + WITHOUT_REFUSAL] = out[m]
    if "unrefused_doc_ids" not in results:
        return out
    refused = {qid: docs for qid, docs in zip(results["qid"], results["unrefused_doc_ids"])
               if docs is not None and not (isinstance(docs, float) and pd.isna(docs))}
    if not refused:
        return out
    again = score_queries({q: list(d) for q, d in refused.items()}, {q: qrels[q] for q in refused},
                          errored=[q for q in refused if q in errored], ks=ks).set_index("qid")
    rows = out["qid"].isin(list(refused))
    for m in UNREFUSED_METRICS:
        out.loc[rows, m + WITHOUT_REFUSAL] = out.loc[rows, "qid"].map(again[m]).to_numpy()
    return out


def summarize(per_query: Mapping[str, pd.DataFrame]) -> pd.DataFrame:
    """One row per variant (in the given order): metric means over answerable questions
    (errored ones count as misses), counts, abstention slice, latency and miss classes."""
    rows = []
    for variant, frame in per_query.items():
        kept = [c for c in frame.columns if c in _SCORE_COLUMNS or is_metric(c) or c == "confidence"
                or c == "hit@10" + WITHOUT_REFUSAL]
        row = {"variant": variant, **aggregate(frame[kept])}
        answerable = frame["answerable"].astype(bool) if "answerable" in frame else pd.Series(dtype=bool)
        for m in UNREFUSED_METRICS:  # the answerable metrics without the variant's refusals
            column = m + WITHOUT_REFUSAL
            values = frame.loc[answerable, column] if column in frame else frame.loc[answerable, m] \
                if m in frame else pd.Series(dtype=float)
            row[column] = float(values.astype("float64").mean()) if len(values) else float("nan")
        row["latency_p50_ms"] = float(frame["latency_ms"].quantile(0.5)) if len(frame) else float("nan")
        row["latency_p95_ms"] = float(frame["latency_ms"].quantile(0.95)) if len(frame) else float("nan")
        row["n_rerank_fallback"] = int(frame["rerank_fallback"].fillna(False).astype(bool).sum()) \
            if "rerank_fallback" in frame else 0
        misses = frame["miss_class"].value_counts() if "miss_class" in frame else pd.Series(dtype=int)
        for cls in MISS_CLASSES:
            row[f"miss_{cls}"] = int(misses.get(cls, 0))
        row.update(triage_counts(frame))
        rows.append(row)
    return pd.DataFrame(rows)


def triage_counts(frame: pd.DataFrame) -> dict[str, int]:
    """The microscope's counts for one variant's per-question rows: `triage_<label>` for every
    triage label and `dense_<cause>` for every dense cause (0 when none; all 0 for results ranked
    before the microscope existed, which have no `triage` column)."""
    labels = frame["triage"].value_counts() if "triage" in frame else pd.Series(dtype=int)
    causes = frame["dense_cause"].value_counts() if "dense_cause" in frame else pd.Series(dtype=int)
    return {**{f"triage_{label}": int(labels.get(label, 0)) for label in TRIAGE_LABELS},
            **{f"dense_{cause}": int(causes.get(cause, 0)) for cause in DENSE_CAUSES}}


def slice_summary(per_query: pd.DataFrame, mask: pd.Series,
                  metrics: Sequence[str] = metric_names(SLICED)) -> pd.DataFrame:
    """Mean of `metrics` per variant over the answerable questions selected by `mask`."""
    sub = per_query[mask & per_query["answerable"]]
    out = sub.groupby("variant", sort=False)[list(metrics)].mean()
    out["n"] = sub.groupby("variant", sort=False).size()
    return out.reset_index()


# The question fields a breakdown is made by, and what each class row shows.
CLASS_FIELDS = ("form", "hard_class")
CLASS_METRICS = ("hit@1", "hit@5", "mrr", "ndcg@10")
UNLABELLED = "(none)"  # a question with no value for a field: its own class, never dropped


def class_breakdown(per_query: pd.DataFrame, fields: Sequence[str] = CLASS_FIELDS,
                    metrics: Sequence[str] = CLASS_METRICS) -> pd.DataFrame:
    """Every class present in the question set, per field (any `form`, any `hard_class`
    value, not a fixed list), per variant: the mean of `metrics` over the class's answerable
    questions and how many it has.

    Columns: field, class, variant, n (answerable questions of the class), n_abstention (the
    class's abstention questions, which have no ranking metric), then `metrics`. A question
    with no value for a field (None, NaN, "") is in the class :data:`UNLABELLED`; a field
    whose every question is unlabelled is left out (it says nothing). A class with no
    answerable question has NaN means and n 0. Rows are ordered by field (as given), class
    (sorted, UNLABELLED last), then variant (first appearance). An empty frame gives an
    empty table with these columns."""
    columns = ["field", "class", "variant", "n", "n_abstention", *metrics]
    rows: list[dict] = []
    if not len(per_query):
        return pd.DataFrame(rows, columns=columns)
    variants = list(dict.fromkeys(per_query["variant"]))
    answerable = per_query["answerable"].astype(bool).to_numpy()
    variant_of = per_query["variant"].to_numpy()
    none = np.array([], dtype=np.intp)
    for name in fields:
        if name not in per_query:
            continue
        labels = per_query[name].map(lambda v: UNLABELLED if v is None or v != v or v == "" else str(v))
        if (labels == UNLABELLED).all():
            continue
        classes = sorted(set(labels) - {UNLABELLED}) + ([UNLABELLED] if (labels == UNLABELLED).any() else [])
        # each (class, variant)'s rows, in the frame's order: one grouping, not a mask of the whole
        # frame per pair (the means are taken over the same values in the same order as before)
        members: dict[tuple[str, Any], list[int]] = {}
        for position, key in enumerate(zip(labels.to_numpy(), variant_of)):
            members.setdefault(key, []).append(position)
        for cls in classes:
            for variant in variants:
                mine = np.asarray(members.get((cls, variant), none), dtype=np.intp)
                scored = mine[answerable[mine]]
                row = {"field": name, "class": cls, "variant": variant, "n": int(len(scored)),
                       "n_abstention": int(len(mine) - len(scored))}
                for m in metrics:
                    row[m] = (float(per_query[m].iloc[scored].astype("float64").mean()) if len(scored)
                              else float("nan"))
                rows.append(row)
    return pd.DataFrame(rows, columns=columns)
