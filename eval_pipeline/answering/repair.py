"""One repair: an answer that fails its static checks is asked for once more, with the reasons.

A model that writes an unparseable snippet, imports a package outside the prompt's family or
leaves out a symbol the prompt lists can often fix it when told exactly what failed. The repair
is one more call per failing answer, never a loop, and it is kept only when it is *strictly*
cleaner: fewer failed checks than the original (an equally bad rewrite is not kept, so a repair
never trades one failure for another).

Rules (:func:`repair_answers`, run on the answers frames after generation):

- ``check(prompt, text) -> list of failure reasons`` decides (the static grader's checks,
  `eval_pipeline.grading.run.static_failures`, which the caller passes: answering does not
  import the graders). ``None``: the prompt has no such checks (``repair`` ``not_applicable``);
  ``[]``: it passes (``passed``). An errored answer is not repaired (``no_answer``).
- A failing answer with the LLM generator: the repair call (`LLMGenerator.repair`: the same
  messages, the previous answer fenced as data, the failures one a line). Its record is cached
  like an answer, under a key of the original answer's key, the failures and the repair
  prompt's version (`repair_key`): a re-run pays nothing. ``kept`` when the repair fails strictly
  fewer checks (the frame's row then carries the repaired text's key, citations and length, so
  the graders grade the repair), else ``rejected``. A failed call is ``failed`` (the original is
  kept, the error in ``repair_error``; never cached).
- With the extractive generator every failing answer is ``no_op``: it writes no text of its own
  and cannot be asked again; the log says so once.
- The row's ``prompt_tokens`` and ``completion_tokens`` include the repair call's (kept or not:
  it was paid for), also given apart as ``repair_prompt_tokens`` / ``repair_completion_tokens``;
  ``cached`` stays True only when the repair came from the cache too.

Columns added (`REPAIR_COLUMNS`): ``repair`` (a `REPAIR_STATES` value), ``checks_failed_before``,
``checks_failed_after`` (None when no check applies or no repair was made: after = before),
``repair_prompt_tokens``, ``repair_completion_tokens``, ``repair_error``.
:func:`repair_summary` gives a variant's pass rate before and after, the counts and the cost.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import pandas as pd

from eval_pipeline.answering.cache import AnswerCache
from eval_pipeline.answering.context import cited_documents, context_from_record
from eval_pipeline.answering.extractive import ExtractiveGenerator
from eval_pipeline.answering.llm import REPAIR_PROMPT_VERSION, SYSTEM_PROMPT
from eval_pipeline.answering.prompts import CheckedGoldenSet
from eval_pipeline.common import prices as pricing
from eval_pipeline.common.checks import missing

__all__ = ["REPAIR_COLUMNS", "REPAIR_STATES", "repair_answers", "repair_key", "repair_summary"]

REPAIR_STATES = ("not_applicable", "passed", "no_answer", "kept", "rejected", "failed", "no_op")
REPAIR_COLUMNS = ["repair", "checks_failed_before", "checks_failed_after", "repair_prompt_tokens",
                  "repair_completion_tokens", "repair_error"]
NO_OP_MESSAGE = ("repair: the extractive generator writes no text of its own, so an answer that fails its static "
                 "checks cannot be asked again: repair is a no-op ({n} failing answer(s) left as they are)")

Check = Callable[[Any, str], Sequence[str] | None]


def repair_key(answer_key: str, failures: Sequence[str], generator_identity: Mapping[str, Any]) -> str:
    """The repair's cache key: the original answer (its key names prompt, context and generator),
    the failures it was told, and the generator with the repair prompt's version."""
    payload = json.dumps({"repair_of": answer_key, "failures": list(failures), "generator": generator_identity,
                          "repair_prompt_version": REPAIR_PROMPT_VERSION}, sort_keys=True, ensure_ascii=False,
                         default=str)
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()


def _blank_columns(frame: pd.DataFrame) -> pd.DataFrame:
    return frame.assign(repair=None, checks_failed_before=None, checks_failed_after=None, repair_prompt_tokens=0,
                        repair_completion_tokens=0, repair_error=None)


def repair_answers(frames: Mapping[str, pd.DataFrame], golden: CheckedGoldenSet, *, generator: Any,
                   cache: AnswerCache, check: Check, log: Callable[[str], None] = lambda _: None,
                   ) -> dict[str, pd.DataFrame]:
    """The answers frames with each failing answer repaired once (module docstring), and the
    `REPAIR_COLUMNS`. Frames are not mutated."""
    prompts = golden.golden.by_id() if golden.golden is not None else {}
    extractive = isinstance(generator, ExtractiveGenerator)
    identity = generator.identity()
    plan: dict[tuple[str, int], dict[str, Any]] = {}
    jobs: dict[str, tuple[Any, tuple, str, tuple[str, ...]]] = {}
    out = {v: _blank_columns(frame.copy()) for v, frame in frames.items()}
    for variant, frame in out.items():
        for i, row in enumerate(frame.itertuples(index=False)):
            if not missing(row.error):
                plan[(variant, i)] = {"repair": "no_answer"}
                continue
            record = cache.get(row.answer_key)
            if record is None:
                raise FileNotFoundError(f"answer {row.prompt_id!r} of variant {variant!r} is not in the answer cache "
                                        f"(key {row.answer_key[:12]}…): materialize answers again")
            prompt = prompts[row.prompt_id]
            failures = check(prompt, record["text"])
            if failures is None:
                plan[(variant, i)] = {"repair": "not_applicable"}
            elif not failures:
                plan[(variant, i)] = {"repair": "passed", "checks_failed_before": 0, "checks_failed_after": 0}
            elif extractive:
                plan[(variant, i)] = {"repair": "no_op", "checks_failed_before": len(failures),
                                      "checks_failed_after": len(failures)}
            else:
                key = repair_key(row.answer_key, failures, identity)
                plan[(variant, i)] = {"repair_key": key, "failures": tuple(failures), "prompt": prompt}
                jobs.setdefault(key, (prompt, context_from_record(record), record["text"], tuple(failures)))
    failing = sum(1 for p in plan.values() if p.get("repair") == "no_op" or "repair_key" in p)
    if extractive and failing:
        log(NO_OP_MESSAGE.format(n=failing))
    results = _run_repairs(generator, jobs, cache)
    if not extractive:
        log(f"repair: {failing} failing answer(s), {len(jobs)} distinct, "
            f"{sum(1 for r in results.values() if not isinstance(r, BaseException) and not r['cached'])} asked")
    billed: set[str] = set()
    for (variant, i), p in plan.items():
        frame = out[variant]
        if "repair_key" not in p:
            for column, value in p.items():
                frame.at[frame.index[i], column] = value
            continue
        _apply(frame, frame.index[i], p, results[p["repair_key"]], check, billed)
    return out


def _run_repairs(generator: Any, jobs: Mapping[str, tuple], cache: AnswerCache) -> dict[str, Any]:
    """{repair key: record or the exception}: from the cache, or asked through the client's limit
    and stored the moment it arrives."""
    out: dict[str, Any] = {}
    todo = []
    for key in jobs:
        record = cache.get(key)
        if record is not None:
            out[key] = {**record, "cached": True}
        else:
            todo.append(key)

    def produce(key: str) -> dict[str, Any]:
        prompt, context, text, failures = jobs[key]
        answer = generator.repair(prompt.prompt, context, text, failures)
        record = {"text": answer.text, "context": [[e.number, e.chunk_id, e.doc_id, e.text] for e in context],
                  "system_prompt": SYSTEM_PROMPT, "provider": answer.served.provider,
                  "model_sent": answer.served.model_sent,
                  "model_reported": answer.served.model_reported, "prompt_tokens": answer.prompt_tokens,
                  "completion_tokens": answer.completion_tokens, "generation_ms": answer.seconds * 1000.0,
                  "repair_of_failures": list(failures)}
        cache.put(key, record)
        return {**record, "cached": False}

    llm = getattr(generator, "llm", None)
    mapper = getattr(llm, "map", None)
    results = mapper(produce, todo) if callable(mapper) else [_call(produce, k) for k in todo]
    out.update(zip(todo, results))
    return out


def _call(fn, x):
    try:
        return fn(x)
    except Exception as exc:  # noqa: BLE001 - kept in place, like LLMClient.map
        return exc


def _apply(frame: pd.DataFrame, index: Any, plan: Mapping[str, Any], result: Any, check: Check,
           billed: set[str]) -> None:
    """One row's repair outcome into the frame (module docstring)."""
    before = len(plan["failures"])
    frame.at[index, "checks_failed_before"] = before
    if isinstance(result, BaseException):
        frame.at[index, "repair"] = "failed"
        frame.at[index, "checks_failed_after"] = before
        frame.at[index, "repair_error"] = f"{type(result).__name__}: {result}"[:300]
        return
    key = plan["repair_key"]
    first_user = key not in billed  # a repair shared by two variants is spent once, by its first user
    billed.add(key)
    p, c = int(result["prompt_tokens"]), int(result["completion_tokens"])
    frame.at[index, "repair_prompt_tokens"], frame.at[index, "repair_completion_tokens"] = p, c
    frame.at[index, "prompt_tokens"] = int(frame.at[index, "prompt_tokens"]) + p
    frame.at[index, "completion_tokens"] = int(frame.at[index, "completion_tokens"]) + c
    frame.at[index, "cached"] = bool(frame.at[index, "cached"]) and (bool(result["cached"]) or not first_user)
    after = check(plan["prompt"], result["text"])
    n_after = before if after is None else len(after)
    if n_after < before:
        frame.at[index, "repair"] = "kept"
        frame.at[index, "checks_failed_after"] = n_after
        frame.at[index, "answer_key"] = key
        cited, unknown = cited_documents(result["text"], context_from_record(result))
        frame.at[index, "cited_docs"] = list(cited)
        frame.at[index, "unknown_citations"] = list(unknown)
        frame.at[index, "answer_chars"] = len(result["text"])
        if not missing(frame.at[index, "answer"]):
            frame.at[index, "answer"] = result["text"]
    else:
        frame.at[index, "repair"] = "rejected"
        frame.at[index, "checks_failed_after"] = before


def repair_summary(frame: pd.DataFrame, *, price: Mapping[str, float] | None = None) -> dict[str, Any]:
    """One variant's repair numbers: answers with checks (``n_checked``: passed, failing or
    repaired), the static pass rate before and after repair (over ``n_checked``; NaN when 0),
    repairs asked, kept, rejected, failed and no-ops, the repair tokens and their cost at
    `price` (None without a price; 0.0 when no tokens)."""
    states = frame["repair"].tolist() if "repair" in frame else []
    checked = [s for s in states if s in ("passed", "kept", "rejected", "failed", "no_op")]
    n = len(checked)
    passed_before = sum(s == "passed" for s in states)
    after = frame.loc[frame["repair"].isin(["passed", "kept", "rejected", "failed", "no_op"])] if n else frame.iloc[:0]
    passed_after = int((after["checks_failed_after"] == 0).sum()) if n else 0
    p = int(frame["repair_prompt_tokens"].sum()) if "repair_prompt_tokens" in frame else 0
    c = int(frame["repair_completion_tokens"].sum()) if "repair_completion_tokens" in frame else 0
    cost = 0.0 if p == 0 and c == 0 else (None if price is None else pricing.cost(p, c, price))
    return {"n_checked": n, "n_failing_before": n - passed_before, "pass_rate_before": passed_before / n if n else
            float("nan"), "pass_rate_after": passed_after / n if n else float("nan"),
            "n_repairs_asked": sum(s in ("kept", "rejected", "failed") for s in states),
            "n_kept": states.count("kept"), "n_rejected": states.count("rejected"), "n_failed": states.count("failed"),
            "n_no_op": states.count("no_op"), "repair_prompt_tokens": p, "repair_completion_tokens": c,
            "repair_cost": cost}
