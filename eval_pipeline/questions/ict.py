"""The inverse cloze task (ICT): an offline question generator with no model.

After Lee, Chang and Toutanova (2019, "Latent Retrieval for Weakly Supervised Open Domain
Question Answering", ORQA): a sentence taken from a document is the pseudo-question, and the
document is its gold. It needs neither an LLM nor a network, so a question set can be made
on any machine; it is a **weak** generator: the questions are the documents' own sentences
(with names and identifiers masked), so they favour engines that match words, and nothing
here claims they replace human questions. The set's header says so
(``"generator": "ict", "generator_strength": "weak"``), and
`eval_pipeline.validity.sets` measures how far its ranking of variants agrees with a human set's.

Units, selection (id order, ``min_chars``, ``max_units``), name masking, the leakage guard,
near-duplicates, the abstention count, the cache (`eval_pipeline.questions.cache.QuestionCache`)
and the file format (`write_generated_question_set`) are the LLM generator's
(`eval_pipeline.questions.generation`); what is ICT's own are the rules below.

Sentences (`split_sentences`)
    A unit's text is cut into blocks at blank lines, Markdown list items and line breaks between
    lines that are not plain prose; a block is cut into sentences after ``.``, ``!`` or ``?``
    followed by whitespace and a capital letter, digit, quote or bracket, except after a common
    abbreviation (``e.g.``, ``et al.``, ``Fig.``...). Headings, table rows, code (fenced or
    indented) and text with no letter are ``markup``.

Content words and distinctive words
    Content words are the question-set audit's (`eval_pipeline.validity.audit`): the project's
    tokenizer on case-folded text, NLTK's English stopwords and one-character tokens dropped,
    Snowball-stemmed. A content word is *distinctive* when at most
    ``max(DISTINCTIVE_DF_FLOOR, DISTINCTIVE_DF_SHARE × documents)`` documents of the corpus hold
    it (2 of the demo's 36 documents; 259 of SciFact's 5,183): a word most documents share
    cannot tell one from another.

Filters, in order (each sentence counted under the first that drops it)
    ``markup``            see above;
    ``fragment``          prose that does not end a sentence (``.``, ``!`` or ``?``, perhaps
                          before a closing quote or bracket): a list item's fragment, a lead-in
                          ending in ``:``, a caption;
    ``too_short``         fewer than ``MIN_CONTENT_WORDS`` (5) distinct content words;
    ``too_long``          more than ``MAX_SENTENCE_WORDS`` (60) words: a paragraph the splitter
                          could not cut, not a question;
    ``leak``              the masked sentence still names its document (title or filename
                          stem, `NameMatcher`): the LLM path's guard, on with masking off too;
    ``generic``           fewer than ``MIN_DISTINCTIVE_WORDS`` (2) distinctive content words;
    ``masked_to_generic`` distinctive enough before masking, not after (what masking removed);
    ``near_duplicate``    token-set Jaccard >= 0.9 with a sentence already kept (this unit or
                          an earlier one, in unit-id order);
    ``not_drawn``         a survivor beyond the ``k`` per unit drawn by the seeded draw.

Masking (``masking=True``, the default), replacing with ``[...]`` (no letters, so it adds no
word for an engine to match)
    names        the document's title and filename stem as whole phrases (`NameMatcher`);
    title words  every word whose stem is a distinctive content word of the title or the
                 filename stem (a rare title word finds the document by its name alone);
    identifiers  codes (a token run such as ``REL-499``, ``DEX-03``, ``p53`` that mixes letters
                 and digits, or ``OpsBell``-style inner capitals) that no other document holds.
    Counted per kept question (`IctResult.masked`); runs of masks collapse into one.

Forms and hard classes, where a rule can tell
    ``form``: ``MATCH`` for every answerable question (its words are its document's own);
    abstention questions have none, as the LLM path's. ``hard_class``: ``abstention`` for the
    slice; ``deep-chunk`` when the sentence starts more than ``DEEP_WORDS`` (300) words into its
    document (the demo set's rule; found in the document's text, whitespace-normalized; a
    sentence a cleaner changed is not found and gets no class); ``body-only`` when the
    document's metadata says ``body_only``; never ``multi-gold`` (one gold per sentence).

The draw is deterministic for a seed: ``random.Random(f"{ICT_VERSION}:{seed}:{content hash}")``
samples ``k`` of a unit's survivors (kept in document order); the abstention draw uses
``…:{seed}:abstention``. Question ids hash the unit's content and the sentence's position, so a
sentence keeps its id across seeds.

The abstention slice
    Sentences of ``ict_data/offdomain.txt`` (original prose on beekeeping, sailing, baking,
    astronomy, knitting, the Alps and chess; CC0), through the same length filters; a sentence
    is dropped when it names a corpus title (``abstention_names_title``) or when at least
    ``ABSTENTION_MAX_OVERLAP`` (0.8) of its content words are in one corpus document
    (``abstention_overlaps_document``: the corpus may answer it). ``abstention_count(G, frac)``
    of the survivors are drawn. They are off-domain, so easier to refuse than near-miss ones.

Caching
    Each unit's outcome is one record in a `QuestionCache` journal (a file of its own,
    ``ict_question_cache.jsonl`` beside the LLM's), keyed on the unit's content hash, the rules'
    version, k, masking, the seed and the corpus facts its outcome depends on (which of its words
    are distinctive, which of its identifiers are unique): adding a document that makes one of
    a unit's words common regenerates that unit only. Records are journaled as each unit is done,
    so a killed run resumes; the near-duplicate pass and the abstention slice, which depend on the
    whole set, are made again each run (milliseconds).
"""

from __future__ import annotations

import hashlib
import json
import math
import random
import re
import time
import unicodedata
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any

from eval_pipeline.common.checks import check_seed
from eval_pipeline.common.text import TOKEN
from eval_pipeline.questions.cache import DEFAULT_LOCK_TIMEOUT, QuestionCache
from eval_pipeline.questions.generation import (
    DEFAULT_FRAC,
    DEFAULT_MIN_CHARS,
    GenerationResult,
    NameMatcher,
    NearDuplicateFilter,
    Unit,
    abstention_count,
    cache_key,
    filename_stem,
    make_qid,
    select_units,
    validate_params,
)
from eval_pipeline.questions.sets import Question

ICT_VERSION = "ict-v1"  # bump when a rule below changes: cached units are keyed on it
GENERATOR = "ict"
STRENGTH = "weak"
NOTE = ("inverse cloze task: each question is a sentence copied from its gold document, names and unique "
        "identifiers masked; a weak generator that favours word-matching engines, not a replacement for "
        "human questions")

MASK = "[...]"
MIN_CONTENT_WORDS = 5
MAX_SENTENCE_WORDS = 60
MIN_DISTINCTIVE_WORDS = 2
DISTINCTIVE_DF_SHARE = Fraction(1, 20)
DISTINCTIVE_DF_FLOOR = 2
IDENTIFIER_MAX_DF = 1
DEEP_WORDS = 300
ABSTENTION_MAX_OVERLAP = Fraction(4, 5)
MIN_WORD_CHARS = 2  # the audit's and the metadata engine's rule
OFFDOMAIN_TEXT = Path(__file__).resolve().parent / "ict_data" / "offdomain.txt"

SENTENCE_DROPS = ("markup", "fragment", "too_short", "too_long", "leak", "generic", "masked_to_generic",
                  "near_duplicate", "not_drawn")
ABSTENTION_DROPS = ("abstention_too_short", "abstention_too_long", "abstention_names_title",
                    "abstention_overlaps_document", "abstention_near_duplicate", "abstention_not_drawn")
DROP_REASONS = SENTENCE_DROPS + ABSTENTION_DROPS
MASK_KINDS = ("names", "title_words", "identifiers")
FORM = "MATCH"
ABSTENTION_CLASS = "abstention"


# --- words -----------------------------------------------------------------------------------

_ANALYSIS: tuple[frozenset[str], Any] | None = None


def _analysis() -> tuple[frozenset[str], Any]:
    """NLTK's English stopwords and the Snowball stemmer (the audit's), imported on first use."""
    global _ANALYSIS
    if _ANALYSIS is None:
        # deferred, as the docstring says: bm25s takes ~0.4 s to import, PyStemmer is loaded with it
        import Stemmer  # noqa: PLC0415
        from bm25s.stopwords import STOPWORDS_EN_PLUS  # noqa: PLC0415

        _ANALYSIS = (frozenset(STOPWORDS_EN_PLUS), Stemmer.Stemmer("english"))
    return _ANALYSIS


class _Stems:
    """Content-word stems with a memo: a corpus repeats its words, the stemmer is asked once each."""

    def __init__(self) -> None:
        self.stop, self.stemmer = _analysis()
        self.memo: dict[str, str | None] = {}

    def of(self, token: str) -> str | None:
        """The stem of a token, None for a stopword or a one-character token."""
        word = token.casefold()
        if word not in self.memo:
            self.memo[word] = (None if len(word) < MIN_WORD_CHARS or word in self.stop
                               else self.stemmer.stemWord(word))
        return self.memo[word]

    def content(self, text: str) -> list[str]:
        """The content-word stems of `text`, in order, repeats kept."""
        return [s for s in (self.of(t) for t in TOKEN.findall(text)) if s is not None]


# Letters and digits joined by - _ . / (REL-499, DEX-03, p53, v2.1) or inner capitals (OpsBell).
_IDENT_RUN = re.compile(r"[^\W_]+(?:[-_./][^\W_]+)*")
_DIGIT = re.compile(r"\d")
_LETTER = re.compile(r"[^\W\d_]")
_CAMEL = re.compile(r"[a-z][A-Z]")  # an ASCII capital after an ASCII lower-case letter


def identifiers(text: str) -> list[tuple[int, int, str]]:
    """(start, end, case-folded text) of each identifier-shaped run in `text`: a run of letters and
    digits joined by ``- _ . /`` that holds both a letter and a digit, or a word with a capital
    after a lower-case letter (``OpsBell``). Plain words and plain numbers are not identifiers."""
    out = []
    for m in _IDENT_RUN.finditer(text):
        run = m.group()
        if (_DIGIT.search(run) and _LETTER.search(run)) or _CAMEL.search(run):
            out.append((m.start(), m.end(), run.casefold()))
    return out


# --- sentences -------------------------------------------------------------------------------

_ABBREVIATIONS = frozenset(
    "e.g i.e et al fig figs vs dr mr mrs ms st no nos approx cf ca resp eq eqs ref refs vol pp inc ltd co jr sr "
    "dept est min max".split()
)
_BOUNDARY = re.compile(r"(?<=[.!?])[\"'”’)\]]*\s+(?=[\"'“‘(\[]?[A-Z0-9])")
_LIST_ITEM = re.compile(r"^\s*(?:[-*+•]|\d{1,3}[.)])\s+")
_HEADING = re.compile(r"^\s{0,3}#{1,6}\s")
_TABLE = re.compile(r"^\s*\|")
_FENCE = re.compile(r"^\s*(```|~~~)")
_RULE = re.compile(r"^\s*([-*_=])(\s*\1){2,}\s*$")
_EMPHASIS = re.compile(r"(\*\*|__|`)")
_ENDS = (".", "!", "?")
_CLOSERS = "\"'”’)]"


@dataclass(frozen=True)
class Sentence:
    index: int  # position among the unit's sentences (markup included): the question id's part
    text: str  # whitespace-normalized, list markers and emphasis marks removed
    markup: bool


def _blocks(text: str) -> list[tuple[str, bool]]:
    """(block, is_markup): paragraphs and list items of prose; headings, table rows, rules and code
    lines (fenced or indented by 4+ spaces) each a markup block of their own."""
    blocks: list[tuple[str, bool]] = []
    current: list[str] = []
    in_fence = False

    def flush() -> None:
        if current:
            blocks.append((" ".join(current), False))
            current.clear()

    for line in text.splitlines():
        if _FENCE.match(line):
            flush()
            in_fence = not in_fence
            blocks.append((line, True))
        elif in_fence or _HEADING.match(line) or _TABLE.match(line) or _RULE.match(line) or (
                line.startswith("    ") and not current):
            flush()
            blocks.append((line, True))
        elif not line.strip():
            flush()
        elif _LIST_ITEM.match(line):
            flush()
            current.append(_LIST_ITEM.sub("", line, count=1))
        else:
            current.append(line.strip())
    flush()
    return blocks


def _cut(block: str) -> list[str]:
    """A prose block cut at sentence ends, not after an abbreviation or a single capital (an initial)."""
    pieces: list[str] = []
    start = 0
    for m in _BOUNDARY.finditer(block):
        before = block[start:m.start()].rstrip("\"'”’)]")
        last = before.rsplit(None, 1)[-1] if before.split() else ""
        word = last.rstrip(".!?").casefold()
        if last.endswith(".") and (word in _ABBREVIATIONS or (len(word) == 1 and word.isalpha())):
            continue
        pieces.append(block[start:m.start()])
        start = m.end()
    pieces.append(block[start:])
    return [p for p in pieces if p.strip()]


def split_sentences(text: str) -> list[Sentence]:
    """The unit's sentences in order, each marked markup or prose (see the module docstring)."""
    out: list[Sentence] = []
    for block, markup in _blocks(unicodedata.normalize("NFC", text or "")):
        for piece in ([block] if markup else _cut(block)):
            clean = " ".join((piece if markup else _EMPHASIS.sub("", piece)).split())
            is_markup = markup or not any(c.isalpha() for c in clean)
            out.append(Sentence(len(out), clean, is_markup))
    return out


# --- corpus statistics -----------------------------------------------------------------------


@dataclass
class CorpusStats:
    """Document frequencies over the corpus: of content-word stems (every field an engine reads:
    title, description, filename, body) and of identifiers; plus what the hard classes need."""

    documents: int
    stem_df: Counter[str]
    identifier_df: Counter[str]
    doc_text: dict[str, str]  # doc id -> body, whitespace-normalized (to place a sentence in it)
    body_only: frozenset[str]
    titles: tuple[str, ...]
    stems: _Stems = field(default_factory=_Stems, repr=False)
    postings: dict[str, list[str]] = field(default_factory=dict, repr=False)  # stem -> doc ids

    distinctive_max_df: int = 0  # set from `documents`

    def __post_init__(self) -> None:
        self.distinctive_max_df = max(DISTINCTIVE_DF_FLOOR, math.floor(DISTINCTIVE_DF_SHARE * self.documents))

    def distinctive(self, stem: str) -> bool:
        return self.stem_df.get(stem, 0) <= self.distinctive_max_df

    def unique_identifier(self, ident: str) -> bool:
        return self.identifier_df.get(ident, 0) <= IDENTIFIER_MAX_DF


def corpus_stats(documents: Iterable[Any]) -> CorpusStats:
    """Statistics of `documents` (`eval_pipeline.corpus.sources.Document`s, a CorpusSnapshot, or
    anything with doc_id, title, filename, content and optionally description and metadata)."""
    docs = list(getattr(documents, "documents", documents))
    stems = _Stems()
    stem_df: Counter[str] = Counter()
    identifier_df: Counter[str] = Counter()
    postings: dict[str, list[str]] = {}
    doc_text: dict[str, str] = {}
    body_only = set()
    for d in docs:
        description = getattr(d, "description", "") or ""
        every = " ".join((d.title, description, d.filename, d.content))
        words = set(stems.content(every))
        stem_df.update(words)
        for w in words:
            postings.setdefault(w, []).append(d.doc_id)
        identifier_df.update({i for _, _, i in identifiers(every)})
        doc_text[d.doc_id] = " ".join(d.content.split())
        if (getattr(d, "metadata", None) or {}).get("body_only") is True:
            body_only.add(d.doc_id)
    return CorpusStats(len(docs), stem_df, identifier_df, doc_text, frozenset(body_only),
                       tuple(d.title for d in docs), stems, postings)


def _stats_from_units(units: Sequence[Unit]) -> CorpusStats:
    """Without the documents, each document is the join of its units (chunks overlap: a close
    enough frequency; `body_only` unknown)."""
    @dataclass
    class _Doc:
        doc_id: str
        title: str
        filename: str
        content: str

    by_doc: dict[str, _Doc] = {}
    for u in units:
        doc = by_doc.setdefault(u.doc_id, _Doc(u.doc_id, u.title, u.filename, ""))
        doc.content = f"{doc.content}\n\n{u.text}" if doc.content else u.text
    return corpus_stats(by_doc.values())


# --- one unit --------------------------------------------------------------------------------


def _masked(text: str, unit: Unit, stats: CorpusStats) -> tuple[str, dict[str, int]]:
    """`text` with the unit's names, distinctive title words and unique identifiers replaced by MASK."""
    counts = {kind: 0 for kind in MASK_KINDS}
    text = unicodedata.normalize("NFC", text)
    for pattern in NameMatcher.for_unit(unit).patterns:
        text, n = pattern.subn(MASK, text)
        counts["names"] += n
    name_stems = {s for s in stats.stems.content(f"{unit.title} {filename_stem(unit.filename)}")
                  if stats.distinctive(s)}
    spans: list[tuple[int, int, str]] = []
    for start, end, ident in identifiers(text):
        if stats.unique_identifier(ident):
            spans.append((start, end, "identifiers"))
    covered = [(a, b) for a, b, _ in spans]
    for m in TOKEN.finditer(text):
        if any(a <= m.start() < b for a, b in covered):
            continue
        stem = stats.stems.of(m.group())
        if stem is not None and stem in name_stems:
            spans.append((m.start(), m.end(), "title_words"))
    for start, end, kind in sorted(spans, reverse=True):
        text = text[:start] + MASK + text[end:]
        counts[kind] += 1
    collapsed = re.sub(r"\[\.\.\.\](?:[\s\W]*\[\.\.\.\])+", MASK, text)
    return " ".join(collapsed.split()), counts


def unit_facts(unit: Unit, stats: CorpusStats) -> str:
    """A digest of the corpus facts a unit's outcome depends on: which of its (and its names')
    content words are distinctive and which of its identifiers no other document holds."""
    words = set(stats.stems.content(f"{unit.title} {filename_stem(unit.filename)} {unit.text}"))
    idents = {i for _, _, i in identifiers(unit.text)}
    facts = [sorted(w for w in words if stats.distinctive(w)), sorted(i for i in idents if stats.unique_identifier(i))]
    return hashlib.sha256(json.dumps(facts, ensure_ascii=False).encode("utf-8")).hexdigest()[:16]


def ict_unit_key(unit: Unit, stats: CorpusStats, *, k: int, masking: bool, seed: int) -> str:
    return cache_key("ict-unit", unit.content_hash, ICT_VERSION, k, bool(masking), seed, unit_facts(unit, stats))


def _word_offset(sentence: str, doc_text: str | None) -> int | None:
    """How many words of the document come before the sentence (None: not found)."""
    if not doc_text:
        return None
    at = doc_text.find(sentence)
    if at < 0:
        return None
    return len(TOKEN.findall(doc_text[:at]))


def _enough(stems: Sequence[str], stats: CorpusStats) -> bool:
    distinct = set(stems)
    return len(distinct) >= MIN_CONTENT_WORDS and sum(stats.distinctive(s) for s in distinct) >= MIN_DISTINCTIVE_WORDS


def ict_unit(unit: Unit, stats: CorpusStats, *, k: int, masking: bool = True, seed: int = 0,
             key: str | None = None) -> dict[str, Any]:
    """One unit's outcome as a cache record (under `key`, by default `ict_unit_key`): the drawn
    questions (index, text, hard class, masks), and what each filter dropped."""
    dropped = {reason: 0 for reason in SENTENCE_DROPS}
    matcher = NameMatcher.for_unit(unit)
    dedup = NearDuplicateFilter()
    survivors: list[dict[str, Any]] = []
    for sentence in split_sentences(unit.text):
        if sentence.markup:
            dropped["markup"] += 1
            continue
        if not sentence.text.rstrip(_CLOSERS).endswith(_ENDS):
            dropped["fragment"] += 1
            continue
        raw_stems = stats.stems.content(sentence.text)
        if len(set(raw_stems)) < MIN_CONTENT_WORDS:
            dropped["too_short"] += 1
            continue
        if len(TOKEN.findall(sentence.text)) > MAX_SENTENCE_WORDS:
            dropped["too_long"] += 1
            continue
        text, masks = _masked(sentence.text, unit, stats) if masking else (sentence.text, dict.fromkeys(MASK_KINDS, 0))
        if matcher.search(text):  # with masking on or off: a named question is a giveaway
            dropped["leak"] += 1
            continue
        if not _enough(stats.stems.content(text), stats):
            dropped["masked_to_generic" if masking and _enough(raw_stems, stats) else "generic"] += 1
            continue
        if dedup.check_and_add(text):
            dropped["near_duplicate"] += 1
            continue
        offset = _word_offset(sentence.text, stats.doc_text.get(unit.doc_id))
        hard_class = ("deep-chunk" if offset is not None and offset > DEEP_WORDS
                      else "body-only" if unit.doc_id in stats.body_only else None)
        survivors.append({"index": sentence.index, "question": text, "hard_class": hard_class, "masks": masks})
    drawn = sorted(random.Random(f"{ICT_VERSION}:{seed}:{unit.content_hash}").sample(range(len(survivors)),
                                                                                     min(k, len(survivors))))
    dropped["not_drawn"] = len(survivors) - len(drawn)
    return {"type": "ict_unit", "key": key or ict_unit_key(unit, stats, k=k, masking=masking, seed=seed),
            "unit_id": unit.unit_id, "doc_id": unit.doc_id, "content_hash": unit.content_hash,
            "version": ICT_VERSION, "k": k, "masking": bool(masking), "seed": seed,
            "questions": [survivors[i] for i in drawn], "dropped": dropped}


def _record_ok(record: Mapping[str, Any] | None, unit: Unit) -> bool:
    """A cached record is used only when it is whole and for this unit's content."""
    if not record or record.get("type") != "ict_unit" or record.get("version") != ICT_VERSION:
        return False
    if record.get("unit_id") != unit.unit_id or record.get("content_hash") != unit.content_hash:
        return False
    try:
        return all(isinstance(q["question"], str) and isinstance(q["index"], int) for q in record["questions"]) and \
            all(isinstance(n, int) for n in dict(record["dropped"]).values())
    except (KeyError, TypeError, ValueError):
        return False


# --- the abstention slice --------------------------------------------------------------------


def offdomain_sentences(path: str | Path = OFFDOMAIN_TEXT) -> list[str]:
    """The prose sentences of the off-domain text (comment lines starting with "#" left out)."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ValueError(f"{path}: cannot read the ICT generator's off-domain text: {exc}") from exc
    prose = "\n".join("" if line.lstrip().startswith("#") else line for line in text.splitlines())
    return [s.text for s in split_sentences(prose) if not s.markup]


def _abstentions(wanted: int, stats: CorpusStats, seed: int, dedup: NearDuplicateFilter,
                 dropped: dict[str, int], text_path: str | Path) -> list[Question]:
    titles = NameMatcher.for_names(*stats.titles)
    candidates: list[str] = []
    for text in offdomain_sentences(text_path):
        stems = stats.stems.content(text)
        if len(set(stems)) < MIN_CONTENT_WORDS:
            dropped["abstention_too_short"] += 1
        elif len(TOKEN.findall(text)) > MAX_SENTENCE_WORDS:
            dropped["abstention_too_long"] += 1
        elif titles.search(text):  # names a document: perhaps answerable after all
            dropped["abstention_names_title"] += 1
        elif _overlaps_a_document(set(stems), stats):
            dropped["abstention_overlaps_document"] += 1
        else:
            candidates.append(text)
    random.Random(f"{ICT_VERSION}:{seed}:abstention").shuffle(candidates)
    out: list[Question] = []
    for text in candidates:
        if len(out) >= wanted:
            dropped["abstention_not_drawn"] += 1
        elif dedup.check_and_add(text):
            dropped["abstention_near_duplicate"] += 1
        else:
            out.append(Question(qid=make_qid(cache_key("ict-abstention", text), 0, "ict-qa"), question=text,
                                gold=(), form=None, hard_class=ABSTENTION_CLASS))
    return out


def _overlaps_a_document(stems: set[str], stats: CorpusStats) -> bool:
    if not stems:
        return False
    hits: Counter[str] = Counter()
    for stem in stems:
        hits.update(stats.postings.get(stem, ()))
    best = max(hits.values(), default=0)
    return Fraction(best, len(stems)) >= ABSTENTION_MAX_OVERLAP


# --- the whole run ---------------------------------------------------------------------------


@dataclass
class IctResult(GenerationResult):
    """A `GenerationResult` (so `write_generated_question_set` writes it) with ICT's own counts."""

    seed: int = 0
    masked: dict[str, int] = field(default_factory=dict)  # masks in the kept questions, by kind
    questions_masked: int = 0  # kept answerable questions with at least one mask
    seconds: float = 0.0

    def header(self) -> dict[str, Any]:
        return {"source": "generated", "generator": GENERATOR, "generator_strength": STRENGTH,
                "generator_note": NOTE, "generator_model": "none (rules)", "prompt_version": self.prompt_version,
                "k": self.k, "frac": self.frac, "masking": "on" if self.masking else "off", "seed": self.seed,
                "dropped": dict(self.dropped), "masked": dict(self.masked)}

    def counts(self) -> dict[str, Any]:
        return {**super().counts(), "seed": self.seed, "questions_masked": self.questions_masked,
                **{f"masked_{kind}": n for kind, n in self.masked.items()}, "seconds": round(self.seconds, 3)}


def _no_model(_messages: Any) -> str:
    raise RuntimeError("the ICT generator calls no model")


def generate_ict_questions(
    units: Iterable[Any],
    *,
    documents: Iterable[Any] | None = None,
    k: int | None = None,
    frac: float = DEFAULT_FRAC,
    masking: bool = True,
    min_chars: int = DEFAULT_MIN_CHARS,
    max_units: int | None = None,
    seed: int = 0,
    store: Any | None = None,
    offdomain_text: str | Path = OFFDOMAIN_TEXT,
) -> IctResult:
    """The ICT question set for `units` (see the module docstring). `documents`: the whole corpus,
    for the word statistics and the hard classes (default: the units joined per document).
    `store`: a `UnitStore` (the cache), read before and written after each unit. Every setting is
    checked before any unit is read."""
    started = time.perf_counter()
    p = validate_params(units, ask=_no_model, k=k, frac=frac, masking=masking, min_chars=min_chars,
                        max_units=max_units, model=GENERATOR)
    seed = check_seed(seed)
    stats = corpus_stats(documents) if documents is not None else _stats_from_units(p.units)
    result = IctResult(questions=[], prompt_version=ICT_VERSION, model=GENERATOR, k=p.k, frac=p.frac,
                       masking=p.masking, units=len(p.units), dropped={r: 0 for r in DROP_REASONS}, seed=seed,
                       masked={kind: 0 for kind in MASK_KINDS})
    eligible = select_units(p, result)

    dedup = NearDuplicateFilter()
    questions: list[Question] = []
    units_without = 0
    for unit in eligible:
        key = ict_unit_key(unit, stats, k=p.k, masking=p.masking, seed=seed)
        record = store.get(key) if store is not None else None
        if _record_ok(record, unit):
            result.units_cached += 1
        else:
            record = ict_unit(unit, stats, k=p.k, masking=p.masking, seed=seed, key=key)
            result.units_generated += 1
            if store is not None:
                store.put(record)
        assert record is not None
        for reason, n in dict(record["dropped"]).items():
            result.dropped[reason] = result.dropped.get(reason, 0) + int(n)
        kept = 0
        for q in record["questions"]:
            if dedup.check_and_add(q["question"]):
                result.dropped["near_duplicate"] += 1
                continue
            kept += 1
            masks = {kind: int(dict(q.get("masks") or {}).get(kind, 0)) for kind in MASK_KINDS}
            for kind, n in masks.items():
                result.masked[kind] += n
            result.questions_masked += any(masks.values())
            questions.append(Question(qid=make_qid(unit.content_hash, int(q["index"]), "ict"), question=q["question"],
                                      gold=(unit.doc_id,), form=FORM, hard_class=q.get("hard_class")))
        units_without += kept == 0
    if units_without:
        result.skipped["no_sentence"] = units_without
        result.warnings.append(f"{units_without} unit(s) gave no question: every sentence was dropped by a filter")

    wanted = abstention_count(len(questions), p.frac)
    result.abstention_requested = wanted
    if wanted:
        slice_ = _abstentions(wanted, stats, seed, dedup, result.dropped, offdomain_text)
        if len(slice_) < wanted:
            result.warnings.append(f"abstention slice short: {len(slice_)} of {wanted} off-domain sentences "
                                   "survived the filters (the shipped text is the limit)")
        questions += slice_
    ids = [q.qid for q in questions]
    if len(set(ids)) != len(ids):
        raise RuntimeError("ICT question ids collide; check for duplicate units")
    result.questions = questions
    result.forms = {FORM: sum(q.form == FORM for q in questions), "GAP": 0,
                    ABSTENTION_CLASS: sum(not q.gold for q in questions)}
    result.seconds = time.perf_counter() - started
    return result


def generate_ict_question_set(
    units: Iterable[Any],
    *,
    cache_path: str | Path,
    corpus_signature: str,
    documents: Iterable[Any] | None = None,
    k: int | None = None,
    frac: float = DEFAULT_FRAC,
    masking: bool = True,
    min_chars: int = DEFAULT_MIN_CHARS,
    max_units: int | None = None,
    seed: int = 0,
    lock_timeout: float | None = None,
    log: Callable[[str], Any] | None = None,
) -> IctResult:
    """`generate_ict_questions` through the `QuestionCache` journal at `cache_path` (resumable; at
    the end compacted to the records of units that still exist, other records kept), with the
    corpus signature the set is written for."""
    if not isinstance(corpus_signature, str) or not corpus_signature.strip():
        raise ValueError("corpus_signature must be a non-empty string")
    units = list(units)
    p = validate_params(units, ask=_no_model, k=k, frac=frac, masking=masking, min_chars=min_chars,
                        max_units=max_units, model=GENERATOR)
    check_seed(seed)
    timeout = DEFAULT_LOCK_TIMEOUT if lock_timeout is None else lock_timeout
    with QuestionCache(cache_path, lock_timeout=timeout, log=log) as cache:
        result = generate_ict_questions(p.units, documents=documents, k=p.k, frac=p.frac, masking=p.masking,
                                        min_chars=p.min_chars, max_units=p.max_units, seed=seed, store=cache)
        live = {(u.unit_id, u.content_hash) for u in p.units}

        def keep(record: Mapping[str, Any]) -> bool:
            if record.get("type") != "ict_unit":
                return True  # not ours
            return (record.get("unit_id"), record.get("content_hash")) in live

        cache.compact(keep)
        result.cache = dict(cache.stats)
    result.corpus_signature = corpus_signature
    return result


def ict_cache_path(question_cache: str | Path) -> Path:
    """The ICT journal beside the LLM generator's (`StateDir.question_cache`)."""
    path = Path(question_cache)
    return path.with_name("ict_" + path.name)


def ict_set_path(generated_questions: str | Path) -> Path:
    """Where the ICT set is written by default, beside the LLM's (`StateDir.generated_questions`)."""
    path = Path(generated_questions)
    return path.with_name(path.name.replace("generated_questions_", "generated_questions_ict_", 1))
