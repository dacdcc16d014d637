"""JSONL readers split on "\\n" only (a trailing "\\r" stripped): the other characters
str.splitlines treats as line breaks (U+2028, U+2029, U+0085, \\x0b, \\x0c, \\x1c-\\x1e) are
ordinary text inside a JSON string, and `stamp` writes a file its own reader loads (#25)."""

from __future__ import annotations

import json

import pytest

from eval_pipeline.questions.extra_golds import load_extra_golds
from eval_pipeline.questions.sets import (
    FORMAT_VERSION,
    HEADER_KIND,
    Question,
    load_question_set,
    question_set_fingerprint,
    stamp_question_file,
    write_question_set,
)

SIG = "abcdef0123456789"
DOC_IDS = ("doc-a", "doc-b")
SEPARATORS = ["\u2028", "\u2029", "\x85", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e"]


def _questions(sep: str) -> list[Question]:
    return [Question("q1", f"first{sep}line of the question?", ("doc-a",), form="MATCH", gist=f"gist{sep}a"),
            Question("q2", "plain question", ("doc-b",), gist="b")]


@pytest.mark.parametrize("sep", SEPARATORS, ids=[f"U+{ord(s):04X}" for s in SEPARATORS])
def test_a_question_set_with_a_separator_in_its_text_loads(tmp_path, sep):
    path = tmp_path / "questions.jsonl"
    questions = _questions(sep)
    header = {"kind": HEADER_KIND, "version": FORMAT_VERSION, "corpus_signature": SIG,
              "fingerprint": question_set_fingerprint(questions)}
    lines = [json.dumps(header)] + [json.dumps(q.to_json(), ensure_ascii=False) for q in questions]
    path.write_text("\r\n".join(lines) + "\r\n", encoding="utf-8", newline="")  # CRLF: the "\r" is stripped
    loaded = load_question_set(path, corpus_signature=SIG, doc_ids=DOC_IDS)
    assert list(loaded.questions) == questions and loaded.questions[0].gist == f"gist{sep}a"


@pytest.mark.parametrize("sep", SEPARATORS, ids=[f"U+{ord(s):04X}" for s in SEPARATORS])
def test_stamp_and_write_round_trip(tmp_path, sep):
    questions = _questions(sep)
    hand = tmp_path / "hand.jsonl"
    # A hand-written file, escaped (ensure_ascii): loadable before stamping, and after.
    hand.write_text("".join(json.dumps(q.to_json()) + "\n" for q in questions), encoding="utf-8")
    fingerprint = stamp_question_file(hand, SIG, DOC_IDS)
    assert fingerprint == question_set_fingerprint(questions)
    assert list(load_question_set(hand, corpus_signature=SIG, doc_ids=DOC_IDS).questions) == questions
    assert stamp_question_file(hand, SIG, DOC_IDS) == fingerprint  # stamping the stamped file again
    written = tmp_path / "written.jsonl"
    write_question_set(written, questions, corpus_signature=SIG)
    assert list(load_question_set(written, corpus_signature=SIG, doc_ids=DOC_IDS).questions) == questions


@pytest.mark.parametrize("sep", SEPARATORS, ids=[f"U+{ord(s):04X}" for s in SEPARATORS])
def test_a_review_file_with_a_separator_in_its_text_loads(tmp_path, sep):
    path = tmp_path / "review.jsonl"
    rows = [{"question_id": "q1", "question": f"first{sep}line of the question?", "doc_id": "doc-b",
             "passage": f"a{sep}b", "grade": 2, "reason": f"because{sep}so", "judged_by": "me", "accept": True,
             "accepted_by": "you"},
            {"question_id": "q2", "doc_id": "doc-a", "grade": 0, "judged_by": "me", "accept": False}]
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    (gold,) = load_extra_golds(path, questions=_questions(sep), doc_ids=DOC_IDS)
    assert (gold.question_id, gold.doc_id, gold.grade, gold.reason) == ("q1", "doc-b", 2, f"because{sep}so")
    assert gold.source == f"{path}:1"
