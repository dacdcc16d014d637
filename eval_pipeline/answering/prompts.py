"""Which golden prompt set a run answers, checked against the corpus before any model is called.

Sources (the golden_prompts asset's `source`):

- `file`: a golden prompt set file (`eval_pipeline.questions.golden`), loaded strictly: a bad
  set is an error naming the file, the line and the field; a set written for another corpus,
  or a gold id not in this corpus, is refused.
- `question_set`: the run's retrieval question set, each question with a `gist` becoming a
  prompt whose reference is the gist (`golden_from_question_set`). A limited question set
  gives a limited golden set.
- `auto` (the default): the demo set when the corpus is the one it was written for (its
  header's corpus signature), else the question set when any question has a gist, else none.
- `none`: answer quality is not evaluated. The report says so; nothing is silently skipped.

A run on part of a set (`limit`, or a limited question set) is *limited*: its results carry
the limit in their set name and never serve as a baseline.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from eval_pipeline.questions.golden import (
    GoldenPromptError,
    GoldenPromptSet,
    golden_from_question_set,
    load_golden_prompts,
)
from eval_pipeline.questions.sets import Question, QuestionSet

DEMO_GOLDEN = Path(__file__).resolve().parents[1] / "demo_data" / "golden_prompts.jsonl"
SOURCES = ("auto", "file", "question_set", "none")
QUESTION_SET_ID = "local.questions"  # the set id of a question set used as a golden set


@dataclass(frozen=True)
class CheckedGoldenSet:
    """The prompts a run answers (`golden` None: answer quality is not evaluated, `reason` says
    why), checked against the corpus `corpus_signature`."""

    golden: GoldenPromptSet | None
    corpus_signature: str
    reason: str
    limited_from: int | None = None  # set when this run answers part of the set: the whole's size (prompts,
    # or questions when the prompts came from a limited question set)

    @property
    def prompts(self) -> tuple:
        return self.golden.prompts if self.golden is not None else ()

    @property
    def limited(self) -> bool:
        return self.limited_from is not None

    @property
    def set_name(self) -> str:
        """The set as results name it: `team.set`, with the limit when the run is limited."""
        if self.golden is None:
            return ""
        return self.golden.set_id + (f"[limited: {len(self.prompts)} prompts]" if self.limited else "")

    def as_question_set(self) -> QuestionSet:
        """The prompts as a question set, so that each variant retrieves them exactly as it
        ranks the retrieval questions (same engines, caches and result columns)."""
        if self.golden is None:
            raise ValueError("no golden prompt set: nothing to retrieve")
        questions = tuple(Question(qid=p.id, question=p.prompt, gold=tuple(p.gold), form=p.form)
                          for p in self.golden.prompts)
        return QuestionSet(questions=questions, header={"corpus_signature": self.corpus_signature},
                           path=f"golden:{self.golden.set_id}", limited_from=self.limited_from)


def _demo_fits(corpus_signature: str) -> bool:
    with DEMO_GOLDEN.open(encoding="utf-8") as f:
        header = json.loads(f.readline())
    return header.get("corpus_signature") == corpus_signature


def resolve_golden(source: str, path: str | None, *, corpus_signature: str, doc_ids: list[str],
                   question_set: Any = None, include_abstentions: bool = False,
                   limit: int | None = None) -> CheckedGoldenSet:
    """The golden set `source` names (see the module docstring), checked against the corpus.
    `question_set` is needed only by the `question_set` and `auto` sources."""
    if source not in SOURCES:
        raise ValueError(f"golden_prompts.source must be one of {', '.join(SOURCES)}, got {source!r}")
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise ValueError(f"golden_prompts.limit must be a positive integer, got {limit!r}")
    if source == "file" and not path:
        raise ValueError("golden_prompts.path is required when golden_prompts.source is 'file'")
    if source != "file" and path:
        raise ValueError(f"golden_prompts.path is only read with source 'file' (source is {source!r})")
    if source == "none":
        return CheckedGoldenSet(None, corpus_signature, "golden_prompts.source is 'none'")
    if source == "auto":
        if _demo_fits(corpus_signature):
            source, path = "file", str(DEMO_GOLDEN)
        elif question_set is not None and any(q.answerable and q.gist.strip() for q in question_set.questions):
            source = "question_set"
        else:
            return CheckedGoldenSet(None, corpus_signature, "no golden prompt set for this corpus (source 'auto': "
                                    "not the demo corpus, and no question has a gist to serve as a reference)")
    if source == "file":
        if path is None:  # refused above
            raise ValueError("golden_prompts.path is required when golden_prompts.source is 'file'")
        golden = load_golden_prompts(path, corpus_signature=corpus_signature, doc_ids=doc_ids)
        limited_from = None
    else:
        if question_set is None:
            raise ValueError("golden_prompts.source 'question_set' needs the run's question set")
        golden = golden_from_question_set(question_set, set_id=QUESTION_SET_ID, include_abstentions=include_abstentions)
        limited_from = question_set.limited_from  # prompts from part of the questions are part of a set
    if limit is not None and limit < len(golden.prompts):
        limited_from = len(golden.prompts) if limited_from is None else limited_from
        golden = GoldenPromptSet(golden.set_id, golden.prompts[:limit], golden.path, golden.header)
    where = golden.path if source == "file" else f"the question set {getattr(question_set, 'path', '')}"
    return CheckedGoldenSet(golden, corpus_signature, f"{golden.set_id} from {where}", limited_from)




def preflight_golden(source: str, path: str | None, *, corpus_signature: str, doc_ids: list[str],
                     limit: int | None = None) -> None:
    """What can be checked of the golden set before anything is embedded: the settings, and a
    `file` set loaded strictly against the corpus (an error names the file, line and field).
    The `question_set` source (and `auto` off the demo corpus) is checked when golden_prompts
    runs, once the question set is built."""
    if source == "question_set" and not path:
        return  # needs the question set: checked when golden_prompts runs
    resolve_golden(source, path, corpus_signature=corpus_signature, doc_ids=doc_ids, limit=limit)


__all__ = ["CheckedGoldenSet", "DEMO_GOLDEN", "GoldenPromptError", "QUESTION_SET_ID", "SOURCES", "preflight_golden",
           "resolve_golden"]
