"""The code an installed package runs is in the identities that depend on it, not its version
number alone: a patched or editable install at the same version is another engine."""

from __future__ import annotations

import base64
import hashlib
import importlib
import os
import time

import pytest

from eval_pipeline.common import versions
from eval_pipeline.common.versions import package_code_digest


def _sha_field(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).decode().rstrip("=")


def _install(site, name: str, files: dict[str, bytes], *, record: bool = True, top_level: str | None = None):
    """A wheel-like install of distribution `name` 1.0 into `site`: its files, METADATA and a
    RECORD holding each file's sha256, written last as pip writes it."""
    for relative, data in files.items():
        path = site / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    info = site / f"{name}-1.0.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
    if top_level is not None:
        (info / "top_level.txt").write_text(top_level + "\n")
    lines = [f"{relative},{_sha_field(data)},{len(data)}" for relative, data in files.items()] if record else []
    time.sleep(0.01)  # RECORD's inode changes after the files', as when pip writes it last
    (info / "RECORD").write_text("\n".join([*lines, f"{name}-1.0.dist-info/RECORD,,"]) + "\n")


@pytest.fixture
def fresh(monkeypatch, tmp_path):
    monkeypatch.setattr(versions, "_PACKAGE_CODE", {})
    monkeypatch.delenv("EVAL_PIPELINE_STATE_DIR", raising=False)
    yield
    importlib.invalidate_caches()


def _digest(monkeypatch, site, name="toypkg") -> str:
    with monkeypatch.context() as patch:
        patch.syspath_prepend(str(site))
        importlib.invalidate_caches()
        versions._PACKAGE_CODE.clear()
        return package_code_digest([name])


def test_an_in_place_edit_of_an_installed_file_changes_the_digest_and_the_same_bytes_do_not(fresh, monkeypatch,
                                                                                           tmp_path):
    site = tmp_path / "site"
    source = b"K1 = 1.5\n"
    _install(site, "toypkg", {"toypkg/__init__.py": source, "toypkg/score.py": b"def f():\n    return 1\n"})
    from_record = _digest(monkeypatch, site)
    # rewritten with the same bytes (its inode changes after RECORD's): hashed, the same digest
    (site / "toypkg" / "__init__.py").write_bytes(source)
    assert _digest(monkeypatch, site) == from_record
    # a patch, even with the old mtime put back, is another digest
    stat = os.stat(site / "toypkg" / "score.py")
    (site / "toypkg" / "score.py").write_bytes(b"def f():\n    return 2\n")
    os.utime(site / "toypkg" / "score.py", ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert _digest(monkeypatch, site) != from_record


def test_an_editable_install_is_hashed_from_its_source_tree(fresh, monkeypatch, tmp_path):
    site, source_tree = tmp_path / "site", tmp_path / "checkout"
    (source_tree / "toypkg").mkdir(parents=True)
    (source_tree / "toypkg" / "__init__.py").write_text("K1 = 1.5\n")
    (source_tree / "toypkg" / "ext.so").write_bytes(b"\x7fELF one")
    (source_tree / "toypkg" / "notes.txt").write_text("not code")
    _install(site, "toypkg", {"__editable__.toypkg-1.0.pth": str(source_tree).encode()}, top_level="toypkg")
    with monkeypatch.context() as patch:
        patch.syspath_prepend(str(source_tree))  # what the .pth does at start-up
        before = _digest(monkeypatch, site)
        (source_tree / "toypkg" / "notes.txt").write_text("still not code")
        assert _digest(monkeypatch, site) == before
        (source_tree / "toypkg" / "ext.so").write_bytes(b"\x7fELF two")
        assert _digest(monkeypatch, site) != before


def test_a_distribution_not_installed_counts_as_absent(fresh):
    assert package_code_digest(["no-such-distribution-xyz"]) == package_code_digest(["no-such-distribution-xyz"])
    assert package_code_digest(["no-such-distribution-xyz"]) != package_code_digest(["another-missing-xyz"])


def test_the_ranking_and_embedding_identities_carry_the_package_code(fresh):
    from eval_pipeline.ranking.caches import RESULT_PACKAGES, result_environment
    from eval_pipeline.store.embedders import EMBEDDING_PACKAGES, embedding_runtime

    assert result_environment()["package-code"] == package_code_digest(RESULT_PACKAGES)
    assert embedding_runtime()["package-code"] == package_code_digest(EMBEDDING_PACKAGES)
