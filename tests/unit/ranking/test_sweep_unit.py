"""The Sweep without a database: what a variant's results may depend on.

A variant's results must be a function of its own configuration, never of which other
variants happen to share its Sweep (the whole sweep in-process, one batch of the parallel
job, or the variant alone): otherwise a cached or recorded result describes a run that the
variant alone would not reproduce.
"""

from __future__ import annotations

import pandas as pd

from eval_pipeline.corpus.sources import CorpusSnapshot, Document
from eval_pipeline.config.sweep import parse_sweep
from eval_pipeline.questions.sets import Question
from eval_pipeline.ranking import sweep as sweep_mod
from eval_pipeline.ranking.caches import ResultsCache
from eval_pipeline.ranking.hits import ChunkHit
from eval_pipeline.ranking.rerankers import RerankError
from eval_pipeline.ranking.sweep import Sweep

QUESTIONS = [Question("q1", "alpha", ("d1",)), Question("q2", "beta", ("d2",))]
SNAPSHOT = CorpusSnapshot(documents=(Document("d1", "Alpha", "", "a.md", "alpha text"),
                                     Document("d2", "Beta", "", "b.md", "beta text")), source="test")


class FakeDense:
    """Stands in for LeanDenseEngine: records the depth of each dense leg it serves (the
    engine searches HNSW with ef_search max(40, depth) of its own)."""

    created: list[int] = []

    def __init__(self, connection_string, table, *, chunk_top_k, exact=False):
        self.top_k = chunk_top_k
        FakeDense.created.append(chunk_top_k)

    def chunk_hits(self, query, embedding):
        return [ChunkHit("d1:0", "d1", 1.0 if self.top_k >= 100 else 0.5)]


def _sweep(monkeypatch) -> Sweep:
    from eval_pipeline.ranking import dense

    monkeypatch.setattr(dense, "LeanDenseEngine", FakeDense)
    s = Sweep(snapshot=SNAPSHOT, connection_string="postgresql://u@h/db", table="t",
              query_embeddings={"q1": [1.0, 0.0], "q2": [0.0, 1.0]}, embed_ms_per_query=0.0)
    monkeypatch.setattr(s, "leg_hits", _only_dense(s.leg_hits))
    return s


def _only_dense(real):
    def leg_hits(name, top_k, q, settings=None):
        if name != "dense":
            return sweep_mod._Timed([], 0.0, None)
        return real(name, top_k, q, settings)
    return leg_hits


def _variants():
    return {v.key: v for v in parse_sweep({"variants": [
        {"engine": "pg-dense", "name": "shallow", "chunk_top_k": 40},
        {"engine": "pg-dense", "name": "deep", "chunk_top_k": 200}]}).variants}


def test_a_dense_leg_searches_with_its_own_depth_whatever_else_is_in_the_sweep(monkeypatch):
    variants = _variants()
    FakeDense.created.clear()
    alone = _sweep(monkeypatch).run([variants["shallow"]], QUESTIONS)["shallow"]
    FakeDense.created.clear()
    together = _sweep(monkeypatch).run([variants["deep"], variants["shallow"]], QUESTIONS)["shallow"]
    assert sorted(FakeDense.created) == [40, 200]  # one engine per depth, never the deepest for all
    pd.testing.assert_series_equal(alone["scores"], together["scores"])


class FailingLLM:
    kind = "llm"
    fallbacks = 0

    def identity(self):
        return {"kind": "llm", "model": "m", "version": "1"}

    def rerank(self, query, candidates, *, query_embedding=None):
        if query == "alpha":
            raise RerankError("llm reranker call failed: LLMCallError: HTTP 500")
        self.fallbacks += 1  # answered, but named no candidate: first-stage order
        return list(candidates)


def test_a_failing_reranker_errors_the_question_and_a_fallback_is_marked(monkeypatch):
    variant = parse_sweep({"variants": [{"engine": "metadata", "reranker": "llm"}]}).variants[0]
    s = Sweep(snapshot=SNAPSHOT, connection_string="postgresql://u:secret@h/db", table="t",
              query_embeddings={}, embed_ms_per_query=0.0, rerankers={variant.key: FailingLLM()})
    s._chunks = [("d1:0", "d1", "alpha text"), ("d2:0", "d2", "beta text")]
    frame = s.run([variant], QUESTIONS + [Question("q3", "alpha beta", ("d1",))])[variant.key]
    by_qid = frame.set_index("qid")
    assert by_qid.loc["q1", "error"].startswith("RerankError: llm reranker call failed")
    assert by_qid.loc["q1", "doc_ids"] == [] and by_qid.loc["q1", "miss_class"] == "errored"
    assert not by_qid.loc["q1", "rerank_fallback"]
    assert by_qid.loc["q3", "rerank_fallback"] and pd.isna(by_qid.loc["q3", "error"])
    assert not ResultsCache.cacheable(frame)
    config = __import__("json").loads(frame["variant_config"].iloc[0])
    assert config["reranker_identity"] == {"kind": "llm", "model": "m", "version": "1"}
    assert set(frame["store_table"]) == {"t"}


def test_each_returned_document_names_the_chunk_that_ranked_it(monkeypatch):
    """An answer is written from the chunk that put a document in the results: the frame keeps
    it beside each doc id (the metadata engine ranks no chunk: its document's first chunk)."""

    class Reverses:
        def identity(self):
            return {"kind": "test-reverse"}

        def rerank(self, query, candidates, query_embedding=None):
            return list(reversed(candidates))

    dense = _variants()["deep"]
    metadata, reranked = parse_sweep({"variants": [{"engine": "metadata"},
                                                   {"engine": "metadata", "reranker": "llm",
                                                    "name": "meta-rr"}]}).variants
    s = _sweep(monkeypatch)
    s.rerankers = {reranked.key: Reverses()}
    s._chunks = [("d1:0", "d1", "alpha text"), ("d1:1", "d1", "more alpha"), ("d2:0", "d2", "beta text")]
    frames = s.run([dense, metadata, reranked], QUESTIONS + [Question("q3", "alpha beta", ("d1",))])
    row = frames[dense.key].set_index("qid").loc["q1"]
    assert list(row["doc_ids"]) == ["d1"] and list(row["chunk_ids"]) == ["d1:0"]
    for key in (metadata.key, reranked.key):
        for _, r in frames[key].iterrows():
            assert [c.split(":")[0] for c in r["chunk_ids"]] == list(r["doc_ids"])
            assert all(c.endswith(":0") for c in r["chunk_ids"])
    q3 = frames[reranked.key].set_index("qid").loc["q3"]
    assert list(q3["doc_ids"]) == list(reversed(frames[metadata.key].set_index("qid").loc["q3", "doc_ids"]))
