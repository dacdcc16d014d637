"""The three steps of the ranked_results graph (assets/ranking.py), without Dagster.

    plan_ranking_batches -> rank_batch (one per batch, possibly in parallel) -> merge_ranked_batches

`build_reranker(spec, warm)` is the reranker resource's builder; `log` takes one line.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any, Optional

import pandas as pd

from eval_pipeline.common.state import StateDir
from eval_pipeline.metrics.selective import choose_threshold
from eval_pipeline.ranking.batches import plan_batches
from eval_pipeline.ranking.caches import (
    QueryEmbeddingCache,
    ResultsCache,
    engine_identity,
    result_environment,
    store_environment,
)
from eval_pipeline.ranking.engines import ENGINES
from eval_pipeline.ranking.fusion_tuning import tune_fusion
from eval_pipeline.ranking.inputs import ConfigurationRefused, check_inputs_agree
from eval_pipeline.ranking.results import identity_json
from eval_pipeline.ranking.sweep import Sweep
from eval_pipeline.store.ingest import chunks_fingerprint


@dataclass
class Batch:
    """What one rank_variants step ranks, as plan_ranking decided it."""

    results_keys: dict[str, Optional[str]]  # variant key -> its ResultsCache key, in the sweep's order
    from_cache: bool  # the variants whose results are reused unchanged (read, not ranked)
    reranker_identities: dict[str, Optional[dict]]  # variant key -> its reranker's identity when planned
    code_version: str  # the code that ranks (recorded with every result)
    embed_ms_per_query: float  # the query embedding's cost, 0.0 when it came from the disk cache
    query_embeddings: str  # "cached (computed in N s)", "computed in N s" or "not needed"
    index: str = ""  # the index whose table the batch ranks on (`plan_pairs`; "" for one-index callers)
    partition_keys: dict[str, str] = field(default_factory=dict)  # variant key -> partition key (default: itself)


@dataclass
class RankedBatch:
    frames: dict[str, pd.DataFrame]
    reused: list[str] = field(default_factory=list)
    not_cached: list[str] = field(default_factory=list)  # ranked, but errored: never stored for reuse
    queries_by_stage: dict[str, int] = field(default_factory=dict)
    query_embeddings: str = "not needed"


def mapping_key(index: int, keys: list[str]) -> str:
    """A readable, valid dynamic mapping key: 0_pg_keyword__hybrid_mmr ..."""
    text = re.sub(r"[^A-Za-z0-9_]", "_", "__".join(keys))
    return f"{index}_{text}"[:80]


def plan_ranking_batches(
    variants: Sequence[Any],
    *,
    corpus_signature: str,
    store,
    question_set,
    state: StateDir,
    connection_string: str,
    embedder,
    build_reranker: Callable[..., Any],
    miss_k: int,
    reuse: bool,
    workers: int,
    code_version: str,
    log: Callable[[str], None],
    index: str = "",
    partition_keys: Mapping[str, str] | None = None,
    claimed: dict[str, str] | None = None,
    aliases: dict[str, "Alias"] | None = None,
) -> list[tuple[str, Batch]]:
    """(mapping key, batch) per step: the variants whose results are reused unchanged in one
    batch, the rest split by `plan_batches` into at most `workers`; the questions embedded
    once (cached on disk) when anything is ranked.

    `index`, `partition_keys` (variant key -> partition key) and `claimed` / `aliases` are
    `plan_pairs`' (one call per index): an index-independent variant whose results key is in
    `claimed` (results key -> the partition that ranks it, filled in as variants are planned)
    is not planned but recorded in `aliases`.

    The results cache keys are built from each reranker's identity (its weights by content, an
    LLM's endpoint and settings), computed before any model is loaded, and from the package,
    server and extension versions; `code_version` is the code that ranks. The corpus, table,
    question set and embedder are first checked to belong together (a step can read
    materializations of different runs)."""
    check_inputs_agree(corpus_signature=corpus_signature, store=store, questions=question_set, embedder=embedder)
    cache = ResultsCache(state.ranked_results)
    version = code_version
    identities = {v.key: build_reranker(v.reranker, warm=False).identity() if v.reranker.kind != "none" else None
                  for v in variants}
    environment = {**result_environment(), **store_environment(connection_string)}
    # the embedder's identity (its weights by content, its code and runtime) once for the plan: every
    # variant's key names the same embedder, and each reading walks and stats the model's files again
    query_embedder = embedder.identity if any(not index_independent(v) for v in variants) else "none"
    fingerprints = _Fingerprints(question_set)  # the set's, taken once for every variant's key

    def results_key(v, code: str) -> str | None:
        return ResultsCache.key(table=results_table(store, v), questions_fingerprint=results_questions(fingerprints, v),
                                variant=v, miss_k=miss_k, code_version=code, reranker=identities[v.key],
                                environment=environment,
                                query_embedder="none" if index_independent(v) else query_embedder)

    keys = {v.key: results_key(v, version) for v in variants}
    partition_keys = dict(partition_keys or {v.key: v.key for v in variants})
    if claimed is not None:
        for v in variants:
            if not index_independent(v):
                continue
            # the results key for this run's code, which may be unknown or dirty (no cache key)
            key = results_key(v, "this run")
            if key is None:  # a named code version always has a key
                raise ValueError(f"variant {v.key!r} has no results key")
            if key in claimed:
                if aliases is None:
                    raise ValueError("aliases must be given with claimed: an alias is recorded in it")
                aliases[partition_keys[v.key]] = Alias(claimed[key], index, store.table)
            else:
                claimed[key] = partition_keys[v.key]
        variants = [v for v in variants if partition_keys[v.key] not in (aliases or {})]
    reused = [v for v in variants if reuse and cache.has(keys[v.key])]
    todo = [v for v in variants if v.key not in {r.key for r in reused}]
    embed_ms, embedded = 0.0, "not needed"
    if todo:
        questions = question_set.questions
        cache_ = QueryEmbeddingCache(state.query_embeddings)
        _, seconds, from_disk = cache_.get_or_compute(embedder, questions)
        if from_disk:  # timed as when they were computed: latency must not depend on a cache hit
            seconds = cache_.recorded_seconds(embedder, questions) or 0.0
        embed_ms = seconds * 1000.0 / max(1, len(questions))
        embedded = f"cached (computed in {seconds:.2f} s)" if from_disk else f"computed in {seconds:.2f} s"
    batches = [([v.key for v in batch], False) for batch in plan_batches(todo, workers)] if todo else []
    if reused:
        batches.append(([v.key for v in reused], True))  # loaded from the cache: cheap, one step
    log(f"{len(variants)} variant(s) in {len(batches)} step(s): " + "; ".join(", ".join(b) for b, _ in batches)
        + (f" ({len(reused)} reused unchanged)" if reused else ""))
    return [(mapping_key(number, batch),
             Batch({k: keys[k] for k in batch}, from_cache, {k: identities[k] for k in batch}, version, embed_ms,
                   embedded, index=index, partition_keys={k: partition_keys[k] for k in batch}))
            for number, (batch, from_cache) in enumerate(batches)]


class _Fingerprints:
    """A question set's fingerprints, each taken once when first read: each serializes and hashes
    every question, and a plan reads them for every variant's results key (one set, one plan)."""

    def __init__(self, question_set):
        self._question_set = question_set

    @cached_property
    def fingerprint(self) -> str:
        return self._question_set.fingerprint

    @cached_property
    def tuning_fingerprint(self) -> str | None:
        return self._question_set.tuning_fingerprint


def results_questions(question_set, variant) -> str:
    """The questions a variant's results depend on: the scored ones, and for a tuned variant
    also the tuning part (a changed tuning question can change the chosen values while the
    scored questions stay the same)."""
    if getattr(variant, "tune", None) or chooses_threshold(variant):
        return f"{question_set.fingerprint}+tuning:{question_set.tuning_fingerprint}"
    return question_set.fingerprint


def chooses_threshold(variant) -> bool:
    """Whether the variant's refusal threshold is chosen on the tuning questions (`abstain: auto`)."""
    abstain = getattr(variant, "abstain", None)
    return abstain is not None and abstain.policy == "auto"


def check_thresholds_can_be_chosen(variants: Sequence[Any], question_set, *, source: str = "the variants file") -> None:
    """Refuse, before anything is ranked, a sweep whose `abstain: {policy: auto}` variants cannot
    choose their refusal threshold on this question set: it has no tuning part, or its tuning
    part holds no abstention question or no answerable one (a threshold chosen without both
    would refuse nothing, or everything, by construction). Names the variants, the file and the
    counts, and what to do."""
    auto = [v.key for v in variants if chooses_threshold(v)]
    if not auto:
        return
    names = ", ".join(repr(k) for k in auto)
    tuning = list(getattr(question_set, "tuning", ()) or ())
    if not tuning:
        raise ConfigurationRefused(
            f"{source}: variant(s) {names} choose their refusal threshold (abstain: {{policy: auto}}) on the tuning "
            "part of the question set, and the set was not split: the variants file's `tuning: {fraction, seed}` "
            "splits it when a variant tunes its fusion or chooses a threshold")
    abstention = sum(1 for q in tuning if not q.answerable)
    answerable = len(tuning) - abstention
    if abstention == 0 or answerable == 0:
        missing = "abstention" if abstention == 0 else "answerable"
        raise ConfigurationRefused(
            f"{source}: variant(s) {names} choose their refusal threshold (abstain: {{policy: auto}}) on the question "
            f"set's tuning part, which holds {answerable} answerable and {abstention} abstention question(s) "
            f"({getattr(question_set, 'path', 'the question set')}): without {missing} questions there a threshold "
            "cannot be chosen. Add abstention "
            "questions to the set (a generated set's abstention_frac), give those variants a fixed threshold "
            "(abstain: {policy: threshold, below: X}), or remove them from the variants file")


def tune_abstention(variants: Sequence[Any], question_set, *, snapshot, connection_string: str, table: str, embedder,
                    state: StateDir, miss_k: int, code_version: str,
                    rerankers: Mapping[str, Any]) -> dict[str, tuple[Any, dict[str, Any]]]:
    """variant key -> (the variant with its chosen refusal threshold, how it was chosen) for each
    variant with `abstain: {policy: auto}` (eval_pipeline.ranking.abstention): the variant as it
    will be scored (its fusion already tuned, its reranker) ranked on the question set's tuning part
    only, without refusing, its confidence per question, then
    `eval_pipeline.metrics.selective.choose_threshold`. The scored questions are never read. A
    question set without a tuning part, a tuning part without abstention questions and a tuning
    question that errored are refused, naming the variant."""
    auto = [v for v in variants if chooses_threshold(v)]
    if not auto:
        return {}
    check_thresholds_can_be_chosen(auto, question_set)
    tuning = list(question_set.tuning)
    embeddings, _, _ = QueryEmbeddingCache(state.query_embeddings).get_or_compute(embedder, tuning)
    sweep = Sweep(snapshot=snapshot, connection_string=connection_string, table=table, query_embeddings=embeddings,
                  embed_ms_per_query=0.0, rerankers=dict(rerankers), miss_k=miss_k, code_version=code_version)
    out = {}
    for v in auto:
        probe = replace(v, abstain=replace(v.abstain, policy="none", below=None))  # ranks, never refuses
        frame = sweep.run_variant(probe, tuning)
        failed = frame[frame["error"].notna()]
        if len(failed):
            raise RuntimeError(f"choosing the refusal threshold of variant {v.key!r}: tuning question "
                               f"{failed['qid'].iloc[0]} errored: {failed['error'].iloc[0]}")
        by_qid = dict(zip(frame["qid"], frame["confidence"]))
        choice = choose_threshold([by_qid[q.qid] for q in tuning], [q.answerable for q in tuning],
                                  objective=v.abstain.objective, max_false_refusal=v.abstain.max_false_refusal,
                                  where=f"variant {v.key!r}: the {len(tuning)} tuning questions")
        chosen = replace(v, abstain=replace(v.abstain, below=choice.threshold))
        out[v.key] = (chosen, {"score": v.abstain.score, **choice.provenance(), "rule": "refused when the "
                               "confidence is below the threshold (equal is answered); no confidence (an empty "
                               "list) is refused"})
    return out


def tune_variants(variants: Sequence[Any], question_set, *, snapshot, connection_string: str, table: str, embedder,
                  state: StateDir, miss_k: int, code_version: str) -> dict[str, tuple[Any, dict[str, Any]]]:
    """variant key -> (the variant with its tuned rrf_k or weights, the tuning's provenance) for
    each variant with `tune`: its legs queried for the question set's tuning part only (with the
    sweep's own legs), then `fusion_tuning.tune_fusion`. The scored questions are never read."""
    tuned_ones = [v for v in variants if getattr(v, "tune", None)]
    if not tuned_ones:
        return {}
    tuning = list(question_set.tuning)
    if not tuning:
        raise ConfigurationRefused(f"variant {tuned_ones[0].key!r} tunes its fusion, but the question set has no "
                                   "tuning part: materialize question_set again (the variants file's tuning split "
                                   "is applied there)")
    embeddings, _, _ = QueryEmbeddingCache(state.query_embeddings).get_or_compute(embedder, tuning)
    sweep = Sweep(snapshot=snapshot, connection_string=connection_string, table=table, query_embeddings=embeddings,
                  embed_ms_per_query=0.0, rerankers={}, miss_k=miss_k, code_version=code_version)
    split = dict(question_set.split or {})
    out = {}
    for v in tuned_ones:
        runs: dict[str, dict[str, Any]] = {leg: {} for leg in v.legs}
        for q in tuning:
            for leg in v.legs:
                timed = sweep.leg_hits(leg, v.chunk_top_k, q, v.leg_settings(leg))
                if timed.error:
                    raise RuntimeError(f"fusion tuning of variant {v.key!r}: the {leg} leg failed on tuning question "
                                       f"{q.qid}: {timed.error}")
                runs[leg][q.qid] = timed.value
        fixed = {"weights": v.weights} if v.tune == "rrf_k" else ({"rrf_k": v.rrf_k} if v.fusion == "rrf" else {})
        result = tune_fusion(runs, {q.qid: q.qrels() for q in tuning}, [q.qid for q in tuning], method=v.tune,
                             fusion=v.fusion, legs=v.legs, depth=v.depth, seed=split.get("seed"),
                             fraction=split.get("fraction"), **fixed)
        out[v.key] = (replace(v, **result.chosen), result.provenance())
    return out


def index_independent(variant) -> bool:
    """Whether no index's embedder decides the variant's results: the metadata engine (title,
    description and filename, no diagnosis legs) without a reranker. Its results still name
    each document's first chunk, so they depend on the chunking: indexes that share a chunking
    share them, ranked once. Read from the engine's kind: no legs, needing neither the index's
    table nor a question embedding (eval_pipeline.ranking.engines.ENGINES)."""
    kind = ENGINES.get(variant.engine)
    return (kind is not None and not kind.fuses and kind.leg is None and not kind.needs & {"store", "query_embedding"}
            and variant.reranker.kind == "none")


def results_table(store, variant) -> str:
    """What of the table a variant's results key holds: the table itself (its corpus, chunking
    and embedder), or for an index-independent variant its chunks alone."""
    if index_independent(variant):
        return "chunks:" + chunks_fingerprint(store.corpus_signature, store.chunking)
    return store.table


@dataclass(frozen=True)
class Alias:
    """A partition whose results are another partition's of the same run (an index-independent
    variant on an index with the same chunks): copied, labelled with its own index and table."""

    source: str  # the partition key that ranks them
    index: str
    table: str


def plan_pairs(
    pairs: Sequence[tuple[str, str, Any]],
    *,
    stores: Mapping[str, Any],
    embedder_for: Callable[[str], Any],
    builder_for: Callable[[str], Callable[..., Any]],
    **common: Any,
) -> tuple[list[tuple[str, Batch]], dict[str, Alias]]:
    """The batches of a run over (partition key, index key, variant) pairs: `plan_ranking_batches`
    once per index (its table `stores[index]`, its embedder `embedder_for(index)`, its reranker
    builder `builder_for(index)`), and the partitions that take another's results instead of
    being ranked (`Alias`): an index-independent variant is ranked on the first index of each
    chunking only."""
    batches: list[tuple[str, Batch]] = []
    claimed: dict[str, str] = {}
    aliases: dict[str, Alias] = {}
    for index in dict.fromkeys(i for _, i, _ in pairs):
        group = [(key, v) for key, i, v in pairs if i == index]
        batches += plan_ranking_batches(
            [v for _, v in group], store=stores[index], embedder=embedder_for(index),
            build_reranker=builder_for(index), index=index,
            partition_keys={v.key: key for key, v in group}, claimed=claimed, aliases=aliases, **common)
    # numbered across the whole run: unique however long the index keys are
    return [(mapping_key(number, [b.index, *b.results_keys]), b) for number, (_, b) in enumerate(batches)], aliases


def relabel(frame: pd.DataFrame, *, partition_key: str, index: str, table: str | None = None) -> pd.DataFrame:
    """A variant's results as its partition's: `variant` is the partition key (an (index,
    variant) pair's, or the variant's own), `index` the index; `table` (an alias's) replaces
    `store_table`. A copy: the cached frame is never changed."""
    out = frame.copy()
    out["variant"] = partition_key
    out["index"] = index
    if table is not None:
        out["store_table"] = table
    return out


def rank_batch(
    batch: Batch,
    variants: Sequence[Any],
    *,
    snapshot,
    store,
    question_set,
    state: StateDir,
    connection_string: str,
    embedder,
    build_reranker: Callable[..., Any],
    miss_k: int,
) -> RankedBatch:
    """Rank one batch with one Sweep: legs and candidate pools shared by its variants. The batch
    of unchanged variants is read from the cache (ranked after all if an entry has gone)."""
    check_inputs_agree(corpus_signature=snapshot.signature, store=store, questions=question_set, embedder=embedder)
    cache = ResultsCache(state.ranked_results)
    keys = batch.results_keys
    cached = {v.key: frame for v in variants if batch.from_cache and (frame := cache.get(keys[v.key])) is not None}
    todo = [v for v in variants if v.key not in cached]
    result = RankedBatch(frames={}, reused=list(cached), query_embeddings=batch.query_embeddings)
    if todo:
        questions = question_set.questions
        built = {v.key: build_reranker(v.reranker, warm=True) for v in todo if v.reranker.kind != "none"}
        for key, reranker in built.items():  # the models loaded are the ones the cache keys name
            if reranker.identity() != batch.reranker_identities[key]:
                raise RuntimeError(f"the reranker of variant {key!r} changed while the run was planned "
                                   f"(planned {batch.reranker_identities[key]}, loaded {reranker.identity()}); "
                                   "run again")
        tuned = tune_variants(todo, question_set, snapshot=snapshot, connection_string=connection_string,
                              table=store.table, embedder=embedder, state=state, miss_k=miss_k,
                              code_version=batch.code_version)
        to_rank = [tuned[v.key][0] if v.key in tuned else v for v in todo]
        refusing = tune_abstention(to_rank, question_set, snapshot=snapshot, connection_string=connection_string,
                                   table=store.table, embedder=embedder, state=state, miss_k=miss_k,
                                   code_version=batch.code_version, rerankers=built)
        to_rank = [refusing[v.key][0] if v.key in refusing else v for v in to_rank]
        embeddings, _, _ = QueryEmbeddingCache(state.query_embeddings).get_or_compute(embedder, questions)
        sweep = Sweep(snapshot=snapshot, connection_string=connection_string, table=store.table,
                      query_embeddings=embeddings, embed_ms_per_query=batch.embed_ms_per_query, rerankers=built,
                      miss_k=miss_k, code_version=batch.code_version)
        computed = sweep.run(to_rank, questions)
        engine = engine_identity(store_environment(connection_string))
        for frame in computed.values():  # what ranked it: a partition of another engine is refused by the verdict
            frame["engine_identity"] = engine
        for key, (_, provenance) in tuned.items():  # the chosen values and how they were chosen, with the results
            config = json.loads(computed[key]["variant_config"].iloc[0])
            computed[key]["variant_config"] = identity_json({**config, "tuned": provenance})
            computed[key]["tuning_fingerprint"] = question_set.tuning_fingerprint  # checked by the report
        for key, (_, provenance) in refusing.items():  # the chosen threshold, its score, what it did on tuning
            config = json.loads(computed[key]["variant_config"].iloc[0])
            computed[key]["variant_config"] = identity_json({**config, "abstain_tuned": provenance})
            computed[key]["tuning_fingerprint"] = question_set.tuning_fingerprint
        result.not_cached = [key for key, frame in computed.items() if not ResultsCache.cacheable(frame)]
        for key, frame in computed.items():
            cache.put(keys[key], frame)  # refuses errored results
        cached.update(computed)
        result.queries_by_stage = sweep.queries_by_stage
    for v in variants:  # shared by every table of its chunks (see `results_table`): served as this table's
        if index_independent(v):
            cached[v.key] = cached[v.key].assign(store_table=store.table)
    if batch.index:  # a pair's results: labelled with its partition key and index
        result.frames = {batch.partition_keys[v.key]: relabel(cached[v.key], partition_key=batch.partition_keys[v.key],
                                                              index=batch.index) for v in variants}
        result.reused = [batch.partition_keys[k] for k in result.reused]
        result.not_cached = [batch.partition_keys[k] for k in result.not_cached]
    else:
        result.frames = {v.key: cached[v.key] for v in variants}
    return result


def rank_in_one_step(variants: Sequence[Any], *, snapshot, store, question_set, state: StateDir,
                     connection_string: str, embedder, build_reranker: Callable[..., Any], miss_k: int, reuse: bool,
                     code_version: str, log: Callable[[str], None]) -> dict[str, pd.DataFrame]:
    """Every variant ranked in this process, as the in-process ranked_results graph does it
    (the same plan, caches and Sweep): for a step that needs rankings of its own question set
    (the golden prompts) without a graph of its own."""
    planned = plan_ranking_batches(variants, corpus_signature=snapshot.signature, store=store,
                                   question_set=question_set, state=state, connection_string=connection_string,
                                   embedder=embedder, build_reranker=build_reranker, miss_k=miss_k, reuse=reuse,
                                   workers=1, code_version=code_version, log=log)
    by_key = {v.key: v for v in variants}
    ranked = [rank_batch(batch, [by_key[k] for k in batch.results_keys], snapshot=snapshot, store=store,
                         question_set=question_set, state=state, connection_string=connection_string,
                         embedder=embedder, build_reranker=build_reranker, miss_k=miss_k) for _, batch in planned]
    results, _ = merge_ranked_batches(ranked, [v.key for v in variants])
    return results


def merge_ranked_batches(batches: Sequence[RankedBatch], keys: Sequence[str],
                         aliases: Mapping[str, Alias] | None = None) -> tuple[dict[str, pd.DataFrame], dict[str, Any]]:
    """The batches merged into one DataFrame per partition (in `keys`' order), each alias's
    its source's results relabelled, and the metadata of the whole materialization (each
    partition's own numbers: `eval_pipeline.ranking.partitions.ranked_partition_metadata`)."""
    frames = {key: frame for b in batches for key, frame in b.frames.items()}
    for key, alias in (aliases or {}).items():
        frames[key] = relabel(frames[alias.source], partition_key=key, index=alias.index, table=alias.table)
    results = {key: frames[key] for key in keys}
    queries: dict[str, int] = {}
    for b in batches:
        for stage, n in b.queries_by_stage.items():
            queries[stage] = queries.get(stage, 0) + n
    reused = [key for b in batches for key in b.reused]
    not_cached = [key for b in batches for key in b.not_cached]
    metadata: Mapping[str, Any] = {
        "questions": len(next(iter(results.values()))) if results else 0,
        "variants": ", ".join(results),
        "steps": len(batches),
        "reused_unchanged": ", ".join(reused) or "none",
        "shared_across_indexes": ", ".join(f"{k} (from {a.source})" for k, a in (aliases or {}).items()) or "none",
        "not_cached_errored": ", ".join(not_cached) or "none",
        "query_embeddings": next((b.query_embeddings for b in batches if b.query_embeddings != "not needed"),
                                 "not needed"),
        "queries_by_stage": queries,
    }
    return results, dict(metadata)
