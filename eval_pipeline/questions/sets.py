"""Question sets: a JSONL file whose first line is a header naming the corpus it was written for.

File format::

    {"kind": "eval-pipeline/question-set", "version": 1, "corpus_signature": "...", "fingerprint": "...", ...}
    {"qid": "q0001", "question": "...", "gold": ["doc-a"], "form": "MATCH", "hard_class": null, "gist": "..."}
    ...

`gold` lists the documents that answer the question (any of them counts as a hit); an empty
list declares an abstention question that nothing in the corpus answers.  An optional
`relevance` object gives graded judgements (doc id -> grade) for nDCG; without it every gold
document has grade 1.

A header whose corpus signature differs from the corpus being evaluated is an error: the
labels were written for other documents, and scores against them would mean nothing.  So is
a header without a fingerprint (hand edits could not be told from the written set: stamp the
file with `python -m eval_pipeline.questions.sets stamp`), text Postgres cannot store (a NUL
character, or a lone surrogate such as "\ud800", which JSON allows but UTF-8 cannot encode),
and a set with no answerable question (every metric would be a mean over nothing).

`preflight_question_set` loads and checks a configured set (file or BEIR) before anything
is embedded.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import sys
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from eval_pipeline.common.atomic import atomic_write_text
from eval_pipeline.common.checks import is_integer
from eval_pipeline.corpus.sources import DEMO_DATA_DIR, invisible_characters, invisible_note, load_corpus

HEADER_KIND = "eval-pipeline/question-set"
FORMAT_VERSION = 1
FORMS = ("MATCH", "GAP")
_logger = logging.getLogger(__name__)
# The longest question (or golden prompt) a set may hold. Every engine searches with the question's
# text; Postgres refuses a tsquery this long only after ingest and ranking (ProgramLimitExceeded), so
# the loaders refuse it first. A question is a sentence or a paragraph, not a document.
MAX_QUESTION_CHARS = 10_000


class QuestionSetError(ValueError):
    """A question set that cannot be used; the message names the file and line."""


@dataclass(frozen=True)
class Question:
    qid: str
    question: str
    gold: tuple[str, ...]
    form: str | None = None
    hard_class: str | None = None
    gist: str = ""
    relevance: Mapping[str, int] = field(default_factory=dict, hash=False, compare=False)

    @property
    def answerable(self) -> bool:
        return bool(self.gold)

    def qrels(self) -> dict[str, int]:
        """Graded judgements: the explicit ones, else grade 1 for each gold document."""
        if self.relevance:
            return dict(self.relevance)
        return {doc_id: 1 for doc_id in self.gold}

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "qid": self.qid,
            "question": self.question,
            "gold": list(self.gold),
            "form": self.form,
            "hard_class": self.hard_class,
            "gist": self.gist,
        }
        if self.relevance:
            out["relevance"] = dict(self.relevance)
        return out


@dataclass(frozen=True)
class QuestionSet:
    questions: tuple[Question, ...]
    header: Mapping[str, Any]
    path: str
    limited_from: int | None = None  # the full set's size when this is a limited run
    # Fusion tuning's part of the set (eval_pipeline.ranking.fusion_tuning.split_question_set):
    # tuned on, never scored; `questions` is then the held-out rest, which every variant is scored on.
    tuning: tuple[Question, ...] = ()
    split: Mapping[str, Any] | None = None  # {"fraction", "seed", "n_tuning", "n_held_out"}
    # What the loader noticed but did not refuse, one line each naming the file and line: a question
    # holding invisible characters (zero-width, bidi controls) that keyword search trips on.
    warnings: tuple[str, ...] = field(default=(), compare=False)

    @property
    def limited(self) -> bool:
        return self.limited_from is not None

    @property
    def corpus_signature(self) -> str | None:
        """The corpus the set was written and checked for (its header says so)."""
        value = self.header.get("corpus_signature")
        return value if isinstance(value, str) else None

    def limit(self, n: int) -> "QuestionSet":
        """The first n questions in file order (a quick run). Its results are written under a
        suffixed name and never serve as a baseline; n >= the set's size is no limit."""
        if not is_integer(n) or n < 1:
            raise QuestionSetError(f"question_set.limit must be a positive integer, got {n!r}")
        if n >= len(self.questions):
            return self
        if not any(q.answerable for q in self.questions[:n]):
            raise QuestionSetError(
                f"{self.path}: the first {n} questions (question_set.limit) have no answerable question, so every "
                f"metric would be a mean over nothing; raise the limit"
            )
        return QuestionSet(questions=self.questions[:n], header=self.header, path=self.path,
                           limited_from=len(self.questions), warnings=self.warnings)

    @property
    def fingerprint(self) -> str:
        return question_set_fingerprint(self.questions)

    @property
    def tuning_fingerprint(self) -> str | None:
        """The tuning part's fingerprint (None without fusion tuning): a tuned variant's results
        depend on it as well as on the questions it is scored on."""
        return question_set_fingerprint(self.tuning) if self.tuning else None

    def counts(self) -> dict[str, int]:
        c = {
            "questions": len(self.questions),
            "answerable": sum(q.answerable for q in self.questions),
            "abstention": sum(not q.answerable for q in self.questions),
        }
        for form in FORMS:
            c[f"form_{form}"] = sum(q.form == form for q in self.questions)
        return c


def question_list(questions: Iterable[Question]) -> list[Question]:
    """The questions of a QuestionSet or an iterable of Question objects, as a list; a string,
    a single Question or another object in the list is a ValueError."""
    if isinstance(questions, (str, bytes, Question)):
        raise ValueError(f"questions must be an iterable of Question objects, got {questions!r:.80}")
    qs = list(getattr(questions, "questions", questions))  # a QuestionSet, or its questions
    for q in qs:
        if not isinstance(q, Question):
            raise ValueError(f"questions must contain Question objects, got {type(q).__name__}")
    return qs


def question_set_fingerprint(questions: Iterable[Question]) -> str:
    """Order-independent fingerprint of the questions and their labels."""
    lines = sorted(json.dumps(q.to_json(), sort_keys=True, ensure_ascii=False) for q in questions)
    return hashlib.sha256("\n".join(lines).encode("utf-8")).hexdigest()[:16]


def load_question_set(
    path: str | Path,
    *,
    corpus_signature: str,
    doc_ids: Iterable[str],
    require_fingerprint: bool = True,
) -> QuestionSet:
    """Read and validate a question set against the corpus it will be scored on.

    A fingerprint in the header must match the questions.  With `require_fingerprint` (as
    `preflight_question_set` loads every configured set) a header without one, or with a null
    one, is an error saying how to stamp the file.
    """
    path = Path(path)
    lines = read_jsonl(path, "question set")
    if not lines:
        raise QuestionSetError(f"{path}: empty file (expected a header line)")
    header = json_object_line(path, 1, lines[0])
    if header.get("kind") != HEADER_KIND:
        raise QuestionSetError(
            f"{path}:1: missing header: expected an object with kind={HEADER_KIND!r}; for a hand-labelled set, "
            f"write one with: python -m eval_pipeline.questions.sets stamp {path} --corpus-kind KIND --corpus PATH"
        )
    if header.get("version") != FORMAT_VERSION:
        raise QuestionSetError(f"{path}:1: unsupported version {header.get('version')!r} (expected {FORMAT_VERSION})")
    written_for = header.get("corpus_signature")
    if written_for != corpus_signature:
        raise QuestionSetError(
            f"{path}:1: corpus signature mismatch: the question set was written for corpus {written_for!r}, "
            f"but the corpus being evaluated is {corpus_signature!r}; regenerate or relabel the questions"
        )
    known = set(doc_ids)
    questions: list[Question] = []
    seen: dict[str, int] = {}
    unknown: list[str] = []
    warnings: list[str] = []
    for lineno, line in enumerate(lines[1:], start=2):
        if not line.strip():
            continue
        q = _question_from(path, lineno, json_object_line(path, lineno, line))
        if q.qid in seen:
            raise QuestionSetError(f"{path}:{lineno}: duplicate qid {q.qid!r} (first at line {seen[q.qid]})")
        seen[q.qid] = lineno
        _warn_invisible(warnings, f"{path}:{lineno}: question {q.qid!r}", q.question)
        unknown.extend(f"{d!r} (line {lineno})" for d in q.gold if d not in known)
        questions.append(q)
    if unknown:
        shown = ", ".join(unknown[:20]) + (f" and {len(unknown) - 20} more" if len(unknown) > 20 else "")
        raise QuestionSetError(f"{path}: gold document ids not in the corpus: {shown}")
    if not questions:
        raise QuestionSetError(f"{path}: the question set has a header but no questions")
    _require_answerable(path, questions)
    qs = QuestionSet(questions=tuple(questions), header=header, path=str(path), warnings=tuple(warnings))
    if header.get("fingerprint") is None and require_fingerprint:
        raise QuestionSetError(
            f"{path}:1: the header has no fingerprint (a hash of the questions and labels, so that a hand edit "
            f"is caught); check the questions, then write one with: "
            f"python -m eval_pipeline.questions.sets stamp {path} "
            f"--corpus-kind KIND --corpus PATH"
        )
    if header.get("fingerprint") not in (None, qs.fingerprint):
        raise QuestionSetError(
            f"{path}:1: fingerprint mismatch: header says {header['fingerprint']!r}, the questions hash to "
            f"{qs.fingerprint!r}; the file was edited after it was written"
        )
    return qs


def write_question_set(
    path: str | Path,
    questions: Iterable[Question],
    *,
    corpus_signature: str,
    extra_header: Mapping[str, Any] | None = None,
) -> str:
    """Write a question set atomically (temp file + rename); returns its fingerprint."""
    qs = list(questions)
    for q in qs:
        _check_question_text(f"{path}: question {ascii(q.qid)}", q)
    fingerprint = question_set_fingerprint(qs)
    header = {
        "kind": HEADER_KIND,
        "version": FORMAT_VERSION,
        "corpus_signature": corpus_signature,
        "fingerprint": fingerprint,
        **(extra_header or {}),
    }
    body = [json.dumps(header, ensure_ascii=False)] + [json.dumps(q.to_json(), ensure_ascii=False) for q in qs]
    atomic_write_text(Path(path), "\n".join(body) + "\n")
    return fingerprint


def _warn_invisible(warnings: list[str], where: str, text: str) -> None:
    """Append (and log) a warning naming `where` if `text` holds invisible characters."""
    counts = invisible_characters(text)
    if counts:
        warnings.append(f"{where}: {invisible_note(counts)}")
        _logger.warning("%s", warnings[-1])


def _unstorable(value: str) -> str | None:
    """Why Postgres cannot store `value` in a text column (None if it can)."""
    for i, ch in enumerate(value):
        if ch == "\x00":
            return f"a NUL character (\\u0000) at position {i}, which Postgres cannot store in text"
        if "\ud800" <= ch <= "\udfff":
            return (f"a lone surrogate ({ascii(ch)[1:-1]}) at position {i}: JSON allows it, but UTF-8 cannot "
                    f"encode it and Postgres cannot store it")
    return None


def check_text(loc: str, field: str, value: Any) -> None:
    """A QuestionSetError naming `loc` and `field` if the string `value` cannot be stored."""
    if isinstance(value, str):
        why = _unstorable(value)
        if why:
            raise QuestionSetError(f"{loc}: field {field!r} contains {why}")


def check_length(loc: str, field: str, value: Any) -> None:
    """A QuestionSetError naming `loc` and `field` if the string `value`, a text the engines search
    with, is longer than MAX_QUESTION_CHARS."""
    if isinstance(value, str) and len(value) > MAX_QUESTION_CHARS:
        raise QuestionSetError(f"{loc}: field {field!r} is {len(value):,} characters, more than MAX_QUESTION_CHARS "
                               f"({MAX_QUESTION_CHARS:,}); keyword search cannot take a query this long")


def _check_question_text(loc: str, q: Question) -> None:
    check_text(loc, "qid", q.qid)
    check_text(loc, "question", q.question)
    check_length(loc, "question", q.question)  # a written set always loads
    for doc_id in q.gold:
        check_text(loc, "gold", doc_id)
    check_text(loc, "hard_class", q.hard_class)
    check_text(loc, "gist", q.gist)
    for doc_id in q.relevance:
        check_text(loc, "relevance", doc_id)


def _require_answerable(where: str | Path, questions: Iterable[Question]) -> None:
    if not any(q.answerable for q in questions):
        raise QuestionSetError(
            f"{where}: no answerable question (every 'gold' list is empty), so every metric would be a mean "
            f"over nothing; label at least one question with the documents that answer it"
        )


def jsonl_lines(text: str) -> list[str]:
    """The lines of a JSONL text, split on "\\n" only (a trailing "\\r" stripped), as JSON Lines
    defines them: U+2028, U+2029, U+0085 and the other characters str.splitlines breaks on are
    text inside a JSON string (json.dumps with ensure_ascii=False writes them as they are).
    Like str.splitlines, a final line break does not start another line."""
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    return [line[:-1] if line.endswith("\r") else line for line in lines]


def read_jsonl(path: Path, what: str, error: type[QuestionSetError] = QuestionSetError, *,
               bom: bool = False) -> list[str]:
    """The lines of a UTF-8 JSONL file (`jsonl_lines`), or `error`: "cannot read `what`" naming the
    file, or a byte that is not UTF-8 naming the file, the line and the byte. With `bom`, a
    leading UTF-8 byte order mark (an editor's) is dropped."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise error(f"{path}: cannot read {what}: {exc}") from exc
    skip = 3 if bom and data.startswith(b"\xef\xbb\xbf") else 0
    try:
        return jsonl_lines(data[skip:].decode("utf-8"))
    except UnicodeDecodeError as exc:
        at = skip + exc.start
        lineno = data.count(b"\n", 0, at) + 1
        column = at - (data.rfind(b"\n", 0, at) + 1)
        raise error(f"{path}:{lineno}: invalid UTF-8 at byte {column} of the line (byte {at} of the file)") from None


def json_object_line(path: Path, lineno: int, line: str, error: type[QuestionSetError] = QuestionSetError
                     ) -> dict[str, Any]:
    """One line of a JSONL file as a JSON object, or `error` naming the file and line: every
    JSONL format of this stage (question sets, golden prompts, review files) reads its lines so."""
    try:
        obj = json.loads(line)
    except json.JSONDecodeError as exc:
        raise error(f"{path}:{lineno}: invalid JSON: {exc.msg} at column {exc.colno}") from exc
    except RecursionError:
        raise error(f"{path}:{lineno}: invalid JSON: nested too deeply to read") from None
    except ValueError as exc:  # a number past Python's limit on integer digits (4,300)
        raise error(f"{path}:{lineno}: invalid JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise error(f"{path}:{lineno}: expected a JSON object, got {type(obj).__name__}")
    return obj


def _question_from(path: Path, lineno: int, obj: dict[str, Any]) -> Question:
    loc = f"{path}:{lineno}"
    qid, text, gold = obj.get("qid"), obj.get("question"), obj.get("gold")
    for name in ("qid", "question", "hard_class", "gist"):
        check_text(loc, name, obj.get(name))
    if not isinstance(qid, str) or not qid.strip():
        raise QuestionSetError(f"{loc}: field 'qid' must be a non-empty string")
    if not isinstance(text, str) or not text.strip():
        raise QuestionSetError(f"{loc}: field 'question' must be a non-empty string")
    check_length(loc, "question", text)
    if not isinstance(gold, list) or not all(isinstance(g, str) and g for g in gold):
        raise QuestionSetError(f"{loc}: field 'gold' must be a list of document ids ([] for abstention)")
    form = obj.get("form")
    if form is not None and form not in FORMS:
        raise QuestionSetError(f"{loc}: field 'form' is {form!r}; valid: {', '.join(FORMS)} or null")
    relevance = obj.get("relevance") or {}
    if not isinstance(relevance, dict) or not all(
        isinstance(k, str) and is_integer(v) for k, v in relevance.items()
    ):
        raise QuestionSetError(f"{loc}: field 'relevance' must map document ids to integer grades")
    if relevance and {d for d, g in relevance.items() if g > 0} != set(gold):
        raise QuestionSetError(f"{loc}: 'relevance' documents with grade > 0 must be exactly the 'gold' list")
    for doc_id in gold:
        check_text(loc, "gold", doc_id)
    for doc_id in relevance:
        check_text(loc, "relevance", doc_id)
    hard_class = obj.get("hard_class")
    if hard_class is not None and not isinstance(hard_class, str):
        raise QuestionSetError(f"{loc}: field 'hard_class' must be a string or null")
    gist = obj.get("gist")
    if gist is not None and not isinstance(gist, str):
        raise QuestionSetError(f"{loc}: field 'gist' must be a string or null")
    return Question(
        qid=qid,
        question=text,
        gold=tuple(dict.fromkeys(gold)),
        form=form,
        hard_class=hard_class,
        gist=gist or "",
        relevance=relevance,
    )


def stamp_question_file(questions_path: str | Path, corpus_signature: str, doc_ids: Iterable[str]) -> str:
    """(Re)write a hand-written question file with a header for `corpus_signature`.

    Accepts a file with or without a header; validates every question and every gold id
    against the corpus first.  Returns the new fingerprint.
    """
    path = Path(questions_path)
    numbered = [(n, line) for n, line in enumerate(read_jsonl(path, "question set"), start=1) if line.strip()]
    if numbered and json_object_line(path, *numbered[0]).get("kind") == HEADER_KIND:
        numbered = numbered[1:]
    known = set(doc_ids)
    questions: list[Question] = []
    seen: dict[str, int] = {}
    for lineno, line in numbered:
        q = _question_from(path, lineno, json_object_line(path, lineno, line))
        missing = [d for d in q.gold if d not in known]
        if missing:
            raise QuestionSetError(f"{path}:{lineno}: gold document ids not in the corpus: {missing}")
        if q.qid in seen:
            raise QuestionSetError(f"{path}:{lineno}: duplicate qid {q.qid!r} (first at line {seen[q.qid]})")
        seen[q.qid] = lineno
        questions.append(q)
    if not questions:
        raise QuestionSetError(f"{path}: no questions to stamp")
    _require_answerable(path, questions)
    return write_question_set(path, questions, corpus_signature=corpus_signature,
                              extra_header={"source": "hand-written"})


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m eval_pipeline.questions.sets")
    sub = parser.add_subparsers(dest="command", required=True)
    stamp = sub.add_parser("stamp", help="write the header of a hand-written question set for a corpus")
    stamp.add_argument("questions")
    stamp.add_argument("--corpus-kind", default="demo", choices=["demo", "folder", "jsonl", "beir"])
    stamp.add_argument("--corpus", default=None, help="corpus path (not needed for demo)")
    args = parser.parse_args(argv)
    try:
        snapshot = load_corpus(args.corpus_kind, args.corpus)
        fingerprint = stamp_question_file(args.questions, snapshot.signature, (d.doc_id for d in snapshot.documents))
    except ValueError as exc:  # QuestionSetError, CorpusError: they name the file and line
        return input_error(parser.prog, exc)
    print(f"{args.questions}: corpus {snapshot.signature}, fingerprint {fingerprint}")
    return 0


def input_error(prog: str, exc: Exception) -> int:
    """A command line's answer to bad input: the project's message (it names the file and
    line), one line on stderr, exit status 2 (as argparse's usage errors), never a traceback."""
    print(f"{prog}: error: {exc}", file=sys.stderr)
    return 2


def load_beir_questions(folder: str | Path, *, split: str, doc_ids: Iterable[str],
                        corpus_signature: str | None = None) -> QuestionSet:
    """A BEIR question set: `queries.jsonl` plus `qrels/<split>.tsv` (graded relevance kept).

    Only queries judged in the split are included.  A judged query id missing from
    queries.jsonl, or a judged document missing from the corpus, is an error naming it.
    """
    folder = Path(folder)
    qrels_path = folder / "qrels" / f"{split}.tsv"
    queries_path = folder / "queries.jsonl"
    for p in (qrels_path, queries_path):
        if not p.exists():
            raise QuestionSetError(f"{p}: missing (BEIR folder {folder}, split {split!r})")
    qrels: dict[str, dict[str, int]] = {}
    judged_on: dict[tuple[str, str], int] = {}  # (query id, document id) -> the line judging it
    for lineno, raw in _utf8_lines(qrels_path):
        line = raw.rstrip("\r\n")
        if not line.strip():
            continue
        parts = line.split("\t")
        if lineno == 1 and parts[0] == "query-id":
            continue
        if len(parts) != 3:
            raise QuestionSetError(f"{qrels_path}:{lineno}: expected 3 tab-separated columns, got {len(parts)}")
        try:
            grade = int(parts[2])
        except ValueError:
            raise QuestionSetError(f"{qrels_path}:{lineno}: score {parts[2]!r} is not an integer") from None
        judged = qrels.setdefault(parts[0], {})
        if parts[1] in judged and judged[parts[1]] != grade:
            raise QuestionSetError(
                f"{qrels_path}:{lineno}: query {parts[0]!r}, document {parts[1]!r} has grade {grade} here but "
                f"grade {judged[parts[1]]} on line {judged_on[(parts[0], parts[1])]}; keep one judgement per "
                f"(query-id, corpus-id)")
        judged_on.setdefault((parts[0], parts[1]), lineno)
        judged[parts[1]] = grade
    texts: dict[str, tuple[int, Any]] = {}  # query id -> (line, text)
    for lineno, line in _utf8_lines(queries_path):
        if line.strip():
            obj = json_object_line(queries_path, lineno, line)
            qid = _query_id(f"{queries_path}:{lineno}", obj.get("_id"))
            if qid in texts:
                raise QuestionSetError(
                    f"{queries_path}:{lineno}: duplicate _id {qid!r} (first at line {texts[qid][0]})")
            texts[qid] = (lineno, obj.get("text"))
    known = set(doc_ids)
    unknown_docs = sorted({d for judged in qrels.values() for d in judged} - known)
    if unknown_docs:
        raise QuestionSetError(f"{qrels_path}: judged document ids not in the corpus: {unknown_docs[:20]}")
    missing = sorted(set(qrels) - set(texts))
    if missing:
        raise QuestionSetError(f"{qrels_path}: judged query ids not in {queries_path.name}: {missing[:20]}")
    questions = []
    warnings: list[str] = []
    for qid in sorted(qrels, key=_natural_key):
        grades = qrels[qid]
        gold = tuple(sorted(d for d, g in grades.items() if g > 0))
        lineno, text = texts[qid]
        loc = f"{queries_path}:{lineno}"
        check_text(loc, "_id", qid)
        if text is not None and not isinstance(text, str):
            raise QuestionSetError(f"{loc}: field 'text' of query {qid!r} must be a string")
        if text is None or not text.strip():
            raise QuestionSetError(f"{loc}: query {qid!r} has empty text")
        check_text(loc, "text", text)
        check_length(loc, "text", text)
        _warn_invisible(warnings, f"{loc}: query {qid!r}", text)
        # Every judgement, grade 0 too: a judged non-relevant document is not a hole in the labels.
        questions.append(Question(qid=qid, question=text, gold=gold, relevance=dict(grades)))
    if not questions:
        raise QuestionSetError(f"{qrels_path}: no judged queries in split {split!r}")
    _require_answerable(qrels_path, questions)
    # The judgements were checked against these documents: the header records which corpus.
    header = {"kind": HEADER_KIND, "version": FORMAT_VERSION, "source": f"beir:{folder}:{split}",
              "corpus_signature": corpus_signature}
    return QuestionSet(questions=tuple(questions), header=header, path=f"{folder} ({split})",
                       warnings=tuple(warnings))


def _query_id(loc: str, value: Any) -> str:
    """A BEIR query's `_id` as a string (a number is read as its digits), or a QuestionSetError
    naming the line: a query without one is not query 'None'."""
    if value is None:
        raise QuestionSetError(f"{loc}: missing field '_id'")
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        value = str(value)
    if not isinstance(value, str):
        raise QuestionSetError(f"{loc}: field '_id' must be a string, got {type(value).__name__}")
    if not value.strip():
        raise QuestionSetError(f"{loc}: field '_id' is empty")
    return value


def _utf8_lines(path: Path) -> Iterator[tuple[int, str]]:
    """(line number, line) of a text file, split on "\\n" only and decoded line by line, so that a
    byte that is not UTF-8 is a QuestionSetError naming the file, the line and the byte."""
    try:
        with open(path, "rb") as fh:
            offset = 0
            for lineno, raw in enumerate(fh, start=1):
                try:
                    yield lineno, raw.decode("utf-8")
                except UnicodeDecodeError as exc:
                    raise QuestionSetError(f"{path}:{lineno}: invalid UTF-8 at byte {exc.start} of the line "
                                           f"(byte {offset + exc.start} of the file)") from None
                offset += len(raw)
    except OSError as exc:
        raise QuestionSetError(f"{path}: cannot read: {exc}") from exc


def _natural_key(qid: str):
    """Numeric ids in numeric order, then the others as text. Only decimal digits are numeric:
    "²" or "①" is str.isdigit() but not int()."""
    return (0, int(qid), qid) if qid.isdecimal() else (1, 0, qid)


QUESTION_SOURCES = ("file", "beir", "generate")


def preflight_question_set(
    source: str,
    path: str | Path | None,
    *,
    corpus_signature: str,
    doc_ids: Iterable[str],
    beir_split: str = "test",
    corpus_source: str | None = None,
    limit: int | None = None,
) -> QuestionSet | None:
    """Load and check the configured question set before anything is embedded.

    `source` and `path` are the question_set settings (file | beir | generate); `corpus_source`
    is the corpus kind, so that a file source without a path means the committed demo set on
    the demo corpus.  Returns the set (limited, if `limit` is given) or None for `generate`,
    which cannot be checked before the questions are generated.  Raises QuestionSetError
    naming the file and line, or the setting.
    """
    if source == "generate":
        return None
    if source not in QUESTION_SOURCES:
        raise QuestionSetError(f"question_set.source {source!r} is not valid; valid: {', '.join(QUESTION_SOURCES)}")
    if source == "beir":
        if not path:
            raise QuestionSetError("question_set.path must name the BEIR folder when question_set.source is 'beir'")
        qs = load_beir_questions(path, split=beir_split, doc_ids=doc_ids, corpus_signature=corpus_signature)
    else:
        if not path:
            if corpus_source != "demo":
                raise QuestionSetError("question_set.path is required for a corpus other than the demo corpus")
            path = DEMO_DATA_DIR / "questions.jsonl"
        qs = load_question_set(path, corpus_signature=corpus_signature, doc_ids=doc_ids, require_fingerprint=True)
    return qs.limit(limit) if limit is not None else qs


if __name__ == "__main__":
    raise SystemExit(main())
