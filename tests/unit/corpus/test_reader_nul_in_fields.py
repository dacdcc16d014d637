"""A NUL character (JSON "\\u0000") in a document's text is refused where it is read, naming the
file, the line and the field: the corpus signature joins the fields with NUL, so text moved across
a field boundary by one would keep the signature (and every cache keyed by it) while the metadata
engine, which weighs the fields apart, ranks differently; and Postgres cannot store it. Folder
files holding NUL bytes were already refused as binary."""

from __future__ import annotations

import json

import pytest

from eval_pipeline.corpus.sources import CorpusError, load_corpus


@pytest.mark.parametrize("field", ["title", "description", "filename", "content"])
def test_a_jsonl_field_holding_nul_is_refused_naming_where(tmp_path, field):
    path = tmp_path / "corpus.jsonl"
    good = {"doc_id": "a", "content": "fine"}
    bad = {"doc_id": "b", "content": "text", field: "x\u0000zebra migration"}
    path.write_text(json.dumps(good) + "\n" + json.dumps(bad) + "\n")
    with pytest.raises(CorpusError, match=rf"corpus\.jsonl:2: field '{field}' holds a NUL character"):
        load_corpus("jsonl", path)


def test_lenient_mode_skips_it_and_says_so(tmp_path):
    path = tmp_path / "corpus.jsonl"
    path.write_text(json.dumps({"doc_id": "a", "content": "fine"}) + "\n"
                    + json.dumps({"doc_id": "b", "title": "x\u0000y", "content": "text"}) + "\n")
    snapshot = load_corpus("jsonl", path, lenient=True)
    assert [d.doc_id for d in snapshot.documents] == ["a"]
    assert any("NUL" in skipped.reason and skipped.location.endswith("corpus.jsonl:2") for skipped in snapshot.skipped)


def test_a_beir_text_holding_nul_is_refused(tmp_path):
    (tmp_path / "corpus.jsonl").write_text(json.dumps({"_id": "1", "title": "t", "text": "a\u0000b"}) + "\n")
    with pytest.raises(CorpusError, match=r"corpus\.jsonl:1: field 'text' holds a NUL character"):
        load_corpus("beir", tmp_path)
