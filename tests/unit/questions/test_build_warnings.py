"""What the loaders note but keep (zero-width or bidi characters glued to words: keyword search
will not match those words) reaches the run's log, the Dagster UI's, through the preflight and the
question_set asset's `warn`, with a count in their metadata (issue #25, item 8)."""

from __future__ import annotations

import json
from types import SimpleNamespace

from eval_pipeline.corpus.sources import load_corpus
from eval_pipeline.questions.build import build_question_set, preflight_run
from eval_pipeline.questions.sets import stamp_question_file


def test_the_preflight_and_the_question_set_warn_of_invisible_characters(tmp_path):
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("\n".join(json.dumps(d, ensure_ascii=False) for d in [
        {"doc_id": "a", "title": "A", "content": "pgvector\u200b index tuning"},
        {"doc_id": "b", "title": "B", "content": "plain text"}]) + "\n", encoding="utf-8")
    snapshot = load_corpus("jsonl", str(corpus))
    warned: list[str] = []
    metadata = preflight_run(snapshot, questions=None, variants=[], reranker_identity=lambda spec: None,
                             warn=warned.append)
    assert metadata["notes"] == 1 and any("U+200B" in w for w in warned)

    questions = tmp_path / "questions.jsonl"
    questions.write_text(json.dumps({"qid": "q1", "question": "how to tune pg\u200bvector?", "gold": ["a"]},
                                    ensure_ascii=False) + "\n", encoding="utf-8")
    stamp_question_file(questions, snapshot.signature, ["a", "b"])
    settings = SimpleNamespace(source="file", path=str(questions), beir_split="test", limit=None, extra_golds=None)
    warned.clear()
    _, metadata = build_question_set(settings, snapshot, llm_client=lambda: None, state=None, warn=warned.append)
    assert metadata["warnings"] == 1 and any("q1" in w and "U+200B" in w for w in warned)
