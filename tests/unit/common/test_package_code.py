"""The code an installed package runs is in the identities that depend on it, not its version
number alone: a patched or editable install at the same version is another engine."""

from __future__ import annotations

import os

from eval_pipeline.common.versions import package_code_digest
from tests.wheels import digest_on_path, install_wheel


def test_an_in_place_edit_of_an_installed_file_changes_the_digest_and_the_same_bytes_do_not(
        fresh_package_code, monkeypatch, tmp_path):
    site = tmp_path / "site"
    source = b"K1 = 1.5\n"
    install_wheel(site, "toypkg", {"toypkg/__init__.py": source, "toypkg/score.py": b"def f():\n    return 1\n"})
    from_record = digest_on_path(monkeypatch, site, "toypkg")
    # rewritten with the same bytes (its inode changes after RECORD's): hashed, the same digest
    (site / "toypkg" / "__init__.py").write_bytes(source)
    assert digest_on_path(monkeypatch, site, "toypkg") == from_record
    # a patch, even with the old mtime put back, is another digest
    stat = os.stat(site / "toypkg" / "score.py")
    (site / "toypkg" / "score.py").write_bytes(b"def f():\n    return 2\n")
    os.utime(site / "toypkg" / "score.py", ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert digest_on_path(monkeypatch, site, "toypkg") != from_record


def test_an_editable_install_is_hashed_from_its_source_tree(fresh_package_code, monkeypatch, tmp_path):
    site, source_tree = tmp_path / "site", tmp_path / "checkout"
    (source_tree / "toypkg").mkdir(parents=True)
    (source_tree / "toypkg" / "__init__.py").write_text("K1 = 1.5\n")
    (source_tree / "toypkg" / "ext.so").write_bytes(b"\x7fELF one")
    (source_tree / "toypkg" / "notes.txt").write_text("not code")
    install_wheel(site, "toypkg", {"__editable__.toypkg-1.0.pth": str(source_tree).encode()}, top_level="toypkg")
    with monkeypatch.context() as patch:
        patch.syspath_prepend(str(source_tree))  # what the .pth does at start-up
        before = digest_on_path(monkeypatch, site, "toypkg")
        (source_tree / "toypkg" / "notes.txt").write_text("still not code")
        assert digest_on_path(monkeypatch, site, "toypkg") == before
        (source_tree / "toypkg" / "ext.so").write_bytes(b"\x7fELF two")
        assert digest_on_path(monkeypatch, site, "toypkg") != before


def test_a_distribution_not_installed_counts_as_absent(fresh_package_code):
    assert package_code_digest(["no-such-distribution-xyz"]) == package_code_digest(["no-such-distribution-xyz"])
    assert package_code_digest(["no-such-distribution-xyz"]) != package_code_digest(["another-missing-xyz"])


def test_the_ranking_and_embedding_identities_carry_the_package_code(fresh_package_code):
    from eval_pipeline.ranking.caches import RESULT_PACKAGES, result_environment
    from eval_pipeline.store.embedders import EMBEDDING_PACKAGES, embedding_runtime

    assert result_environment()["package-code"] == package_code_digest(RESULT_PACKAGES)
    assert embedding_runtime()["package-code"] == package_code_digest(EMBEDDING_PACKAGES)


def test_a_distribution_found_through_a_relative_path_entry_is_the_one_found_through_the_absolute(
        fresh_package_code, monkeypatch, tmp_path):
    """`PYTHONPATH=.` or `python -m` from the install's folder: importlib names the files
    relative to the working folder. They are hashed under their absolute paths (the digest
    cache keys nothing else), with the same digest as through the absolute entry."""
    site = tmp_path / "site"
    # a module its RECORD lists outside the folder its top-level name imports from: named from
    # the distribution's own location, which is relative through a relative entry
    install_wheel(site, "toypkg", {"toypkg/__init__.py": b"K1 = 1.5\n", "toyhelper.py": b"K2 = 2\n"},
                  top_level="toypkg")
    absolute = digest_on_path(monkeypatch, site, "toypkg")
    monkeypatch.chdir(tmp_path)
    assert digest_on_path(monkeypatch, "site", "toypkg") == absolute
