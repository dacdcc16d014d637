"""A toy reranker: the candidates in reverse order (or the first kept first), rank scores."""

from __future__ import annotations

from dataclasses import replace

from eval_pipeline.common.registry import boolean
from eval_pipeline.ranking.rerankers import RERANKERS, RerankerKind


class ReverseReranker:
    kind = "reverse"

    def __init__(self, *, keep_first: bool = False):
        if not isinstance(keep_first, bool):
            raise ValueError(f"keep_first must be true or false, got {keep_first!r}")
        self.keep_first = keep_first

    def identity(self):
        return {"kind": self.kind, "model": "", "version": f"1;keep_first={self.keep_first}"}

    def warm_up(self):
        pass

    def rerank(self, query, candidates, *, query_embedding=None):
        head = list(candidates[:1]) if self.keep_first else []
        ordered = head + list(reversed(candidates[len(head):]))
        return [replace(c, score=float(len(ordered) - i)) for i, c in enumerate(ordered)]


RERANKERS.register(RerankerKind("reverse", ReverseReranker, checks=(boolean("keep_first"),),
                                description="a toy: the first stage's order reversed"))
