"""A folder corpus holding a file whose name is not UTF-8: strict mode refuses it naming the folder
and the name (undecodable bytes shown as \\xNN), lenient mode skips it; never a bare
UnicodeEncodeError from the signature (#25)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from eval_pipeline.corpus.sources import CorpusError, SkippedRecord, load_corpus

BAD = os.fsdecode(b"caf\xe9")  # the name as Python reads it from Linux: "caf\udce9"


def _folder(tmp_path: Path, bad_name: str) -> Path:
    root = tmp_path / "docs"
    (root / "sub").mkdir(parents=True)
    (root / "ok.md").write_text("# Fine\nreadable", encoding="utf-8")
    bad = root / bad_name
    bad.parent.mkdir(parents=True, exist_ok=True)
    try:
        bad.write_text("# Bad name\nthe content is fine", encoding="utf-8")
    except (OSError, UnicodeEncodeError):
        pytest.skip("this file system does not take a file name that is not UTF-8")
    return root


@pytest.mark.parametrize("bad_name, shown", [
    (f"{BAD}.md", "caf\\xe9.md"),
    (f"sub/{BAD}.txt", "sub/caf\\xe9.txt"),
    (f"{BAD}/notes.md", "caf\\xe9/notes.md"),
    (f"{BAD}.pdf", "caf\\xe9.pdf"),  # the name is reported before the type
])
def test_a_file_name_that_is_not_utf8(tmp_path, bad_name, shown):
    root = _folder(tmp_path, bad_name)
    message = f"{root}/{shown}: the file name is not valid UTF-8 (bytes shown as \\xNN); rename the file"
    with pytest.raises(CorpusError) as info:
        load_corpus("folder", str(root))
    assert str(info.value) == message
    snapshot = load_corpus("folder", str(root), lenient=True)
    assert [d.doc_id for d in snapshot.documents] == ["ok"]
    assert len(snapshot.signature) == 16
    assert snapshot.skipped == (SkippedRecord(f"{root}/{shown}", message.partition(": ")[2]),)
