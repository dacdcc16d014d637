"""A corpus snapshot spooled to disk: passed between steps as a reference, streamed in doc id
order without loading the corpus, and refused when its file no longer matches its signature."""

import json
import pickle

import pytest

from eval_pipeline.corpus.sources import CorpusError, CorpusSnapshot, Document, SkippedRecord, load_corpus


@pytest.fixture
def demo():
    return load_corpus("demo")


def test_a_spooled_snapshot_pickles_as_a_reference_and_loads_the_same_documents(demo, tmp_path):
    spooled = demo.spool_to(tmp_path)
    assert spooled.signature == demo.signature and spooled.count == len(demo.documents)
    data = pickle.dumps(spooled)
    assert len(data) < 2_000  # no document travels with it
    again = pickle.loads(data)
    assert again.source == demo.source and again.skipped == demo.skipped
    assert sorted(again.documents, key=lambda d: d.doc_id) == sorted(demo.documents, key=lambda d: d.doc_id)
    assert [d.metadata for d in again.iter_sorted()] == [d.metadata for d in demo.iter_sorted()]


def test_streaming_reads_one_document_at_a_time_in_the_signature_order(demo, tmp_path):
    spooled = pickle.loads(pickle.dumps(demo.spool_to(tmp_path)))
    streamed = [d.doc_id for d in spooled.iter_sorted()]
    assert streamed == [d.doc_id for d in demo.iter_sorted()] == sorted(streamed, key=lambda i: i + "\t")
    assert not spooled.loaded  # streaming never held the corpus


def test_the_spool_is_written_once_per_signature(demo, tmp_path):
    first = demo.spool_to(tmp_path)
    stamp = first.spool.stat().st_mtime_ns
    second = demo.spool_to(tmp_path)
    assert second.spool == first.spool and second.spool.stat().st_mtime_ns == stamp
    assert first.spool.name.startswith(f"{demo.signature}-") and first.spool.suffix == ".jsonl"


def test_corpora_that_differ_only_in_metadata_never_share_a_spool(tmp_path):
    docs = (Document("a", "A", "", "a.md", "one", {"team": "ops"}),)
    other = (Document("a", "A", "", "a.md", "one", {"team": "hr"}),)
    first = CorpusSnapshot(documents=docs, source="x").spool_to(tmp_path)
    second = CorpusSnapshot(documents=other, source="x").spool_to(tmp_path)
    assert first.signature == second.signature and first.spool != second.spool
    assert pickle.loads(pickle.dumps(second)).documents[0].metadata == {"team": "hr"}


def test_a_changed_spool_file_is_refused_naming_it(demo, tmp_path):
    spooled = demo.spool_to(tmp_path)
    lines = spooled.spool.read_text(encoding="utf-8").splitlines()
    record = json.loads(lines[3])
    record["content"] += " (edited)"
    lines[3] = json.dumps(record)
    spooled.spool.write_text("\n".join(lines) + "\n", encoding="utf-8")
    reread = pickle.loads(pickle.dumps(spooled))
    with pytest.raises(CorpusError, match=rf"{spooled.spool}: .*does not match the signature {demo.signature}"):
        list(reread.iter_sorted())
    with pytest.raises(CorpusError, match="does not match the signature"):  # documents: a view read from the file
        list(pickle.loads(pickle.dumps(spooled)).documents)


def test_a_missing_spool_file_is_an_error_that_says_what_to_do(demo, tmp_path):
    spooled = pickle.loads(pickle.dumps(demo.spool_to(tmp_path)))
    spooled.spool.unlink()
    with pytest.raises(CorpusError, match="materialize corpus_snapshot again"):
        _ = spooled.documents


def test_an_in_memory_snapshot_behaves_as_before():
    docs = (Document("b", "B", "", "b.md", "two"), Document("a", "A", "", "a.md", "one"))
    snap = CorpusSnapshot(documents=docs, source="test", skipped=(SkippedRecord("x:1", "bad"),))
    assert snap.documents == docs and snap.count == 2 and snap.loaded and snap.spool is None
    assert [d.doc_id for d in snap.iter_sorted()] == ["a", "b"]
    assert pickle.loads(pickle.dumps(snap)).documents == docs
    assert snap == CorpusSnapshot(documents=docs, source="test", skipped=(SkippedRecord("x:1", "bad"),))
