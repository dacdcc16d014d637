"""How good are one variant's answers: pass rates, scores, latency, tokens and cost.

The graders (`answer_grades`, `answer_judges`) say how each answer did; this module turns one
variant's answers and grades into the numbers a report shows, with intervals, so that a run's
answer quality is read the way its retrieval quality is: with the noise from the prompt sample
in view, and with nothing silently dropped.

Inputs (one variant each; `ANSWER_COLUMNS` and `GRADE_COLUMNS` are the columns read, others are
ignored; a missing one is a ValueError naming it, even on an empty frame)

* *answers*: one row per golden prompt: ``prompt_id`` (unique), ``form``, ``retrieved_gold``,
  ``model_sent``, ``model_reported``, ``prompt_tokens``, ``completion_tokens``,
  ``retrieval_ms``, ``generation_ms``, ``cached``, ``error``.
* *grades*: one row per (prompt, grader): ``grader`` (one of `GRADERS`), ``status`` (one of
  `STATUSES`), ``passed``, ``score``, ``assertion_types``/``assertion_held`` (deterministic),
  ``faithfulness``/``relevance``/``citations`` (judge).

Both frames must hold a single ``variant``, the same one. A grades row whose prompt is not in
the answers, or a (prompt, grader) pair given twice, is an error. A missing value may be None
or NaN (pandas turns None into NaN in numeric and string columns); both mean "not there".

Rules
-----
Scored rows, per grader
    ``graded`` and ``no_answer`` rows. A ``no_answer`` row (the answer could not be generated)
    counts as ``passed=False, score=0.0``: a failed answer is a failure, never dropped, or a
    variant that errors on its hard prompts would look better. ``not_applicable`` rows (no
    assertions, no code) are excluded and counted (``n_not_applicable``). ``failed`` and
    ``unparseable`` rows (an LLM grader's call failed or its reply had no score) are excluded
    from every rate and mean and counted (``n_grader_failed``): the caller makes such a run
    non-comparable. A prompt of the answers with no row for a grader that has rows is counted
    (``n_missing``), never imputed. Consistency is checked: a ``graded`` row must be on an
    answer without ``error`` and a ``no_answer`` row on one with it; a ``no_answer`` row's
    ``passed``/``score`` must be missing, False/0 (a "no answer" that passed is a bug upstream).

Pass/fail and score
    ``pass_rate`` is the mean of ``passed`` over scored rows, ``mean_score`` the mean of
    ``score``; each with a percentile bootstrap interval (`bootstrap_ci`: seeded, so a re-run
    gives the same interval; all-equal values give ``[mean, mean]``). The scored rows are
    taken in ``prompt_id`` order so the interval does not depend on the frames' row order. On
    the ``graded`` rows of one grader, ``passed`` is set on all or on none, and so is
    ``score`` (a mix is a ValueError naming the grader and prompt); "none" means that grader has
    no pass/fail (the judge scores, it does not pass): its pass rates are NaN while its scores
    still count. A grader with only ``no_answer`` rows has pass rate and score 0. ``passed``
    must be a bool and ``score`` a finite number in [0, 1]. No scored rows: NaN values, NaN
    intervals, ``n_scored`` 0.

By question form (``by_form``)
    ``n``, ``pass_rate`` and ``mean_score`` over the scored rows of each ``form`` of the
    answers; a missing form is ``"unknown"``. Keys sorted; only forms that have scored rows.

Retrieval carrying into answers (``by_retrieval``)
    The same three numbers on the scored rows whose answer had ``retrieved_gold`` True
    (``hit``: a gold document was in the context), False (``miss``) and missing (``no_gold``:
    the prompt has no gold document, so retrieval cannot be judged; counted apart rather than
    as a miss). An empty group has ``n`` 0 and NaN rates.

By assertion type (``by_assertion_type``, deterministic only)
    For each of ``exact``, ``contains``, ``regex``, ``json_schema``: ``n`` (assertions of
    that type in scored deterministic rows) and ``held_rate`` (the fraction that held; NaN when
    ``n`` is 0). Every assertion of a ``no_answer`` row counts as not held whatever
    ``assertion_held`` says, so that row's ``assertion_types`` must still list the prompt's
    assertions. The two lists must have equal lengths, types from `ASSERTION_TYPES`, held
    values bools. The lists of other graders are not read.

Judge dimensions (``dimensions``, judge only)
    ``n`` and the mean of ``faithfulness``, ``relevance`` and ``citations`` over ``graded``
    judge rows (each a finite number in [0, 1] there), and ``overall``: the mean over rows of
    each row's mean of the three. ``no_answer`` rows are not in it: there is no text to be
    faithful to, and the failure already counts in the judge's score. No rows: NaN.

Grounding (``grounding``, grounding only)
    When the grades frame has a ``details_json`` column, the ``grounding`` grader's rows with an
    answer text (``graded`` and ``not_applicable``: an answer with no checkable item still
    counts for citations) give `eval_pipeline.grading.grounding.grounding_rates`: pooled
    ``grounded_rate`` (items in the context / items), ``corpus_rate`` (in the corpus / items;
    NaN when the corpus was not probed), ``citations_per_answer``, the counts. Without the
    column (frames written before it), the section is absent.

Latency (``latency_ms``)
    ``retrieval`` over answers with ``retrieval_ms``, ``generation`` over those with
    ``generation_ms``, ``total`` (``retrieval_ms + generation_ms``) over those with both. The
    judge's time is never included: it is the cost of measuring, not of answering. Values are
    taken as given (the caller decides what a cached answer's ``generation_ms`` is) and must be
    finite and >= 0. Each gives ``n``, ``p50``, ``p95`` (``numpy.percentile`` with linear
    interpolation between the closest ranks: on 10, 20, 30, 40 the p50 is 25 and the p95
    38.5), ``max`` and ``mean``; NaN when ``n`` is 0.

Tokens and cost (``tokens``, ``cost``)
    ``*_total`` sums every answer, ``*_spent`` only those with ``cached`` False: what *this*
    run spent, apart from what the cached answers once cost. A row's price is looked up in the
    price table (`check_prices`) under ``model_reported`` when the response named a model, else
    under ``model_sent`` (the reported model is the one that served and billed; falling back to
    the sent alias when the reported model has no price could price a routed request at another
    model's rate). Cost = tokens / 1000 x the per-1k price, prompt and completion separately
    (`eval_pipeline.common.prices`, the one home of prices and cost, which `check_prices` and
    `PRICE_KEYS` come from). A
    row with zero tokens costs 0.0 and needs no price. If any row with tokens has no price, the
    cost over the rows it belongs to is None (unknown), never a partial sum presented as a
    total, and ``unpriced_models`` lists the missing names (None: a row that names no model).
    ``prices=None`` is an empty table.

Counts (``counts``)
    ``n_prompts``, ``n_errored`` (``error`` set), ``n_cached``.

Output
    Plain dicts, lists, str, int, float, bool and None, so ``json.dumps`` takes it. An undefined
    rate or mean is ``float('nan')`` (``json.dumps`` writes ``NaN``, which Python's ``json``
    reads back; a strict JSON consumer needs ``allow_nan`` handling). No function mutates its
    inputs; the library never imports Dagster.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from eval_pipeline.common import prices as pricing
from eval_pipeline.common import versions
from eval_pipeline.common.checks import (
    check_resamples,
    check_seed,
    is_finite,
    is_integer,
    is_real,
)
from eval_pipeline.common.keyed_pickle import read_keyed, write_keyed
from eval_pipeline.common.prices import PRICE_KEYS, check_prices
from eval_pipeline.grading.assertions import ASSERTION_TYPES
from eval_pipeline.grading.grounding import grounding_rates
from eval_pipeline.grading.judges import GRADERS, JUDGE_CRITERIA

__all__ = [
    "ANSWER_COLUMNS",
    "GRADE_COLUMNS",
    "PRICE_KEYS",
    "STATUSES",
    "SUMMARY_COLUMNS",
    "answer_metrics",
    "answer_summary_row",
    "check_prices",
]

ANSWER_COLUMNS = (
    "variant", "prompt_id", "form", "retrieved_gold", "model_sent", "model_reported",
    "prompt_tokens", "completion_tokens", "retrieval_ms", "generation_ms", "cached", "error",
)
GRADE_COLUMNS = (
    "variant", "prompt_id", "grader", "status", "passed", "score", "assertion_types",
    "assertion_held", *JUDGE_CRITERIA,
)
STATUSES = ("graded", "not_applicable", "no_answer", "failed", "unparseable")
SCORED = frozenset({"graded", "no_answer"})
GRADER_FAILED = frozenset({"failed", "unparseable"})
UNKNOWN_FORM = "unknown"
SUMMARY_COLUMNS = (
    "variant", "grader", "n", "pass_rate", "pass_rate_low", "pass_rate_high", "mean_score",
    "mean_low", "mean_high", "pass_rate_hit", "pass_rate_miss", "p50_ms", "p95_ms", "cost_total",
    "grounded_rate", "corpus_rate", "citations_per_answer",
)

NAN = math.nan


# --------------------------------------------------------------------------
# value checks
# --------------------------------------------------------------------------


def _missing(value: object) -> bool:
    """None, NaN or pandas' NA: how a missing value arrives through a DataFrame."""
    if value is None or value is pd.NA:
        return True
    return isinstance(value, float) and math.isnan(value)


def _is_bool(value: object) -> bool:
    return isinstance(value, (bool, np.bool_))


def _where(frame: str, prompt_id: object, grader: str | None = None) -> str:
    return f"{frame} row for prompt {prompt_id!r}" + (f", grader {grader!r}" if grader else "")


def _opt_bool(value: object, where: str, column: str) -> bool | None:
    if _missing(value):
        return None
    if not _is_bool(value):
        raise ValueError(f"{where}: {column} must be a bool or missing, got {value!r}")
    return bool(value)


def _unit(value: object, where: str, column: str) -> float | None:
    """A missing value, or a finite number in [0, 1]."""
    if _missing(value):
        return None
    if not is_finite(value) or not 0.0 <= float(value) <= 1.0:
        raise ValueError(f"{where}: {column} must be a number in [0, 1] or missing, got {value!r}")
    return float(value)


def _opt_ms(value: object, where: str, column: str) -> float | None:
    if _missing(value):
        return None
    if not is_finite(value) or float(value) < 0:
        raise ValueError(f"{where}: {column} must be a finite number >= 0 or missing, got {value!r}")
    return float(value)


def _opt_str(value: object, where: str, column: str) -> str | None:
    if _missing(value):
        return None
    if not isinstance(value, str):
        raise ValueError(f"{where}: {column} must be a str or missing, got {value!r}")
    return value


def _tokens(value: object, where: str, column: str) -> int:
    if not is_integer(value) or value < 0:
        raise ValueError(f"{where}: {column} must be an integer >= 0, got {value!r}")
    return int(value)


def _seq(value: object, where: str, column: str) -> list[Any]:
    """A list-like cell (list, tuple, or the numpy array a parquet round trip gives)."""
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, Sequence) and not isinstance(value, (str, bytes)):
        return list(value)
    raise ValueError(f"{where}: {column} must be a list, got {value!r}")


def _check_confidence(confidence: object) -> float:
    if not is_real(confidence) or not 0 < float(confidence) < 1:
        raise ValueError(f"confidence must be a number strictly between 0 and 1, got {confidence!r}")
    return float(confidence)


# --------------------------------------------------------------------------
# frames
# --------------------------------------------------------------------------


def _records(frame: object, name: str, columns: Sequence[str]) -> list[dict[str, Any]]:
    if not isinstance(frame, pd.DataFrame):
        raise ValueError(f"{name} must be a DataFrame, got {type(frame).__name__}")
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        raise ValueError(f"{name} is missing column(s) {missing}")
    return frame.loc[:, list(columns)].to_dict("records")


def _single_variant(rows: list[dict[str, Any]], name: str) -> str | None:
    variants = set()
    for row in rows:
        v = row["variant"]
        if not isinstance(v, str) or not v:
            raise ValueError(f"{_where(name, row['prompt_id'])}: variant must be a non-empty str, got {v!r}")
        variants.add(v)
    if len(variants) > 1:
        raise ValueError(f"{name} must hold one variant, got {sorted(variants)}")
    return variants.pop() if variants else None


def _prompt_id(value: object, name: str) -> str:
    if not isinstance(value, str) or not value:
        raise ValueError(f"{name}: prompt_id must be a non-empty str, got {value!r}")
    return value


def _answer(row: dict[str, Any]) -> dict[str, Any]:
    pid = _prompt_id(row["prompt_id"], "answers")
    where = _where("answers", pid)
    cached = row["cached"]
    if not _is_bool(cached):
        raise ValueError(f"{where}: cached must be a bool, got {cached!r}")
    return {
        "prompt_id": pid,
        "form": _opt_str(row["form"], where, "form") or UNKNOWN_FORM,
        "retrieved_gold": _opt_bool(row["retrieved_gold"], where, "retrieved_gold"),
        "model_sent": _opt_str(row["model_sent"], where, "model_sent"),
        "model_reported": _opt_str(row["model_reported"], where, "model_reported"),
        "prompt_tokens": _tokens(row["prompt_tokens"], where, "prompt_tokens"),
        "completion_tokens": _tokens(row["completion_tokens"], where, "completion_tokens"),
        "retrieval_ms": _opt_ms(row["retrieval_ms"], where, "retrieval_ms"),
        "generation_ms": _opt_ms(row["generation_ms"], where, "generation_ms"),
        "cached": bool(cached),
        "error": _opt_str(row["error"], where, "error"),
    }


def _grade(row: dict[str, Any], answers: Mapping[str, dict[str, Any]]) -> dict[str, Any]:
    pid = _prompt_id(row["prompt_id"], "grades")
    grader, status = row["grader"], row["status"]
    if grader not in GRADERS:
        raise ValueError(f"{_where('grades', pid)}: unknown grader {grader!r}; known: {list(GRADERS)}")
    where = _where("grades", pid, grader)
    if status not in STATUSES:
        raise ValueError(f"{where}: unknown status {status!r}; known: {list(STATUSES)}")
    if pid not in answers:
        raise ValueError(f"{where}: prompt {pid!r} is not in the answers")
    errored = answers[pid]["error"] is not None
    if status == "graded" and errored:
        raise ValueError(f"{where}: status 'graded' on an answer that has an error")
    if status == "no_answer" and not errored:
        raise ValueError(f"{where}: status 'no_answer' on an answer that has no error")
    grade = {"prompt_id": pid, "grader": grader, "status": status, "passed": None, "score": None}
    if status == "graded":
        grade["passed"] = _opt_bool(row["passed"], where, "passed")
        grade["score"] = _unit(row["score"], where, "score")
    elif status == "no_answer":
        if _opt_bool(row["passed"], where, "passed"):
            raise ValueError(f"{where}: a 'no_answer' row cannot have passed=True")
        if _unit(row["score"], where, "score") not in (None, 0.0):
            raise ValueError(f"{where}: a 'no_answer' row must have score 0 or missing, got {row['score']!r}")
        grade["passed"], grade["score"] = False, 0.0
    if grader == "deterministic" and status in SCORED:
        types = _seq(row["assertion_types"], where, "assertion_types")
        held = _seq(row["assertion_held"], where, "assertion_held")
        if len(types) != len(held):
            raise ValueError(f"{where}: assertion_types has {len(types)} entries, assertion_held {len(held)}")
        for t in types:
            if t not in ASSERTION_TYPES:
                raise ValueError(f"{where}: unknown assertion type {t!r}; known: {list(ASSERTION_TYPES)}")
        for h in held:
            if not _is_bool(h):
                raise ValueError(f"{where}: assertion_held must hold bools, got {h!r}")
        grade["assertions"] = [(t, bool(h) and status == "graded") for t, h in zip(types, held)]
    if grader == "judge" and status == "graded":
        dims = {}
        for c in JUDGE_CRITERIA:
            value = _unit(row[c], where, c)
            if value is None:
                raise ValueError(f"{where}: a graded judge row needs {c}, got {row[c]!r}")
            dims[c] = value
        grade["dimensions"] = dims
    return grade


# --------------------------------------------------------------------------
# aggregates
# --------------------------------------------------------------------------


def _mean(values: Sequence[float]) -> float:
    return float(np.mean(values)) if len(values) else NAN


def _defined(graded: list[dict[str, Any]], key: str, grader: str) -> bool:
    """Whether a grader reports ``key`` (passed / score): on all its graded rows or none."""
    have = [g[key] is not None for g in graded]
    if any(have) and not all(have):
        gap = graded[have.index(False)]["prompt_id"]
        raise ValueError(
            f"grades: grader {grader!r} sets {key} on some graded rows but not on prompt {gap!r}; "
            "set it on all or on none"
        )
    return all(have)  # True for no graded rows: only no_answer rows, which are 0


def _values(rows: list[dict[str, Any]], key: str, defined: bool) -> list[float] | None:
    return [float(r[key]) for r in rows] if defined else None


def _group(rows: list[dict[str, Any]], has_pass: bool, has_score: bool) -> dict[str, Any]:
    passed, scores = _values(rows, "passed", has_pass), _values(rows, "score", has_score)
    return {
        "n": len(rows),
        "pass_rate": _mean(passed) if passed is not None else NAN,
        "mean_score": _mean(scores) if scores is not None else NAN,
    }


def interval_code_identity() -> str:
    """The code an answer interval comes from: this module (which values it resamples),
    `eval_pipeline.metrics.statistics` and its checks (as syntax trees, once per process), and
    numpy's and scipy's versions and installed code."""
    code = versions.source_digest("eval_pipeline/grading/answer_metrics.py", "eval_pipeline/metrics/statistics.py",
                                  "eval_pipeline/common/checks.py")
    packages = versions.package_versions(("numpy", "scipy"))
    installed = versions.package_code_digest(["numpy", "scipy"])
    return f"{code} numpy {packages['numpy']} scipy {packages['scipy']} {installed}"


class _Intervals:
    """The bootstrap intervals one `answer_metrics` call asks for, computed together once every
    grader has asked (`resolve`): with a cache folder they are one keyed entry there
    (`common.keyed_pickle`) under a digest of every interval's values in order, the resampling
    settings and `interval_code_identity`, so a run whose grades did not change reads them and
    never imports scipy (1.3 s) or resamples. An entry is used only when it holds its own key
    and one interval per request, each within its values' range (a bootstrap of means cannot
    leave it); anything else is computed again and written over it."""

    def __init__(self, boot: Mapping[str, Any]):
        self.boot = dict(boot)
        self.asked: list[tuple[np.ndarray, list[float]]] = []

    def ask(self, values: list[float] | None) -> list[float]:
        """The interval of `values`' mean: a [low, high] list filled in by `resolve` ([nan, nan]
        for no values)."""
        interval = [NAN, NAN]
        if values:
            self.asked.append((np.asarray(values, dtype="float64"), interval))
        return interval

    def key(self) -> str:
        digest = hashlib.sha256(b"answer intervals\0")
        digest.update(f"{interval_code_identity()}\0{sorted(self.boot.items())!r}\0".encode())
        for values, _ in self.asked:
            digest.update(f"{values.size}\0".encode() + values.tobytes())
        return digest.hexdigest()

    def _usable(self, stored: object) -> bool:
        if not isinstance(stored, list) or len(stored) != len(self.asked):
            return False
        for (values, _), interval in zip(self.asked, stored):
            if not (isinstance(interval, list) and len(interval) == 2 and all(is_finite(x) for x in interval)):
                return False
            if not values.min() <= interval[0] <= interval[1] <= values.max():
                return False
        return True

    def resolve(self, cache: Path | None) -> None:
        if not self.asked:
            return
        key = self.key() if cache is not None else ""
        path = Path(cache) / f"answer_intervals_{key}.pkl" if cache is not None else None
        stored = read_keyed(path, key) if path is not None else None
        if not self._usable(stored):
            # deferred: metrics.statistics imports scipy (~1.3 s): not at load (the variants file checks
            # prices), nor when the intervals are cached
            from eval_pipeline.metrics.statistics import bootstrap_ci  # noqa: PLC0415

            stored = [[float(x) for x in bootstrap_ci(values, **self.boot)] for values, _ in self.asked]
            if path is not None:
                write_keyed(path, key, stored)
        for (_, interval), (low, high) in zip(self.asked, stored):  # type: ignore[arg-type]
            interval[:] = [float(low), float(high)]


def _by_assertion_type(scored: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    out = {}
    for kind in ASSERTION_TYPES:
        held = [h for g in scored for t, h in g["assertions"] if t == kind]
        out[kind] = {"n": len(held), "held_rate": _mean([float(h) for h in held])}
    return out


def _dimensions(graded: list[dict[str, Any]]) -> dict[str, Any]:
    dims = [g["dimensions"] for g in graded]
    out: dict[str, Any] = {"n": len(dims)}
    for c in JUDGE_CRITERIA:
        out[c] = _mean([d[c] for d in dims])
    out["overall"] = _mean([sum(d[c] for c in JUDGE_CRITERIA) / len(JUDGE_CRITERIA) for d in dims])
    return out


def _grader_metrics(
    grader: str, grades: list[dict[str, Any]], answers: Mapping[str, dict[str, Any]], intervals: _Intervals
) -> dict[str, Any]:
    scored = sorted((g for g in grades if g["status"] in SCORED), key=lambda g: g["prompt_id"])
    graded = [g for g in scored if g["status"] == "graded"]
    has_pass, has_score = _defined(graded, "passed", grader), _defined(graded, "score", grader)
    passed, scores = _values(scored, "passed", has_pass), _values(scored, "score", has_score)
    overall = _group(scored, has_pass, has_score)

    forms: dict[str, list[dict[str, Any]]] = {}
    retrieval: dict[str, list[dict[str, Any]]] = {"hit": [], "miss": [], "no_gold": []}
    for g in scored:
        answer = answers[g["prompt_id"]]
        forms.setdefault(answer["form"], []).append(g)
        hit = answer["retrieved_gold"]
        retrieval["no_gold" if hit is None else "hit" if hit else "miss"].append(g)

    graded_ids = {g["prompt_id"] for g in grades}
    out: dict[str, Any] = {
        "n_scored": len(scored),
        "n_graded": len(graded),
        "n_no_answer": len(scored) - len(graded),
        "n_not_applicable": sum(g["status"] == "not_applicable" for g in grades),
        "n_grader_failed": sum(g["status"] in GRADER_FAILED for g in grades),
        "n_missing": sum(pid not in graded_ids for pid in answers),
        "pass_rate": overall["pass_rate"],
        "pass_rate_ci": intervals.ask(passed),
        "mean_score": overall["mean_score"],
        "mean_score_ci": intervals.ask(scores),
        "by_form": {form: _group(forms[form], has_pass, has_score) for form in sorted(forms)},
        "by_retrieval": {key: _group(rows, has_pass, has_score) for key, rows in retrieval.items()},
    }
    if grader == "deterministic":
        out["by_assertion_type"] = _by_assertion_type(scored)
    if grader == "judge":
        out["dimensions"] = _dimensions(graded)
    return out


def _grounding(grades: pd.DataFrame) -> dict[str, Any]:
    """The grounding section (module docstring) from the grounding rows' ``details_json``."""
    details = []
    for row in grades.itertuples(index=False):
        if row.grader == "grounding" and row.status in ("graded", "not_applicable"):
            if not isinstance(row.details_json, str) or not row.details_json:
                raise ValueError(f"{_where('grades', row.prompt_id, 'grounding')}: details_json is empty")
            details.append(json.loads(row.details_json))
    out = grounding_rates(details)
    out["corpus_rate"] = float(out["corpus_rate"])
    return out


def _latency(values: list[float]) -> dict[str, Any]:
    if not values:
        return {"n": 0, "p50": NAN, "p95": NAN, "max": NAN, "mean": NAN}
    x = np.asarray(values, dtype="float64")
    p50, p95 = np.percentile(x, [50, 95], method="linear")
    return {"n": int(x.size), "p50": float(p50), "p95": float(p95), "max": float(x.max()), "mean": float(x.mean())}


def _latencies(answers: Sequence[dict[str, Any]]) -> dict[str, Any]:
    retrieval = [a["retrieval_ms"] for a in answers if a["retrieval_ms"] is not None]
    generation = [a["generation_ms"] for a in answers if a["generation_ms"] is not None]
    total = [
        a["retrieval_ms"] + a["generation_ms"]
        for a in answers
        if a["retrieval_ms"] is not None and a["generation_ms"] is not None
    ]
    return {"total": _latency(total), "retrieval": _latency(retrieval), "generation": _latency(generation)}


def _row_cost(answer: Mapping[str, Any], prices: Mapping[str, Mapping[str, float]]) -> tuple[float | None, str | None]:
    """(cost, model): cost None when the row has tokens and its model has no price."""
    model = answer["model_reported"] if answer["model_reported"] is not None else answer["model_sent"]
    p, c = answer["prompt_tokens"], answer["completion_tokens"]
    if p == 0 and c == 0:
        return 0.0, model
    price = prices.get(model) if model is not None else None
    if price is None:
        return None, model
    return pricing.cost(p, c, price), model


def _cost_sum(costs: list[float | None]) -> float | None:
    return None if any(c is None for c in costs) else float(sum(costs))  # type: ignore[arg-type]


def _tokens_and_cost(answers: Sequence[dict[str, Any]], prices: Mapping[str, Mapping[str, float]]) -> tuple[dict, dict]:
    spent = [a for a in answers if not a["cached"]]
    tokens = {
        "prompt_total": sum(a["prompt_tokens"] for a in answers),
        "completion_total": sum(a["completion_tokens"] for a in answers),
        "tokens_total": sum(a["prompt_tokens"] + a["completion_tokens"] for a in answers),
        "prompt_spent": sum(a["prompt_tokens"] for a in spent),
        "completion_spent": sum(a["completion_tokens"] for a in spent),
        "tokens_spent": sum(a["prompt_tokens"] + a["completion_tokens"] for a in spent),
    }
    priced = [(a, *_row_cost(a, prices)) for a in answers]
    unpriced = {model for _, cost, model in priced if cost is None}
    cost = {
        "cost_total": _cost_sum([c for _, c, _ in priced]),
        "cost_spent": _cost_sum([c for a, c, _ in priced if not a["cached"]]),
        "unpriced_models": sorted(unpriced, key=lambda m: (m is not None, m or "")),
    }
    return tokens, cost


# --------------------------------------------------------------------------
# entry points
# --------------------------------------------------------------------------


def answer_metrics(
    answers: pd.DataFrame,
    grades: pd.DataFrame,
    *,
    prices: Mapping[str, Mapping[str, float]] | None = None,
    n_resamples: int = 2000,
    seed: int = 0,
    confidence: float = 0.95,
    interval_cache: Path | None = None,
) -> dict[str, Any]:
    """One variant's answer metrics, by the rules of the module docstring.

    Returns ``{"variant", "counts", "graders", "latency_ms", "tokens", "cost"}``. ``graders``
    has one entry per grader that has rows in ``grades``, in `GRADERS` order (a grader that did
    not run is absent, not reported as NaN); ``variant`` is None when both frames are empty.
    Every input is checked before anything is computed (ValueError naming the bad column,
    row or value); the frames are only read. With `interval_cache` (a folder: the state dir's
    statistics cache), the intervals are stored there under their exact inputs and read back by
    a call with the same ones (`_Intervals`): the same numbers, without resampling.
    """
    boot = {
        "n_resamples": check_resamples(n_resamples),
        "seed": check_seed(seed),
        "confidence": _check_confidence(confidence),
    }
    table = check_prices({} if prices is None else prices)
    answer_rows = _records(answers, "answers", ANSWER_COLUMNS)
    grade_rows = _records(grades, "grades", GRADE_COLUMNS)
    variant = _single_variant(answer_rows, "answers")
    grades_variant = _single_variant(grade_rows, "grades")
    if grades_variant is not None and grades_variant != variant:
        raise ValueError(f"grades are for variant {grades_variant!r}, answers for {variant!r}")

    by_prompt: dict[str, dict[str, Any]] = {}
    for row in answer_rows:
        answer = _answer(row)
        if answer["prompt_id"] in by_prompt:
            raise ValueError(f"answers has prompt {answer['prompt_id']!r} twice")
        by_prompt[answer["prompt_id"]] = answer
    parsed = [_grade(row, by_prompt) for row in grade_rows]
    seen: set[tuple[str, str]] = set()
    for g in parsed:
        key = (g["prompt_id"], g["grader"])
        if key in seen:
            raise ValueError(f"grades has prompt {key[0]!r} twice for grader {key[1]!r}")
        seen.add(key)

    intervals = _Intervals(boot)
    graders = {
        grader: _grader_metrics(grader, [g for g in parsed if g["grader"] == grader], by_prompt, intervals)
        for grader in GRADERS
        if any(g["grader"] == grader for g in parsed)
    }
    intervals.resolve(interval_cache)
    if "grounding" in graders and isinstance(grades, pd.DataFrame) and "details_json" in grades.columns:
        graders["grounding"]["grounding"] = _grounding(grades)
    rows = list(by_prompt.values())
    tokens, cost = _tokens_and_cost(rows, table)
    return {
        "variant": variant,
        "counts": {
            "n_prompts": len(rows),
            "n_errored": sum(a["error"] is not None for a in rows),
            "n_cached": sum(a["cached"] for a in rows),
        },
        "graders": graders,
        "latency_ms": _latencies(rows),
        "tokens": tokens,
        "cost": cost,
    }


def _lookup(metrics: Mapping[str, Any], *path: str) -> Any:
    node: Any = metrics
    for i, key in enumerate(path):
        if not isinstance(node, Mapping) or key not in node:
            raise ValueError(f"metrics has no {'.'.join(path[: i + 1])!r}: not a result of answer_metrics")
        node = node[key]
    return node


def answer_summary_row(metrics: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """The report table's flat rows: ``{grader: row}``, one row per grader of ``metrics`` (an
    `answer_metrics` result), in its order, each with the `SUMMARY_COLUMNS`.

    Keyed by grader so a report can pick one; ``list(result.values())`` is the table. The
    variant-wide numbers (``p50_ms``/``p95_ms`` of total latency, ``cost_total``) repeat on
    every row so that each row stands alone in a table of many variants. ``n`` is the grader's
    ``n_scored``. No graders: an empty dict. A dict missing a key raises ValueError naming it.
    """
    variant = _lookup(metrics, "variant")
    p50 = _lookup(metrics, "latency_ms", "total", "p50")
    p95 = _lookup(metrics, "latency_ms", "total", "p95")
    cost_total = _lookup(metrics, "cost", "cost_total")
    rows = {}
    for grader in _lookup(metrics, "graders"):

        def g(*path: str, grader: str = grader) -> Any:
            return _lookup(metrics, "graders", grader, *path)

        rows[grader] = {
            "variant": variant,
            "grader": grader,
            "n": g("n_scored"),
            "pass_rate": g("pass_rate"),
            "pass_rate_low": g("pass_rate_ci")[0],
            "pass_rate_high": g("pass_rate_ci")[1],
            "mean_score": g("mean_score"),
            "mean_low": g("mean_score_ci")[0],
            "mean_high": g("mean_score_ci")[1],
            "pass_rate_hit": g("by_retrieval", "hit", "pass_rate"),
            "pass_rate_miss": g("by_retrieval", "miss", "pass_rate"),
            "p50_ms": p50,
            "p95_ms": p95,
            "cost_total": cost_total,
            **{k: g("grounding", k) if grader == "grounding" and "grounding" in metrics["graders"][grader] else NAN
               for k in ("grounded_rate", "corpus_rate", "citations_per_answer")},
        }
    return rows
