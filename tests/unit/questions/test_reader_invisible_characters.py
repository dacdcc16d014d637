"""A question holding zero-width or bidi control characters is loaded unchanged, and the set says
so: one warning per question in `QuestionSet.warnings` naming the file, the line and the counts
(also logged), since keyword search does not match a word they touch (#25, item 8)."""

from __future__ import annotations

import json
import logging

from eval_pipeline.questions.sets import HEADER_KIND, load_beir_questions, load_question_set

SIG = "abcdef0123456789"


def test_a_question_set_warns_per_question(tmp_path, caplog):
    path = tmp_path / "q.jsonl"
    rows = [{"kind": HEADER_KIND, "version": 1, "corpus_signature": SIG},
            {"qid": "q1", "question": "how do I reset my pass\u200bword?", "gold": ["d1"]},
            {"qid": "q2", "question": "plain", "gold": ["d1"]},
            {"qid": "q3", "question": "\u202erefund\u202c policy\u200b", "gold": []}]
    path.write_text("\n".join(json.dumps(r, ensure_ascii=False) for r in rows) + "\n", encoding="utf-8")
    with caplog.at_level(logging.WARNING, logger="eval_pipeline.questions.sets"):
        qs = load_question_set(path, corpus_signature=SIG, doc_ids=["d1"], require_fingerprint=False)
    assert qs.questions[0].question == "how do I reset my pass\u200bword?"
    tail = ": zero-width or bidi controls) in the text; keyword search does not match a word they touch (the text " \
           "is kept as it is)"
    assert qs.warnings == (f"{path}:2: question 'q1': 1 invisible character (U+200B ×1{tail}",
                           f"{path}:4: question 'q3': 3 invisible characters (U+200B ×1, U+202C ×1, U+202E ×1{tail}")
    assert qs.limit(1).warnings == qs.warnings  # the file's warnings, whatever part of it runs
    assert f"{path}:4: question 'q3'" in caplog.text


def test_a_clean_set_has_no_warnings(tmp_path):
    path = tmp_path / "q.jsonl"
    rows = [{"kind": HEADER_KIND, "version": 1, "corpus_signature": SIG},
            {"qid": "q1", "question": "\ufeffa leading BOM is not counted", "gold": ["d1"]}]
    path.write_text("\n".join(json.dumps(r, ensure_ascii=False) for r in rows) + "\n", encoding="utf-8")
    assert load_question_set(path, corpus_signature=SIG, doc_ids=["d1"], require_fingerprint=False).warnings == ()


def test_a_beir_query_warns(tmp_path):
    (tmp_path / "qrels").mkdir()
    (tmp_path / "qrels" / "test.tsv").write_text("1\td1\t1\n", encoding="utf-8")
    (tmp_path / "queries.jsonl").write_text(json.dumps({"_id": "1", "text": "zero\u200dwidth"}) + "\n",
                                            encoding="utf-8")
    qs = load_beir_questions(tmp_path, split="test", doc_ids=["d1"])
    assert qs.warnings == (f"{tmp_path / 'queries.jsonl'}:1: query '1': 1 invisible character (U+200D ×1: "
                           "zero-width or bidi controls) in the text; keyword search does not match a word they "
                           "touch (the text is kept as it is)",)
