"""Tests for eval_pipeline.questions.extra_golds: reading a reviewed file strictly (errors name
the file, the line and the field), applying accepted golds without touching the inputs or the
original judgements, and what an import does to the labels fingerprint and to the metrics
(score_variant on a tiny hand-made ranked frame). The review-file round trip goes through the
writer in eval_pipeline.validity.holes, with no LLM: the grades are made by hand here."""

from __future__ import annotations

import json
from dataclasses import replace

import pandas as pd
import pytest

from eval_pipeline.history.runs import labels_fingerprint
from eval_pipeline.validity.holes import HOLE_PROMPT_VERSION, HoleGrade, review_rows, write_review_file
from eval_pipeline.scoring.variant import score_variant
from eval_pipeline.questions.extra_golds import (
    REVIEW_FIELDS,
    ExtraGold,
    ExtraGoldsError,
    apply_extra_golds,
    extra_golds_fingerprint,
    load_extra_golds,
    read_review_rows,
)
from eval_pipeline.questions.sets import Question, QuestionSetError, question_set_fingerprint

MODEL = "grader-1@http://127.0.0.1:1/v1"

QUESTIONS = (
    Question("q1", "how do I reset my password", ("d1",)),
    Question("q2", "where is the bike cage", ("d2",), relevance={"d2": 2, "d9": 0}),
    Question("q3", "is there a pet insurance benefit", ()),  # abstention
)
DOCS = {"d1": "Reset it in settings.", "d2": "The cage is in the basement.", "d5": "Password resets: use the portal.",
        "d6": "Bike cage code is on the intranet.", "d7": "Pets are not covered.", "d9": "Unrelated."}


def row(**over):
    base = {"question_id": "q1", "question": "how do I reset my password", "doc_id": "d5",
            "passage": "Password resets: use the portal.", "grade": 3, "reason": "It says how.",
            "judged_by": MODEL, "prompt_version": HOLE_PROMPT_VERSION, "accept": True}
    base.update(over)
    return base


def write_rows(path, rows):
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows), encoding="utf-8")
    return path


def gold(qid="q1", doc="d5", grade=3, **over):
    return ExtraGold(question_id=qid, doc_id=doc, grade=grade, judged_by=MODEL, prompt_version=HOLE_PROMPT_VERSION,
                     **over)


# --- reading ---------------------------------------------------------------------------------


def test_only_accepted_rows_become_golds_with_their_provenance(tmp_path):
    path = write_rows(tmp_path / "review.jsonl", [
        row(),
        "",  # blank lines are ignored
        row(doc_id="d7", question_id="q3", grade=2, accept=False),
        row(question_id="q2", question="where is the bike cage", doc_id="d6", grade=2, judged_by="alice",
            prompt_version=None, accepted_by="bob", note="a reviewer's note: ignored"),
    ])
    golds = load_extra_golds(path, questions=QUESTIONS, doc_ids=DOCS)
    assert [(g.question_id, g.doc_id, g.grade) for g in golds] == [("q1", "d5", 3), ("q2", "d6", 2)]
    first, second = golds
    assert first.judged_by == MODEL and first.prompt_version == HOLE_PROMPT_VERSION and first.accepted
    assert first.reason == "It says how." and first.source == f"{path}:1"
    assert second.judged_by == "alice" and second.prompt_version is None and second.accepted_by == "bob"
    assert second.source == f"{path}:4"
    assert second.provenance() == {"question_id": "q2", "doc_id": "d6", "grade": 2, "judged_by": "alice",
                                   "prompt_version": None, "accepted": True, "accepted_by": "bob"}
    assert len(read_review_rows(path)) == 3  # every row, accepted or not


def test_a_byte_order_mark_from_an_editor_is_tolerated(tmp_path):
    path = tmp_path / "review.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps(row()).encode() + b"\n")
    assert [g.doc_id for g in load_extra_golds(path)] == ["d5"]


@pytest.mark.parametrize(
    "bad, pattern",
    [
        ('{"question_id": "q1", ', r":2: invalid JSON"),
        ('["q1", "d5"]', r":2: expected a JSON object"),
        (row(grade=7), r":2: field 'grade' must be an integer in 1\.\.3, got 7"),
        (row(grade=-1, accept=False), r":2: field 'grade' must be an integer in 0\.\.3, got -1"),
        (row(grade=2.5), r":2: field 'grade' .* got 2\.5"),
        (row(grade=True), r":2: field 'grade' .* got True"),
        (row(grade="3"), r":2: field 'grade' .* got '3'"),
        (row(grade=0), r":2: field 'grade' must be an integer in 1\.\.3, got 0 \(an accepted row is a gold"),
        (row(accept="yes"), r":2: field 'accept' must be true or false, got 'yes'"),
        ({k: v for k, v in row().items() if k != "accept"}, r":2: missing field\(s\) 'accept'"),
        ({k: v for k, v in row().items() if k not in ("grade", "judged_by")},
         r":2: missing field\(s\) 'grade', 'judged_by' \(required: question_id, doc_id, grade, judged_by, accept\)"),
        (row(question_id=""), r":2: field 'question_id' must be a non-empty string"),
        (row(doc_id=5), r":2: field 'doc_id' must be a non-empty string, got 5"),
        (row(judged_by=None), r":2: field 'judged_by' must be a non-empty string"),
        (row(prompt_version=3), r":2: field 'prompt_version' must be a string or null, got int"),
        (row(doc_id="d\u0000x"), r":2: field 'doc_id' contains a NUL character"),
        (row(question_id="q404"), r":2: field 'question_id': 'q404' is not a question of the question set"),
        (row(doc_id="d404"), r":2: field 'doc_id': 'd404' is not a document of the corpus"),
        (row(accept=False), r":2: question 'q1' and document 'd5' are already on line 1"),
    ],
)
def test_a_bad_row_is_an_error_naming_file_line_and_field(tmp_path, bad, pattern):
    path = write_rows(tmp_path / "review.jsonl", [row(), bad])
    with pytest.raises(ExtraGoldsError, match=pattern) as info:
        load_extra_golds(path, questions=QUESTIONS, doc_ids=DOCS)
    assert str(info.value).startswith(f"{path}:2: ")
    assert isinstance(info.value, QuestionSetError)  # handled wherever a bad question set is


def test_a_rejected_row_is_checked_too(tmp_path):
    """A typo in a row is an error even when it is not accepted: the reviewer may have meant to."""
    path = write_rows(tmp_path / "review.jsonl", [row(accept=False, grade="2")])
    with pytest.raises(ExtraGoldsError, match=":1: field 'grade'"):
        load_extra_golds(path)


def test_a_missing_file_is_an_error_not_an_empty_import(tmp_path):
    with pytest.raises(ExtraGoldsError, match="cannot read review file"):
        load_extra_golds(tmp_path / "nope.jsonl")


def test_ids_are_checked_only_when_the_set_and_corpus_are_given(tmp_path):
    path = write_rows(tmp_path / "review.jsonl", [row(question_id="q404", doc_id="d404")])
    assert [g.question_id for g in load_extra_golds(path)] == ["q404"]


# --- applying --------------------------------------------------------------------------------


def test_apply_adds_a_binary_gold_and_never_mutates_its_inputs():
    questions = list(QUESTIONS)
    extra = [gold()]
    before = [q.to_json() for q in questions]
    out = apply_extra_golds(questions, extra)
    assert [q.to_json() for q in questions] == before and extra == [gold()]
    assert out[0] is not questions[0]
    assert out[0].gold == ("d1", "d5") and out[0].relevance == {}  # binary stays binary: grade 1
    assert out[0].qrels() == {"d1": 1, "d5": 1}
    assert out[1] is questions[1] and out[2] is questions[2]  # untouched questions are the same objects
    assert [q.qid for q in out] == ["q1", "q2", "q3"]


def test_apply_graded_keeps_the_grade_and_the_original_golds():
    out = apply_extra_golds(QUESTIONS, [gold(grade=2)], graded=True)
    assert out[0].gold == ("d1", "d5") and out[0].qrels() == {"d1": 1, "d5": 2}


def test_a_graded_question_gets_the_lowest_relevant_grade_unless_graded():
    extra = [gold("q2", "d6", grade=3)]
    assert apply_extra_golds(QUESTIONS, extra)[1].qrels() == {"d2": 2, "d9": 0, "d6": 1}
    assert apply_extra_golds(QUESTIONS, extra, graded=True)[1].qrels() == {"d2": 2, "d9": 0, "d6": 3}


def test_an_accepted_gold_makes_an_abstention_question_answerable():
    out = apply_extra_golds(QUESTIONS, [gold("q3", "d7", grade=2)])
    assert not QUESTIONS[2].answerable and out[2].answerable and out[2].gold == ("d7",)


def test_an_original_gold_wins_so_importing_twice_is_harmless():
    once = apply_extra_golds(QUESTIONS, [gold()])
    twice = apply_extra_golds(once, [gold()])
    assert [q.to_json() for q in twice] == [q.to_json() for q in once]
    assert apply_extra_golds(QUESTIONS, [gold("q2", "d2", grade=3)], graded=True)[1].qrels()["d2"] == 2


@pytest.mark.parametrize(
    "extra, pattern",
    [
        ([gold("q2", "d9", source="review.jsonl:4")],
         (r"review.jsonl:4: question 'q2', document 'd9': the question set judges it not relevant \(grade 0\); "
          r"an extra gold never overwrites an original judgement")),
        ([gold("q404")], r"question 'q404' is not in the question set"),
        ([gold(grade=3, source="a:1"), gold(grade=2, source="a:2")], r"a:2: .* grade 2 conflicts with grade 3 \(a:1\)"),
        ([gold(accepted=False)], r"not accepted"),
        ([gold(grade=0)], r"grade 0 is not a relevant grade"),
        (["q1,d5"], r"must be ExtraGold records"),
    ],
)
def test_apply_refuses_what_it_cannot_apply(extra, pattern):
    with pytest.raises(ExtraGoldsError, match=pattern):
        apply_extra_golds(QUESTIONS, extra)


def test_the_same_gold_twice_is_applied_once():
    out = apply_extra_golds(QUESTIONS, [gold(), gold(source="other file")])
    assert out[0].gold == ("d1", "d5")


# --- fingerprints ----------------------------------------------------------------------------


def test_importing_golds_changes_the_labels_fingerprint_exactly_when_the_labels_change():
    base = labels_fingerprint(QUESTIONS)
    imported = apply_extra_golds(QUESTIONS, [gold()])
    assert labels_fingerprint(imported) != base
    # the same labels from another judge: same labels fingerprint, other provenance fingerprint
    by_person = [replace(gold(), judged_by="alice", prompt_version=None)]
    assert labels_fingerprint(apply_extra_golds(QUESTIONS, by_person)) == labels_fingerprint(imported)
    assert extra_golds_fingerprint(by_person) != extra_golds_fingerprint([gold()])
    # nothing new (already a gold): the labels, and so their fingerprint, stay
    assert labels_fingerprint(apply_extra_golds(QUESTIONS, [gold("q1", "d1")])) == base
    # binary labels keep no grade: another grade is the same label; graded labels do keep it
    assert labels_fingerprint(apply_extra_golds(QUESTIONS, [gold(grade=2)])) == labels_fingerprint(imported)
    assert (labels_fingerprint(apply_extra_golds(QUESTIONS, [gold(grade=2)], graded=True))
            != labels_fingerprint(apply_extra_golds(QUESTIONS, [gold(grade=3)], graded=True)))
    # the question-set fingerprint (which keys the ranking caches) changes too
    assert question_set_fingerprint(imported) != question_set_fingerprint(QUESTIONS)


def test_the_extra_golds_fingerprint_is_order_independent_and_ignores_text_and_location():
    a, b = gold(), gold("q2", "d6", grade=2)
    assert extra_golds_fingerprint([a, b]) == extra_golds_fingerprint([b, a])
    assert extra_golds_fingerprint([a]) == extra_golds_fingerprint([replace(a, reason="other", source="x:9")])
    assert extra_golds_fingerprint([a]) != extra_golds_fingerprint([replace(a, grade=2)])
    assert extra_golds_fingerprint([a]) != extra_golds_fingerprint([replace(a, prompt_version="hole-grade-0")])
    assert extra_golds_fingerprint([a]) != extra_golds_fingerprint([replace(a, accepted_by="bob")])
    assert extra_golds_fingerprint([]) != extra_golds_fingerprint([a]) and len(extra_golds_fingerprint([])) == 16


# --- metrics ---------------------------------------------------------------------------------


def ranked(rankings: dict[str, list[str]]) -> pd.DataFrame:
    """A hand-made ranked frame of one variant, in the columns score_variant reads."""
    return pd.DataFrame({"variant": "v1", "qid": list(rankings), "doc_ids": list(rankings.values()),
                         "scores": [[1.0 / (i + 1) for i in range(len(d))] for d in rankings.values()],
                         "latency_ms": 1.0, "error": None, "abstained": False})


def test_importing_a_reviewed_gold_changes_the_metrics_as_expected(tmp_path):
    """q1's top document d5 was unjudged: a miss at rank 1 until the reviewed gold is imported."""
    results = ranked({"q1": ["d5", "d1", "d7"], "q2": ["d6", "d2"], "q3": []})
    before = score_variant(results, QUESTIONS).set_index("qid")
    assert before.loc["q1", "hit@1"] == 0.0 and before.loc["q1", "mrr"] == 0.5
    assert before.loc["q2", "hit@1"] == 0.0

    # the LLM found d5 (q1) and d6 (q2); a person accepts d5 only
    grades = [HoleGrade("q1", "d5", 3, "It says how.", MODEL, HOLE_PROMPT_VERSION),
              HoleGrade("q2", "d6", 2, "The code is there.", MODEL, HOLE_PROMPT_VERSION),
              HoleGrade("q1", "d7", 0, "Unrelated.", MODEL, HOLE_PROMPT_VERSION)]
    path = tmp_path / "review.jsonl"
    write_review_file(path, review_rows(grades, questions=QUESTIONS, passages=DOCS))
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    assert [(r["question_id"], r["doc_id"]) for r in rows] == [("q1", "d5"), ("q2", "d6")]  # grade >= 2 only
    assert all(list(r) == list(REVIEW_FIELDS) and r["accept"] is False for r in rows)
    rows[0]["accept"] = True  # the person's review
    write_rows(path, rows)

    extra = load_extra_golds(path, questions=QUESTIONS, doc_ids=DOCS)
    imported = apply_extra_golds(QUESTIONS, extra)
    after = score_variant(results, imported).set_index("qid")
    assert after.loc["q1", "hit@1"] == 1.0 and after.loc["q1", "mrr"] == 1.0
    assert after.loc["q1", "recall@10"] == 1.0 and before.loc["q1", "recall@10"] == 1.0  # both golds found
    assert after.loc["q2", "hit@1"] == 0.0  # not accepted: still a miss at rank 1
    assert pd.isna(after.loc["q3", "hit@1"])  # abstention untouched
    assert labels_fingerprint(imported) != labels_fingerprint(QUESTIONS)
    assert after.loc["q1", "gold"] == ["d1", "d5"]


def test_results_ranked_before_an_import_are_refused_by_fingerprint():
    """What the pipeline does: ranked results carry the question-set fingerprint they were
    ranked for, and importing golds changes it, so a stale partition is not rescored."""
    results = ranked({"q1": ["d5"], "q2": ["d6"], "q3": []})
    results["questions_fingerprint"] = question_set_fingerprint(QUESTIONS)
    score_variant(results, QUESTIONS)
    with pytest.raises(ValueError, match="ranked for another question set"):
        score_variant(results, apply_extra_golds(QUESTIONS, [gold()]))


# --- the review file kept across rewrites ----------------------------------------------------


def test_rewriting_the_review_file_keeps_a_persons_decisions(tmp_path):
    grades = [HoleGrade("q1", "d5", 3, "r", MODEL, HOLE_PROMPT_VERSION),
              HoleGrade("q2", "d6", 2, "r", MODEL, HOLE_PROMPT_VERSION)]
    path = tmp_path / "review.jsonl"
    assert write_review_file(path, review_rows(grades, questions=QUESTIONS, passages=DOCS)) == 0
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    rows[0]["accept"] = True
    rows[0]["accepted_by"] = "bob"
    rows[1]["accept"] = True
    write_rows(path, rows)
    # the next run: d5 graded again (kept), d6 no longer a candidate (its accepted row stays)
    regraded = [HoleGrade("q1", "d5", 2, "again", MODEL, "hole-grade-2")]
    assert write_review_file(path, review_rows(regraded, questions=QUESTIONS, passages=DOCS)) == 2
    golds = load_extra_golds(path)
    assert [(g.doc_id, g.grade, g.prompt_version, g.accepted_by) for g in golds] == [
        ("d5", 2, "hole-grade-2", "bob"), ("d6", 2, HOLE_PROMPT_VERSION, None)]
    # without keep_decisions the file is replaced
    assert write_review_file(path, review_rows(regraded, questions=QUESTIONS, passages=DOCS),
                             keep_decisions=False) == 0
    assert load_extra_golds(path) == []


def test_a_review_file_broken_by_hand_is_not_overwritten(tmp_path):
    path = write_rows(tmp_path / "review.jsonl", [row(), '{"question_id": "q1", oops'])
    before = path.read_text(encoding="utf-8")
    with pytest.raises(ExtraGoldsError, match=":2: invalid JSON"):
        write_review_file(path, [])
    assert path.read_text(encoding="utf-8") == before


def test_review_rows_offer_only_unjudged_candidates_and_cut_the_passage():
    long_doc = {"d5": "word " * 400, "d9": "x"}
    grades = [HoleGrade("q1", "d5", 2, "r", MODEL, HOLE_PROMPT_VERSION),
              HoleGrade("q2", "d9", 3, "r", MODEL, HOLE_PROMPT_VERSION),  # judged (grade 0) by the set
              HoleGrade("q1", "d7", None, "", MODEL, HOLE_PROMPT_VERSION, status="unparseable")]
    (only,) = review_rows(grades, questions=QUESTIONS, passages=long_doc)
    assert only["doc_id"] == "d5" and only["passage"].endswith("word…")
    assert 490 < len(only["passage"]) <= 501  # the first 500 characters (a trailing space dropped), then "…"
    assert review_rows(grades, questions=QUESTIONS, passages=long_doc, min_grade=3) == []
    with pytest.raises(ValueError, match="no text for document 'd5'"):
        review_rows(grades, questions=QUESTIONS, passages={})


def test_an_accepted_gold_is_refused_when_its_question_was_reworded(tmp_path):
    """The document was judged for the question as it read then; a reworded question with the
    same id is another question, and the gold must not land on it."""
    from eval_pipeline.questions.extra_golds import ExtraGoldsError, load_extra_golds
    from eval_pipeline.questions.sets import Question

    path = tmp_path / "review.jsonl"
    path.write_text(json.dumps({"question_id": "q7", "question": "How do I reset my VPN token?", "doc_id": "vpn",
                                "grade": 3, "judged_by": "m@h", "accept": True}) + "\n")
    now = [Question(qid="q7", question="Where is the staff canteen?", gold=("canteen",))]
    with pytest.raises(ExtraGoldsError, match=r"review.jsonl:1: field 'question': the row was judged for "
                                              r"'How do I reset my VPN token\?', but question 'q7' now reads"):
        load_extra_golds(path, questions=now)
    same = [Question(qid="q7", question="How do I reset my VPN token?", gold=("canteen",))]
    assert [g.doc_id for g in load_extra_golds(path, questions=same)] == ["vpn"]
