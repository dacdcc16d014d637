"""How a run's grades are shown: each partition's metadata (counts, intervals, latency and
cost, grounding, repair and agreement figures as numbers), the per-prompt lines kept beside the
report (`grading_lines`, answers.jsonl), the hallucination log, the calibrated pass rates and
the graders' bill.

Apart from the code that decides a grade and its numbers (`grading.run`, `grading.summary`,
whose code is in the code-graded yardsticks) on purpose: an edit here changes what is shown,
never what is compared.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd

from eval_pipeline.answering.repair import repair_summary
from eval_pipeline.common import prices as pricing
from eval_pipeline.common.checks import finite_number, missing
from eval_pipeline.common.metadata import shown_number
from eval_pipeline.grading.agreement import calibrated_pass_rate
from eval_pipeline.grading.grounding import hallucination_log
from eval_pipeline.grading.independence import SELF_JUDGED_LABEL


def grades_metadata(frame: pd.DataFrame) -> dict[str, Any]:
    """One partition's grade counts for the asset page: graded and passed per grader."""
    out: dict[str, Any] = {"grades": len(frame)}
    for grader, part in frame.groupby("grader", sort=False):
        out[f"{grader} graded"] = int((part["status"] == "graded").sum())
        out[f"{grader} passed"] = int((part["passed"] == True).sum())  # noqa: E712
        out[f"{grader} no grade (failed or unparseable)"] = int(part["status"].isin(["failed", "unparseable"]).sum())
    return out


def interval_metadata(rows: Sequence[Mapping[str, Any]]) -> dict[str, float | None]:
    """Each grader's pass-rate and mean-score intervals as numbers the UI plots beside them."""
    out: dict[str, float | None] = {}
    for r in rows:
        for label, column in (("pass_rate low", "pass_rate_low"), ("pass_rate high", "pass_rate_high"),
                              ("mean_score low", "mean_low"), ("mean_score high", "mean_high")):
            out[f"{r['grader']} {label}"] = shown_number(r.get(column))
    return out


def cost_metadata(metrics: Mapping[str, Any]) -> dict[str, float | None]:
    """The partition's latency (retrieval plus generation, p50 and p95), tokens and cost (None:
    an unpriced model, never a partial sum)."""
    total = (metrics.get("latency_ms") or {}).get("total") or {}
    return {"latency p50 ms": shown_number(total.get("p50")), "latency p95 ms": shown_number(total.get("p95")),
            "tokens": shown_number((metrics.get("tokens") or {}).get("tokens_total")),
            "cost": shown_number((metrics.get("cost") or {}).get("cost_total"))}


def generator_price(frame: pd.DataFrame, prices: Mapping[str, Any] | None) -> Mapping[str, float] | None:
    """The price of the model that wrote the answers (reported, else sent), None without one."""
    for column in ("model_reported", "model_sent"):
        if column in frame:
            for model in frame[column].dropna():
                if model in (prices or {}):
                    return (prices or {})[model]
    return None


def row_extras(variant: str, frame: pd.DataFrame, graded: pd.DataFrame, prices: Mapping[str, Any] | None):
    """grader -> the extra columns of its metric row (`answer_metric_frames`)."""
    def clean(value: Any) -> Any:  # JSON without NaN (a rate over nothing is null)
        if isinstance(value, float):
            return finite_number(value)
        if isinstance(value, Mapping):
            return {k: clean(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [clean(v) for v in value]
        return value

    repair = (json.dumps(clean(repair_summary(frame, price=generator_price(frame, prices))), sort_keys=True)
              if "repair" in frame and frame["repair"].notna().any() else "")
    lines = grading_lines({variant: frame}, {variant: graded}, prices=prices)
    log = hallucinations_of({variant: frame}, {variant: graded}) if "grounding" in set(graded["grader"]) else []
    yardsticks = dict(zip(graded["grader"], graded["yardstick"])) if "yardstick" in graded else {}

    def extras(grader: str) -> dict[str, Any]:
        agreement = ""
        if "calibration_json" in graded:
            mine = graded[graded["grader"] == grader]
            calibration = next((c for c in mine["calibration_json"] if isinstance(c, str) and c), "")
            if calibration:
                agreement = json.dumps(clean(calibrated_rate(mine, json.loads(calibration))), sort_keys=True)
        return {"self_judged": str(yardsticks.get(grader) or "").endswith(f"+{SELF_JUDGED_LABEL}"),
                "repair_json": repair, "agreement_json": agreement,
                "gradings_json": json.dumps([line for line in lines if line["grader"] == grader], sort_keys=True,
                                            default=str),
                "hallucinations_json": json.dumps(log, sort_keys=True, default=str) if grader == "grounding" else ""}

    return extras


def calibrated_rate(grades: pd.DataFrame, calibration: Mapping[str, Any]) -> dict[str, Any]:
    """One grader's pass rate on a variant's graded answers beside its agreement with people and
    the prediction-powered interval (`agreement.calibrated_pass_rate`)."""
    return calibrated_pass_rate([bool(p) for p, s in zip(grades["passed"], grades["status"]) if s == "graded"],
                                calibration)


def extra_metadata(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The metric rows' grounding, repair and agreement figures as numbers for the asset page."""
    out: dict[str, Any] = {}
    for r in rows:
        if r["grader"] == "grounding":
            for k in ("grounded_rate", "corpus_rate", "citations_per_answer"):
                value = r.get(k)
                out[k] = float(value) if value is not None and not missing(value) else float("nan")
        if r.get("self_judged"):
            out[f"{r['grader']} self-judged"] = True
        if r.get("agreement_json"):
            a = json.loads(r["agreement_json"])
            for k in ("kappa", "accuracy", "estimate", "low", "high"):
                if k in a:
                    out[f"{r['grader']} {'ppi ' if k in ('estimate', 'low', 'high') else ''}{k}"] = (
                        float("nan") if a[k] is None else float(a[k]))
    repair = next((r["repair_json"] for r in rows if r.get("repair_json")), "")
    if repair:
        summary = json.loads(repair)
        for k in ("pass_rate_before", "pass_rate_after"):
            out[f"repair {k}"] = float("nan") if summary[k] is None else float(summary[k])
        out["repair kept"] = int(summary["n_kept"])
        out["repair asked"] = int(summary["n_repairs_asked"])
    return out


def grading_usage(before: Mapping[str, Any], after: Mapping[str, Any], model: str,
                  prices: Mapping[str, Mapping[str, float]] | None) -> dict[str, Any]:
    """What the LLM graders spent in this step (the client's usage, after minus before): calls,
    failures, tokens, and the cost at the variants file's price for `model` (None when it has
    no price). Grading is not part of an answer's cost or latency; this is its own bill."""
    spent = {k: int(after[k]) - int(before[k]) for k in ("calls", "failures", "prompt_tokens", "completion_tokens")}
    price = (prices or {}).get(model)
    cost = None if price is None else pricing.cost(spent["prompt_tokens"], spent["completion_tokens"], price)
    return {f"grading {k.replace('_', ' ')}": v for k, v in spent.items()} | {"grading cost": cost}


GRADING_LINE_FIELDS = ("variant", "prompt_id", "grader", "status", "passed", "score", "reason", "grader_model",
                       "yardstick", "answer_key", "answer_prompt_tokens", "answer_completion_tokens", "answer_cost",
                       "cached", "repair", "answer")


def grading_lines(answers: Mapping[str, pd.DataFrame], grades: Mapping[str, pd.DataFrame], *,
                  prices: Mapping[str, Mapping[str, float]] | None = None) -> list[dict[str, Any]]:
    """The per-prompt gradings a run keeps (``answers.jsonl``): one line per (variant, prompt,
    grader), `GRADING_LINE_FIELDS`, in variant, then grade-row order. The reason is the grade
    row's (the graders already leave out what would quote an answer without keep_text); the
    answer's text only when the answers frame holds it (keep_text), else None. Tokens and cost
    are the answer's (generation and any repair; grading has its own bill, `grading_usage`):
    the cost at the model's price (reported model, else sent), None when it has no price, 0.0
    without tokens. Missing values are None (JSON null), never NaN."""
    out: list[dict[str, Any]] = []
    for variant, graded in grades.items():
        frame = answers.get(variant)
        by_prompt = {r["prompt_id"]: r for r in frame.to_dict("records")} if frame is not None else {}
        for g in graded.to_dict("records"):
            a = by_prompt.get(g["prompt_id"], {})
            p, c = int(a.get("prompt_tokens") or 0), int(a.get("completion_tokens") or 0)
            model = a.get("model_reported") if not missing(a.get("model_reported")) else a.get("model_sent")
            price = (prices or {}).get(model) if not missing(model) else None
            cost = 0.0 if p == 0 and c == 0 else (None if price is None else pricing.cost(p, c, price))
            line = {"variant": variant, "prompt_id": g["prompt_id"], "grader": g["grader"], "status": g["status"],
                    "passed": g.get("passed"), "score": g.get("score"), "reason": g.get("reason") or "",
                    "grader_model": g.get("grader_model"), "yardstick": g.get("yardstick"),
                    "answer_key": a.get("answer_key"), "answer_prompt_tokens": p, "answer_completion_tokens": c,
                    "answer_cost": cost, "cached": a.get("cached"), "repair": a.get("repair"),
                    "answer": a.get("answer")}
            out.append({k: None if missing(v) else (bool(v) if k in ("passed", "cached") else v)
                        for k, v in line.items()})
    return out


def hallucinations_of(answers: Mapping[str, pd.DataFrame], grades: Mapping[str, pd.DataFrame]) -> list[dict[str, Any]]:
    """The run's hallucination log (`grounding.hallucination_log`) from its answers and grades
    frames: each item the grounding grader did not find in its answer's context, named by
    variant, prompt and answer key; the answer's text only when the frames keep it."""
    keys: dict[tuple[str, str], str] = {}
    texts: dict[tuple[str, str], str] = {}
    for variant, frame in answers.items():
        for r in frame.to_dict("records"):
            keys[(variant, r["prompt_id"])] = r["answer_key"]
            if not missing(r.get("answer")):
                texts[(variant, r["prompt_id"])] = r["answer"]
    rows = [{**r, "variant": variant} for variant, graded in grades.items() for r in graded.to_dict("records")]
    return hallucination_log(rows, answer_keys=keys, answer_texts=texts or None)
