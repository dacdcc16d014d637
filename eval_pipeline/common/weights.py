"""The content identity of model weights: a hash of the files' bytes.

Its per-file-version digest cache (`files_sha256`) also serves the other identities built from
files: installed packages' code (`versions.package_code_digest`) and the project's own syntax
trees (`versions.source_digest`, cached under its own kind).

A model named by a path can change without its path changing (new weights copied over the
old ones, a symlink re-pointed, a fine-tune saved in place). Every cache key and table name
that depends on a model is therefore built from what the files contain, never from where
they are. Hashing a 90 MB model takes a fraction of a second, but it is still done once per
file version: each file's digest is cached under its absolute path and (size, mtime, ctime,
inode, device), in memory and on disk in one file per machine (`machine_cache`). The ctime and
inode make the cache safe even against a copy that keeps the old size and mtime (`cp -p`):
neither can be set by a user, and both change when a file is rewritten or replaced. A file whose
last change is younger than `RACY_WINDOW_NS` is hashed but not cached (`_settled`): on a coarse
clock a rewrite within the same tick would keep its signature. Keyed so,
an entry holds whichever state dir or project asks, so the cache is the machine's, not a state
dir's: a new state dir does not hash the model and parse the project again.

Symlinks are followed, to files and to folders alike (a hub snapshot is a folder of links
into its blob store; a model may link a sub-folder to a shared tokenizer): the identity is of
the bytes that load, so re-pointing a link at other bytes is another identity. A file's
digest is cached under the file the bytes were read from (the link's target), with that
file's signature as the open file gave it. A link that leads back into its own folder is a
ValueError naming it.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import stat as stat_mode
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TypeGuard

try:
    import fcntl
except ImportError:  # not on Windows: saves are then not serialized
    fcntl = None  # type: ignore[assignment]

from eval_pipeline.common.atomic import atomic_write_text

_LOCK = threading.Lock()
_MEMORY: dict[str, tuple[list[int], str]] = {}  # file path -> (stat signature, sha256)
_READ_ATTEMPTS = 3  # a file changing under every read of it is an error, not an identity
# A save prunes (`_can_match`: a stat per entry) once the entries have grown this many times over
# the count kept by the last prune, which is written beside the cache (`_prune_due`).
PRUNE_GROWTH = 2
# A file changed this recently can change again within its timestamps' tick without its signature
# changing (coarse clocks: FAT 2 s, ext4 with 128-byte inodes 1 s, kernels before 6.13 one jiffy
# for ctime): its digest is used but not cached until its last change is this much older than the
# read began ("racy" entries in git's sense, which git re-checks by content).
RACY_WINDOW_NS = 3 * 10**9


def stat_signature(stat: os.stat_result) -> list[int]:
    """A file version as the digest caches key it: size, modification and change times, inode, device."""
    return [stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns, stat.st_ino, stat.st_dev]


def _settled(signature: list[int], read_began_ns: int) -> bool:
    """Whether a file's version, read from `read_began_ns` on, can be cached under its signature:
    its last change (mtime or ctime) at least `RACY_WINDOW_NS` before the read began, so any write
    since, even on the coarsest clock, stamps a later time. A time ahead of this clock (another
    machine's file server) is never settled: hashed each time, never a stale digest."""
    return read_began_ns - max(signature[1], signature[2]) >= RACY_WINDOW_NS


def machine_cache() -> Path | None:
    """Where file digests are kept between processes: the user's cache folder (``$XDG_CACHE_HOME``
    or ``~/.cache``, then ``eval-pipeline/file-digests.json``), shared by every state dir and
    project on this machine, since its keys are files' absolute paths and versions; None (memory
    only) when there is no home."""
    home = os.path.expanduser("~")
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    # a relative XDG_CACHE_HOME is ignored, as the XDG spec says: it would put the cache in
    # whatever folder a job runs from (a state dir, the checkout), one per working folder
    root = xdg if os.path.isabs(xdg) else (os.path.join(home, ".cache") if home != "~" else "")
    return Path(root) / "eval-pipeline" / "file-digests.json" if root else None


# The digest cache file as last parsed in this process, with its stat signature: a job's
# identities meet files new to the process many times per run, and parsing the whole file each
# time cost 0.8 s of a warm demo run. Read again whenever another process has rewritten it. Its
# entries are only ever a lookup checked against each file's own signature.
_PARSED: dict[Path, tuple[list[int], dict[str, list]]] = {}


def _load(cache: Path | None) -> dict[str, list]:
    """The cache file's entries (read-only: `_save` writes a merged copy); {} when there is none
    or it is damaged (a damaged cache only costs a re-hash)."""
    if cache is None:
        return {}
    try:
        with open(cache, "rb") as fh:
            signature = stat_signature(os.fstat(fh.fileno()))
            parsed = _PARSED.get(cache)
            if parsed is not None and parsed[0] == signature:
                return parsed[1]
            data = json.loads(fh.read().decode("utf-8"))
    except (OSError, ValueError, RecursionError):  # RecursionError: a deeply nested (damaged) file
        return {}
    data = data if isinstance(data, dict) else {}
    _PARSED[cache] = (signature, data)
    return data


def _well_formed(entry: object) -> TypeGuard[list]:
    """An entry as `_save` writes it: [signature, digest], the digest a non-empty string. Anything
    else in the file (damaged, or written by hand) is a miss and costs a re-hash; served, a null
    or a number would become part of an identity."""
    return isinstance(entry, list) and len(entry) == 2 and isinstance(entry[1], str) and bool(entry[1])


def _cache_key(kind: str, path: Path | str) -> str:
    """A cache entry's key: the absolute path, or `kind:` and the absolute path for a kind's digest
    (`_key_path` reads it back). Unambiguous because every path in a key is absolute: a plain
    key starts with the root, a kind's with its name (`files_sha256` refuses a relative path)."""
    return f"{kind}:{path}" if kind else str(path)


def _key_path(key: str) -> str:
    """The file a `_cache_key` names."""
    return key if os.path.isabs(key) else key.partition(":")[2]


def _file_digest(path: Path | str, stored: Callable[[], dict[str, list]], compute: Callable[[bytes], str] | None = None,
                 kind: str = "") -> tuple[str, bool]:
    """(sha256 of the file, or `compute` of its bytes under the cache key's `kind`; whether it
    was computed now). `stored()` gives the on-disk cache, read only when this process has not
    verified the file's signature yet."""
    stat = os.stat(path)
    signature = stat_signature(stat)
    key = _cache_key(kind, path)
    hit = _MEMORY.get(key)
    if hit and hit[0] == signature:
        return hit[1], False
    entry = stored().get(key)
    if _well_formed(entry) and entry[0] == signature:
        _MEMORY[key] = (signature, entry[1])
        return entry[1], False
    for _ in range(_READ_ATTEMPTS):
        # the signature cached is the open file's, before and after the read: the one the bytes
        # came from, even if the path was replaced between the stat above and the open
        began = time.time_ns()
        with open(path, "rb") as fh:
            before = stat_signature(os.fstat(fh.fileno()))
            if compute is None:
                digest = hashlib.sha256()
                for block in iter(lambda: fh.read(1 << 20), b""):
                    digest.update(block)
                value = digest.hexdigest()
            else:
                value = compute(fh.read())
            after = stat_signature(os.fstat(fh.fileno()))
        if before == after:
            if not _settled(before, began):  # used, not cached: a rewrite in this tick would keep the signature
                return value, False
            _MEMORY[key] = (before, value)
            return value, True
    raise ValueError(f"model file {key!r} changed while it was hashed ({_READ_ATTEMPTS} times): "
                     "cannot identify its weights")


def _loop(root: Path, path: Path, detail: str) -> ValueError:
    return ValueError(f"model path {str(root)!r}: symlink loop at {str(path.relative_to(root))!r} "
                      f"({str(path)!r}; {detail}): cannot identify its weights")


# What a model folder may hold that is never loaded as the model: version control, a hub
# download's cache and lock files. Any other hidden name counts: sentence-transformers loads
# every module its modules.json names, `.1_Pooling` included.
_NOT_WEIGHTS = frozenset({".git", ".gitattributes", ".gitignore", ".cache", ".locks", ".huggingface", ".DS_Store"})


def _holds_no_weights(name: str) -> bool:
    return name in _NOT_WEIGHTS or name.endswith(".lock")


def _model_files(root: Path) -> list[Path]:
    """Every file under the folder `root` whose path has no part that holds no weights
    (`_NOT_WEIGHTS`: version control, a hub's cache and locks), as paths through
    `root` (links kept in them), sorted. Links to files and to folders are followed; a folder
    reached again inside itself, or a link the system cannot resolve for its links (ELOOP), is
    a ValueError naming it. A dangling link holds no bytes and is left out, as before links
    to folders were followed. Walked with a stack: no recursion limit on a deep tree."""
    top = os.stat(root)
    files: list[Path] = []
    stack: list[tuple[Path, frozenset[tuple[int, int]]]] = [(root, frozenset({(top.st_dev, top.st_ino)}))]
    while stack:
        folder, ancestors = stack.pop()
        try:
            with os.scandir(folder) as it:
                names = sorted(entry.name for entry in it if not _holds_no_weights(entry.name))
        except OSError as exc:
            raise ValueError(f"model path {str(root)!r}: cannot list {str(folder)!r} "
                             f"({type(exc).__name__}: {exc.strerror}): cannot identify its weights") from None
        for name in names:
            path = folder / name
            try:
                st = os.stat(path)  # through any links
            except OSError as exc:
                if exc.errno == errno.ELOOP:
                    raise _loop(root, path, "its links never reach a file or folder") from None
                if exc.errno in (errno.ENOENT, errno.ENOTDIR) and os.path.islink(path):
                    continue  # dangling link
                raise ValueError(f"model path {str(root)!r}: cannot read {str(path)!r} "
                                 f"({type(exc).__name__}: {exc.strerror}): cannot identify its weights") from None
            if stat_mode.S_ISDIR(st.st_mode):
                ident = (st.st_dev, st.st_ino)
                if ident in ancestors:
                    raise _loop(root, path, f"it leads back to {os.path.realpath(path)!r}, a folder it is in")
                stack.append((path, ancestors | {ident}))
            elif stat_mode.S_ISREG(st.st_mode):
                files.append(path)
    return sorted(files)


def content_digest(path: str | Path, *, cache_file: str | Path | None = None) -> str:
    """A sha256 over the relative names and byte hashes of every file under `path` (a folder
    or one file), symlinks to files and folders followed (a loop is a ValueError naming it).
    64 hex characters.

    Version control, a hub's cache folders and lock files (`_NOT_WEIGHTS`) are left out: they
    hold no weights, and a download's lock files change without the model changing; any other
    hidden file or folder counts (a module folder such as `.1_Pooling` is loaded). A missing
    path is a ValueError naming it."""
    root = Path(path).expanduser()
    try:
        os.stat(root)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise ValueError(f"model path {str(root)!r} is a symlink loop: cannot identify its weights") from None
        if exc.errno in (errno.ENOENT, errno.ENOTDIR):
            raise ValueError(f"model path {str(root)!r} does not exist: cannot identify its weights") from None
        raise ValueError(f"model path {str(root)!r} cannot be read ({type(exc).__name__}: {exc.strerror}): "
                         "cannot identify its weights") from None
    root = root.resolve()
    if root.is_file():
        files = [root]
    elif root.is_dir():
        files = _model_files(root)
    else:
        files = []
    if not files:
        raise ValueError(f"model path {str(root)!r} holds no files: cannot identify its weights")
    total = hashlib.sha256()
    for f, digest in zip(files, files_sha256(files, cache_file=cache_file)):
        name = f.name if f == root else str(f.relative_to(root))
        total.update(f"{name}\0{digest}\n".encode())
    return total.hexdigest()


def files_sha256(paths: Iterable[str | Path], *, cache_file: str | Path | None = None,
                 compute: Callable[[bytes], str] | None = None, kind: str = "", resolve: bool = True) -> list[str]:
    """The sha256 (hex) of each file's bytes, in order, through the same per-version cache as
    the weights (memory, and the machine's digest file, `machine_cache`, written once for the
    batch): an installed package's code file (`versions.package_code_digest`) is hashed
    once per version of the file, not once per process. With `compute` (bytes -> digest) and a
    `kind` naming it in the cache, that digest instead (`versions.source_digest`: a Python
    file's syntax tree). `resolve=False` for paths already absolute and normalized, whose
    links need not be followed to name them (thousands of installed files: resolving each
    costs more than reading the cache); a relative one is a ValueError naming it, since its key
    would be the path as given, which can read as another kind's key (`_cache_key`)."""
    cache = Path(cache_file) if cache_file is not None else machine_cache()
    loaded: list[dict[str, list]] = []

    def stored() -> dict[str, list]:  # identities are read often: the disk cache only on a miss
        if not loaded:
            loaded.append(_load(cache))
        return loaded[0]

    digests = []
    with _LOCK:
        any_computed = False
        for path in paths:
            if not resolve and not os.path.isabs(path):
                raise ValueError(f"files_sha256(resolve=False) takes absolute paths, got {os.fspath(path)!r}")
            digest, computed = _file_digest(Path(path).resolve() if resolve else path, stored, compute, kind)
            digests.append(digest)
            any_computed |= computed
        if any_computed and cache is not None:
            _save(cache)
    return digests


@contextmanager
def _locked(cache: Path) -> Iterator[None]:
    """An exclusive lock on a file beside `cache`, held by one saving process at a time (where
    the platform has `fcntl`; readers never lock: a save replaces the file atomically)."""
    if fcntl is None:
        yield
        return
    with open(cache.with_name(cache.name + ".lock"), "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _save(cache: Path) -> None:
    """Every digest this process holds merged into the cache file as it is now, under `_locked`:
    other processes save into the same file (the machine's one is shared by every job and test
    run), and writing back the copy read before hashing lost whatever they saved meanwhile, so
    each of them hashed those files again on its next run. When `_prune_due`, only entries
    that can still match are written (`_can_match`). The merged copy is this process's parsed
    one (`_PARSED`): its own save is not parsed again."""
    try:
        cache.parent.mkdir(parents=True, exist_ok=True)
        with _locked(cache):
            merged = dict(_load(cache))
            merged.update({path: [sig, digest] for path, (sig, digest) in _MEMORY.items()})
            if _prune_due(cache, len(merged)):
                merged = {key: entry for key, entry in merged.items() if _can_match(key, entry)}
                atomic_write_text(_pruned_count_file(cache), str(len(merged)))
            atomic_write_text(cache, json.dumps(merged, sort_keys=True))
            _PARSED[cache] = (stat_signature(os.stat(cache)), merged)
    except OSError:
        pass  # a read-only cache folder costs a re-hash next time, never a wrong identity


def _pruned_count_file(cache: Path) -> Path:
    return cache.with_name(cache.name + ".pruned")


def _prune_due(cache: Path, count: int) -> bool:
    """Whether a save of `count` entries prunes: when no prune is recorded beside the cache, or
    the entries have grown `PRUNE_GROWTH` times over the count the last prune kept. The file
    then holds at most about as many dead entries as live ones, and the stats are paid once per
    doubling, not on every save (0.7 s on a 59k-entry machine cache under load)."""
    try:
        kept = int(_pruned_count_file(cache).read_text())
    except (OSError, ValueError):
        return True
    return count >= PRUNE_GROWTH * kept


def _can_match(key: str, entry: object) -> bool:
    """Whether a cache entry's file is still the version it was hashed at. One that is gone or
    was rewritten can never match again (a rewrite changes the ctime, which never goes back),
    so a save leaves it out: otherwise the machine's cache keeps every temporary checkout, venv
    and model copy it has seen (38k of its 68k entries were such, 15 MB parsed by every
    process). A stat per entry, on a save that prunes (`_prune_due`)."""
    try:
        return _well_formed(entry) and entry[0] == stat_signature(os.stat(_key_path(key)))
    except (OSError, ValueError):
        return False


def model_folder(model: str) -> Path:
    """The folder a sentence-transformers model name or path loads from, offline: the path
    itself, or the local Hugging Face cache snapshot of a hub name. A ValueError names a
    model found in neither place (it could not be loaded offline either)."""
    folder = Path(model).expanduser()
    if folder.exists():
        return folder
    try:
        # deferred: snapshot_download takes ~0.4 s to import
        from huggingface_hub import snapshot_download  # noqa: PLC0415

        return Path(snapshot_download(model, local_files_only=True))
    except Exception as exc:  # noqa: BLE001 - any failure means: not available offline
        raise ValueError(f"model {model!r} is neither a local path nor in the local Hugging Face cache "
                         f"({type(exc).__name__}); its weights cannot be identified or loaded offline") from None
