"""The report's answer-quality section and what the answer_gate checks show, rendered from the
answer verdict (`eval_pipeline.verdict.answers`), which decides.

Beside the pass rates: a grader whose judge is the generator (allowed by
``allow_self_judging``) is shown "<grader> (self-judged)"; the grounding grader's rates (in
context, in the corpus, citations per answer, the items not found); the repair's pass rate
before and after, with its counts and cost; and, when the run calibrated its judge, the
judge's agreement with people (accuracy, Cohen's kappa) and the prediction-powered interval
of its pass rate. `write_answer_files` writes the per-prompt gradings (``answers.jsonl``) and
the hallucination log (``hallucinations.md`` / ``.jsonl``) beside the report, from the metric
rows the verdict carries (`eval_pipeline.grading.summary.answer_metric_frames`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from eval_pipeline.common.atomic import atomic_write_text
from eval_pipeline.common.checks import finite_number, missing
from eval_pipeline.common.formatting import MISSING, fmt_number, markdown_table
from eval_pipeline.common.metadata import shown_number_or_nan
from eval_pipeline.grading.grounding import hallucinations_jsonl, hallucinations_markdown
from eval_pipeline.history.runs import how_to_accept
from eval_pipeline.verdict.answers import AnswerVerdict
from eval_pipeline.verdict.retrieval import RunVerdict


def _interval(value: Any, low: Any, high: Any) -> str:
    if fmt_number(value) == MISSING:
        return MISSING
    return f"{fmt_number(value)} [{fmt_number(low)}, {fmt_number(high)}]"


def _gate_cell(gate) -> str:
    if not gate.passed:
        return "**fails**"
    # a passing not_comparable gate judged nothing (a warning): never in the words of a failed not_compared one
    return {"comparable": "passes", "first_run": "first run",
            "not_comparable": "not comparable (warning)"}.get(gate.state, gate.state)


def answer_section(verdict: AnswerVerdict, files: Mapping[str, str] | None = None) -> list[str]:
    """The report's "Answer quality" section (markdown lines); `files` (what `write_answer_files`
    wrote: name -> path) are named at its end."""
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
        table.append({"variant": r["variant"], "grader": _grader_cell(r), "n": r["n_scored"],
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
    if any(_self_judged(r) for r in verdict.rows):
        lines += ["*(self-judged)*: the grader's model wrote the answers (allow_self_judging): a model is lenient "
                  "with its own answers, so the number is shown labelled and never compared with an independent "
                  "judge's.", ""]
    lines += _zero_everywhere(verdict)
    lines += (_grounding(verdict) + _repair(verdict) + _agreement(verdict) + _by_type(verdict) + _by_form(verdict)
              + _dimensions(verdict) + _files(verdict, files or {}))
    notes = _collapsed([(f"`{r['variant']}` {r['grader']}", r["gate"].message) for r in verdict.rows
                        if r["gate"].message])
    notes += _collapsed([(f"`{r['variant']}` {r['grader']}",
                          f"compared across a treatment change: {'; '.join(r['treatment_changes'])}")
                         for r in verdict.rows if r["treatment_changes"]])
    if notes:
        lines += ["### Answer gate", "", *notes, ""]
    return lines


# Why a grader can fail every answer of an extractive generator by construction.
_EXTRACTIVE_LIMITS = {
    "static": "the static checks look for a python block that parses, imports and names what the prompt asks; "
              "the extractive generator returns sentences of the context and writes no code",
}


def _zero_everywhere(verdict: AnswerVerdict) -> list[str]:
    """A note for each grader whose pass rate is 0 for every variant: said why when the reason is
    known (an extractive generator cannot write code), else named, so 0.000 in every row is not
    mistaken for a broken grader or a regression."""
    by_grader: dict[str, list[Mapping[str, Any]]] = {}
    for r in verdict.rows:
        by_grader.setdefault(str(r["grader"]), []).append(r)
    notes = []
    for grader, rows in by_grader.items():
        rates = [r.get("pass_rate") for r in rows]
        if not rows or any(missing(p) or float(p) > 0 for p in rates):  # type: ignore[arg-type]
            continue
        extractive = all(str(r.get("generator") or "").split(":", 1)[-1].startswith("extractive") for r in rows)
        why = _EXTRACTIVE_LIMITS.get(grader) if extractive else None
        notes.append(f"*{grader} 0.000 for every variant*: " + (f"{why}." if why else
                     "no answer of any variant passed; the per-type table below says which checks failed."))
    return notes + [""] if notes else []


def _collapsed(items: list[tuple[str, str]]) -> list[str]:
    """One line per distinct message, naming everything it holds for: `- x, y: message`, or
    `- 20 (variant, grader) pairs, x, y, ...: message` (the same sentence once, not 20 times)."""
    by_message: dict[str, list[str]] = {}
    for who, message in items:
        by_message.setdefault(message, []).append(who)
    return [f"- {whos[0]}: {message}" if len(whos) == 1 else
            f"- {len(whos)} (variant, grader) pairs, {', '.join(whos)}: {message}"
            for message, whos in by_message.items()]


def _self_judged(row: Mapping[str, Any]) -> bool:
    value = row.get("self_judged")
    if not missing(value) and bool(value):
        return True
    return str(row.get("yardstick") or "").endswith("+self-judged")


def _grader_cell(row: Mapping[str, Any]) -> str:
    return f"{row['grader']} (self-judged)" if _self_judged(row) else str(row["grader"])


def _json(row: Mapping[str, Any], column: str) -> Any:
    value = row.get(column)
    if missing(value) or not isinstance(value, str) or not value:
        return None
    return json.loads(value)


def _per_variant(verdict: AnswerVerdict, column: str) -> dict[str, Any]:
    """variant -> the first non-empty JSON value of `column` among its rows."""
    out: dict[str, Any] = {}
    for r in verdict.rows:
        value = _json(r, column)
        if value is not None and r["variant"] not in out:
            out[r["variant"]] = value
    return out


def _grounding(verdict: AnswerVerdict) -> list[str]:
    rows = []
    for r in verdict.rows:
        if r["grader"] != "grounding":
            continue
        g = r["metrics"]["graders"].get("grounding", {}).get("grounding") or {}
        rows.append({"variant": r["variant"], "grounded rate": fmt_number(r.get("grounded_rate")),
                     "corpus rate": fmt_number(r.get("corpus_rate")),
                     "citations / answer": fmt_number(r.get("citations_per_answer"), 2),
                     "items": g.get("n_items", MISSING),
                     "not in context": g.get("n_ungrounded", MISSING),
                     "not in corpus": MISSING if g.get("n_not_in_corpus") is None else g["n_not_in_corpus"],
                     "unknown citations": g.get("unknown_citations", MISSING)})
    if not rows:
        return []
    return ["### Grounding (items an answer names, found in its context / anywhere in the corpus)", "",
            "*grounded rate*: of the symbols, calls, quoted phrases and numbers the answers use, the share found in "
            "their own context; *corpus rate*: found anywhere in the corpus through the keyword index "
            f"({MISSING}: the corpus was not probed). Items in neither are listed in the hallucination log: targets "
            "to read, not verdicts.", "",
            markdown_table(pd.DataFrame(rows), list(rows[0])), ""]


def _repair(verdict: AnswerVerdict) -> list[str]:
    rows = []
    for variant, s in _per_variant(verdict, "repair_json").items():
        rows.append({"variant": variant, "checked": s["n_checked"],
                     "static pass rate before → after": f"{fmt_number(s['pass_rate_before'])} → "
                                                        f"{fmt_number(s['pass_rate_after'])}",
                     "asked": s["n_repairs_asked"], "kept": s["n_kept"], "rejected": s["n_rejected"],
                     "failed": s["n_failed"], "no-op": s["n_no_op"],
                     "tokens": int(s["repair_prompt_tokens"]) + int(s["repair_completion_tokens"]),
                     "cost": fmt_number(s["repair_cost"], 4)})
    if not rows:
        return []
    return ["### Repair (one more call for an answer failing its static checks)", "",
            "A repair is kept only when it fails strictly fewer checks; its tokens are billed kept or not. "
            "*no-op*: the extractive generator writes no text of its own and cannot be asked again.", "",
            markdown_table(pd.DataFrame(rows), list(rows[0])), ""]


def _agreement(verdict: AnswerVerdict) -> list[str]:
    rows, sources = [], set()
    for r in verdict.rows:
        a = _json(r, "agreement_json")
        if a is None:
            continue
        sources.add(str(a.get("source")))
        ppi = (f"{fmt_number(a['estimate'])} [{fmt_number(a['low'])}, {fmt_number(a['high'])}]"
               if "estimate" in a else f"{MISSING} ({a.get('error', 'not computed')})")
        rows.append({"variant": r["variant"], "grader": _grader_cell(r), "judge pass rate": fmt_number(r["pass_rate"]),
                     "PPI estimate [95%]": ppi, "kappa": fmt_number(a.get("kappa")),
                     "accuracy": fmt_number(a.get("accuracy")),
                     "calibration rows": f"{a.get('n_calibration')} ({a.get('n_not_graded') or 0} not graded)"})
    if not rows:
        return []
    return ["### Judge agreement with people", "",
            f"The judge graded the calibration set {', '.join(f'`{s}`' for s in sorted(sources))}; *kappa*: Cohen's "
            "kappa with the people's grades (1 agrees fully, 0 no better than chance); *PPI*: the prediction-powered "
            "estimate and interval of the pass rate people would give (Angelopoulos et al. 2023, as ARES uses it), "
            "from the judge's grades of this run and its errors on the calibration set.", "",
            markdown_table(pd.DataFrame(rows), list(rows[0])), ""]


def _files(verdict: AnswerVerdict, files: Mapping[str, str]) -> list[str]:
    out = []
    if "answers" in files:
        out.append("- `answers.jsonl`: every grading, one line per (variant, prompt, grader): status, pass, score, "
                   "reason, the answer's tokens and cost (its text only when the run kept it).")
    log = _hallucinations(verdict)
    if log is not None and "hallucinations" in files:
        absent = sum(1 for e in log if e.get("in_corpus") is False)
        out.append(f"- `hallucinations.md` / `hallucinations.jsonl`: {len(log)} item(s) not in their answer's "
                   f"context, {absent} of them nowhere in the corpus.")
    return ["Files beside this report:", "", *out, ""] if out else []


def _hallucinations(verdict: AnswerVerdict) -> list[dict[str, Any]] | None:
    """The run's hallucination log (every grounding row's), None when no grounding grader ran."""
    found = False
    log: list[dict[str, Any]] = []
    for r in verdict.rows:
        entries = _json(r, "hallucinations_json") if r["grader"] == "grounding" else None
        if entries is not None:
            found = True
            log += entries
    return log if found else None


def write_answer_files(verdict: AnswerVerdict, stage: Path, suffix: str = "") -> dict[str, str]:
    """``answers<suffix>.jsonl`` (every grading line) and, when the grounding grader ran,
    ``hallucinations<suffix>.md`` / ``.jsonl`` into the staged results folder; name -> path of
    what was written (nothing without answer metrics that carry them)."""
    out: dict[str, str] = {}
    lines = [line for r in verdict.rows for line in (_json(r, "gradings_json") or [])]
    if lines:
        order = {v: i for i, v in enumerate(dict.fromkeys(r["variant"] for r in verdict.rows))}
        lines.sort(key=lambda x: (order.get(x["variant"], len(order)), str(x["prompt_id"]), str(x["grader"])))
        path = Path(stage) / f"answers{suffix}.jsonl"
        atomic_write_text(path, "".join(json.dumps(line, sort_keys=True, ensure_ascii=False) + "\n" for line in lines))
        out["answers"] = str(path)
    log = _hallucinations(verdict)
    if log is not None:
        md, jl = Path(stage) / f"hallucinations{suffix}.md", Path(stage) / f"hallucinations{suffix}.jsonl"
        atomic_write_text(md, hallucinations_markdown(log))
        atomic_write_text(jl, hallucinations_jsonl(log))
        out.update({"hallucinations": str(md), "hallucinations_jsonl": str(jl)})
    return out


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
                                         "self_judged": _self_judged(r),
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


def answer_check_output(verdict: RunVerdict) -> dict[str, Any]:
    """What the answer_gate checks read: the answer gates (`answer_gate_output`) and, per variant
    whose failed answer gate an acceptance of this run can take, the run to name (its answers
    alone: `history.answers.accept_run(answers_only=True)`)."""
    answers = verdict.answers
    return {"answers": answer_gate_output(answers) if answers is not None else None,
            "accept": {v: verdict.run_id for v in verdict.acceptable_answer_failures},
            "accept_removes": {v: verdict.removals_acknowledged([v]) for v in verdict.acceptable_answer_failures}}


def answer_gate_checks(report: Mapping[str, Any], keys: Sequence[str]) -> dict[str, tuple[bool, dict[str, Any]]]:
    """key -> (passed, metadata) of each variant's answer gate, with how to accept the run where
    its gate failed and an acceptance can take it (`answer_check_output`). A variant without
    answers in this run passes, marked not evaluated (with the reason)."""
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
            metadata[f"{grader} pass_rate"] = shown_number_or_nan(g["pass_rate"])
            metadata[f"{grader} mean_score"] = shown_number_or_nan(g["mean_score"])
            metadata[f"{grader} yardstick"] = g["yardstick"] or ""
            if g.get("self_judged"):
                metadata[f"{grader} self-judged"] = True
            if g["message"]:
                metadata[f"{grader} message"] = g["message"]
            if g["treatment_changes"]:
                metadata[f"{grader} treatment changes"] = "; ".join(g["treatment_changes"])
        metadata["generator"] = next(iter(entry["graders"].values()))["generator"]
        if key in report.get("accept", {}):  # a failed gate: how to accept it once its numbers are intended
            metadata["accept"] = how_to_accept(report["accept"][key], key, answers_only=True,
                                               removes=report.get("accept_removes", {}).get(key, ()))
        out[key] = (bool(entry["passed"]), metadata)
    return out
