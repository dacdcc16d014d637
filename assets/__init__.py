"""The asset graph: corpus -> pgvector store -> question set -> ranked results -> metrics -> report.

Each asset reads its inputs, calls one eval_pipeline function and attaches metadata.
"""


from enum import Enum
from pathlib import Path
from typing import Literal, Optional

import pandas as pd
from dagster import (
    AssetCheckResult,
    AssetCheckSeverity,
    AssetExecutionContext,
    Config,
    MetadataValue,
    asset,
    asset_check,
)
from pydantic import Field

from eval_pipeline.corpus import DEMO_DATA_DIR, CorpusSnapshot, load_corpus
from eval_pipeline.engines import ENGINE_NAMES, validate_engine_names
from eval_pipeline.ingest import ChunkingConfig, StoreInfo, ingest
from eval_pipeline.questions import QuestionSet, load_beir_questions, load_question_set
from eval_pipeline.report import markdown_table, render_report, write_report
from eval_pipeline.retrieval import build_engines, embed_questions, run_engines
from eval_pipeline.scoring import HEADLINE_METRICS, score_results
from eval_pipeline.trec import write_trec_files
from resources import REPO_ROOT, DatabaseResource, EmbedderResource

DEMO_QUESTIONS = DEMO_DATA_DIR / "questions.jsonl"


class CorpusConfig(Config):
    source: Literal["demo", "folder", "jsonl", "beir"] = "demo"
    path: Optional[str] = Field(default=None, description="folder, JSONL file, or BEIR folder / corpus.jsonl[.gz]")
    lenient: bool = Field(default=False, description="skip bad records (counted and reported) instead of failing")


@asset(group_name="retrieval_eval")
def corpus_snapshot(context: AssetExecutionContext, config: CorpusConfig) -> CorpusSnapshot:
    """The documents to search, with an order-independent signature over ids and content hashes."""
    snapshot = load_corpus(config.source, config.path, lenient=config.lenient)
    for skipped in snapshot.skipped:
        context.log.warning(f"skipped {skipped.location}: {skipped.reason}")
    context.add_output_metadata(
        {
            "documents": len(snapshot.documents),
            "skipped": len(snapshot.skipped),
            "signature": snapshot.signature,
            "source": snapshot.source,
            "characters": sum(len(d.content) for d in snapshot.documents),
        }
    )
    return snapshot


class StoreConfig(Config):
    split_by: Literal["word", "sentence", "passage"] = "word"
    split_length: int = Field(default=150, ge=1)
    split_overlap: int = Field(default=20, ge=0)
    embed_title: bool = True


@asset(group_name="retrieval_eval")
def pgvector_store(
    context: AssetExecutionContext,
    config: StoreConfig,
    corpus_snapshot: CorpusSnapshot,
    database: DatabaseResource,
    embedder: EmbedderResource,
) -> StoreInfo:
    """Chunks embedded into a pgvector table named by (corpus, chunking, embedder); reused when unchanged."""
    chunking = ChunkingConfig(config.split_by, config.split_length, config.split_overlap, config.embed_title)
    info = ingest(
        corpus_snapshot,
        connection_string=database.connection_string(),
        embedder=embedder.get(),
        chunking=chunking,
        log=context.log.info,
    )
    context.add_output_metadata(
        {
            "table": info.table,
            "chunks": info.chunk_count,
            "dims": info.dims,
            "embedder": info.embedder,
            "reused": info.reused,
            "seconds": round(info.seconds, 3),
            "chunks_per_second": None if info.reused else round(info.chunks_per_second, 1),
            "database": database.describe(),
        }
    )
    return info


class QuestionSetConfig(Config):
    format: Literal["jsonl", "beir"] = Field(default="jsonl", description="our JSONL with header, or BEIR queries + qrels")
    path: Optional[str] = Field(default=None, description="JSONL file, or BEIR folder; default: the demo set")
    beir_split: str = Field(default="test", description="beir: qrels/<split>.tsv")


@asset(group_name="retrieval_eval")
def question_set(context: AssetExecutionContext, config: QuestionSetConfig, corpus_snapshot: CorpusSnapshot) -> QuestionSet:
    """The committed (cached) question set, checked against the corpus it was written for."""
    path = config.path or (DEMO_QUESTIONS if corpus_snapshot.source == "demo" else None)
    if path is None:
        raise ValueError("question_set.path is required for a corpus other than the demo corpus")
    doc_ids = (d.doc_id for d in corpus_snapshot.documents)
    if config.format == "beir":
        qs = load_beir_questions(path, split=config.beir_split, doc_ids=doc_ids)
    else:
        qs = load_question_set(path, corpus_signature=corpus_snapshot.signature, doc_ids=doc_ids)
    context.add_output_metadata({**qs.counts(), "fingerprint": qs.fingerprint, "path": str(path)})
    return qs


# An Enum (not list[str]) so that Dagster rejects an unknown engine when the run is launched,
# before any embedding work, and the launchpad offers the valid names.
Engine = Enum("Engine", [(name, name) for name in ENGINE_NAMES], type=str)


class RetrievalConfig(Config):
    engines: Optional[list[Engine]] = Field(default=None, description=f"default: all of {', '.join(ENGINE_NAMES)}")
    depth: int = Field(default=20, ge=1, le=1000, description="documents kept per question")
    chunk_top_k: int = Field(default=100, ge=1, le=10000, description="chunks fetched per leg before normalizing")


@asset(group_name="retrieval_eval")
def ranked_results(
    context: AssetExecutionContext,
    config: RetrievalConfig,
    corpus_snapshot: CorpusSnapshot,
    pgvector_store: StoreInfo,
    question_set: QuestionSet,
    database: DatabaseResource,
    embedder: EmbedderResource,
) -> pd.DataFrame:
    """Every engine's ranked documents, scores and latency for every question; errors kept per question."""
    names = validate_engine_names([e.value for e in config.engines] if config.engines else ENGINE_NAMES)
    questions = question_set.questions
    engines = build_engines(
        names,
        snapshot=corpus_snapshot,
        connection_string=database.connection_string(),
        table=pgvector_store.table,
        dims=pgvector_store.dims,
        depth=config.depth,
        chunk_top_k=config.chunk_top_k,
    )
    embeddings, embed_seconds = (None, 0.0)
    if any(e.needs_embedding for e in engines):
        embeddings, embed_seconds = embed_questions(embedder.get(), questions)
    results = run_engines(engines, questions, embeddings)
    errored = results.groupby("engine", sort=False)["error"].apply(lambda s: int(s.notna().sum()))
    context.add_output_metadata(
        {
            "questions": len(questions),
            "engines": ", ".join(names),
            "query_embedding_seconds": round(embed_seconds, 3),
            "errored_by_engine": MetadataValue.json(errored.to_dict()),
            "latency_p50_ms_by_engine": MetadataValue.json(
                results.groupby("engine", sort=False)["latency_ms"].median().round(2).to_dict()
            ),
        }
    )
    return results


@asset(group_name="retrieval_eval")
def retrieval_metrics(
    context: AssetExecutionContext, ranked_results: pd.DataFrame, question_set: QuestionSet
) -> dict[str, pd.DataFrame]:
    """Per-engine means (hit@k, MRR, recall, nDCG@10) and the per-question scores behind them."""
    per_query, summary = score_results(ranked_results, question_set.questions)
    columns = ["engine", *HEADLINE_METRICS, "n_answerable", "n_errored"]
    context.add_output_metadata(
        {
            "summary": MetadataValue.md(markdown_table(summary, columns)),
            **{f"ndcg@10 {r['engine']}": float(r["ndcg@10"]) for _, r in summary.iterrows()},
        }
    )
    return {"summary": summary, "per_query": per_query}


@asset_check(asset=retrieval_metrics, description="Every question was answered without an engine error.")
def no_errored_questions(retrieval_metrics: dict[str, pd.DataFrame]) -> AssetCheckResult:
    summary = retrieval_metrics["summary"]
    errored = {r["engine"]: int(r["n_errored"]) for _, r in summary.iterrows()}
    total = sum(errored.values())
    return AssetCheckResult(
        passed=total == 0,
        severity=AssetCheckSeverity.ERROR,
        metadata={"errored_total": total, "threshold": 0, "errored_by_engine": MetadataValue.json(errored)},
    )


class ReportConfig(Config):
    results_dir: str = Field(default=str(REPO_ROOT / "results"), description="where results.md and per_query.jsonl go")


@asset(group_name="retrieval_eval")
def report(
    context: AssetExecutionContext,
    config: ReportConfig,
    retrieval_metrics: dict[str, pd.DataFrame],
    corpus_snapshot: CorpusSnapshot,
    pgvector_store: StoreInfo,
    question_set: QuestionSet,
) -> dict[str, str]:
    """results.md (the comparison and how to read it) and per_query.jsonl, also shown in the UI."""
    provenance = {
        "corpus": f"{corpus_snapshot.source} ({len(corpus_snapshot.documents)} documents, "
        f"{len(corpus_snapshot.skipped)} skipped, signature {corpus_snapshot.signature})",
        "question set": f"{question_set.path} (fingerprint {question_set.fingerprint})",
        "embedder": pgvector_store.embedder,
        "chunking": f"{pgvector_store.chunking.split_by} {pgvector_store.chunking.split_length}"
        f"/{pgvector_store.chunking.split_overlap}, {pgvector_store.chunk_count} chunks",
        "vector table": pgvector_store.table,
        "run id": context.run_id,
    }
    markdown = render_report(retrieval_metrics["summary"], retrieval_metrics["per_query"], provenance)
    paths = write_report(config.results_dir, markdown, retrieval_metrics["per_query"])
    per_query = retrieval_metrics["per_query"]
    runs = {
        engine: dict(zip(group["qid"], group["doc_ids"])) for engine, group in per_query.groupby("engine", sort=False)
    }
    try:
        paths.update(write_trec_files(Path(config.results_dir) / "trec", runs, question_set.questions))
    except ValueError as exc:  # ids with whitespace cannot be written in TREC format
        context.log.warning(f"TREC run files not written: {exc}")
    context.log.info(f"report written to {paths['report']}")
    context.add_output_metadata({"report": MetadataValue.md(markdown), "path": MetadataValue.path(paths["report"])})
    return paths
