"""Runs engines over a question set and records, per question, the ranked documents, scores,
latency and any error.

An engine that raises on a question does not stop the run and does not lose the question:
the question is recorded as an errored miss (empty ranking, the error text kept), counted,
and scored as a miss by `eval_pipeline.metrics`.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence

import pandas as pd

from eval_pipeline.corpus import CorpusSnapshot
from eval_pipeline.engines import (
    BM25Engine,
    Engine,
    HybridEngine,
    MetadataEngine,
    PgDenseEngine,
    PgKeywordEngine,
    validate_engine_names,
)
from eval_pipeline.questions import Question

RESULT_COLUMNS = ["engine", "qid", "doc_ids", "scores", "latency_ms", "error"]


def build_engines(
    names: Sequence[str],
    *,
    snapshot: CorpusSnapshot,
    connection_string: str,
    table: str,
    dims: int,
    depth: int = 20,
    chunk_top_k: int = 100,
) -> list[Engine]:
    from eval_pipeline.ingest import fetch_chunks, open_document_store

    validate_engine_names(names)
    store = None
    if {"pg-keyword", "pg-dense", "hybrid"} & set(names):
        store = open_document_store(connection_string, table, dims, hnsw=True)
    engines: list[Engine] = []
    for name in names:
        if name == "pg-keyword":
            engines.append(PgKeywordEngine(store, depth=depth, chunk_top_k=chunk_top_k))
        elif name == "pg-dense":
            engines.append(PgDenseEngine(store, depth=depth, chunk_top_k=chunk_top_k))
        elif name == "hybrid":
            engines.append(
                HybridEngine(
                    [PgKeywordEngine(store, depth=depth, chunk_top_k=chunk_top_k),
                     PgDenseEngine(store, depth=depth, chunk_top_k=chunk_top_k)],
                    depth=depth,
                )
            )
        elif name == "bm25":
            engines.append(BM25Engine(fetch_chunks(connection_string, table), depth=depth, chunk_top_k=chunk_top_k))
        elif name == "metadata":
            engines.append(MetadataEngine(snapshot.documents, depth=depth))
    return engines


def run_engine(
    engine: Engine,
    questions: Sequence[Question],
    query_embeddings: Mapping[str, Sequence[float]] | None,
) -> pd.DataFrame:
    """One row per question: ranked doc ids and scores, latency in ms, error text or None."""
    rows = []
    for q in questions:
        embedding = query_embeddings.get(q.qid) if (engine.needs_embedding and query_embeddings) else None
        started = time.perf_counter()
        try:
            if engine.needs_embedding and embedding is None:
                raise RuntimeError(f"no query embedding for {q.qid}")
            ranked = engine.search(q.question, embedding)
            error = None
        except Exception as exc:  # recorded per question, never skipped
            ranked, error = [], f"{type(exc).__name__}: {exc}"[:500]
        latency_ms = (time.perf_counter() - started) * 1000.0
        rows.append(
            {
                "engine": engine.name,
                "qid": q.qid,
                "doc_ids": [r.doc_id for r in ranked],
                "scores": [r.score for r in ranked],
                "latency_ms": latency_ms,
                "error": error,
            }
        )
    return pd.DataFrame(rows, columns=RESULT_COLUMNS)


def run_engines(
    engines: Sequence[Engine],
    questions: Sequence[Question],
    query_embeddings: Mapping[str, Sequence[float]] | None,
) -> pd.DataFrame:
    frames = [run_engine(e, questions, query_embeddings) for e in engines]
    return pd.concat(frames, ignore_index=True)


def embed_questions(embedder, questions: Sequence[Question]) -> tuple[dict[str, list[float]], float]:
    """All question embeddings in one batched call; returns them by qid and the seconds it took."""
    started = time.perf_counter()
    vectors = embedder.embed([q.question for q in questions])
    if len(vectors) != len(questions):
        raise RuntimeError(f"embedder returned {len(vectors)} vectors for {len(questions)} questions")
    return {q.qid: v for q, v in zip(questions, vectors)}, time.perf_counter() - started
