"""Retrieval engines.  Each one answers a query with a ranked list of *documents*.

Chunk-level engines return chunks; `chunks_to_documents` turns those into documents, the
first (best-ranked) chunk of a document giving its rank and score.  Ties between equal
scores are broken by doc id so that every run ranks the same way.

Engines:
- `pg-keyword`: Postgres full-text search, run by IndexedKeywordEngine (eval_pipeline.ranking.keyword_index:
  the ranking of Haystack's PgvectorKeywordRetriever on a stored, indexed tsvector; a parity
  test in tests/integration/test_keyword_index.py holds the two together).
- `pg-dense`: cosine search over the HNSW index, run by LeanDenseEngine (eval_pipeline.ranking.dense:
  the ids and scores of Haystack's PgvectorEmbeddingRetriever without shipping the embeddings).
  PgDenseEngine here is Haystack's retriever itself, kept as the reference the parity test
  (tests/integration/test_dense_retriever.py) and bench/dense_leg.py hold the lean one to.
- `hybrid`: two or more legs fused by `fuse` (the sweep runs the legs and the fusion).
- `bm25`: Okapi BM25 over the same chunks, in memory: eval_pipeline.ranking.bm25.
- `metadata`: a scorer that reads only title, description and filename, never the body;
  the baseline that tells you how much the body contributes.

The registry (`ENGINES`, issue #24): every engine kind declares its name, its name as a
first-stage leg (`leg`: what a hybrid's `legs:` lists and what the latency and the diagnosis
call it), its options (the leg settings a variant may give, checked when the variants file is
loaded), what it needs (`needs`: the question's embedding, the index's table, the chunks, the
corpus) and how it is built (`build`: a leg's engine, with `chunk_hits(query, embedding)`;
`search`: a document-level engine, with `search(query)`). The sweep, the variants file's
checks and the ranking plan read only the registry. A new engine is one file that defines its
kind and calls `ENGINES.register(EngineKind(...))`, plus the line that imports the file: its
module in `BUILTIN_ENGINE_MODULES` here, or in EVAL_PIPELINE_PLUGINS (eval_pipeline.common.registry).
"""

from __future__ import annotations

from bisect import bisect_right
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from eval_pipeline.common.registry import Names, Option, Registry, boolean, choice, integer
from eval_pipeline.common.text import TOKEN
from eval_pipeline.corpus.sources import CorpusSnapshot, Document
from eval_pipeline.ranking import bm25  # light: bm25s and PyStemmer load only when an engine is built
from eval_pipeline.ranking.bm25 import BM25Engine
from eval_pipeline.ranking.defaults import RRF_K
from eval_pipeline.ranking.hits import ChunkHit, RankedDoc, chunks_to_documents
from eval_pipeline.store import tsvector
from eval_pipeline.store.tsvector import keyword_settings

EngineName = Literal["pg-keyword", "pg-dense", "hybrid", "bm25", "metadata"]  # the built-in ones


def _hits(documents) -> list[ChunkHit]:
    return [ChunkHit(d.id, d.meta["doc_id"], float(d.score if d.score is not None else 0.0)) for d in documents]


def fuse(legs: Sequence[Sequence[ChunkHit]], *, mode: str = "rrf", rrf_k: int = RRF_K,
         weights: Sequence[float] | None = None) -> list[ChunkHit]:
    """Fuse ranked chunk lists.

    `rrf` is reciprocal rank fusion with a configurable k, computed exactly as Haystack's
    DocumentJoiner does (which fixes k = 61; a parity test holds the two together at 61).
    `merge` (weighted score sum) and `dbsf` (distribution-based score fusion) run through
    Haystack's DocumentJoiner itself.
    """
    if weights is not None and len(weights) != len(legs):
        raise ValueError(f"weights {list(weights)} must have one entry per leg ({len(legs)})")
    if mode == "rrf":
        n = len(legs)
        w = [x / sum(weights) for x in weights] if weights else [1 / n] * n
        scores: dict[str, float] = {}
        first: dict[str, ChunkHit] = {}
        for hits, weight in zip(legs, w):
            for rank, hit in enumerate(hits):
                scores[hit.chunk_id] = scores.get(hit.chunk_id, 0.0) + (weight * n) / (rrf_k + rank)
                first.setdefault(hit.chunk_id, hit)
        return sorted(
            (ChunkHit(cid, first[cid].doc_id, s / (n / rrf_k)) for cid, s in scores.items()),
            key=lambda h: (-h.score, h.chunk_id),
        )
    if mode not in ("merge", "dbsf"):
        raise ValueError(f"fusion mode {mode!r} is not valid; valid: rrf, merge, dbsf")
    from haystack import Document as HDocument  # noqa: PLC0415  deferred: Haystack imports torch, ~3 s
    from haystack.components.joiners import DocumentJoiner  # noqa: PLC0415  deferred: Haystack imports torch, ~3 s

    joiner = DocumentJoiner(
        join_mode="merge" if mode == "merge" else "distribution_based_rank_fusion",
        weights=list(weights) if weights else None,
    )
    docs = [[HDocument(id=h.chunk_id, content="", score=h.score, meta={"doc_id": h.doc_id}) for h in hits]
            for hits in legs]
    return _hits(joiner.run(documents=docs)["documents"])


class PgDenseEngine:
    """Haystack's PgvectorEmbeddingRetriever as an engine: the parity reference (see above)."""

    name = "pg-dense"
    needs_embedding = True

    def __init__(self, document_store, *, depth: int = 20, chunk_top_k: int = 100):
        # deferred: Haystack imports torch, ~3 s
        from haystack_integrations.components.retrievers.pgvector import PgvectorEmbeddingRetriever  # noqa: PLC0415

        self.depth = depth
        self.retriever = PgvectorEmbeddingRetriever(document_store=document_store, top_k=chunk_top_k)

    def chunk_hits(self, query: str, query_embedding) -> list[ChunkHit]:
        if query_embedding is None:
            raise ValueError("pg-dense needs a query embedding")
        return _hits(self.retriever.run(query_embedding=list(query_embedding))["documents"])

    def search(self, query, query_embedding):
        return chunks_to_documents(self.chunk_hits(query, query_embedding), self.depth)




def normalize_text(text: str) -> str:
    """Case-folded; every run of characters other than Unicode letters and digits becomes one space."""
    return " ".join(TOKEN.findall(text.casefold()))


class MetadataEngine:
    """Scores title (weight 4), description (2) and filename (3); never reads the body.

    Per field of weight w: +8w when the whole normalized query is a substring of the field;
    for each distinct query term of two or more characters found in the field, +w plus
    0.25w per occurrence.  Zero scores are dropped; ties are broken by doc id.

    Scored through an index, not a scan of every document per query (the question-set audit
    asks once per question: the scan was 13.8 s of a cold SciFact run): each word's postings
    (document, field, occurrences), and each field's texts joined by a separator no normalized
    text holds, searched for the whole query. Every addend is a multiple of 1/4 (the weights
    are 4, 2 and 3), so the sums are exact in any order: the scores are the scan's to the bit.
    """

    name = "metadata"
    needs_embedding = False
    WEIGHTS = (("title", 4.0), ("description", 2.0), ("filename", 3.0))
    _SEPARATOR = "\x00"  # never in a normalized text (letters, digits and single spaces)

    def __init__(self, documents: Sequence[Document], *, depth: int = 20):
        self.depth = depth
        self.doc_ids = [d.doc_id for d in documents]
        texts = [[normalize_text(getattr(d, f)) for f, _ in self.WEIGHTS] for d in documents]
        # word -> (document position, field position, occurrences), documents ascending
        self._postings: dict[str, list[tuple[int, int, int]]] = {}
        for position, fields in enumerate(texts):
            for field, text in enumerate(fields):
                for word, n in Counter(text.split()).items():
                    self._postings.setdefault(word, []).append((position, field, n))
        # per field: its texts joined, and where each document's text starts in it
        self._joined: list[tuple[str, list[int]]] = []
        for field in range(len(self.WEIGHTS)):
            starts, offset = [], 0
            for fields in texts:
                starts.append(offset)
                offset += len(fields[field]) + len(self._SEPARATOR)
            self._joined.append((self._SEPARATOR.join(fields[field] for fields in texts), starts))

    def score(self, query: str) -> dict[str, float]:
        q = normalize_text(query)
        terms = [t for t in dict.fromkeys(q.split()) if len(t) >= 2]
        totals: dict[int, float] = {}
        weights = [w for _, w in self.WEIGHTS]
        if q:
            for field, (joined, starts) in enumerate(self._joined):
                holding = set()
                at = joined.find(q)
                while at != -1:  # `q` holds no separator: each match lies in one document's text
                    holding.add(bisect_right(starts, at) - 1)
                    at = joined.find(q, at + 1)
                for position in holding:  # the whole query in this field: once, however often
                    totals[position] = totals.get(position, 0.0) + 8 * weights[field]
        for t in terms:
            for position, field, n in self._postings.get(t, ()):
                w = weights[field]
                totals[position] = totals.get(position, 0.0) + w + 0.25 * w * n
        return {self.doc_ids[position]: totals[position] for position in sorted(totals) if totals[position] > 0}

    def search(self, query, query_embedding=None):
        ranked = sorted(self.score(query).items(), key=lambda kv: (-kv[1], kv[0]))[: self.depth]
        return [RankedDoc(d, s) for d, s in ranked]


# --- the registry ------------------------------------------------------------------------------


class LegContext(Protocol):
    """What a kind's builder may use (the Sweep is one): the index's table, the corpus, the chunks."""

    connection_string: str
    table: str
    snapshot: CorpusSnapshot

    def chunks(self) -> list[tuple[str, str, str]]: ...


# What a kind may need, for its builder and for the plan: the question's embedding (the embed
# stage is timed with it, and the index's embedder decides its results), the index's table,
# the chunks (ids, doc ids, texts), the corpus's documents.
NEEDS = ("query_embedding", "store", "chunks", "documents")


@dataclass(frozen=True)
class EngineKind:
    """One engine of the variants file's `engine:` (and, with `leg`, one leg of a hybrid)."""

    name: str
    leg: str | None = None  # its name as a first-stage leg; None: not a leg (hybrid, metadata)
    options: tuple[Option, ...] = ()  # the leg's settings, given on a variant that uses the leg
    needs: frozenset[str] = frozenset()  # of NEEDS
    side: Literal["keyword", "dense"] = "keyword"  # the diagnosis side it counts for (eval_pipeline.ranking.diagnosis)
    build: Callable[[LegContext, int, Mapping[str, Any]], Any] | None = None  # (context, chunk depth, settings)
    resolve: Callable[[Mapping[str, Any]], dict[str, Any]] = dict  # the settings with the leg's defaults filled in
    search: Callable[[LegContext], Any] | None = None  # a document-level engine: no legs, search(query) -> RankedDoc
    fuses: bool = False  # ranks by fusing the legs the variant lists (hybrid)
    engine_options: tuple[str, ...] = ()  # settings of the engine itself, checked by the variants file (hybrid's)
    max_top_k: int | None = None  # the deepest chunk_top_k the leg can serve
    max_top_k_why: str = ""  # why, for the variants file's message
    description: str = ""

    @property
    def option_names(self) -> tuple[str, ...]:
        return tuple(o.name for o in self.options)


BUILTIN_ENGINE_MODULES: tuple[str, ...] = ()  # one line per engine kind defined in a file of its own


ENGINES: Registry[EngineKind] = Registry("engine", modules=BUILTIN_ENGINE_MODULES)


ENGINE_NAMES: Sequence[str] = Names(ENGINES)  # every registered engine, in registration order


LEGS: Sequence[str] = Names(ENGINES, lambda k: k.leg is not None, key=lambda k: k.leg)  # every leg name


def legs() -> dict[str, EngineKind]:
    """leg name -> its kind, in registration order."""
    return {k.leg: k for k in ENGINES.kinds() if k.leg is not None}


def leg_kind(leg: str) -> EngineKind:
    kind = legs().get(leg)
    if kind is None:
        raise ValueError(f"unknown leg {leg!r}")
    return kind


def _keyword_leg(ctx: LegContext, top_k: int, settings: Mapping[str, Any]):
    # deferred: keyword_index imports Haystack and torch (~3 s), only when ranking
    from eval_pipeline.ranking.keyword_index import IndexedKeywordEngine  # noqa: PLC0415

    # Same ranking as Haystack's PgvectorKeywordRetriever at the defaults, on a stored, indexed
    # tsvector (parity tested in tests/integration/test_keyword_index.py).
    return IndexedKeywordEngine(ctx.connection_string, ctx.table, chunk_top_k=top_k, **settings)


def _dense_leg(ctx: LegContext, top_k: int, settings: Mapping[str, Any]):
    from eval_pipeline.ranking import dense  # noqa: PLC0415  deferred: imports Haystack and torch (~3 s)

    # Haystack's PgvectorEmbeddingRetriever's ids and scores (parity-tested), selecting only id,
    # doc id and score; HNSW ef_search max(40, top_k) for this leg alone, so a variant ranks the
    # same alone, in the sweep or in a parallel batch.
    return dense.LeanDenseEngine(ctx.connection_string, ctx.table, chunk_top_k=top_k, **settings)


def _bm25_leg(ctx: LegContext, top_k: int, settings: Mapping[str, Any]):
    titles = {d.doc_id: d.title for d in ctx.snapshot.documents}
    return BM25Engine(ctx.chunks(), titles=titles, chunk_top_k=top_k, **settings)


def _keyword_resolved(given: Mapping[str, Any]) -> dict[str, Any]:
    return dict(keyword_settings(**given))


def _bm25_resolved(given: Mapping[str, Any]) -> dict[str, Any]:
    return dict(bm25.check_settings(**given))


def _keyword_choices(name: str) -> Callable[[], Sequence[str]]:
    def listed() -> Sequence[str]:
        return getattr(tsvector, name)
    return listed


def _bm25_choices(name: str) -> Callable[[], Sequence[str]]:
    def listed() -> Sequence[str]:
        return getattr(bm25, name)
    return listed


MAX_DENSE_TOP_K = 1000  # pgvector caps hnsw.ef_search at 1000


ENGINES.register(EngineKind(
    "pg-keyword", leg="keyword", needs=frozenset({"store"}), build=_keyword_leg, resolve=_keyword_resolved,
    options=(choice("match", _keyword_choices("KEYWORD_MATCHES")),
             choice("ranking", _keyword_choices("KEYWORD_RANKINGS")), integer("normalization", 0, 63)),
    description="Postgres full-text search on the stored tsvector"))
ENGINES.register(EngineKind(
    "pg-dense", leg="dense", side="dense", needs=frozenset({"store", "query_embedding"}), build=_dense_leg,
    resolve=lambda given: {"exact": bool(given.get("exact", False))}, options=(boolean("exact"),),
    max_top_k=MAX_DENSE_TOP_K, max_top_k_why="pgvector's HNSW search returns at most 1000 rows (hnsw.ef_search)",
    description="cosine search over the HNSW index"))
ENGINES.register(EngineKind(
    "hybrid", fuses=True, engine_options=("fusion", "rrf_k", "weights", "legs", "tune"),
    description="two or more legs fused"))
ENGINES.register(EngineKind(
    "bm25", leg="bm25", needs=frozenset({"store", "chunks", "documents"}), build=_bm25_leg, resolve=_bm25_resolved,
    options=(choice("stemmer", _bm25_choices("STEMMERS")), choice("stopwords", _bm25_choices("STOPWORDS")),
             choice("fields", _bm25_choices("FIELDS"))),
    description="Okapi BM25 over the chunks, in memory"))
ENGINES.register(EngineKind(
    "metadata", needs=frozenset({"documents"}), search=lambda ctx: MetadataEngine(ctx.snapshot.documents),
    description="title, description and filename only"))
