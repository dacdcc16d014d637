"""Corpus sources: the bundled demo corpus, a folder of files, a JSONL file or a BEIR corpus.

Every source yields the same `Document` records and a `CorpusSnapshot` that carries an
order-independent signature, so a question set or a vector table can say which corpus it
was built against.

Bad input is never dropped silently.  In strict mode (the default) the first bad record
raises `CorpusError` naming the file and line.  In lenient mode the bad record is skipped
and recorded as a `SkippedRecord`, which the pipeline counts and reports.
"""

from __future__ import annotations

import errno
import gzip
import hashlib
import heapq
import itertools
import json
import logging
import os
import stat
import tempfile
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, overload

from eval_pipeline.common.atomic import atomic_writer

DEMO_DATA_DIR = Path(__file__).resolve().parent.parent / "demo_data"  # eval_pipeline/demo_data
FOLDER_SUFFIXES = (".md", ".txt", ".json")

SourceKind = Literal["demo", "folder", "jsonl", "beir"]
_logger = logging.getLogger(__name__)

# Characters that show as nothing: zero-width space/joiners, the directional marks, embeddings,
# overrides and isolates, and U+FEFF inside a text (at its start it is a byte order mark).
# Glued to a word they make it another token, so keyword search does not find the word.
INVISIBLE_CHARACTERS = frozenset(chr(c) for c in (*range(0x200B, 0x2010), *range(0x202A, 0x202F),
                                                  *range(0x2066, 0x206A), 0xFEFF))


_LOGGED_NOTES = 20  # notes logged one by one; the rest are counted in one line


def invisible_characters(text: str) -> dict[str, int]:
    """How many of each INVISIBLE_CHARACTERS `text` holds ({"U+200B": 2}), in code point order; a
    U+FEFF at the very start (a byte order mark) is not counted."""
    counts: dict[str, int] = {}
    if not INVISIBLE_CHARACTERS.isdisjoint(text):
        for i, ch in enumerate(text):
            if ch in INVISIBLE_CHARACTERS and not (i == 0 and ch == "\ufeff"):
                name = f"U+{ord(ch):04X}"
                counts[name] = counts.get(name, 0) + 1
    return dict(sorted(counts.items()))


def invisible_note(counts: dict[str, int]) -> str:
    """What a text holding `counts` (invisible_characters) is told: the counts and why they matter."""
    n = sum(counts.values())
    shown = ", ".join(f"{name} ×{k}" for name, k in counts.items())
    return (f"{n} invisible character{'s' if n != 1 else ''} ({shown}: zero-width or bidi controls) in the text; "
            "keyword search does not match a word they touch (the text is kept as it is)")


class CorpusError(ValueError):
    """A corpus record or file that cannot be used; the message names the file and line."""


@dataclass(frozen=True)
class Document:
    doc_id: str
    title: str
    description: str
    filename: str
    content: str
    metadata: dict[str, Any] = field(default_factory=dict, hash=False, compare=False)

    @property
    def content_hash(self) -> str:
        """Hash of every text field an engine can read (title, description and filename
        feed the metadata engine, content feeds the others)."""
        h = hashlib.sha256()
        for part in (self.title, self.description, self.filename, self.content):
            h.update(part.encode("utf-8"))
            h.update(b"\x00")
        return h.hexdigest()


@dataclass(frozen=True)
class SkippedRecord:
    location: str  # "path:line" or "path"
    reason: str


class CorpusSnapshot:
    """The documents to search, where they came from and what was skipped.

    Held in memory, or *spooled*: the documents in a file named by the signature, written in the
    signature's order (`spool_to`, or `load_corpus(..., spool_to=folder)`, which never holds the
    corpus). A spooled snapshot pickles as that reference, and its documents are read from the
    file whenever they are walked (`documents` is a view of the file, `iter_sorted` streams it),
    never held, so no step after the load holds the corpus. The file is checked against the
    signature as it is read: a spool changed after it was written is refused rather than
    embedded under the old signature.
    """

    notes: tuple[SkippedRecord, ...] = ()  # a snapshot pickled before notes existed has none
    _characters: int | None = None  # a snapshot pickled before it was counted counts when asked

    def __init__(self, documents: Iterable[Document], source: str, skipped: Iterable[SkippedRecord] = (),
                 notes: Iterable[SkippedRecord] = ()):
        self._documents: tuple[Document, ...] | None = tuple(documents)
        self.source = source
        self.skipped = tuple(skipped)
        # Documents kept but worth a warning (location, reason), as skipped records are shaped:
        # invisible characters (zero-width, bidi controls) that keyword search trips on.
        self.notes = tuple(notes)
        self._signature: str | None = None
        self._count = len(self._documents)
        self._characters = None
        self.spool: Path | None = None

    @classmethod
    def _spooled(cls, spool: Path, source: str, skipped: Iterable[SkippedRecord], notes: Iterable[SkippedRecord],
                 signature: str, count: int, characters: int) -> CorpusSnapshot:
        snapshot = cls((), source, skipped, notes)
        snapshot._documents, snapshot._signature, snapshot._count = None, signature, count
        snapshot._characters, snapshot.spool = characters, spool
        return snapshot

    @property
    def documents(self) -> Sequence[Document]:
        """Every document in memory; for a spooled snapshot, a view that reads the spool each time
        it is walked (in the signature's order), so a step that only walks the corpus never holds it."""
        if self._documents is not None:
            return self._documents
        self._spool_file()  # a spool gone is said now, not at the first walk
        return _SpooledDocuments(self)

    @property
    def loaded(self) -> bool:
        """Whether the documents are in memory."""
        return self._documents is not None

    @property
    def count(self) -> int:
        return self._count

    @property
    def characters(self) -> int:
        """The documents' content length in characters (counted as they were spooled)."""
        if self._characters is None:
            self._characters = sum(len(d.content) for d in self.iter_sorted())
        return self._characters

    @property
    def signature(self) -> str:
        if self._signature is None:
            self._signature = corpus_signature(self.documents)
        return self._signature

    def by_id(self, doc_ids: Iterable[str] | None = None) -> dict[str, Document]:
        """Documents by id: the ones `doc_ids` names that the corpus holds (one walk of the spool,
        holding only those), or every document when None."""
        if doc_ids is None:
            return {d.doc_id: d for d in self.documents}
        wanted = set(doc_ids)
        return {d.doc_id: d for d in self.documents if d.doc_id in wanted}

    def doc_ids(self) -> Iterator[str]:
        """The document ids in the signature's order, one at a time."""
        return (d.doc_id for d in self.iter_sorted())

    def iter_sorted(self) -> Iterator[Document]:
        """The documents in the signature's order (its "id<TAB>content hash" lines), one at a time:
        from the spool without loading the corpus, each checked into a running signature compared
        with the recorded one after the last; from memory, sorted."""
        if self._documents is not None:
            yield from sorted(self._documents, key=_order)
            return
        yield from _read_spool(self._spool_file(), self._signature, self._count)

    def spool_to(self, folder: str | Path) -> CorpusSnapshot:
        """This snapshot spooled into `folder/<signature>-<metadata digest>.jsonl` (written once,
        atomically, in the signature's order). The signature covers every text field; the
        digest adds the records' metadata, which the signature leaves out, so two corpora that
        differ only there never share a file."""
        if self._documents is not None:  # named before it is written: a spool already there is not rewritten
            digest = _MetadataDigest()
            for d in self.iter_sorted():
                digest.add(d)
            path = Path(folder) / f"{self.signature}-{digest.hexdigest()[:8]}.jsonl"
            if path.exists():
                return CorpusSnapshot._spooled(path, self.source, self.skipped, self.notes, self.signature,
                                               self.count, sum(len(d.content) for d in self._documents))
        written = spool_documents(self.iter_sorted(), Path(folder))
        return CorpusSnapshot._spooled(written.path, self.source, self.skipped, self.notes, written.signature,
                                       written.count, written.characters)

    def _spool_file(self) -> Path:
        if self.spool is None or not self.spool.exists():
            raise CorpusError(f"the corpus snapshot's spool file {self.spool} is gone; materialize corpus_snapshot "
                              "again")
        return self.spool

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        if self.spool is not None:
            state["_documents"] = None  # the file is the snapshot: never copy the corpus between steps
        return state

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, CorpusSnapshot):
            return NotImplemented
        return (self.signature, self.source, self.skipped) == (other.signature, other.source, other.skipped)

    def __hash__(self) -> int:
        return hash((self.signature, self.source))

    def __repr__(self) -> str:
        where = f", spool={str(self.spool)!r}" if self.spool is not None else ""
        return (f"CorpusSnapshot(source={self.source!r}, documents={self.count}, skipped={len(self.skipped)}"
                f"{where})")


class _SpooledDocuments(Sequence[Document]):
    """A spooled snapshot's documents, read from its file each time they are walked: its length is
    the recorded count, and an index or a slice walks the file up to it (in the signature's order)."""

    def __init__(self, snapshot: CorpusSnapshot):
        self._snapshot = snapshot

    def __len__(self) -> int:
        return self._snapshot.count

    def __iter__(self) -> Iterator[Document]:
        return self._snapshot.iter_sorted()

    @overload
    def __getitem__(self, index: int) -> Document: ...

    @overload
    def __getitem__(self, index: slice) -> tuple[Document, ...]: ...

    def __getitem__(self, index: int | slice) -> Document | tuple[Document, ...]:
        if isinstance(index, slice):
            start, stop, step = index.indices(len(self))
            if step < 0:
                return tuple(self)[index]
            return tuple(itertools.islice(self, start, stop, step))
        position = index + len(self) if index < 0 else index
        if not 0 <= position < len(self):
            raise IndexError(f"document index {index} out of range ({len(self)} documents)")
        return next(itertools.islice(self, position, None))

    def __repr__(self) -> str:
        return f"<{self._snapshot.count} documents read from {self._snapshot.spool}>"


def _order(d: Document) -> str:
    return f"{d.doc_id}\t{d.content_hash}"  # the signature's line: its sort order is the signature's


def _record(d: Document) -> dict[str, Any]:
    return {"doc_id": d.doc_id, "title": d.title, "description": d.description, "filename": d.filename,
            "content": d.content, "metadata": d.metadata}


def _read_spool(path: Path, signature: str | None, count: int) -> Iterator[Document]:
    digest, n = hashlib.sha256(), 0
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            r = json.loads(line)
            d = Document(r["doc_id"], r["title"], r["description"], r["filename"], r["content"], r["metadata"])
            digest.update((("\n" if n else "") + f"{d.doc_id}\t{d.content_hash}").encode("utf-8"))
            n += 1
            yield d
    if n != count or digest.hexdigest()[:16] != signature:
        raise CorpusError(f"{path}: the spooled corpus ({n} documents) does not match the signature {signature} "
                          f"({count} documents) it was written for: it changed after it was written; delete it and "
                          "materialize corpus_snapshot again")


def corpus_signature(documents: Iterable[Document]) -> str:
    """Order-independent signature over (doc id, content hash) pairs: the sha256 of their sorted
    "id<TAB>hash" lines joined by newlines (`spool_documents` computes it as it writes)."""
    lines = sorted(f"{d.doc_id}\t{d.content_hash}" for d in documents)
    return hashlib.sha256("\n".join(lines).encode("utf-8")).hexdigest()[:16]


# --- writing a spool in bounded memory -------------------------------------------------------

# Documents are sorted in runs of about this many characters (of their records), each run written
# to a file and the runs merged: what spooling holds is one run, whatever the corpus's size.
SORT_RUN_CHARS = 16_000_000
_MERGE_FAN_IN = 64  # runs merged at once; more are merged in rounds


class _MetadataDigest:
    """The digest of `json.dumps([[doc_id, metadata], ...], sort_keys=True, default=str)` in the
    signature's order, computed one record at a time (what spools were named by when the whole
    list was built)."""

    def __init__(self) -> None:
        self._hash = hashlib.sha256(b"[")
        self._first = True

    def add(self, d: Document) -> None:
        self.add_text(json.dumps([d.doc_id, d.metadata], sort_keys=True, default=str))

    def add_text(self, item: str) -> None:
        self._hash.update(((", " if not self._first else "") + item).encode("utf-8"))
        self._first = False

    def hexdigest(self) -> str:
        final = self._hash.copy()
        final.update(b"]")
        return final.hexdigest()


@dataclass(frozen=True)
class SpoolWritten:
    path: Path
    signature: str
    count: int
    characters: int


def spool_documents(documents: Iterable[Document], folder: Path, *, read: Callable[[], None] = lambda: None
                    ) -> SpoolWritten:
    """Write `documents` (any order, unique ids) as a spool in `folder`, named by the signature
    and the metadata digest, holding one sorted run at a time: runs of SORT_RUN_CHARS are sorted by
    the signature's line and written beside the spool, then merged into it while the signature and
    the digest are computed. A spool of that name already there is kept (the same documents).
    `read()` is called once every document is read, before the merge: an error it raises (a load
    that fails after its last record) leaves no spool."""
    folder.mkdir(parents=True, exist_ok=True)
    count = characters = 0
    with tempfile.TemporaryDirectory(dir=folder, prefix=".sorting-") as scratch:
        runs: list[Path] = []
        buffer: list[tuple[str, str, str]] = []
        held = 0
        for d in documents:
            line = json.dumps(_record(d), ensure_ascii=False)
            buffer.append((_order(d), json.dumps([d.doc_id, d.metadata], sort_keys=True, default=str), line))
            held += len(line)
            count += 1
            characters += len(d.content)
            if held >= SORT_RUN_CHARS:
                runs.append(_write_run(sorted(buffer), Path(scratch), len(runs)))
                buffer, held = [], 0
        read()
        buffer.sort()
        while len(runs) + 1 > _MERGE_FAN_IN:  # merge in rounds: never more than _MERGE_FAN_IN files open
            merged = _write_run(heapq.merge(*(_read_run(r) for r in runs[:_MERGE_FAN_IN])), Path(scratch),
                                len(runs) + 10_000)
            for r in runs[:_MERGE_FAN_IN]:
                r.unlink()
            runs = [*runs[_MERGE_FAN_IN:], merged]
        signature, digest, first = hashlib.sha256(), _MetadataDigest(), True
        provisional = Path(scratch) / "spool.jsonl"
        with atomic_writer(provisional) as fh:
            for key, metadata, line in heapq.merge(*(_read_run(r) for r in runs), iter(buffer)):
                signature.update((("\n" if not first else "") + key).encode("utf-8"))
                digest.add_text(metadata)
                fh.write((line + "\n").encode("utf-8"))
                first = False
        name = signature.hexdigest()[:16]
        path = folder / f"{name}-{digest.hexdigest()[:8]}.jsonl"
        if not path.exists():
            os.replace(provisional, path)
    return SpoolWritten(path, name, count, characters)


def _write_run(rows: Iterable[tuple[str, str, str]], scratch: Path, number: int) -> Path:
    """A sorted run: each row as three lines (the sort key and the metadata item as JSON
    strings, then the spool's record line, which JSON keeps on one line)."""
    path = scratch / f"run-{number:06d}.txt"
    with open(path, "w", encoding="utf-8") as fh:
        for key, metadata, line in rows:
            fh.write(f"{json.dumps(key)}\n{json.dumps(metadata)}\n{line}\n")
    return path


def _read_run(path: Path) -> Iterator[tuple[str, str, str]]:
    with open(path, encoding="utf-8", newline="\n") as fh:
        for key in fh:
            yield json.loads(key), json.loads(fh.readline()), fh.readline()[:-1]


DEFAULT_MAX_DOCUMENT_CHARS = 5_000_000


def load_corpus(
    kind: SourceKind,
    path: str | None = None,
    *,
    lenient: bool = False,
    max_document_chars: int = DEFAULT_MAX_DOCUMENT_CHARS,
    follow_outside_links: bool = False,
    spool_to: str | Path | None = None,
) -> CorpusSnapshot:
    """Load a corpus from one of the supported sources.

    A document longer than `max_document_chars` is bad input (an export gone wrong, a log
    file): it would dominate chunking and embedding time, so it is refused (or skipped in
    lenient mode) with its location, rather than silently eating the run.

    In a folder, a symbolic link loop, a dangling link, a FIFO, a device or a socket is bad
    input too (an error in strict mode, a skipped record in lenient mode), and so is a link to
    a file or folder outside the folder (`/etc/passwd` is not a document) unless
    `follow_outside_links`.

    With `spool_to`, the documents go straight into a spool in that folder (as
    `CorpusSnapshot.spool_to` writes it), checked and signed one at a time and sorted on disk:
    loading holds one sorted run and a 16-byte digest per document id (for the duplicate check),
    never the corpus. Without it, the snapshot holds every document. Either way the same
    documents, errors, skipped records and notes.
    """
    if not isinstance(max_document_chars, int) or max_document_chars < 1:
        raise CorpusError(f"max_document_chars must be a positive integer, got {max_document_chars!r}")
    reader, source = _reader(kind, path, follow_outside_links, max_document_chars)
    check = _Check(reader, source, lenient, max_document_chars)
    if spool_to is None:
        documents = tuple(check.documents())
        check.finish()
        return CorpusSnapshot(documents=documents, source=source, skipped=check.skipped, notes=check.notes)
    written = spool_documents(check.documents(), Path(spool_to), read=check.finish)
    return CorpusSnapshot._spooled(written.path, source, check.skipped, check.notes, written.signature,
                                   written.count, written.characters)


def _reader(kind: SourceKind, path: str | None, follow_outside_links: bool = False,
            max_document_chars: int = DEFAULT_MAX_DOCUMENT_CHARS) -> tuple[Callable[[], Iterator[_Item]], str]:
    """How to read the source's records from the start (a duplicate's first location is found by
    reading again) and the source's name."""
    if kind not in ("demo", "folder", "jsonl", "beir"):
        raise CorpusError(f"unknown corpus source {kind!r}; valid: demo, folder, jsonl, beir")
    if kind == "demo":
        return lambda: _read_jsonl_records(DEMO_DATA_DIR / "corpus.jsonl", _our_record), "demo"
    if not path:
        raise CorpusError(f"corpus source {kind!r} needs a path")
    p = Path(path)
    if not p.exists():
        raise CorpusError(f"{p}: corpus path does not exist")
    if kind == "folder":
        if not p.is_dir():
            raise CorpusError(f"{p}: not a folder")
        return lambda: _read_folder(p, follow_outside_links, max_document_chars), f"folder:{p}"
    if kind == "jsonl":
        return lambda: _read_jsonl_records(p, _our_record), f"jsonl:{p}"
    corpus_file = p
    if p.is_dir():
        candidates = [p / "corpus.jsonl", p / "corpus.jsonl.gz"]
        found = [c for c in candidates if c.exists()]
        if not found:
            raise CorpusError(f"{p}: no corpus.jsonl or corpus.jsonl.gz in this BEIR folder")
        corpus_file = found[0]
    return lambda: _read_jsonl_records(corpus_file, _beir_record), f"beir:{corpus_file}"


# --- internals -------------------------------------------------------------------------

# Each reader yields either a Document or a CorpusError for one record, so that
# strict and lenient modes share one code path.
_Item = Document | CorpusError


class _Check:
    """The reader's records checked one at a time, in the reader's order: a bad record raises
    (strict) or is skipped (lenient), a duplicate id is a bad record naming where the id was first
    seen, a document with invisible characters is noted; `documents()` yields the good ones.

    A document longer than the limit is judged after the whole source is read (`finish`), as
    when the corpus was loaded whole before it was capped: in strict mode a bad record anywhere
    is reported before it, in lenient mode it is skipped after every bad record.

    Ids are remembered as 16-byte BLAKE2b digests, about 90 bytes a document in a Python set
    (18 MB at 200,000 documents), not the ids and locations; where a duplicate's id was first
    seen is found by reading the source again from the start (once, for every duplicate of a
    lenient load). Two different ids with the same 128-bit digest (odds about n² / 2^129) would
    be called duplicates; the second reading says so rather than name a wrong place.
    """

    def __init__(self, reader: Callable[[], Iterator[_Item]], source: str, lenient: bool, limit: int):
        self.reader, self.source, self.lenient, self.limit = reader, source, lenient, limit
        self._skipped: list[SkippedRecord] = []
        self._notes: list[SkippedRecord] = []
        self._too_long: list[SkippedRecord] = []
        self._duplicates: list[tuple[int, str, str]] = []  # (index in skipped, doc id, location)
        self._seen: set[bytes] = set()
        self._documents = 0  # every good record, too long or not
        self.kept = 0

    def documents(self) -> Iterator[Document]:
        for item in self.reader():
            if isinstance(item, Document):
                loc = item.metadata.get("_location", "?")
                key = hashlib.blake2b(item.doc_id.encode("utf-8", "surrogatepass"), digest_size=16).digest()
                if key in self._seen:
                    if not self.lenient:
                        raise CorpusError(f"{loc}: duplicate doc_id {item.doc_id!r} (first seen at "
                                          f"{self._first_seen({item.doc_id})[item.doc_id]})")
                    self._duplicates.append((len(self._skipped), item.doc_id, loc))
                    self._skipped.append(SkippedRecord(location=loc, reason=""))  # named in finish()
                    continue
                self._seen.add(key)
                self._documents += 1
                self._note(item, loc)
                if len(item.content) > self.limit:
                    self._too_long.append(SkippedRecord(f"doc {item.doc_id!r}", f"{len(item.content):,} characters, "
                                                        f"more than max_document_chars ({self.limit:,})"))
                    continue
                self.kept += 1
                meta = {k: v for k, v in item.metadata.items() if k != "_location"}
                yield Document(item.doc_id, item.title, item.description, item.filename, item.content, meta)
                continue
            if not self.lenient:
                raise item
            location, _, reason = str(item).partition(": ")
            self._skipped.append(SkippedRecord(location=location, reason=reason))

    def _note(self, item: Document, loc: str) -> None:
        counts: dict[str, int] = {}
        for text in (item.title, item.description, item.content):
            for name, k in invisible_characters(text).items():
                counts[name] = counts.get(name, 0) + k
        counts = dict(sorted(counts.items()))
        if counts:
            self._notes.append(SkippedRecord(location=loc, reason=invisible_note(counts)))
            if len(self._notes) <= _LOGGED_NOTES:
                _logger.warning("%s: %s", loc, self._notes[-1].reason)

    def _first_seen(self, doc_ids: set[str]) -> dict[str, str]:
        """Where each of `doc_ids` first appears in the source (its first good record)."""
        found: dict[str, str] = {}
        for item in self.reader():
            if isinstance(item, Document) and item.doc_id in doc_ids and item.doc_id not in found:
                found[item.doc_id] = item.metadata.get("_location", "?")
                if len(found) == len(doc_ids):
                    break
        return found

    def finish(self) -> None:
        """After `documents()` is exhausted: the duplicates named, the no-document and too-long
        errors raised, the too-long documents skipped after the bad records."""
        if self._duplicates:
            first = self._first_seen({doc_id for _, doc_id, _ in self._duplicates})
            for index, doc_id, loc in self._duplicates:
                if first.get(doc_id, loc) == loc:
                    raise CorpusError(f"{loc}: doc_id {doc_id!r} shares its 128-bit digest with another id; "
                                      "rename it")
                # split as any bad record's message is: its location before the first ": "
                location, _, reason = (f"{loc}: duplicate doc_id {doc_id!r} (first seen at "
                                       f"{first[doc_id]})").partition(": ")
                self._skipped[index] = SkippedRecord(location=location, reason=reason)
        if len(self._notes) > _LOGGED_NOTES:
            _logger.warning("%s: %d more documents hold invisible characters (CorpusSnapshot.notes lists every one)",
                            self.source, len(self._notes) - _LOGGED_NOTES)
        if not self._documents:
            raise CorpusError(f"{self.source}: the corpus has no usable documents"
                              + (f" ({len(self._skipped)} skipped)" if self._skipped else ""))
        if self._too_long and not self.lenient:
            r = self._too_long[0]
            raise CorpusError(f"{self.source}: {r.location}: {r.reason}; split it or raise the limit")
        if not self.kept:
            raise CorpusError(f"{self.source}: the corpus has no usable documents ({len(self._too_long)} too long)")

    @property
    def skipped(self) -> tuple[SkippedRecord, ...]:
        return (*self._skipped, *self._too_long)

    @property
    def notes(self) -> tuple[SkippedRecord, ...]:
        return tuple(self._notes)


def _read_jsonl_records(path: Path, convert) -> Iterator[_Item]:
    """Reads bytes and decodes line by line, so a bad byte is reported on its own line and,
    in lenient mode, skips only that line."""
    try:
        fh = gzip.open(path, "rb") if path.suffix == ".gz" else open(path, "rb")
    except OSError as exc:
        raise CorpusError(f"{path}: cannot open corpus file: {exc}") from exc
    with fh:
        lineno = 0
        while True:
            try:
                raw = fh.readline()
            except (OSError, EOFError) as exc:
                raise CorpusError(f"{path}:{lineno + 1}: unreadable: {exc}") from exc
            if not raw:
                return
            lineno += 1
            loc = f"{path}:{lineno}"
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                yield CorpusError(f"{loc}: invalid UTF-8 at byte {exc.start}")
                continue
            if not line.strip():
                continue
            obj = _json_object(line, loc)
            yield obj if isinstance(obj, CorpusError) else convert(obj, loc)


def _json_object(text: str, loc: str, *, multiline: bool = False) -> dict | CorpusError:
    """The JSON object in `text`, or the error naming where it went wrong (`loc` is
    "path:line" for a JSONL line; for a whole .json file the line comes from the parser)."""
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as exc:
        where = f"{loc}:{exc.lineno}" if multiline else loc
        return CorpusError(f"{where}: invalid JSON: {exc.msg} at column {exc.colno}")
    except RecursionError:
        return CorpusError(f"{loc}: invalid JSON: nested too deeply to read")
    except ValueError as exc:  # a number past Python's limit on integer digits (4,300)
        return CorpusError(f"{loc}: invalid JSON: {exc}")
    if not isinstance(obj, dict):
        return CorpusError(f"{loc}: expected a JSON object, got {type(obj).__name__}")
    return obj


def _str_field(obj: dict, name: str, loc: str, *, required: bool) -> str | CorpusError:
    value = obj.get(name, "")
    if value is None:
        value = ""
    if isinstance(value, (int, float)) and name in ("_id", "doc_id") and not isinstance(value, bool):
        value = str(value)
    if not isinstance(value, str):
        return CorpusError(f"{loc}: field {name!r} must be a string, got {type(value).__name__}")
    if required and not value.strip():
        return CorpusError(f"{loc}: field {name!r} is empty")
    if "\x00" in value and name not in ("_id", "doc_id"):  # an id's control characters are refused in _make
        # the signature joins a document's fields with NUL: one inside a field would let text move
        # across fields (which the metadata engine weighs apart) without changing it
        return CorpusError(f"{loc}: field {name!r} holds a NUL character (U+0000), which Postgres cannot store "
                           "and which would run the document's fields together in the corpus signature; remove it")
    return value


def _make(loc: str, doc_id, title, description, filename, content, metadata) -> _Item:
    for v in (doc_id, title, description, filename, content):
        if isinstance(v, CorpusError):
            return v
    if not isinstance(metadata, dict):
        return CorpusError(f"{loc}: field 'metadata' must be an object")
    if any(c in doc_id for c in "\x00\n\r\t"):
        return CorpusError(f"{loc}: doc_id {doc_id!r} contains a control character")
    return Document(doc_id, title, description, filename, content, {**metadata, "_location": loc})


def _our_record(obj: dict, loc: str) -> _Item:
    return _make(
        loc,
        _str_field(obj, "doc_id", loc, required=True),
        _str_field(obj, "title", loc, required=False),
        _str_field(obj, "description", loc, required=False),
        _str_field(obj, "filename", loc, required=False),
        _str_field(obj, "content", loc, required=True),
        obj.get("metadata") or {},
    )


def _beir_record(obj: dict, loc: str) -> _Item:
    return _make(
        loc,
        _str_field(obj, "_id", loc, required=True),
        _str_field(obj, "title", loc, required=False),
        "",
        "",
        _str_field(obj, "text", loc, required=True),
        obj.get("metadata") or {},
    )


_FILE_KINDS = ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
               (stat.S_ISSOCK, "a socket"))


def _walk_folder(root: Path, follow_outside_links: bool) -> Iterator[Path | CorpusError]:
    """The regular files under `root` in sorted path order, following symbolic links inside it,
    or a CorpusError for each entry that is not one: a link loop, a dangling link, a FIFO, a
    device or a socket, and a link leaving the folder unless `follow_outside_links`. Nothing is
    opened (a FIFO would block the reader)."""
    real_root = Path(os.path.realpath(root))

    def visit(folder: Path, ancestors: tuple[str, ...]) -> Iterator[Path | CorpusError]:
        try:
            names = sorted(os.listdir(folder))
        except OSError as exc:
            yield CorpusError(f"{_escaped(str(folder))}: unreadable folder: {exc.strerror or exc}")
            return
        for name in names:
            path = folder / name
            shown = _escaped(str(path))
            try:
                info = os.stat(path)
            except OSError as exc:
                if exc.errno == errno.ELOOP:
                    yield CorpusError(f"{shown}: symbolic link loop")
                elif os.path.islink(path) and exc.errno == errno.ENOENT:
                    yield CorpusError(f"{shown}: dangling symbolic link (to {_escaped(os.readlink(path))})")
                else:
                    yield CorpusError(f"{shown}: unreadable: {exc.strerror or exc}")
                continue
            is_dir = stat.S_ISDIR(info.st_mode)
            if not is_dir and not stat.S_ISREG(info.st_mode):
                kind = next((k for test, k in _FILE_KINDS if test(info.st_mode)), "a special file")
                yield CorpusError(f"{shown}: not a regular file ({kind})")
                continue
            real = os.path.realpath(path)
            if os.path.islink(path) and not follow_outside_links and not Path(real).is_relative_to(real_root):
                what = "folder" if is_dir else "file"
                yield CorpusError(f"{shown}: symbolic link to a {what} outside the folder ({_escaped(real)}); "
                                  "set follow_outside_links to read it")
                continue
            if is_dir:
                if real in ancestors:
                    yield CorpusError(f"{shown}: symbolic link loop (to {_escaped(real)}, a folder above it)")
                    continue
                yield from visit(path, (*ancestors, real))
            else:
                yield path

    yield from visit(root, (str(real_root),))


def _read_folder(root: Path, follow_outside_links: bool = False,
                 max_document_chars: int = DEFAULT_MAX_DOCUMENT_CHARS) -> Iterator[_Item]:
    if not root.is_dir():
        raise CorpusError(f"{root}: not a folder")
    for path in _walk_folder(root, follow_outside_links):
        if isinstance(path, CorpusError):
            yield path
            continue
        rel = path.relative_to(root).as_posix()
        if _undecodable(rel):  # Python reads a name that is not UTF-8 with surrogates no text can hold
            yield CorpusError(f"{_escaped(str(root))}/{_escaped(rel)}: the file name is not valid UTF-8 (bytes shown "
                              f"as \\xNN); rename the file")
            continue
        if path.suffix.lower() not in FOLDER_SUFFIXES:
            yield CorpusError(f"{path}: unsupported file type (expected {', '.join(FOLDER_SUFFIXES)})")
            continue
        try:  # a UTF-8 character is at most 4 bytes: a file larger than this is too long, so it is not read
            size = path.stat().st_size
            if size > 4 * max_document_chars:
                yield CorpusError(f"{path}: {size:,} bytes on disk, more than 4 × max_document_chars "
                                  f"({4 * max_document_chars:,} bytes), so more than {max_document_chars:,} "
                                  "characters; split it or raise the limit")
                continue
            raw = path.read_bytes()
        except OSError as exc:
            yield CorpusError(f"{path}: unreadable: {exc}")
            continue
        if b"\x00" in raw:
            yield CorpusError(f"{path}: binary file (contains NUL bytes)")
            continue
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            yield CorpusError(f"{path}: invalid UTF-8 at byte {exc.start}")
            continue
        doc_id = rel.rsplit(".", 1)[0]
        if path.suffix.lower() == ".json":
            obj = _json_object(text, str(path), multiline=True)
            if isinstance(obj, CorpusError):
                yield obj
                continue
            obj.setdefault("doc_id", doc_id)
            obj.setdefault("filename", rel)
            yield _our_record(obj, str(path))
            continue
        title = _first_heading(text) or path.stem.replace("-", " ").replace("_", " ")
        if not text.strip():
            yield CorpusError(f"{path}: empty content")
            continue
        yield Document(doc_id, title, "", rel, text, {"_location": str(path)})


def _undecodable(name: str) -> bool:
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def _escaped(name: str) -> str:
    """A file name as text: the bytes of a name that is not UTF-8 shown as \\xNN."""
    try:
        return name.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    except UnicodeEncodeError:  # a surrogate no file system byte gives: shown as \\udXXX
        return name.encode("utf-8", "backslashreplace").decode("utf-8")


def _first_heading(text: str) -> str:
    for line in text.splitlines():
        s = line.strip()
        if s.startswith("#"):
            return s.lstrip("#").strip()
        if s:
            return ""
    return ""
