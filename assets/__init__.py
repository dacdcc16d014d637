"""The asset graph: corpus -> pgvector store -> question set -> ranked results -> variant metrics -> report.

ranked_results and variant_metrics are partitioned by variant (assets/partitions.py);
ranked_results is a small graph of its own (assets/ranking.py).

Each asset reads its inputs, calls one eval_pipeline function and attaches metadata.
"""

from dataclasses import asdict
from pathlib import Path
from typing import Literal, Optional

import pandas as pd
from dagster import (
    AssetCheckResult,
    AssetCheckSeverity,
    AssetExecutionContext,
    AssetKey,
    BackfillPolicy,
    Config,
    MetadataValue,
    asset,
    asset_check,
)
from pydantic import Field

from assets.partitions import SWEEP, variant_partitions
from assets.ranking import RankingConfig, ranked_results  # noqa: F401  (ranked_results: part of the graph)
from eval_pipeline.corpus import DEMO_DATA_DIR, CorpusSnapshot, load_corpus
from eval_pipeline.generation import chunk_units, document_units
from eval_pipeline.history import labels_fingerprint
from eval_pipeline.ingest import ChunkingConfig, StoreInfo, check_store_matches, chunk_documents, ingest
from eval_pipeline.question_cache import generate_question_set, write_generated_question_set
from eval_pipeline.questions import QuestionSet, load_question_set, preflight_question_set
from eval_pipeline.report import embedded_images, headline, markdown_table, publish_report
from eval_pipeline.scoring import HEADLINE_METRICS, score_variant, summarize
from eval_pipeline.sweep import stage_latency_summary
from eval_pipeline.verdict import code_version, judge_run, record_verdict, results_provenance
from resources import REPO_ROOT, DatabaseResource, EmbedderResource, LLMResource, RerankerResource

DEMO_QUESTIONS = DEMO_DATA_DIR / "questions.jsonl"


class CorpusConfig(Config):
    source: Literal["demo", "folder", "jsonl", "beir"] = "demo"
    path: Optional[str] = Field(default=None, description="folder, JSONL file, or BEIR folder / corpus.jsonl[.gz]")
    lenient: bool = Field(default=False, description="skip bad records (counted and reported) instead of failing")
    max_document_chars: int = Field(default=5_000_000, ge=1, description="longer documents are bad input")


def validate_run_config(run_config: dict) -> None:
    """Check every asset's settings (types, ranges, cross-field rules) in the run's first step,
    so a negative depth or a bad overlap fails in a second, not after the embedding."""
    classes = {"corpus_snapshot": CorpusConfig, "pgvector_store": StoreConfig, "question_set": QuestionSetConfig,
               "ranked_results": RankingConfig, "report": ReportConfig}
    for op, section in (run_config.get("ops") or {}).items():
        if op in classes and isinstance(section, dict):
            settings = classes[op](**(section.get("config") or {}))
            if isinstance(settings, StoreConfig):
                settings.chunking()


@asset(group_name="retrieval_eval")
def corpus_snapshot(context: AssetExecutionContext, config: CorpusConfig, embedder: EmbedderResource,
                    rerankers: RerankerResource) -> CorpusSnapshot:
    """The documents to search, with an order-independent signature over ids and content hashes.

    Also the run's preflight, before anything is embedded: every asset's settings, the
    question set (when this run builds it) and every reranker's model or endpoint."""
    validate_run_config(context.run.run_config)
    snapshot = load_corpus(config.source, config.path, lenient=config.lenient,
                           max_document_chars=config.max_document_chars)
    selection = context.run.asset_selection
    if selection is None or AssetKey("question_set") in selection:
        q = QuestionSetConfig(**(((context.run.run_config.get("ops") or {}).get("question_set") or {}).get("config")
                                 or {}))
        preflight_question_set(q.source, q.path, corpus_signature=snapshot.signature, beir_split=q.beir_split,
                               doc_ids=[d.doc_id for d in snapshot.documents], corpus_source=snapshot.source,
                               limit=q.limit)
    for v in SWEEP.variants:  # a missing model or an unset LLM fails here, not after the embedding
        if v.reranker.kind != "none":
            rerankers.build(v.reranker, embedder=embedder.get(), warm=False).identity()
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
    lock_timeout_s: Optional[float] = Field(
        default=None, gt=0, description="give up waiting for another run building the same table after this many "
        "seconds (default: EVAL_PIPELINE_LOCK_TIMEOUT, else 3600); the holder is logged every 30 s")

    def chunking(self) -> ChunkingConfig:
        """The library's chunking settings (which check overlap < length)."""
        return ChunkingConfig(self.split_by, self.split_length, self.split_overlap, self.embed_title)


@asset(group_name="retrieval_eval")
def pgvector_store(
    context: AssetExecutionContext,
    config: StoreConfig,
    corpus_snapshot: CorpusSnapshot,
    database: DatabaseResource,
    embedder: EmbedderResource,
) -> StoreInfo:
    """Chunks embedded into a pgvector table named by (corpus, chunking, embedder); reused when unchanged."""
    info = ingest(
        corpus_snapshot,
        connection_string=database.connection_string(),
        embedder=embedder.get(),
        chunking=config.chunking(),
        log=context.log.info,
        lock_timeout=config.lock_timeout_s,
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
    source: Literal["file", "beir", "generate"] = Field(
        default="file", description="file: a JSONL set with header (default: the committed demo set); "
        "beir: queries.jsonl + qrels/<split>.tsv; generate: back-translation with the LLM resource, cached"
    )
    path: Optional[str] = Field(default=None, description="file: the JSONL; beir: the folder; generate: output file")
    beir_split: str = Field(default="test", description="beir: qrels/<split>.tsv")
    k: Optional[int] = Field(default=None, ge=1, le=50, description="generate: questions per document (default 5)")
    abstention_frac: float = Field(default=0.15, ge=0.0, lt=1.0, description="generate: share of abstention questions")
    masking: bool = Field(default=True, description="generate: hide the document's name from the model")
    unit: Literal["document", "chunk"] = Field(default="document", description="generate: ask per document "
                                               "(k default 5) or per chunk of the default chunking (k default 1)")
    max_units: Optional[int] = Field(default=None, ge=1, description="generate: cap on units, in id order")
    allow_partial: bool = Field(default=False, description="generate: write the set even if some units failed")
    limit: Optional[int] = Field(default=None, ge=1, description="a quick run on the first N questions; its "
                                 "results get a suffixed name and never serve as a baseline")


@asset(group_name="retrieval_eval")
def question_set(
    context: AssetExecutionContext,
    config: QuestionSetConfig,
    corpus_snapshot: CorpusSnapshot,
    database: DatabaseResource,
    llm: LLMResource,
) -> QuestionSet:
    """The question set, checked against the corpus it was written for (generated ones are cached per document)."""
    doc_ids = [d.doc_id for d in corpus_snapshot.documents]
    if config.source == "generate":
        client = llm.get()  # fails here, before any call, if the model is not configured
        state = Path(database.state_dir)
        path = Path(config.path or state / f"generated_questions_{corpus_snapshot.signature}.jsonl")
        if config.unit == "chunk":
            chunks = chunk_documents(corpus_snapshot, ChunkingConfig())
            units = chunk_units([(c.id, c.meta["doc_id"], c.content) for c in chunks], corpus_snapshot.documents)
        else:
            units = document_units(corpus_snapshot.documents)
        result = generate_question_set(
            units, ask=client.complete, map_fn=client.map,
            model=f"{client.model}@{client.base_url or 'default'}", k=config.k, frac=config.abstention_frac,
            masking=config.masking, max_units=config.max_units, cache_path=state / "question_cache.jsonl",
            corpus_signature=corpus_snapshot.signature, theme_titles=[d.title for d in corpus_snapshot.documents],
            log=context.log.warning,
        )
        for warning in result.warnings:
            context.log.warning(warning)
        write_generated_question_set(path, result, allow_partial=config.allow_partial)
        context.add_output_metadata({**{f"generation_{k}": v for k, v in result.counts().items()},
                                     "llm_usage": MetadataValue.json(client.usage)})
        qs = load_question_set(path, corpus_signature=corpus_snapshot.signature, doc_ids=doc_ids)
        qs = qs.limit(config.limit) if config.limit is not None else qs
    else:
        qs = preflight_question_set(config.source, config.path, corpus_signature=corpus_snapshot.signature,
                                    doc_ids=doc_ids, beir_split=config.beir_split,
                                    corpus_source=corpus_snapshot.source, limit=config.limit)
    context.add_output_metadata({**qs.counts(), "fingerprint": qs.fingerprint, "path": str(qs.path),
                                 "limited_from": qs.limited_from})
    return qs


@asset(
    group_name="retrieval_eval",
    partitions_def=variant_partitions,
    backfill_policy=BackfillPolicy.single_run(),
    io_manager_key="variant_io_manager",
)
def variant_metrics(
    context: AssetExecutionContext, ranked_results: dict[str, pd.DataFrame], question_set: QuestionSet
) -> dict[str, pd.DataFrame]:
    """Per-question scores of each variant (hit@k, MRR, recall, nDCG@10, miss class, latency)."""
    missing = sorted(set(context.partition_keys) - set(ranked_results))
    if missing:
        raise ValueError(f"ranked_results has no partition for variant(s) {missing}; materialize them first")
    scored = {key: score_variant(ranked_results[key], question_set.questions) for key in context.partition_keys}
    summary = summarize(scored)
    columns = ["variant", *HEADLINE_METRICS, "n_answerable", "n_errored"]
    context.add_output_metadata({
        "summary": MetadataValue.md(markdown_table(summary, columns)),
        "latency_ms_by_stage": MetadataValue.json({k: stage_latency_summary(f) for k, f in scored.items()}),
    })
    return scored


class ReportConfig(Config):
    results_dir: str = Field(default=str(REPO_ROOT / "results"), description="where results.md and per_query.jsonl go")
    record_history: bool = Field(default=True, description="record the run in the Postgres history tables "
                                 "(false: the gate still judges against the history, the run is not recorded)")


@asset(group_name="retrieval_eval")
def report(
    context: AssetExecutionContext,
    config: ReportConfig,
    variant_metrics: dict[str, pd.DataFrame],
    corpus_snapshot: CorpusSnapshot,
    pgvector_store: StoreInfo,
    question_set: QuestionSet,
    database: DatabaseResource,
    embedder: EmbedderResource,
) -> dict:
    """results.md with intervals, significance, the gate verdict and plots; per_query.jsonl and
    TREC run files; the run recorded in the Postgres history tables."""
    order = [k for k in SWEEP.keys if k in variant_metrics]
    missing = [k for k in SWEEP.keys if k not in variant_metrics]
    if not order:
        raise ValueError("no variant has metrics yet; materialize ranked_results and variant_metrics first")
    per_variant = {k: variant_metrics[k] for k in order}
    check_store_matches(pgvector_store, embedder.get())
    provenance = {
        "corpus_signature": corpus_snapshot.signature,
        "question_set_fingerprint": question_set.fingerprint,
        "labels_fingerprint": labels_fingerprint(question_set.questions),
        "embedder": pgvector_store.embedder,
        "embedder_revision": pgvector_store.embedder_revision,
        "chunking": asdict(pgvector_store.chunking),
        "code_version": code_version(),
        # as recorded in each partition's results, not as the variants file says now
        **results_provenance(per_variant, table=pgvector_store.table, questions_fingerprint=question_set.fingerprint),
    }
    verdict = judge_run(
        per_variant, baseline=SWEEP.baseline, provenance=provenance, tolerances=SWEEP.tolerances, strict=SWEEP.strict,
        run_id=context.run_id, limited=question_set.limited,
        connection_string=database.connection_string(), record=False,
        statistics_cache=Path(database.state_dir) / "statistics_cache",
    )
    suffix = f".limited-{len(question_set.questions)}" if question_set.limited else ""
    per_query = pd.concat(per_variant.values(), ignore_index=True)
    latency = {k: stage_latency_summary(f) for k, f in per_variant.items()}
    shown_provenance = {
        "corpus": f"{corpus_snapshot.source} ({len(corpus_snapshot.documents)} documents, "
        f"{len(corpus_snapshot.skipped)} skipped, signature {corpus_snapshot.signature})",
        "question set": f"{question_set.path} (fingerprint {question_set.fingerprint}"
        + (f", limited to {len(question_set.questions)} of {question_set.limited_from}" if question_set.limited else "")
        + ")",
        "embedder": f"{pgvector_store.embedder} ({provenance['embedder_revision']})",
        "chunking": f"{pgvector_store.chunking.split_by} {pgvector_store.chunking.split_length}"
        f"/{pgvector_store.chunking.split_overlap}, {pgvector_store.chunk_count} chunks",
        "vector table": pgvector_store.table,
        "variants file": f"{SWEEP.source} (baseline {SWEEP.baseline})",
        "code version": provenance["code_version"],
        "run id": context.run_id,
    }
    paths, plots, markdown = publish_report(
        Path(config.results_dir), suffix=suffix, verdict=verdict, per_query=per_query, provenance=shown_provenance,
        latency=latency, missing_variants=missing, baseline=SWEEP.baseline, questions=question_set.questions,
        plot_cache=Path(database.state_dir) / "plot_cache", warn=context.log.warning)
    if config.record_history:  # only once the results are published: a failed write records nothing
        record_verdict(verdict, database.connection_string(), run_id=context.run_id, per_variant=per_variant)
    context.log.info(f"report written to {paths['report']}")
    context.add_output_metadata({
        "headline": headline(verdict, SWEEP.baseline),
        "report": MetadataValue.md(markdown),
        "plots": MetadataValue.md(embedded_images(plots)),
        "path": MetadataValue.path(paths["report"]),
        "gate_passed": verdict.gate_passed,
    })
    return {"paths": {**paths, **plots}, "summary": verdict.summary, "gate_rows": verdict.gate_rows(),
            "gate_passed": verdict.gate_passed, "gate_messages": {v: g.message for v, g in verdict.gates.items()},
            "gate_runs": {v: {"previous": (verdict.previous[v] or {}).get("run_id"),
                              "reference": (verdict.reference[v] or {}).get("run_id")} for v in verdict.gates},
            "limited": question_set.limited}


@asset_check(
    asset=report,
    blocking=True,
    description="Every question was answered without an engine error; otherwise the metrics are not "
    "complete and the run fails (after the report is written, so it can be read).",
)
def no_errored_questions(report: dict) -> AssetCheckResult:
    summary = report["summary"]
    errored = {r["variant"]: int(r["n_errored"]) for _, r in summary.iterrows()}
    total = sum(errored.values())
    return AssetCheckResult(
        passed=total == 0,
        severity=AssetCheckSeverity.ERROR,
        metadata={"errored_total": total, "threshold": 0, "errored_by_variant": MetadataValue.json(errored)},
    )


@asset_check(
    asset=report,
    blocking=True,
    description="No variant's metric dropped by more than its tolerance since that variant's previous "
    "eligible run on the same corpus and labels, nor since its pinned reference run (tolerances in the "
    "variants file). Runs after the report is written.",
)
def regression_gate(report: dict) -> AssetCheckResult:
    rows = report["gate_rows"]
    failures = [r for r in rows if r["passed"] is False]
    worst = min(failures, key=lambda r: r["delta"] + r["tolerance"]) if failures else None  # furthest past its tolerance
    metadata = {
        "gate": MetadataValue.md(markdown_table(pd.DataFrame(rows), ["variant", "against", "state", "metric", "actual",
                                                                     "baseline", "delta", "tolerance", "passed"]))
        if rows else "",
        "messages": MetadataValue.json(report["gate_messages"]),
        "compared_runs": MetadataValue.json(report.get("gate_runs", {})),
        "failures": len(failures),
    }
    if worst:
        metadata.update({"variant": worst["variant"], "against": worst["against"], "metric": worst["metric"],
                         "actual": worst["actual"],
                         "baseline": worst["baseline"], "delta": worst["delta"], "tolerance": worst["tolerance"]})
    return AssetCheckResult(passed=report["gate_passed"], severity=AssetCheckSeverity.ERROR, metadata=metadata)
