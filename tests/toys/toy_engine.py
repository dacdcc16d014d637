"""A toy engine and leg: chunks ranked by how many of the question's words (of `min_length`
characters or more) they contain. Usable alone (`engine: toy-overlap`) and as a hybrid's leg
(`legs: [keyword, overlap]`); a keyword-side leg for the miss diagnosis."""

from __future__ import annotations

from eval_pipeline.common.registry import integer
from eval_pipeline.ranking.engines import ENGINES, ChunkHit, EngineKind, chunks_to_documents


class OverlapLeg:
    def __init__(self, chunks, *, chunk_top_k: int, min_length: int = 4):
        self.chunks, self.top_k, self.min_length = chunks, chunk_top_k, min_length

    def chunk_hits(self, query, query_embedding=None):
        words = {w for w in query.lower().split() if len(w) >= self.min_length}
        scored = [ChunkHit(cid, doc_id, float(sum(w in text.lower() for w in words)))
                  for cid, doc_id, text in self.chunks]
        return sorted((h for h in scored if h.score > 0), key=lambda h: (-h.score, h.chunk_id))[: self.top_k]

    def search(self, query, query_embedding=None):
        return chunks_to_documents(self.chunk_hits(query), 10**9)


ENGINES.register(EngineKind(
    "toy-overlap", leg="overlap", needs=frozenset({"store", "chunks"}), options=(integer("min_length", 1, 20),),
    build=lambda ctx, top_k, settings: OverlapLeg(ctx.chunks(), chunk_top_k=top_k, **settings),
    resolve=lambda given: {"min_length": given.get("min_length", 4)}, description="a toy: shared words"))
