"""The ranking step's microscope (the record of each miss) reads only the gold documents' chunks
from the store, never the whole table: its records are the ones it wrote when it read the table."""

import json

import pytest

from eval_pipeline.config.sweep import parse_sweep
from eval_pipeline.corpus.sources import DEMO_DATA_DIR, load_corpus
from eval_pipeline.questions.sets import load_question_set
from eval_pipeline.ranking.sweep import Sweep
from eval_pipeline.store import ingest as ingest_module
from eval_pipeline.store.ingest import ChunkingConfig, fetch_chunk_embeddings, fetch_chunks, ingest
from tests.integration.cli import HashingEmbedder

pytestmark = pytest.mark.integration


class WholeTableSweep(Sweep):
    """The microscope as it was: the gold chunks picked out of the whole table."""

    def gold_chunks(self, gold):
        vectors = fetch_chunk_embeddings(self.connection_string, self.table)
        return [(cid, doc_id, text, vectors.get(cid)) for cid, doc_id, text in fetch_chunks(self.connection_string,
                                                                                             self.table)
                if doc_id in set(gold)]


def test_the_microscope_reads_the_golds_chunks_only_and_records_what_the_whole_table_gives(pg_uri, tmp_path,
                                                                                           monkeypatch):
    snapshot = load_corpus("demo", spool_to=tmp_path)
    embedder = HashingEmbedder()  # a weak embedder: many misses
    store = ingest(snapshot, connection_string=pg_uri, embedder=embedder,
                   chunking=ChunkingConfig(split_length=30, split_overlap=5), log=lambda m: None)
    questions = load_question_set(DEMO_DATA_DIR / "questions.jsonl", corpus_signature=snapshot.signature,
                                  doc_ids=snapshot.doc_ids()).questions
    embeddings = dict(zip([q.qid for q in questions], embedder.embed([q.question for q in questions])))
    variants = parse_sweep({"variants": [{"engine": "pg-dense", "depth": 3}, {"engine": "hybrid", "depth": 3}]}).variants

    expected = WholeTableSweep(snapshot=snapshot, connection_string=pg_uri, table=store.table,
                               query_embeddings=embeddings, embed_ms_per_query=0.0).run(variants, questions)

    def refused(*args, **kwargs):
        raise AssertionError("the whole table was read")

    monkeypatch.setattr(ingest_module, "fetch_chunks", refused)
    monkeypatch.setattr(ingest_module, "fetch_chunk_embeddings", refused)
    got = Sweep(snapshot=snapshot, connection_string=pg_uri, table=store.table, query_embeddings=embeddings,
                embed_ms_per_query=0.0).run(variants, questions)
    for key, frame in expected.items():
        records = _records(frame)
        assert _records(got[key]) == records and records  # every miss recorded as before
        misses = [r for r in records if r]
        assert any(r["answer_chunk"] for r in misses)  # the gold chunks were read for the answer
        assert all(r["evidence_error"] is None for r in misses)
    assert any(r and r["gold_cosine"] is not None for r in _records(expected["pg-dense"]))  # and their embeddings


def _records(frame):
    return [json.loads(m) if isinstance(m, str) else None for m in frame["microscope"]]
