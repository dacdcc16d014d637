"""The question-set audit is kept in the state dir across runs (issue #29, the warm floor): a
warm SciFact run recomputed it in every process, 14.2 of its 27.5 s. An entry is used only for
the same questions, corpus and thresholds, audited by the same code; anything else computes it
again, and an unreadable entry is recomputed and replaced."""

from __future__ import annotations

import pytest

from eval_pipeline.common import versions
from eval_pipeline.validity import audit
from eval_pipeline.validity.audit import AuditThresholds, run_audit
from tests.unit.validity.test_audit_once import QUESTIONS, computed, snapshot  # noqa: F401 (a fixture)


def _new_process():
    audit.forget_audits()  # what a new process has: nothing kept in memory


def test_a_second_run_reads_the_audit_the_first_stored(computed, tmp_path):  # noqa: F811
    first = run_audit(QUESTIONS, snapshot(), AuditThresholds(), cache_dir=tmp_path)
    _new_process()
    again = run_audit(QUESTIONS, snapshot(), AuditThresholds(), cache_dir=tmp_path)
    assert len(computed) == 1
    assert again == first
    assert len(list(tmp_path.glob("*.pkl"))) == 1


def test_other_thresholds_or_questions_are_audited_again(computed, tmp_path):  # noqa: F811
    run_audit(QUESTIONS, snapshot(), AuditThresholds(), cache_dir=tmp_path)
    _new_process()
    run_audit(QUESTIONS, snapshot(), AuditThresholds(max_near_duplicate_share=0.5), cache_dir=tmp_path)
    _new_process()
    run_audit(QUESTIONS[:2], snapshot(), AuditThresholds(), cache_dir=tmp_path)
    assert len(computed) == 3


def test_another_audit_code_is_audited_again(computed, tmp_path, monkeypatch):  # noqa: F811
    run_audit(QUESTIONS, snapshot(), AuditThresholds(), cache_dir=tmp_path)
    _new_process()
    real = versions.source_digest
    monkeypatch.setattr(versions, "source_digest", lambda *paths: "edited-" + real(*paths))
    run_audit(QUESTIONS, snapshot(), AuditThresholds(), cache_dir=tmp_path)
    assert len(computed) == 2


@pytest.mark.parametrize("damage", [b"", b"not a pickle", None])
def test_a_damaged_or_foreign_entry_is_recomputed_and_replaced(computed, tmp_path, damage):  # noqa: F811
    first = run_audit(QUESTIONS, snapshot(), AuditThresholds(), cache_dir=tmp_path)
    (entry,) = tmp_path.glob("*.pkl")
    if damage is None:  # another entry's content under this entry's name
        import pickle
        entry.write_bytes(pickle.dumps(("another key", first)))
    else:
        entry.write_bytes(damage)
    _new_process()
    again = run_audit(QUESTIONS, snapshot(), AuditThresholds(), cache_dir=tmp_path)
    assert len(computed) == 2
    assert again == first
    _new_process()
    run_audit(QUESTIONS, snapshot(), AuditThresholds(), cache_dir=tmp_path)
    assert len(computed) == 2  # replaced with a good entry


def test_a_cache_that_cannot_be_written_or_read_costs_a_recompute_not_the_check(computed, tmp_path):  # noqa: F811
    blocked = tmp_path / "a file, not a folder"
    blocked.write_text("")
    first = run_audit(QUESTIONS, snapshot(), AuditThresholds(), cache_dir=blocked / "audits")
    _new_process()
    again = run_audit(QUESTIONS, snapshot(), AuditThresholds(), cache_dir=blocked / "audits")
    assert again == first
    assert len(computed) == 2
