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

import hashlib
import json
import sys
import unicodedata
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd
import regex

from eval_pipeline.answering.cache import AnswerCache
from eval_pipeline.answering.context import context_from_record
from eval_pipeline.answering.prompts import CheckedGoldenSet
from eval_pipeline.common import versions
from eval_pipeline.common.checks import missing
from eval_pipeline.grading import presentation
from eval_pipeline.grading.agreement import calibrate_judge, load_calibration
from eval_pipeline.grading.assertions import (
    DETERMINISTIC_VERSION,
    STATIC_VERSION,
    grade_deterministic,
    grade_static,
)
from eval_pipeline.grading.grounding import GROUNDING_VERSION, KeywordCorpusProbe, ground_answer
from eval_pipeline.grading.independence import SELF_JUDGED_LABEL
from eval_pipeline.grading.judges import (
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
    pattern engine's wrapper (common/patterns.py) and the `regex` package's version and code (a
    `regex` assertion's match), the golden set's limits (questions/golden.py), and the Python
    that parses a static check's code (`ast`) and normalizes text (`unicodedata`). How the
    grades reach the numbers (`grading.summary`: which grades feed `answer_metrics`, the errored
    count) is in; how they are shown (`grading.presentation`) is left out on purpose: editing a
    metadata line must not make every answer gate not_compared."""
    code = versions.source_digest("eval_pipeline/grading/assertions.py", "eval_pipeline/grading/answer_metrics.py",
                                  "eval_pipeline/grading/run.py", "eval_pipeline/grading/summary.py",
                                  "eval_pipeline/common/patterns.py", "eval_pipeline/questions/golden.py")
    runtime = f"regex {getattr(regex, '__version__', 'unknown')} {versions.package_code_digest(['regex'])}; " \
              f"python {sys.version_info[:3]}; unicode {unicodedata.unidata_version}"
    return hashlib.sha256(f"{code};{runtime}".encode()).hexdigest()[:12]


def _with_sampling(yardstick: str, sampling: str) -> str:
    """A single-grader yardstick with the grading model's sampling settings (another
    temperature or token budget grades differently: another yardstick) and `grading_code`
    (this module's routing of a grade into a row's `passed` and `score`, and how the rows become
    the numbers: an edit of either passes other answers under the same model's grades); the bare
    `judge` / `decision` and `…:failed` stay as they are (never compared anyway)."""
    return f"{yardstick}@{sampling}+{grading_code()}" if yardstick.count(":") >= 3 else yardstick


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
            out.append(_row(variant, prompt.id, grader, "graded", passed=g.passed,
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
    # grounding.py finds the items; this module's rule passes an answer (and routes it), with the
    # Python and Unicode its word splitting reads: grading_code holds those
    code = versions.source_digest("eval_pipeline/grading/grounding.py")
    yardstick = f"grounding:v{GROUNDING_VERSION}+{code}.{grading_code()}+{probe}"
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


def calibrate_graders(path: str | Path, graders: Sequence[str], *, llm: Any, grade_cache: str | Path,
                      max_tokens: int | None = None) -> dict[str, dict[str, Any]]:
    """{grader: `agreement.calibrate_judge` result, with ``source`` the file} for each chosen LLM
    grader the calibration file has rows for: ``decision`` the rows with a ``reference``,
    ``judge`` those with a ``context`` (a row's ``grader`` field, when given, names its grader).
    A file with no row for any chosen LLM grader is refused (a ValueError naming it): a
    calibration that calibrates nothing would show no agreement and say nothing."""
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
    usage = (presentation.grading_usage(before, llm.usage, llm.model, prices)
             if llm is not None and before is not None else {})
    return out, usage
