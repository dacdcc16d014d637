"""Atomic file writes: a reader never sees half a file, and a failed write leaves the old one.

The bottom layer of the library: it imports only the standard library, so every other module
(and the Dagster layer) can use it.  Files get ordinary permissions, `0o666 & ~umask`, the
same as `open(path, "w")` would give them (a bare `tempfile.mkstemp` leaves them 0600, which
hides results from the other users of a shared results folder); folders `0o777 & ~umask`.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

__all__ = ["atomic_write_bytes", "atomic_write_text", "atomic_writer", "current_umask", "file_mode", "dir_mode"]


def current_umask() -> int:
    """The process umask, read without changing it.

    `os.umask(x)` followed by a restore is racy when other threads create files in between
    (they would get mode x), so on Linux the value is read from /proc/self/status (`Umask:`,
    kernel 4.7+); elsewhere it falls back to set-and-restore.
    """
    try:
        with open("/proc/self/status", encoding="ascii", errors="replace") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8) & 0o777
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask & 0o777


def file_mode() -> int:
    """The mode a newly created regular file gets: 0o666 & ~umask."""
    return 0o666 & ~current_umask()


def dir_mode() -> int:
    """The mode a newly created folder gets: 0o777 & ~umask."""
    return 0o777 & ~current_umask()


def atomic_write_text(path: str | os.PathLike[str], text: str) -> None:
    """Write via a temp file in the same folder and rename, so readers never see half a file."""
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> None:
    """Write via a uniquely named temp file in the same folder, fsync, then rename: readers never
    see half a file, and two writers of the same path never share a temp file.  The file gets
    `0o666 & ~umask`, like any newly created file."""
    with atomic_writer(path) as fh:
        _write(fh, data)


@contextmanager
def atomic_writer(path: str | os.PathLike[str]) -> Iterator[BinaryIO]:
    """`atomic_write_bytes` for a file written piece by piece (too large to hold): the binary
    handle writes a temp file that replaces `path` only when the block ends without an error."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            if hasattr(os, "fchmod"):
                os.fchmod(fh.fileno(), file_mode())
            else:  # pragma: no cover - Windows before Python 3.13
                os.chmod(tmp, file_mode())
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _write(fh, data: bytes) -> None:
    fh.write(data)


def fsync_dir(path: Path) -> None:
    """Flush a folder's entries (a rename or a new file in it) to disk; a no-op where the
    platform cannot open folders."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
