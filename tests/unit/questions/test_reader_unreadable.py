"""A question set, a file to stamp or a review file that cannot be read, or holds a byte that is
not UTF-8, is the reader's error naming the file (and the line and byte), never a bare
UnicodeDecodeError or FileNotFoundError (#25)."""

from __future__ import annotations

import json

import pytest

from eval_pipeline.questions.extra_golds import ExtraGoldsError, load_extra_golds
from eval_pipeline.questions.sets import (
    FORMAT_VERSION,
    HEADER_KIND,
    QuestionSetError,
    load_question_set,
    stamp_question_file,
)

SIG = "abcdef0123456789"
QUESTION = json.dumps({"qid": "q1", "question": "where is a?", "gold": ["doc-a"]}).encode()  # 53 bytes
HEADER = json.dumps({"kind": HEADER_KIND, "version": FORMAT_VERSION, "corpus_signature": SIG}).encode()


def test_stamp_names_the_line_of_a_byte_that_is_not_utf8(tmp_path):
    path = tmp_path / "hand.jsonl"
    path.write_bytes(QUESTION + b"\n" + b'{"qid": "q2", "question": "caf\xe9?", "gold": ["doc-a"]}\n')
    before = path.read_bytes()
    with pytest.raises(QuestionSetError) as info:
        stamp_question_file(path, SIG, ["doc-a"])
    assert str(info.value) == (f"{path}:2: invalid UTF-8 at byte 30 of the line "
                               f"(byte {len(QUESTION) + 1 + 30} of the file)")
    assert path.read_bytes() == before


def test_stamp_names_a_missing_file(tmp_path):
    path = tmp_path / "nope.jsonl"
    with pytest.raises(QuestionSetError, match=rf"^{path}: cannot read question set: .*No such file"):
        stamp_question_file(path, SIG, ["doc-a"])


def test_load_names_the_line_of_a_byte_that_is_not_utf8(tmp_path):
    path = tmp_path / "q.jsonl"
    path.write_bytes(HEADER + b"\r\n" + QUESTION + b"\r\n" + b'{"qid": "q\xff"}\r\n')
    with pytest.raises(QuestionSetError) as info:
        load_question_set(path, corpus_signature=SIG, doc_ids=["doc-a"])
    offset = len(HEADER) + len(QUESTION) + 4 + 10
    assert str(info.value) == f"{path}:3: invalid UTF-8 at byte 10 of the line (byte {offset} of the file)"


def test_a_review_file_names_the_line_of_a_byte_that_is_not_utf8(tmp_path):
    path = tmp_path / "review.jsonl"
    row = json.dumps({"question_id": "q1", "doc_id": "doc-a", "grade": 2, "judged_by": "me", "accept": True}).encode()
    path.write_bytes(b"\xef\xbb\xbf" + row + b"\n" + row.replace(b'"me"', b'"m\xe9"') + b"\n")  # with a BOM
    with pytest.raises(ExtraGoldsError) as info:
        load_extra_golds(path)
    column = row.index(b'"me"') + 2
    assert str(info.value) == (f"{path}:2: invalid UTF-8 at byte {column} of the line "
                               f"(byte {3 + len(row) + 1 + column} of the file)")
