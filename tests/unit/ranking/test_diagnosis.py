"""Miss diagnosis (eval_pipeline.ranking.diagnosis.diagnose_miss), worked by hand.

Every case below is a small story with k = 3 and one gold document "G": where G sits in the
final list, in each leg's candidates and before reranking, and which class a reader would
blame.  The expected class is written out literally; nothing is derived from the code.

Precedence, from the latest stage back to the first:
    errored > abstained > demoted_by_reranker > lost_in_fusion
            > both_legs / keyword_only / dense_only > never_candidate
"""

from eval_pipeline.ranking.diagnosis import diagnose_miss

K = 3


def diagnose(final, *, keyword=(), dense=(), pre_rerank=None, fused=False, abstained=False, errored=False,
             gold=("G",), k=K):
    return diagnose_miss(list(gold), final=list(final), k=k, keyword=list(keyword), dense=list(dense),
                         pre_rerank=None if pre_rerank is None else list(pre_rerank), fused=fused,
                         abstained=abstained, errored=errored)


# --- hits are not misses --------------------------------------------------------------


def test_gold_at_rank_1_is_a_hit():
    assert diagnose(["G", "a", "b"], keyword=["x"], dense=["y"]) is None


def test_gold_at_rank_k_is_a_hit_and_at_rank_k_plus_1_is_not():
    assert diagnose(["a", "b", "G"], keyword=["G"], dense=["G"]) is None
    # one place lower: outside the top 3, so a miss (both legs had G among their candidates)
    assert diagnose(["a", "b", "c", "G"], keyword=["G"], dense=["G"]) == "both_legs"


def test_any_one_of_several_gold_documents_in_the_top_k_is_a_hit():
    assert diagnose(["a", "H", "b"], gold=("G", "H")) is None


def test_a_hit_is_a_hit_even_when_flagged_errored_or_abstained():
    # the flags only explain a miss; they never turn a hit into one
    assert diagnose(["G"], errored=True) is None
    assert diagnose(["G"], abstained=True) is None
    assert diagnose(["G", "a"], pre_rerank=["a", "G"]) is None


def test_a_question_without_gold_documents_is_never_a_miss():
    # an abstention question (no relevant document): nothing to miss, whatever came back
    assert diagnose(["a", "b", "c"], gold=()) is None
    assert diagnose([], gold=(), errored=True) is None


# --- one case per class ---------------------------------------------------------------


def test_never_candidate():
    # neither leg ever retrieved G
    assert diagnose(["a", "b", "c"], keyword=["a", "b", "c", "d"], dense=["b", "c", "e"]) == "never_candidate"


def test_never_candidate_with_empty_legs():
    assert diagnose(["a"], keyword=[], dense=[]) == "never_candidate"


def test_keyword_only():
    # G is the keyword leg's 5th candidate; the dense leg never saw it
    assert diagnose(["a", "b", "c"], keyword=["a", "b", "c", "d", "G"], dense=["a", "b"]) == "keyword_only"


def test_dense_only():
    assert diagnose(["a", "b", "c"], keyword=["a"], dense=["a", "b", "c", "d", "G"]) == "dense_only"


def test_both_legs():
    # both legs had G deep in their candidates, a single-leg engine did not surface it
    assert diagnose(["a", "b", "c"], keyword=["a", "b", "c", "G"], dense=["c", "b", "a", "d", "G"]) == "both_legs"


def test_lost_in_fusion_from_the_keyword_leg():
    # the keyword leg alone ranked G 1st (a hit), the fused list dropped it
    assert diagnose(["a", "b", "c"], keyword=["G", "a"], dense=["b", "c", "d"], fused=True) == "lost_in_fusion"


def test_lost_in_fusion_from_the_dense_leg():
    # the dense leg had G at rank 3 = k: inside its own top k
    assert diagnose(["a", "b", "c"], keyword=["a"], dense=["b", "c", "G"], fused=True) == "lost_in_fusion"


def test_fused_but_no_leg_had_it_in_its_top_k_is_not_lost_in_fusion():
    # G is the dense leg's 4th candidate (outside its top 3): the leg ranked it low, fusion is not to blame
    assert diagnose(["a", "b", "c"], keyword=["a"], dense=["a", "b", "c", "G"], fused=True) == "dense_only"
    assert diagnose(["a", "b", "c"], keyword=["a", "b", "c", "G"], dense=["a", "b", "c", "d", "G"],
                    fused=True) == "both_legs"
    assert diagnose(["a", "b", "c"], keyword=["a"], dense=["b"], fused=True) == "never_candidate"


def test_unfused_engine_with_a_leg_that_had_it_in_top_k_is_a_leg_class_not_fusion():
    # a single-leg engine (fused=False): the other leg having G at rank 1 only tells which leg had it
    assert diagnose(["a", "b", "c"], keyword=["G"], dense=["a"], fused=False) == "keyword_only"


def test_demoted_by_reranker():
    # G was 2nd before reranking (a hit) and the reranker pushed it to 4th
    assert diagnose(["a", "b", "c", "G"], keyword=["G"], dense=["G"], pre_rerank=["a", "G", "b", "c"]) \
        == "demoted_by_reranker"


def test_reranker_is_not_blamed_when_gold_was_already_outside_the_top_k():
    # before reranking G was 4th: already a miss, so the blame goes to the earlier stages
    assert diagnose(["a", "b", "c"], keyword=["a", "b", "c", "G"], dense=["x"],
                    pre_rerank=["a", "b", "c", "G"]) == "keyword_only"
    assert diagnose(["a", "b", "c"], keyword=["a"], dense=["b"], pre_rerank=[]) == "never_candidate"


def test_abstained():
    # the score threshold returned nothing although both legs ranked G first
    assert diagnose([], keyword=["G"], dense=["G"], abstained=True) == "abstained"


def test_errored():
    assert diagnose([], errored=True) == "errored"


# --- precedence: the latest stage that lost the gold document is blamed ----------------


def test_errored_beats_abstained():
    assert diagnose([], keyword=["G"], dense=["G"], abstained=True, errored=True) == "errored"


def test_errored_beats_every_later_check():
    assert diagnose(["a"], keyword=["G"], dense=["G"], pre_rerank=["G"], fused=True, errored=True) == "errored"


def test_abstained_beats_demoted_by_reranker():
    assert diagnose([], keyword=["G"], dense=["G"], pre_rerank=["G", "a"], fused=True, abstained=True) == "abstained"


def test_demoted_by_reranker_beats_lost_in_fusion():
    # both legs and the fused list before reranking had G in the top k; the reranker lost it last
    assert diagnose(["a", "b", "c"], keyword=["G"], dense=["G"], pre_rerank=["G", "a", "b"], fused=True) \
        == "demoted_by_reranker"


def test_lost_in_fusion_beats_the_leg_classes():
    # a fused engine whose keyword leg had G first: lost_in_fusion, not keyword_only or both_legs
    assert diagnose(["a", "b", "c"], keyword=["G"], dense=["a", "b", "c", "G"], fused=True) == "lost_in_fusion"


def test_leg_classes_beat_never_candidate_and_each_other_by_membership():
    final = ["a", "b", "c"]
    assert diagnose(final, keyword=["x", "y", "z", "G"], dense=["x", "y", "z", "G"]) == "both_legs"
    assert diagnose(final, keyword=["x", "y", "z", "G"], dense=["x", "y", "z"]) == "keyword_only"
    assert diagnose(final, keyword=["x", "y", "z"], dense=["x", "y", "z", "G"]) == "dense_only"
    assert diagnose(final, keyword=["x", "y", "z"], dense=["x", "y", "z"]) == "never_candidate"


def test_second_gold_document_counts_for_the_legs():
    # gold {G, H}: the keyword leg had G, the dense leg had H, so both legs had a gold document
    assert diagnose(["a", "b", "c"], keyword=["a", "b", "c", "G"], dense=["a", "b", "c", "H"], gold=("G", "H")) \
        == "both_legs"
