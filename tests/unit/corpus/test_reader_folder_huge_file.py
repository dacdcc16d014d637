"""A folder corpus file so large on disk that it must hold more than max_document_chars
characters (a UTF-8 character is at most 4 bytes) is refused from its size, before it is read:
a 300 MB file was read whole (894 MB RSS) before the cap refused it (#25, item 8)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from eval_pipeline.corpus.sources import DEFAULT_MAX_DOCUMENT_CHARS, CorpusError, load_corpus


@pytest.fixture
def folder(tmp_path: Path, monkeypatch) -> tuple[Path, Path]:
    root = tmp_path / "docs"
    root.mkdir()
    (root / "ok.md").write_text("# Fine\nreadable", encoding="utf-8")
    huge = root / "huge.txt"
    with open(huge, "wb") as fh:  # 300 MB, sparse: nothing is written
        fh.truncate(300 * 1024 * 1024)
    real_read_bytes = Path.read_bytes

    def read_bytes(self: Path) -> bytes:
        assert self != huge, "the huge file was read"
        return real_read_bytes(self)

    monkeypatch.setattr(Path, "read_bytes", read_bytes)
    return root, huge


def test_strict_refuses_from_the_size(folder):
    root, huge = folder
    with pytest.raises(CorpusError) as info:
        load_corpus("folder", str(root))
    assert str(info.value) == (f"{huge}: 314,572,800 bytes on disk, more than 4 × max_document_chars "
                               f"({4 * DEFAULT_MAX_DOCUMENT_CHARS:,} bytes), so more than "
                               f"{DEFAULT_MAX_DOCUMENT_CHARS:,} characters; split it or raise the limit")


def test_lenient_skips_it(folder):
    root, huge = folder
    snapshot = load_corpus("folder", str(root), lenient=True)
    assert [d.doc_id for d in snapshot.documents] == ["ok"]
    assert [s.location for s in snapshot.skipped] == [str(huge)]
    assert snapshot.skipped[0].reason.startswith("314,572,800 bytes on disk")


def test_a_smaller_limit_is_applied_from_the_size_too(tmp_path):
    root = tmp_path / "docs"
    root.mkdir()
    (root / "ok.md").write_text("# Fine\nreadable", encoding="utf-8")
    (root / "big.md").write_text("é" * 30, encoding="utf-8")  # 60 bytes, 30 characters
    with pytest.raises(CorpusError, match=r"big\.md: 60 bytes on disk, more than 4 × max_document_chars \(40 bytes\)"):
        load_corpus("folder", str(root), max_document_chars=10)
    # between the limit and 4 × the limit the characters are counted, as before
    with pytest.raises(CorpusError, match=r"doc 'big': 30 characters, more than max_document_chars \(20\)"):
        load_corpus("folder", str(root), max_document_chars=20)
    assert os.path.getsize(root / "big.md") == 60
