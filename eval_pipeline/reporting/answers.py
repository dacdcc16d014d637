"""The report's answer-quality section and what the answer_gate checks show, rendered from the
answer verdict (`eval_pipeline.verdict.answers`), which decides."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd

from eval_pipeline.common.checks import finite_number, missing
from eval_pipeline.common.formatting import MISSING, fmt_number, markdown_table
from eval_pipeline.verdict.answers import AnswerVerdict


def _interval(value: Any, low: Any, high: Any) -> str:
    if fmt_number(value) == MISSING:
        return MISSING
    return f"{fmt_number(value)} [{fmt_number(low)}, {fmt_number(high)}]"


def _gate_cell(gate) -> str:
    if not gate.passed:
        return "**fails**"
    return {"comparable": "passes", "first_run": "first run", "not_comparable": "not compared"}.get(gate.state,
                                                                                                    gate.state)


def answer_section(verdict: AnswerVerdict) -> list[str]:
    """The report's "Answer quality" section (markdown lines)."""
    lines = ["## Answer quality", ""]
    missing_lines = [f"- `{v}` {g}: **FAILED** (not_compared): measured in run `{last}`, missing from this run."
                     for v, g, last in verdict.missing]
    if missing_lines:
        lines += ["Measurements with a history that this run did not make (they fail until a run without them "
                  "is accepted):", "", *missing_lines, ""]
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
                      "hit / miss": f"{fmt_number(g.get('hit', {}).get('pass_rate'))} / "
                                    f"{fmt_number(g.get('miss', {}).get('pass_rate'))}",
                      "p50 / p95 ms": f"{fmt_number(total.get('p50'), 1)} / {fmt_number(total.get('p95'), 1)}",
                      "tokens": m["tokens"]["tokens_total"], "cost": fmt_number(m["cost"]["cost_total"], 4),
                      "errored": r["n_errored"], "gate": _gate_cell(r["gate"])})
    columns = ["variant", "grader", "n", "pass rate", "mean score", "hit / miss", "p50 / p95 ms", "tokens", "cost",
               "errored", "gate"]
    lines += [markdown_table(pd.DataFrame(table), columns), ""]
    lines += (_by_type(verdict) + _by_form(verdict) + _dimensions(verdict))
    notes = [f"- `{r['variant']}` {r['grader']}: {r['gate'].message}" for r in verdict.rows if r["gate"].message]
    notes += [f"- `{r['variant']}` {r['grader']}: compared across a treatment change: "
              f"{'; '.join(r['treatment_changes'])}"
              for r in verdict.rows if r["treatment_changes"]]
    if notes:
        lines += ["### Answer gate", "", *notes, ""]
    return lines


def _by_type(verdict: AnswerVerdict) -> list[str]:
    rows = []
    for r in verdict.rows:
        types = r["metrics"]["graders"].get(r["grader"], {}).get("by_assertion_type")
        if r["grader"] == "deterministic" and types:
            rows.append({"variant": r["variant"],
                         **{t: f"{fmt_number(v['held_rate'])} ({v['n']})" for t, v in types.items()}})
    if not rows:
        return []
    columns = ["variant", *[c for c in ("exact", "contains", "regex", "json_schema") if c in rows[0]]]
    return ["### Assertions held, by type (deterministic; count in brackets)", "",
            markdown_table(pd.DataFrame(rows), columns), ""]


def _by_form(verdict: AnswerVerdict) -> list[str]:
    rows, forms = [], []
    for r in verdict.rows:
        by_form = r["metrics"]["graders"].get(r["grader"], {}).get("by_form") or {}
        forms += [f for f in by_form if f not in forms]
        rows.append({"variant": r["variant"], "grader": r["grader"],
                     **{f: f"{fmt_number(v['pass_rate'])} ({v['n']})" for f, v in by_form.items()}})
    if not forms:
        return []
    return ["### Pass rate by question form (count in brackets)", "",
            markdown_table(pd.DataFrame(rows).fillna(MISSING), ["variant", "grader", *forms]), ""]


def _dimensions(verdict: AnswerVerdict) -> list[str]:
    rows = [{"variant": r["variant"],
             **{k: fmt_number(v) for k, v in r["metrics"]["graders"]["judge"]["dimensions"].items() if k != "n"}}
            for r in verdict.rows
            if r["grader"] == "judge" and "dimensions" in r["metrics"]["graders"].get("judge", {})]
    if not rows:
        return []
    return ["### Judge dimensions (mean, 0–1)", "",
            markdown_table(pd.DataFrame(rows), ["variant", "faithfulness", "relevance", "citations", "overall"]), ""]


def answer_gate_output(verdict: AnswerVerdict) -> dict[str, Any]:
    """What the report asset returns for the answer_gate checks: per variant, passed and the rows."""
    out: dict[str, Any] = {"evaluated": verdict.evaluated, "reason": verdict.reason, "variants": {}}
    for r in verdict.rows:
        g = r["gate"]
        entry = out["variants"].setdefault(r["variant"], {"passed": True, "graders": {}})
        entry["passed"] = entry["passed"] and bool(g.passed)
        entry["graders"][r["grader"]] = {"passed": bool(g.passed), "state": g.state, "message": g.message,
                                         "pass_rate": finite_number(r["pass_rate"]),
                                         "mean_score": finite_number(r["mean_score"]),
                                         "generator": "unknown" if missing(r["generator"]) else r["generator"],
                                         "yardstick": r["yardstick"],
                                         "previous_run": (r["previous"] or {}).get("run_id") or "",
                                         "reference_run": (r["reference"] or {}).get("run_id") or "",
                                         "treatment_changes": list(r["treatment_changes"]),
                                         "rows": [dict(x) for x in g.rows]}
    for variant, grader, last in verdict.missing:  # measured before, missing now: failed, not compared
        g = verdict.gates[variant][grader]
        entry = out["variants"].setdefault(variant, {"passed": True, "graders": {}})
        entry["passed"] = False
        entry["graders"][grader] = {"passed": False, "state": g.state, "message": g.message, "pass_rate": None,
                                    "mean_score": None, "generator": "none", "yardstick": "", "previous_run": last,
                                    "reference_run": "", "treatment_changes": [], "rows": []}
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
