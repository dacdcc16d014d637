"""Wheel-like installs into a folder put on sys.path, for the tests of the installed-code
identity (`eval_pipeline.common.versions.package_code_digest`); their `fresh_package_code`
fixture is in tests/conftest.py."""

from __future__ import annotations

import base64
import hashlib
import importlib
import time
from pathlib import Path

from eval_pipeline.common import versions
from eval_pipeline.common.versions import package_code_digest


def sha_field(data: bytes) -> str:
    """RECORD's hash field of `data`, as pip writes it."""
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).decode().rstrip("=")


def install_wheel(site: Path, name: str, files: dict[str, bytes], *, top_level: str | None = None) -> Path:
    """Distribution `name` 1.0 installed into `site` as pip does it: its files, METADATA, then a
    RECORD holding each file's sha256, written last. Returns the RECORD's path."""
    for relative, data in files.items():
        path = site / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    info = site / f"{name}-1.0.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
    if top_level is not None:
        (info / "top_level.txt").write_text(top_level + "\n")
    lines = [f"{relative},{sha_field(data)},{len(data)}" for relative, data in files.items()]
    time.sleep(0.01)  # RECORD's inode changes after the files', as when pip writes it last
    record = info / "RECORD"
    record.write_text("\n".join([*lines, f"{name}-1.0.dist-info/RECORD,,"]) + "\n")
    return record


def digest_on_path(monkeypatch, site: Path, name: str) -> str:
    """The digest of distribution `name` a new process with `site` first on its path would take."""
    with monkeypatch.context() as patch:
        patch.syspath_prepend(str(site))
        importlib.invalidate_caches()
        versions._PACKAGE_CODE.clear()
        return package_code_digest([name])
