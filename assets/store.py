"""pgvector_store: a graph-backed asset whose table is written in one or more shards.

    plan_ingest ──(one dynamic output per shard)──> ingest_shard ──> finish_ingest

- `plan_ingest` reuses a complete table, or splits the build's batches into shards (contiguous
  runs of them) and records them (eval_pipeline.store.ingest.plan_ingest).
- `ingest_shard` chunks, embeds and writes one shard into the table; a shard already written
  writes nothing, so re-executing a run's failed step runs the failed shard alone.
- `finish_ingest` builds the indexes and marks the table complete once every shard is in.

With the in-process executor (job `retrieval_eval`) there is one shard: the build as one step.
With the multiprocess executor (job `retrieval_eval_parallel`) there are as many shards as the
executor runs at once (`shards` overrides it), at most one per batch.
"""

from typing import Literal, Optional

from dagster import (
    AssetExecutionContext,
    Config,
    ConfigMapping,
    DynamicOut,
    DynamicOutput,
    OpExecutionContext,
    Out,
    Output,
    graph_asset,
    op,
)
from pydantic import Field

from assets.ranking import executor_concurrency
from eval_pipeline.corpus.sources import CorpusSnapshot
from eval_pipeline.store import ingest as store_ingest
from eval_pipeline.store.ingest import BATCH_CHUNKS, ChunkingConfig, IngestPlan, Shard, ShardResult, StoreInfo
from eval_pipeline.store.metadata import store_metadata
from resources import DatabaseResource, EmbedderResource


class StoreConfig(Config):
    split_by: Literal["word", "sentence", "passage"] = "word"
    split_length: int = Field(default=150, ge=1)
    split_overlap: int = Field(default=20, ge=0)
    embed_title: bool = True
    batch_chunks: int = Field(default=BATCH_CHUNKS, ge=1, description="chunks embedded and written together: what "
                              "ingest holds in memory at once, and the unit a killed build resumes by")
    shards: Optional[int] = Field(
        default=None, ge=1, le=256, description="steps the table is written in, each a contiguous run of batches "
        "(default: as many as the executor runs at once: 1 in-process, max_concurrent with the multiprocess executor)")
    lock_timeout_s: Optional[float] = Field(
        default=None, gt=0, description="give up waiting for another run building the same table after this many "
        "seconds (default: EVAL_PIPELINE_LOCK_TIMEOUT, else 3600); the holder is logged every 30 s")

    def chunking(self) -> ChunkingConfig:
        """The library's chunking settings (which check split_by and overlap < length)."""
        return ChunkingConfig(self.split_by, self.split_length, self.split_overlap, self.embed_title)


def _waits(context: OpExecutionContext, config: StoreConfig) -> dict:
    return {"log": context.log.info, "lock_timeout": config.lock_timeout_s}


@op(out={"plan": Out(IngestPlan), "shards": DynamicOut(Shard)})
def plan_ingest(context: OpExecutionContext, config: StoreConfig, corpus_snapshot: CorpusSnapshot,
                       database: DatabaseResource, embedder: EmbedderResource):
    """Reuse the complete table, or split its build into shards (eval_pipeline.store.ingest.plan_ingest)."""
    plan = store_ingest.plan_ingest(corpus_snapshot, connection_string=database.connection_string(), embedder=embedder.get(),
                       chunking=config.chunking(), batch_chunks=config.batch_chunks,
                       shards=config.shards or executor_concurrency(context), **_waits(context, config))
    yield Output(plan, output_name="plan")
    for shard in plan.shards:
        yield DynamicOutput(shard, mapping_key=f"shard_{shard.index + 1}_of_{shard.count}", output_name="shards")


@op
def ingest_shard(context: OpExecutionContext, config: StoreConfig, plan: IngestPlan, shard: Shard,
                      corpus_snapshot: CorpusSnapshot, database: DatabaseResource,
                      embedder: EmbedderResource) -> ShardResult:
    """Chunk, embed and write one shard; nothing when it is written (eval_pipeline.store.ingest.ingest_shard)."""
    return store_ingest.ingest_shard(corpus_snapshot, plan, shard, connection_string=database.connection_string(),
                        embedder=embedder.get(), **_waits(context, config))


@op
def finish_ingest(context: AssetExecutionContext, config: StoreConfig, plan: IngestPlan,
                       written: list[ShardResult], database: DatabaseResource) -> StoreInfo:
    """Index the table and mark it complete once every shard is in (eval_pipeline.store.ingest.finish_ingest)."""
    info = store_ingest.finish_ingest(plan, connection_string=database.connection_string(), **_waits(context, config))
    context.add_output_metadata({**store_metadata(info, database.describe()), "shards": len(written)})
    return info


def _to_ops(values: dict) -> dict:
    return {name: {"config": dict(values)} for name in ("plan_ingest", "ingest_shard", "finish_ingest")}


# `ops: pgvector_store: config: {...}` reaches every op of the graph, unvalidated here: corpus_snapshot
# checks it (validate_run_config) in the run's first step, as for every other asset.
_store_config = ConfigMapping(config_fn=_to_ops, config_schema=StoreConfig.to_config_schema())


@graph_asset(group_name="retrieval_eval", config=_store_config)
def pgvector_store(corpus_snapshot: CorpusSnapshot) -> StoreInfo:
    """Chunks embedded into a pgvector table named by (corpus, chunking, embedder); reused when unchanged.
    Written in one or more shards, marked complete when every shard is in."""
    plan, shards = plan_ingest(corpus_snapshot)
    written = shards.map(lambda shard: ingest_shard(plan, shard, corpus_snapshot))
    return finish_ingest(plan, written.collect())
