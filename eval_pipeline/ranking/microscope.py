"""The retrieval microscope (issue #26): for every missed question of every variant, the evidence
of where its gold document was lost, and a triage label.

A miss is an answerable question with no gold document in the top ``k`` of the variant's final
list (``k`` is the sweep's ``miss_k``, 10 by default). Its record holds, per leg the variant has
(its own legs, taken from the variant: ``Variant.used_legs``, any number and any kind: keyword,
dense, bm25, a registered toy leg; an engine without legs, such as metadata, is its own one
"leg"), the best gold document's rank and score among that leg's candidates and the leg's top 5
candidates with their scores; the gold's and the k-th candidate's cosine to the query; whether a
chunk of a gold document holds the question's answer (its gist); and the labels below.

Triage (one label per miss, the latest stage that lost the gold document, checked from the last
stage back):

``errored``               a stage raised on the question (no evidence can be trusted);
``dropped_by_threshold``  the variant refused (its abstention policy) although its list, before
                          the refusal, had a gold document in the top k;
``demoted_by_reranker``   a gold document was in the top k before reranking, not after;
``lost_in_fusion``        a fused variant, and one of its legs alone had a gold document in the
                          top k;
``outranked_in_pool``     a leg had a gold document among its candidates, but below the top k
                          (a deeper list, or a better order, finds it);
``never_candidate``       no leg of the variant had a gold document among its candidates.

A refused question whose unrefused list had no gold in the top k is triaged on that list (the
refusal cost nothing). Ties: none (the order above decides).

Dense cause (``crowding`` or ``embedding``, for a miss of a variant with a dense leg that the
dense leg itself missed: its gold not in the dense leg's top k): the gold document's cosine to
the query (the best of its chunks) against the k-th dense candidate's (its best chunk, which is
the dense leg's own score). ``crowding`` when the gold's cosine is at least the k-th's minus
:data:`CROWDING_MARGIN` (0.05 cosine): the gold is nearly as near as what made the list, so a
deeper pool or a better first-stage order finds it; ``embedding`` when it is further: the query
and the document are far apart in the embedding, and only document-side work (enrichment, other
chunking, another model) helps. None when a cosine is missing (no embedding, fewer than k dense
candidates: then nothing was crowded out, and the gold is reported as ``embedding`` only if it has
a cosine; see :func:`dense_cause`).

Everything here is pure: the sweep gathers the inputs (`eval_pipeline.ranking.sweep.Sweep`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Collection, Mapping, Sequence
from typing import Any

from eval_pipeline.ranking.hits import RankedDoc

__all__ = ["CROWDING_MARGIN", "DENSE_CAUSES", "TOP_N", "TRIAGE_LABELS", "answer_chunk", "dense_cause",
           "leg_evidence", "miss_record", "triage"]

TRIAGE_LABELS = ("never_candidate", "outranked_in_pool", "lost_in_fusion", "demoted_by_reranker",
                 "dropped_by_threshold", "errored")
DENSE_CAUSES = ("crowding", "embedding")
CROWDING_MARGIN = 0.05  # cosine units: within it of the k-th dense candidate, the gold was crowded out
TOP_N = 5  # candidates shown per leg


def _in_top(docs: Sequence[str], gold: Collection[str], k: int) -> bool:
    return any(d in gold for d in docs[:k])


def triage(gold: Collection[str], *, final: Sequence[str], k: int, legs: Mapping[str, Sequence[str]],
           fused: bool, pre_rerank: Sequence[str] | None = None, unrefused: Sequence[str] | None = None,
           abstained: bool = False, errored: bool = False) -> str | None:
    """The triage label of a miss (see the module docstring), None for a hit or a question
    without gold documents. `legs`: each of the variant's legs' candidate documents, best
    first (every leg given counts: the caller passes the variant's own); `unrefused`: the
    variant's list before its refusal (when it refused)."""
    gold = set(gold)
    if not gold or _in_top(final, gold, k):
        return None
    if errored:
        return "errored"
    if abstained and unrefused is not None and _in_top(unrefused, gold, k):
        return "dropped_by_threshold"
    if pre_rerank is not None and _in_top(pre_rerank, gold, k):
        return "demoted_by_reranker"
    if fused and any(_in_top(docs, gold, k) for docs in legs.values()):
        return "lost_in_fusion"
    if any(gold & set(docs) for docs in legs.values()):
        return "outranked_in_pool"
    return "never_candidate"


def dense_cause(gold_cosine: float | None, kth_cosine: float | None,
                margin: float = CROWDING_MARGIN) -> str | None:
    """``crowding`` when ``gold_cosine >= kth_cosine - margin`` (equality counts as crowding),
    ``embedding`` when lower; with no k-th candidate (the dense leg returned fewer than k) a
    gold with a cosine was not crowded out: ``embedding``. None without the gold's cosine."""
    if gold_cosine is None or not math.isfinite(gold_cosine):
        return None
    if kth_cosine is None or not math.isfinite(kth_cosine):
        return "embedding"
    return "crowding" if gold_cosine >= kth_cosine - margin else "embedding"


def leg_evidence(docs: Sequence[RankedDoc], gold: Collection[str], top_n: int = TOP_N) -> dict[str, Any]:
    """One leg's evidence: its best gold document (the first in its order), that document's
    1-based rank and score among the leg's candidate documents (None when absent), how many
    candidates it had, and its top `top_n` candidates as [doc id, score]."""
    gold = set(gold)
    found = next(((rank, d) for rank, d in enumerate(docs, start=1) if d.doc_id in gold), None)
    return {"gold": found[1].doc_id if found else None, "gold_rank": found[0] if found else None,
            "gold_score": float(found[1].score) if found else None, "candidates": len(docs),
            "top": [[d.doc_id, float(d.score)] for d in docs[:top_n]]}


_WORD = re.compile(r"[a-z0-9]+")


def answer_chunk(gist: str, gold_chunks: Mapping[str, str]) -> dict[str, Any] | None:
    """Whether a chunk of the gold documents holds the answer: the gist's words of 3 or more
    characters (case-folded) found in each gold chunk (`gold_chunks`: chunk id -> text); the
    chunk with the most (ties: the smaller chunk id) and ``exists`` when it holds at least half
    of them. None without a gist (nothing to look for); ``exists`` False when the gold document
    has no chunk in the store."""
    words = {w for w in _WORD.findall(gist.lower()) if len(w) >= 3}
    if not words:
        return None
    best: tuple[int, str] | None = None
    for chunk_id in sorted(gold_chunks):
        found = len(words & set(_WORD.findall(gold_chunks[chunk_id].lower())))
        if best is None or found > best[0]:
            best = (found, chunk_id)
    if best is None:
        return {"chunk_id": None, "words_found": 0, "words": len(words), "exists": False}
    return {"chunk_id": best[1], "words_found": best[0], "words": len(words), "exists": 2 * best[0] >= len(words)}


def miss_record(*, variant: str, qid: str, gold: Sequence[str], k: int, final: Sequence[RankedDoc],
                legs: Mapping[str, Sequence[RankedDoc]], fused: bool, pre_rerank: Sequence[str] | None,
                unrefused: Sequence[RankedDoc] | None, abstained: bool, errored: bool,
                gold_cosine: float | None = None, kth_cosine: float | None = None, dense_leg: str | None = None,
                answer: Mapping[str, Any] | None = None) -> dict[str, Any] | None:
    """The microscope's record of one miss (None for a hit): the triage label, the dense cause
    (when `dense_leg` names the variant's dense leg and it missed too), each leg's evidence, the
    cosines, the answer chunk and the variant's own top 5."""
    label = triage(gold, final=[d.doc_id for d in final], k=k, legs={n: [d.doc_id for d in docs]
                                                                     for n, docs in legs.items()},
                   fused=fused, pre_rerank=pre_rerank,
                   unrefused=[d.doc_id for d in unrefused] if unrefused is not None else None,
                   abstained=abstained, errored=errored)
    if label is None:
        return None
    evidence = {name: leg_evidence(docs, gold) for name, docs in legs.items()}
    cause = None
    if dense_leg is not None and dense_leg in legs and label != "errored" and \
            not _in_top([d.doc_id for d in legs[dense_leg]], set(gold), k):
        cause = dense_cause(gold_cosine, kth_cosine)
    shown = unrefused if abstained and unrefused is not None else final
    return {"variant": variant, "qid": qid, "gold": list(gold), "k": k, "triage": label, "dense_cause": cause,
            "legs": evidence, "gold_cosine": gold_cosine, "kth_cosine": kth_cosine,
            "crowding_margin": CROWDING_MARGIN, "answer_chunk": answer,
            "top": [[d.doc_id, float(d.score)] for d in shown[:TOP_N]]}
