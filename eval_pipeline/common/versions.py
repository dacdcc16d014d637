"""Installed package versions, for the cache keys and identities that depend on them."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any


def package_versions(names: Iterable[str]) -> dict[str, str]:
    """name -> installed version, 'absent' when not installed."""
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for name in names:
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = "absent"
    return out


_SOURCES: dict[tuple[str, ...], str] = {}


def _code_of(text: str) -> str:
    """What a Python source does, not how it is written: its syntax tree without docstrings
    (comments, formatting and line numbers are not in a tree), so a reformatted or re-documented
    file keeps its digest and a changed statement does not."""
    import ast

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
    import hashlib

    try:
        text = _code_of(raw.decode("utf-8"))
    except (SyntaxError, UnicodeDecodeError, ValueError):
        return hashlib.sha256(raw).hexdigest()[:12]
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def code_digest_of_file(path: str) -> str:
    """A digest of one Python file's code (`_code_of`), at any absolute path (a plugin's file
    outside the project); the digest of its bytes when it does not parse, 'absent' when it
    cannot be read. Read each time it is asked: callers take it when the code is loaded."""
    from pathlib import Path

    try:
        raw = Path(path).read_bytes()
    except OSError:
        return "absent"
    return _code_digest_of_bytes(raw)


def source_digest(*paths: str) -> str:
    """A digest of the code of the project's source files under ``paths`` (files, or folders
    whose ``.py`` files count), relative to the project root, read as syntax trees
    (`_code_of`); 12 hex characters, taken once per process (the code loaded is the code that
    runs). For the identities a code change must change whatever a hand-kept version says: the
    engine, the scoring protocol, a grader's yardstick, a generator's identity."""
    if paths not in _SOURCES:
        import hashlib

        from eval_pipeline.common.state import PROJECT_ROOT
        from eval_pipeline.common.weights import files_sha256

        files = []
        for name in paths:
            top = PROJECT_ROOT / name
            files += [top] if top.is_file() else sorted(p for p in top.rglob("*.py") if "__pycache__" not in p.parts) \
                if top.is_dir() else []
        # each file's tree digest is cached by the file's version (size, mtime, ctime, inode), as
        # the weights' are: parsing every project file cost 1.5 s of each process's start
        digests = files_sha256(files, compute=_code_digest_of_bytes, kind="code")
        digest = hashlib.sha256()
        for path, code in zip(files, digests):
            digest.update(str(path.relative_to(PROJECT_ROOT)).encode() + b"\0" + code.encode() + b"\n")
        _SOURCES[paths] = digest.hexdigest()[:12]
    return _SOURCES[paths]


# What an installed package runs: its Python sources and compiled extension modules. Data files
# (headers, type stubs, licences) and bytecode caches (rebuilt from the sources) are left out.
CODE_SUFFIXES = (".py", ".so", ".pyd", ".dylib")

_PACKAGE_CODE: dict[tuple[tuple[str, ...], tuple[str, ...]], str] = {}


def _is_code(relative: str) -> bool:
    return relative.endswith(CODE_SUFFIXES) and "__pycache__" not in relative


def _record(dist: Any) -> list[tuple[str, str]]:
    """(path relative to the install folder, sha256 hex or '') of each file RECORD lists."""
    import base64
    import csv

    rows = []
    for row in csv.reader((dist.read_text("RECORD") or "").splitlines()):
        if not row or not row[0]:
            continue
        mode, _, value = (row[1] if len(row) > 1 else "").partition("=")
        sha = base64.urlsafe_b64decode(value + "=" * (-len(value) % 4)).hex() if mode == "sha256" and value else ""
        rows.append((row[0], sha))
    return rows


def _import_locations(dist: Any, record: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """(folder or module file, the sys.path entry it is relative to) for each top-level name the
    distribution provides (``top_level.txt``, else the first parts of its RECORD, else its own
    name), as a new process would import it: the first match on sys.path, not a module this
    process already holds."""
    import os
    from importlib.machinery import PathFinder

    names = (dist.read_text("top_level.txt") or "").split()
    if not names:
        firsts = {path.replace("\\", "/").split("/")[0] for path, _ in record}
        names = sorted(name.removesuffix(".py") for name in firsts
                       if not name.endswith((".dist-info", ".data", ".pth")) and name not in ("..", "__pycache__")
                       and not name.startswith("__editable__"))
    if not names:
        names = [dist.metadata["Name"].replace("-", "_").lower()]
    found = []
    for name in names:
        spec = PathFinder.find_spec(name)
        if spec is None:
            continue
        for location in spec.submodule_search_locations or ([spec.origin] if spec.origin else []):
            if os.path.exists(location):
                found.append((os.path.normpath(location), os.path.dirname(os.path.normpath(location))))
    return found


def _distribution_code(dist: Any) -> dict[str, str]:
    """Relative path -> sha256 of every code file of one installed distribution.

    An intact wheel install is read from its RECORD (pip writes each file's sha256 there, and
    RECORD last): a file is taken from RECORD when its inode changed no later than RECORD's
    (ctime, which no user can set back), so a file edited in place, however its mtime is set,
    is hashed from its bytes. A top-level name it provides under which the RECORD lists no code
    (an editable install, a copied-in tree, an empty RECORD) is found on sys.path and all its
    code is hashed. The two paths give the same digest for the same bytes. Not covered: a new
    file dropped into an intact install without any listed file changing (nothing imports it
    until one does)."""
    import os

    from eval_pipeline.common.weights import files_sha256

    base = str(dist.locate_file(""))
    record = _record(dist)
    record_file = next((os.path.join(base, path) for path, _ in record
                        if path.endswith("/RECORD") and path.split("/")[0].endswith(".dist-info")), None)
    try:
        record_ctime = os.stat(record_file).st_ctime_ns if record_file else -1
    except OSError:
        record_ctime = -1
    code: dict[str, str] = {}
    to_hash: dict[str, str] = {}
    seen: set[str] = set()
    for relative, sha in record:
        if not _is_code(relative):
            continue
        path = os.path.normpath(os.path.join(base, relative))
        try:
            ctime = os.stat(path).st_ctime_ns
        except OSError:
            continue  # listed but removed: not code that runs
        seen.add(path)
        if sha and ctime <= record_ctime:
            code[relative] = sha
        else:
            to_hash[relative] = path
    for place, root in _import_locations(dist, record):
        if any(path == place or path.startswith(place + os.sep) for path in seen):
            continue  # the RECORD lists code here: the installed tree (edits show in their ctime)
        if os.path.isfile(place):
            candidates = [place]
        else:
            candidates = sorted(os.path.join(folder, name) for folder, _, names in os.walk(place) for name in names)
        for path in candidates:
            relative = os.path.relpath(path, root).replace(os.sep, "/")
            if _is_code(relative) and path not in seen and os.path.isfile(path):
                seen.add(path)
                to_hash[relative] = path
    code.update(zip(to_hash, files_sha256(to_hash.values())))
    return code


def package_code_digest(names: Iterable[str]) -> str:
    """A digest of the code the named distributions install (`_distribution_code`), 16 hex
    characters; 'absent' for a distribution not installed counts too. A version number is a
    promise, not the code: a patched or editable install at the same version ranks and embeds
    differently, so an identity that names versions only would call two engines one. Taken
    once per process and sys.path (RECORD is read and each code file stat-ed: about 0.3 s for
    torch, transformers and numpy together on this project's machines)."""
    import hashlib
    import sys
    from importlib.metadata import PackageNotFoundError, distribution

    key = (tuple(names), tuple(sys.path))
    if key not in _PACKAGE_CODE:
        digest = hashlib.sha256()
        for name in key[0]:
            try:
                dist = distribution(name)
            except PackageNotFoundError:
                digest.update(f"{name}\0absent\n".encode())
                continue
            for path, sha in sorted(_distribution_code(dist).items()):
                digest.update(f"{name}\0{path}\0{sha}\n".encode())
        _PACKAGE_CODE[key] = digest.hexdigest()[:16]
    return _PACKAGE_CODE[key]
