"""Each installed distribution's files are stat-ed and looked up once per process, whichever
identities name it: the embedding, ranking, chunking, audit and statistics identities all name
numpy or torch, and each of them stat-ed and looked up every file of every package it names
again (a warm demo run spent about a second there). The digests stay what they were."""

from __future__ import annotations

import hashlib

from eval_pipeline.common import versions
from eval_pipeline.common.versions import package_code_digest
from eval_pipeline.common.weights import files_sha256
from tests.wheels import install_wheel


def digest_as_before(names: list[str]) -> str:
    """The digest as package_code_digest took it before it kept each distribution's lines:
    every named distribution's files, hashed in one batch, one line per file in name order."""
    listed = {}
    for name in names:
        try:
            listed[name] = versions._distribution_files(versions.distribution(name))
        except versions.PackageNotFoundError:
            listed[name] = None
    every = sorted({p for files in listed.values() if files for p in files.values()})
    sha = dict(zip(every, files_sha256(every, cache_file=None, resolve=False)))
    digest = hashlib.sha256()
    for name, files in listed.items():
        if files is None:
            digest.update(f"{name}\0absent\n".encode())
            continue
        for relative, path in sorted(files.items()):
            if path in sha:
                digest.update(f"{name}\0{relative}\0{sha[path]}\n".encode())
    return digest.hexdigest()[:16]


def site_with_three(tmp_path, monkeypatch):
    site = tmp_path / "site"
    for name in ("toya", "toyb", "toyc"):
        install_wheel(site, name, {f"{name}/__init__.py": f"NAME = {name!r}\n".encode(),
                                   f"{name}/core.py": b"def f():\n    return 1\n"})
    monkeypatch.syspath_prepend(str(site))
    return site


def test_a_distribution_already_digested_in_this_process_is_not_looked_at_again(
        fresh_package_code, monkeypatch, tmp_path):
    site_with_three(tmp_path, monkeypatch)
    looked_at: list[list[str]] = []
    real = versions.files_sha256
    monkeypatch.setattr(versions, "files_sha256",
                        lambda paths, **kw: looked_at.append(list(paths)) or real(paths, **kw))
    package_code_digest(["toya", "toyb"])
    package_code_digest(["toyb", "toyc"])
    second = [p for p in looked_at[-1]]
    assert second and all("/toyc/" in p for p in second)


def test_the_digests_are_what_they_were(fresh_package_code, monkeypatch, tmp_path):
    site_with_three(tmp_path, monkeypatch)
    first = package_code_digest(["toya", "toyb"])
    second = package_code_digest(["toyb", "toyc", "no-such-distribution-xyz"])
    assert first == digest_as_before(["toya", "toyb"])
    assert second == digest_as_before(["toyb", "toyc", "no-such-distribution-xyz"])
    assert package_code_digest(["toyc", "toyb"]) == digest_as_before(["toyc", "toyb"])  # the order named counts
    assert package_code_digest(["numpy"]) == digest_as_before(["numpy"])


def test_installed_versions_are_read_once_per_process_and_path(fresh_package_code, monkeypatch, tmp_path):
    """Every access of an embedder's identity named the seven embedding packages' versions, each
    a search of sys.path (27 accesses a warm demo run, ~1 s): read once per process and path."""
    asked = []
    real = versions.version
    monkeypatch.setattr(versions, "version", lambda name: asked.append(name) or real(name))
    first = versions.package_versions(["numpy", "no-such-distribution-xyz"])
    assert versions.package_versions(["numpy", "no-such-distribution-xyz"]) == first
    assert asked == ["numpy", "no-such-distribution-xyz"]
    assert first == {"numpy": real("numpy"), "no-such-distribution-xyz": "absent"}
    site_with_three(tmp_path, monkeypatch)  # another path: read again, and what it installs is seen
    assert versions.package_versions(["toya"]) == {"toya": "1.0"}
    assert versions.package_versions(["numpy"]) == {"numpy": real("numpy")}
    assert asked[2:] == ["toya", "numpy"]
