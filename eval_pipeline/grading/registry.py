"""The graders' one registry (issue #24): every answer grader declares its name, what it needs
and how it grades.

- `needs`: "llm" (it calls the LLM resource's model: it spends tokens, runs only when a run
  chooses it, and needs a grade cache), "reference" (it grades against the prompt's reference
  answer), "assertions", "static" (the prompt's declared checks); the last three document
  when it has something to grade, the grader itself says `not_applicable` otherwise.
- How it grades: `grade_one(answer) -> row`, one grade row per answer, with no model call
  (the rows sit with the answer's other per-answer grades); or `grade_all(answers, context) ->
  (rows by variant, yardstick by variant)`, every variant's answers in one call (the LLM
  graders: one client, one concurrency limit, one cache).
- `yardstick()`: what a `grade_one` grader's scores can be compared with (its rules' version).

A row has the columns `eval_pipeline.grading.run.GRADE_COLUMNS` (`grade_row` fills the ones a
grader leaves out); an answer that could not be generated is graded ``no_answer`` (failed, score
0) wherever the grader applies. The built-in graders are registered in
eval_pipeline.grading.run (deterministic, static, judge, decision). A new grader is one file
that defines it and calls ``GRADER_KINDS.register(GraderKind(...))``, plus the line that imports
the file (`BUILTIN_GRADER_MODULES`, or EVAL_PIPELINE_PLUGINS).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from eval_pipeline.common.registry import Names, Registry

NEEDS = ("llm", "reference", "assertions", "static")


@dataclass(frozen=True)
class AnswerToGrade:
    """One variant's answer to one golden prompt, as a grader sees it."""

    variant: str
    prompt: Any  # the golden prompt: id, prompt, assertions, reference, static, form...
    record: Mapping[str, Any] | None  # the answer cache's record (text, context, system prompt); None: no answer
    keep_text: bool  # the user asked to keep answer texts: a reason may quote the answer

    @property
    def text(self) -> str | None:
        return None if self.record is None else self.record["text"]


@dataclass(frozen=True)
class GradingContext:
    """What a `grade_all` grader may use: the LLM client (None unless a chosen grader needs one),
    the grade cache's folder, the reply's token budget, the client's sampling settings, the
    variants (a yardstick for each, even one without answers), and for grounding the corpus
    probe (None: items are looked up in the context only) with each variant's store table."""

    llm: Any
    grade_cache: str | Path | None
    max_tokens: int | None
    sampling: str
    variants: tuple[str, ...] = ()  # every variant graded (some may have no answers)
    corpus: Any = None  # a grounding.CorpusProbe: where the grounding grader looks items up beyond the context
    tables: Mapping[str, str] = field(default_factory=dict)  # variant -> the store table its answers came from


RowsAndYardsticks = tuple[Mapping[str, list[dict[str, Any]]], Mapping[str, str]]


@dataclass(frozen=True)
class GraderKind:
    name: str
    needs: frozenset[str] = frozenset()  # of NEEDS
    grade_one: Callable[[AnswerToGrade], dict[str, Any]] | None = None
    yardstick: Callable[[], str] | None = None  # a grade_one grader's yardstick
    grade_all: Callable[[Sequence[AnswerToGrade], GradingContext], RowsAndYardsticks] | None = None
    description: str = ""

    @property
    def spends_tokens(self) -> bool:
        return "llm" in self.needs


BUILTIN_GRADER_MODULES: tuple[str, ...] = ("eval_pipeline.grading.run",)


GRADER_KINDS: Registry[GraderKind] = Registry("grader", modules=BUILTIN_GRADER_MODULES)


GRADER_NAMES: Sequence[str] = Names(GRADER_KINDS)  # every registered grader, in registration order


TOKEN_SPENDING_NAMES: Sequence[str] = Names(GRADER_KINDS, lambda kind: kind.spends_tokens)
