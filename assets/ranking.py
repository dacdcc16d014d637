"""ranked_results: a graph-backed asset, partitioned by variant, whose variants are ranked in
one or more steps.

    plan_ranking ──(one dynamic output per batch of variants)──> rank_variants ──> collect_ranked_results

- `plan_ranking` reads the run's partition keys (one variant, or the whole sweep), sets aside
  the variants whose results are reused unchanged, embeds the questions once (cached on
  disk, so every batch reads the same vectors) and splits the rest with
  `eval_pipeline.sweep.plan_batches`.
- `rank_variants` ranks one batch with one Sweep (shared legs and candidate pools).
- `collect_ranked_results` merges the batches into the asset's output, one DataFrame per
  partition, written by the variant IO manager.

With the in-process executor (job `retrieval_eval`) there is one batch: the whole sweep shares
every leg.  With the multiprocess executor (job `retrieval_eval_parallel`) there are as many
batches as the executor runs at once, and they run in parallel.
"""

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import pandas as pd
from dagster import (
    BackfillPolicy,
    Config,
    ConfigMapping,
    DynamicOut,
    DynamicOutput,
    MetadataValue,
    OpExecutionContext,
    Out,
    graph_asset,
    op,
)
from pydantic import Field

from assets.partitions import SWEEP, variant_partitions
from eval_pipeline.corpus import CorpusSnapshot
from eval_pipeline.ingest import StoreInfo
from eval_pipeline.questions import QuestionSet
from eval_pipeline.sweep import (
    QueryEmbeddingCache,
    ResultsCache,
    Sweep,
    plan_batches,
    result_environment,
    store_environment,
)
from eval_pipeline.verdict import code_version
from resources import DatabaseResource, EmbedderResource, RerankerResource


class RankingConfig(Config):
    miss_k: int = Field(default=10, ge=1, le=1000, description="a question is a miss when no gold doc is in the top k")
    workers: Optional[int] = Field(
        default=None, ge=1, le=256,
        description="batches of variants ranked as separate steps (default: as many as the executor runs at "
        "once: 1 in-process, max_concurrent with the multiprocess executor)",
    )
    reuse: bool = Field(
        default=True,
        description="reuse a variant's results when its table, questions, configuration and code are unchanged; "
        "false ranks again (to re-measure latency, say) and refreshes the cache",
    )


@dataclass
class Batch:
    """What one rank_variants step ranks, as plan_ranking decided it."""

    results_keys: dict[str, Optional[str]]  # variant key -> its ResultsCache key, in the sweep's order
    from_cache: bool  # the variants whose results are reused unchanged (read, not ranked)
    reranker_identities: dict[str, Optional[dict]]  # variant key -> its reranker's identity when planned
    code_version: str  # the code that ranks (recorded with every result)
    embed_ms_per_query: float  # the query embedding's cost, 0.0 when it came from the disk cache
    query_embeddings: str  # "cached", "computed in N s" or "not needed"


@dataclass
class RankedBatch:
    frames: dict[str, pd.DataFrame]
    reused: list[str] = field(default_factory=list)
    not_cached: list[str] = field(default_factory=list)  # ranked, but errored: never stored for reuse
    queries_by_stage: dict[str, int] = field(default_factory=dict)
    query_embeddings: str = "not needed"


def executor_concurrency(context: OpExecutionContext) -> int:
    """How many steps the run's executor runs at once: 1 in-process; for the multiprocess
    executor its `max_concurrent` (run config, else Dagster's default, the CPU count)."""
    executor = context.job_def.executor_def
    if executor.name != "multiprocess":
        return 1
    section = (context.run.run_config.get("execution") or {}).get("config") or {}
    section = section.get("multiprocess", section)  # multi_or_in_process nests it one level down
    return int(section.get("max_concurrent") or os.cpu_count() or 1)


def _mapping_key(index: int, keys: list[str]) -> str:
    """A readable, valid dynamic mapping key: 0_pg_keyword__hybrid_mmr ..."""
    text = re.sub(r"[^A-Za-z0-9_]", "_", "__".join(keys))
    return f"{index}_{text}"[:80]


@op(out=DynamicOut(Batch))
def plan_ranking(
    context: OpExecutionContext,
    config: RankingConfig,
    pgvector_store: StoreInfo,
    question_set: QuestionSet,
    database: DatabaseResource,
    embedder: EmbedderResource,
    rerankers: RerankerResource,
):
    """Split the run's variants into batches; embed the questions once for all of them.

    The results cache keys are built here from each reranker's identity (its weights by
    content, an LLM's endpoint and settings), computed before any model is loaded, and from
    the package, server and extension versions."""
    variants = [SWEEP.by_key()[key] for key in context.partition_keys]
    state = Path(database.state_dir)
    cache = ResultsCache(state / "ranked_results_cache")
    version = code_version()
    identities = {v.key: rerankers.build(v.reranker, embedder=embedder.get(), warm=False).identity()
                  if v.reranker.kind != "none" else None for v in variants}
    environment = {**result_environment(), **store_environment(database.connection_string())}
    keys = {v.key: ResultsCache.key(table=pgvector_store.table, questions_fingerprint=question_set.fingerprint,
                                    variant=v, miss_k=config.miss_k, code_version=version,
                                    reranker=identities[v.key], environment=environment) for v in variants}
    reused = [v for v in variants if config.reuse and cache.has(keys[v.key])]
    todo = [v for v in variants if v.key not in {r.key for r in reused}]
    embed_ms, embedded = 0.0, "not needed"
    if todo:
        questions = question_set.questions
        _, seconds, from_disk = QueryEmbeddingCache(state / "query_embeddings").get_or_compute(embedder.get(), questions)
        embed_ms = 0.0 if from_disk else seconds * 1000.0 / max(1, len(questions))
        embedded = "cached" if from_disk else f"computed in {seconds:.2f} s"
    workers = config.workers or executor_concurrency(context)
    batches = [([v.key for v in batch], False) for batch in plan_batches(todo, workers)] if todo else []
    if reused:
        batches.append(([v.key for v in reused], True))  # loaded from the cache: cheap, one step
    context.log.info(f"{len(variants)} variant(s) in {len(batches)} step(s): "
                     + "; ".join(", ".join(b) for b, _ in batches)
                     + (f" ({len(reused)} reused unchanged)" if reused else ""))
    for index, (batch, from_cache) in enumerate(batches):
        yield DynamicOutput(Batch({k: keys[k] for k in batch}, from_cache, {k: identities[k] for k in batch},
                                  version, embed_ms, embedded), mapping_key=_mapping_key(index, batch))


@op
def rank_variants(
    config: RankingConfig,
    batch: Batch,
    corpus_snapshot: CorpusSnapshot,
    pgvector_store: StoreInfo,
    question_set: QuestionSet,
    database: DatabaseResource,
    embedder: EmbedderResource,
    rerankers: RerankerResource,
) -> RankedBatch:
    """Rank one batch with one Sweep: legs and candidate pools shared by its variants. The batch
    of unchanged variants is read from the cache (ranked after all if an entry has gone)."""
    variants = [SWEEP.by_key()[key] for key in batch.results_keys]
    state = Path(database.state_dir)
    cache = ResultsCache(state / "ranked_results_cache")
    keys = batch.results_keys
    cached = {v.key: frame for v in variants if batch.from_cache and (frame := cache.get(keys[v.key])) is not None}
    todo = [v for v in variants if v.key not in cached]
    result = RankedBatch(frames={}, reused=list(cached), query_embeddings=batch.query_embeddings)
    if todo:
        questions = question_set.questions
        built = {v.key: rerankers.build(v.reranker, embedder=embedder.get()) for v in todo if v.reranker.kind != "none"}
        for key, reranker in built.items():  # the models loaded are the ones the cache keys name
            if reranker.identity() != batch.reranker_identities[key]:
                raise RuntimeError(f"the reranker of variant {key!r} changed while the run was planned "
                                   f"(planned {batch.reranker_identities[key]}, loaded {reranker.identity()}); run again")
        embeddings, _, _ = QueryEmbeddingCache(state / "query_embeddings").get_or_compute(embedder.get(), questions)
        sweep = Sweep(
            snapshot=corpus_snapshot,
            connection_string=database.connection_string(),
            table=pgvector_store.table,
            dims=pgvector_store.dims,
            query_embeddings=embeddings,
            embed_ms_per_query=batch.embed_ms_per_query,
            rerankers=built,
            miss_k=config.miss_k,
            code_version=batch.code_version,
        )
        computed = sweep.run(todo, questions)
        result.not_cached = [key for key, frame in computed.items() if not ResultsCache.cacheable(frame)]
        for key, frame in computed.items():
            cache.put(keys[key], frame)  # refuses errored results
        cached.update(computed)
        result.queries_by_stage = sweep.queries_by_stage
    result.frames = {v.key: cached[v.key] for v in variants}
    return result


@op(out=Out(io_manager_key="variant_io_manager"))
def collect_ranked_results(context: OpExecutionContext, batches: list[RankedBatch]) -> dict[str, pd.DataFrame]:
    """The batches merged into one DataFrame per partition, in the sweep's order."""
    frames = {key: frame for b in batches for key, frame in b.frames.items()}
    results = {key: frames[key] for key in context.partition_keys}
    queries: dict[str, int] = {}
    for b in batches:
        for stage, n in b.queries_by_stage.items():
            queries[stage] = queries.get(stage, 0) + n
    reused = [key for b in batches for key in b.reused]
    not_cached = [key for b in batches for key in b.not_cached]
    context.add_output_metadata({
        "questions": len(next(iter(results.values()))) if results else 0,
        "variants": ", ".join(results),
        "steps": len(batches),
        "reused_unchanged": ", ".join(reused) or "none",
        "not_cached_errored": ", ".join(not_cached) or "none",
        "rerank_fallbacks_by_variant": MetadataValue.json(
            {k: int(f["rerank_fallback"].fillna(False).astype(bool).sum()) for k, f in results.items()
             if "rerank_fallback" in f}),
        "query_embeddings": next((b.query_embeddings for b in batches if b.query_embeddings != "not needed"),
                                 "not needed"),
        "queries_by_stage": MetadataValue.json(queries),
        "errored_by_variant": MetadataValue.json({k: int(f["error"].notna().sum()) for k, f in results.items()}),
        "latency_p50_ms_by_variant": MetadataValue.json(
            {k: round(float(f["latency_ms"].median()), 2) for k, f in results.items()}),
    })
    return results


def _to_ops(values: dict) -> dict:
    return {name: {"config": dict(values)} for name in ("plan_ranking", "rank_variants")}


# `ops: ranked_results: config: {miss_k, workers, reuse}` reaches every op of the graph. The
# values pass through unvalidated here: corpus_snapshot checks them (validate_run_config) in
# the run's first step with a message naming the setting, as for every other asset.
_ranking_config = ConfigMapping(config_fn=_to_ops, config_schema=RankingConfig.to_config_schema())


@graph_asset(
    group_name="retrieval_eval",
    partitions_def=variant_partitions,
    backfill_policy=BackfillPolicy.single_run(),
    config=_ranking_config,
)
def ranked_results(corpus_snapshot: CorpusSnapshot, pgvector_store: StoreInfo, question_set: QuestionSet):
    """Each variant's ranked documents, scores, latency by stage and miss diagnosis for every question.

    One partition per variant. A run over several partitions (the whole sweep) embeds the
    questions once; variants ranked in one step share first-stage legs and candidate pools; a
    variant whose table, questions, configuration and code are unchanged since it was last
    computed is reused, not re-queried.
    """
    batches = plan_ranking(pgvector_store, question_set)
    ranked = batches.map(lambda batch: rank_variants(batch, corpus_snapshot, pgvector_store, question_set))
    return collect_ranked_results(ranked.collect())
