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
