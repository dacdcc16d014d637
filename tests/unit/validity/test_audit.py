"""Tests for eval_pipeline.validity.audit: the question-set audit.

The small corpus and questions below are worked by hand; the content words of each text are in
the comments (stems, NLTK stopwords and one-letter tokens dropped).
"""

from __future__ import annotations

import copy
import itertools
import json
import random
from fractions import Fraction
from types import MappingProxyType

import numpy as np
import pandas as pd
import pytest

from eval_pipeline.corpus.sources import CorpusSnapshot, Document, load_corpus
from eval_pipeline.validity.audit import (
    REASONS,
    AuditThresholds,
    audit_question_set,
    content_words,
    gold_ranks,
    metadata_engine_ranks,
    near_duplicate_pairs,
)
from eval_pipeline.questions.sets import Question, preflight_question_set

DOCS = (
    # {claim, day, expens, financ, md, receipt, requir, submit, thirti, within}
    Document("expenses", "Expense claims", "", "finance/expenses.md",
             "Submit expense claims within thirty days. Receipts are required."),
    # {behind, bicycl, facil, go, md, park, shed, staff, warehous}
    Document("parking", "Parking", "", "facilities/parking.md",
             "Staff parking is behind the warehouse. Bicycles go in the shed."),
    # {annual, day, five, get, holiday, leav, staff, twenti}
    Document("holidays", "Holidays", "", "", "Staff get twenty five days of annual leave."),
    Document("misc", "Misc notes", "", "", "Nothing here yet."),  # asked about by no question
)
SNAPSHOT = CorpusSnapshot(documents=DOCS, source="test")

QUESTIONS = (
    # {claim, day, expens, mani, submit}: 4 of 5 in `expenses` -> 0.8, at the cut
    Question("q1", "How many days do I have to submit expense claims?", ("expenses",), form="MATCH"),
    # {bike, leav}: none in `parking` -> 0.0
    Question("q2", "Where can I leave my bike?", ("parking",), form="GAP"),
    # {bicycl, put}: bicycl -> 0.5
    Question("q3", "Where do I put my bicycle?", ("parking",), form="GAP"),
    # {annual, day, get, leav, mani, staff}: all but mani in `holidays` -> 5/6
    Question("q4", "How many days of annual leave do staff get?", ("holidays",), form="MATCH"),
    # the same six words as q4: Jaccard 1 -> a near-duplicate pair, same gold; 5/6
    Question("q5", "How many annual leave days do staff get?", ("holidays",), form="MATCH"),
    # abstention: no leakage figure; {buy, laptop, old}
    Question("q6", "Can I buy my old laptop?", (), form="GAP", hard_class="abstention"),
    # {get, holiday, park, staff}: 2/4 in `parking`, 3/4 in `holidays` -> best gold holidays, 0.75
    Question("q7", "Do staff get parking and holidays?", ("parking", "holidays"), hard_class="multi-gold"),
)
# Metadata ranks as a caller would pass them: q4 and q7 have their gold first.
RANKS = {"q1": 3, "q2": None, "q3": None, "q4": 1, "q5": 2, "q7": 1}


def test_content_words_drop_stopwords_and_stem():
    assert content_words(["How many days do I have to submit expense claims?"]) == [
        frozenset({"mani", "day", "submit", "expens", "claim"})]
    assert content_words(["What is it?", ""]) == [frozenset(), frozenset()]


# ---------------------------------------------------------------------------
# The worked example
# ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def result():
    return audit_question_set(QUESTIONS, SNAPSHOT, metadata_ranks=RANKS)


def test_shares_of_abstention_forms_and_hard_classes(result):
    c = result.counts
    assert (c["questions"], c["answerable"], c["abstention"], c["multi_gold"]) == (7, 6, 1, 1)
    assert c["abstention_share"] == pytest.approx(1 / 7)
    assert (c["form_MATCH"], c["form_GAP"], c["form_none"]) == (3, 3, 1)  # q1 q4 q5 / q2 q3 q6 / q7
    assert c["form_none_share"] == pytest.approx(1 / 7)
    assert (c["hard_class_abstention"], c["hard_class_multi-gold"], c["hard_class_none"]) == (1, 1, 5)
    assert c["hard_class_none_share"] == pytest.approx(5 / 7)


def test_leakage_shares(result):
    c = result.counts
    shares = [0.8, 0.0, 0.5, 5 / 6, 5 / 6, 0.75]  # q1 q2 q3 q4 q5 q7; q6 is an abstention
    assert c["leakage_scored"] == 6 and c["leakage_no_content_words"] == 0
    assert c["overlap_share_mean"] == pytest.approx(sum(shares) / 6)
    assert c["overlap_share_median"] == pytest.approx((0.75 + 0.8) / 2)
    assert c["overlap_share_mean_MATCH"] == pytest.approx((0.8 + 5 / 6 + 5 / 6) / 3)
    assert c["overlap_share_mean_GAP"] == pytest.approx(0.25)
    assert c["high_overlap"] == 3  # q1 (0.8 counts: >= the cut), q4, q5


def test_surface_answerable_is_high_overlap_or_metadata_rank_1(result):
    c = result.counts
    assert (c["metadata_ranked"], c["metadata_rank_1"]) == (6, 2)  # q4, q7
    assert c["metadata_rank_1_share"] == pytest.approx(2 / 6)
    # {q1, q4, q5} | {q4, q7} = 4 of the 6 answerable questions
    assert c["surface_answerable"] == 4
    assert c["surface_answerable_share"] == pytest.approx(4 / 6)
    assert c["surface_answerable_share_MATCH"] == 1.0
    assert c["surface_answerable_share_GAP"] == 0.0
    assert c["surface_answerable_share_none"] == 1.0  # q7, by its metadata rank


def test_without_ranks_only_the_overlap_counts():
    r = audit_question_set(QUESTIONS, SNAPSHOT)
    assert "metadata_rank_1" not in r.counts
    assert r.counts["surface_answerable"] == 3
    assert r.counts["surface_answerable_share"] == 0.5  # not above max_surface_share 0.5
    assert all(f.metadata_rank is None for f in r.flagged)


def test_near_duplicate_pair(result):
    assert [(p.a, p.b, p.jaccard, p.same_gold) for p in result.near_duplicates] == [("q4", "q5", 1.0, True)]
    c = result.counts
    assert c["near_duplicate_pairs"] == 1 and c["near_duplicate_pairs_different_gold"] == 0
    assert c["near_duplicate_questions"] == 2
    assert c["near_duplicate_share"] == pytest.approx(2 / 7)


def test_coverage(result):
    assert result.questions_per_document == {"expenses": 1, "parking": 3, "holidays": 3, "misc": 0}
    assert result.documents_without_questions == ("misc",)
    c = result.counts
    assert (c["documents"], c["documents_with_questions"], c["documents_without_questions"]) == (4, 3, 1)
    assert c["documents_without_questions_share"] == 0.25
    assert c["gold_labels"] == 7  # q7 counts for both of its documents
    assert c["questions_per_document_min"] == 0 and c["questions_per_document_max"] == 3
    assert c["questions_per_document_median"] == 2.0
    assert c["top_decile_documents"] == 1  # ceil(4 / 10)
    assert c["top_decile_label_share"] == pytest.approx(3 / 7)
    # sorted [0, 1, 3, 3]: 2 * (1*0 + 2*1 + 3*3 + 4*3) / (4 * 7) - 5/4 = 46/28 - 35/28
    assert c["gini"] == pytest.approx(11 / 28)


def test_flagged_rows_and_problems(result):
    assert [(f.qid, f.reasons) for f in result.flagged] == [
        ("q1", ("surface_overlap",)),
        ("q4", ("surface_overlap", "metadata_rank_1", "near_duplicate")),
        ("q5", ("surface_overlap", "near_duplicate")),
        ("q7", ("metadata_rank_1",)),
    ]
    assert result.counts["flagged"] == 4
    q7 = result.flagged[-1]
    assert (q7.best_gold, q7.content_words, q7.shared_words, q7.overlap_share, q7.metadata_rank) == (
        "holidays", 4, 3, 0.75, 1)
    assert not result.passed and not result.blocking  # warning by default
    assert len(result.problems) == 2
    surface, duplicates = result.problems
    assert "4 of 6 answerable questions (66.7%)" in surface and "audit.max_surface_share 0.5" in surface
    assert "2 of 7 questions (28.6%)" in duplicates and "audit.max_near_duplicate_share 0.05" in duplicates
    # 1 of 4 documents without a question is exactly max_uncovered_document_share 0.25: not above it


def test_jsonl_rows(result):
    rows = result.to_jsonl_rows()
    assert [r["qid"] for r in rows] == ["q1", "q4", "q5", "q7"]
    assert rows[1] == {
        "qid": "q4",
        "question": "How many days of annual leave do staff get?",
        "gold": ["holidays"],
        "form": "MATCH",
        "hard_class": None,
        "reasons": ["surface_overlap", "metadata_rank_1", "near_duplicate"],
        "overlap_share": pytest.approx(5 / 6),
        "best_gold": "holidays",
        "content_words": 6,
        "shared_words": 5,
        "metadata_rank": 1,
        "near_duplicates": [{"qid": "q5", "jaccard": 1.0}],
    }
    for row in rows:
        assert json.loads(json.dumps(row)) == row
        assert set(row["reasons"]) <= set(REASONS)


def test_counts_are_plain_numbers(result):
    for key, value in result.counts.items():
        assert type(value) in (int, float), key


def test_stricter_thresholds_and_blocking():
    t = AuditThresholds(max_uncovered_document_share=0.2, max_surface_share=1.0, max_near_duplicate_share=1.0,
                        blocking=True)
    r = audit_question_set(QUESTIONS, SNAPSHOT, metadata_ranks=RANKS, thresholds=t)
    assert r.problems == ("1 of 4 documents (25.0%) have no question, above audit.max_uncovered_document_share 0.2",)
    assert r.blocking and r.thresholds is t
    passing = audit_question_set(QUESTIONS, SNAPSHOT, thresholds=AuditThresholds(
        max_surface_share=1.0, max_near_duplicate_share=1.0, blocking=True))
    assert passing.passed and not passing.blocking


def test_a_lower_near_duplicate_cut_finds_more_pairs():
    # q4/q7 share {get, staff} of 8 words -> 1/4; q1/q4 share {day, mani} of 9 -> 2/9
    r = audit_question_set(QUESTIONS, SNAPSHOT, thresholds=AuditThresholds(near_duplicate=0.25))
    assert [(p.a, p.b) for p in r.near_duplicates] == [("q4", "q5"), ("q4", "q7"), ("q5", "q7")]
    assert r.counts["near_duplicate_pairs_different_gold"] == 2


def test_a_question_without_content_words_has_no_share():
    qs = (Question("a", "What is it?", ("misc",)), Question("b", "Misc notes?", ("misc",)))
    r = audit_question_set(qs, SNAPSHOT)
    assert r.counts["leakage_scored"] == 1 and r.counts["leakage_no_content_words"] == 1
    assert [f.qid for f in r.flagged] == ["b"]  # {misc, note}: both in the document


def test_inputs_are_not_mutated():
    questions = list(QUESTIONS)
    before = (copy.deepcopy(questions), copy.deepcopy(SNAPSHOT), dict(RANKS))
    ranks = MappingProxyType(dict(RANKS))  # a read-only mapping is enough
    audit_question_set(questions, SNAPSHOT, metadata_ranks=ranks)
    assert (questions, SNAPSHOT, dict(ranks)) == before


@pytest.mark.parametrize("ranks, message", [
    ({"q1": 0}, "metadata rank of question 'q1' must be a positive integer or None, got 0"),
    ({"q1": 1.5}, "must be a positive integer or None"),
    ({"q1": True}, "must be a positive integer or None"),
    ({"nope": 1}, "not in the set: ['nope']"),
])
def test_bad_ranks_are_errors(ranks, message):
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("]", r"\]")):
        audit_question_set(QUESTIONS, SNAPSHOT, metadata_ranks=ranks)


def test_a_gold_document_outside_the_snapshot_is_an_error():
    with pytest.raises(ValueError, match=r"question 'x': gold document\(s\) not in the corpus snapshot: \['gone'\]"):
        audit_question_set([Question("x", "Where did it go?", ("gone",))], SNAPSHOT)


# ---------------------------------------------------------------------------
# Thresholds
# ---------------------------------------------------------------------------


def test_threshold_defaults_and_mapping():
    assert AuditThresholds.from_mapping(None, "v.yaml") == AuditThresholds()
    t = AuditThresholds.from_mapping({"max_surface_share": 0.3, "blocking": True, "near_duplicate": 1}, "v.yaml")
    assert (t.max_surface_share, t.blocking, t.near_duplicate) == (0.3, True, 1.0)
    assert isinstance(t.near_duplicate, float)
    assert t.to_dict() == {"leakage_share": 0.8, "near_duplicate": 1.0, "max_surface_share": 0.3,
                           "max_near_duplicate_share": 0.05, "max_uncovered_document_share": 0.25, "blocking": True}


@pytest.mark.parametrize("raw, message", [
    ({"max_surface_share": 1.5}, "v.yaml:12: audit.max_surface_share must be a number from 0 to 1, got 1.5"),
    ({"max_near_duplicate_share": -0.1}, "v.yaml:12: audit.max_near_duplicate_share must be a number from 0 to 1"),
    ({"max_uncovered_document_share": "0.2"},
     "v.yaml:12: audit.max_uncovered_document_share must be a number, got '0.2'"),
    ({"leakage_share": 0}, "v.yaml:12: audit.leakage_share must be greater than 0 and at most 1, got 0.0"),
    ({"near_duplicate": float("nan")}, "v.yaml:12: audit.near_duplicate must be a number, got nan"),
    ({"leakage_share": True}, "v.yaml:12: audit.leakage_share must be a number, got True"),
    ({"blocking": "yes"}, "v.yaml:12: audit.blocking must be true or false, got 'yes'"),
    ({"max_surface": 0.5}, "v.yaml:12: unknown audit setting(s) ['max_surface']; valid: leakage_share, near_duplicate"),
    ([0.5], "v.yaml:12: audit must be a mapping of thresholds (leakage_share, "),
])
def test_threshold_errors_name_the_source_and_field(raw, message):
    with pytest.raises(ValueError) as info:
        AuditThresholds.from_mapping(raw, "v.yaml:12")
    assert str(info.value).startswith(message)


def test_thresholds_built_directly_are_checked_too():
    with pytest.raises(ValueError, match="AuditThresholds: audit.max_surface_share must be a number from 0 to 1"):
        AuditThresholds(max_surface_share=2)


# ---------------------------------------------------------------------------
# Near-duplicate pairs
# ---------------------------------------------------------------------------


def _brute_force(sets, t):
    out = []
    for a, b in itertools.combinations(sets, 2):
        x, y = sets[a], sets[b]
        if x and y and Fraction(len(x & y), len(x | y)) >= t:
            out.append(tuple(sorted((a, b), key=lambda q: (0, int(q), "") if q.isdigit() else (1, 0, q))))
    return sorted(out, key=lambda p: tuple((0, int(q), "") if q.isdigit() else (1, 0, q) for q in p))


@pytest.mark.parametrize("threshold", [0.3, 0.5, 2 / 3, 0.8, 1.0])
def test_prefix_filtering_finds_what_all_pairs_find(threshold):
    rng = random.Random(7)
    vocab = [f"w{i}" for i in range(40)]
    sets = {str(i): frozenset(rng.sample(vocab, rng.randint(0, 7))) for i in range(250)}
    found = near_duplicate_pairs(sets, threshold)
    assert [(a, b) for a, b, _ in found] == _brute_force(sets, Fraction(repr(threshold)))
    assert all(j >= threshold - 1e-12 for _, _, j in found)


def test_pairs_are_lower_id_first_and_the_cut_is_exact():
    sets = {"10": frozenset("abcde"), "9": frozenset("abcd"), "x": frozenset("vwxyz")}
    # {a,b,c,d} vs {a,b,c,d,e}: 4/5, exactly the default 0.8 (as a float 0.8 is a hair above 4/5)
    assert near_duplicate_pairs(sets, 0.8) == [("9", "10", 0.8)]
    assert near_duplicate_pairs(sets, 0.81) == []


def test_a_bad_near_duplicate_cut_is_an_error():
    with pytest.raises(ValueError, match="greater than 0 and at most 1"):
        near_duplicate_pairs({}, 0)


# ---------------------------------------------------------------------------
# Gold ranks
# ---------------------------------------------------------------------------


def test_gold_ranks_read_a_ranked_results_frame():
    frame = pd.DataFrame({
        "variant": ["metadata"] * 5,
        "qid": ["q1", "q2", "q6", "q7", "q4"],
        "doc_ids": [["parking", "expenses"], [], [], np.array(["misc", "holidays", "parking"]), ["holidays"]],
        "error": [None, None, None, None, "TimeoutError: slow"],
    })
    # q1: rank 2; q2: not in the list; q6 abstention left out; q7: the better of its golds (2);
    # q4 errored and q3, q5 absent: unknown, left out
    assert gold_ranks(frame, QUESTIONS) == {"q1": 2, "q2": None, "q7": 2}
    frame["error"] = float("nan")  # a parquet round trip writes NaN for no error
    assert gold_ranks(frame, QUESTIONS)["q4"] == 1


def test_gold_ranks_refuse_an_ambiguous_frame():
    two = pd.DataFrame({"variant": ["a", "b"], "qid": ["q1", "q2"], "doc_ids": [[], []]})
    with pytest.raises(ValueError, match=r"2 variants \(a, b\)"):
        gold_ranks(two, QUESTIONS)
    twice = pd.DataFrame({"qid": ["q1", "q1"], "doc_ids": [[], []]})
    with pytest.raises(ValueError, match="question 'q1' twice"):
        gold_ranks(twice, QUESTIONS)
    with pytest.raises(ValueError, match="no 'doc_ids' column"):
        gold_ranks(pd.DataFrame({"qid": ["q1"]}), QUESTIONS)


def test_metadata_engine_ranks():
    ranks = metadata_engine_ranks(QUESTIONS, SNAPSHOT)
    assert "q6" not in ranks  # abstention
    assert ranks["q2"] is None  # "leave", "bike": in no title, description or filename
    # "parking" in the title (4 + 1) and filename (3 + 0.75) beats "holidays" in a title (4 + 1)
    assert ranks["q7"] == 1
    assert ranks["q1"] == 1  # "expense", "claims" in the title of `expenses`
    with pytest.raises(ValueError, match="depth must be a positive integer"):
        metadata_engine_ranks(QUESTIONS, SNAPSHOT, depth=0)


# ---------------------------------------------------------------------------
# The demo set
# ---------------------------------------------------------------------------


def test_the_demo_question_set_passes_the_default_audit():
    snapshot = load_corpus("demo")
    qs = preflight_question_set("file", None, corpus_signature=snapshot.signature,
                                doc_ids=[d.doc_id for d in snapshot.documents], corpus_source="demo")
    r = audit_question_set(qs.questions, snapshot, metadata_ranks=metadata_engine_ranks(qs.questions, snapshot))
    assert r.passed, r.problems
    assert r.counts["documents_without_questions"] == 0 and r.counts["near_duplicate_pairs"] == 0
    # MATCH questions reuse their document's words by design, GAP questions avoid them
    assert r.counts["overlap_share_mean_MATCH"] > r.counts["overlap_share_mean_GAP"] + 0.25


def test_gold_ranks_treat_pandas_missing_values_as_no_error():
    frame = pd.DataFrame({"qid": ["q1", "q4"], "doc_ids": [["expenses"], ["holidays"]],
                          "error": pd.array([pd.NA, "boom"], dtype="string")})
    assert gold_ranks(frame, QUESTIONS) == {"q1": 1}


def test_a_hard_class_of_none_or_empty_is_no_class():
    qs = (Question("a", "Misc notes?", ("misc",), hard_class=""), Question("b", "Misc notes now?", ("misc",),
                                                                            hard_class="none"))
    c = audit_question_set(qs, SNAPSHOT).counts
    assert c["hard_class_none"] == 2 and "hard_class_" not in c


def test_the_result_pickles(result):
    import pickle

    assert pickle.loads(pickle.dumps(result)) == result  # an IO manager may store it


def test_a_metadata_route_must_be_earned_not_won_by_a_stopword_or_a_tie_break():
    from eval_pipeline.validity.audit import metadata_engine_ranks

    docs = (
        Document("a-leave", "Leave and absence", "", "hr/leave.md", "Annual leave is 25 days."),
        Document("b-bikes", "Bikes and lockers", "", "fac/bikes.md", "The cage is by the south door."),
        Document("c-vpn", "VPN setup", "", "it/vpn.md", "Install the client."),
        Document("d-vpn", "VPN setup", "", "it/vpn.md", "Older notes."),
    )
    snapshot = CorpusSnapshot(documents=docs, source="test")
    questions = [
        Question(qid="stop", question="where and when", gold=("a-leave",)),       # shares only "and"
        Question(qid="tie", question="vpn setup steps", gold=("c-vpn",)),        # tied with d-vpn
        Question(qid="won", question="bikes lockers where", gold=("b-bikes",)),  # ahead on content words
    ]
    ranks = metadata_engine_ranks(questions, snapshot)
    assert ranks["stop"] is None  # no content word in common: no surface route
    assert ranks["tie"] == 2  # the tie's last place, whatever the doc-id tie-break says
    assert ranks["won"] == 1


def test_a_limited_run_is_audited_on_its_questions_without_judging_coverage_or_blocking():
    from eval_pipeline.corpus.sources import DEMO_DATA_DIR
    from eval_pipeline.validity.audit import run_audit

    snapshot = load_corpus("demo")
    qs = preflight_question_set("file", str(DEMO_DATA_DIR / "questions.jsonl"), corpus_signature=snapshot.signature,
                                doc_ids=[d.doc_id for d in snapshot.documents], limit=50)
    strict = AuditThresholds(blocking=True)
    assert any("max_uncovered_document_share" in p for p in run_audit(qs.questions, snapshot, strict).problems)
    quick = run_audit(qs.questions, snapshot, strict, limited=True)
    assert not any("max_uncovered_document_share" in p for p in quick.problems)
    assert quick.thresholds.blocking is False and not quick.blocking
