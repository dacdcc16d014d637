"""The content identity of model weights: a hash of the files' bytes.

A model named by a path can change without its path changing (new weights copied over the
old ones, a symlink re-pointed, a fine-tune saved in place). Every cache key and table name
that depends on a model is therefore built from what the files contain, never from where
they are. Hashing a 90 MB model takes a fraction of a second, but it is still done once per
file version: each file's digest is cached under its (size, mtime, ctime, inode), in memory
and, when a cache file is given or `EVAL_PIPELINE_STATE_DIR` is set, on disk. The ctime and
inode make the cache safe even against a copy that keeps the old size and mtime (`cp -p`):
neither can be set by a user, and both change when a file is rewritten or replaced.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from collections.abc import Callable
from pathlib import Path

_LOCK = threading.Lock()
_MEMORY: dict[str, tuple[list[int], str]] = {}  # file path -> (stat signature, sha256)


def _signature(stat: os.stat_result) -> list[int]:
    return [stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns, stat.st_ino, stat.st_dev]


def _default_cache() -> Path | None:
    """The state dir's digest file when a state dir is configured; else memory only (a
    library user's process should not write into a checkout it merely imports from)."""
    from eval_pipeline.common.state import STATE_DIR_ENV, StateDir

    return StateDir(Path(os.environ[STATE_DIR_ENV])).content_digests if os.environ.get(STATE_DIR_ENV) else None


def _load(cache: Path | None) -> dict[str, list]:
    if cache is None or not cache.exists():
        return {}
    try:
        data = json.loads(cache.read_text(encoding="utf-8"))
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}  # a damaged cache only costs a re-hash


def _file_digest(path: Path, stored: Callable[[], dict[str, list]]) -> tuple[str, bool]:
    """(sha256 of the file, whether it was computed now). `stored()` gives the on-disk cache,
    read only when this process has not verified the file's signature yet."""
    stat = path.stat()
    signature = _signature(stat)
    key = str(path)
    hit = _MEMORY.get(key)
    if hit and hit[0] == signature:
        return hit[1], False
    entry = stored().get(key)
    if isinstance(entry, list) and len(entry) == 2 and entry[0] == signature:
        _MEMORY[key] = (signature, entry[1])
        return entry[1], False
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    _MEMORY[key] = (signature, digest.hexdigest())
    return digest.hexdigest(), True


def content_digest(path: str | Path, *, cache_file: str | Path | None = None) -> str:
    """A sha256 over the relative names and byte hashes of every file under `path` (a folder
    or one file), symlinks followed. 64 hex characters.

    Hidden files and folders (`.git`, `.cache`) are left out: they hold no weights, and a
    hub download's lock files change without the model changing. A missing path is a
    ValueError naming it."""
    root = Path(path).expanduser()
    if not root.exists():
        raise ValueError(f"model path {str(root)!r} does not exist: cannot identify its weights")
    root = root.resolve()
    cache = Path(cache_file) if cache_file is not None else _default_cache()
    if root.is_file():
        files = [root]
    else:
        files = sorted(p for p in root.rglob("*")
                       if p.is_file() and not any(part.startswith(".") for part in p.relative_to(root).parts))
    if not files:
        raise ValueError(f"model path {str(root)!r} holds no files: cannot identify its weights")
    loaded: list[dict[str, list]] = []

    def stored() -> dict[str, list]:  # the identity is read often: the disk cache only on a miss
        if not loaded:
            loaded.append(_load(cache))
        return loaded[0]

    with _LOCK:
        total = hashlib.sha256()
        computed = False
        for f in files:
            digest, fresh = _file_digest(f.resolve(), stored)
            computed |= fresh
            name = f.name if f == root else str(f.relative_to(root))
            total.update(f"{name}\0{digest}\n".encode())
        if computed and cache is not None:
            _save(cache, stored())
    return total.hexdigest()


def _save(cache: Path, stored: dict[str, list]) -> None:
    from eval_pipeline.common.atomic import atomic_write_text

    stored = dict(stored)
    stored.update({path: [sig, digest] for path, (sig, digest) in _MEMORY.items()})
    try:
        atomic_write_text(cache, json.dumps(stored, sort_keys=True))
    except OSError:
        pass  # a read-only state dir costs a re-hash next time, never a wrong identity


def model_folder(model: str) -> Path:
    """The folder a sentence-transformers model name or path loads from, offline: the path
    itself, or the local Hugging Face cache snapshot of a hub name. A ValueError names a
    model found in neither place (it could not be loaded offline either)."""
    folder = Path(model).expanduser()
    if folder.exists():
        return folder
    try:
        from huggingface_hub import snapshot_download

        return Path(snapshot_download(model, local_files_only=True))
    except Exception as exc:  # noqa: BLE001 - any failure means: not available offline
        raise ValueError(f"model {model!r} is neither a local path nor in the local Hugging Face cache "
                         f"({type(exc).__name__}); its weights cannot be identified or loaded offline") from None
