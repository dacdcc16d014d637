"""The numbered context an answer is written from, and the citations it gives back.

Every generator sees the same context: the variant's top-k documents, each through the chunk
that ranked it, numbered from 1 (`[1]`, `[2]`, ...). An answer cites with those numbers;
`cited_documents` maps them back to document ids, and reports numbers that name no context
entry instead of dropping them (a generator that cites `[7]` of five entries made that up).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

_CITATION = re.compile(r"\[(\d{1,4})\]")


@dataclass(frozen=True)
class ContextEntry:
    number: int  # 1-based, as the answer cites it
    chunk_id: str
    doc_id: str
    text: str


def numbered_context(chunks: Iterable[tuple[str, str, str]], k: int) -> tuple[ContextEntry, ...]:
    """The first `k` of `(chunk id, doc id, text)` in rank order, numbered from 1; a document
    appears once (its first, best-ranked chunk)."""
    if not isinstance(k, int) or isinstance(k, bool) or k < 1:
        raise ValueError(f"k must be an integer >= 1, got {k!r}")
    out: list[ContextEntry] = []
    seen: set[str] = set()
    for chunk_id, doc_id, text in chunks:
        if doc_id in seen:
            continue
        seen.add(doc_id)
        out.append(ContextEntry(len(out) + 1, chunk_id, doc_id, text))
        if len(out) == k:
            break
    return tuple(out)


def context_from_record(record: Mapping[str, Any]) -> tuple[ContextEntry, ...]:
    """The context an answer was written from, as its cache record keeps it."""
    return tuple(ContextEntry(int(n), str(c), str(d), str(t)) for n, c, d, t in record["context"])


def render_context(context: Sequence[ContextEntry]) -> str:
    """The context as a prompt shows it: `[n] text`, one entry per paragraph."""
    return "\n\n".join(f"[{e.number}] {e.text}" for e in context)


def cited_documents(answer: str, context: Sequence[ContextEntry]) -> tuple[tuple[str, ...], tuple[int, ...]]:
    """(the documents the answer cites, in order of first citation; the citation numbers that
    name no entry of the context, in order)."""
    by_number = {e.number: e.doc_id for e in context}
    docs: list[str] = []
    unknown: list[int] = []
    for match in _CITATION.finditer(answer or ""):
        n = int(match.group(1))
        if n in by_number:
            if by_number[n] not in docs:
                docs.append(by_number[n])
        elif n not in unknown:
            unknown.append(n)
    return tuple(docs), tuple(unknown)
