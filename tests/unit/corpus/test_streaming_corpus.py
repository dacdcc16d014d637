"""Loading a corpus straight into its spool (`load_corpus(..., spool_to=folder)`): the documents are
checked and signed one at a time and sorted on disk, so loading holds a bounded part of the
corpus; the signature, the spool's name and content, and every error, skipped record and note
are what loading it in memory gives."""

from __future__ import annotations

import hashlib
import json
import random
import tracemalloc

import pytest

from eval_pipeline.corpus import sources
from eval_pipeline.corpus.sources import CorpusError, CorpusSnapshot, Document, corpus_signature, load_corpus

DEMO_SIGNATURE = "91865b2c803deb64"  # before streaming: existing tables and spools are named by it
DEMO_SPOOL_NAME = "91865b2c803deb64-f42e28ad.jsonl"


def _write_jsonl(path, records):
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in records), encoding="utf-8")
    return path


def _records(n, *, chars=2_000, seed=0):
    rng = random.Random(seed)
    ids = [f"doc-{i:06d}" for i in range(n)]
    rng.shuffle(ids)  # file order is not the signature's order
    return [{"doc_id": doc_id, "title": f"Title {doc_id}", "content": f"{doc_id} " + "x" * chars,
             "metadata": {"team": rng.choice(["ops", "hr"])}} for doc_id in ids]


def _old_spool_name(documents):
    """How the spool was named before streaming: the signature and a digest of the records' metadata."""
    ordered = sorted(documents, key=lambda d: d.doc_id + "\t")
    metadata = json.dumps([[d.doc_id, d.metadata] for d in ordered], sort_keys=True, default=str)
    return f"{corpus_signature(documents)}-{hashlib.sha256(metadata.encode()).hexdigest()[:8]}.jsonl"


def test_the_demo_corpus_keeps_its_signature_and_spool_name(tmp_path):
    in_memory = load_corpus("demo")
    streamed = load_corpus("demo", spool_to=tmp_path)
    assert in_memory.signature == streamed.signature == DEMO_SIGNATURE
    assert streamed.spool.name == in_memory.spool_to(tmp_path / "again").spool.name == DEMO_SPOOL_NAME
    assert streamed.spool.read_bytes() == (tmp_path / "again" / DEMO_SPOOL_NAME).read_bytes()
    assert not streamed.loaded and streamed.count == in_memory.count == 36


def test_a_streamed_load_signs_names_and_orders_like_the_in_memory_one(tmp_path, monkeypatch):
    monkeypatch.setattr(sources, "SORT_RUN_CHARS", 20_000)  # many sorted runs, merged
    path = _write_jsonl(tmp_path / "c.jsonl", _records(300))
    in_memory = load_corpus("jsonl", str(path))
    streamed = load_corpus("jsonl", str(path), spool_to=tmp_path / "spool")
    assert streamed.signature == corpus_signature(in_memory.documents) == in_memory.signature
    assert streamed.spool.name == _old_spool_name(in_memory.documents)
    assert [d.doc_id for d in streamed.iter_sorted()] == [d.doc_id for d in in_memory.iter_sorted()]
    assert list(streamed.iter_sorted()) == list(in_memory.iter_sorted())
    assert [d.metadata for d in streamed.iter_sorted()] == [d.metadata for d in in_memory.iter_sorted()]
    assert streamed.characters == sum(len(d.content) for d in in_memory.documents)
    assert not list((tmp_path / "spool").glob(".*"))  # no sorted run or provisional file left behind


def _peak_loading(path, spool, monkeypatch) -> int:
    monkeypatch.setattr(sources, "SORT_RUN_CHARS", 1_000_000)
    tracemalloc.start()
    try:
        snapshot = load_corpus("jsonl", str(path), spool_to=spool)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert not snapshot.loaded
    return peak


def test_loading_into_the_spool_holds_a_bounded_part_of_the_corpus(tmp_path, monkeypatch):
    small = _write_jsonl(tmp_path / "small.jsonl", _records(1_000))
    large = _write_jsonl(tmp_path / "large.jsonl", _records(8_000, seed=1))  # 16 MB of text
    peak_small = _peak_loading(small, tmp_path / "s", monkeypatch)
    peak_large = _peak_loading(large, tmp_path / "l", monkeypatch)
    corpus_bytes = large.stat().st_size
    # Eight times the documents: the peak is one sorted run (1 M characters, as Python objects)
    # plus 16-byte id digests, not the corpus.
    assert peak_large < corpus_bytes / 4, (peak_small, peak_large, corpus_bytes)
    assert peak_large < peak_small + 2_000_000, (peak_small, peak_large)


def test_a_spooled_snapshots_documents_are_read_from_the_spool_never_held(tmp_path):
    path = _write_jsonl(tmp_path / "c.jsonl", _records(50, chars=50))
    streamed = load_corpus("jsonl", str(path), spool_to=tmp_path / "spool")
    documents = streamed.documents
    assert len(documents) == 50 and documents[0].doc_id == "doc-000000" and documents[-1].doc_id == "doc-000049"
    assert [d.doc_id for d in documents] == sorted(d.doc_id for d in documents)
    assert [d.doc_id for d in documents[2:5]] == ["doc-000002", "doc-000003", "doc-000004"]
    assert not streamed.loaded
    assert set(streamed.by_id(["doc-000007", "doc-000003", "nope"])) == {"doc-000007", "doc-000003"}
    assert streamed.by_id(["doc-000007"])["doc-000007"].content.startswith("doc-000007 ")
    assert list(streamed.doc_ids()) == [d.doc_id for d in documents]
    assert not streamed.loaded


# Every outcome of a load, streamed or in memory: the same error, or the same documents, skipped
# records and notes.
_CASES = {
    "duplicate": [{"doc_id": "a", "content": "one"}, {"doc_id": "b", "content": "two"},
                  {"doc_id": "a", "content": "again"}, {"doc_id": "c", "content": "three"},
                  {"doc_id": "b", "content": "and again"}],
    "duplicate then a bad line": [{"doc_id": "a", "content": "one"}, {"doc_id": "a", "content": "two"}, "{bad"],
    "too long then a bad line": [{"doc_id": "a", "content": "x" * 50}, {"doc_id": "b", "content": "ok"}, "{bad"],
    "too long twice": [{"doc_id": "a", "content": "x" * 50}, "[1]", {"doc_id": "b", "content": "y" * 60},
                       {"doc_id": "c", "content": "fine"}],
    "all too long": [{"doc_id": "a", "content": "x" * 50}, {"doc_id": "b", "content": "y" * 60}],
    "a duplicate of a too long one": [{"doc_id": "a", "content": "x" * 50}, {"doc_id": "a", "content": "ok"},
                                      {"doc_id": "b", "content": "fine"}],
    "nothing usable": ["{bad", "[2]"],
    "invisible characters": [{"doc_id": "a", "title": "T\u200bitle", "content": "zero\u200dwidth"},
                             {"doc_id": "b", "content": "plain"}],
}


def _outcome(path, lenient, spool):
    try:
        snapshot = load_corpus("jsonl", str(path), lenient=lenient, max_document_chars=40, spool_to=spool)
    except CorpusError as exc:
        return ("error", str(exc))
    return (sorted(snapshot.documents, key=lambda d: d.doc_id), snapshot.skipped, snapshot.notes,
            snapshot.signature, snapshot.count)


@pytest.mark.parametrize("lenient", [False, True], ids=["strict", "lenient"])
@pytest.mark.parametrize("case", list(_CASES))
def test_a_streamed_load_has_the_in_memory_loads_outcome(tmp_path, case, lenient):
    path = _write_jsonl(tmp_path / "c.jsonl", _CASES[case])
    assert _outcome(path, lenient, tmp_path / "spool") == _outcome(path, lenient, None)


def test_duplicates_name_where_the_id_was_first_seen(tmp_path):
    path = _write_jsonl(tmp_path / "c.jsonl", _CASES["duplicate"])
    with pytest.raises(CorpusError, match=rf"^{path}:3: duplicate doc_id 'a' \(first seen at {path}:1\)$"):
        load_corpus("jsonl", str(path), spool_to=tmp_path / "spool")
    lenient = load_corpus("jsonl", str(path), lenient=True, spool_to=tmp_path / "spool")
    assert [(s.location, s.reason) for s in lenient.skipped] == [
        (f"{path}:3", f"duplicate doc_id 'a' (first seen at {path}:1)"),
        (f"{path}:5", f"duplicate doc_id 'b' (first seen at {path}:2)")]
    assert [d.content for d in lenient.iter_sorted()] == ["one", "two", "three"]


def test_a_too_long_document_is_reported_after_the_read_errors_as_before(tmp_path):
    path = _write_jsonl(tmp_path / "c.jsonl", _CASES["too long then a bad line"])
    with pytest.raises(CorpusError, match=rf"^{path}:3: invalid JSON"):  # the whole file is read first
        load_corpus("jsonl", str(path), max_document_chars=40, spool_to=tmp_path / "spool")
    lenient = load_corpus("jsonl", str(path), lenient=True, max_document_chars=40, spool_to=tmp_path / "spool")
    assert [s.location for s in lenient.skipped] == [f"{path}:3", "doc 'a'"]
    assert lenient.skipped[1].reason == "50 characters, more than max_document_chars (40)"


def test_an_in_memory_snapshot_spools_as_before(tmp_path):
    docs = (Document("b", "B", "", "b.md", "two", {"k": 1}), Document("a", "A", "", "a.md", "one"))
    spooled = CorpusSnapshot(documents=docs, source="x").spool_to(tmp_path)
    assert spooled.spool.name == _old_spool_name(docs) and spooled.characters == 6
    assert list(spooled.iter_sorted()) == sorted(docs, key=lambda d: d.doc_id)
