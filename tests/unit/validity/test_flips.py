"""Tests for eval_pipeline.validity.flips: the expected flips are listed by hand next to each case."""

from __future__ import annotations

import copy
import json
import math

import numpy as np
import pandas as pd
import pytest

from eval_pipeline.validity.flips import (
    DIRECTIONS,
    Flip,
    Outcome,
    flips,
    identical_provenance,
    nondeterministic,
    outcomes_from_frame,
    to_jsonl_rows,
)

# ---------------------------------------------------------------------------
# Worked example
#   q1 hit  -> hit                      (no change)
#   q2 hit  -> miss (lost_in_fusion)    hit_to_miss, class from the current run
#   q3 miss (never_candidate) -> hit    miss_to_hit, class from the previous run
#   q4 miss -> miss                     (no change, even though the class changed)
#   q5 only in previous (a hit)         only_previous
#   q6 only in current (a miss, errored) only_current
#   q0 miss (dense_only) -> hit         miss_to_hit (sorted before q3)
# ---------------------------------------------------------------------------
PREVIOUS = {
    "q1": Outcome(True),
    "q2": Outcome(True),
    "q3": Outcome(False, "never_candidate"),
    "q4": Outcome(False, "keyword_only"),
    "q5": True,
    "q0": Outcome(False, "dense_only"),
}
CURRENT = {
    "q3": Outcome(True),
    "q1": True,
    "q2": Outcome(False, "lost_in_fusion"),
    "q4": Outcome(False, "dense_only"),
    "q6": Outcome(False, "errored"),
    "q0": np.bool_(True),
}


def test_flips_by_hand():
    report = flips(PREVIOUS, CURRENT)
    assert report.hit_to_miss == (Flip("q2", "hit_to_miss", "lost_in_fusion"),)
    assert report.miss_to_hit == (Flip("q0", "miss_to_hit", "dense_only"), Flip("q3", "miss_to_hit", "never_candidate"))
    assert report.only_previous == (Flip("q5", "only_previous", None, True),)
    assert report.only_current == (Flip("q6", "only_current", "errored", False),)
    assert [f.qid for f in report.flipped] == ["q0", "q2", "q3"]
    assert report.net == 1  # two new hits, one new miss


def test_no_change_gives_empty_lists():
    report = flips({"a": True, "b": False}, {"b": Outcome(False, "abstained"), "a": Outcome(True)})
    assert report.hit_to_miss == report.miss_to_hit == report.only_previous == report.only_current == ()
    assert report.net == 0


def test_disjoint_runs_report_every_question():
    report = flips({"a": True}, {"b": False})
    assert [f.qid for f in report.only_previous] == ["a"]
    assert [f.qid for f in report.only_current] == ["b"]
    assert report.flipped == ()


def test_flips_do_not_mutate():
    prev, cur = copy.deepcopy(PREVIOUS), copy.deepcopy(CURRENT)
    flips(prev, cur)
    to_jsonl_rows("v", prev, cur, same_provenance=True)
    assert prev == PREVIOUS and cur == CURRENT


@pytest.mark.parametrize(
    "previous, current, error, needle",
    [
        ([True], {}, TypeError, "previous must be a mapping"),
        ({}, None, TypeError, "current must be a mapping"),
        ({"q1": 1}, {}, TypeError, r"previous\['q1'\]"),
        ({"q1": "hit"}, {}, TypeError, r"previous\['q1'\]"),
        ({1: True}, {}, TypeError, "qid"),
        ({"": True}, {}, TypeError, "qid"),
    ],
)
def test_flips_reject_bad_input(previous, current, error, needle):
    with pytest.raises(error, match=needle):
        flips(previous, current)


def test_outcome_validates():
    with pytest.raises(TypeError, match="hit"):
        Outcome(1.0)
    with pytest.raises(TypeError, match="miss_class"):
        Outcome(False, "")
    assert Outcome(np.bool_(False)).hit is False


# ---------------------------------------------------------------------------
# nondeterministic / to_jsonl_rows
# ---------------------------------------------------------------------------


def test_same_provenance_flags_every_flip_and_nothing_else():
    assert nondeterministic(PREVIOUS, CURRENT, True) == ("q0", "q2", "q3")
    assert nondeterministic(PREVIOUS, CURRENT, np.bool_(True)) == ("q0", "q2", "q3")
    assert nondeterministic(PREVIOUS, CURRENT, False) == ()
    with pytest.raises(TypeError, match="same_provenance"):
        nondeterministic(PREVIOUS, CURRENT, 1)


def test_jsonl_rows_by_hand():
    rows = to_jsonl_rows("hybrid", PREVIOUS, CURRENT, same_provenance=True)
    assert rows == [
        {"variant": "hybrid", "question_id": "q2", "direction": "hit_to_miss", "miss_class": "lost_in_fusion",
         "nondeterministic": True},
        {"variant": "hybrid", "question_id": "q0", "direction": "miss_to_hit", "miss_class": "dense_only",
         "nondeterministic": True},
        {"variant": "hybrid", "question_id": "q3", "direction": "miss_to_hit", "miss_class": "never_candidate",
         "nondeterministic": True},
        # present in one run only: reported, never flagged as nondeterministic
        {"variant": "hybrid", "question_id": "q5", "direction": "only_previous", "miss_class": None,
         "nondeterministic": False},
        {"variant": "hybrid", "question_id": "q6", "direction": "only_current", "miss_class": "errored",
         "nondeterministic": False},
    ]
    assert all(row["direction"] in DIRECTIONS for row in rows)
    # plain, JSON-serializable values
    assert json.loads(json.dumps(rows)) == rows


def test_jsonl_rows_without_same_provenance_flag_nothing():
    rows = to_jsonl_rows("hybrid", PREVIOUS, CURRENT, same_provenance=False)
    assert len(rows) == 5 and not any(row["nondeterministic"] for row in rows)


def test_jsonl_rows_reject_bad_input():
    with pytest.raises(ValueError, match="variant"):
        to_jsonl_rows("", PREVIOUS, CURRENT, same_provenance=True)
    with pytest.raises(TypeError, match="same_provenance"):
        to_jsonl_rows("v", PREVIOUS, CURRENT, same_provenance="yes")


# ---------------------------------------------------------------------------
# outcomes_from_frame
# ---------------------------------------------------------------------------


def _scored() -> pd.DataFrame:
    """Like score_variant's frame: q1 hit, q2 miss (demoted), q3 abstention, q4 errored."""
    return pd.DataFrame({
        "variant": ["v"] * 4,
        "qid": ["q1", "q2", "q3", "q4"],
        "answerable": [True, True, False, True],
        "errored": [False, False, False, True],
        "hit@5": [1.0, 0.0, math.nan, 0.0],
        "hit@10": [1.0, 0.0, math.nan, 0.0],
        "miss_class": [None, "demoted_by_reranker", None, "errored"],
        "doc_ids": [["d1", "g1"], ["x", "y"], [], []],
    })


def test_outcomes_from_a_scored_frame():
    out = outcomes_from_frame(_scored(), k=10)
    # q3 (abstention) left out; q4 errored stays in as a miss
    assert out == {
        "q1": Outcome(True),
        "q2": Outcome(False, "demoted_by_reranker"),
        "q4": Outcome(False, "errored"),
    }


def test_miss_class_is_dropped_on_a_hit():
    # gated at k = 20 while the miss was diagnosed at 10: a hit carries no miss class
    frame = pd.DataFrame({"qid": ["q1"], "answerable": [True], "hit@20": [1.0], "miss_class": ["never_candidate"]})
    assert outcomes_from_frame(frame, k=20) == {"q1": Outcome(True)}


def test_outcomes_recomputed_from_doc_ids_for_another_cutoff():
    # the history keeps hit@10 only; hit@1 from doc_ids and qrels:
    #   q1 [d1, g1]: g1 at rank 2 -> miss at 1; q2 [g2]: hit; q4 errored -> miss
    history = _scored().drop(columns=["hit@5"]).assign(variant="v")
    qrels = {"q1": {"g1": 1}, "q2": {"g2": 1}, "q3": {}, "q4": {"g4": 1}}
    history.at[1, "doc_ids"] = ["g2"]
    out = outcomes_from_frame(history, k=1, qrels=qrels)
    assert out == {"q1": Outcome(False), "q2": Outcome(True), "q4": Outcome(False, "errored")}
    with pytest.raises(ValueError, match="pass qrels"):
        outcomes_from_frame(history, k=1)
    with pytest.raises(ValueError, match="no judgements for question 'q4'"):
        outcomes_from_frame(history, k=1, qrels={"q1": {"g1": 1}, "q2": {"g2": 1}})
    # labels that do not match the run (q2 answerable in the run, no relevant doc now)
    with pytest.raises(ValueError, match=r"qrels\['q2'\] has no relevant document"):
        outcomes_from_frame(history, k=1, qrels={**qrels, "q2": {"g2": 0}})


def test_outcomes_from_a_history_frame_with_several_variants():
    frame = pd.concat([_scored(), _scored().assign(variant="w", **{"hit@10": [0.0, 1.0, math.nan, 0.0]})])
    with pytest.raises(ValueError, match="several variants"):
        outcomes_from_frame(frame)
    w = outcomes_from_frame(frame, variant="w")
    assert w["q1"] == Outcome(False) and w["q2"] == Outcome(True)
    with pytest.raises(ValueError, match="no rows for variant 'x'"):
        outcomes_from_frame(frame, variant="x")


@pytest.mark.parametrize(
    "frame, kwargs, error, needle",
    [
        ([1], {}, TypeError, "frame must be a DataFrame"),
        (pd.DataFrame({"qid": ["q1"]}), {}, ValueError, r"missing column\(s\) \['answerable'\]"),
        (pd.DataFrame({"qid": ["q1", "q1"], "answerable": [True, True], "hit@10": [1.0, 0.0]}), {}, ValueError,
         "duplicate qid"),
        (pd.DataFrame({"qid": ["q1"], "answerable": [True], "hit@10": [math.nan]}), {}, ValueError,
         "no hit@10 value"),
        (pd.DataFrame({"qid": ["q1"], "answerable": [True], "hit@10": [1.0]}), {"k": 0}, ValueError, "k must be"),
        (pd.DataFrame({"qid": ["q1"], "answerable": [True]}), {"qrels": {}}, ValueError, "doc_ids"),
        (pd.DataFrame({"qid": ["q1"], "answerable": [True], "hit@10": [1.0]}), {"variant": "v"}, ValueError,
         "no 'variant' column"),
    ],
)
def test_outcomes_from_frame_rejects_bad_input(frame, kwargs, error, needle):
    with pytest.raises(error, match=needle):
        outcomes_from_frame(frame, **kwargs)


def test_outcomes_from_frame_does_not_mutate():
    frame = _scored()
    before = frame.copy(deep=True)
    outcomes_from_frame(frame, k=5)
    outcomes_from_frame(frame.drop(columns=["hit@5"]), k=5, qrels={"q1": {"g1": 1}, "q2": {"g2": 1}, "q4": {"g": 1}})
    pd.testing.assert_frame_equal(frame, before)


def test_end_to_end_from_two_frames():
    # run 1: q1 hit, q2 miss; run 2 swaps them -> one flip each way
    run1 = _scored()
    run2 = _scored().assign(**{"hit@10": [0.0, 1.0, math.nan, 0.0],
                               "miss_class": ["lost_in_fusion", None, None, "errored"]})
    rows = to_jsonl_rows("v", outcomes_from_frame(run1), outcomes_from_frame(run2), same_provenance=False)
    assert [(r["question_id"], r["direction"], r["miss_class"]) for r in rows] == [
        ("q1", "hit_to_miss", "lost_in_fusion"),
        ("q2", "miss_to_hit", "demoted_by_reranker"),
    ]


# ---------------------------------------------------------------------------
# identical_provenance
# ---------------------------------------------------------------------------

PROV = {
    "corpus_signature": "c1",
    "question_set_fingerprint": "qs1",
    "labels_fingerprint": "l1",
    "benchmark_fingerprint": "b1",
    "embedder": "minilm",
    "embedder_revision": "rev1",
    "chunking": {"split_by": "word", "split_length": 200},
    "scoring_protocol": "v1",
    "code_version": "0123abcd" * 5,
    "variants": {"hybrid": {"engine": "hybrid", "k": 60}, "bm25": {"engine": "bm25"}},
    "variant_code_versions": {"hybrid": "0123abcd" * 5, "bm25": "0123abcd" * 5},
    "gate_failed": [],
}


def test_identical_provenance_ignores_verdict_fields_and_other_variants():
    other = copy.deepcopy(PROV)
    other["gate_failed"] = ["bm25"]
    other["gate"] = {"bm25": "failed"}
    other["variants"]["bm25"] = {"engine": "bm25", "k1": 1.2}
    assert identical_provenance(PROV, other, "hybrid")
    assert not identical_provenance(PROV, other, "bm25")
    # run records (read_run / previous_run) are accepted as well as bare provenances
    assert identical_provenance({"run_id": "r1", "provenance": PROV}, {"provenance": other}, "hybrid")


@pytest.mark.parametrize(
    "change",
    [
        {"embedder_revision": "rev2"},
        {"question_set_fingerprint": "qs2"},  # reworded questions: comparable, but not identical
        {"chunking": {"split_by": "word", "split_length": 100}},
        {"code_version": "fedcba98" * 5},
        {"code_version": "0123abcd" * 5 + "-dirty"},  # a dirty checkout cannot prove the same code
        {"code_version": "unknown"},
        {"labels_fingerprint": None},
        {"variant_code_versions": {"hybrid": "fedcba98" * 5}},
        {"variant_code_versions": {"hybrid": "0123abcd" * 5 + "-dirty"}},
        {"variants": {"bm25": {"engine": "bm25"}}},  # the variant is not recorded
    ],
)
def test_any_difference_or_unprovable_sameness_is_not_identical(change):
    other = {**copy.deepcopy(PROV), **change}
    assert not identical_provenance(PROV, other, "hybrid")
    assert not identical_provenance(other, PROV, "hybrid")


def test_missing_field_is_not_identical():
    other = {k: v for k, v in PROV.items() if k != "embedder"}
    assert not identical_provenance(other, other, "hybrid")


def test_identical_provenance_rejects_bad_input():
    with pytest.raises(ValueError, match="variant"):
        identical_provenance(PROV, PROV, "")
    with pytest.raises(TypeError, match="previous"):
        identical_provenance(None, PROV, "hybrid")
    with pytest.raises(TypeError, match=r"current\['provenance'\]"):
        identical_provenance(PROV, {"provenance": "x"}, "hybrid")


def test_a_question_that_errored_is_never_called_nondeterministic():
    """With identical provenance, an engine error (a timeout) is an error, not a tie or ANN noise."""
    previous = {"q1": Outcome(True), "q2": Outcome(True)}
    current = {"q1": Outcome(False, "errored"), "q2": Outcome(False, "never_candidate")}
    rows = to_jsonl_rows("bm25", previous, current, same_provenance=True)
    assert [(r["question_id"], r["miss_class"], r["nondeterministic"]) for r in rows] == [
        ("q1", "errored", False), ("q2", "never_candidate", True)]
