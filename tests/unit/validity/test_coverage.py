"""Tests for eval_pipeline.validity.coverage: expected values are worked out by hand next to each case."""

from __future__ import annotations

import copy
import math

import numpy as np
import pandas as pd
import pytest

from eval_pipeline.validity.coverage import (
    JUDGED_SUMMARY_COLUMNS,
    judged_at_k,
    judged_spread_warning,
    judged_summary,
    pooled_unjudged,
    unjudged_in_top_k,
)

# ---------------------------------------------------------------------------
# judged_at_k / unjudged_in_top_k
#   ranking [a, b, c, d]; qrels {a: 1 (relevant), c: 0 (judged non-relevant), z: 2 (not retrieved)}
#   judged positions: a (rank 1), c (rank 3); b and d are unjudged
# ---------------------------------------------------------------------------
R = ["a", "b", "c", "d"]
Q = {"a": 1, "c": 0, "z": 2}


def test_judged_share_counts_any_grade():
    assert judged_at_k(R, Q, 1) == 1.0  # [a] -> 1/1
    assert judged_at_k(R, Q, 2) == 0.5  # [a, b] -> 1/2
    assert judged_at_k(R, Q, 3) == pytest.approx(2 / 3)  # [a, b, c] -> 2/3 (grade 0 is judged)
    assert judged_at_k(R, Q, 4) == 0.5  # [a, b, c, d] -> 2/4


def test_ranking_shorter_than_k_divides_by_k():
    # 4 retrieved, 2 judged: 2/10, not 2/4 (P@k convention; ir_measures would give 0.5)
    assert judged_at_k(R, Q, 10) == pytest.approx(0.2)
    # the unjudged count does not depend on the ranking reaching k: b and d
    assert unjudged_in_top_k(R, Q, 10) == 2


def test_unjudged_count_by_hand():
    assert unjudged_in_top_k(R, Q, 1) == 0  # [a]
    assert unjudged_in_top_k(R, Q, 2) == 1  # b
    assert unjudged_in_top_k(R, Q, 4) == 2  # b, d


def test_negative_grades_are_judged():
    assert judged_at_k(["x", "y"], {"x": -1}, 2) == 0.5
    assert unjudged_in_top_k(["x", "y"], {"x": -1}, 2) == 1


@pytest.mark.parametrize("ranking", [[], ()])
def test_empty_ranking_is_zero_not_nan(ranking):
    assert judged_at_k(ranking, Q, 5) == 0.0
    assert unjudged_in_top_k(ranking, Q, 5) == 0


def test_empty_qrels_means_everything_retrieved_is_unjudged():
    assert judged_at_k(["a", "b"], {}, 5) == 0.0
    assert unjudged_in_top_k(["a", "b"], {}, 5) == 2


def test_duplicates_count_once_like_the_metrics():
    # [a, a, b] is read as [a, b]: top 2 = a (judged), b (unjudged)
    assert judged_at_k(["a", "a", "b"], {"a": 1}, 2) == 0.5
    assert unjudged_in_top_k(["a", "a", "b"], {"a": 1}, 2) == 1
    # without dedupe the top 2 would be [a, a] -> 1.0 and 0


def test_numpy_array_ranking_is_accepted():
    assert judged_at_k(np.array(["a", "b"]), {"a": 1}, 2) == 0.5


@pytest.mark.parametrize("k", [0, -1, 1.5, True, "10", None])
def test_bad_k_is_rejected(k):
    with pytest.raises(ValueError, match="k must be"):
        judged_at_k(R, Q, k)
    with pytest.raises(ValueError, match="k must be"):
        unjudged_in_top_k(R, Q, k)


def test_string_ranking_and_bad_qrels_are_type_errors():
    with pytest.raises(TypeError, match="ranking"):
        judged_at_k("abc", Q, 2)
    with pytest.raises(TypeError, match="qrels"):
        unjudged_in_top_k(R, ["a"], 2)


def test_per_question_functions_do_not_mutate():
    r, q = list(R), dict(Q)
    judged_at_k(r, q, 3)
    unjudged_in_top_k(r, q, 3)
    assert r == R and q == Q


# ---------------------------------------------------------------------------
# judged_summary
#   qrels: q1 {g1: 1, n1: 0}, q2 {g2: 1}, q3 {} (abstention), q4 {g4: 1}
#   k = 2
#   variant "lex" (ranked-results frame, `error` column):
#     q1 [g1, n1] -> judged 2/2 = 1.0, unjudged 0
#     q2 [x, g2]  -> judged 1/2 = 0.5, unjudged 1
#     q3 [x, y]   -> abstention: left out
#     q4 errored  -> left out, n_errored_excluded = 1
#     mean judged = (1.0 + 0.5) / 2 = 0.75; unjudged total 1, mean 0.5; no short ranking
#   variant "dense" (plain mapping; q4 missing -> empty ranking):
#     q1 [u, v, g1] -> top 2 [u, v]: judged 0.0, unjudged 2
#     q2 [g2]       -> judged 1/2 = 0.5 (short), unjudged 0
#     q4 missing    -> judged 0.0, unjudged 0 (short)
#     mean judged = (0 + 0.5 + 0) / 3 = 1/6; unjudged total 2, mean 2/3; n_short 2
# ---------------------------------------------------------------------------
QRELS = {"q1": {"g1": 1, "n1": 0}, "q2": {"g2": 1}, "q3": {}, "q4": {"g4": 1}}
LEX = pd.DataFrame({
    "qid": ["q1", "q2", "q3", "q4"],
    "doc_ids": [["g1", "n1"], ["x", "g2"], ["x", "y"], []],
    "error": [None, None, None, "RuntimeError: boom"],
})
DENSE = {"q1": ["u", "v", "g1"], "q2": ["g2"], "q3": []}


def test_judged_summary_by_hand():
    out = judged_summary({"lex": LEX, "dense": DENSE}, QRELS, k=2)
    assert list(out.columns) == JUDGED_SUMMARY_COLUMNS
    assert list(out["variant"]) == ["lex", "dense"]
    lex, dense = out.iloc[0], out.iloc[1]
    assert (lex["k"], lex["n_questions"], lex["n_errored_excluded"], lex["n_short"]) == (2, 2, 1, 0)
    assert lex["judged"] == pytest.approx(0.75)
    assert (lex["unjudged_total"], lex["unjudged_mean"]) == (1, 0.5)
    assert (dense["n_questions"], dense["n_errored_excluded"], dense["n_short"]) == (3, 0, 2)
    assert dense["judged"] == pytest.approx(1 / 6)
    assert dense["unjudged_total"] == 2
    assert dense["unjudged_mean"] == pytest.approx(2 / 3)


def test_judged_summary_reads_the_errored_column_of_score_variant_frames():
    frame = pd.DataFrame({"qid": ["q1", "q2"], "doc_ids": [["g1"], None], "errored": [False, True]})
    out = judged_summary({"v": frame}, {"q1": {"g1": 1}, "q2": {"g2": 1}}, k=1).iloc[0]
    assert (out["n_questions"], out["judged"], out["n_errored_excluded"]) == (1, 1.0, 1)


def test_judged_summary_with_no_answerable_question_is_nan():
    out = judged_summary({"v": {"q3": ["x"]}}, {"q3": {}}, k=10).iloc[0]
    assert out["n_questions"] == 0 and out["unjudged_total"] == 0
    assert math.isnan(out["judged"]) and math.isnan(out["unjudged_mean"])


def test_judged_summary_rejects_bad_input():
    with pytest.raises(ValueError, match=r"not in qrels: \['q9'\]"):
        judged_summary({"v": {"q9": ["a"]}}, QRELS)
    with pytest.raises(ValueError, match="duplicate qid"):
        judged_summary({"v": pd.DataFrame({"qid": ["q1", "q1"], "doc_ids": [[], []]})}, QRELS)
    with pytest.raises(ValueError, match=r"missing column\(s\) \['doc_ids'\]"):
        judged_summary({"v": pd.DataFrame({"qid": ["q1"]})}, QRELS)
    with pytest.raises(ValueError, match="per_variant is empty"):
        judged_summary({}, QRELS)
    with pytest.raises(TypeError, match="per_variant"):
        judged_summary([LEX], QRELS)
    with pytest.raises(TypeError, match=r"qrels\['q1'\]"):
        judged_summary({"v": DENSE}, {"q1": ["g1"]})
    with pytest.raises(TypeError, match="single string"):
        judged_summary({"v": {"q1": "g1"}}, QRELS)
    with pytest.raises(ValueError, match="k must be"):
        judged_summary({"v": DENSE}, QRELS, k=0)


def test_judged_summary_does_not_mutate():
    lex, dense, qrels = LEX.copy(deep=True), copy.deepcopy(DENSE), copy.deepcopy(QRELS)
    judged_summary({"lex": lex, "dense": dense}, qrels, k=2)
    pd.testing.assert_frame_equal(lex, LEX)
    assert dense == DENSE and qrels == QRELS


# ---------------------------------------------------------------------------
# judged_spread_warning
# ---------------------------------------------------------------------------


def test_no_warning_within_threshold():
    assert judged_spread_warning({"a": 0.80, "b": 0.75}) is None
    # equal to the threshold on paper; in floats 0.8 - 0.7 is 0.10000000000000009: still no warning
    assert 0.8 - 0.7 > 0.1
    assert judged_spread_warning({"a": 0.8, "b": 0.7}, threshold=0.1) is None
    assert judged_spread_warning({"a": 0.8, "b": 0.69}, threshold=0.1) is not None
    assert judged_spread_warning({"a": 0.3}) is None  # one variant: nothing to compare
    assert judged_spread_warning({}) is None


def test_warning_names_highest_and_lowest_and_explains_why():
    text = judged_spread_warning({"bm25": 0.9, "hybrid": 0.7, "dense": 0.55}, threshold=0.1)
    assert text is not None
    assert "highest bm25 (0.90)" in text and "lowest dense (0.55)" in text
    assert "0.35" in text  # the spread
    assert "non-relevant" in text and "one gold document" in text
    assert "hybrid" not in text  # neither end


def test_warning_names_every_tied_variant_and_labels_k():
    text = judged_spread_warning({"a": 0.9, "b": 0.9, "c": 0.5}, threshold=0.2, k=5)
    assert "highest a, b (0.90)" in text and "lowest c (0.50)" in text
    assert "Judged@5" in text


def test_nan_judged_values_are_skipped():
    assert judged_spread_warning({"a": 0.9, "b": float("nan")}) is None
    assert "lowest c" in judged_spread_warning({"a": 0.9, "b": float("nan"), "c": 0.2})


@pytest.mark.parametrize(
    "values, kwargs, error, needle",
    [
        ({"a": 1.5}, {}, ValueError, r"per_variant_judged\['a'\]"),
        ({"a": "0.5"}, {}, ValueError, r"per_variant_judged\['a'\]"),
        ({"a": 0.5}, {"threshold": 1.0}, ValueError, "threshold"),
        ({"a": 0.5}, {"threshold": -0.1}, ValueError, "threshold"),
        ({"a": 0.5}, {"threshold": True}, ValueError, "threshold"),
        ({"a": 0.5}, {"k": 0}, ValueError, "k must be"),
        ([0.5], {}, TypeError, "per_variant_judged"),
    ],
)
def test_spread_warning_rejects_bad_input(values, kwargs, error, needle):
    with pytest.raises(error, match=needle):
        judged_spread_warning(values, **kwargs)


# ---------------------------------------------------------------------------
# pooled_unjudged
#   k = 2, qrels as above. Top 2 per variant:
#     lex:   q1 [g1, n1] none unjudged; q2 [x, g2] -> (q2, x); q3 abstention; q4 errored
#     dense: q1 [u, v] -> (q1, u), (q1, v); q2 [g2] none; q3 abstention
#     extra: q2 [x, w, zz] -> top 2 [x, w] -> (q2, x) again (once), (q2, w); zz is rank 3
#   pooled, sorted: (q1, u), (q1, v), (q2, w), (q2, x)
# ---------------------------------------------------------------------------


def test_pooled_unjudged_by_hand():
    extra = {"q2": ["x", "w", "zz"]}
    holes = pooled_unjudged({"lex": LEX, "dense": DENSE, "extra": extra}, QRELS, k=2)
    assert holes == [("q1", "u"), ("q1", "v"), ("q2", "w"), ("q2", "x")]


def test_pooled_unjudged_order_does_not_depend_on_variant_order():
    a = pooled_unjudged({"lex": LEX, "dense": DENSE}, QRELS, k=2)
    b = pooled_unjudged({"dense": DENSE, "lex": LEX}, QRELS, k=2)
    assert a == b


def test_pooled_unjudged_can_include_abstention_questions():
    # q3 (abstention) has lex top 2 [x, y], both unjudged
    holes = pooled_unjudged({"lex": LEX}, QRELS, k=2, include_abstention=True)
    assert holes == [("q2", "x"), ("q3", "x"), ("q3", "y")]


def test_pooled_unjudged_skips_errored_rankings_even_with_docs():
    frame = pd.DataFrame({"qid": ["q1"], "doc_ids": [["junk"]], "errored": [True]})
    assert pooled_unjudged({"v": frame}, QRELS, k=5) == []


def test_pooled_unjudged_rejects_bad_input():
    with pytest.raises(ValueError, match="not in qrels"):
        pooled_unjudged({"v": {"q9": ["a"]}}, QRELS)
    with pytest.raises(TypeError, match="include_abstention"):
        pooled_unjudged({"v": DENSE}, QRELS, include_abstention=1)
    with pytest.raises(ValueError, match="k must be"):
        pooled_unjudged({"v": DENSE}, QRELS, k=1.0)


def test_pooled_unjudged_does_not_mutate():
    lex, dense, qrels = LEX.copy(deep=True), copy.deepcopy(DENSE), copy.deepcopy(QRELS)
    pooled_unjudged({"lex": lex, "dense": dense}, qrels, k=2)
    pd.testing.assert_frame_equal(lex, LEX)
    assert dense == DENSE and qrels == QRELS
