"""Tests for eval_pipeline.metrics.retrieval.

Expected values are computed by hand in the comments next to each case.
The parity test compares against pytrec_eval (pytrec-eval-terrier), i.e. trec_eval.
"""

from __future__ import annotations

import copy
import math
import random
from types import MappingProxyType

import pandas as pd
import pytest

from eval_pipeline.metrics.retrieval import (
    DEFAULT_KS,
    aggregate,
    average_precision,
    hit_at_k,
    ndcg_at_k,
    precision_at_k,
    rank_by_score,
    recall_at_k,
    reciprocal_rank,
    score_queries,
)

ALL_K_METRICS = (hit_at_k, recall_at_k, precision_at_k, ndcg_at_k)
OPTIONAL_K_METRICS = (reciprocal_rank, average_precision)
ALL_METRICS = ALL_K_METRICS + OPTIONAL_K_METRICS

LOG2_3 = math.log2(3)  # discount at rank 2 = 1.5849625007211563
LOG2_5 = math.log2(5)  # discount at rank 4 = 2.321928094887362


# ---------------------------------------------------------------------------
# Worked example 1: ranking [a, b, c, d], relevant {b: 1, d: 2}
#   ranks: a=1 (rel 0), b=2 (rel 1), c=3 (rel 0), d=4 (rel 2); R = 2
# ---------------------------------------------------------------------------
R1 = ["a", "b", "c", "d"]
Q1 = {"b": 1, "d": 2}


def test_example1_hit():
    # top1 = [a] -> no relevant; top2 = [a, b] -> b relevant
    assert hit_at_k(R1, Q1, 1) == 0.0
    assert hit_at_k(R1, Q1, 2) == 1.0
    assert hit_at_k(R1, Q1, 10) == 1.0


def test_example1_reciprocal_rank():
    # first relevant is b at rank 2 -> 1/2
    assert reciprocal_rank(R1, Q1) == 0.5
    # within k=1 nothing relevant -> 0; within k=2 -> 1/2
    assert reciprocal_rank(R1, Q1, k=1) == 0.0
    assert reciprocal_rank(R1, Q1, k=2) == 0.5


def test_example1_recall():
    # top1: 0/2; top2: {b} 1/2; top3: 1/2; top4: {b, d} 2/2
    assert recall_at_k(R1, Q1, 1) == 0.0
    assert recall_at_k(R1, Q1, 2) == 0.5
    assert recall_at_k(R1, Q1, 3) == 0.5
    assert recall_at_k(R1, Q1, 4) == 1.0
    assert recall_at_k(R1, Q1, 100) == 1.0


def test_example1_precision():
    # P@1 = 0/1; P@2 = 1/2; P@4 = 2/4
    # P@5 = 2/5 and P@10 = 2/10: trec_eval divides by k even though only 4 retrieved
    assert precision_at_k(R1, Q1, 1) == 0.0
    assert precision_at_k(R1, Q1, 2) == 0.5
    assert precision_at_k(R1, Q1, 4) == 0.5
    assert precision_at_k(R1, Q1, 5) == pytest.approx(0.4, abs=1e-12)
    assert precision_at_k(R1, Q1, 10) == pytest.approx(0.2, abs=1e-12)


def test_example1_average_precision():
    # relevant at rank 2 (P@2 = 1/2) and rank 4 (P@4 = 2/4)
    # AP = (1/2 + 2/4) / R = 1.0 / 2 = 0.5
    assert average_precision(R1, Q1) == pytest.approx(0.5, abs=1e-12)
    # cut at k=3: only b counts -> (1/2) / 2 = 0.25 (denominator stays R = 2)
    assert average_precision(R1, Q1, k=3) == pytest.approx(0.25, abs=1e-12)
    # cut at k=1: nothing -> 0
    assert average_precision(R1, Q1, k=1) == 0.0


def test_example1_ndcg():
    # DCG@10  = 1/log2(2+1) + 2/log2(4+1) = 0.6309297536 + 0.8613531161 = 1.4922828697
    # IDCG@10 = ideal grades [2, 1]: 2/log2(2) + 1/log2(3) = 2 + 0.6309297536 = 2.6309297536
    # nDCG@10 = 1.4922828697 / 2.6309297536 = 0.5672074...
    expected = (1 / LOG2_3 + 2 / LOG2_5) / (2 + 1 / LOG2_3)
    assert expected == pytest.approx(0.567207, abs=1e-6)
    assert ndcg_at_k(R1, Q1, 10) == pytest.approx(expected, abs=1e-12)
    # nDCG@1: top1 = [a] -> DCG 0 -> 0
    assert ndcg_at_k(R1, Q1, 1) == 0.0
    # nDCG@2: DCG = 1/log2(3) = 0.6309297...; IDCG@2 = 2 + 1/log2(3) = 2.6309297...
    #         -> 0.2398124...
    assert ndcg_at_k(R1, Q1, 2) == pytest.approx((1 / LOG2_3) / (2 + 1 / LOG2_3), abs=1e-12)
    assert ndcg_at_k(R1, Q1, 2) == pytest.approx(0.239812, abs=1e-6)


# ---------------------------------------------------------------------------
# Worked example 2: several gold documents, graded relevance, a grade-0 judgment
#   qrels {a: 3, x: 2, y: 1, z: 0}  -> relevant {a, x, y}, R = 3 (z is judged non-relevant)
#   ranking [a, z, y, q]            -> a rank 1 (3), z rank 2 (0), y rank 3 (1), q unjudged
# ---------------------------------------------------------------------------
R2 = ["a", "z", "y", "q"]
Q2 = {"a": 3, "x": 2, "y": 1, "z": 0}


def test_example2_graded_multi_gold():
    assert hit_at_k(R2, Q2, 1) == 1.0
    assert reciprocal_rank(R2, Q2) == 1.0
    # recall@2: {a} 1/3; recall@4: {a, y} 2/3
    assert recall_at_k(R2, Q2, 2) == pytest.approx(1 / 3, abs=1e-12)
    assert recall_at_k(R2, Q2, 4) == pytest.approx(2 / 3, abs=1e-12)
    # P@4 = 2/4
    assert precision_at_k(R2, Q2, 4) == 0.5
    # AP = (P@1 + P@3) / 3 = (1/1 + 2/3) / 3 = 5/9 = 0.5555...
    assert average_precision(R2, Q2) == pytest.approx(5 / 9, abs=1e-12)
    # nDCG@3: DCG  = 3/log2(2) + 0/log2(3) + 1/log2(4) = 3 + 0 + 0.5 = 3.5
    #         IDCG = 3/log2(2) + 2/log2(3) + 1/log2(4) = 3 + 1.2618595071 + 0.5 = 4.7618595071
    #         nDCG = 3.5 / 4.7618595071 = 0.7350070...
    assert ndcg_at_k(R2, Q2, 3) == pytest.approx(3.5 / (3.5 + 2 / LOG2_3), abs=1e-12)
    assert ndcg_at_k(R2, Q2, 3) == pytest.approx(0.735007, abs=1e-6)


def test_graded_gain_is_linear():
    # One relevant doc at rank 1 either way, but the ideal contains a grade-3 doc.
    # ranking [low], qrels {low: 1, high: 3}
    #   DCG@2 = 1/log2(2) = 1; IDCG@2 = 3/1 + 1/log2(3) = 3.6309297...; nDCG = 0.2754...
    q = {"low": 1, "high": 3}
    assert ndcg_at_k(["low"], q, 2) == pytest.approx(1 / (3 + 1 / LOG2_3), abs=1e-12)
    # ranking [high]: DCG@2 = 3; same IDCG -> 3 / 3.6309297 = 0.8262...
    assert ndcg_at_k(["high"], q, 2) == pytest.approx(3 / (3 + 1 / LOG2_3), abs=1e-12)
    # perfect ranking -> 1
    assert ndcg_at_k(["high", "low"], q, 2) == pytest.approx(1.0, abs=1e-12)


def test_ideal_uses_unretrieved_judged_docs():
    # ideal is built from ALL judged grades > 0, not only those retrieved.
    # ranking [a] with qrels {a: 1, b: 1}: DCG@5 = 1; IDCG@5 = 1 + 1/log2(3) -> 0.6131471...
    assert ndcg_at_k(["a"], {"a": 1, "b": 1}, 5) == pytest.approx(1 / (1 + 1 / LOG2_3), abs=1e-12)


def test_negative_grades_are_not_relevant_and_give_no_gain():
    # qrels {a: -1, b: 1}; ranking [a, b] -> b at rank 2
    q = {"a": -1, "b": 1}
    assert reciprocal_rank(["a", "b"], q) == 0.5
    assert recall_at_k(["a", "b"], q, 1) == 0.0
    # DCG@2 = 0 + 1/log2(3); IDCG@2 = 1 (only b) -> 0.6309297...
    assert ndcg_at_k(["a", "b"], q, 2) == pytest.approx(1 / LOG2_3, abs=1e-12)


# ---------------------------------------------------------------------------
# Edge cases
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("ranking", [[], ()])
def test_empty_ranking_scores_zero(ranking):
    q = {"a": 1}
    for f in ALL_K_METRICS:
        assert f(ranking, q, 5) == 0.0, f.__name__
    for f in OPTIONAL_K_METRICS:
        assert f(ranking, q) == 0.0, f.__name__
        assert f(ranking, q, 3) == 0.0, f.__name__


def test_k_larger_than_ranking():
    # ranking [x, a], qrels {a: 1}; k = 50
    r, q = ["x", "a"], {"a": 1}
    assert hit_at_k(r, q, 50) == 1.0
    assert recall_at_k(r, q, 50) == 1.0
    assert precision_at_k(r, q, 50) == pytest.approx(1 / 50, abs=1e-12)  # divides by k
    assert reciprocal_rank(r, q, 50) == 0.5
    assert average_precision(r, q, 50) == 0.5  # P@2 = 1/2, R = 1
    # DCG = 1/log2(3); IDCG = 1 -> 0.6309...
    assert ndcg_at_k(r, q, 50) == pytest.approx(1 / LOG2_3, abs=1e-12)


def test_duplicates_only_first_occurrence_counts():
    # [a, b, a, c] is scored as [a, b, c]; qrels {c: 1, b: 1}
    dup = ["a", "b", "a", "c"]
    clean = ["a", "b", "c"]
    q = {"c": 1, "b": 1}
    for f in ALL_K_METRICS:
        for k in (1, 2, 3, 4, 10):
            assert f(dup, q, k) == f(clean, q, k), (f.__name__, k)
    for f in OPTIONAL_K_METRICS:
        assert f(dup, q) == f(clean, q), f.__name__
    # c has rank 3 (not 4): top3 of dedup = [a, b, c] -> recall 2/2, P@3 = 2/3
    assert recall_at_k(dup, q, 3) == 1.0
    assert precision_at_k(dup, q, 3) == pytest.approx(2 / 3, abs=1e-12)
    # AP = (1/2 + 2/3) / 2 = 7/12
    assert average_precision(dup, q) == pytest.approx(7 / 12, abs=1e-12)


def test_duplicate_relevant_doc_not_counted_twice():
    # [b, b, x] with qrels {b: 2, c: 1}: the second b must not add gain or recall
    r, q = ["b", "b", "x"], {"b": 2, "c": 1}
    assert recall_at_k(r, q, 3) == 0.5
    assert precision_at_k(r, q, 2) == 0.5
    assert average_precision(r, q) == 0.5  # (1/1) / 2
    # DCG@3 = 2/1 = 2; IDCG@3 = 2 + 1/log2(3)
    assert ndcg_at_k(r, q, 3) == pytest.approx(2 / (2 + 1 / LOG2_3), abs=1e-12)


@pytest.mark.parametrize("bad_k", [0, -1, 1.0, 2.5, "3", True, None])
def test_invalid_k_raises_naming_k(bad_k):
    for f in ALL_K_METRICS:
        with pytest.raises(ValueError, match=r"\bk\b"):
            f(R1, Q1, bad_k)
    if bad_k is not None:  # None means "no cutoff" for RR and AP
        for f in OPTIONAL_K_METRICS:
            with pytest.raises(ValueError, match=r"\bk\b"):
                f(R1, Q1, bad_k)


@pytest.mark.parametrize("qrels", [{}, {"a": 0}, {"a": 0, "b": -1}])
def test_no_relevant_docs_raises(qrels):
    for ranking in (["a", "b"], []):
        for f in ALL_K_METRICS:
            with pytest.raises(ValueError, match="no relevant documents"):
                f(ranking, qrels, 5)
        for f in OPTIONAL_K_METRICS:
            with pytest.raises(ValueError, match="no relevant documents"):
                f(ranking, qrels)


def test_string_ranking_rejected():
    with pytest.raises(TypeError):
        hit_at_k("abc", {"a": 1}, 1)


def test_inputs_not_mutated():
    ranking = ["d", "a", "d", "b", "c"]
    qrels = {"a": 2, "b": 0, "c": 1, "zz": 3}
    r0, q0 = copy.deepcopy(ranking), copy.deepcopy(qrels)
    for f in ALL_K_METRICS:
        f(ranking, qrels, 3)
    for f in OPTIONAL_K_METRICS:
        f(ranking, qrels)
        f(ranking, qrels, 2)
    assert ranking == r0 and qrels == q0
    # immutable inputs work too (would raise if the code tried to mutate them)
    frozen_r, frozen_q = tuple(ranking), MappingProxyType(qrels)
    assert ndcg_at_k(frozen_r, frozen_q, 3) == ndcg_at_k(ranking, qrels, 3)
    assert average_precision(frozen_r, frozen_q) == average_precision(ranking, qrels)

    scores = {"b": 1.0, "a": 1.0, "c": 2.0}
    s0 = dict(scores)
    rank_by_score(scores)
    assert scores == s0 and list(scores) == list(s0)

    rankings = {"q1": ["a", "a", "b"], "q2": ["x"]}
    run_qrels = {"q1": {"a": 1}, "q2": {"x": 0}, "q3": {"y": 1}}
    errored = ["q2"]
    snap = copy.deepcopy((rankings, run_qrels, errored))
    per_query = score_queries(rankings, run_qrels, errored)
    assert (rankings, run_qrels, errored) == snap
    pq0 = per_query.copy(deep=True)
    aggregate(per_query)
    pd.testing.assert_frame_equal(per_query, pq0)


# ---------------------------------------------------------------------------
# rank_by_score
# ---------------------------------------------------------------------------


def test_rank_by_score_descending():
    assert rank_by_score({"a": 0.1, "b": 0.9, "c": 0.5}) == ["b", "c", "a"]
    assert rank_by_score({}) == []


def test_rank_by_score_ties_by_doc_id_ascending():
    # b and a tie at 1.0 -> a before b; d, c, e tie at 0.0 -> c, d, e
    scores = {"b": 1.0, "d": 0.0, "a": 1.0, "e": 0.0, "top": 5.0, "c": 0.0}
    assert rank_by_score(scores) == ["top", "a", "b", "c", "d", "e"]
    # independent of insertion order
    assert rank_by_score(dict(reversed(list(scores.items())))) == ["top", "a", "b", "c", "d", "e"]


def test_tie_rule_changes_metric_and_differs_from_trec_eval():
    # Project rule: ties by doc id ASCENDING. trec_eval breaks ties by docno DESCENDING.
    # scores {d1: 1.0, d2: 1.0}, only d2 relevant:
    #   ours:       [d1, d2] -> RR = 1/2
    #   trec_eval:  [d2, d1] -> RR = 1
    scores = {"d2": 1.0, "d1": 1.0}
    q = {"d2": 1}
    ranking = rank_by_score(scores)
    assert ranking == ["d1", "d2"]
    assert reciprocal_rank(ranking, q) == 0.5


def test_tie_rule_vs_pytrec_eval():
    pytrec_eval = pytest.importorskip("pytrec_eval")
    scores = {"d2": 1.0, "d1": 1.0}
    q = {"d2": 1}
    ev = pytrec_eval.RelevanceEvaluator({"q": q}, {"recip_rank"})
    theirs = ev.evaluate({"q": scores})["q"]["recip_rank"]
    ours = reciprocal_rank(rank_by_score(scores), q)
    # trec_eval sorts the tie by docno descending -> d2 first -> RR 1.0; we put d1 first
    assert theirs == 1.0
    assert ours == 0.5


@pytest.mark.parametrize("bad", [float("nan"), math.nan])
def test_rank_by_score_nan_raises_naming_doc(bad):
    with pytest.raises(ValueError, match="doc-7"):
        rank_by_score({"doc-1": 1.0, "doc-7": bad})


def test_rank_by_score_infinities_ok():
    assert rank_by_score({"a": -math.inf, "b": math.inf, "c": 0}) == ["b", "c", "a"]


# ---------------------------------------------------------------------------
# score_queries / aggregate
# ---------------------------------------------------------------------------


def _run():
    qrels = {
        "q1": {"a": 1},             # answerable, hit at rank 1
        "q2": {"b": 1, "c": 1},     # answerable, errored -> miss
        "q3": {"d": 2},             # answerable, missing from rankings -> miss
        "q4": {},                   # abstention, engine returned nothing -> correct
        "q5": {"z": 0},             # abstention, engine returned docs -> not correct
        "q6": {"e": 1},             # answerable, relevant at rank 2
    }
    rankings = {
        "q1": ["a", "x"],
        "q2": ["b", "c"],           # ignored: q2 errored
        "q4": [],
        "q5": ["z", "y"],
        "q6": ["x", "e", "e"],
    }
    return rankings, qrels, ["q2"]


def test_score_queries_rows_and_columns():
    rankings, qrels, errored = _run()
    df = score_queries(rankings, qrels, errored, ks=(1, 3))
    assert list(df["qid"]) == ["q1", "q2", "q3", "q4", "q5", "q6"]
    assert list(df.columns) == [
        "qid", "answerable", "errored", "returned", "first_relevant_rank",
        "hit@1", "hit@3", "recall@1", "recall@3", "mrr", "ndcg@10", "map",
    ]
    assert list(df["answerable"]) == [True, True, True, False, False, True]
    assert list(df["errored"]) == [False, True, False, False, False, False]
    # errored and missing queries are scored as empty rankings; q6 deduplicated to [x, e]
    assert list(df["returned"]) == [2, 0, 0, 0, 2, 2]
    assert list(df["first_relevant_rank"]) == [1, None, None, None, None, 2]
    assert df["answerable"].dtype == bool and df["errored"].dtype == bool
    assert df["returned"].dtype == "int64"
    for col in ("hit@1", "hit@3", "recall@1", "recall@3", "mrr", "ndcg@10", "map"):
        assert df[col].dtype == "float64"


def test_score_queries_values():
    rankings, qrels, errored = _run()
    df = score_queries(rankings, qrels, errored, ks=(1, 3)).set_index("qid")
    # q1: [a, x], rel {a} -> everything 1
    assert df.loc["q1", ["hit@1", "hit@3", "recall@1", "recall@3", "mrr", "ndcg@10", "map"]].tolist() == [1.0] * 7
    # q2 (errored) and q3 (missing): misses, 0 everywhere (not NaN)
    for qid in ("q2", "q3"):
        assert df.loc[qid, ["hit@1", "hit@3", "recall@1", "recall@3", "mrr", "ndcg@10", "map"]].tolist() == [0.0] * 7
    # q6: [x, e], rel {e} at rank 2: hit@1 0, hit@3 1, mrr 1/2, ndcg 1/log2(3), map 1/2
    assert df.loc["q6", "hit@1"] == 0.0
    assert df.loc["q6", "hit@3"] == 1.0
    assert df.loc["q6", "recall@3"] == 1.0
    assert df.loc["q6", "mrr"] == 0.5
    assert df.loc["q6", "ndcg@10"] == pytest.approx(1 / LOG2_3, abs=1e-12)
    assert df.loc["q6", "map"] == 0.5
    # abstention queries: NaN metrics
    for qid in ("q4", "q5"):
        assert df.loc[qid, ["hit@1", "hit@3", "recall@1", "recall@3", "mrr", "ndcg@10", "map"]].isna().all()


def test_score_queries_default_ks():
    df = score_queries({"q": ["a"]}, {"q": {"a": 1}})
    for k in DEFAULT_KS:
        assert f"hit@{k}" in df.columns and f"recall@{k}" in df.columns


def test_aggregate():
    rankings, qrels, errored = _run()
    agg = aggregate(score_queries(rankings, qrels, errored, ks=(1, 3)))
    # answerable = q1, q2, q3, q6 (4); errored q2 and missing q3 are misses IN the denominator
    # hit@1: q1 1, q2 0, q3 0, q6 0 -> 1/4
    # hit@3: 1, 0, 0, 1 -> 2/4
    # mrr:   1, 0, 0, 1/2 -> 1.5/4 = 0.375
    # ndcg@10: 1, 0, 0, 1/log2(3) -> (1 + 0.6309297536) / 4 = 0.4077324...
    assert agg["hit@1"] == pytest.approx(0.25, abs=1e-12)
    assert agg["hit@3"] == pytest.approx(0.5, abs=1e-12)
    assert agg["recall@3"] == pytest.approx(0.5, abs=1e-12)
    assert agg["mrr"] == pytest.approx(0.375, abs=1e-12)
    assert agg["map"] == pytest.approx(0.375, abs=1e-12)
    assert agg["ndcg@10"] == pytest.approx((1 + 1 / LOG2_3) / 4, abs=1e-12)
    assert agg["n_questions"] == 6
    assert agg["n_answerable"] == 4
    assert agg["n_abstention"] == 2
    assert agg["n_errored"] == 1
    # q4 returned nothing -> correct abstention; q5 returned docs -> not
    assert agg["abstention_correct"] == 1
    assert agg["abstention_rate"] == 0.5
    for key in ("n_questions", "n_answerable", "n_abstention", "n_errored", "abstention_correct"):
        assert type(agg[key]) is int, key
    for key in ("hit@1", "mrr", "ndcg@10", "map", "abstention_rate"):
        assert type(agg[key]) is float, key


def test_missing_query_not_dropped_changes_mean():
    # Same hits, but adding an unanswered question must lower the mean.
    qrels = {"q1": {"a": 1}, "q2": {"b": 1}}
    only_q1 = aggregate(score_queries({"q1": ["a"]}, {"q1": {"a": 1}}, ks=(1,)))
    both = aggregate(score_queries({"q1": ["a"]}, qrels, ks=(1,)))
    assert only_q1["hit@1"] == 1.0
    assert both["hit@1"] == 0.5
    assert both["n_answerable"] == 2


def test_errored_abstention_is_not_a_correct_abstention():
    qrels = {"q1": {}, "q2": {}}
    agg = aggregate(score_queries({"q1": [], "q2": []}, qrels, errored={"q2"}, ks=(1,)))
    assert agg["n_abstention"] == 2
    assert agg["n_errored"] == 1
    assert agg["abstention_correct"] == 1
    assert agg["abstention_rate"] == 0.5
    # no answerable questions -> metric means are NaN
    assert math.isnan(agg["hit@1"]) and math.isnan(agg["mrr"])


def test_no_abstention_rate_is_nan():
    agg = aggregate(score_queries({"q1": ["a"]}, {"q1": {"a": 1}}, ks=(1,)))
    assert agg["n_abstention"] == 0
    assert agg["abstention_correct"] == 0
    assert math.isnan(agg["abstention_rate"])


def test_unknown_qid_raises():
    with pytest.raises(ValueError, match="q_unknown"):
        score_queries({"q1": ["a"], "q_unknown": ["b"]}, {"q1": {"a": 1}})
    with pytest.raises(ValueError, match="q_err"):
        score_queries({}, {"q1": {"a": 1}}, errored=["q_err"])


@pytest.mark.parametrize("bad_ks", [(0,), (1, -2), (), 5])
def test_score_queries_invalid_ks(bad_ks):
    with pytest.raises(ValueError):
        score_queries({"q1": ["a"]}, {"q1": {"a": 1}}, ks=bad_ks)


def test_empty_question_set():
    df = score_queries({}, {}, ks=(1,))
    assert len(df) == 0
    agg = aggregate(df)
    assert agg["n_questions"] == 0
    assert math.isnan(agg["hit@1"]) and math.isnan(agg["abstention_rate"])


# ---------------------------------------------------------------------------
# Parity with trec_eval via pytrec_eval
# ---------------------------------------------------------------------------


def _random_queries(seed: int, n: int):
    rng = random.Random(seed)
    pool = [f"d{i:03d}" for i in range(400)]
    qrels, rankings = {}, {}
    for i in range(n):
        qid = f"q{i:03d}"
        judged = rng.sample(pool, rng.randint(1, 25))
        grades = {d: rng.randint(0, 3) for d in judged}
        relevant_ids = [d for d in judged if grades[d] > 0]
        if not relevant_ids:  # guarantee at least one relevant doc
            grades[judged[0]] = rng.randint(1, 3)
        # up to 150 so recall_100 cuts; some queries retrieve only unjudged/non-relevant docs
        length = rng.choice([1, 2, 3, 5, 10, 20, 50, 100, 101, 150, rng.randint(1, 150)])
        if i % 7 == 0:
            candidates = [d for d in pool if grades.get(d, 0) <= 0]
        else:
            candidates = pool
        rankings[qid] = rng.sample(candidates, length)
        qrels[qid] = grades
    return rankings, qrels


def test_parity_with_pytrec_eval():
    pytrec_eval = pytest.importorskip("pytrec_eval")
    rankings, qrels = _random_queries(seed=20240607, n=300)
    # Scores strictly decrease with rank, so trec_eval's tie-breaking cannot matter.
    run = {qid: {d: float(1000 - rank) for rank, d in enumerate(r, start=1)} for qid, r in rankings.items()}
    measures = {"ndcg_cut_10", "recall_100", "map", "recip_rank", "P_5"}
    evaluator = pytrec_eval.RelevanceEvaluator(qrels, measures)
    theirs = evaluator.evaluate(run)
    assert set(theirs) == set(qrels)

    ours_fns = {
        "ndcg_cut_10": lambda r, q: ndcg_at_k(r, q, 10),
        "recall_100": lambda r, q: recall_at_k(r, q, 100),
        "map": lambda r, q: average_precision(r, q),
        "recip_rank": lambda r, q: reciprocal_rank(r, q),
        "P_5": lambda r, q: precision_at_k(r, q, 5),
    }
    n_missed = 0
    for qid, ranking in rankings.items():
        q = qrels[qid]
        if not any(q.get(d, 0) > 0 for d in ranking):
            n_missed += 1
        for name, fn in ours_fns.items():
            assert fn(ranking, q) == pytest.approx(theirs[qid][name], abs=1e-9, rel=0), (qid, name)
    # the randomized set really exercises misses, graded and multi-relevant cases
    assert n_missed >= 30
    assert sum(1 for q in qrels.values() if sum(g > 0 for g in q.values()) >= 3) >= 100
    assert sum(1 for q in qrels.values() if len({g for g in q.values() if g > 0}) >= 2) >= 100

    # score_queries agrees on the same data (mrr/map/ndcg@10 columns)
    df = score_queries(rankings, qrels, ks=(5, 100)).set_index("qid")
    for qid in rankings:
        assert df.loc[qid, "ndcg@10"] == pytest.approx(theirs[qid]["ndcg_cut_10"], abs=1e-9, rel=0)
        assert df.loc[qid, "recall@100"] == pytest.approx(theirs[qid]["recall_100"], abs=1e-9, rel=0)
        assert df.loc[qid, "map"] == pytest.approx(theirs[qid]["map"], abs=1e-9, rel=0)
        assert df.loc[qid, "mrr"] == pytest.approx(theirs[qid]["recip_rank"], abs=1e-9, rel=0)


def test_metrics_module_does_not_import_dagster():
    import subprocess
    import sys

    code = "import sys, eval_pipeline.metrics.retrieval; sys.exit(1 if 'dagster' in sys.modules else 0)"
    import pathlib

    root = pathlib.Path(__file__).resolve().parents[3]
    assert subprocess.run([sys.executable, "-c", code], cwd=root).returncode == 0
