"""Why an answerable question was missed: the latest stage that lost its gold document."""

from __future__ import annotations

from collections.abc import Sequence

MISS_CLASSES = (
    "never_candidate",   # no leg had the gold document among its candidates
    "keyword_only",      # only the keyword leg had it, and this variant did not surface it
    "dense_only",        # only the dense leg had it
    "both_legs",         # both legs had it, yet this (single-leg) engine missed it
    "lost_in_fusion",    # a fused leg had it in its own top k, the fused list did not
    "demoted_by_reranker",  # it was in the top k before reranking and not after
    "abstained",         # the variant's score threshold returned nothing
    "errored",           # a stage raised on this question
)


def diagnose_miss(
    gold: Sequence[str],
    *,
    final: Sequence[str],
    k: int,
    keyword: Sequence[str],
    dense: Sequence[str],
    pre_rerank: Sequence[str] | None,
    fused: bool,
    abstained: bool = False,
    errored: bool = False,
) -> str | None:
    """Why an answerable question missed (no gold document in the top k); None for a hit.

    The checks run from the last stage back to the first, so a miss is blamed on the latest
    stage that lost the gold document.  `keyword` and `dense` are the legs' candidate
    documents, best first: "lost in fusion" means a leg alone would have hit; otherwise the
    class says which legs had the gold document among their candidates at all.
    """
    gold_set = set(gold)
    if not gold_set or gold_set & set(final[:k]):
        return None
    if errored:
        return "errored"
    if abstained:
        return "abstained"
    if pre_rerank is not None and gold_set & set(pre_rerank[:k]):
        return "demoted_by_reranker"
    if fused and gold_set & (set(keyword[:k]) | set(dense[:k])):
        return "lost_in_fusion"
    in_keyword, in_dense = bool(gold_set & set(keyword)), bool(gold_set & set(dense))
    if in_keyword and in_dense:
        return "both_legs"
    if in_keyword:
        return "keyword_only"
    if in_dense:
        return "dense_only"
    return "never_candidate"
