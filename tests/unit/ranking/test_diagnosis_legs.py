"""Miss diagnosis over any number of legs (issue #24): a three-leg hybrid's bm25 candidates
count like the keyword and dense legs' do.

The two-leg cases are in test_diagnosis.py (keyword=, dense=); here the legs are given by name
(`legs={name: candidates}`), as the sweep gives them: every leg a variant fused, plus the
lexical and dense legs a single-leg engine is compared with.
"""

from __future__ import annotations

import pandas as pd

from eval_pipeline.config.sweep import parse_sweep
from eval_pipeline.corpus.sources import CorpusSnapshot, Document
from eval_pipeline.questions.sets import Question
from eval_pipeline.ranking import sweep as sweep_mod
from eval_pipeline.ranking.diagnosis import diagnose_miss
from eval_pipeline.ranking.hits import ChunkHit
from eval_pipeline.ranking.sweep import Sweep

K = 3


def diagnose(final, legs, *, fused=True, fused_legs=None, gold=("G",)):
    return diagnose_miss(list(gold), final=list(final), k=K, legs={n: list(d) for n, d in legs.items()},
                         pre_rerank=None, fused=fused, fused_legs=fused_legs)


def test_a_third_legs_top_k_makes_a_fused_miss_lost_in_fusion():
    # only the bm25 leg had G, at rank 1: the fused list dropped it
    legs = {"keyword": ["a", "b"], "dense": ["c", "d"], "bm25": ["G", "a"]}
    assert diagnose(["a", "b", "c"], legs) == "lost_in_fusion"


def test_a_third_lexical_leg_counts_as_the_keyword_side():
    # bm25 had G deep (outside its top k), the others never: a lexical leg had it
    legs = {"keyword": ["a"], "dense": ["b"], "bm25": ["a", "b", "c", "G"]}
    assert diagnose(["a", "b", "c"], legs) == "keyword_only"
    legs = {"keyword": ["a"], "dense": ["a", "b", "c", "d", "G"], "bm25": ["a", "b", "c", "G"]}
    assert diagnose(["a", "b", "c"], legs) == "both_legs"
    assert diagnose(["a", "b", "c"], {"keyword": ["a"], "dense": ["b"], "bm25": ["c"]}) == "never_candidate"


def test_only_a_fused_leg_makes_a_miss_lost_in_fusion():
    # a [keyword, bm25] hybrid: the dense leg (diagnosed, not fused) having G first is no fusion loss
    legs = {"keyword": ["a"], "bm25": ["b"], "dense": ["G"]}
    assert diagnose(["a", "b", "c"], legs, fused_legs=("keyword", "bm25")) == "dense_only"
    assert diagnose(["a", "b", "c"], legs, fused_legs=("keyword", "dense")) == "lost_in_fusion"


def test_the_named_legs_agree_with_the_keyword_and_dense_arguments():
    for final, keyword, dense, fused in [(["a"], ["G"], ["a"], True), (["a"], ["x", "y", "z", "G"], ["G"], False),
                                         (["a"], [], [], True), (["a"], ["b", "c", "d", "G"], [], False)]:
        by_name = diagnose(final, {"keyword": keyword, "dense": dense}, fused=fused)
        assert by_name == diagnose_miss(["G"], final=final, k=K, keyword=keyword, dense=dense, pre_rerank=None,
                                        fused=fused)


# --- the sweep: a three-leg hybrid diagnosed against all three of its legs ---------------

QUESTIONS = [Question("q1", "alpha", ("G",))]
SNAPSHOT = CorpusSnapshot(documents=(Document("G", "Gold", "", "g.md", "gold text"),
                                     Document("a", "A", "", "a.md", "a text")), source="test")


def _leg_hits(name, top_k, q, settings=None):
    # the keyword and dense legs rank only "a"; bm25 ranks G first
    hits = {"keyword": [ChunkHit("a:0", "a", 2.0)], "dense": [ChunkHit("a:0", "a", 0.9)],
            "bm25": [ChunkHit("G:0", "G", 5.0), ChunkHit("a:0", "a", 1.0)]}[name]
    return sweep_mod._Timed(hits, 0.0, None)


def test_the_sweep_diagnoses_a_three_leg_hybrid_against_its_bm25_leg(monkeypatch):
    variant = parse_sweep({"variants": [{"engine": "hybrid", "legs": ["keyword", "dense", "bm25"],
                                         "weights": [1.0, 1.0, 0.0], "depth": 1}]}).variants[0]
    s = Sweep(snapshot=SNAPSHOT, connection_string="postgresql://u@h/db", table="t",
              query_embeddings={"q1": [1.0]}, embed_ms_per_query=0.0, miss_k=1)
    monkeypatch.setattr(s, "leg_hits", _leg_hits)
    frame = s.run([variant], QUESTIONS)[variant.key]
    row = frame.iloc[0]
    assert row["doc_ids"] == ["a"]  # bm25 weighs nothing in the fusion: G is lost there
    assert row["miss_class"] == "lost_in_fusion"
    assert pd.isna(row["diagnosis_error"])
