"""The report's answer-quality section, the answer gate's verdict per variant, and the answer
runs recorded in the history.

Each (variant, grader) of this run is judged against the previous eligible run and the pinned
reference of the *same* key: golden set (id and fingerprint), corpus, generator identity,
grading yardstick, variant and grader (`eval_pipeline.judging.answer_history`). A run whose
generator is unknown (answers from mixed, missing or invalid identities), whose yardstick has
no single grader, or that answered part of the set is never compared: its grades are shown,
its gate passes with a warning, or fails when the gate is strict. An answer that could not be
generated fails the gate (the metrics are incomplete). A variant's answer gate passes when
every grader's gate passes.

A run is recorded only after the results are published, and becomes a yardstick for later
runs (`eligible`) only when it is comparable, complete and passed its gate. No answer text is
ever recorded.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from eval_pipeline.common.checks import finite_number, missing


@dataclass
class AnswerVerdict:
    """The answer gate of each (variant, grader), and the rows to record."""

    evaluated: bool
    reason: str
    rows: list[dict[str, Any]] = field(default_factory=list)  # one per (variant, grader): metrics and verdict
    gates: dict[str, dict[str, Any]] = field(default_factory=dict)  # variant -> grader -> AnswerGateResult
    records: list[dict[str, Any]] = field(default_factory=list)  # for record_answer_run

    def variant_passed(self, variant: str) -> bool:
        return all(g.passed for g in self.gates.get(variant, {}).values())


def check_answers_belong(answer_metrics: Mapping[str, pd.DataFrame], *, corpus_signature: str,
                         tables: Mapping[str, str], variant_configs: Mapping[str, Any]) -> None:
    """The answers were produced from this run's corpus, each partition's vector table
    (`tables`: partition key -> table) and each variant's
    configuration as ranked (a report reads the latest materialization of every partition, which
    may be another run's): refuse otherwise, naming what to materialize again."""
    from eval_pipeline.ranking.inputs import InconsistentInputs

    problems = []
    for variant, frame in answer_metrics.items():
        if not len(frame):
            continue
        if variant not in tables:
            continue  # no retrieval metrics for it in this run: its answers are not judged either
        row = frame.iloc[0]
        expected = tables[variant]
        if row["corpus_signature"] != corpus_signature or row["store_table"] != expected:
            problems.append(f"variant {variant!r} answered from corpus {row['corpus_signature']!r} table "
                            f"{row['store_table']!r}, this run has {corpus_signature!r} {expected!r}")
        elif variant in variant_configs and json.loads(row["variant_config"]) != _ranked_config(variant_configs[variant]):
            problems.append(f"variant {variant!r} answered with another configuration than it was ranked with")
    if problems:
        raise InconsistentInputs("the answer metrics do not belong to this run: " + "; ".join(problems)
                                 + ". Materialize answers, graded_answers and answer_metrics for these variants again.")


def _ranked_config(config: Any) -> Any:
    """A variant's configuration as its results record it: without the `index` the report adds."""
    return {k: v for k, v in config.items() if k != "index"} if isinstance(config, Mapping) else config


def judge_answer_run(answer_metrics: Mapping[str, pd.DataFrame], *, order: Sequence[str], corpus_signature: str,
                     tolerances: Mapping[str, float], strict: bool, connection_string: str | None,
                     run_id: str) -> AnswerVerdict:
    """The answer gate of every (variant, grader) in `answer_metrics` (the answer_metrics
    asset's frames, checked with `check_answers_belong` first), looked up in the history at
    `connection_string` (None: no history, every comparable run is a first run)."""
    from eval_pipeline.judging.answer_history import (
        answer_comparable,
        evaluate_answer_gate,
        previous_answer_run,
        reference_answer_run,
        yardstick_problems,
    )

    frames = [answer_metrics[v] for v in order if v in answer_metrics and len(answer_metrics[v])]
    if not frames:
        return AnswerVerdict(False, "no variant has answer metrics (no golden prompt set, or answers not "
                                    "materialized)")
    verdict = AnswerVerdict(True, "")
    for row in pd.concat(frames, ignore_index=True).to_dict(orient="records"):
        metrics = json.loads(row["metrics_json"])
        current = {"run_id": run_id, "variant": row["variant"], "grader": row["grader"], "set_id": row["set_id"],
                   "set_fingerprint": row["set_fingerprint"], "corpus_signature": corpus_signature,
                   "generator": None if missing(row["generator"]) else row["generator"],
                   "yardstick": row["yardstick"], "limited": bool(row["limited"]),
                   "errored": int(row["n_errored"]), "n_scored": int(row["n_scored"]),
                   "pass_rate": finite_number(row["pass_rate"]), "mean_score": finite_number(row["mean_score"]),
                   "pass_rate_ci_low": finite_number(row["pass_rate_low"]), "pass_rate_ci_high": finite_number(row["pass_rate_high"]),
                   "mean_ci_low": finite_number(row["mean_low"]), "mean_ci_high": finite_number(row["mean_high"])}
        comparable, _ = answer_comparable(current)
        key = {k: current[k] for k in ("variant", "grader", "set_id", "set_fingerprint", "corpus_signature",
                                       "generator", "yardstick")}
        previous = reference = None
        if comparable and connection_string:
            previous = previous_answer_run(connection_string, **key, before_run_id=run_id)
            reference = reference_answer_run(connection_string, **key, before_run_id=run_id)
        gate = evaluate_answer_gate({**current, "grader_failed": int(row.get("n_grader_failed") or 0)}, previous,
                                    reference, tolerances, strict=strict)
        verdict.gates.setdefault(row["variant"], {})[row["grader"]] = gate
        eligible = bool(gate.passed and not yardstick_problems(current))
        treatment = json.loads(row["treatment_json"])
        config = {} if missing(row.get("variant_config")) else json.loads(row["variant_config"])
        verdict.records.append({**current, "eligible": eligible, "variant_config": config,
                                "provenance": {"set_name": row["set_name"], "treatment": treatment,
                                               "metrics": _no_nan(metrics)}})
        verdict.rows.append({**row, "metrics": metrics, "gate": gate, "previous": previous, "reference": reference,
                             "treatment_changes": treatment_changes(treatment, previous)})
    return verdict


def treatment_changes(treatment: Mapping[str, Any], previous: Mapping[str, Any] | None) -> list[str]:
    """What changed since the previous run in what the key does not hold ("context_k 5 -> 3",
    "generator.max_tokens None -> 200"); [] when nothing did or there is no previous run."""
    before = ((previous or {}).get("provenance") or {}).get("treatment")
    if not isinstance(before, Mapping):
        return []

    def flat(value: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
        out: dict[str, Any] = {}
        for k, v in value.items():
            out.update(flat(v, f"{prefix}{k}.") if isinstance(v, Mapping) else {f"{prefix}{k}": v})
        return out

    now, then = flat(treatment), flat(before)
    return [f"{k} {then.get(k)!r} -> {now.get(k)!r}" for k in sorted(set(now) | set(then)) if now.get(k) != then.get(k)]


def _no_nan(value: Any) -> Any:
    """`value` with every NaN (a metric over nothing) as None, so it can be stored as JSON."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, Mapping):
        return {k: _no_nan(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_no_nan(v) for v in value]
    return value


def _fmt(value: Any, digits: int = 3) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    return f"{value:.{digits}f}" if isinstance(value, float) else str(value)


def _interval(value: Any, low: Any, high: Any) -> str:
    if _fmt(value) == "–":
        return "–"
    return f"{_fmt(value)} [{_fmt(low)}, {_fmt(high)}]"


def _gate_cell(gate) -> str:
    if not gate.passed:
        return "**fails**"
    return {"comparable": "passes", "first_run": "first run", "not_comparable": "not compared"}.get(gate.state,
                                                                                                    gate.state)


def answer_section(verdict: AnswerVerdict) -> list[str]:
    """The report's "Answer quality" section (markdown lines)."""
    from eval_pipeline.reporting.report import markdown_table

    lines = ["## Answer quality", ""]
    if not verdict.evaluated:
        return lines + [f"Not evaluated: {verdict.reason}.", ""]
    first = verdict.rows[0]
    generators = sorted({"unknown (mixed, missing or invalid identity)" if missing(r["generator"]) else r["generator"]
                         for r in verdict.rows})
    lines += [f"Golden set `{first['set_name']}` ({first['n_prompts']} prompts, fingerprint "
              f"`{first['set_fingerprint']}`), answered from each variant's top results by "
              f"{', '.join(f'`{g}`' for g in generators)}. Pass rate and mean score with 95% bootstrap intervals; "
              "an answer that could not be generated counts as a failure. *hit / miss*: the pass rate on prompts "
              "whose gold document was / was not in the context. Latency is retrieval plus generation "
              "(grading excluded).", ""]
    table = []
    for r in verdict.rows:
        m, total = r["metrics"], r["metrics"]["latency_ms"]["total"]
        g = m["graders"].get(r["grader"], {}).get("by_retrieval", {})
        table.append({"variant": r["variant"], "grader": r["grader"], "n": r["n_scored"],
                      "pass rate": _interval(r["pass_rate"], r["pass_rate_low"], r["pass_rate_high"]),
                      "mean score": _interval(r["mean_score"], r["mean_low"], r["mean_high"]),
                      "hit / miss": f"{_fmt(g.get('hit', {}).get('pass_rate'))} / "
                                    f"{_fmt(g.get('miss', {}).get('pass_rate'))}",
                      "p50 / p95 ms": f"{_fmt(total.get('p50'), 1)} / {_fmt(total.get('p95'), 1)}",
                      "tokens": m["tokens"]["tokens_total"], "cost": _fmt(m["cost"]["cost_total"], 4),
                      "errored": r["n_errored"], "gate": _gate_cell(r["gate"])})
    columns = ["variant", "grader", "n", "pass rate", "mean score", "hit / miss", "p50 / p95 ms", "tokens", "cost",
               "errored", "gate"]
    lines += [markdown_table(pd.DataFrame(table), columns), ""]
    lines += _by_type(verdict, markdown_table) + _by_form(verdict, markdown_table) + _dimensions(verdict, markdown_table)
    notes = [f"- `{r['variant']}` {r['grader']}: {r['gate'].message}" for r in verdict.rows if r["gate"].message]
    notes += [f"- `{r['variant']}` {r['grader']}: compared across a treatment change: {'; '.join(r['treatment_changes'])}"
              for r in verdict.rows if r["treatment_changes"]]
    if notes:
        lines += ["### Answer gate", "", *notes, ""]
    return lines


def _by_type(verdict: AnswerVerdict, markdown_table) -> list[str]:
    rows = []
    for r in verdict.rows:
        types = r["metrics"]["graders"].get(r["grader"], {}).get("by_assertion_type")
        if r["grader"] == "deterministic" and types:
            rows.append({"variant": r["variant"], **{t: f"{_fmt(v['held_rate'])} ({v['n']})" for t, v in types.items()}})
    if not rows:
        return []
    columns = ["variant", *[c for c in ("exact", "contains", "regex", "json_schema") if c in rows[0]]]
    return ["### Assertions held, by type (deterministic; count in brackets)", "",
            markdown_table(pd.DataFrame(rows), columns), ""]


def _by_form(verdict: AnswerVerdict, markdown_table) -> list[str]:
    rows, forms = [], []
    for r in verdict.rows:
        by_form = r["metrics"]["graders"].get(r["grader"], {}).get("by_form") or {}
        forms += [f for f in by_form if f not in forms]
        rows.append({"variant": r["variant"], "grader": r["grader"],
                     **{f: f"{_fmt(v['pass_rate'])} ({v['n']})" for f, v in by_form.items()}})
    if not forms:
        return []
    return ["### Pass rate by question form (count in brackets)", "",
            markdown_table(pd.DataFrame(rows).fillna("–"), ["variant", "grader", *forms]), ""]


def _dimensions(verdict: AnswerVerdict, markdown_table) -> list[str]:
    rows = [{"variant": r["variant"], **{k: _fmt(v) for k, v in r["metrics"]["graders"]["judge"]["dimensions"].items()
                                         if k != "n"}}
            for r in verdict.rows if r["grader"] == "judge" and "dimensions" in r["metrics"]["graders"].get("judge", {})]
    if not rows:
        return []
    return ["### Judge dimensions (mean, 0–1)", "",
            markdown_table(pd.DataFrame(rows), ["variant", "faithfulness", "relevance", "citations", "overall"]), ""]


def record_answers(verdict: AnswerVerdict, connection_string: str, run_id: str) -> None:
    """Record this run's answer rows (after the results are published)."""
    from eval_pipeline.judging.answer_history import record_answer_run

    if verdict.records:
        record_answer_run(connection_string, run_id, verdict.records)


def answer_gate_output(verdict: AnswerVerdict) -> dict[str, Any]:
    """What the report asset returns for the answer_gate checks: per variant, passed and the rows."""
    out: dict[str, Any] = {"evaluated": verdict.evaluated, "reason": verdict.reason, "variants": {}}
    for r in verdict.rows:
        g = r["gate"]
        entry = out["variants"].setdefault(r["variant"], {"passed": True, "graders": {}})
        entry["passed"] = entry["passed"] and bool(g.passed)
        entry["graders"][r["grader"]] = {"passed": bool(g.passed), "state": g.state, "message": g.message,
                                         "pass_rate": finite_number(r["pass_rate"]), "mean_score": finite_number(r["mean_score"]),
                                         "generator": "unknown" if missing(r["generator"]) else r["generator"],
                                         "yardstick": r["yardstick"],
                                         "previous_run": (r["previous"] or {}).get("run_id") or "",
                                         "reference_run": (r["reference"] or {}).get("run_id") or "",
                                         "treatment_changes": list(r["treatment_changes"]),
                                         "rows": [dict(x) for x in g.rows]}
    return out


def answer_gate_checks(report: Mapping[str, Any], keys: Sequence[str]) -> dict[str, tuple[bool, dict[str, Any]]]:
    """key -> (passed, metadata) of each variant's answer gate. A variant without answers in
    this run passes, marked not evaluated (with the reason)."""
    answers = report.get("answers") or {"evaluated": False, "reason": "no answer metrics", "variants": {}}
    out = {}
    for key in keys:
        entry = answers["variants"].get(key)
        if entry is None:
            out[key] = (True, {"evaluated": False, "message": answers.get("reason") or
                               f"variant {key!r} has no answer metrics in this run"})
            continue
        metadata: dict[str, Any] = {"evaluated": True}
        for grader, g in entry["graders"].items():
            metadata[f"{grader} state"] = g["state"]
            metadata[f"{grader} pass_rate"] = g["pass_rate"] if g["pass_rate"] is not None else float("nan")
            metadata[f"{grader} mean_score"] = g["mean_score"] if g["mean_score"] is not None else float("nan")
            metadata[f"{grader} yardstick"] = g["yardstick"] or ""
            if g["message"]:
                metadata[f"{grader} message"] = g["message"]
            if g["treatment_changes"]:
                metadata[f"{grader} treatment changes"] = "; ".join(g["treatment_changes"])
        metadata["generator"] = next(iter(entry["graders"].values()))["generator"]
        out[key] = (bool(entry["passed"]), metadata)
    return out
