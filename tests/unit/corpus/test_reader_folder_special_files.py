"""A folder corpus holding a symlink loop, a dangling link, a FIFO, a device file or a link to a
file outside the folder: each is a CorpusError naming the path in strict mode and a counted
skipped record (with its reason) in lenient mode, never silently dropped; a link leaving the
folder is refused unless `follow_outside_links=True` (#25, item 5)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from eval_pipeline.corpus.sources import CorpusError, load_corpus


def _folder(tmp_path: Path) -> Path:
    root = tmp_path / "docs"
    root.mkdir()
    (root / "ok.md").write_text("# Fine\nreadable", encoding="utf-8")
    return root


def _loop(root: Path) -> tuple[Path, str]:
    (root / "a.md").symlink_to(root / "b.md")
    (root / "b.md").symlink_to(root / "a.md")
    return root / "a.md", "symbolic link loop"


def _dangling(root: Path) -> tuple[Path, str]:
    (root / "gone.md").symlink_to(root / "nowhere.md")
    return root / "gone.md", "dangling symbolic link"


def _fifo(root: Path) -> tuple[Path, str]:
    os.mkfifo(root / "pipe.md")
    return root / "pipe.md", "not a regular file (a FIFO)"


def _device(root: Path) -> tuple[Path, str]:
    (root / "null.md").symlink_to("/dev/null")  # a link to a device (mknod needs root)
    return root / "null.md", "not a regular file (a character device)"


def _outside(root: Path) -> tuple[Path, str]:
    secret = root.parent / "secret.txt"
    secret.write_text("root:x:0:0:root:/root:/bin/bash\n", encoding="utf-8")
    (root / "passwd.txt").symlink_to(secret)
    return root / "passwd.txt", "symbolic link to a file outside the folder"


def _outside_dir(root: Path) -> tuple[Path, str]:
    outside = root.parent / "elsewhere"
    outside.mkdir()
    (outside / "x.md").write_text("# X\nnot ours", encoding="utf-8")
    (root / "linked").symlink_to(outside)
    return root / "linked", "symbolic link to a folder outside the folder"


CASES = [_loop, _dangling, _fifo, _device, _outside, _outside_dir]


@pytest.mark.parametrize("make", CASES, ids=[c.__name__.strip("_") for c in CASES])
def test_strict_refuses_and_lenient_counts(tmp_path, make):
    root = _folder(tmp_path)
    bad, reason = make(root)
    with pytest.raises(CorpusError) as info:
        load_corpus("folder", str(root))
    assert str(info.value).startswith(f"{bad}: {reason}")
    snapshot = load_corpus("folder", str(root), lenient=True)
    assert [d.doc_id for d in snapshot.documents] == ["ok"]
    expected = [bad, bad.with_name("b.md")] if make is _loop else [bad]  # a loop is two links, each refused
    assert [s.location for s in snapshot.skipped] == [str(p) for p in expected]
    assert all(s.reason.startswith(reason) for s in snapshot.skipped)


def test_a_link_outside_is_read_when_allowed(tmp_path):
    root = _folder(tmp_path)
    _outside(root)
    snapshot = load_corpus("folder", str(root), follow_outside_links=True)
    assert sorted(d.doc_id for d in snapshot.documents) == ["ok", "passwd"]
    assert snapshot.skipped == ()


def test_a_folder_outside_is_read_when_allowed(tmp_path):
    root = _folder(tmp_path)
    _outside_dir(root)
    snapshot = load_corpus("folder", str(root), follow_outside_links=True)
    assert sorted(d.doc_id for d in snapshot.documents) == ["linked/x", "ok"]


def test_a_link_inside_the_folder_is_read(tmp_path):
    root = _folder(tmp_path)
    (root / "sub").mkdir()
    (root / "sub" / "real.md").write_text("# Real\ntext", encoding="utf-8")
    (root / "alias.md").symlink_to(root / "sub" / "real.md")
    snapshot = load_corpus("folder", str(root))
    assert sorted(d.doc_id for d in snapshot.documents) == ["alias", "ok", "sub/real"]


def test_a_link_to_a_folder_above_is_a_loop(tmp_path):
    root = _folder(tmp_path)
    (root / "sub").mkdir()
    (root / "sub" / "up").symlink_to(root)
    with pytest.raises(CorpusError, match=r"/sub/up: symbolic link loop \(to .*, a folder above it\)$"):
        load_corpus("folder", str(root))
    assert [d.doc_id for d in load_corpus("folder", str(root), lenient=True).documents] == ["ok"]


def test_a_linked_root_folder_is_read(tmp_path):
    root = _folder(tmp_path)
    link = tmp_path / "link-to-docs"
    link.symlink_to(root)
    snapshot = load_corpus("folder", str(link))
    assert [d.doc_id for d in snapshot.documents] == ["ok"]
