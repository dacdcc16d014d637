"""What a retriever returns: chunk hits, and the ranked documents they make (the first occurrence
of a document wins). A leaf of the ranking package: every engine module imports it, and the
engine registry imports the engine modules, so these types cannot live in the registry's module.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

__all__ = ["ChunkHit", "RankedDoc", "chunks_to_documents"]


@dataclass(frozen=True)
class RankedDoc:
    doc_id: str
    score: float
    chunk_id: str | None = field(default=None, compare=False)  # the chunk that gave the rank


@dataclass(frozen=True)
class ChunkHit:
    chunk_id: str
    doc_id: str
    score: float


def chunks_to_documents(chunks: Iterable, depth: int) -> list[RankedDoc]:
    """Chunk hits, best first -> documents, first occurrence wins, cut at depth.

    Accepts ChunkHit objects or (doc id, score) pairs.  Equal scores are re-ordered by doc id
    so that the database's arbitrary order among ties cannot change a metric between runs.
    """
    items = [(c.doc_id, c.score, c.chunk_id) if isinstance(c, ChunkHit) else (c[0], c[1], None) for c in chunks]
    ordered = sorted(enumerate(items), key=lambda item: (-item[1][1], item[1][0], item[0]))
    seen: dict[str, RankedDoc] = {}
    for _, (doc_id, score, chunk_id) in ordered:
        if doc_id not in seen:
            seen[doc_id] = RankedDoc(doc_id, score, chunk_id)
            if len(seen) == depth:
                break
    return list(seen.values())
