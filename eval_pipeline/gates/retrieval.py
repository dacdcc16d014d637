"""Regression gates: did a variant's metrics drop by more than the team tolerates?

A gate compares a variant's current summary metrics with the same variant's metrics in the
previous comparable run (see :mod:`eval_pipeline.history.runs`) and fails when any gated metric
dropped by **more** than its tolerance. Tolerances are absolute (metric units: 0.05 on
hit@1 means five points of hit rate), because all gated metrics live in [0, 1].

Whether the two runs can be compared at all is decided by provenance, not here; the gate
takes the resulting state:

``first_run``     a brand-new project, or a genuinely new variant: nothing to compare, the
                  gate passes (the verdict decides when a first run is genuine).
``comparable``    same corpus, questions, labels and scoring protocol: the tolerances decide.
``paired``        the benchmark changed, and the reference configuration was ranked on
                  today's questions in the same run (:mod:`eval_pipeline.verdict.paired`):
                  the tolerances decide, on the same questions.
``not_compared``  nothing comparable and no paired comparison: the gate fails closed,
                  until a run is accepted as the new reference.
``mismatch``      corpus, questions, labels or scoring protocol changed, and nothing else
                  decided: it fails, like ``not_compared`` (a run that moved the yardstick
                  is never passed for lack of one).
``unknown``       provenance is missing or invalid: fails, like ``mismatch``.

This module is pure (no database, no Dagster), so an asset check can call it directly.
"""

from __future__ import annotations

import math
import re
from collections.abc import Collection, Mapping
from dataclasses import replace
from numbers import Real
from typing import Any

from eval_pipeline.common.checks import finite_number
from eval_pipeline.common.formatting import fmt_number
from eval_pipeline.gates.rule import EPSILON, GateResult, within_tolerance
from eval_pipeline.history.measurements import MEASURED_STATES, failed_measured
from eval_pipeline.metrics.retrieval import GATED, all_metric_names, measure, metric_names

__all__ = [
    "COMPARISON_STATES",
    "lower_is_better",
    "DEFAULT_TOLERANCES",
    "EPSILON",
    "GATEABLE_METRICS",
    "GateResult",
    "not_compared_unless_measured",
    "evaluate_gate",
    "validate_tolerances",
]

DEFAULT_TOLERANCE = 0.05


# The measures gated by default (the registry's GATED list at import: the built-in ones), each
# with DEFAULT_TOLERANCE; a plain dict, as the variants file's reader wants it. A measure registered
# by a plugin is gated by naming it in `gate.tolerances` (GATEABLE_METRICS is live).
DEFAULT_TOLERANCES: dict[str, float] = dict.fromkeys(metric_names(GATED), DEFAULT_TOLERANCE)

# Every measure a gate may name: the registry's (question measures as score_queries fills them at
# the default ks, run measures such as the refusal rates), live.
GATEABLE_METRICS = all_metric_names()


def lower_is_better(metric: str) -> bool:
    """Whether a rise of `metric` is the regression (false_refusal_rate, aurc): its measure says so."""
    try:
        return not measure(metric).higher_is_better
    except ValueError:
        return False

COMPARISON_STATES = ("first_run", "comparable", "paired", "not_compared", "mismatch", "unknown")

# A scientific literal as PyYAML leaves it a string: digits, an optional fraction, an exponent.
# ASCII only; not "nan", "inf", "0x1", "1_0", nor a literal without its exponent.
_SCIENTIFIC = re.compile(r"[+]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)[eE][+-]?[0-9]+")


def _scientific(text: str) -> object:
    """The number a scientific literal (``1e-2``) means, or the text unchanged (refused by the caller)."""
    return float(text) if _SCIENTIFIC.fullmatch(text.strip()) else text


def validate_tolerances(raw: Mapping[str, object]) -> dict[str, float]:
    """Validated tolerances as a new ``{metric: float}`` dict (input order kept).

    Each value must be a real number (not a bool), finite and in [0, 1], or a string holding a
    scientific literal with an exponent (``1e-2``, ``5E-2``, ``+1e-2``): PyYAML reads ``1e-2``
    without a dot as the string ``"1e-2"``, which the file's author meant as a number (the answer
    gate accepts it too). Any other string stays an error (``"0.05"`` was quoted on purpose: a
    typo to fix, not a number to guess). 0 means no
    drop at all is allowed; ``-0.0`` is accepted as 0 and normalized to ``0.0`` so it
    prints and compares as the 0 it means. Metric names must be per-question metric
    columns (:data:`GATEABLE_METRICS`): a misspelled name would otherwise gate nothing.
    An empty mapping is an error too (a gate that checks nothing always passes).
    Every error is a ValueError naming the setting and the bad value.
    """
    if not isinstance(raw, Mapping):
        raise ValueError(f"gate tolerances must be a mapping of metric -> tolerance, got {raw!r}")
    if not raw:
        raise ValueError(
            "gate tolerances are empty: name at least one metric to gate; "
            f"valid metrics: {', '.join(GATEABLE_METRICS)}"
        )
    out: dict[str, float] = {}
    for metric, value in raw.items():
        if not isinstance(metric, str):
            comma = (" (a decimal comma in a {...} mapping, `hit@1: 0,05`, splits one entry in two: write 0.05)"
                     if isinstance(metric, (int, float)) and not isinstance(metric, bool) else "")
            raise ValueError(f"gate tolerance names {metric!r}, which is not a metric name{comma}; valid metrics: "
                             f"{', '.join(GATEABLE_METRICS)}")
        if metric not in GATEABLE_METRICS:
            raise ValueError(
                f"gate tolerance names unknown metric {metric!r}; valid metrics: {', '.join(GATEABLE_METRICS)}"
            )
        number = _scientific(value) if isinstance(value, str) else value
        if (
            isinstance(number, bool)
            or not isinstance(number, Real)
            or not math.isfinite(float(number))
            or not 0.0 <= float(number) <= 1.0
        ):
            raise ValueError(f"gate tolerance for {metric!r} must be a finite number in [0, 1], got {value!r}")
        out[metric] = float(number) + 0.0  # -0.0 + 0.0 == 0.0 (positive zero)
    return out


def evaluate_gate(
    current: Mapping[str, float],
    yardstick: Mapping[str, float] | None,
    tolerances: Mapping[str, object],
    comparison_state: str,
    *,
    strict: bool,
    at_best: Collection[str] = (),
) -> GateResult:
    """Judge ``current`` metrics against the ``yardstick`` run's metrics under ``tolerances``.

    ("yardstick", not "baseline": the baseline is the variant a run's other variants are
    compared with; the yardstick is the earlier run a variant is judged against.)

    A metric passes when ``actual - yardstick >= -(tolerance + EPSILON)``: an improvement
    always passes, a drop equal to the tolerance passes, a drop just over it fails (see
    :data:`EPSILON`). The gate passes when every judged metric passes. For a measure whose rise
    is the regression (``false_refusal_rate``, ``aurc``: its measure's ``higher_is_better`` is
    False) the row's ``delta`` is ``yardstick - actual`` (the change toward better, as for
    every other row), so a rise by more than the tolerance fails.

    * ``current`` must contain every gated metric (ValueError otherwise). A current value
      that is NaN (e.g. no answerable questions) fails its row in a comparable run, unless the
      metric is in ``at_best`` (:func:`eval_pipeline.metrics.retrieval.at_best` of today's summary
      row: rc_nauc of a run that lost nothing, where every confidence is as good as the oracle):
      no drop is possible from the best, so the row passes with no delta, and the message says
      why. NaN alone cannot mean that: rc_nauc is NaN after a run that lost everything too.
    * A gated metric that the yardstick does not have (or has as NaN) while today's run
      measured it fails its row, and the gate is ``not_compared``: a drop from the yardstick
      could not be seen (a metric newly gated, or a yardstick that measured nothing of it).
      Unless another row measured a drop: then the gate keeps ``comparison_state`` and its
      message names that drop first (a measured regression is never "not compared"). One
      measured on neither side is not judged (``passed`` None) and is named in the message.
    * ``comparison_state`` must be one of :data:`COMPARISON_STATES`; ``comparable`` needs
      ``yardstick`` metrics (so does ``paired``). For ``mismatch``/``unknown``/``not_compared``
      the rows are still filled in for information, but no row decides: the gate fails
      (closed), whatever ``strict`` says.
    """
    tolerances = validate_tolerances(tolerances)
    if comparison_state not in COMPARISON_STATES:
        raise ValueError(
            f"comparison_state must be one of {', '.join(COMPARISON_STATES)}; got {comparison_state!r}"
        )
    if not isinstance(strict, bool):
        raise ValueError(f"strict must be True or False, got {strict!r}")
    if not isinstance(current, Mapping):
        raise ValueError(f"current must be a mapping of metric -> value, got {current!r}")
    if yardstick is not None and not isinstance(yardstick, Mapping):
        raise ValueError(f"yardstick must be a mapping of metric -> value or None, got {yardstick!r}")
    if comparison_state in MEASURED_STATES and yardstick is None:
        raise ValueError(f"comparison_state {comparison_state!r} needs yardstick metrics, got yardstick=None")
    missing = [m for m in tolerances if m not in current]
    if missing:
        raise ValueError(f"current metrics lack gated metric(s) {missing}; have {sorted(current)}")

    judged = comparison_state in MEASURED_STATES
    rows: list[dict[str, Any]] = []
    for metric, tolerance in tolerances.items():
        actual = finite_number(current[metric])
        base = finite_number(yardstick.get(metric)) if yardstick is not None else None
        # the change toward better: actual - yardstick, or yardstick - actual for a measure whose
        # rise is the regression, so "delta >= -tolerance" passes (here, and wherever the rows'
        # deltas are carried, such as the verdict's drift ledger)
        sign = -1.0 if lower_is_better(metric) else 1.0
        delta = sign * (actual - base) if actual is not None and base is not None else None
        if not judged or (base is None and actual is None):
            passed = None  # unmeasured on both sides: nothing to judge, nothing measured today either
        elif base is None:
            passed = False  # measured today, not in the yardstick: a drop from it could not be seen
        elif actual is None and metric in at_best:
            passed = True  # undefined today because the run is at the metric's best: nothing to drop to
        else:
            passed = within_tolerance(delta, tolerance)
        rows.append(
            {
                "metric": metric,
                "actual": actual if actual is not None else math.nan,
                "yardstick": base,
                "delta": delta,
                "tolerance": tolerance,
                "passed": passed,
            }
        )

    if comparison_state == "first_run":
        return GateResult(True, comparison_state, rows, "no earlier comparable run to compare with: gate passes")
    if comparison_state in ("mismatch", "unknown", "not_compared"):
        why = {"mismatch": "the corpus, questions, labels or scoring protocol changed since the previous run",
               "unknown": "the provenance of this or the previous run is missing or invalid",
               "not_compared": "nothing comparable was measured"}[comparison_state]
        return GateResult(False, comparison_state, rows,
                          f"FAILED (not compared): {why}; a run that cannot be judged never passes: accept it "
                          "(python -m eval_pipeline.history accept RUN_ID) once the change is intended and the "
                          "report has recorded it")

    failures = [r for r in rows if r["passed"] is False]
    unjudged = [r["metric"] for r in rows if r["passed"] is None]
    notes = f"; not judged (measured on neither side): {', '.join(unjudged)}" if unjudged else ""
    best = [r["metric"] for r in rows if r["passed"] is True and r["delta"] is None and r["metric"] in at_best]
    if best:
        notes += (f"; {', '.join(best)} undefined today: the run is at its best (it lost nothing, so there was "
                  "nothing to rank), no drop")
    absent = [r for r in failures if r["yardstick"] is None and not math.isnan(r["actual"])]
    dropped = [r for r in failures if r not in absent]
    parts = [
        f"{r['metric']} {fmt_number(r['yardstick'], 4)} -> {fmt_number(r['actual'], 4)} "
        f"(delta {fmt_number(r['delta'], 4, signed=True)}, tolerance {r['tolerance']:g})"
        for r in dropped
    ]
    if absent:
        names = ", ".join(r["metric"] for r in absent)
        unseen = (f"gated metric(s) {names} measured now but not in the yardstick: a drop from it cannot be seen, "
                  f"so the gate cannot pass{notes}")
        if dropped:
            # A measured drop beside a metric the yardstick lacks stays a measured failure, named first: as
            # "not compared" its message would hide it and accepting the run whole would take it unnamed.
            return GateResult(False, comparison_state, rows,
                              "FAILED: dropped more than tolerated: " + "; ".join(parts) + f"; and {unseen}")
        return GateResult(False, "not_compared", rows,
                          f"FAILED (not compared): {unseen}; accept a run that measured them once the report has "
                          "recorded it (python -m eval_pipeline.history accept RUN_ID)")
    if failures:
        return GateResult(False, comparison_state, rows,
                          "FAILED: dropped more than tolerated: " + "; ".join(parts) + notes)
    judged_n = len(rows) - len(unjudged)
    if rows and judged_n == 0:  # every gated metric unmeasured on both sides: nothing was judged
        return GateResult(False, "not_compared", rows, "FAILED (not compared): no gated metric could be judged"
                          f"{notes}; a gate that judged nothing does not pass")
    return GateResult(True, comparison_state, rows, f"passed: {judged_n} metric(s) within tolerance{notes}")


def not_compared_unless_measured(gate: GateResult, why: str,
                                 also: str = "not comparable with the pinned reference") -> GateResult:
    """``gate`` failed closed as ``not_compared`` for ``why``; but a gate that already failed a
    measured comparison (``comparable`` or ``paired``) keeps its state, with ``also`` and ``why``
    added: a measured regression must stay one, or accepting the run whole would accept it unnamed."""
    if failed_measured(gate.passed, gate.state):
        return replace(gate, message=f"{gate.message}; also {also}: {why}")
    return replace(gate, passed=False, state="not_compared", message=f"FAILED (not compared): {why}")
