"""Zero-width and bidi control characters glued to words make keyword search find nothing: the
corpus loader counts them per document and notes each such document (location and counts, the
skipped records' shape, in `CorpusSnapshot.notes`), never silently changing the text (#25, item 8)."""

from __future__ import annotations

import json
import logging

import pytest

from eval_pipeline.corpus.sources import INVISIBLE_CHARACTERS, SkippedRecord, invisible_characters, load_corpus

ALL = ["\u200b", "\u200c", "\u200d", "\u200e", "\u200f", "\u202a", "\u202b", "\u202c", "\u202d", "\u202e",
       "\u2066", "\u2067", "\u2068", "\u2069", "\ufeff"]


def test_the_characters_counted():
    assert sorted(INVISIBLE_CHARACTERS) == ALL


def test_counts_per_character():
    assert invisible_characters("pass\u200bword and re\u202efund\u200b") == {"U+200B": 2, "U+202E": 1}
    assert invisible_characters("\ufeffa leading byte order mark is not counted") == {}
    assert invisible_characters("but one in\ufefftext is") == {"U+FEFF": 1}
    assert invisible_characters("plain text, é, 日本, emoji 👍") == {}


@pytest.mark.parametrize("ch", ALL, ids=[f"U+{ord(c):04X}" for c in ALL])
def test_a_jsonl_document_is_noted_and_kept(tmp_path, ch, caplog):
    path = tmp_path / "c.jsonl"
    rows = [{"doc_id": "a", "content": "clean text"}, {"doc_id": "b", "content": f"x re{ch}fund{ch} policy"}]
    path.write_text("\n".join(json.dumps(r, ensure_ascii=False) for r in rows) + "\n", encoding="utf-8")
    with caplog.at_level(logging.WARNING, logger="eval_pipeline.corpus.sources"):
        snapshot = load_corpus("jsonl", str(path))
    assert snapshot.by_id()["b"].content == f"x re{ch}fund{ch} policy"  # unchanged
    assert snapshot.skipped == ()
    name = f"U+{ord(ch):04X}"
    assert snapshot.notes == (SkippedRecord(f"{path}:2", f"2 invisible characters ({name} ×2: zero-width or bidi "
                                            "controls) in the text; keyword search does not match a word they touch "
                                            "(the text is kept as it is)"),)
    assert f"{path}:2" in caplog.text


def test_a_folder_document_is_noted_and_the_notes_survive_spooling(tmp_path):
    root = tmp_path / "docs"
    root.mkdir()
    (root / "a.md").write_text("# A\nvisible", encoding="utf-8")
    (root / "b.md").write_text("# B\npass\u200bword \u2066reset\u2069", encoding="utf-8")
    snapshot = load_corpus("folder", str(root))
    assert [n.location for n in snapshot.notes] == [str(root / "b.md")]
    assert snapshot.notes[0].reason.startswith("3 invisible characters (U+200B ×1, U+2066 ×1, U+2069 ×1: ")
    assert snapshot.spool_to(tmp_path / "spool").notes == snapshot.notes


def test_a_clean_corpus_has_no_notes():
    assert load_corpus("demo").notes == ()


def test_a_leading_byte_order_mark_of_a_file_is_not_noted(tmp_path):
    root = tmp_path / "docs"
    root.mkdir()
    (root / "a.md").write_bytes("\ufeff# A\nvisible".encode("utf-8"))
    assert load_corpus("folder", str(root)).notes == ()


def test_the_log_is_bounded_and_every_document_noted(tmp_path, caplog):
    path = tmp_path / "c.jsonl"
    path.write_text("".join(json.dumps({"doc_id": f"d{i}", "content": f"w\u200bx {i}"}) + "\n" for i in range(50)),
                    encoding="utf-8")
    with caplog.at_level(logging.WARNING, logger="eval_pipeline.corpus.sources"):
        snapshot = load_corpus("jsonl", str(path))
    assert len(snapshot.notes) == 50
    assert len(caplog.records) == 21
    assert caplog.records[-1].getMessage() == (f"jsonl:{path}: 30 more documents hold invisible characters "
                                               "(CorpusSnapshot.notes lists every one)")
