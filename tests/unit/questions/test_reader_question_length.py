"""A question longer than MAX_QUESTION_CHARS is refused when the set is loaded, naming the file
and the line, instead of failing in tsquery (ProgramLimitExceeded) after ingest and ranking: in a
question set, a BEIR queries file and a golden prompt set, which each variant retrieves too
(#25, item 8)."""

from __future__ import annotations

import json

import pytest

from eval_pipeline.questions.golden import load_golden_prompts
from eval_pipeline.questions.sets import (
    HEADER_KIND,
    MAX_QUESTION_CHARS,
    QuestionSetError,
    load_beir_questions,
    load_question_set,
    preflight_question_set,
)

SIG = "abcdef0123456789"


def _set(tmp_path, text: str):
    path = tmp_path / "q.jsonl"
    rows = [{"kind": HEADER_KIND, "version": 1, "corpus_signature": SIG},
            {"qid": "q1", "question": "short", "gold": ["d1"]},
            {"qid": "q2", "question": text, "gold": ["d1"]}]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n", encoding="utf-8")
    return path


def test_the_limit_is_stated():
    assert MAX_QUESTION_CHARS == 10_000


def test_a_question_at_the_limit_loads(tmp_path):
    qs = load_question_set(_set(tmp_path, "x" * MAX_QUESTION_CHARS), corpus_signature=SIG, doc_ids=["d1"],
                           require_fingerprint=False)
    assert len(qs.questions[1].question) == MAX_QUESTION_CHARS


@pytest.mark.parametrize("length", [MAX_QUESTION_CHARS + 1, 1_440_000])
def test_a_longer_question_is_refused_at_preflight(tmp_path, length):
    path = _set(tmp_path, "why " * (length // 4) + "?" * (length % 4))
    with pytest.raises(QuestionSetError) as info:
        preflight_question_set("file", path, corpus_signature=SIG, doc_ids=["d1"])
    assert str(info.value) == (f"{path}:3: field 'question' is {length:,} characters, more than MAX_QUESTION_CHARS "
                               f"({MAX_QUESTION_CHARS:,}); keyword search cannot take a query this long")


def test_a_longer_beir_query_is_refused(tmp_path):
    (tmp_path / "qrels").mkdir()
    (tmp_path / "qrels" / "test.tsv").write_text("1\td1\t1\n2\td1\t1\n", encoding="utf-8")
    (tmp_path / "queries.jsonl").write_text(
        json.dumps({"_id": "1", "text": "fine"}) + "\n" + json.dumps({"_id": "2", "text": "y" * 20_000}) + "\n",
        encoding="utf-8")
    with pytest.raises(QuestionSetError, match=rf"^{tmp_path / 'queries.jsonl'}:2: field 'text' is 20,000 characters, "
                                               "more than MAX_QUESTION_CHARS"):
        load_beir_questions(tmp_path, split="test", doc_ids=["d1"])


def test_a_longer_golden_prompt_is_refused(tmp_path):
    path = tmp_path / "golden.jsonl"
    rows = [{"kind": "eval-pipeline/golden-prompts", "version": 1, "set": "team.long"},
            {"id": "p1", "prompt": "z" * (MAX_QUESTION_CHARS + 5), "reference": "an answer", "assertions": []}]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n", encoding="utf-8")
    with pytest.raises(QuestionSetError, match=rf"^{path}:2: field 'prompt': is 10,005 characters, more than "
                                               "MAX_QUESTION_CHARS"):
        load_golden_prompts(path, require_fingerprint=False)
