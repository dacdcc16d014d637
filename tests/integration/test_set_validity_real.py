"""A generated (ICT) set and a hand-written one ranked by the same variants against the real
embedded Postgres and model, through the ranking's one-step path, and compared by the report's
set_validity section (eval_pipeline.reporting.set_validity)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from eval_pipeline.common.state import StateDir
from eval_pipeline.config.sweep import parse_sweep
from eval_pipeline.questions.cache import write_generated_question_set
from eval_pipeline.questions.generation import document_units
from eval_pipeline.questions.ict import generate_ict_questions
from eval_pipeline.questions.sets import load_question_set
from eval_pipeline.reporting.set_validity import measure_set_validity, rank_compared_set, render_set_validity
from eval_pipeline.store.ingest import ChunkingConfig, ingest

pytestmark = pytest.mark.integration


def test_ict_set_and_human_set_ranked_and_compared(tmp_path, pg_uri, local_embedder, tiny_snapshot, tiny_questions):
    store = ingest(tiny_snapshot, connection_string=pg_uri, embedder=local_embedder,
                   chunking=ChunkingConfig(split_length=30, split_overlap=5), log=lambda m: None)
    result = generate_ict_questions(document_units(tiny_snapshot.documents), documents=tiny_snapshot.documents,
                                    k=2, frac=0.15)
    result.corpus_signature = tiny_snapshot.signature
    path = tmp_path / "ict.jsonl"
    write_generated_question_set(path, result)
    ict_set = load_question_set(path, corpus_signature=tiny_snapshot.signature,
                                doc_ids=[d.doc_id for d in tiny_snapshot.documents])
    assert any(q.gold for q in ict_set.questions)
    variants = parse_sweep({"variants": [{"engine": "pg-keyword", "match": "any"}, {"engine": "pg-dense"},
                                         {"engine": "bm25"}, {"engine": "metadata"}]}).variants

    def no_reranker(spec, warm):
        raise AssertionError("no variant reranks")

    common = dict(snapshot=tiny_snapshot, store=store, state=StateDir(tmp_path / "state"), connection_string=pg_uri,
                  embedder=local_embedder, build_reranker=no_reranker, code_version="test", log=lambda m: None)
    human = rank_compared_set("hand-written", tiny_questions, variants, **common)
    generated = rank_compared_set("ict", ict_set, variants, **common)
    assert set(generated.per_variant) == {v.key for v in variants}
    assert len(generated.per_variant["pg-dense"]) == len(ict_set.questions)

    measured = measure_set_validity(SimpleNamespace(per_variant=human.per_variant, question_set=tiny_questions,
                                                    compared_sets=[generated]), n_resamples=100)
    assert measured is not None
    part = render_set_validity(measured)
    lines = "\n".join(part.lines({}) if callable(part.lines) else part.lines)
    assert "B is a weak generated set" in lines and "| ndcg@10 |" in lines
    tau = part.metadata["set tau ndcg@10"]
    assert tau is None or -1.0 <= tau <= 1.0
    assert set(part.output["set_validity"][0]["variants"]) == {v.key for v in variants}
