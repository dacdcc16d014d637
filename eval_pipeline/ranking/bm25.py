"""The `bm25` engine: Okapi BM25 over chunks, with stemming, stopwords and an optional title field.

Text analysis (the same steps, in this order, for chunks and for queries):

1. tokenize: `eval_pipeline.common.text.TOKEN` on the case-folded text (runs of Unicode letters
   and digits; underscores and punctuation split) -- the one tokenizer the project uses;
2. stopwords: `"english"` drops bm25s's English list (`bm25s.stopwords.STOPWORDS_EN`, NLTK's
   English list); `"none"` keeps every token;
3. stemming: `"english"` is the Snowball English stemmer (Porter2) through PyStemmer
   (`Stemmer.Stemmer("english")`, the stemmer bm25s documents); `"none"` keeps the word.

Fields: `"body"` indexes the chunk text; `"title+body"` indexes the document's title, then the
chunk text, as one field (`title + " " + text`, the title repeated on every chunk of its
document), which is how BEIR's and bm25s's SciFact figures read the corpus.

Scoring is bm25s's (`bm25s.BM25(k1, b)`, its default "lucene" variant, float32), fed with the
tokens above:

    score(d, q) = sum over query tokens t (repeats counted) of
                  idf(t) * tf(t, d) / (tf(t, d) + k1 * (1 - b + b * |d| / avgdl))
    idf(t)      = ln(1 + (N - df(t) + 0.5) / (df(t) + 0.5))

(the tf part omits Robertson's constant (k1 + 1) factor, which changes no ranking).  Only
chunks with a positive score are hits; a query with no token in the index (empty, punctuation,
only stopwords, unknown words) returns [].  Ties are broken by chunk id, including at the
`chunk_top_k` cut, so every run returns the same list.

bench/bm25_anchor.py holds this engine against bm25s run directly on SciFact (RESULTS.md).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal

from eval_pipeline.common.checks import is_finite, is_integer
from eval_pipeline.common.text import TOKEN
from eval_pipeline.ranking.hits import ChunkHit, chunks_to_documents

StemmerName = Literal["english", "none"]
StopwordsName = Literal["english", "none"]
FieldsName = Literal["body", "title+body"]

STEMMERS: tuple[str, ...] = ("english", "none")
STOPWORDS: tuple[str, ...] = ("english", "none")
FIELDS: tuple[str, ...] = ("body", "title+body")

DEFAULT_K1 = 1.5
DEFAULT_B = 0.75


def check_settings(*, stemmer: Any = "english", stopwords: Any = "english", fields: Any = "body",
                   k1: Any = DEFAULT_K1, b: Any = DEFAULT_B) -> dict[str, Any]:
    """The settings as a plain dict, or ValueError naming the first bad one and what is valid.

    Importable without bm25s or PyStemmer: a variants-file validator can call it at load time.
    """
    if not isinstance(stemmer, str) or stemmer not in STEMMERS:
        raise ValueError(f"bm25 stemmer {stemmer!r} is not valid; valid: {', '.join(STEMMERS)}")
    if not isinstance(stopwords, str) or stopwords not in STOPWORDS:
        raise ValueError(f"bm25 stopwords {stopwords!r} is not valid; valid: {', '.join(STOPWORDS)}")
    if not isinstance(fields, str) or fields not in FIELDS:
        raise ValueError(f"bm25 fields {fields!r} is not valid; valid: {', '.join(FIELDS)}")
    if not is_finite(k1) or float(k1) < 0:
        raise ValueError(f"bm25 k1 {k1!r} is not valid; valid: a finite number >= 0 (default {DEFAULT_K1})")
    if not is_finite(b) or not 0.0 <= float(b) <= 1.0:
        raise ValueError(f"bm25 b {b!r} is not valid; valid: a number from 0 to 1 (default {DEFAULT_B})")
    return {"stemmer": stemmer, "stopwords": stopwords, "fields": fields, "k1": float(k1), "b": float(b)}


class Analyzer:
    """Text -> index terms: TOKEN on case-folded text, then stopwords, then stemming."""

    def __init__(self, *, stemmer: StemmerName = "english", stopwords: StopwordsName = "english"):
        check_settings(stemmer=stemmer, stopwords=stopwords)
        if stopwords == "english":
            from bm25s.stopwords import STOPWORDS_EN  # noqa: PLC0415  deferred: bm25s takes ~0.4 s to import

            self.stopwords: frozenset[str] = frozenset(STOPWORDS_EN)
        else:
            self.stopwords = frozenset()
        if stemmer == "english":
            import Stemmer  # noqa: PLC0415  deferred: loaded with bm25s, only when an engine is built

            self._stem = Stemmer.Stemmer("english").stemWords
        else:
            self._stem = None

    def __call__(self, text: str) -> list[str]:
        return self.analyze_many([text])[0]

    def analyze_many(self, texts: Sequence[str]) -> list[list[str]]:
        stop = self.stopwords
        tokenized = [[t for t in TOKEN.findall(text.casefold()) if t not in stop] for text in texts]
        if self._stem is None:
            return tokenized
        # Stem each distinct word once (PyStemmer is deterministic; this is only faster).
        words = sorted({t for tokens in tokenized for t in tokens})
        stem_of = dict(zip(words, self._stem(words)))
        return [[stem_of[t] for t in tokens] for tokens in tokenized]


class BM25Engine:
    """Okapi BM25 over (chunk id, doc id, text) rows; see the module docstring for the analysis.

    `titles` (doc id -> title) is required with fields="title+body" and must name every
    document of the chunks; with fields="body" it is not read.
    """

    name = "bm25"
    needs_embedding = False

    def __init__(
        self,
        chunks: Sequence[tuple[str, str, str]],
        *,
        titles: Mapping[str, str] | None = None,
        stemmer: StemmerName = "english",
        stopwords: StopwordsName = "english",
        fields: FieldsName = "body",
        k1: float = DEFAULT_K1,
        b: float = DEFAULT_B,
        depth: int = 20,
        chunk_top_k: int = 100,
    ):
        self._settings = check_settings(stemmer=stemmer, stopwords=stopwords, fields=fields, k1=k1, b=b)
        if not is_integer(depth) or depth < 1:
            raise ValueError(f"bm25 depth {depth!r} is not valid; valid: an integer >= 1")
        if not is_integer(chunk_top_k) or chunk_top_k < 1:
            raise ValueError(f"bm25 chunk_top_k {chunk_top_k!r} is not valid; valid: an integer >= 1")
        if not chunks:
            raise ValueError("bm25 needs at least one chunk")
        if fields == "title+body":
            if titles is None:
                raise ValueError("bm25 fields 'title+body' needs titles (a mapping of doc id to title)")
            missing = sorted({doc_id for _, doc_id, _ in chunks if doc_id not in titles})
            if missing:
                raise ValueError(f"bm25 fields 'title+body': no title for doc id(s) {missing[:5]}"
                                 + (f" and {len(missing) - 5} more" if len(missing) > 5 else ""))
        self.chunk_ids = [chunk_id for chunk_id, _, _ in chunks]
        if len(set(self.chunk_ids)) != len(self.chunk_ids):
            seen: set[str] = set()
            for dup in self.chunk_ids:  # the first id seen a second time
                if dup in seen:
                    break
                seen.add(dup)
            raise ValueError(f"bm25: chunk id {dup!r} appears more than once")
        self.doc_ids = [doc_id for _, doc_id, _ in chunks]
        self.depth = depth
        self.chunk_top_k = min(chunk_top_k, len(chunks))

        # deferred: bm25s takes ~0.4 s to import; numpy too is loaded only when an engine is built
        import bm25s  # noqa: PLC0415
        import numpy as np  # noqa: PLC0415

        self._np = np
        self.analyzer = Analyzer(stemmer=stemmer, stopwords=stopwords)
        if fields == "title+body":
            if titles is None:  # refused above
                raise ValueError("bm25 fields 'title+body' needs titles (a mapping of doc id to title)")
            texts = [f"{titles[doc_id]} {text}" for _, doc_id, text in chunks]
        else:
            texts = [text for _, _, text in chunks]
        tokens = self.analyzer.analyze_many(texts)
        self.retriever = bm25s.BM25(k1=float(k1), b=float(b))  # method "lucene" (bm25s's default)
        self._empty = not any(tokens)  # no chunk has an index term: every query returns []
        if not self._empty:
            self.retriever.index(tokens, show_progress=False)
        # Position of each chunk in chunk-id order: the tie-break key, precomputed once.
        order = sorted(range(len(self.chunk_ids)), key=self.chunk_ids.__getitem__)
        self._id_rank = np.empty(len(order), dtype=np.int64)
        self._id_rank[order] = np.arange(len(order))

    def settings(self) -> dict[str, Any]:
        """The settings that decide this engine's ranking (for cache keys and the recorded config)."""
        return dict(self._settings)

    def query_terms(self, query: str) -> list[str]:
        """The query's index terms (after tokenizing, stopwords and stemming), repeats kept."""
        return self.analyzer(query)

    def chunk_hits(self, query: str, query_embedding=None) -> list[ChunkHit]:
        np = self._np
        if self._empty:
            return []
        ids = self.retriever.get_tokens_ids(self.query_terms(query))  # terms not in the index drop out
        if not ids:
            return []
        scores = self.retriever.get_scores_from_ids(ids)
        positive = np.flatnonzero(scores > 0)
        if positive.size == 0:
            return []
        k = self.chunk_top_k
        if positive.size > k:
            # Everything scoring at least the k-th best score, so ties at the cut are decided by id.
            kth = np.partition(scores[positive], positive.size - k)[positive.size - k]
            positive = positive[scores[positive] >= kth]
        top = positive[np.lexsort((self._id_rank[positive], -scores[positive]))][:k]
        return [ChunkHit(self.chunk_ids[i], self.doc_ids[i], float(scores[i])) for i in top.tolist()]

    def search(self, query, query_embedding=None):
        return chunks_to_documents(self.chunk_hits(query), self.depth)
