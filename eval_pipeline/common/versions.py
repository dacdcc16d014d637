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


def source_digest(*paths: str) -> str:
    """A digest of the bytes of the project's source files under ``paths`` (files, or folders
    whose ``.py`` files count), relative to the project root; 12 hex characters, taken once per
    process (the code loaded is the code that runs). For identities whose hand-kept version
    number a code change could leave behind: a grader's yardstick, a generator's identity, the
    scoring protocol."""
    if paths not in _SOURCES:
        import hashlib

        from eval_pipeline.common.state import PROJECT_ROOT

        digest = hashlib.sha256()
        for name in paths:
            top = PROJECT_ROOT / name
            files = [top] if top.is_file() else sorted(p for p in top.rglob("*.py") if "__pycache__" not in p.parts)
            for path in files:
                digest.update(str(path.relative_to(PROJECT_ROOT)).encode() + b"\0" + path.read_bytes())
        _SOURCES[paths] = digest.hexdigest()[:12]
    return _SOURCES[paths]
