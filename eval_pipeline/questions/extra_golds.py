"""Extra golds: relevance labels added to a question set after a person reviewed them.

The question set's labels are incomplete: a document no one judged may answer a question,
and every metric then counts it as a miss. `eval_pipeline.validity.holes` has an LLM grade
such unjudged documents and writes the likely missing golds to a *review file*. A person
reads it and flips ``accept`` to true on the rows they agree with; this module reads the
file back and adds the accepted rows to the questions' labels.

It lives in `questions` (not `judging`) because the question set is what loads it: the
labels a run scores against are the file's labels plus the accepted extras. The review-file
format is defined here, and the writer in `judging.holes` uses these definitions, so there
is one format and one reader.

Review file: JSONL, one object per line, blank lines ignored::

    {"question_id": "q1", "question": "...", "doc_id": "d7", "passage": "...", "grade": 2,
     "reason": "...", "judged_by": "gpt-x@https://...", "prompt_version": "hole-grade-1+ab12cd34",
     "accept": false}

Required: ``question_id``, ``doc_id``, ``grade`` (integer 0..3; an accepted row needs 1..3,
a grade 0 is "not relevant" and cannot be a gold), ``judged_by`` (the model, or the person
who judged) and ``accept`` (true or false, nothing else: "yes" would be a guess). Optional:
``prompt_version`` (a string, or null for a person's judgement), ``accepted_by`` (who
accepted), ``question``, ``passage``, ``reason`` (shown to the reviewer, not labels). Unknown
fields are ignored, so a reviewer may add notes. Every error names the file, the line and
the field.

Provenance: `Question` has no field for where a label came from, so the provenance of each
extra gold (who or which model judged, the prompt version, who accepted) stays in its
`ExtraGold` record; `extra_golds_fingerprint` identifies the imported set with that
provenance. The labels fingerprint (`eval_pipeline.history.runs.labels_fingerprint`)
needs no change: it hashes every question's gold ids and graded relevance, so applying
extra golds changes it exactly when the labels change, and leaves it alone when an import
adds nothing new (runs scored against the same labels stay comparable, whoever judged).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from eval_pipeline.common.checks import is_integer
from eval_pipeline.questions.sets import (
    Question,
    QuestionSetError,
    check_text,
    json_object_line,
    question_list,
    read_jsonl,
)

__all__ = [
    "MAX_GRADE",
    "MIN_GRADE",
    "OPTIONAL_FIELDS",
    "REQUIRED_FIELDS",
    "REVIEW_FIELDS",
    "ExtraGold",
    "ExtraGoldsError",
    "apply_extra_golds",
    "extra_golds_fingerprint",
    "load_extra_golds",
    "read_review_rows",
]

MIN_GRADE, MAX_GRADE = 0, 3  # the 0-3 relevance scale of the review file

# The fields the review-file writer emits, in this order.
REVIEW_FIELDS = ("question_id", "question", "doc_id", "passage", "grade", "reason", "judged_by",
                 "prompt_version", "accept")
REQUIRED_FIELDS = ("question_id", "doc_id", "grade", "judged_by", "accept")
OPTIONAL_FIELDS = ("question", "passage", "reason", "prompt_version", "accepted_by")


class ExtraGoldsError(QuestionSetError):
    """A review file or an extra gold that cannot be used; the message names the file, the
    line and the field (a QuestionSetError, so the callers that handle a bad question set
    handle this too)."""


@dataclass(frozen=True)
class ExtraGold:
    """One accepted judgement: `doc_id` answers `question_id` with `grade` (1..3).

    `judged_by` is the model (as ``model@endpoint``) or the person who graded it,
    `prompt_version` the grading prompt's version (None for a person), `accepted_by` who
    accepted it, if the file says. `source` ("file:line") is for messages only: it is not
    part of the fingerprint, so moving the file changes nothing."""

    question_id: str
    doc_id: str
    grade: int
    judged_by: str
    prompt_version: str | None = None
    accepted: bool = True
    accepted_by: str | None = None
    reason: str = ""
    source: str = ""

    def provenance(self) -> dict[str, Any]:
        """The record that identifies this gold and where it came from (what the fingerprint
        hashes, and what a run should store beside its results)."""
        return {"question_id": self.question_id, "doc_id": self.doc_id, "grade": self.grade,
                "judged_by": self.judged_by, "prompt_version": self.prompt_version,
                "accepted": self.accepted, "accepted_by": self.accepted_by}


# --- reading ---------------------------------------------------------------------------------


def read_review_rows(
    path: str | Path,
    *,
    questions: Iterable[Question] | None = None,
    doc_ids: Iterable[str] | None = None,
) -> list[tuple[int, dict[str, Any]]]:
    """Every row of a review file, accepted or not, as (line number, validated row).

    Strict, because what an accepted row says becomes a label: bad JSON, a row that is not an
    object, a missing or mistyped field, a grade outside 0..3 (1..3 when accepted), an
    ``accept`` that is not true/false, the same (question, document) on two lines, and, when
    `questions` / `doc_ids` are given, an unknown question id or document id are errors
    naming the file, the line and the field. A missing file is an error too: a configured
    review file that is not there should not silently import nothing.
    """
    path = Path(path)
    lines = read_jsonl(path, "review file", ExtraGoldsError, bom=True)  # an editor may have added a BOM
    known_questions = None if questions is None else {q.qid: q.question for q in question_list(questions)}
    known_docs = None if doc_ids is None else _id_set(doc_ids, "doc_ids")
    rows: list[tuple[int, dict[str, Any]]] = []
    first_line: dict[tuple[str, str], int] = {}
    for lineno, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        row = _row_from(path, lineno, line)
        loc = f"{path}:{lineno}"
        if known_questions is not None and row["question_id"] not in known_questions:
            raise ExtraGoldsError(f"{loc}: field 'question_id': {row['question_id']!r} is not a question of the "
                                  "question set")
        if (known_questions is not None and row.get("accept") and row.get("question")
                and row["question"] != known_questions[row["question_id"]]):
            # The document was judged for the question as worded then: an edited or regenerated question
            # with the same id is another question, and the gold must not land on it.
            raise ExtraGoldsError(f"{loc}: field 'question': the row was judged for {row['question']!r}, but question "
                                  f"{row['question_id']!r} now reads {known_questions[row['question_id']]!r}; grade it "
                                  "again (findings: grade_holes) or remove the row")
        if known_docs is not None and row["doc_id"] not in known_docs:
            raise ExtraGoldsError(f"{loc}: field 'doc_id': {row['doc_id']!r} is not a document of the corpus")
        pair = (row["question_id"], row["doc_id"])
        if pair in first_line:
            raise ExtraGoldsError(f"{loc}: question {pair[0]!r} and document {pair[1]!r} are already on line "
                                  f"{first_line[pair]}; keep one row per (question_id, doc_id)")
        first_line[pair] = lineno
        rows.append((lineno, row))
    return rows


def load_extra_golds(
    path: str | Path,
    *,
    questions: Iterable[Question] | None = None,
    doc_ids: Iterable[str] | None = None,
) -> list[ExtraGold]:
    """The accepted rows of a reviewed file, in file order (see `read_review_rows` for the
    checks; every row is checked, not only the accepted ones, so a typo in a row the
    reviewer meant to accept is not skipped as "not accepted")."""
    path = Path(path)
    return [
        ExtraGold(question_id=row["question_id"], doc_id=row["doc_id"], grade=row["grade"],
                  judged_by=row["judged_by"], prompt_version=row["prompt_version"], accepted=True,
                  accepted_by=row["accepted_by"], reason=row["reason"], source=f"{path}:{lineno}")
        for lineno, row in read_review_rows(path, questions=questions, doc_ids=doc_ids)
        if row["accept"]
    ]


def _row_from(path: Path, lineno: int, line: str) -> dict[str, Any]:
    loc = f"{path}:{lineno}"
    obj = json_object_line(path, lineno, line, ExtraGoldsError)
    missing = [name for name in REQUIRED_FIELDS if name not in obj]
    if missing:
        raise ExtraGoldsError(f"{loc}: missing field(s) {', '.join(repr(m) for m in missing)} "
                              f"(required: {', '.join(REQUIRED_FIELDS)})")
    for name in ("question_id", "doc_id", "judged_by"):
        value = obj[name]
        if not isinstance(value, str) or not value.strip():
            raise ExtraGoldsError(f"{loc}: field {name!r} must be a non-empty string, got {value!r}")
    accept = obj["accept"]
    if not isinstance(accept, bool):
        raise ExtraGoldsError(f"{loc}: field 'accept' must be true or false, got {accept!r}")
    grade = obj["grade"]
    low = 1 if accept else MIN_GRADE
    if not is_integer(grade) or not low <= grade <= MAX_GRADE:
        why = " (an accepted row is a gold: grade 0 means not relevant)" if accept and grade == 0 else ""
        raise ExtraGoldsError(f"{loc}: field 'grade' must be an integer in {low}..{MAX_GRADE}, got {grade!r}{why}")
    for name in ("prompt_version", "accepted_by", "question", "passage", "reason"):
        value = obj.get(name)
        if value is not None and not isinstance(value, str):
            raise ExtraGoldsError(f"{loc}: field {name!r} must be a string or null, got {type(value).__name__}")
    try:
        for name in ("question_id", "doc_id", "judged_by", "prompt_version", "accepted_by"):
            check_text(loc, name, obj.get(name))
    except QuestionSetError as exc:
        raise ExtraGoldsError(str(exc)) from None
    row = {name: obj.get(name) for name in (*REVIEW_FIELDS, "accepted_by")}
    row["grade"] = int(grade)
    row["reason"] = row["reason"] or ""
    return row


# --- applying --------------------------------------------------------------------------------


def apply_extra_golds(
    questions: Iterable[Question],
    extra: Iterable[ExtraGold],
    *,
    graded: bool = False,
) -> tuple[Question, ...]:
    """New questions (same order) with the extra golds added to their labels; the inputs are
    not mutated (a Question is frozen; new ones are made with `dataclasses.replace`).

    Original judgements always win: an extra gold for a document that is already a gold of
    the question changes nothing (so importing the same file twice is harmless); one for a
    document the question set judges not relevant (grade <= 0 in its graded relevance) is an
    error, since a person must settle that disagreement in the question set, not here.
    An extra gold for an unknown question id, or two for the same (question, document) with
    different grades, is an error.

    Grades: with ``graded=False`` (the default) an extra gold counts like an original gold:
    grade 1 on a binary question (only `gold` grows), the lowest relevant grade 1 on a graded
    one. Mixing scales would be worse: the 0-3 grade of an LLM is not the scale of a binary
    set, where it would weigh a found document three times an original gold in nDCG. With
    ``graded=True`` the 0-3 grade is written into the graded relevance (a binary question's
    own golds get grade 1), for a question set graded on the same 0-3 scale.

    An accepted gold may make an abstention question answerable: a person said a document
    answers it.
    """
    qs = question_list(questions)
    by_qid = {q.qid: q for q in qs}
    wanted: dict[str, dict[str, ExtraGold]] = {}
    for gold in extra:
        if not isinstance(gold, ExtraGold):
            raise ExtraGoldsError(f"extra golds must be ExtraGold records, got {type(gold).__name__}: {gold!r:.80}")
        where = f"{gold.source}: " if gold.source else ""
        if not gold.accepted:
            raise ExtraGoldsError(f"{where}question {gold.question_id!r}, document {gold.doc_id!r}: not accepted; "
                                  "only accepted judgements are golds")
        if not is_integer(gold.grade) or not 1 <= gold.grade <= MAX_GRADE:
            raise ExtraGoldsError(f"{where}question {gold.question_id!r}, document {gold.doc_id!r}: grade "
                                  f"{gold.grade!r} is not a relevant grade (1..{MAX_GRADE})")
        if gold.question_id not in by_qid:
            raise ExtraGoldsError(f"{where}question {gold.question_id!r} is not in the question set")
        same = wanted.setdefault(gold.question_id, {})
        previous = same.get(gold.doc_id)
        if previous is not None and previous.grade != gold.grade:
            raise ExtraGoldsError(f"{where}question {gold.question_id!r}, document {gold.doc_id!r}: grade "
                                  f"{gold.grade} conflicts with grade {previous.grade} "
                                  f"({previous.source or 'an earlier record'})")
        same.setdefault(gold.doc_id, gold)
    out = []
    for q in qs:
        additions = wanted.get(q.qid)
        out.append(_with_golds(q, additions.values(), graded) if additions else q)
    return tuple(out)


def _with_golds(q: Question, additions: Iterable[ExtraGold], graded: bool) -> Question:
    original = q.qrels()
    new: dict[str, int] = {}
    for gold in sorted(additions, key=lambda g: g.doc_id):
        judged = original.get(gold.doc_id)
        if judged is None:
            new[gold.doc_id] = gold.grade if graded else 1
        elif judged <= 0:
            where = f"{gold.source}: " if gold.source else ""
            raise ExtraGoldsError(
                f"{where}question {q.qid!r}, document {gold.doc_id!r}: the question set judges it not relevant "
                f"(grade {judged}); an extra gold never overwrites an original judgement")
        # else: already a gold; the original grade stays
    if not new:
        return q
    gold_ids = (*q.gold, *new)
    if q.relevance or graded:
        relevance = dict(q.relevance) if q.relevance else {d: 1 for d in q.gold}
        relevance.update(new)
        return replace(q, gold=gold_ids, relevance=relevance)
    return replace(q, gold=gold_ids)


# --- fingerprint -----------------------------------------------------------------------------


def extra_golds_fingerprint(extra: Iterable[ExtraGold]) -> str:
    """Order-independent fingerprint of the imported golds *with their provenance* (question,
    document, grade, who or which model judged, prompt version, who accepted); 16 hex
    characters like the other fingerprints. Not the reviewer-facing text (passage, reason)
    and not the file's location.

    It records what was imported; it is not a labels fingerprint. Two imports with the same
    labels from different judges give different values here but the same
    `labels_fingerprint`, since they score every ranking alike. The empty import has a fixed
    value of its own."""
    lines = sorted(json.dumps(g.provenance(), sort_keys=True, ensure_ascii=False) for g in extra)
    return hashlib.sha256("\n".join(lines).encode("utf-8")).hexdigest()[:16]


# --- helpers ---------------------------------------------------------------------------------


def _id_set(ids: Iterable[str], name: str) -> set[str]:
    if isinstance(ids, (str, bytes)):
        raise ValueError(f"{name} must be an iterable of ids, not a string")
    return set(ids)
