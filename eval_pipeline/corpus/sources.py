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
import json
import logging
import os
import stat
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

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

    Held in memory, or *spooled* (`spool_to`): the documents in a file named by the signature,
    read only when `documents` is first asked for. A spooled snapshot pickles as that reference,
    so the steps that only stream the corpus (ingest, through `iter_sorted`) never hold it, and
    the file is checked against the signature as it is read: a spool changed after it was
    written is refused rather than embedded under the old signature.
    """

    notes: tuple[SkippedRecord, ...] = ()  # a snapshot pickled before notes existed has none

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
        self.spool: Path | None = None

    @property
    def documents(self) -> tuple[Document, ...]:
        if self._documents is None:
            self._documents = tuple(self.iter_sorted())
        return self._documents

    @property
    def loaded(self) -> bool:
        """Whether the documents are in memory."""
        return self._documents is not None

    @property
    def count(self) -> int:
        return self._count

    @property
    def signature(self) -> str:
        if self._signature is None:
            self._signature = corpus_signature(self.documents)
        return self._signature

    def by_id(self) -> dict[str, Document]:
        return {d.doc_id: d for d in self.documents}

    def iter_sorted(self) -> Iterator[Document]:
        """The documents in the signature's order (doc id, then a tab), one at a time: from the
        spool without loading the corpus, each checked into a running signature compared with
        the recorded one after the last; from memory, sorted."""
        if self._documents is not None:
            yield from sorted(self._documents, key=_order)
            return
        yield from _read_spool(self._spool_file(), self._signature, self._count)

    def spool_to(self, folder: str | Path) -> CorpusSnapshot:
        """This snapshot spooled into `folder/<signature>-<metadata digest>.jsonl` (written once,
        atomically, in the signature's order). The signature covers every text field; the
        digest adds the records' metadata, which the signature leaves out, so two corpora that
        differ only there never share a file."""
        from eval_pipeline.common.atomic import atomic_writer

        metadata = json.dumps([[d.doc_id, d.metadata] for d in self.iter_sorted()], sort_keys=True, default=str)
        path = Path(folder) / f"{self.signature}-{hashlib.sha256(metadata.encode()).hexdigest()[:8]}.jsonl"
        if not path.exists():
            with atomic_writer(path) as fh:
                for d in self.iter_sorted():
                    fh.write((json.dumps(_record(d), ensure_ascii=False) + "\n").encode("utf-8"))
        spooled = CorpusSnapshot((), self.source, self.skipped, self.notes)
        spooled._documents, spooled._signature, spooled._count, spooled.spool = None, self.signature, self.count, path
        return spooled

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


def _order(d: Document) -> str:
    return d.doc_id + "\t"  # the order of the signature's "id<TAB>hash" lines


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
    """Order-independent signature over (doc id, content hash) pairs."""
    lines = sorted(f"{d.doc_id}\t{d.content_hash}" for d in documents)
    return hashlib.sha256("\n".join(lines).encode("utf-8")).hexdigest()[:16]


DEFAULT_MAX_DOCUMENT_CHARS = 5_000_000


def load_corpus(
    kind: SourceKind,
    path: str | None = None,
    *,
    lenient: bool = False,
    max_document_chars: int = DEFAULT_MAX_DOCUMENT_CHARS,
    follow_outside_links: bool = False,
) -> CorpusSnapshot:
    """Load a corpus from one of the supported sources.

    A document longer than `max_document_chars` is bad input (an export gone wrong, a log
    file): it would dominate chunking and embedding time, so it is refused (or skipped in
    lenient mode) with its location, rather than silently eating the run.

    In a folder, a symbolic link loop, a dangling link, a FIFO, a device or a socket is bad
    input too (an error in strict mode, a skipped record in lenient mode), and so is a link to
    a file or folder outside the folder (`/etc/passwd` is not a document) unless
    `follow_outside_links`.
    """
    if not isinstance(max_document_chars, int) or max_document_chars < 1:
        raise CorpusError(f"max_document_chars must be a positive integer, got {max_document_chars!r}")
    return _cap(_load(kind, path, lenient, follow_outside_links, max_document_chars), max_document_chars, lenient)


def _cap(snapshot: CorpusSnapshot, limit: int, lenient: bool) -> CorpusSnapshot:
    too_long = [d for d in snapshot.documents if len(d.content) > limit]
    if not too_long:
        return snapshot
    reasons = [SkippedRecord(f"doc {d.doc_id!r}", f"{len(d.content):,} characters, more than max_document_chars "
                             f"({limit:,})") for d in too_long]
    if not lenient:
        r = reasons[0]
        raise CorpusError(f"{snapshot.source}: {r.location}: {r.reason}; split it or raise the limit")
    kept = tuple(d for d in snapshot.documents if len(d.content) <= limit)
    if not kept:
        raise CorpusError(f"{snapshot.source}: the corpus has no usable documents ({len(reasons)} too long)")
    return CorpusSnapshot(documents=kept, source=snapshot.source, skipped=snapshot.skipped + tuple(reasons),
                          notes=snapshot.notes)


def _load(kind: SourceKind, path: str | None, lenient: bool, follow_outside_links: bool = False,
          max_document_chars: int = DEFAULT_MAX_DOCUMENT_CHARS) -> CorpusSnapshot:
    if kind not in ("demo", "folder", "jsonl", "beir"):
        raise CorpusError(f"unknown corpus source {kind!r}; valid: demo, folder, jsonl, beir")
    if kind == "demo":
        return _snapshot(_read_jsonl_records(DEMO_DATA_DIR / "corpus.jsonl", _our_record), "demo", lenient)
    if not path:
        raise CorpusError(f"corpus source {kind!r} needs a path")
    p = Path(path)
    if not p.exists():
        raise CorpusError(f"{p}: corpus path does not exist")
    if kind == "folder":
        return _snapshot(_read_folder(p, follow_outside_links, max_document_chars), f"folder:{p}", lenient)
    if kind == "jsonl":
        return _snapshot(_read_jsonl_records(p, _our_record), f"jsonl:{p}", lenient)
    if kind == "beir":
        corpus_file = p
        if p.is_dir():
            candidates = [p / "corpus.jsonl", p / "corpus.jsonl.gz"]
            found = [c for c in candidates if c.exists()]
            if not found:
                raise CorpusError(f"{p}: no corpus.jsonl or corpus.jsonl.gz in this BEIR folder")
            corpus_file = found[0]
        return _snapshot(_read_jsonl_records(corpus_file, _beir_record), f"beir:{corpus_file}", lenient)
    raise CorpusError(f"unknown corpus source {kind!r}; valid: demo, folder, jsonl, beir")


# --- internals -------------------------------------------------------------------------

# Each reader yields either a Document or a CorpusError for one record, so that
# strict and lenient modes share one code path.
_Item = Document | CorpusError


def _snapshot(items: Iterator[_Item], source: str, lenient: bool) -> CorpusSnapshot:
    docs: list[Document] = []
    skipped: list[SkippedRecord] = []
    notes: list[SkippedRecord] = []
    seen: dict[str, str] = {}
    for item in items:
        if isinstance(item, Document):
            loc = item.metadata.get("_location", "?")
            if item.doc_id in seen:
                item = CorpusError(f"{loc}: duplicate doc_id {item.doc_id!r} (first seen at {seen[item.doc_id]})")
            else:
                seen[item.doc_id] = loc
                meta = {k: v for k, v in item.metadata.items() if k != "_location"}
                docs.append(Document(item.doc_id, item.title, item.description, item.filename, item.content, meta))
                counts: dict[str, int] = {}
                for text in (item.title, item.description, item.content):
                    for name, k in invisible_characters(text).items():
                        counts[name] = counts.get(name, 0) + k
                counts = dict(sorted(counts.items()))
                if counts:
                    notes.append(SkippedRecord(location=loc, reason=invisible_note(counts)))
                    if len(notes) <= _LOGGED_NOTES:
                        _logger.warning("%s: %s", loc, notes[-1].reason)
                continue
        if not lenient:
            raise item
        location, _, reason = str(item).partition(": ")
        skipped.append(SkippedRecord(location=location, reason=reason))
    if len(notes) > _LOGGED_NOTES:
        _logger.warning("%s: %d more documents hold invisible characters (CorpusSnapshot.notes lists every one)",
                        source, len(notes) - _LOGGED_NOTES)
    if not docs:
        raise CorpusError(f"{source}: the corpus has no usable documents"
                          + (f" ({len(skipped)} skipped)" if skipped else ""))
    return CorpusSnapshot(documents=tuple(docs), source=source, skipped=tuple(skipped), notes=tuple(notes))


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
