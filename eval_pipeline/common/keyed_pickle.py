"""A value pickled in a file under the key it was computed for: the state dir's caches whose
entries are a pure function of their key (the run statistics, the question-set audit, the
answer intervals, the scored partitions).

An entry is used only when it holds its own key: a missing, unreadable, truncated or foreign
file, or one written for another key, reads as nothing, and the caller computes the value
again and writes it over the entry (atomically: a reader never sees half a file). A cache is
never the result: an entry that cannot be written (a read-only state dir, a full disk) costs
the next run a recompute, never this run its value."""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

from eval_pipeline.common.atomic import atomic_write_bytes

__all__ = ["read_keyed", "write_keyed"]


def read_keyed(path: Path, key: str) -> Any | None:
    """The value stored at `path` under `key`, or None (see the module docstring)."""
    try:
        stored_key, value = pickle.loads(path.read_bytes())
        return value if isinstance(stored_key, str) and stored_key == key else None
    except Exception:  # missing, unreadable, truncated or foreign: the caller recomputes it
        return None


def write_keyed(path: Path, key: str, value: Any) -> None:
    """Store `value` at `path` under `key`, replacing whatever was there; a file that cannot be
    written is left as it was (see the module docstring)."""
    try:
        atomic_write_bytes(path, pickle.dumps((key, value), protocol=pickle.HIGHEST_PROTOCOL))
    except OSError:
        pass
