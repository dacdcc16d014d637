"""pgvector_store: a graph-backed asset holding one table per index, each written in one or
more shards.

    plan_ingest ──(one dynamic output per index and shard)──> ingest_shard ──> finish_ingest

- `plan_ingest`, for every index of the variants file, reuses its complete table, or splits its
  build's batches into shards (contiguous runs of them) and records them
  (eval_pipeline.store.ingest.plan_ingest).
- `ingest_shard` chunks, embeds and writes one shard of one index; a shard already written
  writes nothing, so re-executing a run's failed step runs the failed shard alone.
- `finish_ingest` builds each table's indexes and marks it complete once its shards are in.

Why the asset is not partitioned by index in Dagster's sense: a job's partitioned assets must
share one partitions definition, and the ranking's is index × variant; so one asset holds every
index's table (`IndexStores`), each reused unless its corpus, chunking or embedder changed, and
its metadata shows every index's cost. Adding an index to the file builds that index alone.

With the in-process executor (job `retrieval_eval`) there is one shard per index. With the
multiprocess executor (job `retrieval_eval_parallel`) there are as many shards per index as the
executor runs at once (`shards` overrides it), at most one per batch.

`build_pgvector_store(sweep)` builds the asset for one sweep (definitions.py reads the variants
file once and passes it): its ops read the sweep they were built with.
"""

import re
from dataclasses import asdict
from typing import Literal, Optional

from dagster import (
    AssetExecutionContext,
    AssetsDefinition,
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

from assets.metadata import to_metadata
from assets.ranking import executor_concurrency, index_embedder_of
from eval_pipeline.config.sweep import SweepConfig
from eval_pipeline.corpus.sources import CorpusSnapshot
from eval_pipeline.store import ingest as store_ingest
from eval_pipeline.store.indexes import IndexSpec, IndexStores
from eval_pipeline.store.ingest import BATCH_CHUNKS, ChunkingConfig, IngestPlan, ShardResult, StoreInfo
from eval_pipeline.store.metadata import index_set_metadata
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


def index_chunking(spec: IndexSpec, config: StoreConfig, sweep: SweepConfig) -> ChunkingConfig:
    """An index's chunking: the variants file's when it lists indexes, else this asset's config."""
    return spec.chunking if sweep.indexes_listed else config.chunking()


def described(spec: IndexSpec, info: StoreInfo, sweep: SweepConfig) -> dict:
    """What an index is, for reports: the file's description, or for the one index of a file
    without `indexes:` what the table was built with (the embedder resource and this config)."""
    if sweep.indexes_listed:
        return spec.describe()
    return {"key": spec.key, "embedder": "resource", "model": info.embedder, "base_url": None,
            "chunking": asdict(info.chunking)}


def _to_ops(values: dict) -> dict:
    return {name: {"config": dict(values)} for name in ("plan_ingest", "ingest_shard", "finish_ingest")}


# `ops: pgvector_store: config: {...}` reaches every op of the graph, unvalidated here: corpus_snapshot
# checks it (validate_run_config) in the run's first step, as for every other asset.
_store_config = ConfigMapping(config_fn=_to_ops, config_schema=StoreConfig.to_config_schema())


def build_pgvector_store(sweep: SweepConfig) -> AssetsDefinition:
    """The pgvector_store asset of `sweep`: one table per index of the variants file."""

    @op(out={"plans": Out(dict), "shards": DynamicOut(tuple)})
    def plan_ingest(context: OpExecutionContext, config: StoreConfig, corpus_snapshot: CorpusSnapshot,
                    database: DatabaseResource, embedder: EmbedderResource):
        """For every index of the variants file: reuse its complete table, or split its build into
        shards (eval_pipeline.store.ingest.plan_ingest). One dynamic output per (index, shard)."""
        plans: dict[str, IngestPlan] = {}
        embedder_for = index_embedder_of(embedder, sweep)
        for spec in sweep.indexes:
            plans[spec.key] = store_ingest.plan_ingest(
                corpus_snapshot, connection_string=database.connection_string(), embedder=embedder_for(spec.key),
                chunking=index_chunking(spec, config, sweep), batch_chunks=config.batch_chunks,
                shards=config.shards or executor_concurrency(context), **_waits(context, config))
        yield Output(plans, output_name="plans")
        for number, (key, plan) in enumerate(plans.items()):
            for shard in plan.shards:  # numbered: unique even when two keys differ only by punctuation
                handle = f"{number}_" + re.sub(r"[^A-Za-z0-9_]", "_", key) + "__" if sweep.indexes_listed else ""
                yield DynamicOutput((key, shard), mapping_key=f"{handle}shard_{shard.index + 1}_of_{shard.count}",
                                    output_name="shards")

    @op
    def ingest_shard(context: OpExecutionContext, config: StoreConfig, plans: dict, shard: tuple,
                     corpus_snapshot: CorpusSnapshot, database: DatabaseResource,
                     embedder: EmbedderResource) -> ShardResult:
        """Chunk, embed and write one shard of one index; nothing when it is written
        (eval_pipeline.store.ingest.ingest_shard)."""
        key, part = shard
        return store_ingest.ingest_shard(corpus_snapshot, plans[key], part,
                                         connection_string=database.connection_string(),
                                         embedder=index_embedder_of(embedder, sweep)(key), **_waits(context, config))

    @op
    def finish_ingest(context: AssetExecutionContext, config: StoreConfig, plans: dict,
                      written: list[ShardResult], database: DatabaseResource) -> IndexStores:
        """Index every table and mark it complete once its shards are in
        (eval_pipeline.store.ingest.finish_ingest); each index's cost as metadata."""
        tables = {key: store_ingest.finish_ingest(
            plan, connection_string=database.connection_string(),
            shard_seconds=store_ingest.shards_wall_seconds([w for w in written if w.table == plan.table]),
            **_waits(context, config))
            for key, plan in plans.items()}
        specs = sweep.index_by_key()
        stores = IndexStores(tables=tables,
                             described={key: described(specs[key], info, sweep) for key, info in tables.items()},
                             storage_bytes=store_ingest.storage_bytes(database.connection_string(),
                                                                      [info.table for info in tables.values()]))
        context.add_output_metadata(to_metadata(index_set_metadata(stores, database.describe(), shards=len(written))))
        return stores

    @graph_asset(group_name="retrieval_eval", config=_store_config)
    def pgvector_store(corpus_snapshot: CorpusSnapshot) -> IndexStores:
        """One pgvector table per index of the variants file (embedder × chunking), each named by
        (corpus, chunking, embedder) and reused when unchanged: adding an index builds that one
        alone. Written in one or more shards, each marked complete when its shards are in."""
        plans, shards = plan_ingest(corpus_snapshot)
        written = shards.map(lambda shard: ingest_shard(plans, shard, corpus_snapshot))
        return finish_ingest(plans, written.collect())

    return pgvector_store
