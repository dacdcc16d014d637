"""The one gate rule of retrieval and answers: when a drop fails, and what a measurement with
no yardstick gets.

Both gates (:mod:`eval_pipeline.gates.retrieval` for a variant's retrieval metrics,
:mod:`eval_pipeline.gates.answers` for its answer grades) judge through these two functions,
so the two halves of the verdict cannot come to disagree on either question:

* :func:`within_tolerance` — a metric passes when its change toward better is at least minus
  its tolerance (a drop equal to the tolerance passes; :data:`EPSILON` absorbs float noise);
* :func:`without_yardstick` — the fail-closed rule. Nothing to compare with passes only for a
  genuinely new measurement (never recorded, of any benchmark) in a project where no variant
  vanished meanwhile, and never under ``strict``; a measurement that had a yardstick, or was
  recorded at all, fails as ``not_compared`` until a run of it is accepted.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = ["EPSILON", "GateResult", "within_tolerance", "without_yardstick"]

# A drop exactly equal to the tolerance passes. Metric means are sums of floats divided by
# n, so "0.80 - 0.75" is 0.05000000000000004, not 0.05; without this slack a drop that is
# equal to the tolerance on paper would fail on float noise. 1e-12 is far below any real
# metric difference (one question out of a million moves a mean by 1e-6).
EPSILON = 1e-12


@dataclass(frozen=True)
class GateResult:
    """Outcome of one gate: ``rows`` holds one dict per gated metric with keys
    ``metric, actual, yardstick, delta, tolerance, passed`` (``yardstick``/``delta`` are None
    when there is nothing to compare; ``passed`` is None for rows that were not judged)."""

    passed: bool
    state: str
    rows: list[dict[str, Any]] = field(default_factory=list)
    message: str = ""
    # not compared because a comparison failed (the history could not be read, a reference's
    # ranking raised), not because none can be made: a run again judges it, so accepting the
    # run whole must not take it unjudged (it is named, as a measured regression is)
    unjudged: bool = False

    @property
    def failures(self) -> list[dict[str, Any]]:
        return [row for row in self.rows if row["passed"] is False]


def within_tolerance(delta: float | None, tolerance: float) -> bool:
    """Whether a change toward better of ``delta`` stays within ``tolerance`` (None: nothing
    was measured, which fails)."""
    return delta is not None and delta >= -(tolerance + EPSILON)


def without_yardstick(what: str, *, had_yardstick: str | None, recorded: str | None, project_has_history: bool,
                      vanished: Sequence[str], strict: bool, hint: str, new: str, changed: str = "",
                      first: str | None = "the project's first run", recorded_as: str | None = None) -> GateResult:
    """The gate of a measurement (``what``: "'dense'", "the deterministic grading of 'dense'")
    with no yardstick of its own benchmark:

    * ``had_yardstick`` (the run id of its latest yardstick of any other benchmark or
      instrument, ``changed`` saying what changed): the benchmark moved under it: ``not_compared``;
    * ``recorded`` (the run id of its latest run recorded at all): never eligible nor accepted
      (a failed gate, an error): not new, and nothing can judge it: ``not_compared``; with
      ``recorded_as`` (the name it was recorded under, gone from the variants file: its
      configuration's runs, eligible or not), not new either, and no run of its own name;
    * ``project_has_history`` false: ``first`` (the project's first run): passes, unless
      ``strict``; with ``first`` None (a history that is not the whole project's: its answers),
      a new measurement as below;
    * ``vanished`` (variants gone from the variants file since the last acceptance), in a
      project with a history: a rename that also changed the configuration carries no
      history: ``not_compared``;
    * else a genuinely new measurement (``new`` says what it is: "a new variant (never
      recorded…)"): passes, unless ``strict``.

    ``hint`` is how to accept a run (the exact command)."""
    if had_yardstick is not None:
        return GateResult(False, "not_compared", [], (
            f"FAILED (not compared): no earlier run measured the same thing, but run {had_yardstick} measured {what}"
            f"{f' ({changed})' if changed else ''}: the benchmark or the instrument changed under it, so nothing can "
            f"judge this run; {hint}"))
    if recorded is not None and recorded_as is not None:
        return GateResult(False, "not_compared", [], (
            f"FAILED (not compared): {what} has no run under this name, but its configuration was recorded as "
            f"{recorded_as!r} (the latest run {recorded}), a name gone from the variants file: the same measurement "
            f"under another name, so it is not new, and no run of this name can judge it (a rename, or a retired "
            f"configuration added again); {hint}"))
    if recorded is not None:
        return GateResult(False, "not_compared", [], (
            f"FAILED (not compared): {what} has recorded runs (the latest {recorded}) but none was eligible or "
            f"accepted (a failed gate, an errored question or answer, a reranker fallback, or a history whose "
            f"runs were all distrusted once when this version first read it: see the README's verdict notes): it "
            f"is not new, and nothing can judge it; {hint}"))
    if not project_has_history and first is not None:
        if strict:
            return GateResult(False, "not_compared", [], (
                f"FAILED (strict): {first} (an empty history: a new state dir or database?) is judged only once "
                f"accepted; {hint}"))
        return GateResult(True, "first_run", [], f"{first}: nothing to compare with, gate passes")
    if vanished and project_has_history:
        return GateResult(False, "not_compared", [], (
            f"FAILED (not compared): {what} is {new} while {', '.join(map(repr, vanished))} vanished from the "
            "variants file since the last acceptance: a rename that also changed the configuration carries no "
            f"history, so nothing can judge it; {hint} (accepting a run without the vanished variants acknowledges "
            "their removal)"))
    if strict:
        return GateResult(False, "not_compared", [],
                          f"FAILED (strict): {what} is {new}, judged only once a run of it is accepted; {hint}")
    return GateResult(True, "first_run", [], f"{what} is {new}: its first run, nothing to compare with")
