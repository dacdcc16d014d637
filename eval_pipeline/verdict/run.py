"""The verdict asset's one function: decide whether the run passes, retrieval and answers, in
one place, before anything is rendered.

`decide_run` checks that its inputs belong together (the corpus, every index's table, the
question set and its fusion-tuning split as the variants file says it now, each partition's
recorded configuration), builds the run's provenance (the benchmark's content identity, each
variant's configuration and the engine), judges every variant's retrieval gate
(`eval_pipeline.verdict.retrieval.judge_run`, failing closed, with a paired comparison where the
benchmark changed) and every (variant, grader)'s answer gate
(`eval_pipeline.verdict.answers.judge_answer_run`), and returns one `RunVerdict`. The
report renders it and records it; the checks on the verdict asset read it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping
from dataclasses import asdict
from typing import Any

import pandas as pd

from eval_pipeline.corpus.sources import CorpusSnapshot
from eval_pipeline.history.identity import benchmark_fingerprint
from eval_pipeline.history.measurements import session as history_session
from eval_pipeline.history.runs import labels_fingerprint, setting_changes
from eval_pipeline.questions.sets import QuestionSet
from eval_pipeline.ranking.caches import engine_identity, store_environment
from eval_pipeline.ranking.inputs import InconsistentInputs, check_inputs_agree
from eval_pipeline.store.indexes import IndexStores
from eval_pipeline.store.ingest import StoreInfo
from eval_pipeline.verdict.answers import check_answers_belong, judge_answer_run
from eval_pipeline.verdict.paired import DERIVED, RankConfiguration
from eval_pipeline.verdict.retrieval import RunVerdict, code_version, judge_run, results_provenance

__all__ = ["check_partitions_current", "check_split_current", "decide_run", "run_provenance"]


def check_split_current(question_set: QuestionSet, tuning: tuple[float, int] | None) -> None:
    """The question set's fusion-tuning split is the one the variants file asks for now: a set
    split for a tuned variant that is gone (or split otherwise) scores every variant on a stale
    subset. Refused, naming what to materialize again."""
    split = question_set.split
    have = None if not split else (float(split["fraction"]), int(split["seed"]))
    want = None if tuning is None else (float(tuning[0]), int(tuning[1]))
    if have != want:
        said = "no fusion tuning" if want is None else f"tuning fraction {want[0]}, seed {want[1]}"
        was = "not split" if have is None else f"split for tuning (fraction {have[0]}, seed {have[1]})"
        raise InconsistentInputs(f"the question set was {was}, but the variants file now says {said}: every variant "
                                 "would be scored on another subset than the file describes. Materialize question_set "
                                 "(and the assets after it) again.")


# What a partition's recorded configuration holds beyond the variants file's settings: what the
# paired ranking derives or the run chooses (`DERIVED`), and the pair's index.
_NOT_DECLARED = (*DERIVED, "index")


def check_partitions_current(per_variant: Mapping[str, pd.DataFrame], sweep) -> None:
    """Each partition was ranked for the configuration the variants file gives it now: a
    partition materialized under an earlier file (the verdict or the report materialized alone
    after an edit) would be judged, and recorded, as the new configuration's measurement.
    Refused, naming the partition, the settings that differ and what to materialize again."""
    problems = []
    for key, frame in per_variant.items():
        raw = sorted(set(frame["variant_config"].dropna())) if "variant_config" in frame else []
        if len(raw) != 1:
            continue  # results_provenance names a partition without one recorded configuration
        variant = sweep.pair(key)[1]
        tuned = {variant.tune} if getattr(variant, "tune", None) else set()  # its value is the run's choice
        declared = {k: v for k, v in variant.describe().items() if k not in tuned}
        recorded = {k: v for k, v in json.loads(raw[0]).items() if k not in _NOT_DECLARED and k not in tuned}
        canonical = json.loads(json.dumps(declared, sort_keys=True, default=str))
        if canonical != recorded:
            changes = setting_changes(recorded, canonical)
            problems.append(f"partition {key!r} was ranked for another configuration than {sweep.source} gives it "
                            f"now ({'; '.join(changes[:5])}{'; ...' if len(changes) > 5 else ''})")
    if problems:
        raise InconsistentInputs("; ".join(problems) + ": materialize ranked_results and variant_metrics (those "
                                 "partitions, or the whole job) again before the verdict")


def complete_verdict(verdict: RunVerdict, answer_metrics: Mapping[str, pd.DataFrame], *, run_id: str,
                     record_history: bool, order: list[str], corpus_signature: str,
                     answer_tolerances: Mapping[str, float], connection_string: str) -> RunVerdict:
    """``verdict`` (`judge_run`'s, retrieval judged) completed as the verdict asset completes it, in
    this order: the run's id and whether the report records it (`record_history`; off:
    `RunVerdict.unrecorded`), which decide what an acceptance of the run refuses
    (`acceptance_refusals`); then the answers judged with those refusals (their record refused
    too when unrecorded); then every named way out made to say all it takes. One sequence for
    `decide_run` and for the tests that judge runs without ranking anything."""
    verdict.run_id = run_id
    verdict.unrecorded = "" if record_history else "report.record_history: false"
    verdict.answers = judge_answer_run(answer_metrics, order=order, corpus_signature=corpus_signature,
                                       tolerances=answer_tolerances, strict=verdict.policy["answer_strict"],
                                       connection_string=connection_string, run_id=run_id,
                                       configurations=verdict.provenance["configurations"],
                                       vanished=verdict.vanished, renamed=set(verdict.inherits),
                                       refused=verdict.acceptance_refusals,
                                       live=verdict.provenance.get("sweep_keys"))
    verdict.answers.unrecorded = verdict.unrecorded  # what record_answers refuses
    verdict.disclose_ways_out()
    return verdict


def decide_run(
    variant_metrics: Mapping[str, pd.DataFrame],
    *,
    sweep,
    snapshot: CorpusSnapshot,
    stores: IndexStores,
    question_set: QuestionSet,
    embedder_for: Callable[[str], Any],
    connection_string: str,
    run_id: str,
    statistics_cache,
    answer_metrics: Mapping[str, pd.DataFrame] | None = None,
    rank_reference: RankConfiguration | None = None,
    record_history: bool,
) -> RunVerdict:
    """The run's verdict (see the module docstring). `stores` holds every index's table,
    `embedder_for(index key)` its embedder; a partition's index is `sweep.pair(key)`'s.
    `rank_reference(partition key, recorded configuration)` ranks a reference configuration
    on today's questions for a paired comparison (`eval_pipeline.verdict.paired`).
    `record_history`: the report's setting in this run; off, no report records the run, so no
    acceptance of it can be taken and none is offered (`RunVerdict.unrecorded`)."""
    order = [k for k in sweep.keys if k in variant_metrics]
    if not order:
        raise ValueError("no variant has metrics yet; materialize ranked_results and variant_metrics first")
    check_split_current(question_set, sweep.tuning)
    per_variant = {k: variant_metrics[k] for k in order}
    check_partitions_current(per_variant, sweep)
    index_of = {k: sweep.pair(k)[0].key for k in order}
    if sweep.indexes_listed:
        stores.check_current(sweep.index_by_key(), index_of.values())
    for index in dict.fromkeys(index_of.values()):
        check_inputs_agree(corpus_signature=snapshot.signature, store=stores[index], questions=question_set,
                           embedder=embedder_for(index))
    tables = {k: stores[i].table for k, i in index_of.items()}
    store = stores[index_of.get(sweep.baseline, next(iter(index_of.values())))]  # the run-level fields' index
    run_index = index_of.get(sweep.baseline, next(iter(index_of.values())))
    database = store_environment(connection_string)  # the server and extension that rank
    engine = engine_identity(database)
    identities: dict[str, str] = {}  # each index's embedder identity, read once for its partitions

    def identity_of(index: str) -> str:
        if index not in identities:
            identities[index] = embedder_for(index).identity
        return identities[index]

    provenance = run_provenance(per_variant, snapshot, store, question_set, tables=tables, engine=engine,
                                indexes={k: {**_index_provenance(stores[i]), "embedder_identity": identity_of(i)}
                                         for k, i in index_of.items()} if sweep.indexes_listed else None)
    provenance["embedder_identity"] = identity_of(run_index)  # what changes a vector, input types too
    provenance["database"], provenance["engine_identity"] = database, engine
    with history_session():  # one connection for the verdict's ~180 history lookups
        verdict = judge_run(per_variant, baseline=sweep.baseline, provenance=provenance,
                            tolerances=sweep.tolerances, strict=sweep.strict, answer_strict=sweep.answer_strict,
                            run_id=run_id, limited=question_set.limited, connection_string=connection_string,
                            record=False, statistics_cache=statistics_cache, sweep_keys=list(sweep.keys),
                            rank_reference=rank_reference)
        check_answers_belong(answer_metrics or {}, corpus_signature=store.corpus_signature, tables=tables,
                             variant_configs=provenance.get("variants", {}), engine=engine)
        complete_verdict(verdict, answer_metrics or {}, run_id=run_id, record_history=record_history, order=order,
                         corpus_signature=store.corpus_signature, answer_tolerances=sweep.answer_tolerances,
                         connection_string=connection_string)
    verdict.index_of, verdict.tables = index_of, tables
    verdict.metrics_digest = metrics_digest(per_variant)
    return verdict


def metrics_digest(per_variant: Mapping[str, pd.DataFrame]) -> str:
    """A digest of the per-question scores a verdict was decided on: the report refuses to
    render a verdict next to other scores (a partition materialized again after it)."""

    digest = hashlib.sha256()
    for key, frame in per_variant.items():
        digest.update(key.encode() + b"\0")
        # the object columns read from the frame's dtypes: selecting each column to ask cost more than the hash
        objects = [c for c, dtype in frame.dtypes.items() if dtype == object]  # noqa: E721  a dtype, not a type
        digest.update(pd.util.hash_pandas_object(frame.drop(columns=objects), index=False).to_numpy().tobytes())
        digest.update(repr(frame["qid"].tolist()).encode())
    return digest.hexdigest()[:16]


def _index_provenance(info: StoreInfo) -> dict[str, Any]:
    """What a pair's index is, recorded with its configuration: a change is the pair's treatment."""
    return {"table": info.table, "embedder": info.embedder, "embedder_revision": info.embedder_revision,
            "chunking": asdict(info.chunking)}


def run_provenance(per_variant: Mapping[str, pd.DataFrame], snapshot: CorpusSnapshot, store: StoreInfo,
                   question_set: QuestionSet, *, tables: Mapping[str, str],
                   indexes: Mapping[str, Mapping[str, Any]] | None = None, engine: str | None = None) -> dict[str, Any]:
    """The provenance the run is judged and recorded with (the benchmark's identity, the
    treatment, and each variant's configuration as recorded in its partition's results).
    `tables` is each partition's table; `indexes` (with indexes
    listed) each pair's index, added to its configuration as `index`, which then stands for
    the run-level embedder and chunking in the pair's treatment (`compare_provenance`).
    The benchmark is identified by content: every scored question's text, golds and grades,
    and the tuning part (`eval_pipeline.history.identity.benchmark_fingerprint`)."""
    return {
        "corpus_signature": store.corpus_signature,  # what the table was built from (checked to agree)
        "question_set_fingerprint": question_set.fingerprint,
        "labels_fingerprint": labels_fingerprint(question_set.questions),
        "benchmark_fingerprint": benchmark_fingerprint(question_set.questions, tuning=question_set.tuning),
        "embedder": store.embedder,
        "embedder_revision": store.embedder_revision,
        "chunking": asdict(store.chunking),
        "code_version": code_version(),
        # as recorded in each partition's results, not as the variants file says now
        **_with_indexes(results_provenance(per_variant, tables=tables,
                                           questions_fingerprint=question_set.fingerprint,
                                           tuning_fingerprint=question_set.tuning_fingerprint, engine=engine),
                       indexes),
    }


def _with_indexes(provenance: dict[str, Any], indexes: Mapping[str, Mapping[str, Any]] | None) -> dict[str, Any]:
    if indexes:
        provenance["variants"] = {k: {**config, "index": dict(indexes[k])} for k, config in
                                  provenance["variants"].items()}
    return provenance


