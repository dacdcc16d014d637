"""Retrieval engines.  Each one answers a query with a ranked list of *documents*.

Chunk-level engines return chunks; `chunks_to_documents` turns those into documents, the
first (best-ranked) chunk of a document giving its rank and score.  Ties between equal
scores are broken by doc id so that every run ranks the same way.

Engines:
- `pg-keyword`: Postgres full-text search through Haystack's PgvectorKeywordRetriever.
- `pg-dense`: cosine search over the HNSW index through PgvectorEmbeddingRetriever.
- `hybrid`: both legs fused by reciprocal rank fusion (Haystack DocumentJoiner).
- `bm25`: Okapi BM25 over the same chunks, with bm25s, in memory.
- `metadata`: a scorer that reads only title, description and filename, never the body;
  the baseline that tells you how much the body contributes.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

from eval_pipeline.corpus import Document

EngineName = Literal["pg-keyword", "pg-dense", "hybrid", "bm25", "metadata"]
ENGINE_NAMES: tuple[str, ...] = ("pg-keyword", "pg-dense", "hybrid", "bm25", "metadata")


@dataclass(frozen=True)
class RankedDoc:
    doc_id: str
    score: float


class Engine(Protocol):
    name: str
    needs_embedding: bool

    def search(self, query: str, query_embedding: Sequence[float] | None) -> list[RankedDoc]: ...


def validate_engine_names(names: Iterable[str]) -> list[str]:
    names = list(names)
    unknown = [n for n in names if n not in ENGINE_NAMES]
    if unknown:
        raise ValueError(f"unknown engine(s) {unknown}; valid engines: {', '.join(ENGINE_NAMES)}")
    if not names:
        raise ValueError(f"no engines selected; valid engines: {', '.join(ENGINE_NAMES)}")
    if len(set(names)) != len(names):
        raise ValueError(f"engine listed twice in {names}")
    return names


def chunks_to_documents(chunks: Iterable[tuple[str, float]], depth: int) -> list[RankedDoc]:
    """(doc id, score) per chunk, best first -> documents, first occurrence wins, cut at depth.

    The input order is the engine's order; equal scores are re-ordered by doc id so that
    the database's arbitrary order among ties cannot change a metric between runs.
    """
    ordered = sorted(enumerate(chunks), key=lambda item: (-item[1][1], item[1][0], item[0]))
    seen: dict[str, float] = {}
    for _, (doc_id, score) in ordered:
        if doc_id not in seen:
            seen[doc_id] = score
            if len(seen) == depth:
                break
    return [RankedDoc(d, s) for d, s in seen.items()]


def _hits(documents) -> list[tuple[str, float]]:
    return [(d.meta["doc_id"], float(d.score if d.score is not None else 0.0)) for d in documents]


class PgKeywordEngine:
    name = "pg-keyword"
    needs_embedding = False

    def __init__(self, document_store, *, depth: int = 20, chunk_top_k: int = 100):
        from haystack_integrations.components.retrievers.pgvector import PgvectorKeywordRetriever

        self.depth = depth
        self.retriever = PgvectorKeywordRetriever(document_store=document_store, top_k=chunk_top_k)

    def chunks(self, query: str):
        return self.retriever.run(query=query)["documents"]

    def search(self, query, query_embedding=None):
        return chunks_to_documents(_hits(self.chunks(query)), self.depth)


class PgDenseEngine:
    name = "pg-dense"
    needs_embedding = True

    def __init__(self, document_store, *, depth: int = 20, chunk_top_k: int = 100):
        from haystack_integrations.components.retrievers.pgvector import PgvectorEmbeddingRetriever

        self.depth = depth
        self.retriever = PgvectorEmbeddingRetriever(document_store=document_store, top_k=chunk_top_k)

    def chunks(self, query_embedding):
        return self.retriever.run(query_embedding=list(query_embedding))["documents"]

    def search(self, query, query_embedding):
        if query_embedding is None:
            raise ValueError("pg-dense needs a query embedding")
        return chunks_to_documents(_hits(self.chunks(query_embedding)), self.depth)


class HybridEngine:
    """Keyword and dense legs fused with reciprocal rank fusion over chunks, then normalized."""

    name = "hybrid"
    needs_embedding = True

    def __init__(self, keyword: PgKeywordEngine, dense: PgDenseEngine, *, depth: int = 20):
        from haystack.components.joiners import DocumentJoiner

        self.keyword, self.dense, self.depth = keyword, dense, depth
        self.joiner = DocumentJoiner(join_mode="reciprocal_rank_fusion")

    def search(self, query, query_embedding):
        keyword_chunks = self.keyword.chunks(query)
        dense_chunks = self.dense.chunks(query_embedding)
        fused = self.joiner.run(documents=[keyword_chunks, dense_chunks])["documents"]
        return chunks_to_documents(_hits(fused), self.depth)


_TOKEN = re.compile(r"[^\W_]+")  # runs of Unicode letters and digits


class BM25Engine:
    """Okapi BM25 (bm25s, k1=1.5, b=0.75) over the chunks stored in the vector table."""

    name = "bm25"
    needs_embedding = False

    def __init__(self, chunks: Sequence[tuple[str, str, str]], *, depth: int = 20, chunk_top_k: int = 100):
        import bm25s

        if not chunks:
            raise ValueError("bm25 needs at least one chunk")
        self.depth = depth
        self.chunk_top_k = min(chunk_top_k, len(chunks))
        self.doc_ids = [doc_id for _, doc_id, _ in chunks]
        self._bm25s = bm25s
        self.retriever = bm25s.BM25()
        tokens = bm25s.tokenize([text for _, _, text in chunks], stopwords="en", show_progress=False)
        self.retriever.index(tokens, show_progress=False)

    def search(self, query, query_embedding=None):
        tokens = self._bm25s.tokenize([query], stopwords="en", show_progress=False)
        if not tokens.vocab:  # only stopwords or punctuation: nothing to match
            return []
        results, scores = self.retriever.retrieve(tokens, k=self.chunk_top_k, show_progress=False, n_threads=1)
        hits = [(self.doc_ids[int(i)], float(s)) for i, s in zip(results[0], scores[0]) if s > 0]
        return chunks_to_documents(hits, self.depth)


def normalize_text(text: str) -> str:
    """Case-folded; every run of characters other than Unicode letters and digits becomes one space."""
    return " ".join(_TOKEN.findall(text.casefold()))


class MetadataEngine:
    """Scores title (weight 4), description (2) and filename (3); never reads the body.

    Per field of weight w: +8w when the whole normalized query is a substring of the field;
    for each distinct query term of two or more characters found in the field, +w plus
    0.25w per occurrence.  Zero scores are dropped; ties are broken by doc id.
    """

    name = "metadata"
    needs_embedding = False
    WEIGHTS = (("title", 4.0), ("description", 2.0), ("filename", 3.0))

    def __init__(self, documents: Sequence[Document], *, depth: int = 20):
        self.depth = depth
        self.fields = [
            (d.doc_id, [(normalize_text(getattr(d, f)), w) for f, w in self.WEIGHTS]) for d in documents
        ]
        self.field_tokens = [[Counter(text.split()) for text, _ in fs] for _, fs in self.fields]

    def score(self, query: str) -> dict[str, float]:
        q = normalize_text(query)
        terms = [t for t in dict.fromkeys(q.split()) if len(t) >= 2]
        scores: dict[str, float] = {}
        for (doc_id, fields), token_counts in zip(self.fields, self.field_tokens):
            total = 0.0
            for (text, w), counts in zip(fields, token_counts):
                if q and q in text:
                    total += 8 * w
                for t in terms:
                    n = counts.get(t, 0)
                    if n:
                        total += w + 0.25 * w * n
            if total > 0:
                scores[doc_id] = total
        return scores

    def search(self, query, query_embedding=None):
        ranked = sorted(self.score(query).items(), key=lambda kv: (-kv[1], kv[0]))[: self.depth]
        return [RankedDoc(d, s) for d, s in ranked]
