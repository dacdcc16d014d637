"""Grounding: are the things an answer names in the documents it was written from, or anywhere in
the corpus? Offline and deterministic: no model, only text and the keyword index.

An ungrounded model invents APIs, settings and figures with confidence; a judge reading the
answer may not notice. This grader extracts the checkable *items* an answer uses and looks each
one up, first in the answer's own numbered context, then in the whole corpus through the
keyword index (the table the variant's answers were retrieved from). An item found in neither
is a hallucination candidate: it goes to the hallucination log, a list of targets for a person
to read, not a verdict.

The extractor (:func:`extract_items`)
-------------------------------------
The answer is normalised to Unicode NFC. Fenced code blocks are split from the prose (the
fences of ``eval_pipeline.grading.assertions``: backticks or tildes, any indentation). Then,
in this order, each item kind consumes the text it matched, so a character belongs to at most
one item:

``code``
    An inline code span of the prose (`` `...` ``, one or more backticks, same count to close).
    When the span's whole content is a dotted name or a call (``torch.nn.Linear``,
    ``load_corpus(path)``), the item is that name with kind ``symbol`` / ``call`` instead; a
    span with no letter or digit is skipped.
``quoted``
    A phrase between straight double quotes ``"..."`` or curly ones ``“...”`` in the prose, 1 to
    200 characters on one line, with at least one letter or digit. Single quotes are not read
    (they are apostrophes too often).
``call``
    A name directly followed by ``(``: ``name(`` or ``a.b.c(``; the item is the name without
    the parenthesis. ``word(s)`` is a plural, not a call. Python keywords and builtins
    (``print(``, ``len(``) are skipped: they are the language, not the documentation.
``symbol``
    A dotted name of two or more identifier parts (``config.yaml``, ``pd.DataFrame``,
    ``answers.keep_text``), not followed by ``(``. At least one part has two or more
    characters (``e.g.`` and ``i.e.`` are not symbols); a part that is only digits is not an
    identifier (``3.11`` is not a symbol).
``number``
    A number with a unit: digits (with ``,`` thousands separators or a decimal part), optional
    whitespace or a hyphen, then one of `UNITS` (``150 words``, ``1.7 ms``, ``95%``,
    ``2.4 GB``, ``20-word``). A bare number is not an item: it is too often a list index or a
    year to be a claim.

An answer whose prose is as a whole a JSON object or array (a JSON-format answer) is read
without the ``quoted`` and ``number`` rules: its keys and strings are data the task asked for,
not quotations of the documents.

In python blocks (fences tagged ``python``, ``py``, ``python3``; any other fence is read like
prose, without quotes or numbers): the ``import`` items (every imported module, ``import a.b``
→ ``a.b``; ``from a import b`` → ``a`` and the symbol ``a.b``), and the calls and dotted names
whose root is not a name the block binds itself (an assignment target, a function argument, a
``def``/``class`` name, a ``for``/``with``/``except`` target): ``model = Foo(); model.fit()``
gives ``Foo`` only, since ``model.fit`` says nothing the documents could confirm. A block that
does not parse is read with the prose rules (calls and dotted names only).

Each answer's items are deduplicated by their casefolded text (the first kind wins), in order
of first appearance. Citation markers (``[1]``) are not items; they are counted apart.

Lookups (:func:`occurs`)
------------------------
An item *occurs* in a text when its casefolded, whitespace-collapsed text is a substring of the
casefolded, whitespace-collapsed text, and is not glued to a letter, digit or underscore on a
side where the item itself starts or ends with one (``log`` does not occur in ``catalog``;
``a.b`` does occur in ``x = a.b(1)``). Verbatim, not stemmed: ``nn.Linear`` is not
``torch.nn.Linear``, and ``150 words`` is not ``150-word``.

*In context*: the item occurs in any entry of the answer's numbered context. *In the corpus*:
a `CorpusProbe` says whether it occurs in any chunk. `KeywordCorpusProbe` asks the keyword
index (`IndexedKeywordRetriever`, ``match: websearch``) for the chunks that hold the item's
words as a phrase (the tsvector: stemmed, stopwords dropped), up to `PROBE_DEPTH` of them, and
confirms `occurs` on their text: an item present only in chunks ranked below `PROBE_DEPTH`
phrase matches counts as absent (a specific symbol rarely has that many), and an item whose
words are all stopwords (the index cannot search it) counts as absent too. An item found in
the context is in the corpus without a probe (the context is corpus text).

Rates (:func:`grounding_rates`)
-------------------------------
Pooled over the items of a variant's answers (an answer with many items weighs more: the rate
is "of what the answers claim, how much is grounded"): ``grounded_rate`` = items in context /
items, ``corpus_rate`` = items in the corpus / items (NaN when no probe was given or there are
no items). ``citations_per_answer``: the mean over answers of the distinct context numbers an
answer cites that name an entry (an unknown citation such as ``[9]`` of five entries is
counted in ``unknown_citations``, not here). Answers without an answer text (errored) are not in
these rates: the grader's ``no_answer`` rows carry that failure.

As a grader (``grounding``): per answer, ``score`` = the share of its items found in its
context, ``passed`` = every item found there; an answer with no items is ``not_applicable``
("nothing checkable"). Its pass rate and mean score are gated like every grader's.
"""

from __future__ import annotations

import ast
import builtins
import json
import keyword
import math
import re
import unicodedata
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from eval_pipeline.answering.context import ContextEntry, cited_documents
from eval_pipeline.common.formatting import MISSING
from eval_pipeline.grading.assertions import _split_fences

__all__ = [
    "GROUNDING_VERSION",
    "ITEM_KINDS",
    "PROBE_DEPTH",
    "UNITS",
    "AnswerGrounding",
    "CorpusProbe",
    "Item",
    "KeywordCorpusProbe",
    "TextCorpusProbe",
    "extract_items",
    "ground_answer",
    "grounding_rates",
    "hallucination_log",
    "hallucinations_jsonl",
    "hallucinations_markdown",
    "occurs",
]

GROUNDING_VERSION = 1
ITEM_KINDS = ("code", "quoted", "call", "symbol", "number", "import")
PROBE_DEPTH = 50
MAX_QUOTED_CHARS = 200
UNITS = (
    "%", "percent", "ms", "milliseconds", "s", "sec", "seconds", "min", "minutes", "h", "hours", "days", "weeks",
    "months", "years", "KB", "MB", "GB", "TB", "kB", "KiB", "MiB", "GiB", "bytes", "words", "word", "tokens", "token",
    "chunks", "chunk", "documents", "docs", "queries", "questions", "prompts", "rows", "dimensions", "dims", "x",
    "USD", "EUR", "requests", "calls", "retries", "workers", "cores", "threads", "epochs", "steps", "pages",
)
_SKIP_CALLS = frozenset(keyword.kwlist) | frozenset(dir(builtins)) | frozenset(keyword.softkwlist)

_IDENT = r"[A-Za-z_][A-Za-z0-9_]*"
_DOTTED = rf"{_IDENT}(?:\.{_IDENT})+"
_NAME = rf"{_IDENT}(?:\.{_IDENT})*"
_CODE_SPAN = re.compile(r"(?<!`)(`+)(?!`)(.+?)(?<!`)\1(?!`)", re.S)
_QUOTED = re.compile(r"\"([^\"\n]{1,%d})\"|“([^”\n]{1,%d})”" % (MAX_QUOTED_CHARS, MAX_QUOTED_CHARS))
_CALL = re.compile(rf"(?<![\w.])({_NAME})\((?!s\))")
_SYMBOL = re.compile(rf"(?<![\w.])({_DOTTED})(?![\w(])")
_UNIT_ALT = "|".join(sorted((re.escape(u) for u in UNITS), key=len, reverse=True))
_NUMBER = re.compile(rf"(?<![\w.])(\d{{1,3}}(?:,\d{{3}})+|\d+)(?:\.\d+)?(?:\s?|-)(?:{_UNIT_ALT})(?![\w])")
_WHOLE_CALL = re.compile(rf"\s*({_NAME})\(.*\)\s*", re.S)
_WHOLE_SYMBOL = re.compile(rf"\s*({_DOTTED})\s*")
_WORDY = re.compile(r"[^\W_]", re.UNICODE)
_PYTHON_TAGS = frozenset({"python", "py", "python3"})


@dataclass(frozen=True)
class Item:
    """One checkable thing an answer uses: its kind (`ITEM_KINDS`) and the text looked up."""

    kind: str
    text: str


def _nfc(text: str) -> str:
    return unicodedata.normalize("NFC", text)


def _fold(text: str) -> str:
    return " ".join(_nfc(text).casefold().split())


def _is_symbol(name: str) -> bool:
    parts = name.split(".")
    return len(parts) >= 2 and any(len(p) >= 2 for p in parts)


def _blank(text: str, start: int, end: int) -> str:
    """`text` with [start, end) replaced by spaces (lengths kept, so later matches keep their place)."""
    return text[:start] + " " * (end - start) + text[end:]


def _prose_items(text: str, *, quotes_and_numbers: bool = True) -> list[tuple[int, Item]]:
    """(position, item) of the prose rules, each kind consuming what it matched (module docstring)."""
    found: list[tuple[int, Item]] = []
    for m in _CODE_SPAN.finditer(text):
        content = m.group(2)
        call, symbol = _WHOLE_CALL.fullmatch(content), _WHOLE_SYMBOL.fullmatch(content)
        if call is not None:
            if call.group(1) not in _SKIP_CALLS:
                found.append((m.start(), Item("call", call.group(1))))
        elif symbol is not None and _is_symbol(symbol.group(1)):
            found.append((m.start(), Item("symbol", symbol.group(1))))
        elif _WORDY.search(content):
            found.append((m.start(), Item("code", " ".join(content.split()))))
        text = _blank(text, m.start(), m.end())
    if quotes_and_numbers:
        for m in _QUOTED.finditer(text):
            phrase = " ".join((m.group(1) or m.group(2)).split())
            if _WORDY.search(phrase):
                found.append((m.start(), Item("quoted", phrase)))
            text = _blank(text, m.start(), m.end())
    for m in _CALL.finditer(text):
        if m.group(1) not in _SKIP_CALLS:
            found.append((m.start(), Item("call", m.group(1))))
        text = _blank(text, m.start(), m.end())
    for m in _SYMBOL.finditer(text):
        if _is_symbol(m.group(1)):
            found.append((m.start(), Item("symbol", m.group(1))))
        text = _blank(text, m.start(), m.end())
    if quotes_and_numbers:
        for m in _NUMBER.finditer(text):
            found.append((m.start(), Item("number", " ".join(m.group(0).split()))))
    return found


def _bound_names(tree: ast.AST) -> set[str]:
    """The names a python block binds itself (module docstring): assignment, loop, with and
    except targets, function arguments, def and class names."""
    bound: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            bound.add(node.id)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(node.name)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            bound.add(node.name)
    return bound


def _dotted(node: ast.AST) -> str | None:
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        return ".".join([node.id, *reversed(parts)])
    return None


def _python_items(body: str) -> list[tuple[int, Item]] | None:
    """(position, item) of a python block, or None when it does not parse."""
    try:
        tree = ast.parse(body)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    bound = _bound_names(tree)
    found: list[tuple[int, Item]] = []
    lines = [0]
    for line in body.split("\n"):
        lines.append(lines[-1] + len(line) + 1)

    def at(node: ast.AST) -> int:
        return lines[getattr(node, "lineno", 1) - 1] + getattr(node, "col_offset", 0)

    called: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(at(node), Item("import", a.name)) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((at(node), Item("import", node.module)))
            found += [(at(node), Item("symbol", f"{node.module}.{a.name}")) for a in node.names if a.name != "*"]
        elif isinstance(node, ast.Call):
            name = _dotted(node.func)
            called.add(id(node.func))
            if name and name.split(".")[0] not in bound and name not in _SKIP_CALLS:
                found.append((at(node), Item("call", name)))
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and id(node) not in called and isinstance(node.ctx, ast.Load):
            name = _dotted(node)
            if name and name.split(".")[0] not in bound and _is_symbol(name):
                found.append((at(node), Item("symbol", name)))
    # an attribute chain inside a longer one (a.b of a.b.c) is part of it, not an item of its own
    names = {i.text for _, i in found}
    return [(p, i) for p, i in found
            if not (i.kind == "symbol" and any(n != i.text and n.startswith(i.text + ".") for n in names))]


def _is_json(text: str) -> bool:
    """Whether the whole text is a JSON object or array (an answer in a JSON format)."""
    stripped = text.strip()
    if not stripped.startswith(("{", "[")):
        return False
    try:
        json.loads(stripped)
    except ValueError:
        return False
    return True


def extract_items(answer: str) -> tuple[Item, ...]:
    """The checkable items of an answer, by the rules of the module docstring, in order of first
    appearance (fenced blocks after the prose), deduplicated by casefolded text."""
    if not isinstance(answer, str):
        raise TypeError(f"answer must be a str, got {type(answer).__name__}")
    fences, prose = _split_fences(_nfc(answer))
    found = sorted(_prose_items(prose, quotes_and_numbers=not _is_json(prose)), key=lambda pair: pair[0])
    for fence in fences:
        python = _python_items(fence.body) if fence.tag in _PYTHON_TAGS else None
        block = python if python is not None else _prose_items(fence.body, quotes_and_numbers=False)
        found += sorted(block, key=lambda pair: pair[0])
    out: dict[str, Item] = {}
    for _, item in found:
        out.setdefault(_fold(item.text), item)
    return tuple(out.values())


def occurs(item: str, text: str) -> bool:
    """Whether `item` occurs in `text` (casefolded, whitespace-collapsed, not glued to a word
    character where the item starts or ends with one; module docstring)."""
    needle, hay = _fold(item), _fold(text)
    if not needle:
        return False
    left = r"(?<![\w])" if re.match(r"\w", needle) else ""
    right = r"(?![\w])" if re.search(r"\w$", needle) else ""
    return re.search(left + re.escape(needle) + right, hay) is not None


class CorpusProbe(Protocol):
    """Which of `items` occur in some chunk of the corpus table `table` (None: the probe's only
    corpus)."""

    def contains(self, table: str | None, items: Sequence[str]) -> Mapping[str, bool]: ...


class TextCorpusProbe:
    """A corpus held as texts in memory (tests, small corpora): `occurs` on every text."""

    def __init__(self, texts: Iterable[str]):
        self.texts = [t for t in texts]

    def contains(self, table: str | None, items: Sequence[str]) -> dict[str, bool]:
        return {item: any(occurs(item, t) for t in self.texts) for item in items}


class KeywordCorpusProbe:
    """The corpus as the keyword index holds it: `IndexedKeywordRetriever` (websearch match, the
    item as a quoted phrase, `PROBE_DEPTH` chunks), confirmed by `occurs` on the chunks' text.
    One retriever (connection) per table; each distinct item is asked once per probe."""

    def __init__(self, connection_string: str, *, language: str = "english", depth: int = PROBE_DEPTH):
        self.connection_string = connection_string
        self.language = language
        self.depth = depth
        self._retrievers: dict[str, Any] = {}
        self._memo: dict[tuple[str, str], bool] = {}
        self.queries = 0  # index queries made (a figure for the bench)

    def _retriever(self, table: str):
        # deferred: keyword_index imports Haystack and torch, ~3 s
        from eval_pipeline.ranking.keyword_index import IndexedKeywordRetriever  # noqa: PLC0415

        if table not in self._retrievers:
            self._retrievers[table] = IndexedKeywordRetriever(
                connection_string=self.connection_string, table=table, top_k=self.depth, language=self.language,
                match="websearch")
        return self._retrievers[table]

    def contains(self, table: str | None, items: Sequence[str]) -> dict[str, bool]:
        if not table:
            raise ValueError("KeywordCorpusProbe needs the answers' store table (the answers frame's store_table)")
        out = {}
        for item in items:
            key = (table, _fold(item))
            if key not in self._memo:
                phrase = " ".join(item.replace('"', " ").split())
                docs = self._retriever(table).run(query=f'"{phrase}"')["documents"] if _WORDY.search(phrase) else []
                self.queries += 1
                self._memo[key] = any(occurs(item, d.content or "") for d in docs)
            out[item] = self._memo[key]
        return out

    def close(self) -> None:
        for retriever in self._retrievers.values():
            retriever.close()
        self._retrievers.clear()


@dataclass(frozen=True)
class AnswerGrounding:
    """One answer's items and where each was found; `in_corpus` None when no probe was asked."""

    items: tuple[Item, ...]
    in_context: tuple[bool, ...]
    in_corpus: tuple[bool, ...] | None
    citations: int  # distinct context entries the answer cites
    unknown_citations: int  # citation numbers that name no entry

    @property
    def rate(self) -> float | None:
        """The share of items found in the context; None without items."""
        return sum(self.in_context) / len(self.items) if self.items else None

    def ungrounded(self) -> list[dict[str, Any]]:
        """The items not found in the context: kind, item, and whether the corpus has them."""
        return [{"kind": item.kind, "item": item.text,
                 "in_corpus": None if self.in_corpus is None else self.in_corpus[i]}
                for i, item in enumerate(self.items) if not self.in_context[i]]

    def to_json(self) -> dict[str, Any]:
        return {"n_items": len(self.items), "n_in_context": sum(self.in_context),
                "n_in_corpus": None if self.in_corpus is None else sum(self.in_corpus),
                "citations": self.citations, "unknown_citations": self.unknown_citations,
                "ungrounded": self.ungrounded()}


def ground_answer(answer: str, context: Sequence[ContextEntry], *, probe: CorpusProbe | None = None,
                  table: str | None = None) -> AnswerGrounding:
    """One answer's grounding: its items, each looked up in its context and (with `probe`) in
    the corpus; an item in the context is in the corpus without asking the probe."""
    items = extract_items(answer)
    in_context = tuple(any(occurs(item.text, e.text) for e in context) for item in items)
    in_corpus = None
    if probe is not None:
        ask = [item.text for item, here in zip(items, in_context) if not here]
        found = probe.contains(table, ask) if ask else {}
        in_corpus = tuple(here or bool(found.get(item.text, False)) for item, here in zip(items, in_context))
    _, unknown = cited_documents(answer, context)
    numbers = {int(n) for n in re.findall(r"\[(\d{1,4})\]", answer)} & {e.number for e in context}
    return AnswerGrounding(items, in_context, in_corpus, len(numbers), len(unknown))


def _rate(numerator: int, denominator: int) -> float:
    return numerator / denominator if denominator else math.nan


def grounding_rates(groundings: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """A variant's grounding numbers from its answers' `AnswerGrounding.to_json()` records (one
    per answer that has a text): pooled rates, citations per answer (module docstring).
    No answers: zero counts and NaN rates."""
    n_items = sum(int(g["n_items"]) for g in groundings)
    in_context = sum(int(g["n_in_context"]) for g in groundings)
    probed = [g for g in groundings if g.get("n_in_corpus") is not None]
    corpus_known = bool(groundings) and len(probed) == len(groundings)
    in_corpus = sum(int(g["n_in_corpus"]) for g in probed)
    return {
        "n_answers": len(groundings),
        "n_answers_with_items": sum(int(g["n_items"]) > 0 for g in groundings),
        "n_items": n_items,
        "n_in_context": in_context,
        "n_in_corpus": in_corpus if corpus_known else None,
        "grounded_rate": _rate(in_context, n_items),
        "corpus_rate": _rate(in_corpus, n_items) if corpus_known else math.nan,
        "n_ungrounded": n_items - in_context,
        "n_not_in_corpus": n_items - in_corpus if corpus_known else None,
        "citations_per_answer": (sum(int(g["citations"]) for g in groundings) / len(groundings)
                                 if groundings else math.nan),
        "unknown_citations": sum(int(g["unknown_citations"]) for g in groundings),
    }


# --------------------------------------------------------------------------
# the hallucination log
# --------------------------------------------------------------------------

LOG_FIELDS = ("variant", "prompt_id", "answer_key", "kind", "item", "in_corpus", "answer")


def hallucination_log(grades: Iterable[Mapping[str, Any]], *, answer_keys: Mapping[tuple[str, str], str] | None = None,
                      answer_texts: Mapping[tuple[str, str], str] | None = None) -> list[dict[str, Any]]:
    """One entry per item not found in its answer's context (`LOG_FIELDS`), from the
    ``grounding`` grader's rows (their ``details_json``), sorted by variant, prompt and item
    order. `answer_keys` ((variant, prompt) -> answer cache key) names the answer; the answer's
    text is included only when `answer_texts` is given (the run's keep_text), else None. An
    item the corpus holds elsewhere is still listed (``in_corpus`` True: the context did not
    support it, the corpus might)."""
    out = []
    for row in grades:
        if row.get("grader") != "grounding" or row.get("status") != "graded":
            continue
        details = json.loads(row["details_json"]) if row.get("details_json") else {}
        key = (str(row["variant"]), str(row["prompt_id"]))
        for entry in details.get("ungrounded", []):
            out.append({"variant": key[0], "prompt_id": key[1], "answer_key": (answer_keys or {}).get(key),
                        "kind": entry["kind"], "item": entry["item"], "in_corpus": entry["in_corpus"],
                        "answer": (answer_texts or {}).get(key) if answer_texts is not None else None})
    return sorted(out, key=lambda e: (e["variant"], e["prompt_id"]))


def hallucinations_jsonl(log: Sequence[Mapping[str, Any]]) -> str:
    """The log as JSON lines (one entry a line, keys sorted); "" for an empty log."""
    return "".join(json.dumps(dict(e), sort_keys=True, ensure_ascii=False) + "\n" for e in log)


def hallucinations_markdown(log: Sequence[Mapping[str, Any]]) -> str:
    """The log for a person: counts per variant (items not in the context, of which not in the
    corpus either), then one line per item under its variant and prompt."""
    lines = ["# Hallucination log", "",
             "Items an answer used that its context does not contain (grounding grader); "
             "*not in corpus*: the keyword index found them nowhere. Targets to read, not verdicts.", ""]
    if not log:
        return "\n".join([*lines, "No ungrounded items.", ""])
    variants = sorted({e["variant"] for e in log})
    lines += ["| variant | not in context | of which not in corpus |", "|---|---|---|"]
    for v in variants:
        mine = [e for e in log if e["variant"] == v]
        absent = [e for e in mine if e["in_corpus"] is False]
        unknown = any(e["in_corpus"] is None for e in mine)
        lines.append(f"| {v} | {len(mine)} | {MISSING if unknown else len(absent)} |")
    lines.append("")
    for v in variants:
        lines += [f"## {v}", ""]
        for e in (e for e in log if e["variant"] == v):
            where = {True: "in corpus", False: "**not in corpus**", None: "corpus not probed"}[e["in_corpus"]]
            item = e["item"].replace("`", "'")
            lines.append(f"- prompt `{e['prompt_id']}`: {e['kind']} `{item}` ({where})")
            if e.get("answer"):
                lines.append(f"  > {' '.join(str(e['answer']).split())[:500]}")
        lines.append("")
    return "\n".join(lines)
