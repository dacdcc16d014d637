"""Installed package versions, for the cache keys and identities that depend on them."""

from __future__ import annotations

import ast
import csv
import hashlib
import os
import sys
from collections.abc import Iterable
from importlib.metadata import PackageNotFoundError, distribution, version
from pathlib import Path
from typing import Any

from eval_pipeline.common import state
from eval_pipeline.common.weights import files_sha256, stat_signature


def package_versions(names: Iterable[str]) -> dict[str, str]:
    """name -> installed version, 'absent' when not installed. Read once per process, sys.path
    and meta path, as `package_code_digest` is (each read searches every folder on sys.path, and
    an embedder's identity, read many times a run, names seven packages)."""
    out = {}
    for name in names:
        key = ("version", name, tuple(sys.path), len(sys.meta_path))
        if key not in _PACKAGE_CODE:
            try:
                _PACKAGE_CODE[key] = version(name)
            except PackageNotFoundError:
                _PACKAGE_CODE[key] = "absent"
        out[name] = _PACKAGE_CODE[key]
    return out


_SOURCES: dict[tuple[str, ...], str] = {}


def _code_of(text: str) -> str:
    """What a Python source does, not how it is written: its syntax tree without docstrings
    (comments, formatting and line numbers are not in a tree), so a reformatted or re-documented
    file keeps its digest and a changed statement does not."""
    tree = ast.parse(text)
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr) \
                and isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str):
            node.body = body[1:] or [ast.Pass()]  # type: ignore[attr-defined]
    return ast.dump(tree, annotate_fields=False, include_attributes=False)


def _code_digest_of_bytes(raw: bytes) -> str:
    """`_code_of`'s digest of a Python file's bytes; the bytes' own digest when they do not
    parse as Python (a syntax error still changes the identity)."""
    try:
        text = _code_of(raw.decode("utf-8"))
    except (SyntaxError, UnicodeDecodeError, ValueError):
        return hashlib.sha256(raw).hexdigest()[:12]
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def code_digest_of_file(path: str) -> str:
    """A digest of one Python file's code (`_code_of`), at any absolute path (a plugin's file
    outside the project); the digest of its bytes when it does not parse, 'absent' when it
    cannot be read. Read each time it is asked: callers take it when the code is loaded."""
    try:
        raw = Path(path).read_bytes()
    except OSError:
        return "absent"
    return _code_digest_of_bytes(raw)


def _project_files(paths: Iterable[str]) -> list[Path]:
    """The project's source files under ``paths`` (files, or folders whose ``.py`` files count).
    A dangling link (an editor's lock file, ``.#name.py``) holds no code that can run: left out."""
    files: list[Path] = []
    for name in paths:
        top = state.PROJECT_ROOT / name
        files += [top] if top.is_file() else sorted(
            p for p in top.rglob("*.py") if "__pycache__" not in p.parts and p.is_file()) if top.is_dir() else []
    return files


# The project's source files as this process found them when it started (project root -> file ->
# its version), and a name for this process: an identity is computed from the files on disk when
# first asked, which may be after an edit or a `git pull` landed under a running process. It then
# no longer describes the code the process loaded; `source_digest` gives it this process's name.
SOURCE_ROOTS = ("eval_pipeline", "assets", "resources", "definitions.py")
_STARTED: dict[Path, dict[Path, list[int]]] = {}
_THIS_PROCESS = os.urandom(6).hex()


def remember_sources() -> None:
    """Note the version of each project source file (`SOURCE_ROOTS`) as the process starts:
    done when this module is imported, before any identity is computed (a few milliseconds)."""
    seen = {}
    for path in _project_files(SOURCE_ROOTS):
        try:
            seen[path] = stat_signature(os.stat(path))
        except OSError:
            continue
    _STARTED[state.PROJECT_ROOT] = seen


def _changed_since_start(paths: Iterable[str], files: list[Path]) -> bool:
    """Whether a file under `paths` was added, changed or removed since the process started."""
    started = _STARTED.get(state.PROJECT_ROOT)
    if started is None:  # another project than the one this process started in (tests)
        return False
    if {path for path in started if _under(path, paths)} != set(files):
        return True
    try:
        return any(started[path] != stat_signature(os.stat(path)) for path in files)
    except OSError:
        return True


def source_digest(*paths: str) -> str:
    """A digest of the code of the project's source files under ``paths`` (files, or folders
    whose ``.py`` files count), relative to the project root, read as syntax trees
    (`_code_of`); 12 hex characters, taken once per process (the code loaded is the code that
    runs). For the identities a code change must change whatever a hand-kept version says: the
    engine, the scoring protocol, a grader's yardstick, a generator's identity.

    A file added or changed since the process started (`remember_sources`) makes the digest
    this process's own (``…-changed-<process>``): the code on disk is not the code loaded, so
    no cached result may be read under it, and what is stored under it no later process reads."""
    if paths not in _SOURCES:
        files = _project_files(paths)
        # each file's tree digest is cached by the file's version (size, mtime, ctime, inode), as
        # the weights' are: parsing every project file cost 1.5 s of each process's start
        digests = files_sha256(files, compute=_code_digest_of_bytes, kind="code")
        digest = hashlib.sha256()
        for path, code in zip(files, digests):
            digest.update(str(path.relative_to(state.PROJECT_ROOT)).encode() + b"\0" + code.encode() + b"\n")
        changed = _changed_since_start(paths, files)
        _SOURCES[paths] = digest.hexdigest()[:12] + (f"-changed-{_THIS_PROCESS}" if changed else "")
    return _SOURCES[paths]


def _under(path: Path, paths: Iterable[str]) -> bool:
    """Whether `path` is one of `paths` (relative to the project root) or inside one of them."""
    relative = path.relative_to(state.PROJECT_ROOT).as_posix()
    return any(relative == name or relative.startswith(name.rstrip("/") + "/") for name in paths)


# What an installed package runs: its Python sources and compiled code, extension modules and
# the shared libraries a wheel vendors (``libgomp.so.1``, ``libgfortran-…so.5.0.0``). Data files
# (headers, type stubs, licences) and bytecode caches (rebuilt from the sources) are left out.
CODE_SUFFIXES = (".py", ".so", ".pyd", ".dylib", ".dll")

# per process: (names, sys.path, meta path length) -> digest, ("dist", name, ...) -> its code
# files (one walk of each distribution per process, whichever identities ask), ("lines", name,
# ...) -> its part of a digest (its files stat-ed and looked up once per process) and ("version",
# name, ...) -> its installed version (`package_versions`), ("startup", sys.path, meta path length) ->
# what `startup_code_digest` read and its stat signatures
_PACKAGE_CODE: dict[tuple, Any] = {}


def _is_code(relative: str) -> bool:
    parts = relative.replace("\\", "/").split("/")
    return "__pycache__" not in parts and (parts[-1].endswith(CODE_SUFFIXES) or ".so." in parts[-1])


def _record_paths(dist: Any) -> list[str]:
    """The paths RECORD lists (relative to the install folder). Its hashes are not used: RECORD
    says what pip wrote, not what is on disk now."""
    return [row[0] for row in csv.reader((dist.read_text("RECORD") or "").splitlines()) if row and row[0]]


def find_spec_anew(name: str) -> Any:
    """The spec a new process would import `name` by: every finder on sys.meta_path in order
    (an editable install's finder included), never a module this process already holds."""
    for finder in sys.meta_path:
        find = getattr(finder, "find_spec", None)
        if find is None:
            continue
        try:
            spec = find(name, None)
        except Exception:  # a finder that cannot answer for this name is not the one that imports it
            continue
        if spec is not None:
            return spec
    return None


def _import_locations(dist: Any, record: list[str]) -> list[tuple[str, str]]:
    """(folder or module file, the folder its relative names start from) for each top-level name
    the distribution provides (``top_level.txt``, else the first parts of its RECORD, else its
    own name), as a new process would import it (`find_spec_anew`)."""
    names = (dist.read_text("top_level.txt") or "").split()
    if not names:
        firsts = {path.replace("\\", "/").split("/")[0] for path in record}
        names = sorted(name.removesuffix(".py") for name in firsts
                       if not name.endswith((".dist-info", ".data", ".pth")) and name not in ("..", "__pycache__")
                       and not name.startswith("__editable__"))
    if not names:
        names = [dist.metadata["Name"].replace("-", "_").lower()]
    found = []
    for name in names:
        spec = find_spec_anew(name)
        if spec is None:
            continue
        for location in spec.submodule_search_locations or ([spec.origin] if spec.origin else []):
            if isinstance(location, str) and os.path.exists(location):
                found.append((os.path.abspath(location), os.path.dirname(os.path.abspath(location))))
    return found


def _distribution_files(dist: Any) -> dict[str, str]:
    """Relative path -> absolute path of every code file of one installed distribution:
    those its RECORD lists (the vendored libraries included) and every code file under the
    folders its top-level names import from (an editable checkout, a file added to the install,
    a package folder shadowing a listed module). `package_code_digest` hashes each from its
    bytes: a RECORD's hashes say what pip wrote, and anything that touches the files after (a
    patch, a `chmod -R`, a restored cache) would hide behind them."""
    base = os.path.abspath(dist.locate_file(""))  # relative when found through a relative sys.path entry
    record = _record_paths(dist)
    files: dict[str, str] = {}
    seen: set[str] = set()
    for relative in record:
        if _is_code(relative):
            path = os.path.normpath(os.path.join(base, relative))
            if os.path.isfile(path):
                files[relative.replace(os.sep, "/")] = path
                seen.add(path)
    for place, root in _import_locations(dist, record):
        if os.path.isfile(place):
            candidates = [place]
        else:
            candidates = []
            for folder, dirs, names in os.walk(place):
                dirs[:] = [d for d in dirs if d != "__pycache__"]
                candidates += [os.path.join(folder, n) for n in names if _is_code(n)]
        for path in candidates:
            if path not in seen:
                seen.add(path)
                files[path[len(root):].lstrip(os.sep).replace(os.sep, "/")] = path  # `path` is under `root`
    return files


def startup_code_digest() -> str:
    """A digest of the code Python runs at every start-up before ours: each ``.pth`` file on
    sys.path (its lines, and the source of each module an ``import`` line names) and the
    ``sitecustomize`` / ``usercustomize`` modules. A site-wide hotfix can patch a ranking
    package from there; 16 hex characters, 'none' when there is none. Every engine identity asks
    it (reading it costs 3–10 ms, a stat of what it read 0.04 ms): it is read again only when what
    it read may have changed, told by the stat signatures of every folder on sys.path (a file
    added, removed or renamed there, a ``.pth`` written into a folder ``site.addsitedir`` then
    runs) and of every file it read (one edited in place), with sys.path and the meta path."""
    key = ("startup", tuple(sys.path), len(sys.meta_path))
    folders = _startup_folders()
    cached = _PACKAGE_CODE.get(key)
    if cached is not None and cached[0] == _signatures(folders) and cached[1] == _signatures(cached[2]):
        return str(cached[3])
    before = _signatures(folders)
    digest, read = _startup_code_digest(folders)
    _PACKAGE_CODE[key] = (before, _signatures(read), read, digest)
    return digest


def _startup_folders() -> list[str]:
    """The folders on sys.path, in order, each once (where the ``.pth`` files are read from)."""
    return list(dict.fromkeys(p for p in sys.path if p and os.path.isdir(p)))


def _signatures(paths: Iterable[str]) -> list[list[int] | None]:
    """Each path's `stat_signature` (None: gone)."""
    signatures: list[list[int] | None] = []
    for path in paths:
        try:
            signatures.append(stat_signature(os.stat(path)))
        except OSError:
            signatures.append(None)
    return signatures


def _startup_code_digest(folders: list[str]) -> tuple[str, list[str]]:
    """(`startup_code_digest`, the files it read)."""
    digest = hashlib.sha256()
    read: list[str] = []

    def module(name: str) -> None:
        spec = find_spec_anew(name)
        origin = getattr(spec, "origin", None) if spec is not None else None
        if isinstance(origin, str) and os.path.isfile(origin):
            read.append(origin)
            digest.update(f"{name}\0{code_digest_of_file(origin)}\n".encode())

    for folder in folders:
        try:
            names = sorted(n for n in os.listdir(folder) if n.endswith(".pth"))
        except OSError:
            continue
        for name in names:
            try:
                text = Path(folder, name).read_text(encoding="utf-8", errors="replace")
            except OSError:
                continue
            read.append(os.path.join(folder, name))
            digest.update(f"{name}\0{hashlib.sha256(text.encode()).hexdigest()}\n".encode())
            for line in text.splitlines():
                if line.startswith(("import ", "import\t")):
                    for statement in line.split(";"):
                        statement = statement.strip()
                        if statement.startswith("import "):
                            for imported in statement[len("import "):].split(","):
                                module(imported.strip().split(" ")[0])
    for name in ("sitecustomize", "usercustomize"):
        module(name)
    return (digest.hexdigest()[:16] if read else "none"), read


def package_code_digest(names: Iterable[str]) -> str:
    """A digest of the code the named distributions install (`_distribution_files`), 16 hex
    characters; 'absent' for a distribution not installed counts too. A version number is a
    promise, not the code: a patched or editable install at the same version ranks and embeds
    differently, so an identity that names versions only would call two engines one. Taken
    once per process, sys.path and meta path, and so is each distribution's part (its files are
    listed and stat-ed once per process, whichever identities name it; their bytes are hashed
    once per version of each file on this machine)."""
    key = (tuple(names), tuple(sys.path), len(sys.meta_path))
    if key not in _PACKAGE_CODE:
        listed: dict[str, dict[str, str] | None] = {}
        for name in key[0]:
            where = ("dist", name, key[1], key[2])
            if where not in _PACKAGE_CODE:
                try:
                    _PACKAGE_CODE[where] = _distribution_files(distribution(name))
                except PackageNotFoundError:
                    _PACKAGE_CODE[where] = None
            listed[name] = _PACKAGE_CODE[where]
        # each distribution's lines are taken once per process, whichever identities name it (the
        # embedding, ranking, chunking, audit and statistics identities share numpy, torch...): the
        # files of those not taken yet are stat-ed and looked up in one batch
        lines_of = {name: ("lines", name, key[1], key[2]) for name in key[0]}
        new = {name: files for name, files in listed.items() if lines_of[name] not in _PACKAGE_CODE}
        # a dangling link in an import folder holds no code that can run
        every = sorted({path for files in new.values() if files for path in files.values() if os.path.isfile(path)})
        sha = dict(zip(every, files_sha256(every, resolve=False))) if every else {}
        for name, files in new.items():
            _PACKAGE_CODE[lines_of[name]] = [f"{name}\0absent\n"] if files is None else [
                f"{name}\0{relative}\0{sha[path]}\n" for relative, path in sorted(files.items()) if path in sha]
        digest = hashlib.sha256()
        for name in key[0]:
            digest.update("".join(_PACKAGE_CODE[lines_of[name]]).encode())
        _PACKAGE_CODE[key] = digest.hexdigest()[:16]
    return _PACKAGE_CODE[key]


remember_sources()  # the process's start: see _STARTED
