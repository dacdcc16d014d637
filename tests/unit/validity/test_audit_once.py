"""The question-set audit is computed once per run (issue #24): the question_set asset check
and the report's validity section (reporting.validity.assess) both ask `run_audit` for the same
question set and corpus; the second asks for what the first computed, equal inputs being
recognised by content (each step loads its own copy of the assets), never by identity."""

from __future__ import annotations

import copy

import pytest

from eval_pipeline.corpus.sources import CorpusSnapshot, Document
from eval_pipeline.questions.sets import Question
from eval_pipeline.validity import audit
from eval_pipeline.validity.audit import AuditThresholds, run_audit

DOCS = (
    Document("expenses", "Expense claims", "", "finance/expenses.md",
             "Submit expense claims within thirty days. Receipts are required."),
    Document("parking", "Parking", "", "facilities/parking.md",
             "Staff parking is behind the warehouse. Bicycles go in the shed."),
    Document("holidays", "Holidays", "", "", "Staff get twenty five days of annual leave."),
)
QUESTIONS = (
    Question("q1", "How many days do I have to submit expense claims?", ("expenses",), form="MATCH"),
    Question("q2", "Where can I leave my bike?", ("parking",), form="GAP"),
    Question("q3", "How many days of annual leave do staff get?", ("holidays",), form="MATCH"),
)


@pytest.fixture
def computed(monkeypatch):
    """Counts the audits actually computed."""
    calls = []
    real = audit.audit_question_set

    def counting(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(audit, "audit_question_set", counting)
    audit.forget_audits()
    yield calls
    audit.forget_audits()


def snapshot(docs=DOCS) -> CorpusSnapshot:
    return CorpusSnapshot(documents=[copy.deepcopy(d) for d in docs], source="test")


def test_the_same_questions_and_corpus_are_audited_once(computed):
    first = run_audit(list(QUESTIONS), snapshot(), AuditThresholds())
    again = run_audit(copy.deepcopy(list(QUESTIONS)), snapshot(), AuditThresholds())  # equal copies
    assert len(computed) == 1
    assert again == first


@pytest.mark.parametrize("change", ["thresholds", "limited", "question", "order", "document", "corpus order"])
def test_anything_the_audit_reads_changes_and_it_is_computed_again(computed, change):
    run_audit(QUESTIONS, snapshot(), AuditThresholds())
    questions, docs, thresholds, limited = list(QUESTIONS), list(DOCS), AuditThresholds(), False
    if change == "thresholds":
        thresholds = AuditThresholds(max_surface_share=0.1)
    elif change == "limited":
        limited = True
    elif change == "question":
        questions[1] = Question("q2", "Where can I leave my bicycle?", ("parking",), form="GAP")
    elif change == "order":
        questions.reverse()
    elif change == "document":
        docs[1] = Document("parking", "Parking", "", "facilities/parking.md", "Staff park by the river.")
    else:
        docs.reverse()
    fresh = run_audit(questions, snapshot(docs), thresholds, limited=limited)
    assert len(computed) == 2
    assert fresh == audit.audit_question_set(
        questions, snapshot(docs), metadata_ranks=audit.metadata_engine_ranks(questions, snapshot(docs)),
        thresholds=fresh.thresholds)


def test_the_asset_check_and_the_report_share_one_audit(computed):
    """The check's call, then the report's validity section: one audit between them."""
    import pandas as pd

    from eval_pipeline.config.sweep import parse_sweep
    from eval_pipeline.reporting.validity import assess
    from eval_pipeline.scoring.variant import score_variant

    sweep = parse_sweep({"baseline": "bm25", "variants": ["bm25"]})
    checked = run_audit(QUESTIONS, snapshot(), sweep.audit)  # as the question_set asset check runs it
    ranked = pd.DataFrame({"variant": "bm25", "qid": [q.qid for q in QUESTIONS],
                           "doc_ids": [list(q.gold) for q in QUESTIONS], "error": None, "miss_class": None})
    validity = assess({"bm25": score_variant(ranked, list(QUESTIONS))}, questions=copy.deepcopy(list(QUESTIONS)),
                      snapshot=snapshot(), sweep=sweep, verdict=None, connection_string=None)
    assert len(computed) == 1
    assert validity.audit == checked
