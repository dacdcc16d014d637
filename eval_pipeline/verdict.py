"""The run's verdict: intervals, the comparison with the baseline variant, the comparison of
every variant with its own previous run, the regression gate, and the history record.

Kept in one function so the Dagster report asset stays a thin call, and so a CI script or a
notebook gets the same verdict without Dagster.
"""

from __future__ import annotations

import hashlib
import pickle
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from eval_pipeline.gates import GateResult, evaluate_gate
from eval_pipeline.history import SCORING_PROTOCOL, Comparison, compare_provenance, previous_run, record_run
from eval_pipeline.questions import atomic_write_bytes
from eval_pipeline.scoring import summarize

INTERVAL_METRICS = ("hit@1", "hit@5", "mrr", "ndcg@10")
COMPARE_METRICS = ("ndcg@10", "mrr", "hit@1", "hit@5")  # compared with the baseline variant (paired tests)
_STATISTICS_SOURCE = Path(__file__).resolve().parent / "statistics.py"


@dataclass
class RunVerdict:
    summary: pd.DataFrame
    intervals: pd.DataFrame
    baseline_comparison: pd.DataFrame  # each variant vs the baseline variant, this run
    history: dict[str, Comparison] = field(default_factory=dict)  # each variant vs its previous run
    previous: dict[str, dict[str, Any] | None] = field(default_factory=dict)
    gates: dict[str, GateResult] = field(default_factory=dict)
    limited: bool = False

    @property
    def gate_passed(self) -> bool:
        return all(g.passed for g in self.gates.values())

    def gate_rows(self) -> list[dict[str, Any]]:
        return [{"variant": v, "state": g.state, **row} for v, g in self.gates.items() for row in g.rows]


def code_version(repo: Path | None = None) -> str:
    """`git describe --always --dirty` of the checkout, or 'unknown' outside one."""
    repo = repo or Path(__file__).resolve().parent.parent
    try:
        out = subprocess.run(["git", "describe", "--always", "--dirty"], cwd=repo, capture_output=True, text=True,
                             timeout=10)
        return out.stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def statistics_key(per_variant: Mapping[str, pd.DataFrame], baseline: str) -> str:
    """A digest of everything the intervals and the baseline comparison depend on: the variants
    in order, the baseline, the answerable questions' qids and metric values, the metrics, and
    the source of `eval_pipeline.statistics` and the numpy and scipy versions (a change there
    invalidates every entry)."""
    from importlib.metadata import version

    metrics = sorted(set(INTERVAL_METRICS) | set(COMPARE_METRICS))
    digest = hashlib.sha256()
    digest.update(_STATISTICS_SOURCE.read_bytes())
    digest.update(f"numpy {version('numpy')} scipy {version('scipy')}".encode())
    digest.update(repr((baseline, INTERVAL_METRICS, COMPARE_METRICS)).encode())
    for variant, frame in per_variant.items():
        columns = [c for c in ("qid", "answerable", *metrics) if c in frame.columns]
        digest.update(repr((variant, columns)).encode())
        digest.update(pd.util.hash_pandas_object(frame[columns], index=False).to_numpy().tobytes())
    return digest.hexdigest()


def run_statistics(
    per_variant: Mapping[str, pd.DataFrame], baseline: str, *, cache_dir: Path | None = None
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(intervals, comparison with the baseline variant).

    The resampling is seeded, so the result is a pure function of the per-question scores; with
    `cache_dir` it is stored under `statistics_key` and reused by a run whose scores are unchanged.
    That matters for a re-run with nothing changed: the 10,000-permutation tests and bootstraps
    were most of its report step (bench/warm_rerun.py).  An unreadable entry is recomputed.
    """
    path = Path(cache_dir) / f"{statistics_key(per_variant, baseline)}.pkl" if cache_dir is not None else None
    if path is not None and path.exists():
        try:
            return pickle.loads(path.read_bytes())
        except Exception:  # a truncated or foreign file: recompute and overwrite it
            pass
    from eval_pipeline.statistics import compare_to_baseline, metric_intervals  # scipy: ~1 s to import

    intervals = metric_intervals(per_variant, INTERVAL_METRICS)
    compared = baseline in per_variant and len(per_variant) > 1
    comparison = compare_to_baseline(per_variant, baseline, COMPARE_METRICS) if compared else pd.DataFrame()
    if path is not None:
        atomic_write_bytes(path, pickle.dumps((intervals, comparison), protocol=pickle.HIGHEST_PROTOCOL))
    return intervals, comparison


def judge_run(
    per_variant: Mapping[str, pd.DataFrame],
    *,
    baseline: str,
    provenance: Mapping[str, Any],
    tolerances: Mapping[str, float],
    strict: bool,
    run_id: str,
    limited: bool,
    connection_string: str | None,
    history_prefix: str = "eval",
    statistics_cache: Path | None = None,
) -> RunVerdict:
    """Score, compare and gate a run, then record it (all or nothing).

    Without a connection string there is no history: every variant is a `baseline` and the
    gate has nothing to judge.  A limited run is recorded as limited and never serves as a
    previous run; nor does a variant whose gate failed in that run.  `statistics_cache`: see
    `run_statistics`.
    """
    summary = summarize(per_variant)
    intervals, comparison = run_statistics(per_variant, baseline, cache_dir=statistics_cache)
    verdict = RunVerdict(summary=summary, intervals=intervals, baseline_comparison=comparison, limited=limited)
    provenance = {"scoring_protocol": SCORING_PROTOCOL, **provenance}
    for _, row in summary.iterrows():
        variant = row["variant"]
        prev = (previous_run(connection_string, variant=variant, before_run_id=run_id, prefix=history_prefix)
                if connection_string else None)
        cmp = compare_provenance(provenance, prev, variant)
        current = {m: float(row[m]) for m in tolerances}
        verdict.previous[variant] = prev
        verdict.history[variant] = cmp
        verdict.gates[variant] = evaluate_gate(current, prev["metrics"] if prev else None, tolerances, cmp.state,
                                               strict=strict)
    if connection_string:
        failed = sorted(v for v, g in verdict.gates.items() if not g.passed)
        record_run(connection_string, run_id=run_id, provenance={**provenance, "gate_failed": failed},
                   summary=summary, per_query=per_variant, intervals=intervals, limited=limited, prefix=history_prefix)
    return verdict
