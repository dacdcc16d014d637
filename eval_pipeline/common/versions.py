"""Installed package versions, for the cache keys and identities that depend on them."""

from __future__ import annotations

from collections.abc import Iterable


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


def code_digest_of_file(path: str) -> str:
    """A digest of one Python file's code (`_code_of`), at any absolute path (a plugin's file
    outside the project); the digest of its bytes when it does not parse, 'absent' when it
    cannot be read. Read each time it is asked: callers take it when the code is loaded."""
    import hashlib
    from pathlib import Path

    try:
        raw = Path(path).read_bytes()
    except OSError:
        return "absent"
    try:
        text = _code_of(raw.decode("utf-8"))
    except (SyntaxError, UnicodeDecodeError, ValueError):
        return hashlib.sha256(raw).hexdigest()[:12]
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def source_digest(*paths: str) -> str:
    """A digest of the code of the project's source files under ``paths`` (files, or folders
    whose ``.py`` files count), relative to the project root, read as syntax trees
    (`_code_of`); 12 hex characters, taken once per process (the code loaded is the code that
    runs). For the identities a code change must change whatever a hand-kept version says: the
    engine, the scoring protocol, a grader's yardstick, a generator's identity."""
    if paths not in _SOURCES:
        import hashlib

        from eval_pipeline.common.state import PROJECT_ROOT

        digest = hashlib.sha256()
        for name in paths:
            top = PROJECT_ROOT / name
            files = [top] if top.is_file() else sorted(p for p in top.rglob("*.py") if "__pycache__" not in p.parts) \
                if top.is_dir() else []
            for path in files:
                digest.update(str(path.relative_to(PROJECT_ROOT)).encode() + b"\0")
                digest.update(_code_of(path.read_text(encoding="utf-8")).encode())
        _SOURCES[paths] = digest.hexdigest()[:12]
    return _SOURCES[paths]
