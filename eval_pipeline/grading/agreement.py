"""How far a judge's numbers can be believed: its agreement with people on a labelled calibration
set, and prediction-powered intervals for its pass rate.

A judge's pass rate is the judge's opinion, biased by however the judge errs (lenient, harsh,
blind to one failure). A small set of answers graded by people measures that: *agreement*
(accuracy, Cohen's κ, the confusion matrix) says how often and how the judge disagrees, and
*prediction-powered inference* (PPI; Angelopoulos, Bates, Fannjiang, Jordan and Zrnic,
"Prediction-powered inference", Science 2023; the interval ARES reports for its judges) turns
the many judge grades plus the few human ones into an interval for the rate people would give.

Agreement (:func:`agreement`)
    Pairs (human label, judge label), labels any hashable values (bools for pass/fail, levels).
    ``accuracy`` = share of pairs where they agree. Cohen's κ = (p_o - p_e) / (1 - p_e), p_o the
    observed agreement and p_e the agreement expected by chance from the two marginal
    distributions. When p_e = 1 (both gave one and the same label to every pair) κ is undefined:
    NaN, never 1 or 0. ``confusion[h][j]``: pairs the human labelled h and the judge j, over
    `labels` (default: every label seen, sorted) in both directions, zeros included. No pairs:
    ``n`` 0, NaN accuracy and κ, an all-zero confusion matrix. Unequal lengths: ValueError.

PPI for a mean (:func:`ppi_mean_interval`)
    Y the human label (0/1, or a score in [0, 1]), f the judge's. On N unlabelled answers the
    judge alone gives mean(f); the labelled n answers measure its bias, the *rectifier*
    mean(f - Y). The estimate is θ̂ = mean(f_unlabelled) - mean(f_labelled - Y_labelled), and
    its interval θ̂ ± z · sqrt(var(f_unlabelled)/N + var(f_labelled - Y_labelled)/n) (sample
    variances, ddof 1; z the normal quantile of the two-sided `confidence`): the classical PPI
    interval for a mean (the paper's Example: the mean estimation). It is valid whatever the
    judge's errors, and narrower than the labelled set alone when the judge is good. The bounds
    are clipped to [0, 1] for a rate (``clipped`` says whether they were); the estimate is not.
    n and N must be at least 2 (a variance needs two); values must be finite and in [0, 1].
    Returned beside it: the judge-only rate and the labelled set's own (classical) interval, so a
    report can show what PPI changed.

Calibrating a judge (:func:`calibrate_judge`, :func:`judge_rate_with_ppi`)
    The run's LLM grader (``decision``: each row needs a ``reference``; ``judge``: a ``context``,
    the list of passages the answer was written from) grades the calibration rows through the
    same cached calls as the run's answers; the judge's pass is the grader's (level 4 or 5 /
    overall >= ``PASS_SCORE``), a person's is `human_passed` (a bool, or a level 1..5 passing at
    4 and 5, the decision grader's mark). Rows the judge could not grade (failed, unparseable) are
    counted (``n_not_graded``) and left out of the agreement, never guessed. Then
    `judge_rate_with_ppi` gives the run's judge pass rate with its PPI interval from those pairs.

Calibrating the relevance grader (`eval_pipeline.validity.holes.calibrate_relevance`)
    The grader of the holes in the labels (`eval_pipeline.validity.holes`) judges whether a
    document answers a question. Its rows are (question, passage in ``text``, ``human``: true
    when people judged the passage relevant, a bool only); it grades each passage as it grades a
    hole (same prompt, cache and model), relevant at grade >= `CANDIDATE_MIN_GRADE` (2). The
    same PPI then gives the share of the run's holes people would call relevant, with its
    interval: the size of the gap in the labels, not the judge's opinion of it.
"""

from __future__ import annotations

import json
import math
from collections.abc import Hashable, Mapping, Sequence
from pathlib import Path
from typing import Any

from eval_pipeline.answering.context import ContextEntry
from eval_pipeline.grading.judges import (
    PASS_SCORE,
    DecisionItem,
    JudgeItem,
    decide_answers,
    judge_answers,
    normalize_level,
)

__all__ = ["CALIBRATION_FIELDS", "agreement", "calibrate_judge", "calibrated_pass_rate", "check_relevance_rows",
           "cohen_kappa", "human_passed", "judge_rate_with_ppi", "load_calibration", "ppi_mean_interval"]

CALIBRATION_FIELDS = ("id", "question", "text", "human")


def _pairs(human: Sequence[Any], judge: Sequence[Any]) -> list[tuple[Any, Any]]:
    if len(human) != len(judge):
        raise ValueError(f"human and judge labels differ in length: {len(human)} and {len(judge)}")
    return list(zip(human, judge))


def cohen_kappa(human: Sequence[Hashable], judge: Sequence[Hashable]) -> float:
    """Cohen's κ of two raters over the same items (module docstring); NaN when undefined."""
    pairs = _pairs(human, judge)
    n = len(pairs)
    if n == 0:
        return math.nan
    observed = sum(h == j for h, j in pairs) / n
    labels = set(human) | set(judge)
    expected = sum((sum(h == label for h in human) / n) * (sum(j == label for j in judge) / n) for label in labels)
    if expected == 1.0:
        return math.nan
    return (observed - expected) / (1.0 - expected)


def agreement(human: Sequence[Hashable], judge: Sequence[Hashable], *,
              labels: Sequence[Hashable] | None = None) -> dict[str, Any]:
    """``{"n", "accuracy", "kappa", "labels", "confusion"}`` (module docstring)."""
    pairs = _pairs(human, judge)
    seen = sorted(set(human) | set(judge), key=lambda v: (str(type(v)), v))
    order = list(labels) if labels is not None else seen
    unknown = [v for v in seen if v not in order]
    if unknown:
        raise ValueError(f"labels {unknown!r} are not among the given labels {order!r}")
    confusion = {h: {j: 0 for j in order} for h in order}
    for h, j in pairs:
        confusion[h][j] += 1
    n = len(pairs)
    return {"n": n, "accuracy": sum(h == j for h, j in pairs) / n if n else math.nan,
            "kappa": cohen_kappa(human, judge), "labels": order, "confusion": confusion}


def _unit_values(values: Sequence[Any], name: str) -> list[float]:
    out = []
    for i, v in enumerate(values):
        if isinstance(v, bool):
            v = float(v)
        if not isinstance(v, (int, float)) or not math.isfinite(v) or not 0.0 <= float(v) <= 1.0:
            raise ValueError(f"{name}[{i}] must be a number in [0, 1] or a bool, got {v!r}")
        out.append(float(v))
    return out


def _mean_var(values: Sequence[float]) -> tuple[float, float]:
    n = len(values)
    mean = sum(values) / n
    return mean, sum((v - mean) ** 2 for v in values) / (n - 1)


def ppi_mean_interval(judge_unlabelled: Sequence[Any], judge_labelled: Sequence[Any], human_labelled: Sequence[Any],
                      *, confidence: float = 0.95) -> dict[str, Any]:
    """The prediction-powered estimate and interval of the rate people would give (module
    docstring), with the judge-only rate and the labelled set's classical interval."""
    from scipy.stats import norm  # noqa: PLC0415  deferred: scipy takes ~1.3 s to import

    if isinstance(confidence, bool) or not isinstance(confidence, (int, float)) or not 0 < confidence < 1:
        raise ValueError(f"confidence must be a number strictly between 0 and 1, got {confidence!r}")
    f_u = _unit_values(judge_unlabelled, "judge_unlabelled")
    f_l = _unit_values(judge_labelled, "judge_labelled")
    y_l = _unit_values(human_labelled, "human_labelled")
    if len(f_l) != len(y_l):
        raise ValueError(f"judge_labelled and human_labelled differ in length: {len(f_l)} and {len(y_l)}")
    if len(f_l) < 2 or len(f_u) < 2:
        raise ValueError(f"PPI needs at least 2 labelled and 2 unlabelled answers, got {len(f_l)} and {len(f_u)}")
    z = float(norm.ppf(0.5 + confidence / 2))
    mean_f, var_f = _mean_var(f_u)
    mean_r, var_r = _mean_var([f - y for f, y in zip(f_l, y_l)])
    estimate = mean_f - mean_r
    half = z * math.sqrt(var_f / len(f_u) + var_r / len(f_l))
    low, high = estimate - half, estimate + half
    mean_y, var_y = _mean_var(y_l)
    classical = z * math.sqrt(var_y / len(y_l))
    return {"estimate": estimate, "low": max(0.0, low), "high": min(1.0, high), "clipped": low < 0 or high > 1,
            "half_width": half, "rectifier": mean_r, "judge_rate": mean_f, "n_labelled": len(f_l),
            "n_unlabelled": len(f_u), "confidence": float(confidence),
            "classical": {"estimate": mean_y, "low": max(0.0, mean_y - classical), "high": min(1.0, mean_y + classical),
                          "half_width": classical}}


def load_calibration(path: str | Path) -> list[dict[str, Any]]:
    """A calibration file: JSON lines of ``{"id", "question", "text", "human"}`` (`text`: the
    passage or answer graded; `human`: the person's grade, a bool pass/fail or an integer level;
    other keys, such as ``"source"`` or ``"grader"``, kept). Blank lines are skipped; lines
    split on "\\n" only (a U+2028 inside a text is text). A bad line (not UTF-8, not JSON, a
    missing field) is a ValueError naming the file, the line and the field; ids must be unique;
    a file that cannot be read is a ValueError naming it."""
    path = Path(path)
    rows: list[dict[str, Any]] = []
    seen: set[str] = set()
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise ValueError(f"calibration file {path}: cannot be read ({exc.strerror or exc})") from None
    for number, encoded in enumerate(raw.split(b"\n"), start=1):
        try:
            line = encoded.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ValueError(f"{path}:{number}: invalid UTF-8 at byte {exc.start + 1} of the line") from None
        if not line.strip():
            continue
        where = f"{path}:{number}"
        try:
            row = json.loads(line)
        except ValueError as exc:
            raise ValueError(f"{where}: invalid JSON: {exc}") from None
        if not isinstance(row, Mapping):
            raise ValueError(f"{where}: a calibration row must be a JSON object")
        for field in ("id", "question", "text"):
            if not isinstance(row.get(field), str) or not row[field].strip():
                raise ValueError(f"{where}: {field} must be a non-empty string, got {row.get(field)!r}")
        human = row.get("human")
        if not isinstance(human, (bool, int)):
            raise ValueError(f"{where}: human must be true/false or an integer level, got {human!r}")
        if row["id"] in seen:
            raise ValueError(f"{where}: id {row['id']!r} appears twice")
        seen.add(row["id"])
        rows.append(dict(row))
    return rows


def human_passed(value: Any) -> bool:
    """A person's grade as pass/fail: a bool as it is; a level 1..5 passes at 4 or 5 (the
    decision grader's mark, ``(level - 1) / 4 >= PASS_SCORE``)."""
    if isinstance(value, bool):
        return value
    return normalize_level(value) >= PASS_SCORE


def calibrate_judge(rows: Sequence[Mapping[str, Any]], *, grader: str, llm: Any, cache_dir: str | Path,
                    max_tokens: int | None = None) -> dict[str, Any]:
    """The judge's grades of a calibration set and its agreement with the people's (module
    docstring): ``{"grader", "n", "n_not_graded", "ids", "human", "judge", "agreement",
    "graded_by"}``; ``human``/``judge`` the pass values of the graded rows, in row order."""
    if grader not in ("decision", "judge"):
        raise ValueError(f"calibration grader must be 'decision' or 'judge', got {grader!r}")
    need = "reference" if grader == "decision" else "context"
    for row in rows:
        value = row.get(need)
        if grader == "decision" and (not isinstance(value, str) or not value.strip()):
            raise ValueError(f"calibration row {row.get('id')!r}: the decision grader needs a reference, got {value!r}")
        if grader == "judge" and (not isinstance(value, list) or not all(isinstance(t, str) for t in value)):
            raise ValueError(f"calibration row {row.get('id')!r}: the judge needs a context (a list of passages), "
                             f"got {value!r}")
    if grader == "decision":
        grades: list[Any] = decide_answers([DecisionItem(r["id"], r["question"], r["reference"], r["text"])
                                            for r in rows], llm=llm, cache_dir=cache_dir, max_tokens=max_tokens)
        passes = [g.passed if g.ok else None for g in grades]
    else:
        grades = judge_answers([JudgeItem(r["id"], r["question"],
                                          tuple(ContextEntry(i, f"cal:{i}", f"cal:{i}", t)
                                                for i, t in enumerate(r["context"], start=1)), r["text"])
                                for r in rows], llm=llm, cache_dir=cache_dir, max_tokens=max_tokens)
        passes = [g.passed if g.ok else None for g in grades]
    kept = [(r, p) for r, p in zip(rows, passes) if p is not None]
    human = [human_passed(r["human"]) for r, _ in kept]
    judge = [bool(p) for _, p in kept]
    graded_by = sorted({g.served.label() for g in grades if g.ok and g.served is not None})
    return {"grader": grader, "n": len(kept), "n_not_graded": len(rows) - len(kept),
            "ids": [r["id"] for r, _ in kept], "human": human, "judge": judge,
            "agreement": agreement(human, judge, labels=[False, True]), "graded_by": graded_by}


def check_relevance_rows(rows: Sequence[Mapping[str, Any]], path: str | Path) -> list[Mapping[str, Any]]:
    """The rows of a relevance calibration file (`load_calibration`'s), checked before any model
    call: each ``human`` a bool (relevant or not: a level would need a threshold the file does
    not say); a file with no row is refused. A ValueError names the file and the row."""
    if not rows:
        raise ValueError(f"{path}: no calibration row")
    for row in rows:
        if not isinstance(row.get("human"), bool):
            raise ValueError(f"{path}: row {row.get('id')!r}: a relevance row's human grade must be true or false "
                             f"(relevant or not), got {row.get('human')!r}")
    return list(rows)


def judge_rate_with_ppi(run_passes: Sequence[Any], calibration: Mapping[str, Any], *,
                        confidence: float = 0.95) -> dict[str, Any]:
    """The run's judge pass rate (`run_passes`: the judge's pass on each of the run's graded
    answers) with the PPI interval from a `calibrate_judge` result, and its agreement numbers
    beside it (what the report shows next to every judge number)."""
    ppi = ppi_mean_interval([float(bool(p)) for p in run_passes], [float(j) for j in calibration["judge"]],
                            [float(h) for h in calibration["human"]], confidence=confidence)
    a = calibration["agreement"]
    return {**ppi, "accuracy": a["accuracy"], "kappa": a["kappa"], "n_calibration": calibration["n"]}


def calibrated_pass_rate(run_passes: Sequence[Any], calibration: Mapping[str, Any]) -> dict[str, Any]:
    """A grader's rate on a run (`run_passes`: its pass on each item it graded) beside its
    agreement with people (accuracy, kappa, the confusion matrix, who graded, the file) and,
    when PPI can be computed (two graded items and two calibration rows), the prediction-powered
    interval (`judge_rate_with_ppi`); else ``error`` says why. What the report shows beside a
    judge's numbers and beside the holes' grades."""
    a = calibration["agreement"]
    base = {"grader": calibration.get("grader"), "n_calibration": calibration.get("n"),
            "n_not_graded": calibration.get("n_not_graded"), "accuracy": a["accuracy"], "kappa": a["kappa"],
            "confusion": a["confusion"], "graded_by": calibration.get("graded_by", []),
            "source": calibration.get("source")}
    try:
        return {**base, **judge_rate_with_ppi(run_passes, calibration)}
    except ValueError as exc:
        return {**base, "error": str(exc)}
