"""What a run's grades add up to: each variant's metric rows for the answer_metrics asset and
the answer gate (`answer_metric_frames`: the numbers from `grading.answer_metrics`, with the
set, generator and yardstick they were measured under, and what the run changed that the
comparison key does not hold).

It decides which grades reach the numbers and counts the errored answers, so its code is in
the code-graded yardsticks (`run.grading_code`); how the grades are shown (metadata, the
answers.jsonl lines, the hallucination log, the calibrated rates, the graders' bill) is in
`grading.presentation`, outside them: editing a metadata line must not make every answer gate
not_compared.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from eval_pipeline.answering.prompts import CheckedGoldenSet
from eval_pipeline.answering.served import ServedBy, run_generator
from eval_pipeline.common.metadata import frame_metadata
from eval_pipeline.grading.answer_metrics import answer_metrics, answer_summary_row
from eval_pipeline.grading.presentation import (
    cost_metadata,
    extra_metadata,
    interval_metadata,
    row_extras,
)

METRIC_COLUMNS = ["variant", "grader", "set_id", "set_name", "set_fingerprint", "limited", "generator", "yardstick",
                  "n_prompts", "n_errored", "n_scored", "pass_rate", "pass_rate_low", "pass_rate_high", "mean_score",
                  "mean_low", "mean_high", "n_grader_failed", "grounded_rate", "corpus_rate", "citations_per_answer",
                  "corpus_signature", "store_table", "variant_config", "engine_identity", "treatment_json",
                  "metrics_json",
                  "self_judged", "repair_json", "agreement_json", "gradings_json", "hallucinations_json"]


def answer_metric_frames(answers: Mapping[str, pd.DataFrame], grades: Mapping[str, pd.DataFrame],
                         golden: CheckedGoldenSet, *, prices: Mapping[str, Any] | None = None,
                         interval_cache: Path | None = None,
                         ) -> tuple[dict[str, pd.DataFrame], dict[str, dict[str, Any]]]:
    """({variant: one row per grader, `METRIC_COLUMNS`}, {variant: metadata}). The generator is
    the one every generated answer reports (`run_generator`), else None (unknown: never
    compared); `metrics_json` holds the whole `answer_metrics` result.

    What the report shows and writes beside the numbers, per row (JSON, "" when it does not
    apply): ``self_judged`` (the grader's yardstick carries the self-judged label),
    ``repair_json`` (`repair.repair_summary` of the variant's answers, when the run repaired:
    every row of the variant), ``agreement_json`` (the grader's pass rate with its PPI interval
    and agreement, when graded_answers calibrated it: `calibration_json` in the grades),
    ``gradings_json`` (the row's answers.jsonl lines, `grading_lines`) and
    ``hallucinations_json`` (the grounding row's log, `hallucinations_of`). The metadata adds
    the grounding rates, the repair pass rates and, when calibrated, kappa and the PPI bounds
    as numbers. With `interval_cache` (the answer_metrics asset passes its state dir's
    `statistics`), the intervals are kept there by their exact inputs: a run whose grades did not
    change reads them instead of resampling."""
    frames, metadata = {}, {}
    for variant, frame in answers.items():
        if golden.golden is None or not len(frame):
            frames[variant] = pd.DataFrame(columns=METRIC_COLUMNS)
            metadata[variant] = {"evaluated": False, "reason": golden.reason}
            continue
        graded = grades[variant]
        metrics = answer_metrics(frame, graded.drop(columns=["yardstick", "calibration_json"], errors="ignore"),
                                 prices=prices, interval_cache=interval_cache)
        extras = row_extras(variant, frame, graded, prices)
        ok = frame[frame["error"].isna()]
        generator = run_generator(ServedBy(r.provider, r.model_sent, r.model_reported) for r in ok.itertuples())
        yardsticks = dict(zip(graded["grader"], graded["yardstick"])) if "yardstick" in graded else {}
        rows = []
        for summary in answer_summary_row(metrics).values():
            rows.append({**{c: summary.get(c) for c in METRIC_COLUMNS}, "variant": variant, "n_scored": summary["n"],
                         "set_id": golden.golden.set_id, "set_name": golden.set_name,
                         "set_fingerprint": golden.golden.fingerprint, "limited": golden.limited,
                         "generator": generator, "yardstick": yardsticks.get(summary["grader"]),
                         "n_prompts": len(frame), "n_errored": int(frame["error"].notna().sum()),
                         "treatment_json": json.dumps(_treatment(frame), sort_keys=True),
                         "n_grader_failed": int(metrics["graders"][summary["grader"]].get("n_grader_failed", 0)),
                         **{c: frame[c].iloc[0] for c in ("corpus_signature", "store_table", "variant_config")},
                         # what ranked the answers' context: an answers partition of another engine is refused
                         "engine_identity": frame["engine_identity"].iloc[0] if "engine_identity" in frame else None,
                         "metrics_json": json.dumps(metrics, sort_keys=True), **extras(summary["grader"])})
        frames[variant] = pd.DataFrame(rows, columns=METRIC_COLUMNS)
        metadata[variant] = {"evaluated": True, "generator": generator or "unknown",
                             **{f"{r['grader']} pass_rate": r["pass_rate"] for r in rows},
                             **{f"{r['grader']} mean_score": r["mean_score"] for r in rows},
                             **interval_metadata(rows), **cost_metadata(metrics),
                             **extra_metadata(rows), "table": frame_metadata(frames[variant])}
    return frames, metadata


def _treatment(frame: pd.DataFrame) -> dict[str, Any]:
    """What the run changed that the comparison key does not hold: the context size, the
    generator's settings (its prompt version, token budget, sampling...) and the vector table the
    context came from (an index redefined under its name). A run is compared across them (they
    are what a team tunes); the report names what changed."""
    out = {"context_k": int(frame["context_k"].iloc[0]), "generator": json.loads(frame["generator_settings"].iloc[0])}
    if "store_table" in frame:
        out["table"] = str(frame["store_table"].iloc[0])
    return out
