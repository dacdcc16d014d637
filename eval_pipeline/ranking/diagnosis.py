"""Why an answerable question was missed: the latest stage that lost its gold document."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence

MISS_CLASSES = (
    "never_candidate",   # no leg had the gold document among its candidates
    "keyword_only",      # only the keyword (lexical) legs had it, and this variant did not surface it
    "dense_only",        # only the dense legs had it
    "both_legs",         # a lexical and a dense leg had it, yet this (single-leg) engine missed it
    "lost_in_fusion",    # a fused leg had it in its own top k, the fused list did not
    "demoted_by_reranker",  # it was in the top k before reranking and not after
    "abstained",         # the variant's score threshold returned nothing
    "errored",           # a stage raised on this question
)


# The side of the diagnosis a leg counts for, by leg name: dense legs for `dense_only`, every
# other leg (keyword, bm25, ...) for `keyword_only`. The sweep passes each leg kind's own
# (`eval_pipeline.ranking.engines.LEGS`, its `side`).
DENSE_SIDE, KEYWORD_SIDE = "dense", "keyword"


def diagnose_miss(
    gold: Sequence[str],
    *,
    final: Sequence[str],
    k: int,
    keyword: Sequence[str] = (),
    dense: Sequence[str] = (),
    pre_rerank: Sequence[str] | None,
    fused: bool,
    abstained: bool = False,
    errored: bool = False,
    legs: Mapping[str, Sequence[str]] | None = None,
    fused_legs: Collection[str] | None = None,
    sides: Mapping[str, str] | None = None,
) -> str | None:
    """Why an answerable question missed (no gold document in the top k); None for a hit.

    The checks run from the last stage back to the first, so a miss is blamed on the latest
    stage that lost the gold document.  The legs' candidate documents, best first, are `legs`
    (leg name -> documents, any number of legs), or the two of `keyword` and `dense`.  "Lost in
    fusion" means a fused leg (`fused_legs`, default every leg given) alone would have hit;
    otherwise the class says which side had the gold document among its candidates at all:
    a leg counts for the side `sides` names (default: `dense` for the leg named dense, the
    keyword side for every other).
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
    candidates = dict(legs) if legs is not None else {"keyword": keyword, "dense": dense}
    counted = candidates if fused_legs is None else {n: d for n, d in candidates.items() if n in fused_legs}
    if fused and any(gold_set & set(docs[:k]) for docs in counted.values()):
        return "lost_in_fusion"
    side_of = dict(sides or {})
    had = {side_of.get(n, DENSE_SIDE if n == "dense" else KEYWORD_SIDE)
           for n, docs in candidates.items() if gold_set & set(docs)}
    if had >= {KEYWORD_SIDE, DENSE_SIDE}:
        return "both_legs"
    if KEYWORD_SIDE in had:
        return "keyword_only"
    if DENSE_SIDE in had:
        return "dense_only"
    return "never_candidate"
