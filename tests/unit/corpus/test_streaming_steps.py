"""The steps after corpus_snapshot read a spooled corpus as they walk it: the question-set audit
scores the corpus a batch at a time and looks up only the golds, with the figures it gives on the
corpus in memory; the preflight counts without reading the corpus again."""

from __future__ import annotations

import pytest

from eval_pipeline.corpus import sources
from eval_pipeline.corpus.sources import DEMO_DATA_DIR, load_corpus
from eval_pipeline.questions.sets import preflight_question_set
from eval_pipeline.validity import audit
from eval_pipeline.validity.audit import AuditThresholds, audit_question_set, metadata_engine_ranks


@pytest.fixture
def demo_questions():
    snapshot = load_corpus("demo")
    return preflight_question_set("file", str(DEMO_DATA_DIR / "questions.jsonl"), corpus_signature=snapshot.signature,
                                  doc_ids=snapshot.doc_ids()).questions


def _never_whole(monkeypatch):
    """A spooled snapshot asked for every document by id (the whole corpus in a dict) fails."""
    by_id = sources.CorpusSnapshot.by_id

    def only_some(self, doc_ids=None):
        assert doc_ids is not None or self.spool is None, "the whole corpus was asked for by id"
        return by_id(self, doc_ids)

    monkeypatch.setattr(sources.CorpusSnapshot, "by_id", only_some)


@pytest.mark.parametrize("depth", [1, 5, 20])
def test_the_metadata_ranks_of_a_spool_read_in_batches_equal_the_in_memory_ones(tmp_path, monkeypatch,
                                                                                 demo_questions, depth):
    in_memory = load_corpus("demo")
    spooled = load_corpus("demo", spool_to=tmp_path)
    expected = metadata_engine_ranks(demo_questions, in_memory, depth=depth)
    _never_whole(monkeypatch)
    monkeypatch.setattr(audit, "_METADATA_BATCH", 5)  # 36 documents: eight batches
    assert metadata_engine_ranks(demo_questions, spooled, depth=depth) == expected
    assert list(metadata_engine_ranks(demo_questions, spooled, depth=depth)) == list(expected)  # same order
    if depth > 1:  # ranks counted across batches
        assert any(rank is not None and rank > 1 for rank in expected.values())
    assert not spooled.loaded


def test_the_audit_of_a_spooled_corpus_equals_the_in_memory_one(tmp_path, monkeypatch, demo_questions):
    in_memory = load_corpus("demo")
    spooled = load_corpus("demo", spool_to=tmp_path)
    thresholds = AuditThresholds()
    expected = audit_question_set(demo_questions, in_memory, metadata_ranks=metadata_engine_ranks(
        demo_questions, in_memory), thresholds=thresholds)
    _never_whole(monkeypatch)
    monkeypatch.setattr(audit, "_METADATA_BATCH", 7)
    got = audit_question_set(demo_questions, spooled, metadata_ranks=metadata_engine_ranks(
        demo_questions, spooled), thresholds=thresholds)
    assert got == expected
    assert not spooled.loaded


def test_an_unknown_gold_is_still_refused_naming_it(tmp_path, demo_questions):
    from dataclasses import replace

    spooled = load_corpus("demo", spool_to=tmp_path)
    answerable = next(q for q in demo_questions if q.answerable)
    with pytest.raises(ValueError, match=r"gold document\(s\) not in the corpus snapshot: \['nope'\]"):
        audit_question_set([replace(answerable, gold=("nope",))], spooled)


def test_the_preflight_counts_a_spooled_corpus_without_reading_it(tmp_path, monkeypatch):
    from eval_pipeline.questions.build import preflight_run

    spooled = load_corpus("demo", spool_to=tmp_path)
    expected = load_corpus("demo")
    monkeypatch.setattr(sources, "_read_spool", lambda *a: (_ for _ in ()).throw(AssertionError("read")))
    shown = preflight_run(spooled, questions=None, variants=[], reranker_identity=lambda spec: None, warn=print)
    assert shown["documents"] == expected.count
    assert shown["characters"] == sum(len(d.content) for d in expected.documents)
    assert shown["signature"] == expected.signature
