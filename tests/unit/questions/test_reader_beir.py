"""BEIR question-set readers (queries.jsonl, qrels/<split>.tsv): bad input is a QuestionSetError
naming the file and the line, never a silent change of the labels or a bare exception (#25)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from eval_pipeline.questions.sets import QuestionSetError, load_beir_questions

DOCS = ["d1", "d2", "d3"]


def _beir(folder: Path, qrels: bytes, queries: bytes | None = None) -> Path:
    if queries is None:
        queries = b"".join(json.dumps({"_id": q, "text": f"query {q}"}).encode() + b"\n" for q in ("1", "2"))
    (folder / "queries.jsonl").write_bytes(queries)
    (folder / "qrels").mkdir(exist_ok=True)
    (folder / "qrels" / "test.tsv").write_bytes(qrels)
    return folder


def _load(folder: Path):
    return load_beir_questions(folder, split="test", doc_ids=DOCS)


def test_conflicting_duplicate_judgements_are_refused_naming_both_lines(tmp_path):
    # The same (query, document) graded 1 on line 2 and 0 on line 4: taking the last one would
    # silently turn query 1 into an abstention question.
    _beir(tmp_path, b"query-id\tcorpus-id\tscore\n1\td1\t1\n2\td2\t1\n1\td1\t0\n")
    with pytest.raises(QuestionSetError) as info:
        _load(tmp_path)
    message = str(info.value)
    assert message.startswith(f"{tmp_path / 'qrels' / 'test.tsv'}:4: ")
    assert "'1'" in message and "'d1'" in message and "line 2" in message
    assert "grade 0" in message and "grade 1" in message


def test_an_identical_duplicate_judgement_is_accepted(tmp_path):
    _beir(tmp_path, b"query-id\tcorpus-id\tscore\n1\td1\t2\n2\td2\t1\n1\td1\t2\n")
    by_id = {q.qid: q for q in _load(tmp_path).questions}
    assert by_id["1"].qrels() == {"d1": 2} and by_id["2"].qrels() == {"d2": 1}


QRELS = b"query-id\tcorpus-id\tscore\n1\td1\t1\n2\td2\t1\n"


def test_a_non_utf8_byte_in_the_qrels_names_the_file_line_and_byte(tmp_path):
    _beir(tmp_path, b"query-id\tcorpus-id\tscore\n1\td1\t1\n2\td\xff2\t1\n")
    with pytest.raises(QuestionSetError) as info:
        _load(tmp_path)
    assert str(info.value) == (f"{tmp_path / 'qrels' / 'test.tsv'}:3: invalid UTF-8 at byte 3 of the line "
                               f"(byte 35 of the file)")


def test_a_non_utf8_byte_in_the_queries_names_the_file_line_and_byte(tmp_path):
    _beir(tmp_path, QRELS, b'{"_id": "1", "text": "query 1"}\n{"_id": "2", "text": "caf\xe9"}\n')
    with pytest.raises(QuestionSetError) as info:
        _load(tmp_path)
    assert str(info.value) == (f"{tmp_path / 'queries.jsonl'}:2: invalid UTF-8 at byte 25 of the line "
                               f"(byte 57 of the file)")


@pytest.mark.parametrize("query, why", [
    ({"text": "no id"}, "missing field '_id'"),
    ({"_id": None, "text": "null id"}, "missing field '_id'"),
    ({"_id": "", "text": "empty id"}, "field '_id' is empty"),
    ({"_id": ["1"], "text": "list id"}, "field '_id' must be a string, got list"),
    ({"_id": True, "text": "bool id"}, "field '_id' must be a string, got bool"),
])
def test_a_query_without_a_usable_id_is_refused_naming_the_line(tmp_path, query, why):
    # Once read as qid 'None' (str(None)): judged as such by a qrels row for "None", and otherwise dropped silently.
    queries = (json.dumps({"_id": "1", "text": "query 1"}) + "\n" + json.dumps(query) + "\n"
               + json.dumps({"_id": "2", "text": "query 2"}) + "\n")
    _beir(tmp_path, QRELS + b"None\td3\t1\n", queries.encode())
    with pytest.raises(QuestionSetError) as info:
        _load(tmp_path)
    assert str(info.value) == f"{tmp_path / 'queries.jsonl'}:2: {why}"


def test_a_numeric_query_id_is_read_as_its_string(tmp_path):
    _beir(tmp_path, QRELS, b'{"_id": 1, "text": "query 1"}\n{"_id": "2", "text": "query 2"}\n')
    assert [q.qid for q in _load(tmp_path).questions] == ["1", "2"]


def test_query_ids_that_look_numeric_but_are_not_integers_are_ordered_as_text(tmp_path):
    # "²" and "①" are str.isdigit() but not int(): once a bare ValueError from the sort.
    ids = ["10", "²", "2", "①", "1"]
    queries = "".join(json.dumps({"_id": q, "text": f"query {q}"}) + "\n" for q in ids)
    qrels = "query-id\tcorpus-id\tscore\n" + "".join(f"{q}\td1\t1\n" for q in ids)
    _beir(tmp_path, qrels.encode(), queries.encode())
    assert [q.qid for q in _load(tmp_path).questions] == ["1", "2", "10", "²", "①"]
