"""The question-set audit: is the question set a fair test of retrieval, before any score is trusted?

A retrieval score means little if the questions give their answers away, repeat each other or
ask about a few documents only.  The audit measures those three things on the question set and
the corpus alone (no database, no model), so an asset check can run it on the `question_set`
asset and the report can show it.

Content words
    `content_words`: the project's tokenizer (`eval_pipeline.common.text.TOKEN`) on case-folded
    text; NLTK's English stopword list (`bm25s.stopwords.STOPWORDS_EN_PLUS`, 179 words) dropped,
    and tokens shorter than two characters (the metadata engine's rule); the rest stemmed with
    the Snowball English stemmer the bm25 engine uses (PyStemmer).  The bm25 engine's own list
    (`STOPWORDS_EN`, 33 words) is written for documents: it keeps "what", "how", "which", "I",
    "my", "do" -- the frame of nearly every question, words a document seldom contains -- and so
    would pull down the overlap of a question copied from its document.  Stemming makes
    "quotes" meet "quote", the way a lexical engine would.

Lexical leakage (answerable questions only; abstention questions have no gold and are counted
separately)
    overlap share   the share of a question's distinct content words that occur among the
                    content words of its gold document (title, description, filename and body:
                    every field an engine reads).  With several gold documents, the best one.
                    A question with no content word has no share (counted, never flagged).
    metadata rank   the rank of the best-ranked gold document under the `metadata` engine
                    (title, description and filename only; `gold_ranks` reads it from a ranked
                    results frame, `metadata_engine_ranks` computes it directly).
    *answerable by surface overlap alone*: overlap share >= `leakage_share` (default 0.8: at most
    one content word in five is not the document's own) OR the metadata engine ranks a gold
    document first.  The first says a lexical engine needs no paraphrase to match the question
    to its answer; the second says the document's name alone finds it.  Each is a
    surface-only route to the answer, so either suffices.  The share is over answerable
    questions; a question without a known rank is judged on its overlap alone.

Near-duplicate questions
    Two questions (abstention ones included) whose content-word sets have Jaccard similarity
    >= `near_duplicate` (default 0.8), compared exactly.  Pairs are listed lower id first,
    sorted; the share is the share of questions in at least one pair.  Prefix filtering (rare
    words first) intersects only sets that share a rare word: about linear for real sets (10,000
    questions in about half a second), O(n^2) only when most questions are alike, where the
    pairs themselves are quadratic (1,000 copies of one question: 499,500 pairs, a few seconds).

Coverage (over every document of the snapshot)
    Questions per document counts gold labels: a question covers each of its gold documents.
    Reported: min / median / max per document, the documents with no question (count, share),
    and two measures of concentration -- the share of gold labels on the top 10% of documents
    (ceil(10% of the documents), the most-asked first), and the Gini coefficient of questions
    per document (0: every document asked about equally; near 1: all on one document).

Shares of abstention questions, of each form (MATCH, GAP, none) and each hard class present
(and none) are counted over all questions.

A threshold is exceeded when its figure is strictly above it; `passed` says none is.  Whether a
failed audit blocks the run is `AuditThresholds.blocking` (the variants file's `audit:` section);
the audit itself only measures and says.

Once per run
    The question_set asset check and the report's validity section both ask `run_audit` for
    the audit of the run's question set; the second gets what the first computed (kept in the
    process, recognised by content: the questions in order, the corpus's signature and order,
    the thresholds, `limited`), not a second computation.
"""

from __future__ import annotations

import hashlib
import json
import math
import statistics
import sys
import threading
from collections import Counter, OrderedDict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from fractions import Fraction
from pathlib import Path
from typing import Any

import pandas as pd

from eval_pipeline.common import versions
from eval_pipeline.common.checks import is_finite, is_integer
from eval_pipeline.common.keyed_pickle import read_keyed, write_keyed
from eval_pipeline.common.metadata import shown_floats
from eval_pipeline.common.text import TOKEN
from eval_pipeline.corpus.sources import CorpusSnapshot, Document
from eval_pipeline.questions.sets import FORMS, Question
from eval_pipeline.ranking.engines import MetadataEngine

__all__ = [
    "REASONS",
    "AuditResult",
    "AuditThresholds",
    "FlaggedQuestion",
    "NearDuplicatePair",
    "audit_question_set",
    "content_words",
    "gold_ranks",
    "metadata_engine_ranks",
    "near_duplicate_pairs",
]

MIN_WORD_CHARS = 2  # the metadata engine's rule: shorter query terms are ignored
TOP_SHARE = Fraction(1, 10)  # concentration: the share of labels on this top fraction of documents

# Why a question is flagged (in this order in a row's reasons).
REASONS = ("surface_overlap", "metadata_rank_1", "near_duplicate")


# --- thresholds ------------------------------------------------------------------------------


@dataclass(frozen=True)
class AuditThresholds:
    """The audit's settings, as the variants file's `audit:` section gives them.

    `leakage_share` and `near_duplicate` are cut-offs that define a flagged question; the three
    `max_*` are limits on shares of the set, exceeded when the figure is strictly above them
    (so 1.0 never fails).  Defaults:

    - leakage_share 0.8: a question with 4 content words in 5 copied from its gold document;
    - near_duplicate 0.8: Jaccard on content words (e.g. 4 shared of 5 distinct);
    - max_surface_share 0.5: when more than half of the answerable questions can be answered by
      surface overlap alone, the set measures word matching more than retrieval (a set of
      MATCH-form questions, which reuse their document's words by design, comes close);
    - max_near_duplicate_share 0.05: repeats inflate the weight of a few facts; a twentieth of
      the questions is already many;
    - max_uncovered_document_share 0.25: a quarter of the corpus never asked about is a quarter
      whose retrieval is never tested.  BEIR-style sets (a few judged documents among many
      distractors) exceed it by design: set it to 1.0 for them;
    - blocking False: a failed audit is a warning unless the variants file says otherwise.
    """

    leakage_share: float = 0.8
    near_duplicate: float = 0.8
    max_surface_share: float = 0.5
    max_near_duplicate_share: float = 0.05
    max_uncovered_document_share: float = 0.25
    blocking: bool = False

    def __post_init__(self) -> None:
        for f in fields(self):
            object.__setattr__(self, f.name, _checked(f.name, getattr(self, f.name), "AuditThresholds"))

    @classmethod
    def from_mapping(cls, raw: Any, source: str) -> AuditThresholds:
        """Thresholds from the variants file's `audit:` mapping (None: the defaults).

        A ValueError names `source` (the file, or "file:line") and the field: an unknown
        setting, a value that is not a number in range, or a `blocking` that is not a boolean.
        """
        if raw is None:
            return cls()
        valid = ", ".join(f.name for f in fields(cls))
        if not isinstance(raw, Mapping):
            raise ValueError(f"{source}: audit must be a mapping of thresholds ({valid}), got {type(raw).__name__}")
        unknown = sorted((k for k in raw if k not in {f.name for f in fields(cls)}), key=str)
        if unknown:
            raise ValueError(f"{source}: unknown audit setting(s) {unknown}; valid: {valid}")
        checked: dict[str, Any] = {name: _checked(name, value, source) for name, value in raw.items()}
        return cls(**checked)

    def to_dict(self) -> dict[str, float | bool]:
        """Plain values, for metadata and the report."""
        return {f.name: getattr(self, f.name) for f in fields(self)}


def _checked(name: str, value: Any, source: str) -> float | bool:
    if name == "blocking":
        if not isinstance(value, bool):
            raise ValueError(f"{source}: audit.blocking must be true or false, got {value!r}")
        return value
    if not is_finite(value):
        raise ValueError(f"{source}: audit.{name} must be a number, got {value!r}")
    value = float(value)
    if name in ("leakage_share", "near_duplicate"):
        if not 0.0 < value <= 1.0:
            raise ValueError(f"{source}: audit.{name} must be greater than 0 and at most 1, got {value!r}")
    elif not 0.0 <= value <= 1.0:
        raise ValueError(f"{source}: audit.{name} must be a number from 0 to 1, got {value!r}")
    return value


# --- results ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class NearDuplicatePair:
    """Two questions with similar content words; `a` has the lower id."""

    a: str
    b: str
    jaccard: float
    same_gold: bool  # False: near-identical questions with different labels, a labelling conflict


@dataclass(frozen=True)
class FlaggedQuestion:
    """One question that meets at least one flag, with the figures that made it so."""

    qid: str
    question: str
    gold: tuple[str, ...]
    form: str | None
    hard_class: str | None
    reasons: tuple[str, ...]  # a subset of REASONS, in that order
    overlap_share: float | None  # None: abstention, or no content word
    best_gold: str | None  # the gold document the overlap share is measured on
    content_words: int
    shared_words: int
    metadata_rank: int | None  # None: not ranked, or rank unknown
    near_duplicates: tuple[tuple[str, float], ...] = ()  # (other qid, Jaccard), sorted by id

    def to_json(self) -> dict[str, Any]:
        return {
            "qid": self.qid,
            "question": self.question,
            "gold": list(self.gold),
            "form": self.form,
            "hard_class": self.hard_class,
            "reasons": list(self.reasons),
            "overlap_share": self.overlap_share,
            "best_gold": self.best_gold,
            "content_words": self.content_words,
            "shared_words": self.shared_words,
            "metadata_rank": self.metadata_rank,
            "near_duplicates": [{"qid": other, "jaccard": j} for other, j in self.near_duplicates],
        }


@dataclass(frozen=True)
class AuditResult:
    """What the audit found.

    `counts` holds plain ints and floats (Dagster numeric metadata as it is), in a stable order;
    see `audit_question_set` for the keys.  The mappings are plain dicts (so the result pickles):
    read them, do not change them.  `questions_per_document` has one entry per document of the
    corpus, large for a large corpus: the counts summarise it for metadata.  `problems` has one
    sentence per threshold exceeded, naming the setting and the figure; `passed` is true when
    there are none.
    """

    counts: Mapping[str, int | float]
    flagged: tuple[FlaggedQuestion, ...]
    near_duplicates: tuple[NearDuplicatePair, ...]
    questions_per_document: Mapping[str, int]  # every document of the snapshot, in snapshot order
    documents_without_questions: tuple[str, ...]
    problems: tuple[str, ...]
    thresholds: AuditThresholds = field(default_factory=AuditThresholds)

    @property
    def passed(self) -> bool:
        return not self.problems

    @property
    def blocking(self) -> bool:
        """True when the audit failed and the thresholds say a failure blocks the run."""
        return bool(self.problems) and self.thresholds.blocking

    def to_jsonl_rows(self) -> list[dict[str, Any]]:
        """One JSON-ready dict per flagged question, in question-set order."""
        return [f.to_json() for f in self.flagged]


# --- content words ---------------------------------------------------------------------------

_STOPWORDS: frozenset[str] | None = None
_STEMMER = None


def _analysis():
    """NLTK's English stopwords and the Snowball stemmer, imported on first use (bm25s pulls in
    scipy: loading the definitions must not)."""
    global _STOPWORDS, _STEMMER
    if _STEMMER is None:
        import Stemmer  # noqa: PLC0415  deferred: loaded with bm25s, on first use
        from bm25s.stopwords import STOPWORDS_EN_PLUS  # noqa: PLC0415  deferred: bm25s takes ~0.4 s to import

        _STOPWORDS = frozenset(STOPWORDS_EN_PLUS)
        _STEMMER = Stemmer.Stemmer("english")
    return _STOPWORDS, _STEMMER


def content_words(texts: Sequence[str]) -> list[frozenset[str]]:
    """The distinct content words (stems) of each text; see the module docstring."""
    stop, stemmer = _analysis()
    tokenized = [[t for t in TOKEN.findall(text.casefold()) if len(t) >= MIN_WORD_CHARS and t not in stop]
                 for text in texts]
    words = sorted({t for tokens in tokenized for t in tokens})
    stem_of = dict(zip(words, stemmer.stemWords(words)))
    return [frozenset(stem_of[t] for t in tokens) for tokens in tokenized]


def _document_text(doc: Document) -> str:
    return " ".join((doc.title, doc.description, doc.filename, doc.content))


# --- metadata ranks --------------------------------------------------------------------------


def gold_ranks(ranked_results: Any, questions: Iterable[Question]) -> dict[str, int | None]:
    """The 1-based rank of each answerable question's best-ranked gold document in one variant's
    ranked results (a frame with the `eval_pipeline.ranking.results` columns `qid`, `doc_ids`,
    and optionally `variant` and `error`); None when no gold document is in the list.

    A question absent from the frame, or whose row has an error, is left out (its rank is
    unknown, not "not found").  A frame holding more than one variant, or a question twice, is
    a ValueError: the ranks would be ambiguous.
    """
    for column in ("qid", "doc_ids"):
        if column not in ranked_results.columns:
            raise ValueError(f"ranked results have no {column!r} column (columns: {list(ranked_results.columns)})")
    if "variant" in ranked_results.columns:
        variants = sorted({str(v) for v in ranked_results["variant"]})
        if len(variants) > 1:
            raise ValueError(f"ranked results hold {len(variants)} variants ({', '.join(variants)}); pass one")
    errors = ranked_results["error"] if "error" in ranked_results.columns else [None] * len(ranked_results)
    rows: dict[str, list[str] | None] = {}
    for qid, doc_ids, error in zip(ranked_results["qid"], ranked_results["doc_ids"], errors):
        if qid in rows:
            raise ValueError(f"ranked results hold question {qid!r} twice")
        rows[qid] = None if _present(error) else [str(d) for d in (doc_ids if doc_ids is not None else ())]
    out: dict[str, int | None] = {}
    for q in questions:
        row = rows.get(q.qid)  # None: absent or errored
        if q.answerable and row is not None:
            out[q.qid] = _best_rank(row, q.gold)
    return out


def _present(error: Any) -> bool:
    """Whether a row's `error` says it failed (None, NaN and pd.NA after a parquet round trip: no)."""
    if isinstance(error, str):
        return bool(error)
    return error is not None and not (pd.api.types.is_scalar(error) and pd.isna(error))


def _best_rank(doc_ids: Sequence[str], gold: Iterable[str]) -> int | None:
    wanted = set(gold)
    return next((rank for rank, d in enumerate(doc_ids, start=1) if d in wanted), None)


def metadata_engine_ranks(questions: Iterable[Question], snapshot: CorpusSnapshot, *,
                          depth: int = 20) -> dict[str, int | None]:
    """The metadata engine run directly (no database), as a variant runs it: the best gold's
    rank within `depth` for each answerable question, None beyond it or with no surface route.

    A surface route to the answer must be earned: a gold whose title, description and filename
    share no content word with the question (only stopwords, such as "and") has none, and a gold
    tied with other documents gets the tie's last place, not the place the engine's doc-id
    tie-break happens to give it. The default depth is a variant's default."""
    if not is_integer(depth) or depth < 1:
        raise ValueError(f"depth must be a positive integer, got {depth!r}")
    answerable = [q for q in questions if q.answerable]
    # A document's score depends on it and the question alone: the golds are scored first, then
    # the corpus a batch at a time, so only a batch is held (the snapshot's documents may be a
    # spool read as it is walked).
    by_id = snapshot.by_id({g for q in answerable for g in q.gold})
    gold_engine = MetadataEngine(list(by_id.values()), depth=depth)
    best: dict[str, float] = {}  # qid -> the best gold score with a surface route
    for q in answerable:
        scores = gold_engine.score(q.question)
        (asked,) = content_words([q.question])
        golds = [scores[g] for g in q.gold if g in scores and asked & _metadata_words(by_id[g])]
        if golds:
            best[q.qid] = max(golds)
    ahead = dict.fromkeys(best, 0)  # qid -> documents other than its golds scoring at least its best
    asked_questions = [q for q in answerable if q.qid in best]
    for batch in _batches(snapshot.documents, _METADATA_BATCH):
        engine = MetadataEngine(batch, depth=depth)
        for q in asked_questions:
            ahead[q.qid] += sum(1 for d, s in engine.score(q.question).items() if s >= best[q.qid] and d not in q.gold)
    out: dict[str, int | None] = {}
    for q in answerable:
        rank = ahead[q.qid] + 1 if q.qid in best else None
        out[q.qid] = rank if rank is not None and rank <= depth else None
    return out


_METADATA_BATCH = 5_000  # documents the audit's metadata engine holds at once


def _metadata_words(d: Document) -> frozenset[str]:
    (words,) = content_words([" ".join((d.title, d.description, d.filename))])
    return words


def _batches(documents: Iterable[Document], size: int) -> Iterator[list[Document]]:
    batch: list[Document] = []
    for d in documents:
        batch.append(d)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch


# --- near duplicates -------------------------------------------------------------------------


def near_duplicate_pairs(word_sets: Mapping[str, frozenset[str]], threshold: float) -> list[tuple[str, str, float]]:
    """(lower id, higher id, Jaccard) for every pair of non-empty sets with Jaccard >= threshold,
    sorted; the comparison is exact (in integers: 0.8 means 4/5, not the binary float above it).

    All-pairs with prefix filtering: each set's words are ordered rarest first; two sets with
    Jaccard >= t share a word among the first |x| - ceil(t * |x|) + 1 of each, so only those
    words are indexed and probed, and only sets that pass the size bound are intersected.  The
    time is about linear in the questions plus the candidate pairs: quadratic only when most
    questions share their rare words (n copies of one question are n(n - 1) / 2 pairs).
    """
    t = Fraction(repr(float(threshold)))
    if not 0 < t <= 1:
        raise ValueError(f"near-duplicate threshold must be greater than 0 and at most 1, got {threshold!r}")
    num, den = t.numerator, t.denominator
    df = Counter(w for words in word_sets.values() for w in words)
    key = {qid: _id_key(qid) for qid, words in word_sets.items() if words}
    items = sorted(((qid, len(word_sets[qid])) for qid in key), key=lambda item: (item[1], key[item[0]]))
    index: dict[str, list[int]] = {}
    found: list[tuple[str, str, float]] = []
    for i, (qid, size) in enumerate(items):
        words = word_sets[qid]
        prefix = sorted(words, key=lambda w: (df[w], w))[: size - (num * size + den - 1) // den + 1]
        for j in {j for w in prefix for j in index.get(w, ())}:
            other_qid, other_size = items[j]
            if other_size * den < num * size:  # sizes ascend: Jaccard <= other_size / size < t
                continue
            inter = len(words & word_sets[other_qid])
            union = size + other_size - inter
            if inter * den >= num * union:
                a, b = (qid, other_qid) if key[qid] < key[other_qid] else (other_qid, qid)
                found.append((a, b, inter / union))
        for w in prefix:
            index.setdefault(w, []).append(i)
    return sorted(found, key=lambda p: (key[p[0]], key[p[1]]))


def _id_key(qid: str) -> tuple:
    """Numeric ids in numeric order (BEIR's "9" before "10"), others as strings after them."""
    return (0, int(qid), "") if qid.isdigit() else (1, 0, qid)


# --- the audit -------------------------------------------------------------------------------


def audit_question_set(
    questions: Sequence[Question],
    snapshot: CorpusSnapshot,
    *,
    metadata_ranks: Mapping[str, int | None] | None = None,
    thresholds: AuditThresholds | None = None,
) -> AuditResult:
    """Audit a question set against its corpus; pure (the inputs are only read).

    `metadata_ranks` maps question ids to the best gold rank under the metadata engine
    (`gold_ranks` or `metadata_engine_ranks`); None leaves the metadata route out, and the
    `metadata_*` counts with it.  A gold document not in the snapshot, a rank that is not a
    positive integer or None, or a rank for an unknown question is a ValueError.

    `counts` keys, in order: questions, answerable, abstention, abstention_share, multi_gold;
    form_<F> and form_<F>_share for MATCH, GAP and none; hard_class_<c> and its _share for each
    class present (sorted) and none; leakage_scored (answerable questions with a content word),
    leakage_no_content_words, overlap_share_mean, overlap_share_median, overlap_share_mean_<F>
    per form present among the scored, high_overlap (share >= leakage_share); with ranks:
    metadata_ranked, metadata_rank_1, metadata_rank_1_share; surface_answerable,
    surface_answerable_share, surface_answerable_share_<F> per form present among the
    answerable; near_duplicate_pairs, near_duplicate_pairs_different_gold,
    near_duplicate_questions, near_duplicate_share; documents, documents_with_questions,
    documents_without_questions, documents_without_questions_share, gold_labels,
    questions_per_document_min / _median / _max, top_decile_documents, top_decile_label_share,
    gini; flagged.  A share over nothing is 0.0.
    """
    thresholds = thresholds if thresholds is not None else AuditThresholds()
    questions = list(questions)
    by_id = snapshot.by_id({d for q in questions for d in q.gold})  # the golds alone: never the whole corpus
    known_qids = {q.qid for q in questions}
    ranks = _checked_ranks(metadata_ranks, known_qids)
    for q in questions:
        missing = [d for d in q.gold if d not in by_id]
        if missing:
            raise ValueError(f"question {q.qid!r}: gold document(s) not in the corpus snapshot: {missing}")

    answerable = [q for q in questions if q.answerable]
    gold_ids = list(dict.fromkeys(d for q in answerable for d in q.gold))
    question_words = dict(zip((q.qid for q in questions), content_words([q.question for q in questions])))
    doc_words = dict(zip(gold_ids, content_words([_document_text(by_id[d]) for d in gold_ids])))

    counts: dict[str, int | float] = {}
    n = len(questions)
    counts["questions"] = n
    counts["answerable"] = len(answerable)
    counts["abstention"] = n - len(answerable)
    counts["abstention_share"] = _share(n - len(answerable), n)
    counts["multi_gold"] = sum(len(q.gold) > 1 for q in questions)
    for form in (*FORMS, None):
        k = sum(q.form == form for q in questions)
        counts[f"form_{form or 'none'}"] = k
        counts[f"form_{form or 'none'}_share"] = _share(k, n)
    classes = Counter(q.hard_class or "none" for q in questions)  # null, "" and "none" alike: no class
    for cls in (*sorted(c for c in classes if c != "none"), "none"):
        counts[f"hard_class_{cls}"] = classes.get(cls, 0)
        counts[f"hard_class_{cls}_share"] = _share(classes.get(cls, 0), n)

    # Leakage.
    leakage: dict[str, tuple[float | None, str | None, int, int]] = {}  # qid -> share, best gold, words, shared
    for q in answerable:
        words = question_words[q.qid]
        if not words:
            leakage[q.qid] = (None, None, 0, 0)
            continue
        best, shared = q.gold[0], -1
        for d in q.gold:  # the best gold; the first listed among equals
            k = len(words & doc_words[d])
            if k > shared:
                best, shared = d, k
        leakage[q.qid] = (shared / len(words), best, len(words), shared)
    scored = {qid: v[0] for qid, v in leakage.items() if v[0] is not None}
    counts["leakage_scored"] = len(scored)
    counts["leakage_no_content_words"] = len(answerable) - len(scored)
    counts["overlap_share_mean"] = statistics.fmean(scored.values()) if scored else 0.0
    counts["overlap_share_median"] = float(statistics.median(scored.values())) if scored else 0.0
    for form in (*FORMS, None):
        shares = [scored[q.qid] for q in answerable if q.qid in scored and q.form == form]
        if shares:
            counts[f"overlap_share_mean_{form or 'none'}"] = statistics.fmean(shares)
    high = {qid for qid, s in scored.items() if s >= thresholds.leakage_share}
    counts["high_overlap"] = len(high)
    rank_1: set[str] = set()
    if ranks is not None:
        ranked = [q for q in answerable if q.qid in ranks]
        rank_1 = {q.qid for q in ranked if ranks[q.qid] == 1}
        counts["metadata_ranked"] = len(ranked)
        counts["metadata_rank_1"] = len(rank_1)
        counts["metadata_rank_1_share"] = _share(len(rank_1), len(ranked))
    surface = high | rank_1
    counts["surface_answerable"] = len(surface)
    counts["surface_answerable_share"] = _share(len(surface), len(answerable))
    for form in (*FORMS, None):
        of_form = [q for q in answerable if q.form == form]
        if of_form:
            counts[f"surface_answerable_share_{form or 'none'}"] = _share(
                sum(q.qid in surface for q in of_form), len(of_form))

    # Near duplicates.
    gold_of = {q.qid: frozenset(q.gold) for q in questions}
    pairs = tuple(NearDuplicatePair(a, b, float(j), gold_of[a] == gold_of[b])
                  for a, b, j in near_duplicate_pairs(question_words, thresholds.near_duplicate))
    partners: dict[str, list[tuple[str, float]]] = {}
    for p in pairs:
        partners.setdefault(p.a, []).append((p.b, p.jaccard))
        partners.setdefault(p.b, []).append((p.a, p.jaccard))
    counts["near_duplicate_pairs"] = len(pairs)
    counts["near_duplicate_pairs_different_gold"] = sum(not p.same_gold for p in pairs)
    counts["near_duplicate_questions"] = len(partners)
    counts["near_duplicate_share"] = _share(len(partners), n)

    # Coverage.
    labels = Counter(d for q in answerable for d in q.gold)
    per_doc = {d.doc_id: labels.get(d.doc_id, 0) for d in snapshot.documents}
    without = tuple(d for d, k in per_doc.items() if k == 0)
    values = sorted(per_doc.values())
    total = sum(values)
    top = math.ceil(TOP_SHARE * len(values))
    counts["documents"] = len(values)
    counts["documents_with_questions"] = len(values) - len(without)
    counts["documents_without_questions"] = len(without)
    counts["documents_without_questions_share"] = _share(len(without), len(values))
    counts["gold_labels"] = total
    counts["questions_per_document_min"] = values[0] if values else 0
    counts["questions_per_document_median"] = float(statistics.median(values)) if values else 0.0
    counts["questions_per_document_max"] = values[-1] if values else 0
    counts["top_decile_documents"] = top
    counts["top_decile_label_share"] = _share(sum(values[len(values) - top:]) if top else 0, total)
    counts["gini"] = _gini(values)

    flagged = []
    for q in questions:
        share, best_gold, n_words, n_shared = leakage.get(q.qid, (None, None, len(question_words[q.qid]), 0))
        reasons = tuple(r for r, hit in zip(REASONS, (q.qid in high, q.qid in rank_1, q.qid in partners)) if hit)
        if reasons:
            flagged.append(FlaggedQuestion(
                qid=q.qid, question=q.question, gold=tuple(q.gold), form=q.form, hard_class=q.hard_class,
                reasons=reasons, overlap_share=share, best_gold=best_gold, content_words=n_words, shared_words=n_shared,
                metadata_rank=ranks.get(q.qid) if ranks is not None else None,
                near_duplicates=tuple(sorted(partners.get(q.qid, ()), key=lambda x: _id_key(x[0]))),
            ))
    counts["flagged"] = len(flagged)

    return AuditResult(
        counts=counts,
        flagged=tuple(flagged),
        near_duplicates=pairs,
        questions_per_document=per_doc,
        documents_without_questions=without,
        problems=tuple(_problems(counts, thresholds, ranks is not None)),
        thresholds=thresholds,
    )


def _checked_ranks(ranks: Mapping[str, Any] | None, known: set[str]) -> dict[str, int | None] | None:
    if ranks is None:
        return None
    out: dict[str, int | None] = {}
    for qid, rank in ranks.items():
        if rank is not None and (not is_integer(rank) or rank < 1):
            raise ValueError(f"metadata rank of question {qid!r} must be a positive integer or None, got {rank!r}")
        out[qid] = None if rank is None else int(rank)
    unknown = sorted(set(out) - known, key=_id_key)
    if unknown:
        raise ValueError(f"metadata ranks given for {len(unknown)} question(s) not in the set: {unknown[:10]}")
    return out


def _share(part: int, whole: int) -> float:
    return part / whole if whole else 0.0


def _gini(values: Sequence[int]) -> float:
    """Gini coefficient of non-negative counts, sorted ascending: (2 * sum(i * x_i)) / (n * sum(x))
    - (n + 1) / n with i from 1; 0.0 for no labels."""
    n, total = len(values), sum(values)
    if not n or not total:
        return 0.0
    return 2 * sum(i * x for i, x in enumerate(values, start=1)) / (n * total) - (n + 1) / n


def _problems(counts: Mapping[str, int | float], t: AuditThresholds, with_ranks: bool) -> list[str]:
    out = []
    if counts["surface_answerable_share"] > t.max_surface_share:
        route = (f"content-word overlap with the gold document >= {t.leakage_share:g}"
                 + (" or gold ranked first by the metadata engine" if with_ranks else ""))
        out.append(
            f"{counts['surface_answerable']} of {counts['answerable']} answerable questions "
            f"({counts['surface_answerable_share']:.1%}) are answerable by surface overlap alone ({route}), "
            f"above audit.max_surface_share {t.max_surface_share:g}")
    if counts["near_duplicate_share"] > t.max_near_duplicate_share:
        out.append(
            f"{counts['near_duplicate_questions']} of {counts['questions']} questions "
            f"({counts['near_duplicate_share']:.1%}) are in {counts['near_duplicate_pairs']} near-duplicate pair(s) "
            f"(content-word Jaccard >= {t.near_duplicate:g}), above audit.max_near_duplicate_share "
            f"{t.max_near_duplicate_share:g}")
    if counts["documents_without_questions_share"] > t.max_uncovered_document_share:
        out.append(
            f"{counts['documents_without_questions']} of {counts['documents']} documents "
            f"({counts['documents_without_questions_share']:.1%}) have no question, above "
            f"audit.max_uncovered_document_share {t.max_uncovered_document_share:g}")
    return out


# --- as the pipeline runs it -----------------------------------------------------------------


# The audits this process computed, by what they read (`_audit_key`): the asset check's is the
# report's. A few are kept, the most recently used last.
_AUDITS: OrderedDict[str, AuditResult] = OrderedDict()
_AUDITS_KEPT = 4
_AUDITS_LOCK = threading.Lock()


def _audit_key(questions: Sequence[Question], snapshot: CorpusSnapshot, thresholds: AuditThresholds) -> str:
    """Everything the audit reads: the questions in order (labels included), the corpus (its
    signature covers every text field an engine reads) in its order, the thresholds."""
    digest = hashlib.sha256()
    digest.update(json.dumps([q.to_json() for q in questions], sort_keys=True, ensure_ascii=False).encode())
    digest.update(b"\x00" + snapshot.signature.encode() + b"\x00")
    for position, d in enumerate(snapshot.documents):  # the ids in its order joined by tabs, one at a time
        digest.update((f"\t{d.doc_id}" if position else d.doc_id).encode())
    digest.update(b"\x00" + json.dumps(thresholds.to_dict(), sort_keys=True).encode())
    return digest.hexdigest()


# What the audit's figures depend on besides its inputs: the library's code (the audit, the
# metadata engine it ranks with, the content words), the packages of its stopwords and stemmer,
# and Python's (its Unicode tables split the words).
AUDIT_PACKAGES = ("bm25s", "PyStemmer")


def _audit_code() -> str:
    return (f"{versions.source_digest('eval_pipeline')}+{versions.package_code_digest(AUDIT_PACKAGES)}"
            f"+python {sys.version}")


def forget_audits() -> None:
    """Drop the audits kept in this process (the next `run_audit` computes again)."""
    with _AUDITS_LOCK:
        _AUDITS.clear()


def run_audit(questions: Sequence[Question], snapshot: CorpusSnapshot, thresholds: AuditThresholds, *,
              limited: bool = False, cache_dir: Path | None = None) -> AuditResult:
    """The audit as the asset check and the report run it: the metadata engine's ranks
    computed directly, so the check needs only the question set and the corpus, and both give
    the same figures. A `limited` run (the first N questions) is audited on those questions,
    but the coverage of the corpus is not judged (a part of a set leaves documents unasked by
    construction) and a failure never blocks the quick run.

    Computed once per run: the same questions, corpus and thresholds asked again in this
    process (the report after the asset check) get the result already computed. With
    `cache_dir` (the state dir's audit cache), once across runs too: a later run with the same
    inputs and the same code (`_audit_code`) reads it, where a warm SciFact run spent half its
    time auditing again."""
    questions = list(questions)
    if limited:
        thresholds = replace(thresholds, max_uncovered_document_share=1.0, blocking=False)
    key = _audit_key(questions, snapshot, thresholds)
    with _AUDITS_LOCK:
        if key in _AUDITS:
            _AUDITS.move_to_end(key)
            return _AUDITS[key]
    stored_key = f"{key}+{_audit_code()}" if cache_dir is not None else ""
    path = Path(cache_dir) / f"{hashlib.sha256(stored_key.encode()).hexdigest()}.pkl" if cache_dir is not None else None
    result = read_keyed(path, stored_key) if path is not None else None
    if not isinstance(result, AuditResult):
        result = audit_question_set(questions, snapshot, metadata_ranks=metadata_engine_ranks(questions, snapshot),
                                    thresholds=thresholds)
        if path is not None:
            write_keyed(path, stored_key, result)
    with _AUDITS_LOCK:
        _AUDITS[key] = result
        while len(_AUDITS) > _AUDITS_KEPT:
            _AUDITS.popitem(last=False)
    return result


def audit_metadata(result: AuditResult) -> dict[str, Any]:
    """Plain metadata for the check: every count (numeric, so the UI plots it over time), the
    thresholds, how many questions were flagged and each problem in words."""
    return {**shown_floats({f"audit/{k}": v for k, v in result.counts.items()}),  # as the UI shows them
            "flagged_questions": len(result.flagged), "near_duplicate_pairs": len(result.near_duplicates),
            "thresholds": result.thresholds.to_dict(), "problems": list(result.problems) or ["none"]}
