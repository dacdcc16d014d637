"""Tests for eval_pipeline.ranking.fusion_tuning (issue #14): the seeded tuning/held-out split,
the grid search over rrf_k and leg weights, its tie-breaking, that held-out questions are never
read, the provenance record, and parity with the sweep's fusion and judging's nDCG.

The fusion cases are worked by hand in the comments.  The sweep's RRF (engines.fuse) scores a
document w_l * n / (k + r) per leg l, r the 0-based rank and w_l the normalised weight (the
final rescaling by k / n changes no order); with equal weights over 2 legs that is
1 / (k + r) per leg.  Ties in the fused score are broken by doc id (chunks_to_documents).
"""

from __future__ import annotations

import dataclasses
import json
import math
import random
from collections.abc import Mapping

import pytest

from eval_pipeline.metrics.retrieval import ndcg_at_k, score_queries
from eval_pipeline.ranking.hits import ChunkHit, RankedDoc
from eval_pipeline.ranking.fusion_tuning import (
    DEFAULT_RRF_K_GRID,
    TIE_TOLERANCE,
    default_grid,
    default_weight_grid,
    fused_ranking,
    fusion_score,
    split_questions,
    tune_fusion,
)
from eval_pipeline.ranking.variants import Variant

LOG2_3 = math.log2(3)  # nDCG of a single gold document at rank 2 is 1 / log2(3)


def qids(n: int, prefix: str = "q") -> list[str]:
    return [f"{prefix}{i:04d}" for i in range(n)]


# --- the split ------------------------------------------------------------------------------


def test_the_split_never_overlaps_and_covers_every_question():
    for n in (2, 3, 10, 101):
        for seed in (0, 1, 7):
            for fraction in (0.1, 0.3, 0.5, 0.9):
                ids = qids(n)
                tuning, held_out = split_questions(ids, fraction=fraction, seed=seed)
                assert set(tuning).isdisjoint(held_out)
                assert set(tuning) | set(held_out) == set(ids)
                assert len(tuning) + len(held_out) == n
                assert tuning and held_out
                assert list(tuning) == sorted(tuning) and list(held_out) == sorted(held_out)


def test_the_split_does_not_depend_on_the_input_order():
    ids = qids(200)
    expected = split_questions(ids, seed=3)
    rng = random.Random(0)
    for _ in range(5):
        shuffled = ids[:]
        rng.shuffle(shuffled)
        assert split_questions(shuffled, seed=3) == expected
    assert split_questions(tuple(reversed(ids)), seed=3) == expected
    assert split_questions(iter(ids), seed=3) == expected  # any iterable


def test_the_split_is_pinned_across_processes_and_versions():
    """sha256, not Python's salted hash(): the same ids split the same way in every process.
    Changing the scheme would move questions between sides of splits already recorded."""
    ids = [f"q{i:02d}" for i in range(1, 11)]
    assert split_questions(ids) == (("q05", "q10"), ("q01", "q02", "q03", "q04", "q06", "q07", "q08", "q09"))
    assert split_questions(ids, seed=1) == (("q02",), ("q01", "q03", "q04", "q05", "q06", "q07", "q08", "q09", "q10"))


def test_adding_questions_keeps_every_existing_question_on_its_side():
    base = qids(60)
    tuning, held_out = split_questions(base, seed=5)
    for extra in (1, 10, 500):
        more_tuning, more_held_out = split_questions(base + qids(extra, prefix="new"), seed=5)
        assert set(tuning) <= set(more_tuning)
        assert set(held_out) <= set(more_held_out)
    # removing questions does not move the others either
    kept = base[::2]
    sub_tuning, sub_held_out = split_questions(kept, seed=5)
    assert set(sub_tuning) == set(tuning) & set(kept) and set(sub_held_out) == set(held_out) & set(kept)


def test_different_seeds_give_different_splits():
    ids = qids(100)
    splits = {split_questions(ids, seed=s)[0] for s in range(10)}
    assert len(splits) == 10


def test_the_tuning_part_is_about_the_fraction():
    ids = qids(2000)
    for fraction in (0.2, 0.3, 0.5):
        tuning, _ = split_questions(ids, fraction=fraction, seed=0)
        assert abs(len(tuning) / len(ids) - fraction) < 0.04
    # a larger fraction only adds questions to the tuning part (u < fraction is monotone)
    small, _ = split_questions(ids, fraction=0.2)
    large, _ = split_questions(ids, fraction=0.4)
    assert set(small) <= set(large)


def test_two_questions_always_give_one_on_each_side():
    # seed 3: both hash above 0.3, so the one nearest the cut ("b", 0.31) is moved to tuning;
    # seed 2, fraction 0.9: both hash below 0.9, so the highest ("b", 0.49) is held out
    assert split_questions(["a", "b"], seed=3) == (("b",), ("a",))
    assert split_questions(["a", "b"], fraction=0.9, seed=2) == (("a",), ("b",))
    for seed in range(20):
        for fraction in (0.01, 0.5, 0.99):
            tuning, held_out = split_questions(["b", "a"], fraction=fraction, seed=seed)
            assert len(tuning) == len(held_out) == 1


@pytest.mark.parametrize("ids, message", [
    ([], r"cannot split 0 question\(s\).*need at least 2"),
    (["only"], r"cannot split 1 question\(s\).*at least 1 in each part"),
    (["a", "b", "a"], r"more than once: \['a'\]"),
    (["a", None], "non-empty strings"),
    (["a", ""], "non-empty strings"),
    (["a", 3], "non-empty strings"),
])
def test_bad_question_ids_are_refused(ids, message):
    with pytest.raises(ValueError, match=message):
        split_questions(ids)


def test_a_bare_string_is_not_a_list_of_ids():
    with pytest.raises(TypeError, match="not a single string"):
        split_questions("q1q2")


@pytest.mark.parametrize("fraction", [0, 0.0, 1, 1.0, -0.1, 1.5, math.nan, math.inf, True, "0.3", None])
def test_a_fraction_outside_0_1_is_refused(fraction):
    with pytest.raises(ValueError, match="fraction must be a number strictly between 0 and 1"):
        split_questions(qids(10), fraction=fraction)


@pytest.mark.parametrize("seed", [True, 1.5, "0", None])
def test_a_non_integer_seed_is_refused(seed):
    with pytest.raises(ValueError, match="seed must be an integer"):
        split_questions(qids(10), seed=seed)


# --- hand-computed rrf_k cases ----------------------------------------------------------------


def rrf_k_case():
    """2 legs (keyword, dense), 3 questions, one gold document each (grade 1).

    q1: gold g at rank 7 (0-based) in both legs, 7 single-leg fillers above it in each. g beats
        the fillers at rank i iff 2 / (k + 7) > 1 / (k + i), i.e. k > 7 - 2i: g is first iff k > 7.
        k = 2: g beats i >= 3 only, so the 6 fillers at i = 0, 1, 2 of both legs are above it:
        rank 7, nDCG 1/log2(8) = 1/3.  k = 4: behind i = 0, 1 of both legs: rank 5, 1/log2(6).
    q2: gold s first in keyword only; c at rank 15 in both legs.  c beats s iff 2 / (k + 15) >
        1 / k, i.e. k > 15.  dense's first document "f..." ties s at 1 / k and loses on doc id
        ("d-s" < "f...").  So s is first for k < 15, second for k > 15 (1/log2(3)).
    q3: gold first in both legs: first for every k.
    """
    keyword = {
        "q1": [(f"k1-{i}", 1.0) for i in range(7)] + [("z-g", 0.5)],
        "q2": [("d-s", 1.0)] + [(f"k2-{i}", 0.9) for i in range(1, 15)] + [("c", 0.1)],
        "q3": [("g3", 1.0), ("k3-x", 0.5)],
    }
    dense = {
        "q1": [(f"n1-{i}", 1.0) for i in range(7)] + [("z-g", 0.5)],
        "q2": [(f"f2-{i:02d}", 0.9) for i in range(15)] + [("c", 0.1)],
        "q3": [("g3", 1.0), ("n3-x", 0.5)],
    }
    qrels = {"q1": {"z-g": 1}, "q2": {"d-s": 1}, "q3": {"g3": 1}}
    return {"keyword": keyword, "dense": dense}, qrels


def test_rrf_k_hand_case_rankings():
    legs, _ = rrf_k_case()

    def rank_of(qid, doc, k):
        return fused_ranking([legs["keyword"][qid], legs["dense"][qid]], rrf_k=k, depth=40).index(doc) + 1

    assert [rank_of("q1", "z-g", k) for k in (2, 4, 8, 20)] == [7, 5, 1, 1]
    assert [rank_of("q2", "d-s", k) for k in (2, 4, 8, 14, 16, 100)] == [1, 1, 1, 1, 2, 2]
    assert [rank_of("q3", "g3", k) for k in (1, 8, 100)] == [1, 1, 1]


def test_the_best_rrf_k_is_the_hand_computed_one():
    legs, qrels = rrf_k_case()
    result = tune_fusion(legs, qrels, ["q1", "q2", "q3"], method="rrf_k", grid=[2, 4, 8, 20])
    assert result.chosen == {"rrf_k": 8}
    scores = {p.value: p.score for p in result.grid}
    assert scores[2] == pytest.approx((1 / 3 + 1 + 1) / 3, abs=1e-12)
    assert scores[4] == pytest.approx((1 / math.log2(6) + 1 + 1) / 3, abs=1e-12)
    assert scores[8] == pytest.approx(1.0, abs=1e-12)
    assert scores[20] == pytest.approx((1 + 1 / LOG2_3 + 1) / 3, abs=1e-12)
    assert [p.value for p in result.grid] == [2, 4, 8, 20]  # the grid in the order given
    assert result.tuning_score == pytest.approx(1.0)
    assert result.n_tuning == 3 and result.fixed == {"weights": None}
    # the default grid (1, 5, 10, 20, ...): only k = 10 has 7 < k < 15
    default = tune_fusion(legs, qrels, ["q1", "q2", "q3"], method="rrf_k")
    assert default.chosen == {"rrf_k": 10}
    assert [p.value for p in default.grid] == list(DEFAULT_RRF_K_GRID)
    assert max(p.score for p in default.grid if p.value != 10) < 1.0 - 1e-3


def test_rrf_k_ties_go_to_the_smallest_k():
    legs, qrels = rrf_k_case()
    # without q1 every k < 15 is perfect: 1, 5 and 10 tie at 1.0, k = 1 is chosen
    result = tune_fusion(legs, qrels, ["q2", "q3"], method="rrf_k")
    assert [p.value for p in result.grid if p.score == 1.0] == [1, 5, 10]
    assert result.chosen == {"rrf_k": 1}
    # the order of the grid does not matter
    assert tune_fusion(legs, qrels, ["q2", "q3"], method="rrf_k", grid=[10, 5, 1, 100]).chosen == {"rrf_k": 1}
    # q3 alone: every k ties at 1.0
    assert tune_fusion(legs, qrels, ["q3"], method="rrf_k", grid=[60, 20, 40]).chosen == {"rrf_k": 20}


# --- hand-computed weight cases --------------------------------------------------------------


def merge_case():
    """Weighted score sum (merge), weights (w, 1 - w) for (keyword, dense), 3 questions.

    q1: gold g keyword 3; c dense 1.  g first iff 3w > 1 - w, i.e. w > 0.25.
    q2: gold g dense 7; c keyword 13.  g first iff 7(1 - w) > 13w, i.e. w < 0.35.
        (w = 0.3: 3.9 against 4.9, g first; w = 0.4: 5.2 against 4.2, c first.)
    q3: gold first in both legs: first for every w.
    So w = 0.3 alone scores 1.0; below it q1's gold is second, above it q2's.
    """
    keyword = {"q1": [("g", 3.0)], "q2": [("c", 13.0)], "q3": [("g3", 1.0), ("x", 0.5)]}
    dense = {"q1": [("c", 1.0)], "q2": [("g", 7.0)], "q3": [("g3", 1.0), ("y", 0.5)]}
    qrels = {"q1": {"g": 1}, "q2": {"g": 1}, "q3": {"g3": 1}}
    return {"keyword": keyword, "dense": dense}, qrels


def test_the_best_merge_weights_are_the_hand_computed_ones():
    legs, qrels = merge_case()
    result = tune_fusion(legs, qrels, ["q1", "q2", "q3"], method="weights", fusion="merge")
    assert result.chosen == {"weights": (0.3, 0.7)}
    assert len(result.grid) == 11
    off = (1 / LOG2_3 + 2) / 3
    for point in result.grid:
        expected = 1.0 if point.value == (0.3, 0.7) else off
        assert point.score == pytest.approx(expected, abs=1e-12), point
    assert result.fixed == {}


def rrf_weights_case():
    """Weighted RRF at k = 1 with weights (w, 1 - w): a document scores 2w / (1 + r) from
    keyword and 2(1 - w) / (1 + r) from dense (r 0-based).

    q1: keyword [g, c], dense [c]: g 2w, c w + 2(1 - w) = 2 - w: g first iff w > 2/3.
    q2: keyword [c, g], dense [g]: g 2 - w, c 2w: g first iff w < 2/3.
    q3: keyword [g], dense [a-x]: g 2w, a-x 2(1 - w): g first iff w > 0.5 (at 0.5 the tie
        goes to "a-x" by doc id).
    Best: q3 needs w > 0.5; q1 and q2 cannot both hold, so every w >= 0.6 scores
    (2 + 1/log2(3)) / 3: 0.6, 0.7, 0.8, 0.9, 1.0 tie and 0.6, nearest equal weights, wins.
    """
    keyword = {"q1": [("g", 1.0), ("c", 0.5)], "q2": [("c", 1.0), ("g", 0.5)], "q3": [("g", 1.0)]}
    dense = {"q1": [("c", 1.0)], "q2": [("g", 1.0)], "q3": [("a-x", 1.0)]}
    qrels = {"q1": {"g": 1}, "q2": {"g": 1}, "q3": {"g": 1}}
    return {"keyword": keyword, "dense": dense}, qrels


def test_rrf_weight_ties_go_to_the_weights_nearest_equal():
    legs, qrels = rrf_weights_case()
    result = tune_fusion(legs, qrels, ["q1", "q2", "q3"], method="weights", rrf_k=1)
    best = (2 + 1 / LOG2_3) / 3
    tied = [p.value for p in result.grid if p.score >= best - TIE_TOLERANCE]
    assert tied == [(0.6, 0.4), (0.7, 0.3), (0.8, 0.2), (0.9, 0.1), (1.0, 0.0)]
    assert result.chosen == {"weights": (0.6, 0.4)}
    assert result.fixed == {"rrf_k": 1}
    scores = {p.value: p.score for p in result.grid}
    assert scores[(0.5, 0.5)] == pytest.approx((1 / LOG2_3 + 1 + 1 / LOG2_3) / 3, abs=1e-12)
    assert scores[(0.0, 1.0)] == pytest.approx((1 / LOG2_3 + 1 + 1 / LOG2_3) / 3, abs=1e-12)


def test_weight_ties_between_mirror_images_go_to_the_lexicographically_smallest():
    legs, qrels = rrf_weights_case()
    same = {"keyword": legs["keyword"], "dense": legs["keyword"]}  # identical legs: every point ties
    assert tune_fusion(same, qrels, ["q1", "q2"], method="weights").chosen == {"weights": (0.5, 0.5)}
    # without the exact middle, (0.4, 0.6) and (0.6, 0.4) are equally near equal weights
    grid = [(0.6, 0.4), (0.4, 0.6), (0.9, 0.1)]
    assert tune_fusion(same, qrels, ["q1", "q2"], method="weights", grid=grid).chosen == {"weights": (0.4, 0.6)}
    # weights are compared normalised: (2, 2) is equal weights
    result = tune_fusion(same, qrels, ["q1"], method="weights", grid=[(1, 3), (2, 2), (3, 1)])
    assert result.chosen == {"weights": (2.0, 2.0)}


def test_three_legs_search_the_simplex():
    grid = default_weight_grid(3)
    assert len(grid) == 66 and len(set(grid)) == 66
    assert all(len(w) == 3 and math.isclose(sum(w), 1.0) and min(w) >= 0 for w in grid)
    assert default_weight_grid(2) == tuple((i / 10, (10 - i) / 10) for i in range(11))
    assert default_grid("weights", 3) == grid and default_grid("rrf_k", 3) == DEFAULT_RRF_K_GRID
    # merge: g only in keyword (score 1), c1 only in dense, c2 only in bm25 (score 1 each):
    # g first iff w_keyword > max(w_dense, w_bm25) (an equal score loses on doc id: "z-g");
    # nearest equal weights among those: (0.4, 0.3, 0.3)
    legs = {"keyword": {"q": [("z-g", 1.0)]}, "dense": {"q": [("c1", 1.0)]}, "bm25": {"q": [("c2", 1.0)]}}
    result = tune_fusion(legs, {"q": {"z-g": 1}}, ["q"], method="weights", fusion="merge")
    assert result.chosen == {"weights": (0.4, 0.3, 0.3)}
    assert result.legs == ("keyword", "dense", "bm25") and len(result.grid) == 66
    # every point ties (identical legs): the three nearest equal weights are equidistant,
    # the lexicographically smallest wins
    same = {leg: {"q": [("z-g", 1.0)]} for leg in ("keyword", "dense", "bm25")}
    assert tune_fusion(same, {"q": {"z-g": 1}}, ["q"], method="weights").chosen == {"weights": (0.3, 0.3, 0.4)}


def test_legs_fixes_the_order_the_weights_follow():
    legs, qrels = merge_case()
    reordered = tune_fusion(legs, qrels, ["q1", "q2", "q3"], method="weights", fusion="merge",
                            legs=["dense", "keyword"])
    assert reordered.legs == ("dense", "keyword") and reordered.chosen == {"weights": (0.7, 0.3)}


# --- the tuning never reads held-out questions ------------------------------------------------


class Guarded(Mapping):
    """A mapping that fails the test if anything iterates over it or reads a forbidden key."""

    def __init__(self, data, forbidden):
        self._data, self._forbidden = dict(data), set(forbidden)

    def __getitem__(self, key):
        assert key not in self._forbidden, f"read held-out question {key!r}"
        return self._data[key]

    def __contains__(self, key):
        assert key not in self._forbidden, f"looked up held-out question {key!r}"
        return key in self._data

    def __iter__(self):
        raise AssertionError("iterated over every question")

    def __len__(self):
        raise AssertionError("counted every question")


def synthetic_runs(n: int, seed: int = 0):
    """Two noisy legs over n questions with 3 graded gold documents each."""
    rng = random.Random(seed)
    keyword, dense, qrels = {}, {}, {}
    for qid in qids(n):
        docs = [f"{qid}-d{i}" for i in range(30)]
        qrels[qid] = {docs[0]: 2, docs[1]: 1, docs[2]: 1}
        for run in (keyword, dense):
            order = docs[:]
            rng.shuffle(order)
            order.sort(key=lambda d: rng.random() - (0.3 if d in qrels[qid] else 0.0))
            run[qid] = [(d, 1.0 - i / 30) for i, d in enumerate(order[:20])]
    return {"keyword": keyword, "dense": dense}, qrels


def poison(legs, qrels, held_out, method):
    """Held-out runs and qrels that pull the choice elsewhere: for rrf_k, the one relevant
    document is at rank 10 in both legs under single-leg fillers (first only for k > 10); for
    weights, it is dense's first document and keyword lists it last (favours dense alone)."""
    poisoned_qrels = dict(qrels)
    poisoned_legs = {leg: dict(run) for leg, run in legs.items()}
    for qid in held_out:
        if method == "rrf_k":
            for leg, run in poisoned_legs.items():
                run[qid] = [(f"{qid}-{leg}-{i}", 1.0) for i in range(10)] + [(f"{qid}-gold", 0.5)]
            poisoned_qrels[qid] = {f"{qid}-gold": 100}
        else:
            poisoned_qrels[qid] = {legs["dense"][qid][0][0]: 100}
            poisoned_legs["keyword"][qid] = list(reversed(legs["keyword"][qid]))
    return poisoned_legs, poisoned_qrels


@pytest.mark.parametrize("method", ["rrf_k", "weights"])
def test_poisoned_held_out_questions_do_not_change_the_choice(method):
    legs, qrels = synthetic_runs(40)
    tuning, held_out = split_questions(list(qrels), seed=11)
    clean = tune_fusion(legs, qrels, tuning, method=method)
    poisoned_legs, poisoned_qrels = poison(legs, qrels, held_out, method)

    poisoned = tune_fusion(poisoned_legs, poisoned_qrels, tuning, method=method)
    assert poisoned.chosen == clean.chosen
    assert poisoned.grid == clean.grid
    # the poison is strong enough to move a choice that looked at the held-out questions
    assert tune_fusion(poisoned_legs, poisoned_qrels, list(qrels), method=method).chosen != clean.chosen

    # and nothing reads them at all
    guarded = tune_fusion({leg: Guarded(run, held_out) for leg, run in poisoned_legs.items()},
                          Guarded(poisoned_qrels, held_out), tuning, method=method)
    assert guarded.chosen == clean.chosen and guarded.grid == clean.grid


def test_the_held_out_score_refuses_tuned_questions():
    legs, qrels = synthetic_runs(30)
    tuning, held_out = split_questions(list(qrels), seed=2)
    result = tune_fusion(legs, qrels, tuning, method="rrf_k", seed=2, fraction=0.3)
    score = result.held_out_score(legs, qrels, held_out)
    assert score == fusion_score(legs, qrels, held_out, rrf_k=result.chosen["rrf_k"])
    result.check_held_out(held_out)
    with pytest.raises(ValueError, match=r"1 question\(s\) to score were tuned on"):
        result.held_out_score(legs, qrels, [*held_out, tuning[0]])
    with pytest.raises(ValueError, match="were tuned on"):
        result.check_held_out(tuning)


# --- results, provenance ------------------------------------------------------------------------


def test_provenance_is_json_and_records_the_choice():
    legs, qrels = synthetic_runs(30)
    tuning, _ = split_questions(list(qrels), fraction=0.4, seed=9)
    result = tune_fusion(legs, qrels, tuning, method="weights", seed=9, fraction=0.4)
    record = json.loads(json.dumps(result.provenance(), allow_nan=False))
    assert record["method"] == "weights" and record["fusion"] == "rrf" and record["legs"] == ["keyword", "dense"]
    assert record["chosen"] == {"weights": list(result.chosen["weights"])}
    assert record["fixed"] == {"rrf_k": 61}
    assert record["metric"] == "ndcg@10"
    assert record["tuning_score"] == result.tuning_score == max(p.score for p in result.grid)
    assert record["n_tuning"] == len(tuning) and record["n_tuning_abstention"] == 0
    assert record["split_seed"] == 9 and record["split_fraction"] == 0.4
    assert record["grid_size"] == 11 == len(record["grid"])
    assert record["grid"][0] == {"weights": [0.0, 1.0], "score": result.grid[0].score}
    assert len(record["tuning_qids_sha256"]) == 64
    assert "closest to equal" in record["tie_break"]
    # without a split recorded, seed and fraction are None
    plain = tune_fusion(legs, qrels, tuning, method="rrf_k").provenance()
    assert plain["split_seed"] is None and plain["split_fraction"] is None and plain["fixed"] == {"weights": None}


def test_the_chosen_setting_makes_the_tuned_variant():
    legs, qrels = rrf_k_case()
    variant = Variant(key="hybrid", engine="hybrid")
    tuned = dataclasses.replace(variant, **tune_fusion(legs, qrels, ["q1", "q2", "q3"], method="rrf_k").chosen)
    assert tuned.rrf_k == 10 and tuned.first_stage != variant.first_stage
    legs, qrels = merge_case()
    result = tune_fusion(legs, qrels, ["q1", "q2", "q3"], method="weights", fusion="merge")
    tuned = dataclasses.replace(Variant(key="hybrid", engine="hybrid", fusion="merge"), **result.chosen)
    assert tuned.weights == (0.3, 0.7)
    assert result.fusion_params() == {"fusion": "merge", "rrf_k": 61, "weights": (0.3, 0.7)}


def test_abstention_questions_are_skipped_and_counted():
    legs, qrels = rrf_k_case()
    legs = {leg: {**run, "q9": [("z", 1.0)]} for leg, run in legs.items()}
    qrels = {**qrels, "q9": {}}
    with_abstention = tune_fusion(legs, qrels, ["q1", "q2", "q3", "q9"], method="rrf_k")
    without = tune_fusion(legs, qrels, ["q1", "q2", "q3"], method="rrf_k")
    assert with_abstention.grid == without.grid and with_abstention.chosen == without.chosen
    assert with_abstention.n_tuning == 3 and with_abstention.n_tuning_abstention == 1
    with pytest.raises(ValueError, match=r"no answerable question \(1 abstention"):
        tune_fusion(legs, qrels, ["q9"], method="rrf_k")


# --- parity: the sweep's fusion, judging's metrics ---------------------------------------------


def test_the_fusion_is_the_sweeps_own():
    """fused_ranking ranks what Sweep.first_stage ranks for a hybrid variant (same hits)."""
    from eval_pipeline.questions.sets import Question
    from eval_pipeline.ranking.sweep import Sweep, _Timed

    rng = random.Random(4)
    hits = {}
    for leg in ("keyword", "dense", "bm25"):
        for q in range(5):
            chunks = [ChunkHit(f"d{d}:{c}", f"d{d}", 0.0) for d in range(12) for c in range(3)]
            rng.shuffle(chunks)
            chunks = chunks[:25]
            hits[leg, f"q{q}"] = [ChunkHit(h.chunk_id, h.doc_id, round(1.0 - i / 25 + rng.random() / 100, 3))
                                  for i, h in enumerate(chunks)]
    sweep = Sweep(snapshot=None, connection_string="", table="t", query_embeddings={}, embed_ms_per_query=0.0)
    sweep.leg_hits = lambda name, top_k, q, settings=None: _Timed(hits[name, q.qid], 0.0, None)
    variants = [
        Variant(key="a", engine="hybrid", rrf_k=5, depth=7),
        Variant(key="b", engine="hybrid", rrf_k=61, weights=(0.2, 0.8), depth=10),
        Variant(key="c", engine="hybrid", fusion="merge", weights=(0.7, 0.3), depth=8),
        Variant(key="d", engine="hybrid", fusion="dbsf", legs=("keyword", "dense", "bm25"), depth=6),
        Variant(key="e", engine="hybrid", rrf_k=1, legs=("bm25", "keyword", "dense"), weights=(1.0, 0.0, 2.0)),
    ]
    for v in variants:
        for q in range(5):
            question = Question(qid=f"q{q}", question="text", gold=("d1",))
            pool, _, error, fused = sweep.first_stage(v, question)
            assert error is None and fused
            ours = fused_ranking([hits[leg, f"q{q}"] for leg in v.legs], fusion=v.fusion, rrf_k=v.rrf_k,
                                 weights=v.weights, depth=v.depth)
            assert ours == [d.doc_id for d in pool[: v.depth]], (v.key, q)


def test_document_level_pairs_fuse_as_one_chunk_documents():
    keyword = [("a", 3.0), ("b", 2.0), ("c", 1.0)]
    dense = [("c", 0.9), ("d", 0.8), ("a", 0.7)]
    as_chunks = [[ChunkHit(d, d, s) for d, s in leg] for leg in (keyword, dense)]
    as_ranked = [[RankedDoc(d, s) for d, s in leg] for leg in (keyword, dense)]
    for kwargs in ({"rrf_k": 1}, {"rrf_k": 60, "weights": (0.3, 0.7)}, {"fusion": "merge"}):
        expected = fused_ranking(as_chunks, **kwargs)
        assert fused_ranking([keyword, dense], **kwargs) == expected == fused_ranking(as_ranked, **kwargs)
    # rrf k = 1, equal weights: a = 1/1 + 1/3, c = 1/3 + 1/1 (tie, "a" first), b = 1/2, d = 1/2
    assert fused_ranking([keyword, dense], rrf_k=1) == ["a", "c", "b", "d"]
    assert fused_ranking([keyword, dense], rrf_k=1, depth=2) == ["a", "c"]


def test_the_metric_is_the_registry_ndcg():
    """No local copy of nDCG: fusion tuning scores with the measure registry's (metrics.retrieval),
    the one score_queries fills ndcg@10 with."""
    from eval_pipeline.ranking import fusion_tuning

    assert fusion_tuning.ndcg_at_k is ndcg_at_k and not hasattr(fusion_tuning, "_ndcg_at_k")


def test_grid_scores_match_judging_score_queries():
    """Each grid point's score is judging's mean ndcg@10 over the answerable tuning questions of
    the fused rankings (abstention questions left out, as aggregate does)."""
    legs, qrels = synthetic_runs(25, seed=3)
    legs = {leg: {**run, "abst": [("x", 1.0)]} for leg, run in legs.items()}
    qrels = {**qrels, "abst": {}}
    tuning = [*list(qrels)[:12], "abst"]
    for method, fixed in (("rrf_k", {}), ("weights", {"rrf_k": 30}), ("weights", {"fusion": "merge"})):
        result = tune_fusion(legs, qrels, tuning, method=method, **fixed)
        for point in result.grid:
            params = {**result.fusion_params(), method: point.value}
            rankings = {q: fused_ranking([legs["keyword"][q], legs["dense"][q]], **params) for q in tuning}
            frame = score_queries(rankings, {q: qrels[q] for q in tuning})
            assert point.score == pytest.approx(frame.loc[frame["answerable"], "ndcg@10"].mean(), abs=1e-12)


def test_other_ndcg_cutoffs_and_depth():
    legs, qrels = rrf_k_case()
    # at depth 3 q1's gold (rank 7 for small k) is cut, at ndcg@1 only first places count
    result = tune_fusion(legs, qrels, ["q1", "q2", "q3"], method="rrf_k", grid=[2, 8, 20], metric="ndcg@1", depth=3)
    assert {p.value: p.score for p in result.grid} == pytest.approx({2: 2 / 3, 8: 1.0, 20: 2 / 3})
    assert result.metric == "ndcg@1" and result.provenance()["depth"] == 3


# --- bad inputs ----------------------------------------------------------------------------------


@pytest.mark.parametrize("kwargs, message", [
    ({"method": "k"}, "method 'k' is not valid; valid: rrf_k, weights"),
    ({"method": "rrf_k", "metric": "mrr"}, "metric 'mrr' is not supported"),
    ({"method": "rrf_k", "metric": "ndcg@0"}, "not supported"),
    ({"method": "rrf_k", "fusion": "merge"}, "fusion must be 'rrf'"),
    ({"method": "rrf_k", "rrf_k": 60}, "do not also give rrf_k"),
    ({"method": "rrf_k", "weights": [1, -1]}, "non-negative numbers"),
    ({"method": "rrf_k", "weights": [0, 0]}, "not all 0"),
    ({"method": "rrf_k", "weights": [1, 1, 1]}, "must be 2 non-negative"),
    ({"method": "weights", "fusion": "dbsf"}, "dbsf ignores leg weights"),
    ({"method": "weights", "fusion": "max"}, "cannot tune fusion 'max'"),
    ({"method": "weights", "weights": [1, 1]}, "do not also give weights"),
    ({"method": "weights", "fusion": "merge", "rrf_k": 5}, "rrf_k only applies to fusion 'rrf'"),
    ({"method": "weights", "rrf_k": 0}, r"rrf_k must be an integer in \[1, 10000\]"),
    ({"method": "rrf_k", "grid": []}, "grid is empty"),
    ({"method": "rrf_k", "grid": [0, 5]}, r"an rrf_k grid value must be an integer in \[1, 10000\].*got 0"),
    ({"method": "rrf_k", "grid": [5, 2.5]}, "got 2.5"),
    ({"method": "rrf_k", "grid": [True]}, "got True"),
    ({"method": "rrf_k", "grid": [5, 10, 5]}, r"more than once: \['5'\]"),
    ({"method": "rrf_k", "grid": 10}, "grid must be a sequence"),
    ({"method": "weights", "grid": [(0.5, 0.5, 0.0)]}, "must be 2 non-negative"),
    ({"method": "weights", "grid": [(0.0, 0.0)]}, "not all 0"),
    ({"method": "weights", "grid": [(math.nan, 1.0)]}, "non-negative numbers"),
    ({"method": "rrf_k", "depth": 0}, "depth must be an integer >= 1"),
    ({"method": "rrf_k", "seed": "x"}, "seed must be an integer"),
    ({"method": "rrf_k", "fraction": 1.0}, "fraction must be a number strictly between 0 and 1"),
    ({"method": "rrf_k", "legs": ["keyword"]}, "two or more distinct legs"),
    ({"method": "rrf_k", "legs": ["keyword", "keyword"]}, "two or more distinct legs"),
    ({"method": "rrf_k", "legs": ["keyword", "bm25"]}, r"leg\(s\) \['bm25'\] not in leg_runs"),
])
def test_bad_settings_are_refused(kwargs, message):
    legs, qrels = rrf_k_case()
    with pytest.raises(ValueError, match=message):
        tune_fusion(legs, qrels, ["q1", "q2"], **kwargs)


def test_bad_tuning_sets_are_refused():
    legs, qrels = rrf_k_case()
    with pytest.raises(ValueError, match="the tuning set is empty"):
        tune_fusion(legs, qrels, [], method="rrf_k")
    with pytest.raises(ValueError, match="the tuning set is empty"):
        tune_fusion(legs, qrels, iter(()), method="weights")
    with pytest.raises(TypeError, match="not a single string"):
        tune_fusion(legs, qrels, "q1", method="rrf_k")
    with pytest.raises(ValueError, match=r"more than once: \['q1'\]"):
        tune_fusion(legs, qrels, ["q1", "q1"], method="rrf_k")
    with pytest.raises(ValueError, match=r"have no qrels .*\['q7'\]"):
        tune_fusion(legs, qrels, ["q1", "q7"], method="rrf_k")
    with pytest.raises(ValueError, match=r"missing from leg 'dense'.*\['q1'\]"):
        tune_fusion({"keyword": legs["keyword"], "dense": {}}, qrels, ["q1"], method="rrf_k")
    with pytest.raises(ValueError, match="two or more distinct legs"):
        tune_fusion({"keyword": legs["keyword"]}, qrels, ["q1"], method="rrf_k")
    with pytest.raises(TypeError, match="leg_runs must be a mapping"):
        tune_fusion([legs["keyword"], legs["dense"]], qrels, ["q1"], method="rrf_k")
    with pytest.raises(ValueError, match="numeric grades"):
        tune_fusion(legs, {"q1": {"z-g": "1"}}, ["q1"], method="rrf_k")


@pytest.mark.parametrize("hits, error, message", [
    ([("a", 1.0), ("a", 0.5)], ValueError, r"more than once in one leg's hits: \['a'\]"),
    ([ChunkHit("a:0", "a", 1.0), ChunkHit("a:0", "a", 0.5)], ValueError, "more than once"),
    ([("a", math.nan)], ValueError, "finite score"),
    ([("a", "1.0")], ValueError, "finite score"),
    ([("", 1.0)], ValueError, "non-empty doc id"),
    ([("a", 1.0, 2)], TypeError, "a hit must be a ChunkHit or a"),
    (["a"], TypeError, "a hit must be"),
    (None, TypeError, "hits must be a list"),
    ("ab", TypeError, "hits must be a list"),
])
def test_bad_hits_are_refused_naming_the_leg_and_question(hits, error, message):
    legs, qrels = rrf_k_case()
    legs["dense"] = {**legs["dense"], "q2": hits}
    with pytest.raises(error, match=message) as info:
        tune_fusion(legs, qrels, ["q1", "q2"], method="rrf_k")
    assert "leg 'dense', question 'q2'" in str(info.value)


def test_fused_ranking_refuses_bad_settings():
    with pytest.raises(ValueError, match="depth must be an integer >= 1"):
        fused_ranking([[("a", 1.0)], []], depth=0)
    with pytest.raises(ValueError, match="fusion mode 'max' is not valid"):
        fused_ranking([[("a", 1.0)], []], fusion="max")
    with pytest.raises(ValueError, match="one entry per leg"):
        fused_ranking([[("a", 1.0)], []], weights=[1.0])
    with pytest.raises(ValueError, match="rrf_k must be an integer"):
        fused_ranking([[("a", 1.0)], []], rrf_k=0)
