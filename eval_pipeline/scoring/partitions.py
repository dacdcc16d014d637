"""The variant_metrics asset: each variant's per-question scores and the numbers its
partition shows (so the UI plots each variant over time)."""

from __future__ import annotations

import hashlib
import json
import pickle
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from eval_pipeline.common import versions
from eval_pipeline.common.keyed_pickle import read_keyed, write_keyed
from eval_pipeline.common.metadata import frame_metadata, shown_number
from eval_pipeline.common.registry import plugin_code_digest
from eval_pipeline.metrics.retrieval import PARTITION, PRIMARY_METRIC, metric_names
from eval_pipeline.ranking.results import stage_latency_summary
from eval_pipeline.scoring.variant import score_variant, summarize

PARTITION_METRICS = metric_names(PARTITION)


def scoring_code_identity() -> str:
    """What turns ranked results into scores and a partition's numbers: the package's code (as
    syntax trees, once per process: scoring, metrics, the microscope's labels, the intervals),
    the metric plugins' code, numpy's installed code and the versions of numpy, pandas, pyarrow
    and scipy and of Python."""
    packages = versions.package_versions(("numpy", "pandas", "pyarrow", "scipy"))
    return json.dumps({"code": versions.source_digest("eval_pipeline"), "plugins": plugin_code_digest("measure"),
                       "numpy-code": versions.package_code_digest(["numpy"]), "packages": packages,
                       "python": ".".join(str(part) for part in sys.version_info[:3])}, sort_keys=True)


def _digest(kind: str, code: str, *parts: bytes) -> str:
    digest = hashlib.sha256(f"{kind}\0{code}\0".encode())
    for part in parts:
        digest.update(f"{len(part)}\0".encode() + part)
    return digest.hexdigest()


def _frame_bytes(frame: pd.DataFrame) -> bytes:
    """The frame as pickled: every value, dtype and column; equal frames read the same way (from
    the same parquet file) give the same bytes, and a changed value never does."""
    return pickle.dumps(frame, protocol=pickle.HIGHEST_PROTOCOL)


def score_partitions(ranked: Mapping[str, pd.DataFrame], keys: Sequence[str], questions, *,
                     cache: Path | None = None) -> dict[str, pd.DataFrame]:
    """Each partition's per-question scores, refusing a partition that has no ranked results.

    With a cache folder (the variant_metrics asset passes its state dir's `scored_partitions`), a
    partition's scores are kept there under a digest of its ranked frame, the questions with
    their labels in order and `scoring_code_identity`, and read back by a run whose rankings did
    not change: the same frame, without scoring again. An entry is used only when it holds its
    own key and a frame of these questions; anything else is scored again and written over it."""
    missing = sorted(set(keys) - set(ranked))
    if missing:
        raise ValueError(f"ranked_results has no partition for variant(s) {missing}; materialize them first")
    if cache is None:
        return {key: score_variant(ranked[key], questions) for key in keys}
    qids = sorted(q.qid for q in questions)
    labels = "\n".join(json.dumps(q.to_json(), sort_keys=True, ensure_ascii=False) for q in questions).encode()
    code, out = scoring_code_identity(), {}
    for key in keys:
        digest = _digest("scored partition", code, labels, _frame_bytes(ranked[key]))
        path = Path(cache) / f"scored_{digest}.pkl"
        stored = read_keyed(path, digest)
        if isinstance(stored, pd.DataFrame) and "qid" in stored and sorted(stored["qid"]) == qids:
            out[key] = stored
            continue
        out[key] = score_variant(ranked[key], questions)
        write_keyed(path, digest, out[key])
    return out


def partition_metrics(key: str, scored: pd.DataFrame, *, cache: Path | None = None) -> dict[str, Any]:
    """One partition's own numbers, as floats and ints the UI plots over time: hit@1/5/10,
    MRR, recall@10, nDCG@10 with its 95% bootstrap interval, latency p50/p95, errored
    questions and the microscope's counts of misses per triage label and dense cause; with the
    frame's row count and column schema.

    Kept like `score_partitions`' scores, under the partition key, the scored frame and the
    code: a run whose scores did not change reads them (and does not import scipy for the
    interval). An entry is used only when it holds its own key and every partition metric."""
    if cache is None:
        return _partition_metrics(key, scored)
    digest = _digest("partition numbers", scoring_code_identity(), key.encode(), _frame_bytes(scored))
    path = Path(cache) / f"numbers_{digest}.pkl"
    stored = read_keyed(path, digest)
    if isinstance(stored, dict) and all(m in stored for m in (*PARTITION_METRICS, "table")):
        return stored
    numbers = _partition_metrics(key, scored)
    write_keyed(path, digest, numbers)
    return numbers


def _partition_metrics(key: str, scored: pd.DataFrame) -> dict[str, Any]:
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

