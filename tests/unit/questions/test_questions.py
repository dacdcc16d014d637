"""Tests for eval_pipeline.questions.sets: the question-set file format, its validation against a
corpus, the order-independent fingerprint, atomic writes and stamping of hand-written files."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from eval_pipeline.common import atomic
from eval_pipeline.corpus.sources import load_corpus
from eval_pipeline.questions.sets import (
    FORMAT_VERSION,
    HEADER_KIND,
    Question,
    QuestionSet,
    QuestionSetError,
    load_question_set,
    question_set_fingerprint,
    stamp_question_file,
    write_question_set,
)

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
SIG = "abcdef0123456789"
DOC_IDS = ("doc-a", "doc-b", "doc-c")

QUESTIONS = (
    Question("q1", "where is a?", ("doc-a",), form="MATCH", hard_class=None, gist="a"),
    Question("q2", "where are b and c?", ("doc-b", "doc-c"), form="GAP", hard_class="multi", gist="bc",
             relevance={"doc-b": 2, "doc-c": 1}),
    Question("q3", "nothing answers this", (), form=None, gist=""),
    Question("q4", "again a", ("doc-a",), form="GAP"),
)


def header(**over) -> dict:
    return {"kind": HEADER_KIND, "version": FORMAT_VERSION, "corpus_signature": SIG, **over}


def qline(qid="q1", question="text?", gold=("doc-a",), **extra) -> dict:
    return {"qid": qid, "question": question, "gold": list(gold), **extra}


def write_lines(path: Path, objs) -> Path:
    """One line per item: dicts as JSON, strings verbatim."""
    path.write_text("\n".join(o if isinstance(o, str) else json.dumps(o) for o in objs) + "\n", encoding="utf-8")
    return path


def load(path, sig=SIG, ids=DOC_IDS) -> QuestionSet:
    """Hand-built files here have no fingerprint (they test other rules); the default,
    strict, is tested in tests/unit/config/test_preflight.py."""
    return load_question_set(path, corpus_signature=sig, doc_ids=ids, require_fingerprint=False)


def raises_at(path: Path, line: int | None, pattern: str):
    """pytest.raises for a QuestionSetError whose message starts with 'path:line:' (or 'path:')."""
    prefix = re.escape(f"{path}:{line}:" if line is not None else f"{path}:")
    return pytest.raises(QuestionSetError, match=rf"^{prefix}.*{pattern}")


# --- write + load round trip ------------------------------------------------------------


def test_round_trip(tmp_path):
    p = tmp_path / "qs.jsonl"
    fp = write_question_set(p, QUESTIONS, corpus_signature=SIG, extra_header={"source": "unit-test", "n": 4})
    qs = load(p)
    assert qs.questions == QUESTIONS
    # relevance is compare=False on the dataclass: check it explicitly
    assert [dict(q.relevance) for q in qs.questions] == [dict(q.relevance) for q in QUESTIONS]
    assert qs.fingerprint == fp == question_set_fingerprint(QUESTIONS)
    assert qs.path == str(p)
    assert dict(qs.header) == {
        "kind": HEADER_KIND,
        "version": FORMAT_VERSION,
        "corpus_signature": SIG,
        "fingerprint": fp,
        "source": "unit-test",
        "n": 4,
    }


def test_written_file_layout(tmp_path):
    p = tmp_path / "qs.jsonl"
    write_question_set(p, QUESTIONS, corpus_signature=SIG)
    text = p.read_text(encoding="utf-8")
    assert text.endswith("\n")
    lines = text.splitlines()
    assert len(lines) == 1 + len(QUESTIONS)
    first = json.loads(lines[0])
    assert first["kind"] == HEADER_KIND and first["version"] == 1 and first["corpus_signature"] == SIG
    assert json.loads(lines[1]) == {
        "qid": "q1", "question": "where is a?", "gold": ["doc-a"], "form": "MATCH", "hard_class": None, "gist": "a",
    }
    assert json.loads(lines[2])["relevance"] == {"doc-b": 2, "doc-c": 1}
    assert "relevance" not in json.loads(lines[3])


def test_non_ascii_round_trip(tmp_path):
    q = Question("q-ü", "Wo ist die Straße? 東京", ("doc-a",), gist="ß")
    p = tmp_path / "qs.jsonl"
    write_question_set(p, [q], corpus_signature=SIG)
    assert "Straße" in p.read_text(encoding="utf-8")  # written as UTF-8, not \u escapes
    assert load(p).questions == (q,)


def test_fingerprint_is_order_independent_and_label_sensitive(tmp_path):
    fp = question_set_fingerprint(QUESTIONS)
    assert question_set_fingerprint(reversed(QUESTIONS)) == fp
    assert question_set_fingerprint([QUESTIONS[2], QUESTIONS[0], QUESTIONS[3], QUESTIONS[1]]) == fp
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    assert write_question_set(a, QUESTIONS, corpus_signature=SIG) == write_question_set(
        b, list(reversed(QUESTIONS)), corpus_signature=SIG
    )
    assert load(a).fingerprint == load(b).fingerprint
    # any label change changes the fingerprint
    changed = [
        Question("q1", "where is a?", ("doc-b",), form="MATCH", gist="a"),             # gold
        Question("q1", "where is a?", ("doc-a",), form="GAP", gist="a"),               # form
        Question("q1", "where is a?!", ("doc-a",), form="MATCH", gist="a"),            # text
        Question("q1", "where is a?", ("doc-a",), form="MATCH", gist="a", relevance={"doc-a": 3}),
    ]
    for q in changed:
        assert question_set_fingerprint([q, *QUESTIONS[1:]]) != fp


def test_atomic_write_leaves_no_temp_files(tmp_path):
    p = tmp_path / "nested" / "dir" / "qs.jsonl"
    write_question_set(p, QUESTIONS, corpus_signature=SIG)
    write_question_set(p, QUESTIONS[:2], corpus_signature=SIG)  # overwrite
    assert sorted(x.name for x in p.parent.iterdir()) == ["qs.jsonl"]
    assert len(load(p).questions) == 2


def test_atomic_write_failure_keeps_old_file_and_removes_temp(tmp_path, monkeypatch):
    p = tmp_path / "qs.jsonl"
    write_question_set(p, QUESTIONS, corpus_signature=SIG)
    before = p.read_bytes()

    def boom(src, dst):
        raise OSError("disk on fire")

    monkeypatch.setattr(atomic.os, "replace", boom)
    with pytest.raises(OSError, match="disk on fire"):
        write_question_set(p, QUESTIONS[:1], corpus_signature=SIG)
    assert p.read_bytes() == before
    assert sorted(x.name for x in tmp_path.iterdir()) == ["qs.jsonl"]


def test_fixture_question_set_matches_fixture_corpus():
    snap = load_corpus("jsonl", str(FIXTURES / "tiny_corpus.jsonl"))
    qs = load_question_set(FIXTURES / "tiny_questions.jsonl", corpus_signature=snap.signature, doc_ids=snap.by_id())
    c = qs.counts()
    assert c["questions"] == c["answerable"] + c["abstention"] == len(qs.questions) > 0


# --- Question / QuestionSet ---------------------------------------------------------------


def test_qrels_default_grade_one_and_explicit_relevance():
    assert Question("q", "t", ("a", "b")).qrels() == {"a": 1, "b": 1}
    q = Question("q", "t", ("a", "b"), relevance={"a": 3, "b": 1, "c": 0})
    assert q.qrels() == {"a": 3, "b": 1, "c": 0}
    # returned dict is a copy
    q.qrels()["a"] = 99
    assert q.relevance["a"] == 3
    assert Question("q", "t", ()).qrels() == {}


def test_answerable():
    assert Question("q", "t", ("a",)).answerable is True
    assert Question("q", "t", ()).answerable is False


def test_counts():
    qs = QuestionSet(questions=QUESTIONS, header=header(), path="x")
    assert qs.counts() == {
        "questions": 4,
        "answerable": 3,
        "abstention": 1,
        "form_MATCH": 1,
        "form_GAP": 2,
    }


def test_duplicate_gold_ids_are_collapsed(tmp_path):
    p = write_lines(tmp_path / "q.jsonl", [header(), qline(gold=["doc-a", "doc-b", "doc-a"])])
    assert load(p).questions[0].gold == ("doc-a", "doc-b")


def test_blank_lines_between_questions_are_ignored(tmp_path):
    p = write_lines(tmp_path / "q.jsonl", [header(), "", qline("q1"), "   ", qline("q2")])
    assert [q.qid for q in load(p).questions] == ["q1", "q2"]


def test_header_without_fingerprint_is_refused_by_default(tmp_path):
    p = write_lines(tmp_path / "q.jsonl", [header(), qline()])
    assert load(p).header.get("fingerprint") is None  # only when asked for explicitly
    with pytest.raises(QuestionSetError, match="fingerprint"):
        load_question_set(p, corpus_signature=SIG, doc_ids=DOC_IDS)


def test_doc_ids_accepts_any_iterable(tmp_path):
    p = write_lines(tmp_path / "q.jsonl", [header(), qline(gold=["doc-b"])])
    assert len(load(p, ids=iter(["doc-b"])).questions) == 1
    assert len(load(p, ids={"doc-b": object()}).questions) == 1


# --- load errors --------------------------------------------------------------------------


def test_empty_file(tmp_path):
    p = tmp_path / "q.jsonl"
    p.write_text("", encoding="utf-8")
    with raises_at(p, None, "empty file"):
        load(p)


def test_missing_file(tmp_path):
    p = tmp_path / "missing.jsonl"
    with raises_at(p, None, "cannot read question set"):
        load(p)


def test_missing_header(tmp_path):
    p = write_lines(tmp_path / "q.jsonl", [qline("q1"), qline("q2")])
    with raises_at(p, 1, "missing header"):
        load(p)


def test_wrong_version(tmp_path):
    p = write_lines(tmp_path / "q.jsonl", [header(version=2), qline()])
    with raises_at(p, 1, r"unsupported version 2 \(expected 1\)"):
        load(p)
    p = write_lines(tmp_path / "q.jsonl", [header(version="1"), qline()])
    with raises_at(p, 1, "unsupported version '1'"):
        load(p)


def test_corpus_signature_mismatch_names_both_signatures(tmp_path):
    p = write_lines(tmp_path / "q.jsonl", [header(corpus_signature="1111aaaa2222bbbb"), qline()])
    with pytest.raises(QuestionSetError) as info:
        load(p, sig="9999ffff8888eeee")
    msg = str(info.value)
    assert msg.startswith(f"{p}:1: corpus signature mismatch")
    assert "1111aaaa2222bbbb" in msg and "9999ffff8888eeee" in msg


def test_header_without_signature_is_a_mismatch(tmp_path):
    h = header()
    del h["corpus_signature"]
    p = write_lines(tmp_path / "q.jsonl", [h, qline()])
    with raises_at(p, 1, "corpus signature mismatch"):
        load(p)


def test_unknown_gold_ids_are_named_with_lines(tmp_path):
    p = write_lines(
        tmp_path / "q.jsonl",
        [header(), qline("q1", gold=["doc-a"]), qline("q2", gold=["ghost-1", "doc-b"]), qline("q3", gold=["ghost-2"])],
    )
    with pytest.raises(QuestionSetError) as info:
        load(p)
    msg = str(info.value)
    assert msg.startswith(f"{p}: gold document ids not in the corpus")
    assert "'ghost-1' (line 3)" in msg and "'ghost-2' (line 4)" in msg
    assert "doc-b" not in msg and "doc-a" not in msg


def test_many_unknown_gold_ids_are_truncated(tmp_path):
    p = write_lines(tmp_path / "q.jsonl", [header()] + [qline(f"q{i}", gold=[f"ghost-{i}"]) for i in range(25)])
    with pytest.raises(QuestionSetError, match="and 5 more") as info:
        load(p)
    assert "ghost-19" in str(info.value) and "ghost-20" not in str(info.value)


def test_duplicate_qid(tmp_path):
    p = write_lines(tmp_path / "q.jsonl", [header(), qline("q1"), qline("q2"), qline("q1")])
    with raises_at(p, 4, r"duplicate qid 'q1' \(first at line 2\)"):
        load(p)


@pytest.mark.parametrize("line_no", [1, 3])
def test_invalid_json(tmp_path, line_no):
    lines = [header(), qline("q1"), qline("q2")]
    lines[line_no - 1] = '{"qid": "q1", oops'
    p = write_lines(tmp_path / "q.jsonl", lines)
    with raises_at(p, line_no, "invalid JSON"):
        load(p)


def test_non_object_line(tmp_path):
    p = write_lines(tmp_path / "q.jsonl", [header(), '["q1"]'])
    with raises_at(p, 2, "expected a JSON object"):
        load(p)


@pytest.mark.parametrize(
    "bad, pattern",
    [
        (qline(form="match"), r"field 'form' is 'match'; valid: MATCH, GAP or null"),
        (qline(form="OTHER"), r"field 'form' is 'OTHER'"),
        ({"qid": "q1", "question": "t", "gold": "doc-a"}, r"field 'gold' must be a list"),
        ({"qid": "q1", "question": "t", "gold": None}, r"field 'gold' must be a list"),
        ({"qid": "q1", "question": "t"}, r"field 'gold' must be a list"),
        (qline(gold=["doc-a", 3]), r"field 'gold' must be a list"),
        (qline(gold=[""]), r"field 'gold' must be a list"),
        (qline(qid=""), r"field 'qid' must be a non-empty string"),
        (qline(qid=7), r"field 'qid' must be a non-empty string"),
        (qline(question="  "), r"field 'question' must be a non-empty string"),
        (qline(relevance=["doc-a"]), r"field 'relevance' must map document ids to integer grades"),
        (qline(relevance={"doc-a": 1.5}), r"field 'relevance' must map"),
        (qline(relevance={"doc-a": True}), r"field 'relevance' must map"),
        (qline(gold=["doc-a"], relevance={"doc-a": 1, "doc-b": 2}), r"'relevance' documents with grade > 0 must be exactly"),
        (qline(gold=["doc-a", "doc-b"], relevance={"doc-a": 1}), r"'relevance' documents with grade > 0 must be exactly"),
        (qline(gold=["doc-a"], relevance={"doc-a": 0}), r"'relevance' documents with grade > 0 must be exactly"),
        (qline(gold=[], relevance={"doc-a": 1}), r"'relevance' documents with grade > 0 must be exactly"),
    ],
)
def test_bad_question_fields_name_file_and_line(tmp_path, bad, pattern):
    p = write_lines(tmp_path / "q.jsonl", [header(), qline("q0"), bad])
    with raises_at(p, 3, pattern):
        load(p)


def test_relevance_with_zero_grade_extra_doc_is_consistent(tmp_path):
    p = write_lines(tmp_path / "q.jsonl", [header(), qline(gold=["doc-a"], relevance={"doc-a": 2, "doc-b": 0})])
    q = load(p).questions[0]
    assert q.qrels() == {"doc-a": 2, "doc-b": 0}


def test_fingerprint_mismatch_after_hand_edit(tmp_path):
    p = tmp_path / "q.jsonl"
    fp = write_question_set(p, QUESTIONS, corpus_signature=SIG)
    lines = p.read_text(encoding="utf-8").splitlines()
    obj = json.loads(lines[2])
    obj["question"] = "an edited question"
    lines[2] = json.dumps(obj)
    p.write_text("\n".join(lines) + "\n", encoding="utf-8")
    with pytest.raises(QuestionSetError) as info:
        load(p)
    msg = str(info.value)
    assert msg.startswith(f"{p}:1: fingerprint mismatch")
    assert fp in msg
    assert "edited after it was written" in msg


def test_reordering_lines_by_hand_keeps_fingerprint_valid(tmp_path):
    p = tmp_path / "q.jsonl"
    write_question_set(p, QUESTIONS, corpus_signature=SIG)
    lines = p.read_text(encoding="utf-8").splitlines()
    p.write_text("\n".join([lines[0]] + lines[:0:-1]) + "\n", encoding="utf-8")
    assert [q.qid for q in load(p).questions] == ["q4", "q3", "q2", "q1"]


def test_header_only(tmp_path):
    p = write_lines(tmp_path / "q.jsonl", [header()])
    with raises_at(p, None, "has a header but no questions"):
        load(p)


# --- stamp_question_file ------------------------------------------------------------------


def test_stamp_headerless_file(tmp_path):
    p = write_lines(tmp_path / "hand.jsonl", [qline("q1", gold=["doc-a"], form="MATCH"), "", qline("q2", gold=[])])
    fp = stamp_question_file(p, SIG, DOC_IDS)
    qs = load(p)
    assert [q.qid for q in qs.questions] == ["q1", "q2"]
    assert qs.fingerprint == fp
    assert qs.header["corpus_signature"] == SIG
    assert qs.header["source"] == "hand-written"
    assert qs.header["fingerprint"] == fp
    assert [x.name for x in tmp_path.iterdir()] == ["hand.jsonl"]


def test_stamp_already_stamped_file_replaces_header(tmp_path):
    p = tmp_path / "q.jsonl"
    old_fp = write_question_set(p, QUESTIONS, corpus_signature="old-signature-00")
    fp = stamp_question_file(p, SIG, DOC_IDS)
    assert fp == old_fp  # same questions, same fingerprint
    lines = p.read_text(encoding="utf-8").splitlines()
    assert len(lines) == 1 + len(QUESTIONS)  # old header not kept as a question
    assert sum(HEADER_KIND in line for line in lines) == 1
    qs = load(p)
    assert qs.questions == QUESTIONS
    with pytest.raises(QuestionSetError, match="corpus signature mismatch"):
        load(p, sig="old-signature-00")
    # stamping is idempotent
    before = p.read_bytes()
    stamp_question_file(p, SIG, DOC_IDS)
    assert p.read_bytes() == before


def test_stamp_rejects_unknown_gold_and_leaves_file_untouched(tmp_path):
    p = write_lines(tmp_path / "hand.jsonl", [qline("q1", gold=["doc-a"]), qline("q2", gold=["ghost"])])
    before = p.read_bytes()
    with pytest.raises(QuestionSetError, match=r"gold document ids not in the corpus: \['ghost'\]"):
        stamp_question_file(p, SIG, DOC_IDS)
    assert p.read_bytes() == before


def test_stamp_rejects_bad_question_with_line(tmp_path):
    p = write_lines(tmp_path / "hand.jsonl", [qline("q1"), qline("q2", form="bogus")])
    with raises_at(p, 2, "field 'form'"):
        stamp_question_file(p, SIG, DOC_IDS)


def test_stamp_error_line_numbers_count_the_existing_header(tmp_path):
    p = write_lines(tmp_path / "q.jsonl", [header(), qline("q1"), qline("q2", gold=["ghost"])])
    with raises_at(p, 3, "gold document ids not in the corpus"):
        stamp_question_file(p, SIG, DOC_IDS)


def test_stamp_rejects_duplicate_qids(tmp_path):
    p = write_lines(tmp_path / "hand.jsonl", [qline("q1"), qline("q1", question="other")])
    with pytest.raises(QuestionSetError, match="duplicate qid"):
        stamp_question_file(p, SIG, DOC_IDS)


def test_stamp_rejects_file_without_questions(tmp_path):
    p = tmp_path / "hand.jsonl"
    p.write_text("", encoding="utf-8")
    with pytest.raises(QuestionSetError):
        stamp_question_file(p, SIG, DOC_IDS)


@pytest.mark.parametrize("first_line", ["", "not json", "[1, 2]"])
def test_stamp_bad_first_line_is_a_question_set_error(tmp_path, first_line):
    p = tmp_path / "hand.jsonl"
    p.write_text(first_line + "\n" + json.dumps(qline("q1")) + "\n", encoding="utf-8")
    try:
        stamp_question_file(p, SIG, DOC_IDS)
    except QuestionSetError:
        pass  # acceptable: a clear error (a blank line could also simply be skipped)
    except Exception as exc:  # noqa: BLE001
        raise AssertionError(f"raw {type(exc).__name__} escaped: {exc}") from exc
    else:
        assert load(p).questions[0].qid == "q1"
