"""Scores ranked results per engine: per-question rows and one summary row per engine."""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

from eval_pipeline.metrics import DEFAULT_KS, aggregate, score_queries
from eval_pipeline.questions import Question

HEADLINE_METRICS = ["hit@1", "hit@3", "hit@5", "hit@10", "hit@20", "mrr", "recall@10", "ndcg@10"]


def score_results(results: pd.DataFrame, questions: Sequence[Question], ks=DEFAULT_KS):
    """Returns (per_query, summary).

    per_query: one row per (engine, question) with every metric plus the question's form,
    hard class and gold ids, so a report can break results down and show misses.
    summary: one row per engine, in the order the engines ran, with means over answerable
    questions (errored ones count as misses), counts, abstention slice and latency.
    """
    qrels = {q.qid: q.qrels() for q in questions}
    info = pd.DataFrame(
        {
            "qid": [q.qid for q in questions],
            "question": [q.question for q in questions],
            "gold": [list(q.gold) for q in questions],
            "form": [q.form for q in questions],
            "hard_class": [q.hard_class for q in questions],
        }
    )
    per_query_frames, summary_rows = [], []
    for engine, group in results.groupby("engine", sort=False):
        rankings = dict(zip(group["qid"], group["doc_ids"]))
        errored = set(group.loc[group["error"].notna(), "qid"])
        scored = score_queries(rankings, qrels, errored=errored, ks=ks)
        row = {"engine": engine, **aggregate(scored)}
        scored.insert(0, "engine", engine)
        scored = scored.merge(info, on="qid", how="left")
        scored = scored.merge(group[["qid", "doc_ids", "latency_ms", "error"]], on="qid", how="left")
        per_query_frames.append(scored)
        row["latency_p50_ms"] = float(group["latency_ms"].quantile(0.5))
        row["latency_p95_ms"] = float(group["latency_ms"].quantile(0.95))
        summary_rows.append(row)
    return pd.concat(per_query_frames, ignore_index=True), pd.DataFrame(summary_rows)


def slice_summary(per_query: pd.DataFrame, mask: pd.Series, metrics: Sequence[str] = ("hit@5", "mrr")) -> pd.DataFrame:
    """Mean of `metrics` per engine over the answerable questions selected by `mask`."""
    sub = per_query[mask & per_query["answerable"]]
    out = sub.groupby("engine", sort=False)[list(metrics)].mean()
    out["n"] = sub.groupby("engine", sort=False).size()
    return out.reset_index()
