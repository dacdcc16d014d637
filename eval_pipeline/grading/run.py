"""The graded_answers asset without Dagster: every chosen grader on every variant's answers.

One row per (prompt, grader) per variant (`GRADE_COLUMNS`), with a status:

- ``graded``: the grader scored the answer (`passed`, `score` in [0, 1]);
- ``not_applicable``: the grader has nothing to check on this prompt (no assertions for
  ``deterministic``; no code and no declared symbol for ``static``; no reference for
  ``decision``);
- ``no_answer``: the answer could not be generated (retrieval or generation failed): it
  counts as failed with score 0 wherever the grader applies, so a failure never raises a
  pass rate by leaving the denominator;
- ``failed`` / ``unparseable``: an LLM grader's call failed or its reply had no usable score:
  no grade is guessed; the run's yardstick for that grader is then not a single grader, so
  it is never compared.

Each grader's yardstick says what its scores can be compared with: ``deterministic:v1`` and
``static:v1`` (the rules' versions), ``judge:<provider>:<model>:v<prompt version>`` and
``decision:<provider>:<model>:v<profile version>`` (`answer_judges`).

The graders read each answer's text and the context it saw from the answer cache (the answers
frame keeps only the key unless the user asked for the text). Judge and decision calls of all
variants go through one client, so they share its concurrency limit.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from eval_pipeline.answering.cache import AnswerCache
from eval_pipeline.answering.prompts import CheckedGoldenSet
from eval_pipeline.answering.run import context_from_record
from eval_pipeline.common import prices as pricing
from eval_pipeline.common.checks import finite_number, missing
from eval_pipeline.common.metadata import frame_metadata, shown_number
from eval_pipeline.grading.assertions import (
    DETERMINISTIC_VERSION,
    STATIC_VERSION,
    grade_deterministic,
    grade_static,
)
from eval_pipeline.grading.grounding import GROUNDING_VERSION
from eval_pipeline.grading.independence import SELF_JUDGED_LABEL
from eval_pipeline.grading.judges import (
    PASS_SCORE,
    DecisionItem,
    JudgeItem,
    check_graders,
    decide_answers,
    decision_yardstick,
    judge_answers,
    judge_yardstick,
    token_spending,
)
from eval_pipeline.grading.registry import GRADER_KINDS, AnswerToGrade, GraderKind, GradingContext

GRADE_COLUMNS = [
    "variant", "prompt_id", "grader", "status", "passed", "score", "assertion_types", "assertion_held",
    "faithfulness", "relevance", "citations", "reason", "grader_model", "details_json",
]
DEFAULT_GRADERS = ("deterministic", "static")
_SEP = "\x1f"  # item ids of the LLM graders: variant + SEP + prompt id


def grade_row(variant: str, prompt_id: str, grader: str, status: str, **fields: Any) -> dict[str, Any]:
    """One grade row (`GRADE_COLUMNS`), the fields a grader does not give empty."""
    return _row(variant, prompt_id, grader, status, **fields)


def _row(variant: str, prompt_id: str, grader: str, status: str, **fields: Any) -> dict[str, Any]:
    row: dict[str, Any] = {
        "variant": variant, "prompt_id": prompt_id, "grader": grader, "status": status, "passed": None,
        "score": None, "assertion_types": [], "assertion_held": [], "faithfulness": None, "relevance": None,
        "citations": None, "reason": "", "grader_model": None, "details_json": ""}
    row.update(fields)
    return row


def _reason(result, keep_text: bool) -> str:
    """An assertion's reason. `exact` and `json_schema` reasons quote the answer, so without
    `keep_text` they say only what failed."""
    if result.reason and not keep_text and result.type in _QUOTING:
        return _QUOTING[result.type]
    return result.reason


_QUOTING = {"exact": "the trimmed answer is not exactly the expected value",
            "json_schema": "the answer is not JSON matching the schema"}


def _deterministic(variant: str, prompt, text: str | None, keep_text: bool = False) -> dict[str, Any]:
    types = [a.type for a in prompt.assertions]
    if not types:
        return _row(variant, prompt.id, "deterministic", "not_applicable")
    if text is None:
        return _row(variant, prompt.id, "deterministic", "no_answer", passed=False, score=0.0,
                    assertion_types=types, assertion_held=[False] * len(types))
    grade = grade_deterministic(text, [a.to_json() for a in prompt.assertions])
    reasons = "; ".join(_reason(r, keep_text) for r in grade.results if r.reason)
    return _row(variant, prompt.id, "deterministic", "graded", passed=grade.passed, score=grade.score,
                assertion_types=[r.type for r in grade.results], assertion_held=[r.held for r in grade.results],
                reason=reasons[:300])


def _static(variant: str, prompt, text: str | None) -> dict[str, Any]:
    if prompt.static is None:
        return _row(variant, prompt.id, "static", "not_applicable")
    if text is None:
        return _row(variant, prompt.id, "static", "no_answer", passed=False, score=0.0)
    grade = grade_static(text, allowed_imports=prompt.static.allowed_imports, symbols=prompt.static.symbols)
    if grade.passed is None:  # the prompt asks for code and the answer has none: a failure, not "nothing to check"
        return _row(variant, prompt.id, "static", "graded", passed=False, score=0.0, reason="no python block")
    reasons = "; ".join(c.reason for c in grade.checks if c.reason)
    return _row(variant, prompt.id, "static", "graded", passed=grade.passed, score=grade.score, reason=reasons[:300])


def static_failures(prompt, text: str) -> list[str] | None:
    """The static checks an answer fails, one reason each, as the static grader sees them: None
    when the prompt declares none (nothing to repair), [] when it passes. What `answers.repair`
    tells the generator (eval_pipeline.answering.repair)."""
    if prompt.static is None:
        return None
    grade = grade_static(text, allowed_imports=prompt.static.allowed_imports, symbols=prompt.static.symbols)
    if grade.passed is None:
        return ["no python block: the task asks for code in a ```python fence"]
    return [c.reason for c in grade.checks if not c.held]


def grade_variants(
    answers: Mapping[str, pd.DataFrame],
    golden: CheckedGoldenSet,
    *,
    graders: Sequence[str],
    cache: AnswerCache,
    llm: Any = None,
    grade_cache: str | Path | None = None,
    max_tokens: int | None = None,
    corpus_probe: Any = None,
    self_judged: bool = False,
) -> tuple[dict[str, pd.DataFrame], dict[str, dict[str, str]]]:
    """(one grades frame per variant, {variant: {grader: yardstick}}). `llm` is needed only
    when a chosen grader spends tokens (checked before any grading). `corpus_probe` (a
    `grounding.CorpusProbe`, e.g. `KeywordCorpusProbe(connection_string)`) lets the grounding
    grader look items up in the corpus, in each variant's store table; without it only the
    context is searched and the corpus rate is not measured.
    `self_judged` (the judge is the generator, allowed by answers.allow_self_judging:
    `independence.judge_independence`) labels the yardstick of every grader that calls a model
    ``+self-judged``: such a number is shown labelled and never compared with an independent
    judge's.

    The answer text is kept only when the user asked (the answers frames hold it): otherwise
    no grade quotes it (an `exact` reason says only that the answer differs, and the LLM
    graders' reasons, which may quote it, are left out)."""
    graders = check_graders(list(graders), "graded_answers.graders")
    if token_spending(graders) and (llm is None or grade_cache is None):
        raise ValueError(f"graders {', '.join(token_spending(graders))} call a model: an LLM and a grade cache "
                         "are needed")
    prompts = golden.golden.by_id() if golden.golden is not None else {}
    fingerprint = golden.golden.fingerprint if golden.golden is not None else None
    for variant, frame in answers.items():  # answers written for other prompts are not graded against these
        if len(frame) and set(frame["set_fingerprint"]) != {fingerprint}:
            raise ValueError(f"the answers of variant {variant!r} were written for golden set "
                             f"{sorted(set(frame['set_fingerprint']))}, "
                             f"golden_prompts is {fingerprint!r}: "
                             "materialize answers again")
    keep_text = any(frame["answer"].notna().any() for frame in answers.values() if len(frame))
    kinds = [kind for kind in GRADER_KINDS.kinds() if kind.name in graders]  # the registry's order
    rows: dict[str, list[dict[str, Any]]] = {v: [] for v in answers}
    todo: list[AnswerToGrade] = []
    for variant, frame in answers.items():
        for a in frame.itertuples(index=False):
            record = _record(cache, a) if missing(a.error) else None
            item = AnswerToGrade(variant, prompts[a.prompt_id], record, keep_text)
            todo.append(item)
            for kind in kinds:  # the graders without a model: each answer's grades together
                if kind.grade_one is not None:
                    rows[variant].append(kind.grade_one(item))
    yardsticks: dict[str, dict[str, str]] = {v: {} for v in answers}
    for v in answers:
        for kind in kinds:
            if kind.grade_one is not None and kind.yardstick is not None:
                yardsticks[v][kind.name] = kind.yardstick()
    sampling = (f"t{llm.identity().get('temperature', '?')}" + (f",max_tokens={max_tokens}" if max_tokens else "")
                if llm is not None and hasattr(llm, "identity") else "t?")
    tables = {v: str(frame["store_table"].iloc[0]) for v, frame in answers.items()
              if len(frame) and "store_table" in frame and not missing(frame["store_table"].iloc[0])}
    context = GradingContext(llm=llm, grade_cache=grade_cache, max_tokens=max_tokens, sampling=sampling,
                             variants=tuple(answers), corpus=corpus_probe, tables=tables)
    for kind in kinds:
        if kind.grade_all is None:
            continue
        if kind.spends_tokens and grade_cache is None:  # refused above: it spends tokens
            raise ValueError(f"grade_cache is None: the {kind.name} grader needs a grade cache")
        more, their_yardsticks = kind.grade_all(todo, context)
        label = f"+{SELF_JUDGED_LABEL}" if self_judged and kind.spends_tokens else ""
        for v in answers:
            rows[v] += more.get(v, [])
            if v in their_yardsticks:
                yardsticks[v][kind.name] = their_yardsticks[v] + label
    return {v: pd.DataFrame(r, columns=GRADE_COLUMNS) for v, r in rows.items()}, yardsticks


def _judge_all(todo: Sequence[AnswerToGrade], context: GradingContext):
    items = [JudgeItem(_item_id(a), a.prompt.prompt, context_from_record(a.record), a.record["text"])
             for a in todo if a.record is not None]
    if context.grade_cache is None:
        raise ValueError("grade_cache is None: the judge needs a grade cache")
    grades = judge_answers(items, llm=context.llm, cache_dir=context.grade_cache, max_tokens=context.max_tokens)
    return _llm_rows("judge", grades, todo, judge_yardstick, context)


def _decide_all(todo: Sequence[AnswerToGrade], context: GradingContext):
    items = [DecisionItem(_item_id(a), a.prompt.prompt, a.prompt.reference, a.record["text"],
                          system_prompt=a.record.get("system_prompt"))
             for a in todo if a.record is not None and a.prompt.reference is not None]
    if context.grade_cache is None:
        raise ValueError("grade_cache is None: the decision grader needs a grade cache")
    decisions = decide_answers(items, llm=context.llm, cache_dir=context.grade_cache, max_tokens=context.max_tokens)
    return _llm_rows("decision", decisions, todo, decision_yardstick, context)


def _item_id(answer: AnswerToGrade) -> str:
    return f"{answer.variant}{_SEP}{answer.prompt.id}"


def _record(cache: AnswerCache, answer) -> dict[str, Any]:
    record = cache.get(answer.answer_key)
    if record is None:
        raise FileNotFoundError(f"answer {answer.prompt_id!r} of variant {answer.variant!r} is not in the answer "
                                f"cache (key {answer.answer_key[:12]}…): materialize answers again")
    return record


def grading_code() -> str:
    """The code that decides a code-graded pass, in the code-graded yardsticks: a grader changed
    without a bumped version grades another way (another yardstick, never compared). The rules
    (assertions.py, answer_metrics.py), this module (which routes an answer to them), the
    pattern engine's wrapper (common/patterns.py) and the `regex` package's version (a `regex`
    assertion's match), the golden set's limits (questions/golden.py), and the Python that
    parses a static check's code (`ast`) and normalizes text (`unicodedata`)."""
    import hashlib
    import sys
    import unicodedata

    import regex

    from eval_pipeline.common import versions

    code = versions.source_digest("eval_pipeline/grading/assertions.py", "eval_pipeline/grading/answer_metrics.py",
                                  "eval_pipeline/grading/run.py", "eval_pipeline/common/patterns.py",
                                  "eval_pipeline/questions/golden.py")
    runtime = f"regex {getattr(regex, '__version__', 'unknown')}; python {sys.version_info[:3]}; " \
              f"unicode {unicodedata.unidata_version}"
    return hashlib.sha256(f"{code};{runtime}".encode()).hexdigest()[:12]


def _with_sampling(yardstick: str, sampling: str) -> str:
    """A single-grader yardstick with the grading model's sampling settings (another
    temperature or token budget grades differently: another yardstick); the bare
    `judge` / `decision` and `…:failed` stay as they are (never compared anyway)."""
    return f"{yardstick}@{sampling}" if yardstick.count(":") >= 3 else yardstick


def _llm_rows(grader: str, grades, todo: Sequence[AnswerToGrade], yardstick_of, context: GradingContext):
    """(rows by variant, yardstick by variant) of an LLM grader's grades, in the answers' order."""
    by_item = {g.item_id: g for g in grades}
    rows: dict[str, list[dict[str, Any]]] = {v: [] for v in context.variants}
    mine: dict[str, list[Any]] = {v: [] for v in context.variants}
    for a in todo:
        variant, prompt, record, keep_text = a.variant, a.prompt, a.record, a.keep_text
        out = rows.setdefault(variant, [])
        graded = mine.setdefault(variant, [])
        if grader == "decision" and prompt.reference is None:
            out.append(_row(variant, prompt.id, grader, "not_applicable", reason="no reference"))
            continue
        if record is None:
            out.append(_row(variant, prompt.id, grader, "no_answer", passed=False, score=0.0))
            continue
        g = by_item[_item_id(a)]
        graded.append(g)
        model = g.served.label() if g.served is not None else None
        if not g.ok:
            out.append(_row(variant, prompt.id, grader, g.status, reason=g.error or "", grader_model=model))
        elif grader == "judge":
            out.append(_row(variant, prompt.id, grader, "graded", passed=g.overall >= PASS_SCORE,
                            score=g.overall, faithfulness=g.faithfulness, relevance=g.relevance,
                            citations=g.citations, reason=g.reason if keep_text else "", grader_model=model))
        else:
            out.append(_row(variant, prompt.id, grader, "graded", passed=bool(g.passed),
                            score=g.score, reason=g.reason if keep_text else "", grader_model=model))
    return rows, {variant: _with_sampling(yardstick_of(graded), context.sampling) for variant, graded in mine.items()}


GRADER_KINDS.register(GraderKind(
    "deterministic", needs=frozenset({"assertions"}),
    grade_one=lambda a: _deterministic(a.variant, a.prompt, a.text, a.keep_text),
    yardstick=lambda: f"deterministic:v{DETERMINISTIC_VERSION}+{grading_code()}",
    description="the prompt's assertions (exact, contains, regex, json_schema...), no model"))
GRADER_KINDS.register(GraderKind(
    "static", needs=frozenset({"static"}), grade_one=lambda a: _static(a.variant, a.prompt, a.text),
    yardstick=lambda: f"static:v{STATIC_VERSION}+{grading_code()}",
    description="static checks of the answer's python block (imports, symbols), no model"))
def _ground_all(todo: Sequence[AnswerToGrade], context: GradingContext):
    """The grounding grader (eval_pipeline.grading.grounding): per answer, the share of its items
    found in its context (passed: all of them), the corpus lookups through `context.corpus`;
    the details (counts, citations, the ungrounded items) in `details_json`."""
    import json

    from eval_pipeline.grading.grounding import ground_answer

    rows: dict[str, list[dict[str, Any]]] = {v: [] for v in context.variants}
    for a in todo:
        out = rows.setdefault(a.variant, [])
        if a.record is None:
            out.append(_row(a.variant, a.prompt.id, "grounding", "no_answer", passed=False, score=0.0))
            continue
        g = ground_answer(a.record["text"], context_from_record(a.record), probe=context.corpus,
                          table=context.tables.get(a.variant))
        details = json.dumps(g.to_json(), sort_keys=True, ensure_ascii=False)
        if not g.items:
            out.append(_row(a.variant, a.prompt.id, "grounding", "not_applicable", reason="nothing checkable",
                            details_json=details))
            continue
        missing_items = [u["item"] for u in g.ungrounded()]
        reason = (f"{len(missing_items)} of {len(g.items)} item(s) not in the context: "
                  + ", ".join(repr(i) for i in missing_items[:5]) + (", ..." if len(missing_items) > 5 else "")
                  if missing_items else "")
        out.append(_row(a.variant, a.prompt.id, "grounding", "graded", passed=not missing_items, score=g.rate,
                        reason=reason[:300], details_json=details))
    probe = "corpus" if context.corpus is not None else "context-only"
    from eval_pipeline.common.versions import source_digest

    code = source_digest("eval_pipeline/grading/grounding.py")
    yardstick = f"grounding:v{GROUNDING_VERSION}+{code}+{probe}"
    return rows, {v: yardstick for v in rows}


GRADER_KINDS.register(GraderKind(
    "grounding", grade_all=_ground_all,
    description="the answer's symbols, calls, quoted phrases and numbers looked up in its context and the corpus's "
                "keyword index, no model"))
GRADER_KINDS.register(GraderKind(
    "judge", needs=frozenset({"llm"}), grade_all=_judge_all,
    description="an LLM scores faithfulness, relevance and citations against the context"))
GRADER_KINDS.register(GraderKind(
    "decision", needs=frozenset({"llm", "reference"}), grade_all=_decide_all,
    description="an LLM decides on five levels how well the answer fulfils its task, the reference as evidence"))


def grades_metadata(frame: pd.DataFrame) -> dict[str, Any]:
    """One partition's grade counts for the asset page: graded and passed per grader."""
    out: dict[str, Any] = {"grades": len(frame)}
    for grader, part in frame.groupby("grader", sort=False):
        out[f"{grader} graded"] = int((part["status"] == "graded").sum())
        out[f"{grader} passed"] = int((part["passed"] == True).sum())  # noqa: E712
        out[f"{grader} no grade (failed or unparseable)"] = int(part["status"].isin(["failed", "unparseable"]).sum())
    return out


METRIC_COLUMNS = ["variant", "grader", "set_id", "set_name", "set_fingerprint", "limited", "generator", "yardstick",
                  "n_prompts", "n_errored", "n_scored", "pass_rate", "pass_rate_low", "pass_rate_high", "mean_score",
                  "mean_low", "mean_high", "n_grader_failed", "grounded_rate", "corpus_rate", "citations_per_answer",
                  "corpus_signature", "store_table", "variant_config", "treatment_json", "metrics_json",
                  "self_judged", "repair_json", "agreement_json", "gradings_json", "hallucinations_json"]


def answer_metric_frames(answers: Mapping[str, pd.DataFrame], grades: Mapping[str, pd.DataFrame],
                         golden: CheckedGoldenSet, *, prices: Mapping[str, Any] | None = None,
                         ) -> tuple[dict[str, pd.DataFrame], dict[str, dict[str, Any]]]:
    """({variant: one row per grader, `METRIC_COLUMNS`}, {variant: metadata}). The generator is
    the one every generated answer reports (`run_generator`), else None (unknown: never
    compared); `metrics_json` holds the whole `answer_metrics` result.

    What the report shows and writes beside the numbers, per row (JSON, "" when it does not
    apply): ``self_judged`` (the grader's yardstick carries the self-judged label),
    ``repair_json`` (`repair.repair_summary` of the variant's answers, when the run repaired:
    every row of the variant), ``agreement_json`` (the grader's pass rate with its PPI interval
    and agreement, when graded_answers calibrated it: `calibration_json` in the grades),
    ``gradings_json`` (the row's answers.jsonl lines, `grading_lines`) and
    ``hallucinations_json`` (the grounding row's log, `hallucinations_of`). The metadata adds
    the grounding rates, the repair pass rates and, when calibrated, kappa and the PPI bounds
    as numbers."""
    import json

    from eval_pipeline.answering.served import ServedBy, run_generator
    from eval_pipeline.grading.answer_metrics import answer_metrics, answer_summary_row

    frames, metadata = {}, {}
    for variant, frame in answers.items():
        if golden.golden is None or not len(frame):
            frames[variant] = pd.DataFrame(columns=METRIC_COLUMNS)
            metadata[variant] = {"evaluated": False, "reason": golden.reason}
            continue
        graded = grades[variant]
        metrics = answer_metrics(frame, graded.drop(columns=["yardstick", "calibration_json"], errors="ignore"),
                                 prices=prices)
        extras = _row_extras(variant, frame, graded, prices)
        ok = frame[frame["error"].isna()]
        generator = run_generator(ServedBy(r.provider, r.model_sent, r.model_reported) for r in ok.itertuples())
        yardsticks = dict(zip(graded["grader"], graded["yardstick"])) if "yardstick" in graded else {}
        rows = []
        for summary in answer_summary_row(metrics).values():
            rows.append({**{c: summary.get(c) for c in METRIC_COLUMNS}, "variant": variant, "n_scored": summary["n"],
                         "set_id": golden.golden.set_id, "set_name": golden.set_name,
                         "set_fingerprint": golden.golden.fingerprint, "limited": golden.limited,
                         "generator": generator, "yardstick": yardsticks.get(summary["grader"]),
                         "n_prompts": len(frame), "n_errored": int(frame["error"].notna().sum()),
                         "treatment_json": json.dumps(_treatment(frame), sort_keys=True),
                         "n_grader_failed": int(metrics["graders"][summary["grader"]].get("n_grader_failed", 0)),
                         **{c: frame[c].iloc[0] for c in ("corpus_signature", "store_table", "variant_config")},
                         "metrics_json": json.dumps(metrics, sort_keys=True), **extras(summary["grader"])})
        frames[variant] = pd.DataFrame(rows, columns=METRIC_COLUMNS)
        metadata[variant] = {"evaluated": True, "generator": generator or "unknown",
                             **{f"{r['grader']} pass_rate": r["pass_rate"] for r in rows},
                             **{f"{r['grader']} mean_score": r["mean_score"] for r in rows},
                             **_interval_metadata(rows), **_cost_metadata(metrics),
                             **_extra_metadata(rows), "table": frame_metadata(frames[variant])}
    return frames, metadata


def _interval_metadata(rows: Sequence[Mapping[str, Any]]) -> dict[str, float | None]:
    """Each grader's pass-rate and mean-score intervals as numbers the UI plots beside them."""
    out: dict[str, float | None] = {}
    for r in rows:
        for label, column in (("pass_rate low", "pass_rate_low"), ("pass_rate high", "pass_rate_high"),
                              ("mean_score low", "mean_low"), ("mean_score high", "mean_high")):
            out[f"{r['grader']} {label}"] = shown_number(r.get(column))
    return out


def _cost_metadata(metrics: Mapping[str, Any]) -> dict[str, float | None]:
    """The partition's latency (retrieval plus generation, p50 and p95), tokens and cost (None:
    an unpriced model, never a partial sum)."""
    total = (metrics.get("latency_ms") or {}).get("total") or {}
    return {"latency p50 ms": shown_number(total.get("p50")), "latency p95 ms": shown_number(total.get("p95")),
            "tokens": shown_number((metrics.get("tokens") or {}).get("tokens_total")),
            "cost": shown_number((metrics.get("cost") or {}).get("cost_total"))}


def _generator_price(frame: pd.DataFrame, prices: Mapping[str, Any] | None) -> Mapping[str, float] | None:
    """The price of the model that wrote the answers (reported, else sent), None without one."""
    for column in ("model_reported", "model_sent"):
        if column in frame:
            for model in frame[column].dropna():
                if model in (prices or {}):
                    return (prices or {})[model]
    return None


def _row_extras(variant: str, frame: pd.DataFrame, graded: pd.DataFrame, prices: Mapping[str, Any] | None):
    """grader -> the extra columns of its metric row (`answer_metric_frames`)."""
    import json

    from eval_pipeline.answering.repair import repair_summary

    def clean(value: Any) -> Any:  # JSON without NaN (a rate over nothing is null)
        if isinstance(value, float):
            return finite_number(value)
        if isinstance(value, Mapping):
            return {k: clean(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [clean(v) for v in value]
        return value

    repair = (json.dumps(clean(repair_summary(frame, price=_generator_price(frame, prices))), sort_keys=True)
              if "repair" in frame and frame["repair"].notna().any() else "")
    lines = grading_lines({variant: frame}, {variant: graded}, prices=prices)
    log = hallucinations_of({variant: frame}, {variant: graded}) if "grounding" in set(graded["grader"]) else []
    yardsticks = dict(zip(graded["grader"], graded["yardstick"])) if "yardstick" in graded else {}

    def extras(grader: str) -> dict[str, Any]:
        agreement = ""
        if "calibration_json" in graded:
            mine = graded[graded["grader"] == grader]
            calibration = next((c for c in mine["calibration_json"] if isinstance(c, str) and c), "")
            if calibration:
                agreement = json.dumps(clean(calibrated_rate(mine, json.loads(calibration))), sort_keys=True)
        return {"self_judged": str(yardsticks.get(grader) or "").endswith(f"+{SELF_JUDGED_LABEL}"),
                "repair_json": repair, "agreement_json": agreement,
                "gradings_json": json.dumps([line for line in lines if line["grader"] == grader], sort_keys=True,
                                            default=str),
                "hallucinations_json": json.dumps(log, sort_keys=True, default=str) if grader == "grounding" else ""}

    return extras


def calibrated_rate(grades: pd.DataFrame, calibration: Mapping[str, Any]) -> dict[str, Any]:
    """One grader's pass rate on a variant's graded answers with the prediction-powered interval
    from its calibration (`agreement.judge_rate_with_ppi`) and the agreement numbers (accuracy,
    kappa, the confusion matrix); PPI needs two graded answers and two calibration rows: else
    the agreement alone, and ``error`` says why."""
    from eval_pipeline.grading.agreement import judge_rate_with_ppi

    passes = [bool(p) for p, s in zip(grades["passed"], grades["status"]) if s == "graded"]
    base = {"grader": calibration.get("grader"), "n_calibration": calibration.get("n"),
            "n_not_graded": calibration.get("n_not_graded"), "accuracy": calibration["agreement"]["accuracy"],
            "kappa": calibration["agreement"]["kappa"], "confusion": calibration["agreement"]["confusion"],
            "graded_by": calibration.get("graded_by", []), "source": calibration.get("source")}
    try:
        return {**base, **judge_rate_with_ppi(passes, calibration)}
    except ValueError as exc:
        return {**base, "error": str(exc)}


def _extra_metadata(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The metric rows' grounding, repair and agreement figures as numbers for the asset page."""
    import json

    out: dict[str, Any] = {}
    for r in rows:
        if r["grader"] == "grounding":
            for k in ("grounded_rate", "corpus_rate", "citations_per_answer"):
                value = r.get(k)
                out[k] = float(value) if value is not None and not missing(value) else float("nan")
        if r.get("self_judged"):
            out[f"{r['grader']} self-judged"] = True
        if r.get("agreement_json"):
            a = json.loads(r["agreement_json"])
            for k in ("kappa", "accuracy", "estimate", "low", "high"):
                if k in a:
                    out[f"{r['grader']} {'ppi ' if k in ('estimate', 'low', 'high') else ''}{k}"] = (
                        float("nan") if a[k] is None else float(a[k]))
    repair = next((r["repair_json"] for r in rows if r.get("repair_json")), "")
    if repair:
        summary = json.loads(repair)
        for k in ("pass_rate_before", "pass_rate_after"):
            out[f"repair {k}"] = float("nan") if summary[k] is None else float(summary[k])
        out["repair kept"] = int(summary["n_kept"])
        out["repair asked"] = int(summary["n_repairs_asked"])
    return out


def grading_usage(before: Mapping[str, Any], after: Mapping[str, Any], model: str,
                  prices: Mapping[str, Mapping[str, float]] | None) -> dict[str, Any]:
    """What the LLM graders spent in this step (the client's usage, after minus before): calls,
    failures, tokens, and the cost at the variants file's price for `model` (None when it has
    no price). Grading is not part of an answer's cost or latency; this is its own bill."""
    spent = {k: int(after[k]) - int(before[k]) for k in ("calls", "failures", "prompt_tokens", "completion_tokens")}
    price = (prices or {}).get(model)
    cost = None if price is None else pricing.cost(spent["prompt_tokens"], spent["completion_tokens"], price)
    return {f"grading {k.replace('_', ' ')}": v for k, v in spent.items()} | {"grading cost": cost}


def _treatment(frame: pd.DataFrame) -> dict[str, Any]:
    """What the run changed that the comparison key does not hold: the context size, the
    generator's settings (its prompt version, token budget, sampling...) and the vector table the
    context came from (an index redefined under its name). A run is compared across them (they
    are what a team tunes); the report names what changed."""
    import json

    out = {"context_k": int(frame["context_k"].iloc[0]), "generator": json.loads(frame["generator_settings"].iloc[0])}
    if "store_table" in frame:
        out["table"] = str(frame["store_table"].iloc[0])
    return out



GRADING_LINE_FIELDS = ("variant", "prompt_id", "grader", "status", "passed", "score", "reason", "grader_model",
                       "yardstick", "answer_key", "answer_prompt_tokens", "answer_completion_tokens", "answer_cost",
                       "cached", "repair", "answer")


def grading_lines(answers: Mapping[str, pd.DataFrame], grades: Mapping[str, pd.DataFrame], *,
                  prices: Mapping[str, Mapping[str, float]] | None = None) -> list[dict[str, Any]]:
    """The per-prompt gradings a run keeps (``answers.jsonl``): one line per (variant, prompt,
    grader), `GRADING_LINE_FIELDS`, in variant, then grade-row order. The reason is the grade
    row's (the graders already leave out what would quote an answer without keep_text); the
    answer's text only when the answers frame holds it (keep_text), else None. Tokens and cost
    are the answer's (generation and any repair; grading has its own bill, `grading_usage`):
    the cost at the model's price (reported model, else sent), None when it has no price, 0.0
    without tokens. Missing values are None (JSON null), never NaN."""
    out: list[dict[str, Any]] = []
    for variant, graded in grades.items():
        frame = answers.get(variant)
        by_prompt = {r["prompt_id"]: r for r in frame.to_dict("records")} if frame is not None else {}
        for g in graded.to_dict("records"):
            a = by_prompt.get(g["prompt_id"], {})
            p, c = int(a.get("prompt_tokens") or 0), int(a.get("completion_tokens") or 0)
            model = a.get("model_reported") if not missing(a.get("model_reported")) else a.get("model_sent")
            price = (prices or {}).get(model) if not missing(model) else None
            cost = 0.0 if p == 0 and c == 0 else (None if price is None else pricing.cost(p, c, price))
            line = {"variant": variant, "prompt_id": g["prompt_id"], "grader": g["grader"], "status": g["status"],
                    "passed": g.get("passed"), "score": g.get("score"), "reason": g.get("reason") or "",
                    "grader_model": g.get("grader_model"), "yardstick": g.get("yardstick"),
                    "answer_key": a.get("answer_key"), "answer_prompt_tokens": p, "answer_completion_tokens": c,
                    "answer_cost": cost, "cached": a.get("cached"), "repair": a.get("repair"),
                    "answer": a.get("answer")}
            out.append({k: None if missing(v) else (bool(v) if k in ("passed", "cached") else v)
                        for k, v in line.items()})
    return out


def hallucinations_of(answers: Mapping[str, pd.DataFrame], grades: Mapping[str, pd.DataFrame]) -> list[dict[str, Any]]:
    """The run's hallucination log (`grounding.hallucination_log`) from its answers and grades
    frames: each item the grounding grader did not find in its answer's context, named by
    variant, prompt and answer key; the answer's text only when the frames keep it."""
    from eval_pipeline.grading.grounding import hallucination_log

    keys: dict[tuple[str, str], str] = {}
    texts: dict[tuple[str, str], str] = {}
    for variant, frame in answers.items():
        for r in frame.to_dict("records"):
            keys[(variant, r["prompt_id"])] = r["answer_key"]
            if not missing(r.get("answer")):
                texts[(variant, r["prompt_id"])] = r["answer"]
    rows = [{**r, "variant": variant} for variant, graded in grades.items() for r in graded.to_dict("records")]
    return hallucination_log(rows, answer_keys=keys, answer_texts=texts or None)


def calibrate_graders(path: str | Path, graders: Sequence[str], *, llm: Any, grade_cache: str | Path,
                      max_tokens: int | None = None) -> dict[str, dict[str, Any]]:
    """{grader: `agreement.calibrate_judge` result, with ``source`` the file} for each chosen LLM
    grader the calibration file has rows for: ``decision`` the rows with a ``reference``,
    ``judge`` those with a ``context`` (a row's ``grader`` field, when given, names its grader).
    A file with no row for any chosen LLM grader is refused (a ValueError naming it): a
    calibration that calibrates nothing would show no agreement and say nothing."""
    from eval_pipeline.grading.agreement import calibrate_judge

    rows = check_calibration(path, graders)
    out: dict[str, dict[str, Any]] = {}
    for grader, mine in rows.items():
        out[grader] = {**calibrate_judge(mine, grader=grader, llm=llm, cache_dir=grade_cache, max_tokens=max_tokens),
                       "source": str(path)}
    return out


def check_calibration(path: str | Path, graders: Sequence[str]) -> dict[str, list[dict[str, Any]]]:
    """The calibration file's rows by the chosen LLM grader they calibrate (`calibrate_graders`),
    read and checked without a model call (the run's preflight): a bad line names file and
    line; a file that fits no chosen LLM grader is a ValueError."""
    from eval_pipeline.grading.agreement import load_calibration

    rows = load_calibration(path)
    out: dict[str, list[dict[str, Any]]] = {}
    for grader, need in (("judge", "context"), ("decision", "reference")):
        if grader in graders:
            mine = [r for r in rows if r.get("grader", grader) == grader and need in r]
            if mine:
                out[grader] = mine
    if not out:
        chosen = [g for g in graders if g in ("judge", "decision")]
        raise ValueError(f"{path}: no calibration row for the chosen LLM grader(s) "
                         f"{', '.join(chosen) or '(none: choose judge or decision)'} (judge rows need a 'context', "
                         "a list of passages; decision rows a 'reference')")
    return out


def grade_run(answers: Mapping[str, pd.DataFrame], golden: CheckedGoldenSet, *, graders: Sequence[str], state: Any,
              llm: Any, connection_string: str | None, max_tokens: int | None = None, self_judged: bool = False,
              calibration: str | Path | None = None, prices: Mapping[str, Any] | None = None,
              log: Any = lambda _: None) -> tuple[dict[str, pd.DataFrame], dict[str, Any]]:
    """The graded_answers asset without Dagster: (grades frames with their ``yardstick`` and,
    when calibrated, ``calibration_json`` columns; the grading bill, {} without a model).
    `llm` is the judge's client (None unless a chosen grader calls a model), `state` the state
    dir (its answer cache and grade cache). The grounding grader probes the corpus through the
    keyword index of each variant's store (`KeywordCorpusProbe` on `connection_string`). With
    `calibration` (a file) the judge grades it too (`calibrate_graders`); its agreement rides on
    the grader's rows to the metrics (`answer_metric_frames`)."""
    import json

    from eval_pipeline.grading.grounding import KeywordCorpusProbe

    before = llm.usage if llm is not None else None
    probe = KeywordCorpusProbe(connection_string) if "grounding" in graders and connection_string else None
    try:
        frames, yardsticks = grade_variants(answers, golden, graders=graders, cache=AnswerCache(state.answers),
                                            llm=llm, grade_cache=state.answer_grades, max_tokens=max_tokens,
                                            corpus_probe=probe, self_judged=self_judged)
    finally:
        if probe is not None:
            probe.close()
    calibrations: dict[str, dict[str, Any]] = {}
    if calibration and llm is not None:
        calibrations = calibrate_graders(calibration, graders, llm=llm, grade_cache=state.answer_grades,
                                         max_tokens=max_tokens)
        for grader, result in calibrations.items():
            a = result["agreement"]
            log(f"calibration of the {grader} grader on {result['source']}: {result['n']} row(s) graded "
                f"({result['n_not_graded']} not), accuracy {a['accuracy']:.3f}, kappa {a['kappa']:.3f}")
    out = {}
    for key, frame in frames.items():
        frame = frame.assign(yardstick=frame["grader"].map(yardsticks[key]))
        if calibrations:
            encoded = {g: json.dumps(c, sort_keys=True, default=str) for g, c in calibrations.items()}
            frame = frame.assign(calibration_json=frame["grader"].map(encoded).fillna(""))
        out[key] = frame
    usage = grading_usage(before, llm.usage, llm.model, prices) if llm is not None and before is not None else {}
    return out, usage
