"""Publishing a results folder all at once: a failed run never leaves a mixed folder.

A run's files (report, per-question file, plots, TREC runs) are written into a staging folder
beside the results folder and swapped in only when all of them are written:

    with staged_results(results_dir, suffix=suffix) as stage:
        write_report(stage, markdown, per_query, suffix=suffix)
        render_plots(verdict, stage, suffix)
        write_trec_files(stage / f"trec{suffix}", runs, questions)
    # here results_dir holds the new files; on an exception it is exactly as it was

Ownership.  One results folder holds the full run's files (`results.md`, `per_query.jsonl`,
`<plot>.png`, `trec/`) and those of limited quick runs, with a suffix
(`results.limited-50.md`, `per_query.limited-50.jsonl`, `<plot>.limited-50.png`,
`trec.limited-50/`).  A run owns the entries of its suffix (`owned_by`): they are replaced as
a whole, so a plot the new run no longer draws disappears.  Every other entry (other
suffixes' files, anything else a user put there) is carried over unchanged, also when another
run with another suffix published in the meantime (the carried entries are refreshed at the
swap).

The swap is two renames under a lock: the current folder to `.<name>.old-<token>`, the stage
to `<name>`; then the old folder is deleted.  A journal written before the first rename lets
the next call recover from a process that died in between: the previous folder is put back
and the stage deleted (a run that died did not publish).  Staging folders of dead processes
are deleted too; those of live ones (another run writing now) are left alone.

Carried files are hard links where the filesystem allows (no extra space on a full disk),
so the run must replace files (as `eval_pipeline.common.atomic` does), never write into them.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import secrets
import shutil
import stat
from collections.abc import Iterator, Mapping
from pathlib import Path

from eval_pipeline.common.atomic import atomic_write_text, dir_mode, fsync_dir

try:
    import fcntl
except ImportError:  # pragma: no cover - not POSIX: no cross-process locking
    fcntl = None  # type: ignore[assignment]

__all__ = ["PublishError", "UnsafeResultsDir", "check_results_dir", "staged_results", "owned_by", "final_paths",
           "recover"]

_PLOT_NAME = r"[A-Za-z0-9_-]+"  # a plot's base name has no dot, so `x.limited-5.png` is not `x` + ''


class PublishError(RuntimeError):
    """Writing a results folder failed; the message names it and says the previous results stand."""


class UnsafeResultsDir(ValueError):
    """A results folder whose swap would take something else with it (the state dir, the code)."""


def check_results_dir(results_dir: str | os.PathLike[str], protected: Mapping[str, tuple[Path, str]], *,
                      setting: str = "report.results_dir") -> Path:
    """``results_dir`` resolved (relative to the working directory, through symlinks), refused
    when publishing could destroy a ``protected`` folder: ``{what it is: (path, rule)}`` where
    rule ``"inside"`` refuses a results folder that is the folder, holds it or sits inside it
    (the state dir: the embedded Postgres's data, caches, Dagster's storage), and ``"holds"``
    one that is it or holds it (the checkout: ``results/`` inside it is the default). The swap
    renames the whole results folder away: a folder holding the running database's data takes
    it along, and the server never starts again."""
    results = Path(results_dir).expanduser().resolve()
    for what, (path, rule) in protected.items():
        if rule not in ("inside", "holds"):
            raise ValueError(f"rule must be 'inside' or 'holds', got {rule!r}")
        folder = Path(path).expanduser().resolve()
        if results == folder or folder.is_relative_to(results):
            relation = "is" if results == folder else "holds"
        elif rule == "inside" and results.is_relative_to(folder):
            relation = "is inside"
        else:
            continue
        raise UnsafeResultsDir(
            f"{setting} {str(results_dir)!r} ({results}) {relation} {what} {folder}: publishing replaces the whole "
            "results folder, which would destroy it; choose a folder of its own (the default is results/ in the "
            "checkout)")
    return results


def owned_by(name: str, suffix: str = "") -> bool:
    """Whether the results-folder entry `name` belongs to the run with `suffix` ('' for a full run,
    '.limited-50' for a quick run on 50 questions): results<s>.md, per_query<s>.jsonl,
    misses<s>.jsonl (the microscope's), indexes<s>.json, answers<s>.jsonl (the gradings),
    hallucinations<s>.md and .jsonl, <plot><s>.png and the trec<s>/ folder."""
    s = re.escape(suffix)
    return bool(re.fullmatch(rf"results{s}\.md|per_query{s}\.jsonl|misses{s}\.jsonl|indexes{s}\.json|trec{s}|"
                             rf"answers{s}\.jsonl|hallucinations{s}\.(?:md|jsonl)|{_PLOT_NAME}{s}\.png", name))


def final_paths(paths: Mapping[str, str], stage: Path, results_dir: Path) -> dict[str, str]:
    """Paths written inside the stage, as they are once published in results_dir."""
    out = {}
    for key, value in paths.items():
        p = Path(value)
        try:
            out[key] = str(Path(results_dir) / p.relative_to(stage))
        except ValueError:
            out[key] = value
    return out


# --- names beside the results folder ----------------------------------------------------------


def _stage_prefix(results_dir: Path) -> str:
    return f".{results_dir.name}.staging-"


def _old_prefix(results_dir: Path) -> str:
    return f".{results_dir.name}.old-"


def _lock_path(results_dir: Path) -> Path:
    return results_dir.parent / f".{results_dir.name}.publish.lock"


def _journal_path(results_dir: Path) -> Path:
    return results_dir.parent / f".{results_dir.name}.publish.json"


def _stage_lock_path(stage: Path) -> Path:
    return stage.parent / f"{stage.name}.lock"


# Indirection so that tests can simulate a crash between the two renames.
_rename = os.rename


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif os.path.lexists(path):
        path.unlink()


@contextlib.contextmanager
def _flock(path: Path, *, blocking: bool = True) -> Iterator[bool]:
    """An exclusive lock on `path` (created if missing); yields whether it was acquired.

    Lock files may be deleted by whoever holds them (see `_recover_locked`), so after locking
    we check that the file we hold is still the one at `path`, else lock again."""
    if fcntl is None:  # pragma: no cover
        yield True
        return
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
        except OSError as exc:
            os.close(fd)
            if exc.errno in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
                yield False
                return
            raise
        try:
            same = os.path.samestat(os.fstat(fd), os.stat(path))
        except FileNotFoundError:
            same = False
        if same:
            break
        os.close(fd)
    try:
        yield True
    finally:
        os.close(fd)


# --- recovery ---------------------------------------------------------------------------------


def recover(results_dir: str | os.PathLike[str]) -> list[str]:
    """Repair what a process that died while publishing into results_dir left behind; returns
    what was done.  Safe to call at any time (it takes the publish lock)."""
    results_dir = Path(results_dir)
    if not results_dir.parent.is_dir():
        return []
    with _flock(_lock_path(results_dir)):
        return _recover_locked(results_dir)


def _recover_locked(results_dir: Path) -> list[str]:
    done: list[str] = []
    parent = results_dir.parent
    journal = _journal_path(results_dir)
    if journal.exists():
        try:
            entry = json.loads(journal.read_text(encoding="utf-8"))
            stage, old = parent / entry["stage"], parent / entry["old"]
        except (OSError, ValueError, KeyError, TypeError):
            stage = old = None
        if old is not None and not os.path.lexists(results_dir) and os.path.lexists(old):
            _rename(old, results_dir)  # died between the renames: the previous results come back
            done.append(f"restored {results_dir} from {old.name}")
        if stage is not None and os.path.lexists(stage):
            _remove(stage)
            _remove_quietly(_stage_lock_path(stage))
            done.append(f"deleted the unpublished stage {stage.name}")
        journal.unlink(missing_ok=True)
    # No publish is under way (we hold the lock): any old copy is left over.
    for p in sorted(parent.glob(_old_prefix(results_dir) + "*")):
        _remove(p)
        done.append(f"deleted the superseded copy {p.name}")
    # A stage whose owner is gone (its lock is free) was never published.
    for p in sorted(parent.glob(_stage_prefix(results_dir) + "*")):
        if p.name.endswith(".lock"):
            if not os.path.lexists(p.with_name(p.name[: -len(".lock")])):
                with _flock(p, blocking=False) as free:
                    if free:  # its owner is gone (the stage was published or never made)
                        _remove_quietly(p)
            continue
        with _flock(_stage_lock_path(p), blocking=False) as free:
            if free:
                _remove(p)
                done.append(f"deleted the abandoned stage {p.name}")
        if not p.exists():
            _remove_quietly(_stage_lock_path(p))
    if done:
        fsync_dir(parent)
    return done


def _remove_quietly(path: Path) -> None:
    try:
        path.unlink()
    except FileNotFoundError:
        pass


# --- carrying other runs' entries -------------------------------------------------------------


def _link_or_copy(src: str, dst: str) -> None:
    try:
        os.link(src, dst, follow_symlinks=False)
    except OSError:
        shutil.copy2(src, dst, follow_symlinks=False)


def _carry(src: Path, dst: Path) -> None:
    if src.is_dir() and not src.is_symlink():
        shutil.copytree(src, dst, symlinks=True, copy_function=_link_or_copy)
    else:
        _link_or_copy(str(src), str(dst))


def _is_temp(name: str) -> bool:
    """A temp file an atomic write left behind when its process died: never carried."""
    return name.startswith(".") and name.endswith(".tmp")


def _identity(path: Path) -> tuple[int, int] | None:
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    return (st.st_dev, st.st_ino)


def _carry_others(results_dir: Path, stage: Path, suffix: str, carried: dict[str, tuple[int, int] | None]) -> None:
    """Link every entry of results_dir that `suffix` does not own into the stage (unless the run
    wrote an entry of that name itself), recording what was carried."""
    if not results_dir.is_dir():
        return
    for entry in sorted(os.listdir(results_dir)):
        if owned_by(entry, suffix) or os.path.lexists(stage / entry) or _is_temp(entry):
            continue
        _carry(results_dir / entry, stage / entry)
        carried[entry] = _identity(stage / entry)


def _refresh_carried(results_dir: Path, stage: Path, suffix: str, carried: dict[str, tuple[int, int] | None]) -> None:
    """At the swap: drop the carried entries the run did not replace and carry the current ones,
    so that what another run published since the stage was made is kept."""
    for entry, ident in list(carried.items()):
        if ident is not None and _identity(stage / entry) == ident:
            _remove(stage / entry)
        del carried[entry]
    _carry_others(results_dir, stage, suffix, carried)


# --- the context manager ----------------------------------------------------------------------


@contextlib.contextmanager
def staged_results(results_dir: str | os.PathLike[str], suffix: str = "") -> Iterator[Path]:
    """Yield a fresh staging folder beside results_dir; swap it in when the block completes.

    The stage starts with the entries of results_dir that `suffix` does not own (see
    `owned_by`); the block writes this run's files into it.  On normal exit the stage becomes
    results_dir.  On an exception the stage is deleted, results_dir is left exactly as it was,
    and a PublishError naming results_dir is raised from the original error (KeyboardInterrupt
    and other BaseExceptions are re-raised as they are, after the same cleanup).
    """
    results_dir = Path(results_dir)
    if results_dir.name in ("", ".", ".."):
        results_dir = results_dir.resolve()
    parent = results_dir.parent
    parent.mkdir(parents=True, exist_ok=True)
    if os.path.lexists(results_dir) and not results_dir.is_dir():
        raise PublishError(f"{results_dir}: exists and is not a folder; nothing was written")
    recover(results_dir)

    stage = parent / f"{_stage_prefix(results_dir)}{secrets.token_hex(6)}"
    stage_lock = _stage_lock_path(stage)
    with _flock(stage_lock):  # held while the stage lives: a live stage is never cleaned up
        try:
            stage.mkdir(mode=0o700)
            carried: dict[str, tuple[int, int] | None] = {}
            _carry_others(results_dir, stage, suffix, carried)
            yield stage
            _publish(results_dir, stage, suffix, carried)
        except Exception as exc:
            _discard(stage)
            if isinstance(exc, PublishError):
                raise
            raise PublishError(
                f"{results_dir}: writing the results failed ({type(exc).__name__}: {exc}); "
                f"nothing was published, the previous results were left intact"
            ) from exc
        except BaseException:
            _discard(stage)
            raise
        finally:
            _remove_quietly(stage_lock)


def _discard(stage: Path) -> None:
    with contextlib.suppress(OSError):
        _remove(stage)


def _publish(results_dir: Path, stage: Path, suffix: str, carried: dict[str, tuple[int, int] | None]) -> None:
    parent = results_dir.parent
    with _flock(_lock_path(results_dir)):
        _recover_locked(results_dir)
        _refresh_carried(results_dir, stage, suffix, carried)
        mode = stat.S_IMODE(os.stat(results_dir).st_mode) if results_dir.is_dir() else dir_mode()
        os.chmod(stage, mode)
        for folder, _dirs, _files in os.walk(stage):
            fsync_dir(Path(folder))
        if not os.path.lexists(results_dir):  # the first run: one rename, nothing to recover
            _rename(stage, results_dir)
            fsync_dir(parent)
            return
        old = parent / f"{_old_prefix(results_dir)}{secrets.token_hex(6)}"
        journal = _journal_path(results_dir)
        atomic_write_text(journal, json.dumps({"stage": stage.name, "old": old.name}))
        fsync_dir(parent)
        _rename(results_dir, old)
        try:
            _rename(stage, results_dir)
        except BaseException:
            _rename(old, results_dir)
            journal.unlink(missing_ok=True)
            raise
        fsync_dir(parent)
        journal.unlink(missing_ok=True)
        with contextlib.suppress(OSError):  # published; a leftover copy is deleted next time
            _remove(old)
