"""The answer gate: did pass rate or mean score drop beyond its tolerance against the previous
and the reference answer runs of the same measurement?

Which rows can be yardsticks (the key, comparability, eligibility) is the history's rule
(:mod:`eval_pipeline.history.answers`); this module only compares numbers and says why.

States (:func:`evaluate_answer_gate`):

``not_comparable``  the current run is not comparable: nothing is judged; the gate passes with
                    a warning when the measurement has no history and not ``strict``, and fails
                    otherwise.
``not_compared``    the measurement had a yardstick under another key (golden set, corpus or
                    grading yardstick changed), or it is new while a variant vanished: fails
                    until a run is accepted.
``first_run``       no earlier eligible row with the same key: passes, unless ``strict``.
``comparable``      pass rate and mean score, each against the previous and the reference
                    row: a metric fails when ``current - yardstick < -(tolerance + EPSILON)``
                    (a drop equal to the tolerance passes, see
                    :func:`eval_pipeline.gates.rule.within_tolerance`); a NaN current value (nothing
                    scored) fails its row; so does a share of the prompts scored that fell
                    beyond ``max_pass_rate_drop`` (below).

A current run with errored answers or ungraded answers fails the gate in every state: its
metrics are over the answers that happened to be generated and graded.

The share of the prompts a grader scored is compared too (``comparable``): a grader leaves an
answer it cannot judge out of its pass rate and mean score (the grounding grader an answer
with nothing checkable: a hedge, an empty answer), so a generator that stops saying anything
checkable would otherwise read as an improvement. A share that fell by more than
``max_pass_rate_drop`` against a yardstick fails, naming both counts ("grounding scored 1 of 4
answers, the previous run run-1 4 of 4"): an answer that left the scored ones is at worst a
failure the pass rate no longer sees. The yardstick's prompts are the current run's (the same
golden set fingerprint, neither run limited); the current row's ``n_prompts``, when given, is
the denominator, else the larger ``n_scored`` (the smallest count the numbers allow, so the
drop reads largest).

Tolerances (:func:`validate_answer_tolerances`): ``max_pass_rate_drop`` and
``max_mean_score_drop``, absolute drops in [0, 1], 0.1 each by default.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

from eval_pipeline.common.checks import as_flag, is_integer, is_real, is_text, unit_value
from eval_pipeline.common.formatting import MISSING, fmt_number
from eval_pipeline.gates.retrieval import GateResult
from eval_pipeline.gates.rule import within_tolerance, without_yardstick
from eval_pipeline.history.answers import ANSWER_METRICS, KEY_FIELDS, answer_comparable

__all__ = [
    "ANSWER_STATES",
    "DEFAULT_ANSWER_TOLERANCES",
    "TOLERANCE_OF",
    "AnswerGateResult",
    "evaluate_answer_gate",
    "parse_tolerance",
    "validate_answer_tolerances",
]

ANSWER_STATES = ("not_comparable", "first_run", "comparable", "not_compared")
DEFAULT_ANSWER_TOLERANCES: dict[str, float] = {"max_pass_rate_drop": 0.1, "max_mean_score_drop": 0.1}
# metric -> the tolerance that gates it
TOLERANCE_OF: dict[str, str] = {"pass_rate": "max_pass_rate_drop", "mean_score": "max_mean_score_drop"}
# how a gate that cannot judge says to accept a run (the verdict makes it the exact command)
_ACCEPT = ("accept a run of it once its numbers are intended and the report has recorded it "
           "(python -m eval_pipeline.history accept RUN_ID)")

# A plain decimal or scientific literal, ASCII digits only: "0.05", ".5", "5.", "1e-2", "+5E-1".
# Not "nan", "inf", "0x1", "1_0" (all of which float() would take), nor "" or a bare sign/dot.
_NUMBER = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")


# --------------------------------------------------------------------------
# tolerances
# --------------------------------------------------------------------------


def parse_tolerance(value: object, name: str, *, source: str | None = None) -> float:
    """``value`` as a tolerance: a finite number in [0, 1] (both ends included), as a float.

    Accepted: ints and floats (and numpy's; not Decimal, which is no ``numbers.Real``), and strings
    holding a plain decimal or scientific literal after stripping surrounding whitespace
    (PyYAML reads ``1e-2`` without a dot as the string ``"1e-2"``). ``-0.0`` is 0 and comes
    back as ``0.0``. Refused with a ValueError naming ``source`` (when given), ``name`` and
    the value's repr: bool, None (an empty YAML value), an empty or blank string, any other
    string (``"abc"``, ``"nan"``, ``"inf"``, ``"0x1"``, ``"1_0"``), NaN, infinities, values
    outside [0, 1], and every other type (a list, a mapping)."""
    where = f"{source}: " if source else ""

    def refuse(why: str) -> ValueError:
        return ValueError(f"{where}{name} must be {why}, got {value!r}")

    expected = "a finite number in [0, 1] (decimal or scientific notation, e.g. 0.05 or 5e-2)"
    if isinstance(value, bool):
        raise refuse(f"{expected}, not a boolean")
    if value is None:
        raise refuse(f"{expected}; the setting is empty")
    if isinstance(value, str):
        text = value.strip()
        if not text:
            raise refuse(f"{expected}; the setting is empty")
        if not _NUMBER.fullmatch(text):
            raise refuse(expected)
        number = float(text)
    elif is_real(value):
        try:
            number = float(value)
        except (OverflowError, ValueError):
            raise refuse(expected) from None
    else:
        raise refuse(expected)
    if not math.isfinite(number) or not 0.0 <= number <= 1.0:
        raise refuse(expected)
    return number + 0.0  # -0.0 + 0.0 == 0.0


def validate_answer_tolerances(raw: Mapping[str, object] | None, source: str) -> dict[str, float]:
    """The answer gate's tolerances, ``{"max_pass_rate_drop": float, "max_mean_score_drop":
    float}``: each from ``raw`` when present (:func:`parse_tolerance`), else 0.1. ``raw`` None
    or ``{}`` gives the defaults; a key present with an empty value (None) is an error, not a
    default. An unknown key is an error naming the valid ones (a misspelled tolerance would
    otherwise silently keep the default). ``source`` (e.g. the config file) is named in every
    error."""
    if raw is None:
        return dict(DEFAULT_ANSWER_TOLERANCES)
    if not isinstance(raw, Mapping):
        raise ValueError(f"{source}: answer gate tolerances must be a mapping of setting -> number, got {raw!r}")
    unknown = [key for key in raw if key not in DEFAULT_ANSWER_TOLERANCES]
    if unknown:
        raise ValueError(f"{source}: unknown answer gate tolerance(s) {', '.join(map(repr, unknown))}; "
                         f"valid settings: {', '.join(DEFAULT_ANSWER_TOLERANCES)}")
    return {key: parse_tolerance(raw[key], key, source=source) if key in raw else default
            for key, default in DEFAULT_ANSWER_TOLERANCES.items()}


# --------------------------------------------------------------------------
# the gate
# --------------------------------------------------------------------------


# The answer gate's outcome for one (variant, grader) has the retrieval gate's shape
# (`gates.GateResult`: passed, state, rows, message, failures). Here ``state`` is one of
# :data:`ANSWER_STATES`, and ``rows`` holds one dict per comparison (``comparable`` only) with
# keys ``metric, against ("previous"/"reference"), run_id, yardstick_run_id, actual, yardstick,
# delta, tolerance, passed`` (``actual`` NaN and ``delta`` None when nothing was scored).
AnswerGateResult = GateResult


def _current_metric(current: Mapping[str, Any], metric: str) -> float:
    value = current.get(metric)
    number = unit_value(value, f"current {metric}")
    return math.nan if number is None else number


def _check_yardstick(current: Mapping[str, Any], other: object, against: str) -> Mapping[str, Any]:
    """``other`` if it can be the yardstick of ``current``; a ValueError otherwise (a lookup
    bug or a hand-made row must never produce a verdict)."""
    if not isinstance(other, Mapping):
        raise ValueError(f"the {against} run must be a mapping or None, got {other!r}")
    if not is_text(other.get("run_id")):
        raise ValueError(f"the {against} run has no run_id: {other.get('run_id')!r}")
    if other["run_id"] == current.get("run_id"):
        raise ValueError(f"the {against} run is the current run {other['run_id']!r}: a run is never its own yardstick")
    differs = [k for k in KEY_FIELDS if other.get(k) != current.get(k)]
    configuration = current.get("configuration")
    if "variant" in differs and is_text(configuration) and \
            (other.get("provenance") or {}).get("configuration") == configuration:
        differs.remove("variant")  # the same variant under another name: its configuration is the same
    if "variant" in differs and other.get("variant") in (current.get("lineage") or ()):
        differs.remove("variant")  # a name this variant had before a rename: its pinned reference follows it
    if differs:
        raise ValueError(f"the {against} run {other['run_id']!r} measured something else ({', '.join(differs)} "
                         "differ): it cannot be the yardstick")
    ok, why = answer_comparable(other)
    chosen = as_flag(other.get("eligible")) is True or as_flag(other.get("accepted")) is True  # accepted: a user's pin
    if not ok or not chosen or other.get("errored") != 0:
        raise ValueError(f"the {against} run {other['run_id']!r} is not eligible as a yardstick"
                         + ("" if ok else f": {why}"))
    for metric in ANSWER_METRICS:
        value = other.get(metric)
        if not is_real(value) or not math.isfinite(float(value)) or not 0.0 <= float(value) <= 1.0:
            raise ValueError(f"the {against} run {other['run_id']!r} has no valid {metric} ({value!r})")
    n_scored = other.get("n_scored")
    if not is_integer(n_scored) or n_scored < 1:  # a yardstick scored something: its share is compared
        raise ValueError(f"the {against} run {other['run_id']!r} has no valid n_scored ({n_scored!r})")
    return other


def _scored_shares(current: Mapping[str, Any], yardsticks: Sequence[tuple[str, Mapping[str, Any]]],
                   tolerance: float) -> list[str]:
    """Why the share of the prompts the grader scored fell beyond ``tolerance`` against each
    yardstick (empty: it did not); see the module docstring."""
    scored = current.get("n_scored")
    if not is_integer(scored) or scored < 0:
        raise ValueError(f"current n_scored must be an integer >= 0, got {scored!r}")
    prompts = current.get("n_prompts")
    if prompts is not None and (not is_integer(prompts) or prompts < scored):
        raise ValueError(f"current n_prompts must be an integer >= n_scored ({scored}), got {prompts!r}")
    grader = current.get("grader") or "the grader"
    reasons = []
    for against, other in yardsticks:
        before = int(other["n_scored"])
        total = max(int(prompts) if prompts is not None else 0, before, int(scored))
        drop = (before - int(scored)) / total
        if not within_tolerance(-drop, tolerance):
            reasons.append(f"{grader} scored {scored} of {total} answers, the {against} run {other['run_id']} "
                           f"{before} of {total} (share scored {fmt_number(before / total, 4)} -> "
                           f"{fmt_number(scored / total, 4)}, tolerance {tolerance:g}: the answers it could not "
                           "score are outside its pass rate and mean score)")
    return reasons


def _compare(current: Mapping[str, Any], actual: Mapping[str, float],
             yardsticks: Sequence[tuple[str, Mapping[str, Any]]], tol: Mapping[str, float]
             ) -> tuple[list[dict[str, Any]], str | None]:
    """The comparison rows of ``current`` (its metrics ``actual``) against each (name, row) of
    ``yardsticks`` under the validated tolerances ``tol``, and the failure message (None: every
    comparison within tolerance, and the share scored did not fall)."""
    rows: list[dict[str, Any]] = []
    for against, other in yardsticks:
        for metric, tolerance_name in TOLERANCE_OF.items():
            base = float(other[metric])
            value = actual[metric]
            delta = None if math.isnan(value) else value - base
            tolerance = tol[tolerance_name]
            rows.append({
                "metric": metric,
                "against": against,
                "run_id": current.get("run_id"),
                "yardstick_run_id": other["run_id"],
                "actual": value,
                "yardstick": base,
                "delta": delta,
                "tolerance": tolerance,
                "passed": within_tolerance(delta, tolerance),
            })
    failures = [r for r in rows if not r["passed"]]
    unscored = _scored_shares(current, yardsticks, tol["max_pass_rate_drop"])
    if not failures and not unscored:
        return rows, None
    return rows, "FAILED: " + "; ".join([*(
        f"{r['metric']} vs {r['against']} run {r['yardstick_run_id']}: "
        + (f"{fmt_number(r['yardstick'], 4)} -> {MISSING} (nothing was scored)" if r["delta"] is None else
           f"{fmt_number(r['yardstick'], 4)} -> {fmt_number(r['actual'], 4)} "
           f"(delta {fmt_number(r['delta'], 4, signed=True)}, "
           f"tolerance {r['tolerance']:g})")
        for r in failures), *unscored])


def shown_against_recorded(gate: AnswerGateResult, current: Mapping[str, Any],
                           recorded: Sequence[tuple[Mapping[str, Any], Mapping[str, object]]]) -> AnswerGateResult:
    """``gate`` failed ``not_compared`` (nothing comparable judged the measurement) made the
    measured regression it is when a row of the same key recorded before shows a drop past a
    tolerance. ``recorded``: (row, the tolerances to judge against it), newest first, eligible or
    not (:func:`eval_pipeline.history.answers.recorded_answer_rows`; the tolerances never looser
    than those the row was judged with): no yardstick of this run by the rules, but its numbers
    are this variant's answers on this set, corpus and yardstick. The drop is shown (rows
    ``against: "recorded"``) and accepting the run whole needs the variant named. A row that
    measured nothing usable (limited, nothing scored, a metric missing) is skipped; otherwise
    ``gate`` unchanged: it fails closed either way. The retrieval gate's rule
    (`eval_pipeline.verdict.retrieval._shown_against_recorded`)."""
    if gate.passed or gate.state != "not_compared" or gate.unjudged or not answer_comparable(current)[0]:
        return gate
    actual = {metric: _current_metric(current, metric) for metric in ANSWER_METRICS}
    for other, tolerances in recorded:
        usable = (not as_flag(other.get("limited")) and is_integer(other.get("n_scored")) and other["n_scored"] >= 1
                  and all(is_real(other.get(m)) and 0.0 <= float(other[m]) <= 1.0 for m in ANSWER_METRICS))
        if not usable or other.get("run_id") == current.get("run_id"):
            continue
        tol = validate_answer_tolerances(tolerances, "answer gate tolerances")
        rows, failed = _compare(current, actual, [("recorded", other)], tol)
        if failed is not None:
            return AnswerGateResult(False, "comparable", rows, (
                f"{failed} (against run {other['run_id']}, which recorded it with this golden set, corpus and "
                f"yardstick{'' if other.get('variant') == current.get('variant') else ' as ' + repr(other['variant'])}"
                f", though not a yardstick of this run: {gate.message})"))
    return gate


def evaluate_answer_gate(current: Mapping[str, Any], previous: Mapping[str, Any] | None,
                         reference: Mapping[str, Any] | None, tolerances: Mapping[str, object] | None, *,
                         strict: bool, history: Mapping[str, Any] | None = None,
                         project_has_history: bool = False, vanished: Sequence[str] = (),
                         recorded: str | None = None, recorded_as: str | None = None) -> AnswerGateResult:
    """Judge the ``current`` row (a row as recorded, with ``run_id``) against the
    ``previous`` and ``reference`` rows (:func:`previous_answer_run`,
    :func:`reference_answer_run`; None when there is none) under ``tolerances``
    (:func:`validate_answer_tolerances`; None: the defaults). See the module docstring for
    the states.

    Input errors are ValueErrors, never a verdict: an invalid tolerance, a current row
    without a valid ``errored`` count or with a metric outside [0, 1] (NaN is allowed: it
    fails its rows), without a valid ``n_scored`` (or with ``n_prompts`` below it) when it is
    compared, or a previous/reference row that does not share the current row's key, is the
    current run itself, is not eligible or lacks finite metrics or a positive ``n_scored``.

    It fails closed. ``history`` is the latest row of this (variant, grader) that was ever a
    yardstick, of any key (:func:`answer_history_of`): when it exists but no row of this
    key does, the golden set, the corpus or the grading yardstick changed under the
    measurement, and the state is ``not_compared``, which fails until a run is accepted;
    so does a run that cannot be compared (unknown generator, no single grader) when the
    measurement has a history, and a limited run. A first run passes only when the
    measurement is new and no variant vanished from the variants file (``vanished``, in a
    project with answer history) and it was never recorded (``recorded``: the run id of its
    latest row recorded at all, eligible or not; ``recorded_as``: the name gone from the variants file it
    was recorded under, when not its own; :func:`eval_pipeline.gates.rule.without_yardstick`,
    the retrieval gate's rule); ``strict`` fails every first run, and every run that cannot be
    compared."""
    tol = validate_answer_tolerances(tolerances, "answer gate tolerances")
    if not isinstance(strict, bool):
        raise ValueError(f"strict must be True or False, got {strict!r}")
    if not isinstance(current, Mapping):
        raise ValueError(f"current must be a mapping (a recorded row), got {current!r}")
    errored = current.get("errored")
    if not is_integer(errored) or errored < 0:
        raise ValueError(f"current errored must be an integer >= 0, got {errored!r}")
    actual = {metric: _current_metric(current, metric) for metric in ANSWER_METRICS}

    comparable, why = answer_comparable(current)
    if comparable and not current.get("n_scored") and previous is None and reference is None:
        # nothing measured and nothing to compare with: not a "first run" that passes forever (with an
        # earlier run, the vanished measurement fails its rows below)
        comparable, why = False, "the grader applies to no prompt of the set: nothing was measured"
    rows: list[dict[str, Any]] = []
    had = history is not None and is_text(history.get("run_id"))
    if not comparable and not had and recorded is not None:
        state, passed = "not_compared", False
        message = (f"FAILED (not compared): {why}; this measurement was recorded before (run {recorded}) but no run "
                   "of it was eligible or accepted: it is not new, and nothing can judge it. This run cannot be "
                   "accepted (it cannot be compared); run it in full with one generator and grading model, and accept "
                   "that run (python -m eval_pipeline.history accept <that run>) once its numbers are intended")
    elif not comparable:
        state = "not_comparable"
        passed = not strict and not had  # a limited run too: it cannot be compared with a measurement's history
        if passed:
            message = f"WARNING: {why}; metrics recorded, no regression verdict"
        elif strict:
            message = f"FAILED (strict): {why}; the run cannot be compared"
        else:
            if history is None:  # `had`: it has a run id
                raise ValueError("history is None for a measurement with a history")
            message = (f"FAILED: {why}; this measurement has a history (run {history['run_id']}) and the run cannot "
                       "be compared with it")
    elif previous is None and reference is None:
        changed = [f"{k} {history.get(k)!r} -> {current.get(k)!r}" for k in ("set_id", "set_fingerprint",
                                                                              "corpus_signature", "yardstick")
                   if history is not None and history.get(k) != current.get(k)]
        grader = current.get("grader") or "answer"
        gate = without_yardstick(
            f"the {grader} grading of {current.get('variant')!r}",
            had_yardstick=str(history["run_id"]) if had and history is not None else None, recorded=recorded,
            recorded_as=recorded_as,
            project_has_history=project_has_history, vanished=vanished, strict=strict, hint=_ACCEPT,
            new="a new measurement (no earlier run with the same set, corpus and yardstick)",
            changed="; ".join(changed) or "another key", first=None)
        state, passed, message = gate.state, gate.passed, gate.message
    else:
        state = "comparable"
        yardsticks = [(name, _check_yardstick(current, other, name))
                      for name, other in (("previous", previous), ("reference", reference)) if other is not None]
        rows, failed = _compare(current, actual, yardsticks, tol)
        passed = failed is None
        message = f"passed: {len(rows)} comparison(s) within tolerance" if failed is None else failed
    if errored > 0:
        passed = False
        message = (f"FAILED: {errored} answer(s) could not be generated: the metrics are incomplete"
                   + f" ({message})")
    grader_failed = current.get("grader_failed") or 0
    if grader_failed > 0:  # an LLM grader's failed call or unusable reply: no grade, so no verdict either
        passed = False
        message = (f"FAILED: {grader_failed} answer(s) have no grade (the grading call failed or its reply had no "
                   f"usable score): the metrics are incomplete ({message})")
    return AnswerGateResult(passed, state, rows, message)
