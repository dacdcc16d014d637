"""The variant_metrics asset: each variant's per-question scores and the numbers its
partition shows (so the UI plots each variant over time)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd

from eval_pipeline.common.metadata import frame_metadata, shown_number
from eval_pipeline.metrics.retrieval import PARTITION, PRIMARY_METRIC, metric_names
from eval_pipeline.ranking.results import stage_latency_summary
from eval_pipeline.scoring.variant import score_variant, summarize

PARTITION_METRICS = metric_names(PARTITION)


def score_partitions(ranked: Mapping[str, pd.DataFrame], keys: Sequence[str], questions) -> dict[str, pd.DataFrame]:
    """Each partition's per-question scores, refusing a partition that has no ranked results."""
    missing = sorted(set(keys) - set(ranked))
    if missing:
        raise ValueError(f"ranked_results has no partition for variant(s) {missing}; materialize them first")
    return {key: score_variant(ranked[key], questions) for key in keys}


def partition_metrics(key: str, scored: pd.DataFrame) -> dict[str, Any]:
    """One partition's own numbers, as floats and ints the UI plots over time: hit@1/5/10,
    MRR, recall@10, nDCG@10 with its 95% bootstrap interval, latency p50/p95, errored
    questions and the microscope's counts of misses per triage label and dense cause; with the
    frame's row count and column schema."""
    # deferred: metrics.statistics imports scipy (~1.3 s), only when a run scores
    from eval_pipeline.metrics.statistics import metric_intervals  # noqa: PLC0415
    row = summarize({key: scored}).iloc[0]
    interval = metric_intervals({key: scored}, (PRIMARY_METRIC,)).iloc[0]
    out: dict[str, Any] = {m: shown_number(row[m]) for m in PARTITION_METRICS}
    out.update({f"{PRIMARY_METRIC} 95% low": shown_number(interval["low"]),
                f"{PRIMARY_METRIC} 95% high": shown_number(interval["high"]),
                "latency p50 ms": shown_number(row["latency_p50_ms"]),
                "latency p95 ms": shown_number(row["latency_p95_ms"]),
                "n_errored": int(row["n_errored"]), "n_answerable": int(row["n_answerable"])})
    # the microscope's counts (misses.jsonl beside the report holds each miss's evidence), and
    # each stage's latency: one number each, so the UI plots every one over runs
    out.update({f"misses {k.removeprefix('triage_')}": int(v) for k, v in row.items()
                if str(k).startswith("triage_")})
    out.update({f"dense misses {k.removeprefix('dense_')}": int(v) for k, v in row.items()
                if str(k).startswith("dense_")})
    for stage, figures in stage_latency_summary(scored).items():
        out.update({f"latency {stage} {q} ms": shown_number(figures[q]) for q in ("p50", "p95") if q in figures})
    out["table"] = frame_metadata(scored)
    return out

