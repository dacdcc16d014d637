"""ranked_results: a graph-backed asset, partitioned by variant, whose variants are ranked in
one or more steps.

    plan_ranking ──(one dynamic output per batch of variants)──> rank_variants ──> collect_ranked_results

- `plan_ranking` reads the run's partition keys (one variant, or the whole sweep), sets aside
  the variants whose results are reused unchanged, embeds the questions once (cached on
  disk, so every batch reads the same vectors) and splits the rest with
  `eval_pipeline.ranking.batches.plan_batches`.
- `rank_variants` ranks one batch with one Sweep (shared legs and candidate pools).
- `collect_ranked_results` merges the batches into the asset's output, one DataFrame per
  partition, written by the variant IO manager.

With the in-process executor (job `retrieval_eval`) there is one batch: the whole sweep shares
every leg.  With the multiprocess executor (job `retrieval_eval_parallel`) there are as many
batches as the executor runs at once, and they run in parallel; with the Celery executor (job
`retrieval_eval_celery`) each batch is a task on the worker pool (2 batches unless `workers` is set).

`build_ranked_results(sweep, partitions)` builds the asset for one sweep (definitions.py reads
the variants file once and passes it): its ops read the sweep they were built with.
"""

import os
from typing import Optional

import pandas as pd
from dagster import (
    AssetExecutionContext,
    AssetsDefinition,
    BackfillPolicy,
    Config,
    ConfigMapping,
    DynamicOut,
    DynamicOutput,
    OpExecutionContext,
    Out,
    Output,
    PartitionsDefinition,
    graph_asset,
    op,
)
from pydantic import Field

from assets.metadata import add_partition_metadata, to_metadata
from assets.run import op_config
from eval_pipeline.config.sweep import SweepConfig
from eval_pipeline.corpus.sources import CorpusSnapshot
from eval_pipeline.history.identity import configuration_fingerprint
from eval_pipeline.questions.sets import QuestionSet
from eval_pipeline.ranking.partitions import ranked_partition_metadata
from eval_pipeline.ranking.steps import Batch, RankedBatch, mapping_key, merge_ranked_batches, plan_pairs, rank_batch
from eval_pipeline.store.indexes import IndexStores
from eval_pipeline.verdict.paired import rank_configuration
from eval_pipeline.verdict.retrieval import code_version
from resources import DatabaseResource, EmbedderResource, RerankerResource, StateResource

__all__ = ["Batch", "RankedBatch", "RankingConfig", "build_ranked_results", "mapping_key"]


class RankingConfig(Config):
    miss_k: int = Field(default=10, ge=1, le=1000, description="a question is a miss when no gold doc is in the top k")
    workers: Optional[int] = Field(
        default=None, ge=1, le=256,
        description="batches of variants ranked as separate steps (default: as many as the executor runs at "
        "once: 1 in-process, max_concurrent with the multiprocess executor, 2 with the Celery executor)",
    )
    reuse: bool = Field(
        default=True,
        description="reuse a variant's results when its table, questions, configuration and code are unchanged; "
        "false ranks again (to re-measure latency, say) and refreshes the cache",
    )


CELERY_DEFAULT_WORKERS = 2  # the worker pool's size is not in the executor's config
# what Dagster's multiprocess executor runs at once when its config does not say
MULTIPROCESS_DEFAULT_ENV = "DAGSTER_MULTIPROCESS_EXECUTOR_MAX_CONCURRENT"


def executor_concurrency(context: OpExecutionContext) -> int:
    """How many steps the run's executor runs at once: 1 in-process; for the multiprocess
    executor its `max_concurrent` (the run config, else Dagster's own default:
    DAGSTER_MULTIPROCESS_EXECUTOR_MAX_CONCURRENT, else the CPU count); for the
    Celery executor (job `retrieval_eval_celery`) the worker pool's size, which its config does not
    hold: 2, unless `ops: ranked_results: config: workers` says otherwise."""
    executor = context.job_def.executor_def
    if executor.name == "celery":
        return CELERY_DEFAULT_WORKERS
    if executor.name != "multiprocess":
        return 1
    section = (context.run.run_config.get("execution") or {}).get("config") or {}
    section = section.get("multiprocess", section)  # multi_or_in_process nests it one level down
    return int(section.get("max_concurrent") or os.environ.get(MULTIPROCESS_DEFAULT_ENV) or os.cpu_count() or 1)


def reranker_builder(rerankers: RerankerResource, embedder):
    """The reranker builder for an index: a reranker that embeds uses the index's embedder."""
    return lambda spec, warm: rerankers.build(spec, embedder=embedder, warm=warm)


def run_pairs(keys, stores: IndexStores, sweep: SweepConfig) -> list[tuple[str, str, object]]:
    """(partition key, index key, variant) of each of the run's partition keys, after checking
    that `stores` holds these indexes as the variants file describes them now."""
    out = []
    for key in keys:
        spec, variant = sweep.pair(key)
        out.append((str(key), spec.key, variant))
    if sweep.indexes_listed:
        stores.check_current(sweep.index_by_key(), [index for _, index, _ in out])
    return out


def index_embedder_of(embedder: EmbedderResource, sweep: SweepConfig):
    """index key -> that index's embedder (EmbedderResource.for_index)."""
    specs = sweep.index_by_key()
    return lambda index: embedder.for_index(specs[index], listed=sweep.indexes_listed)


def reference_ranker(context, corpus_snapshot: CorpusSnapshot, stores: IndexStores, question_set: QuestionSet,
                     database: DatabaseResource, state: StateResource, embedder: EmbedderResource,
                     rerankers: RerankerResource, sweep: SweepConfig):
    """(partition key, recorded configuration) -> that configuration's per-question scores on
    today's questions, ranked on the partition's index as the ranking asset ranks (for the
    verdict's paired comparison: eval_pipeline.verdict.paired.rank_configuration)."""
    embedder_for = index_embedder_of(embedder, sweep)
    miss_k = op_config(context, "ranked_results", RankingConfig).miss_k

    def rank(key: str, configuration: dict):
        index = sweep.pair(key)[0].key
        name = "reference-" + configuration_fingerprint({"variants": {"v": configuration["variant"]}}, "v")[:8]
        return rank_configuration(configuration, name=name, snapshot=corpus_snapshot, store=stores[index],
                                  question_set=question_set, state=state.dir(),
                                  connection_string=database.connection_string(), embedder=embedder_for(index),
                                  build_reranker=reranker_builder(rerankers, embedder_for(index)), miss_k=miss_k,
                                  code_version=code_version(), log=context.log.info)

    return rank


@op(out=Out(io_manager_key="variant_io_manager"))
def collect_ranked_results(context: AssetExecutionContext, batches: list[RankedBatch],
                           aliases: dict) -> dict[str, pd.DataFrame]:
    """The batches merged into one DataFrame per partition, in the sweep's order, the pairs
    that share another's results copied; each partition gets its own row count, schema and errors."""
    results, metadata = merge_ranked_batches(batches, [str(k) for k in context.partition_keys], aliases)
    context.add_output_metadata(to_metadata(metadata))
    for key, frame in results.items():
        add_partition_metadata(context, key, ranked_partition_metadata(frame))
    return results


def _to_ops(values: dict) -> dict:
    return {name: {"config": dict(values)} for name in ("plan_ranking", "rank_variants")}


# `ops: ranked_results: config: {miss_k, workers, reuse}` reaches every op of the graph. The
# values pass through unvalidated here: corpus_snapshot checks them (validate_run_config) in
# the run's first step with a message naming the setting, as for every other asset.
_ranking_config = ConfigMapping(config_fn=_to_ops, config_schema=RankingConfig.to_config_schema())


def build_ranked_results(sweep: SweepConfig, partitions: PartitionsDefinition) -> AssetsDefinition:
    """The ranked_results asset of `sweep`, on its partitions (assets.partitions.partitions_of)."""

    @op(out={"batches": DynamicOut(Batch), "aliases": Out(dict)})
    def plan_ranking(
        context: OpExecutionContext,
        config: RankingConfig,
        corpus_snapshot: CorpusSnapshot,
        pgvector_store: IndexStores,
        question_set: QuestionSet,
        database: DatabaseResource,
        state: StateResource,
        embedder: EmbedderResource,
        rerankers: RerankerResource,
    ):
        """Split the run's pairs into batches, index by index; embed the questions once per index
        for all of them (eval_pipeline.ranking.steps.plan_pairs)."""
        embedder_for = index_embedder_of(embedder, sweep)
        planned, aliases = plan_pairs(
            run_pairs(context.partition_keys, pgvector_store, sweep), stores=pgvector_store, embedder_for=embedder_for,
            corpus_signature=corpus_snapshot.signature, question_set=question_set, state=state.dir(),
            connection_string=database.connection_string(),
            builder_for=lambda index: reranker_builder(rerankers, embedder_for(index)),
            miss_k=config.miss_k, reuse=config.reuse, workers=config.workers or executor_concurrency(context),
            code_version=code_version(), log=context.log.info)
        yield Output(aliases, output_name="aliases")
        for key, batch in planned:
            yield DynamicOutput(batch, mapping_key=key, output_name="batches")

    @op
    def rank_variants(
        config: RankingConfig,
        batch: Batch,
        corpus_snapshot: CorpusSnapshot,
        pgvector_store: IndexStores,
        question_set: QuestionSet,
        database: DatabaseResource,
        state: StateResource,
        embedder: EmbedderResource,
        rerankers: RerankerResource,
    ) -> RankedBatch:
        """Rank one batch, on its index's table with its index's embedder, with one Sweep
        (eval_pipeline.ranking.steps.rank_batch)."""
        index_embedder = index_embedder_of(embedder, sweep)(batch.index)
        return rank_batch(batch, [sweep.by_key()[key] for key in batch.results_keys], snapshot=corpus_snapshot,
                          store=pgvector_store[batch.index], question_set=question_set, state=state.dir(),
                          connection_string=database.connection_string(), embedder=index_embedder,
                          build_reranker=reranker_builder(rerankers, index_embedder), miss_k=config.miss_k)

    @graph_asset(
        group_name="retrieval_eval",
        partitions_def=partitions,
        backfill_policy=BackfillPolicy.single_run(),
        config=_ranking_config,
    )
    def ranked_results(corpus_snapshot: CorpusSnapshot, pgvector_store: IndexStores, question_set: QuestionSet):
        """Each variant's ranked documents, scores, latency by stage and miss diagnosis for every question.

        One partition per variant, or per (index, variant) pair when the variants file lists
        indexes: each index's pairs rank on its table with its embedder. A run over several
        partitions (the whole sweep) embeds the questions once per embedder; variants ranked in one
        step share first-stage legs and candidate pools; a variant whose table, questions,
        configuration and code are unchanged since it was last computed is reused, not re-queried.
        """
        batches, aliases = plan_ranking(corpus_snapshot, pgvector_store, question_set)
        ranked = batches.map(lambda batch: rank_variants(batch, corpus_snapshot, pgvector_store, question_set))
        return collect_ranked_results(ranked.collect(), aliases)

    return ranked_results
