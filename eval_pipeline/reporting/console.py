"""The run's verdict as a CI log shows it: a compact table at the end of the run's output
(the variant, its headline metrics with their change against what it was compared with, its
gate and why), one verdict line a script can find, and the exit codes.

`dagster job execute` exits 0 when every step and blocking check passed and 1 otherwise, a
failed gate and a crashed step alike; `scripts/run_job.sh` (what `make demo` runs) tells them
apart with the verdict line this module writes: 0 every gate passed, 1 a gate failed (a
regression, or a variant that could not be compared), 2 the run broke before a verdict.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from eval_pipeline.common.metadata import Records
from eval_pipeline.history.runs import answers_left, removals_said

__all__ = ["EXIT_BROKEN", "EXIT_FAILED", "EXIT_PASSED", "VERDICT_PREFIX", "console_summary", "summary_table",
           "verdict_line"]

EXIT_PASSED, EXIT_FAILED, EXIT_BROKEN = 0, 1, 2
VERDICT_PREFIX = "eval-pipeline verdict:"  # the line scripts/run_job.sh reads
HEADLINE_METRICS = (("ndcg@10", "nDCG@10"), ("hit@5", "hit@5"), ("mrr", "MRR"))
_STATE_WORDS = {"comparable": "vs history", "paired": "paired", "first_run": "first run",
                "not_compared": "not compared", "mismatch": "mismatch", "unknown": "unknown"}
_WHY_WIDTH = 70


def verdict_line(verdict: Any) -> str:
    """`eval-pipeline verdict: PASSED (...)` or `... FAILED (...)`: the run's one verdict."""
    failed = [v for v, g in verdict.gates.items() if not g.passed]
    answers = getattr(verdict, "answers", None)
    answer_failed = [] if answers is None else [
        f"{v} {grader}" for v, graders in answers.gates.items() for grader, g in graders.items() if not g.passed]
    n = len(verdict.gates)
    if not failed and not answer_failed:
        return f"{VERDICT_PREFIX} PASSED ({n} of {n} variant(s) passed their gates)"
    parts = []
    if failed:
        parts.append(f"{len(failed)} of {n} variant(s) failed: {', '.join(failed)}")
    if answer_failed:
        parts.append(f"answer gate failed: {', '.join(answer_failed)}")
    return f"{VERDICT_PREFIX} FAILED ({'; '.join(parts)})"


def _number(value: Any) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(number) else number


def _cell(actual: float | None, delta: float | None) -> str:
    if actual is None:
        return "–"
    return f"{actual:.3f}" + ("" if delta is None else f" ({delta:+.3f})")


def _deciding(rows: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """Per metric, the row that decided it: its largest drop among the failed rows, else its
    first row (the comparison with the previous run). A gate compares a metric with several
    yardsticks (previous, reference, anchor): a variant that failed against one must not show
    the change against another it passed."""
    by_metric: dict[str, Mapping[str, Any]] = {}
    for row in rows:
        metric, kept = str(row.get("metric")), by_metric.get(str(row.get("metric")))
        if kept is None:
            by_metric[metric] = row
        elif row.get("passed") is False and (kept.get("passed") is not False or
                                             (_number(row.get("delta")) or 0.0) < (_number(kept.get("delta")) or 0.0)):
            by_metric[metric] = row
    return list(by_metric.values())


def _deltas(gate: Any) -> dict[str, float | None]:
    """metric -> the change that decided it (`_deciding`), when one was measured."""
    return {str(row.get("metric")): _number(row.get("delta")) for row in _deciding(getattr(gate, "rows", []))}


def _why(gate: Any) -> str:
    rows = getattr(gate, "rows", [])
    failures = [r for r in rows if r.get("passed") is False]
    judged = [r for r in rows if r.get("passed") is True]
    if gate.passed and judged:
        against = sorted({str(r.get("against")) for r in judged if r.get("against")})
        named = [f"the {a}" for a in against]
        return (f"{len({r.get('metric') for r in judged})} metric(s) within tolerance"
                + (f" of {', '.join(named[:-1])} and {named[-1]}" if len(named) > 1 else
                   f" of {named[0]}" if named else ""))
    if failures:
        worst = _deciding(failures)[0]
        delta = _number(worst.get("delta"))
        if delta is not None:
            text = f"{worst['metric']} {delta:+.3f} beyond its tolerance {_number(worst.get('tolerance')) or 0:.3f}"
        elif _number(worst.get("yardstick")) is None and _number(worst.get("actual")) is not None:
            text = f"{worst['metric']} not in the yardstick (a drop from it cannot be seen)"
        else:
            text = f"{worst['metric']} not measured (nothing scored)"
        if len(failures) > 1:
            text += f" (+{len(failures) - 1} more)"
        return text
    message = " ".join(str(getattr(gate, "message", "") or "").split())
    return message if len(message) <= _WHY_WIDTH else message[:_WHY_WIDTH - 1] + "…"


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    widths = [max(len(str(c)) for c in column) for column in zip(header, *rows)]
    line = "  ".join(f"{{:<{w}}}" for w in widths)
    return [line.format(*header).rstrip(), line.format(*("-" * w for w in widths)).rstrip(),
            *(line.format(*row).rstrip() for row in rows)]


def summary_table(verdict: Any, metrics: Sequence[tuple[str, str]] = HEADLINE_METRICS) -> Records:
    """One row per variant, failed gates first (retrieval or answers): the variant, its headline
    metrics with the change that decided each (`_deciding`), its gate (and its failed answer
    gates) and why (the first failed answer gate's, when only the answers failed). The console
    prints it at the end of a run; the verdict's and the report's asset pages show it in place.
    `verdict` is a `eval_pipeline.verdict.retrieval.RunVerdict`: its summary (one row per variant) and its gates
    (a state, rows of metric, actual, delta, tolerance, passed, and a message)."""
    summary = verdict.summary.set_index("variant") if len(verdict.summary) else None
    shown = [(m, label) for m, label in metrics if summary is not None and m in summary.columns]
    answers = getattr(verdict, "answers", None)
    answers_failed = {variant: [grader for grader, g in graders.items() if not g.passed]
                      for variant, graders in (answers.gates.items() if answers is not None else ())}
    rows = []
    for variant, gate in sorted(verdict.gates.items(),  # stable: any failed gate first
                                key=lambda item: item[1].passed and not answers_failed.get(item[0])):
        deltas = _deltas(gate)
        values: Mapping[str, Any] = summary.loc[variant] if summary is not None and variant in summary.index else {}
        cells = [_cell(_number(values.get(m)), deltas.get(m)) for m, _ in shown]
        state = _STATE_WORDS.get(gate.state, gate.state)
        verdict_cell = f"{'passed' if gate.passed else 'FAILED'} ({state})"
        why = _why(gate)
        if answers_failed.get(variant):
            graders = answers_failed[variant]
            verdict_cell += f"; answers FAILED ({', '.join(graders)})"
            if gate.passed and answers is not None:  # the answers are why it failed, not retrieval's tolerance
                why = f"answers ({graders[0]}): {_why(answers.gates[variant][graders[0]])}" \
                      + (f" (+{len(graders) - 1} more)" if len(graders) > 1 else "")
        rows.append((variant, *cells, verdict_cell, why))
    return Records(("variant", *(f"{label} (Δ)" for _, label in shown), "gate", "why"), tuple(rows))


def _removals(verdict: Any, variants: Sequence[str]) -> list[str]:
    """The line under an accept command naming the graders whose removal it acknowledges (none: no line)."""
    removes = verdict.removals_acknowledged(variants) if hasattr(verdict, "removals_acknowledged") else []
    return [f"  {removals_said(removes)}"] if removes else []


def console_summary(verdict: Any, metrics: Sequence[tuple[str, str]] = HEADLINE_METRICS) -> str:
    """The run's whole id, the table (`summary_table`), the answer gates in one line, the command
    that accepts the run for every variant whose gate failed (the table's `why` is cut to one
    line), and the one that accepts the answers alone of a variant whose answer gate alone
    failed, and the verdict line (see the module docstring)."""
    table = summary_table(verdict, metrics)
    lines = [f"eval-pipeline: {len(table.rows)} variant(s), run {getattr(verdict, 'run_id', '') or '?'}"
             + (" (limited: not a baseline)" if getattr(verdict, "limited", False) else "")
             + (f" (not recorded: {verdict.unrecorded})" if getattr(verdict, "unrecorded", "") else ""), ""]
    lines += _table(table.columns, table.rows)
    answers = getattr(verdict, "answers", None)
    if answers is not None and answers.gates:
        graded = [(v, grader, g) for v, graders in answers.gates.items() for grader, g in graders.items()]
        failed = [f"{v} {grader}" for v, grader, g in graded if not g.passed]
        lines += ["", f"answers: {len(graded)} (variant, grader) gate(s), "
                  + (f"{len(failed)} failed: {', '.join(failed)}" if failed else "all passed")]
    command = getattr(verdict, "accept_command", None)
    if command:  # the whole id and every failed variant: what `accept` needs, ready to copy
        lines += ["", f"to make this run the reference once its numbers are intended and the report has recorded it: "
                  f"{command}"]
        takes = [t for v in getattr(verdict, "acceptable_failures", []) for t in verdict.whole_acceptance_takes(v)]
        if takes:  # its answers too: a measured answer drop of a variant it names becomes the yardstick
            lines += [f"  it also accepts answers whose gate failed: {', '.join(takes)}"]
        leaves = [why for whys in getattr(verdict, "whole_acceptance_leaves", {}).values() for why in whys]
        if leaves:  # said before the command is run, not only in its output
            lines += [f"  {answers_left(leaves)}"]
        lines += _removals(verdict, getattr(verdict, "acceptable_failures", []))
    answers_command = getattr(verdict, "answers_accept_command", None)
    if answers_command:  # variants whose answer gate alone failed: their answers only
        lines += ["", "to make this run's answers the reference once they are intended and the report has recorded "
                  f"the run (retrieval references stay): {answers_command}"]
        whole = set(getattr(verdict, "acceptable_failures", []))
        lines += _removals(verdict, [v for v in verdict.acceptable_answer_failures if v not in whole])
    lines += ["", verdict_line(verdict),
              f"exit codes: {EXIT_PASSED} every gate passed, {EXIT_FAILED} a gate failed, "
              f"{EXIT_BROKEN} the run broke before a verdict (scripts/run_job.sh)"]
    return "\n".join(lines)
