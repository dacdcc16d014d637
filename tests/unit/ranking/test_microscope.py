"""The retrieval microscope (issue #26): a triage label for every miss, per-leg evidence for any
number of legs (taken from the variant), crowding vs embedding by the documented margin."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from eval_pipeline.config.sweep import parse_sweep
from eval_pipeline.corpus.sources import CorpusSnapshot, Document
from eval_pipeline.questions.sets import Question
from eval_pipeline.ranking import sweep as sweep_mod
from eval_pipeline.ranking.hits import ChunkHit, RankedDoc
from eval_pipeline.ranking.microscope import (
    CROWDING_MARGIN,
    answer_chunk,
    dense_cause,
    leg_evidence,
    miss_record,
    triage,
)
from eval_pipeline.ranking.sweep import Sweep
from eval_pipeline.reporting.report import microscope_lines, miss_records
from eval_pipeline.scoring.variant import summarize

K = 2
G = {"G"}


def test_a_hit_and_a_question_without_gold_have_no_label():
    assert triage(G, final=["a", "G"], k=K, legs={}, fused=False) is None
    assert triage(set(), final=[], k=K, legs={}, fused=False) is None


def test_each_label_from_the_last_stage_back():
    legs_top = {"keyword": ["G", "a"], "dense": ["a", "b"]}
    assert triage(G, final=[], k=K, legs=legs_top, fused=True, errored=True) == "errored"
    assert triage(G, final=[], k=K, legs=legs_top, fused=True, abstained=True, unrefused=["G"]) \
        == "dropped_by_threshold"
    # refused, but its list had no gold in the top k: triaged on that list (here lost in fusion)
    assert triage(G, final=[], k=K, legs=legs_top, fused=True, abstained=True, unrefused=["a", "b"]) \
        == "lost_in_fusion"
    assert triage(G, final=["a", "b"], k=K, legs=legs_top, fused=True, pre_rerank=["b", "G"]) \
        == "demoted_by_reranker"
    assert triage(G, final=["a", "b"], k=K, legs=legs_top, fused=True) == "lost_in_fusion"
    # a single leg had G, below its top k
    assert triage(G, final=["a", "b"], k=K, legs={"bm25": ["a", "b", "G"]}, fused=False) == "outranked_in_pool"
    # a single-leg engine's own top k held G yet its final list did not: no fusion to blame
    assert triage(G, final=["a", "b"], k=K, legs={"bm25": ["G"]}, fused=False) == "outranked_in_pool"
    assert triage(G, final=["a", "b"], k=K, legs={"bm25": ["a"], "dense": ["b"]}, fused=True) == "never_candidate"


def test_any_number_of_legs_counts_a_third_and_fourth_leg():
    legs = {"keyword": ["a"], "dense": ["b"], "bm25": ["c"], "overlap": ["G"]}
    assert triage(G, final=["a", "b"], k=K, legs=legs, fused=True) == "lost_in_fusion"
    legs = {"keyword": ["a"], "dense": ["b"], "bm25": ["c", "d", "G"]}
    assert triage(G, final=["a", "b"], k=K, legs=legs, fused=True) == "outranked_in_pool"


@pytest.mark.parametrize("gold, kth, expected", [
    (0.70, 0.74, "crowding"),      # 0.04 below the k-th: within the margin
    (0.69, 0.74, "crowding"),      # exactly the margin (0.74 - 0.05 = 0.69): crowding
    (0.60, 0.74, "embedding"),     # 0.14 below
    (0.80, 0.74, "crowding"),      # above the k-th (it lost elsewhere): crowding
    (0.60, None, "embedding"),     # fewer than k dense candidates: nothing crowded it out
    (None, 0.74, None),            # no cosine for the gold: no cause
])
def test_crowding_vs_embedding_by_the_margin(gold, kth, expected):
    assert CROWDING_MARGIN == 0.05
    assert dense_cause(gold, kth) == expected


def test_leg_evidence_names_the_best_gold_its_rank_score_and_the_top_five():
    docs = [RankedDoc(d, s) for d, s in [("a", 0.9), ("b", 0.8), ("G", 0.7), ("c", 0.6), ("d", 0.5), ("e", 0.4)]]
    ev = leg_evidence(docs, {"G", "e"})
    assert ev == {"gold": "G", "gold_rank": 3, "gold_score": 0.7, "candidates": 6,
                  "top": [["a", 0.9], ["b", 0.8], ["G", 0.7], ["c", 0.6], ["d", 0.5]]}
    assert leg_evidence([], G)["gold_rank"] is None


def test_answer_chunk_finds_the_chunk_with_most_of_the_gist():
    chunks = {"G:0": "The visit is on day one.", "G:1": "On day three the team goes to Daventry."}
    assert answer_chunk("day three, at Daventry", chunks) == {"chunk_id": "G:1", "words_found": 3, "words": 3,
                                                              "exists": True}
    assert answer_chunk("day three, at Daventry", {"G:0": "nothing here"})["exists"] is False
    assert answer_chunk("day three", {})["exists"] is False  # no chunk of the gold in the store
    assert answer_chunk("", chunks) is None


def test_a_dense_miss_record_carries_the_cosines_and_its_cause():
    dense = [RankedDoc("a", 0.80), RankedDoc("b", 0.78), RankedDoc("G", 0.75)]
    record = miss_record(variant="v", qid="q", gold=["G"], k=K, final=[RankedDoc("a", 1.0), RankedDoc("b", 0.5)],
                         legs={"dense": dense}, fused=False, pre_rerank=None, unrefused=None, abstained=False,
                         errored=False, gold_cosine=0.75, kth_cosine=0.78, dense_leg="dense")
    assert record["triage"] == "outranked_in_pool" and record["dense_cause"] == "crowding"
    assert record["legs"]["dense"]["gold_rank"] == 3 and record["top"][0] == ["a", 1.0]


# --- the sweep: the legs are the variant's, any number; the records reach misses.jsonl ---------

QUESTIONS = [Question("q1", "alpha", ("G",)), Question("q2", "beta", ("a",))]
SNAPSHOT = CorpusSnapshot(documents=(Document("G", "Gold", "", "g.md", "gold text"),
                                     Document("a", "A", "", "a.md", "a text")), source="test")


def _leg_hits(name, top_k, q, settings=None):
    hits = {"keyword": [ChunkHit("a:0", "a", 2.0)], "dense": [ChunkHit("a:0", "a", 0.9), ChunkHit("G:0", "G", 0.88)],
            "bm25": [ChunkHit("G:0", "G", 5.0), ChunkHit("a:0", "a", 1.0)]}[name]
    return sweep_mod._Timed(hits, 0.0, None)


def _run(monkeypatch, variants):
    parsed = parse_sweep({"variants": variants}).variants
    s = Sweep(snapshot=SNAPSHOT, connection_string="postgresql://u@h/db", table="t",
              query_embeddings={"q1": [1.0], "q2": [1.0]}, embed_ms_per_query=0.0, miss_k=1)
    monkeypatch.setattr(s, "leg_hits", _leg_hits)
    return s.run(list(parsed), QUESTIONS)


def test_a_three_leg_hybrid_is_seen_through_all_three_of_its_legs(monkeypatch):
    frames = _run(monkeypatch, [{"engine": "hybrid", "legs": ["keyword", "dense", "bm25"],
                                 "weights": [1.0, 1.0, 0.0], "depth": 1, "name": "three"},
                                {"engine": "bm25", "depth": 1}])
    three = frames["three"].set_index("qid")
    assert three.loc["q1", "triage"] == "lost_in_fusion"  # only bm25 had G first; it weighs nothing
    record = json.loads(three.loc["q1", "microscope"])
    assert set(record["legs"]) == {"keyword", "dense", "bm25"}  # the variant's legs, no other
    assert record["legs"]["bm25"]["gold_rank"] == 1 and record["legs"]["dense"]["gold_rank"] == 2
    assert record["gold_cosine"] == 0.88 and record["kth_cosine"] == 0.9  # the dense leg's own cosines
    assert record["dense_cause"] == "crowding"  # 0.88 >= 0.9 - 0.05
    assert pd.isna(three.loc["q2", "microscope"])  # a hit
    bm25 = json.loads(frames["bm25"].set_index("qid").loc["q2", "microscope"])
    assert set(bm25["legs"]) == {"bm25"} and bm25["triage"] == "outranked_in_pool" and bm25["dense_cause"] is None


def test_the_report_counts_labels_and_misses_jsonl_holds_every_record(monkeypatch):
    frames = _run(monkeypatch, [{"engine": "hybrid", "legs": ["keyword", "dense", "bm25"],
                                 "weights": [1.0, 1.0, 0.0], "depth": 1, "name": "three"}])
    frame = frames["three"].assign(question=["alpha", "beta"], answerable=True, errored=False,
                                   returned=1, latency_ms=1.0)
    summary = summarize({"three": frame})
    assert int(summary["triage_lost_in_fusion"].iloc[0]) == 1 and int(summary["dense_crowding"].iloc[0]) == 1
    records = miss_records(frame)
    assert [(r["variant"], r["qid"], r["question"], r["triage"]) for r in records] == \
        [("three", "q1", "alpha", "lost_in_fusion")]
    text = "\n".join(microscope_lines(summary, frame, "three"))
    assert "| three | 0 | 0 | 1 | 0 | 0 | 0 | 1 | 0 |" in text
    assert "`q1` alpha — **lost in fusion, crowding**" in text
