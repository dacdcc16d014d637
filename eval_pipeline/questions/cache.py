"""A crash-safe cache of generated questions, and the cached entry point `generate_question_set`.

Each finished unit is one record keyed on (unit content hash, model, prompt version, k,
masking); abstention batches are keyed on (title sample, model, prompt version, batch, size).
A re-run asks the model only about new or changed units and drops records of units that no
longer exist.

On disk the cache is an append-only JSONL journal.  A record is appended with a single
``os.write`` of the whole line (O_APPEND) followed by ``fsync`` as soon as its unit is done, so
a SIGKILL mid-run loses at most the units in flight.  On load, a torn last line (partial JSON
from a killed writer) and any other unreadable line are ignored and counted, never fatal, and
the file is rewritten clean before anything is appended to it.  Compaction writes a fresh file
atomically (temp file + ``os.replace``).  An exclusive ``fcntl.flock`` on a side file
``<cache>.lock``, held for the whole run, keeps two processes from writing one cache together.
The holder writes its pid, host and start time into that file, so a run that has to wait can
say who it waits for (every `lock_log_every` seconds), and its timeout error says what to do.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import logging
import math
import os
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from eval_pipeline.common.atomic import atomic_write_text, fsync_dir
from eval_pipeline.questions.generation import (
    DEFAULT_FRAC,
    DEFAULT_MIN_CHARS,
    Ask,
    GenerationResult,
    MapFn,
    UnitStoreError,
    generate_questions,
    theme_signature,
    validate_params,
)
from eval_pipeline.questions.sets import write_question_set

CACHE_RECORD_VERSION = 1
DEFAULT_LOCK_TIMEOUT = 60.0
DEFAULT_LOCK_LOG_EVERY = 30.0
_logger = logging.getLogger("eval_pipeline.questions.cache")


class QuestionCacheError(UnitStoreError):
    """The cache cannot be used (locked by another process, unwritable, ...)."""


class CacheLockedError(QuestionCacheError):
    """Another process holds the cache lock."""


class QuestionCache:
    """The journal of finished units.  Use as a context manager: it takes the lock and loads."""

    def __init__(self, path: str | Path, *, lock_timeout: float | None = DEFAULT_LOCK_TIMEOUT,
                 lock_log_every: float = DEFAULT_LOCK_LOG_EVERY, log: Callable[[str], Any] | None = None):
        """`lock_timeout`: seconds to wait for another process's lock (None: no limit, still
        logged); `log` (default: the `eval_pipeline.questions.cache` logger) hears every
        `lock_log_every` seconds who holds it."""
        self.path = Path(path)
        self.lock_path = self.path.with_name(self.path.name + ".lock")
        self.lock_timeout = None if lock_timeout is None else _seconds(lock_timeout, "lock_timeout", zero_ok=True)
        self.lock_log_every = _seconds(lock_log_every, "lock_log_every")
        self.log = log or _logger.warning
        self._records: dict[str, dict[str, Any]] = {}
        self._lines_on_disk = 0
        self._fd: int | None = None
        self._lock_fd: int | None = None
        self._mutex = threading.Lock()
        self.stats = {"loaded": 0, "torn_lines": 0, "corrupt_lines": 0, "appended": 0, "compactions": 0, "pruned": 0}

    # --- lifecycle ---

    def __enter__(self) -> QuestionCache:
        self.open()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def open(self) -> QuestionCache:
        if self._lock_fd is not None:
            return self
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._acquire_lock()
        try:
            needs_rewrite = self._load()
            if needs_rewrite:
                self._rewrite(list(self._records.values()))
            self._open_journal()
        except BaseException:
            self.close()
            raise
        return self

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        if self._lock_fd is not None:
            try:
                try:
                    os.ftruncate(self._lock_fd, 0)  # no stale holder info for the next reader
                except OSError:
                    pass
                fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
            finally:
                os.close(self._lock_fd)
                self._lock_fd = None

    # --- records ---

    def get(self, key: str) -> dict[str, Any] | None:
        with self._mutex:
            return self._records.get(key)

    def records(self) -> list[dict[str, Any]]:
        with self._mutex:
            return list(self._records.values())

    def put(self, record: Mapping[str, Any]) -> None:
        """Append one record durably: the whole line (one os.write unless the disk fills
        mid-record: the rest is written until the system says why it cannot, ENOSPC), then fsync;
        a record not written whole is truncated away."""
        key = record.get("key")
        if not isinstance(key, str) or not key:
            raise ValueError("a cache record needs a non-empty string 'key'")
        rec = {**record, "v": CACHE_RECORD_VERSION}
        data = (json.dumps(rec, ensure_ascii=False, sort_keys=True) + "\n").encode("utf-8")
        with self._mutex:
            if self._fd is None:
                raise QuestionCacheError(f"{self.path}: cache is not open")
            end = os.lseek(self._fd, 0, os.SEEK_END)
            try:
                written = os.write(self._fd, data)
                while written < len(data):  # a disk filling up writes what fits: the rest says why
                    more = os.write(self._fd, data[written:])
                    if more == 0:
                        raise QuestionCacheError(f"{self.path}: short write ({written} of {len(data)} bytes): "
                                                 "the file system accepts no more")
                    written += more
                os.fsync(self._fd)
            except (OSError, QuestionCacheError) as exc:
                with contextlib.suppress(OSError):  # the file ends with whole records, as before
                    os.ftruncate(self._fd, end)
                if isinstance(exc, QuestionCacheError):
                    raise
                raise QuestionCacheError(f"{self.path}: writing a record failed: {exc.strerror or exc}") from exc
            self._records[key] = rec
            self._lines_on_disk += 1
            self.stats["appended"] += 1

    def compact(self, keep: Callable[[Mapping[str, Any]], bool] | None = None, *, force: bool = False) -> bool:
        """Rewrite the file atomically with the latest record per key (those `keep` accepts).
        Skipped when the file already holds exactly those records, unless `force`."""
        with self._mutex:
            kept = [r for r in self._records.values() if keep is None or keep(r)]
            pruned = len(self._records) - len(kept)
            if not force and not pruned and self._lines_on_disk == len(kept):
                return False
            self.stats["pruned"] += pruned
            self._records = {r["key"]: r for r in kept}
            self._rewrite(kept)
            self._open_journal()
            return True

    # --- internals ---

    def _acquire_lock(self) -> None:
        """Take the flock, polling (never blocking in flock, which could neither report nor give
        up): every `lock_log_every` seconds log who holds it, after `lock_timeout` raise
        CacheLockedError naming the holder; once taken, record ourselves as the holder."""
        fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        started = time.monotonic()
        next_log = started + self.lock_log_every
        try:
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except OSError as exc:
                    if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                        raise
                now = time.monotonic()
                waited = now - started
                if self.lock_timeout is not None and waited >= self.lock_timeout:
                    raise CacheLockedError(
                        f"{self.path}: another process is generating into this cache: lock {self.lock_path} "
                        f"held by {self._describe_holder()}; gave up after {waited:.1f} s "
                        f"(lock_timeout={self.lock_timeout:g} s). Wait for it to finish and re-run (its "
                        "questions are cached and reused), or stop that process (the lock is released when "
                        "it exits), or pass a larger lock_timeout"
                    ) from None
                if now >= next_log:
                    limit = "no limit" if self.lock_timeout is None else f"giving up after {self.lock_timeout:g} s"
                    self.log(f"{self.path}: waiting {waited:.0f} s so far ({limit}) for the cache lock "
                             f"{self.lock_path}, held by {self._describe_holder()}")
                    next_log = now + self.lock_log_every
                time.sleep(0.05 if self.lock_timeout is not None and self.lock_timeout < 5 else 0.5)
            self._record_holder(fd)
        except BaseException:
            os.close(fd)
            raise
        self._lock_fd = fd

    @staticmethod
    def _record_holder(fd: int) -> None:
        """Write pid, host, start time and command into the lock file (best effort: the lock, not
        this text, is what excludes other writers)."""
        info = {"pid": os.getpid(), "host": socket.gethostname(),
                "since": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                "command": " ".join(sys.argv)[:200]}
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, json.dumps(info).encode(), 0)
        except OSError:
            pass

    def _describe_holder(self) -> str:
        try:
            info = json.loads(self.lock_path.read_text(encoding="utf-8") or "null")
        except (OSError, ValueError):
            info = None
        if not isinstance(info, dict) or "pid" not in info:
            return "an unknown process (it recorded no holder information)"
        text = f"pid {info['pid']} on host {info.get('host', '?')} since {info.get('since', '?')}"
        if info.get("host") == socket.gethostname() and isinstance(info["pid"], int):
            try:
                os.kill(info["pid"], 0)
            except ProcessLookupError:
                text += " (no such process here any more: the file's holder record is stale)"
            except PermissionError:
                pass
        if info.get("command"):
            text += f", command {info['command']!r}"
        return text

    def _load(self) -> bool:
        """Read the journal; returns True when the file needs rewriting (bad or torn lines)."""
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return False
        lines = data.split(b"\n")
        tail = lines.pop()  # the bytes after the last newline: empty unless the last line is torn
        needs_rewrite = False
        for raw in lines:
            if not raw.strip():
                needs_rewrite = True
                continue
            if not self._accept(raw):
                self.stats["corrupt_lines"] += 1
                needs_rewrite = True
        if tail.strip():
            needs_rewrite = True
            if not self._accept(tail):  # a complete record that only lost its newline is kept
                self.stats["torn_lines"] += 1
        self._lines_on_disk = len(lines) + (1 if tail else 0)
        self.stats["loaded"] = len(self._records)
        return needs_rewrite

    def _accept(self, raw: bytes) -> bool:
        try:
            rec = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError):
            return False
        if not isinstance(rec, dict) or rec.get("v") != CACHE_RECORD_VERSION or not isinstance(rec.get("key"), str):
            return False
        self._records[rec["key"]] = rec  # a later record for the same key wins
        return True

    def _rewrite(self, records: Iterable[Mapping[str, Any]]) -> None:
        records = list(records)
        text = "".join(json.dumps(r, ensure_ascii=False, sort_keys=True) + "\n" for r in records)
        atomic_write_text(self.path, text)
        fsync_dir(self.path.parent)
        self._lines_on_disk = len(records)
        self.stats["compactions"] += 1

    def _open_journal(self) -> None:
        # (Re)open after every rewrite: os.replace gave the path a new inode.
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        created = not self.path.exists()
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        if created:
            fsync_dir(self.path.parent)


def _seconds(value: Any, name: str, *, zero_ok: bool = False) -> float:
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a number of seconds, got {value!r}") from None
    if isinstance(value, bool) or not math.isfinite(seconds) or seconds < 0 or (seconds == 0 and not zero_ok):
        raise ValueError(f"{name} must be a number of seconds {'>= 0' if zero_ok else '> 0'}, got {value!r}")
    return seconds


def generate_question_set(
    units: Iterable[Any],
    *,
    ask: Ask,
    cache_path: str | Path,
    model: str,
    k: int | None = None,
    frac: float = DEFAULT_FRAC,
    masking: bool = True,
    min_chars: int = DEFAULT_MIN_CHARS,
    max_units: int | None = None,
    map_fn: MapFn | None = None,
    corpus_signature: str,
    theme_titles: Iterable[str] | None = None,
    lock_timeout: float | None = DEFAULT_LOCK_TIMEOUT,
    lock_log_every: float = DEFAULT_LOCK_LOG_EVERY,
    log: Callable[[str], Any] | None = None,
) -> GenerationResult:
    """Generate (or reuse) the question set for `units` through the cache at `cache_path`.

    Cached units cost no call; every finished unit is journaled at once; failed units are not
    cached, so the next run retries them (see `GenerationResult.failed_units`).  At the end the
    cache is compacted to the records of units that still exist.  All parameters are validated
    before the cache is opened or the model is called.  `k=None` means 5 per document, 1 per
    chunk; `theme_titles=None` (or empty) means the units' titles.  Waiting for another
    process's cache lock is logged through `log` every `lock_log_every` seconds and bounded by
    `lock_timeout`.
    """
    if not isinstance(model, str) or not model.strip():
        raise ValueError("model must be a non-empty string (it is part of the cache key)")
    if not isinstance(corpus_signature, str) or not corpus_signature.strip():
        raise ValueError("corpus_signature must be a non-empty string")
    if not isinstance(cache_path, (str, os.PathLike)) or not str(cache_path):
        raise ValueError("cache_path must be a path")
    p = validate_params(
        units, ask=ask, k=k, frac=frac, masking=masking, min_chars=min_chars, max_units=max_units,
        map_fn=map_fn, model=model, theme_titles=theme_titles,
    )
    with QuestionCache(cache_path, lock_timeout=lock_timeout, lock_log_every=lock_log_every, log=log) as cache:
        result = generate_questions(
            p.units, ask=ask, model=p.model, k=p.k, frac=p.frac, masking=p.masking, min_chars=p.min_chars,
            max_units=p.max_units, map_fn=map_fn, theme_titles=p.theme_titles, store=cache,
        )
        live_units = {(u.unit_id, u.content_hash) for u in p.units}
        live_theme = theme_signature(p.theme_titles)

        def keep(record: Mapping[str, Any]) -> bool:
            if record.get("type") == "unit":
                return (record.get("unit_id"), record.get("content_hash")) in live_units
            if record.get("type") == "abstention":
                return record.get("theme_hash") == live_theme
            return False

        cache.compact(keep)
        result.cache = dict(cache.stats)
    if cache.stats["torn_lines"] or cache.stats["corrupt_lines"]:
        result.warnings.append(
            f"{cache_path}: ignored {cache.stats['torn_lines']} torn and {cache.stats['corrupt_lines']} "
            "unreadable cache line(s); those units were regenerated"
        )
    result.corpus_signature = corpus_signature
    return result


def write_generated_question_set(
    path: str | Path,
    result: GenerationResult,
    *,
    corpus_signature: str | None = None,
    allow_partial: bool = False,
) -> str:
    """Write the generated set with `eval_pipeline.questions.sets.write_question_set` (atomic), its
    header carrying generator model, prompt version, k, frac and masking on/off beside the
    corpus signature and fingerprint.  Returns the fingerprint.

    A result with failed units or abstention batches is refused unless `allow_partial`: a set
    missing some documents' questions would silently skew the scores."""
    signature = corpus_signature or result.corpus_signature
    if not signature:
        raise ValueError("corpus_signature is required (the result does not carry one)")
    if not result.complete and not allow_partial:
        raise QuestionCacheError(
            f"generation incomplete: {len(result.failed_units)} failed unit(s) "
            f"{result.failed_units[:10]}, {result.abstention_failed_batches} failed abstention batch(es); "
            "re-run to retry them, or pass allow_partial=True"
        )
    if not result.questions:
        raise QuestionCacheError("no questions were generated; nothing to write")
    header = {**result.header(), "units": result.units, "units_skipped": result.units_skipped}
    return write_question_set(path, result.questions, corpus_signature=signature, extra_header=header)
