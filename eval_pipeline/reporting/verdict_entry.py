"""The verdict as the report asset's first metadata entry: the headline and one line per variant's
gate (what failed, how it was judged, what dropped by how much), short enough that the UI shows
it in place. A list, not a table: the metadata table's value column is narrow, and a list wraps
where a table is cut off.

Dagster's asset page renders a markdown entry of fewer than 1000 characters inline; a longer
one is a *[Show Markdown]* link whose dialog opens scrolled to its bottom (its Close button
takes the focus). So this entry stays under `INLINE_LIMIT`: failed gates first, passed ones
collapsed into one line, and with very many failures the rows that do not fit counted
("… 12 more failed: see `report`")."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from eval_pipeline.common.formatting import fmt_number

INLINE_LIMIT = 1000  # characters: Dagster's asset page shows a shorter markdown entry inline


def _dropped(rows: Sequence[Mapping[str, Any]]) -> str:
    """The failed rows of one variant, one item per metric and numbers as printed (a missing one,
    NaN today or absent from the yardstick, as the missing mark), the comparisons that measured
    the same drop joined (`previous/reference`)."""
    against: dict[tuple, list[str]] = {}
    for r in rows:
        key = (r["metric"], fmt_number(r["actual"]), fmt_number(r["yardstick"]), fmt_number(r["delta"], signed=True),
               r["tolerance"])
        against.setdefault(key, []).append(str(r.get("against", "")))
    return "; ".join(f"{metric} {actual} vs {yardstick} ({delta}, tol {tolerance:g}, {'/'.join(how)})"
                     for (metric, actual, yardstick, delta, tolerance), how in against.items())


def _failed_line(variant: str, gate: Any, rows: Sequence[Mapping[str, Any]]) -> str:
    what = f"dropped past its tolerance: {_dropped(rows)}" if rows else _short(str(gate.message))
    return f"- `{variant}`: **FAILED** ({gate.state}): {what}"


def _short(text: str, limit: int = 140) -> str:
    text = text.replace("\n", " ")
    return text if len(text) <= limit else text[:limit - 1].rstrip() + "…"


def _names(variants: Sequence[str], limit: int = 160) -> str:
    shown = ", ".join(f"`{v}`" for v in variants)
    return shown if len(shown) <= limit else _short(shown, limit)


def verdict_entry(verdict: Any, headline: str, *, limit: int = INLINE_LIMIT) -> str:
    """The headline (markdown), then a line per variant's retrieval gate, failed ones first, and
    a line for the answer gates that failed; under `limit` characters."""
    failing = [r for r in verdict.gate_rows() if r.get("passed") is False]
    failed = [(v, g) for v, g in verdict.gates.items() if not g.passed]
    passed = [v for v, g in verdict.gates.items() if g.passed]
    answers = getattr(verdict, "answers", None)
    answer_failed = [v for v in answers.gates if not answers.variant_passed(v)] if answers is not None else []

    head = [f"**{headline.strip('*')}**", ""]
    tail = [f"Answer gate FAILED for: {_names(answer_failed)}."] if answer_failed else []
    failed_rows = [_failed_line(v, g, [r for r in failing if r["variant"] == v]) for v, g in failed]
    passed_rows = [f"- `{v}`: passed ({verdict.gates[v].state})" for v in passed]

    def text(rows: list[str], extra: list[str]) -> str:
        return "\n".join([*head, *rows, *([""] if rows and extra else []), *extra]).rstrip() + "\n"

    full = text(failed_rows + passed_rows, tail)
    if len(full) < limit:
        return full
    summary = [f"Passed: {len(passed)} variant(s), {_names(passed)}."] if passed else []
    for shown in range(len(failed_rows), -1, -1):
        more = len(failed_rows) - shown
        extra = ([f"… {more} more failed: see `report`."] if more else []) + summary + tail
        candidate = text(failed_rows[:shown], extra)
        if len(candidate) < limit:
            return candidate
    return _short(headline, limit - 1) + "\n"
