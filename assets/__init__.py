"""The asset graph: corpus -> pgvector store -> question set -> ranked results -> variant metrics ->
verdict -> findings -> report, and beside the ranking, golden prompts -> answers -> graded
answers -> answer metrics -> verdict (assets/answer_quality.py). The verdict decides, in one
place, whether the run passes (its checks: one gate per variant, retrieval and answers); the
findings measure what the report shows beyond it (power, audit, labels, indexes' costs, a
second question set); the report only renders both, and its blocking check `verdict_passed`
fails the run after the report is written.

ranked_results, variant_metrics and the answer assets are partitioned by variant, or by
(index, variant) pair when the variants file lists indexes (assets/partitions.py);
ranked_results is a small graph of its own (assets/ranking.py), and so is pgvector_store, one
table per index written in one or more shards (assets/store.py).

Each asset reads its inputs, calls one eval_pipeline function and attaches metadata.

The variants file is read once, by definitions.py, and passed to `build_assets(sweep)`: every
asset, op and check that depends on the sweep is built by a factory from that value and reads
it through its closure, never from a global. The checks that do not depend on it
(no_errored_questions, verdict_passed, verdict_gate) are plain module-level definitions.
"""

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Optional

import pandas as pd
from dagster import (
    AssetCheckExecutionContext,
    AssetCheckResult,
    AssetChecksDefinition,
    AssetCheckSeverity,
    AssetCheckSpec,
    AssetExecutionContext,
    AssetIn,
    AssetKey,
    AssetsDefinition,
    BackfillPolicy,
    Config,
    MetadataValue,
    PartitionsDefinition,
    asset,
    asset_check,
    multi_asset_check,
)
from pydantic import Field

from assets.answer_quality import (  # noqa: F401  (the answer-quality assets: part of the graph)
    AnswersConfig,
    GoldenPromptsConfig,
    GradedAnswersConfig,
    build_answer_assets,
    golden_prompts,
    preflight_answers,
)
from assets.metadata import add_partition_metadata, to_metadata
from assets.partitions import partitions_of
from assets.ranking import (
    RankingConfig,
    build_ranked_results,
    index_embedder_of,
    reference_ranker,
    reranker_builder,
    run_pairs,
)
from assets.run import op_config, safe_results_dir, selected_assets
from assets.store import StoreConfig, build_pgvector_store
from eval_pipeline.common.state import PROJECT_ROOT
from eval_pipeline.config.sweep import SweepConfig
from eval_pipeline.corpus.sources import DEMO_DATA_DIR, CorpusSnapshot, load_corpus
from eval_pipeline.grading.agreement import check_relevance_rows, load_calibration
from eval_pipeline.questions.build import (
    build_compared_set,
    build_question_set,
    load_compared_sets,
    preflight_run,
    record_compared_set,
)
from eval_pipeline.questions.sets import QuestionSet
from eval_pipeline.ranking.fusion_tuning import split_question_set
from eval_pipeline.ranking.steps import check_thresholds_can_be_chosen
from eval_pipeline.reporting.answers import answer_check_output, answer_gate_checks
from eval_pipeline.reporting.console import console_summary
from eval_pipeline.reporting.run import (
    Findings,
    gate_check_names,
    measure_findings,
    render_run,
    variant_gate_checks,
    verdict_failures,
    verdict_metadata,
    verdict_output,
)
from eval_pipeline.reporting.set_validity import rank_compared_sets
from eval_pipeline.scoring.partitions import partition_metrics, score_partitions
from eval_pipeline.store.indexes import CHUNKING_SETTINGS, IndexStores
from eval_pipeline.validity.audit import audit_metadata, run_audit
from eval_pipeline.verdict.retrieval import RunVerdict, code_version
from eval_pipeline.verdict.run import decide_run
from resources import DatabaseResource, EmbedderResource, LLMResource, RerankerResource, StateResource

DEMO_QUESTIONS = DEMO_DATA_DIR / "questions.jsonl"


class CorpusConfig(Config):
    source: Literal["demo", "folder", "jsonl", "beir"] = "demo"
    path: Optional[str] = Field(default=None, description="folder, JSONL file, or BEIR folder / corpus.jsonl[.gz]")
    lenient: bool = Field(default=False, description="skip bad records (counted and reported) instead of failing")
    max_document_chars: int = Field(default=5_000_000, ge=1, description="longer documents are bad input")
    follow_outside_links: bool = Field(default=False, description="a folder corpus may follow symbolic links to files "
                                       "outside the folder (refused by default: a link is not a document)")


def validate_run_config(run_config: dict, sweep: SweepConfig) -> None:
    """Check every asset's settings (types, ranges, cross-field rules) in the run's first step,
    so a negative depth or a bad overlap fails in a second, not after the embedding."""
    classes = {"corpus_snapshot": CorpusConfig, "pgvector_store": StoreConfig, "question_set": QuestionSetConfig,
               "ranked_results": RankingConfig, "report": ReportConfig, "golden_prompts": GoldenPromptsConfig,
               "answers": AnswersConfig, "graded_answers": GradedAnswersConfig}
    for op, section in (run_config.get("ops") or {}).items():
        if op in classes and isinstance(section, dict):
            given = section.get("config") or {}
            settings = classes[op](**given)
            if isinstance(settings, StoreConfig):
                settings.chunking()
                # the Launchpad pre-fills every default: only a value other than the default is the user's
                defaults = {k: f.default for k, f in StoreConfig.model_fields.items()}
                chunking = sorted(k for k in set(given).intersection(CHUNKING_SETTINGS) if given[k] != defaults[k])
                if chunking and sweep.indexes_listed:
                    raise ValueError(f"ops.pgvector_store.config.{chunking[0]}: the variants file {sweep.source} lists "
                                     "indexes, and each index's chunking is set there; remove it from the run config")


class ComparedSetConfig(Config):
    """A second question set on the same corpus (`question_set.compare_with`): every variant is
    ranked on it too, and the report's set_validity section says whether the two sets rank the
    variants alike (Kendall's τ with its interval, the pairs whose order flips)."""

    name: str = Field(default="ict", description="its label in the report and the metadata (letters, digits, "
                      "'.', '_', '-')")
    source: Literal["file", "beir", "generate"] = Field(
        default="generate", description="file: a JSONL set with header; beir: queries.jsonl + qrels/<split>.tsv; "
        "generate: made from the corpus by `generator`, cached per document")
    generator: Literal["llm", "ict"] = Field(default="ict", description="generate: ict (no model: sentences of the "
                                             "documents, a weak set) or llm (back-translation with the LLM resource)")
    path: Optional[str] = Field(default=None, description="file: the JSONL; beir: the folder; generate: output file "
                                "(default: compared_questions_<name>_<corpus signature>.jsonl in the state dir)")
    beir_split: str = Field(default="test", description="beir: qrels/<split>.tsv")
    seed: int = Field(default=0, ge=0, description="generate with ict: which sentences are drawn")
    k: Optional[int] = Field(default=None, ge=1, le=50, description="generate: questions per document (default 5)")
    abstention_frac: float = Field(default=0.15, ge=0.0, lt=1.0, description="generate: share of abstention questions")
    masking: bool = Field(default=True, description="generate: hide the document's name and identifiers")
    unit: Literal["document", "chunk"] = Field(default="document", description="generate: per document or per chunk")
    max_units: Optional[int] = Field(default=None, ge=1, description="generate: cap on units, in id order")


class QuestionSetConfig(Config):
    source: Literal["file", "beir", "generate"] = Field(
        default="file", description="file: a JSONL set with header (default: the committed demo set); "
        "beir: queries.jsonl + qrels/<split>.tsv; generate: made from the corpus by `generator`, cached"
    )
    generator: Literal["llm", "ict"] = Field(default="llm", description="generate: llm (back-translation with the "
                                             "LLM resource) or ict (no model: sentences of the documents, a weak set)")
    seed: int = Field(default=0, ge=0, description="generate with ict: which sentences are drawn")
    path: Optional[str] = Field(default=None, description="file: the JSONL; beir: the folder; generate: output file")
    beir_split: str = Field(default="test", description="beir: qrels/<split>.tsv")
    k: Optional[int] = Field(default=None, ge=1, le=50, description="generate: questions per document (default 5)")
    abstention_frac: float = Field(default=0.15, ge=0.0, lt=1.0, description="generate: share of abstention questions")
    masking: bool = Field(default=True, description="generate: hide the document's name from the model")
    extra_golds: Optional[str] = Field(default=None, description="a reviewed hole_review.jsonl: its rows with "
                                       "accept: true are added as golds (the labels fingerprint changes)")
    unit: Literal["document", "chunk"] = Field(default="document", description="generate: ask per document "
                                               "(k default 5) or per chunk of the default chunking (k default 1)")
    max_units: Optional[int] = Field(default=None, ge=1, description="generate: cap on units, in id order")
    allow_partial: bool = Field(default=False, description="generate: write the set even if some units failed")
    limit: Optional[int] = Field(default=None, ge=1, description="a quick run on the first N questions; its "
                                 "results get a suffixed name and never serve as a baseline")
    compare_with: Optional[ComparedSetConfig] = Field(
        default=None, description="a second question set on the same corpus (e.g. {source: generate, generator: "
        "ict}): every variant is ranked on it too and the report shows whether the two sets rank the variants alike")


class ReportConfig(Config):
    results_dir: str = Field(default=str(PROJECT_ROOT / "results"),
                             description="where results.md and per_query.jsonl go")
    record_history: bool = Field(default=True, description="record the run in the Postgres history tables "
                                 "(false: the gate still judges against the history, the run is not recorded)")


class FindingsConfig(Config):
    grade_holes: bool = Field(default=False, description="grade the unjudged documents of the pooled top 10 with the "
                              "LLM resource (spends tokens; cached): hit@1/5/10 and nDCG@10 are also shown with those "
                              "labels, and candidate golds go to hole_review.jsonl")
    relevance_calibration: Optional[str] = Field(
        default=None, description="with grade_holes: a JSONL file of people's relevance grades (id, question, text: "
        "the passage, human: true/false) the grader is also run on: its agreement with people, and the share of the "
        "holes people would call relevant with a prediction-powered interval (e.g. the shipped "
        "eval_pipeline/calibration_data/scifact_relevance.jsonl)")


def preflight_findings(config: FindingsConfig, llm: LLMResource) -> None:
    """The findings' settings, checked in the run's first step: grading the holes needs a model
    (fail now, not after the ranking); a relevance calibration file is read and checked (no
    model call), and is refused without grade_holes (it would calibrate nothing)."""
    if config.relevance_calibration:
        if not config.grade_holes:
            raise ValueError("ops.findings.config.relevance_calibration calibrates the grader of the holes: set "
                             "ops.findings.config.grade_holes too, or remove it")
        check_relevance_rows(load_calibration(config.relevance_calibration), config.relevance_calibration)
    if config.grade_holes:
        llm.get()


# The checks that do not depend on the sweep.


@asset_check(
    asset="report",
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
    asset="report",
    blocking=True,
    description="The run's verdict passed: every variant's retrieval gate and answer gate (the checks on the "
    "verdict asset say which failed and why). Runs after the report is written, so it can be read; a failure "
    "makes the run fail (exit code 1).",
)
def verdict_passed(report: dict) -> AssetCheckResult:
    failed = report["verdict_failed"]
    return AssetCheckResult(passed=not failed, severity=AssetCheckSeverity.ERROR,
                            description=report["headline"],  # the check's row says why, not only that it failed
                            metadata={"failed": MetadataValue.json(failed), "failed_count": len(failed),
                                      "headline": report["headline"]})


@asset_check(
    asset="verdict",
    blocking=True,
    description="The run's verdict passed, when this run does not render the report too: materializing the "
    "verdict alone must not pass a failed gate. With the report in the run, the report's blocking "
    "`verdict_passed` fails the run instead, after the report is written (so this one passes, saying so).",
)
def verdict_gate(context: AssetCheckExecutionContext, verdict: RunVerdict) -> AssetCheckResult:
    deferred = AssetKey("report") in selected_assets(context)
    return AssetCheckResult(passed=verdict.passed or deferred, severity=AssetCheckSeverity.ERROR,
                            metadata={"verdict passed": verdict.passed, "decided by report.verdict_passed": deferred,
                                      "failed": ", ".join(verdict_failures(verdict)) or "none"})


# The assets and checks that depend on the sweep: each built from it, reading it by closure.


def corpus_snapshot_asset(sweep: SweepConfig) -> AssetsDefinition:
    """corpus_snapshot, whose preflight checks the run config and the sweep's rerankers."""

    @asset(group_name="retrieval_eval")
    def corpus_snapshot(context: AssetExecutionContext, config: CorpusConfig, embedder: EmbedderResource,
                        rerankers: RerankerResource, llm: LLMResource, judge_llm: LLMResource,
                        state: StateResource) -> CorpusSnapshot:
        """The documents to search, with an order-independent signature over ids and content hashes,
        checked and signed as they are read and written straight to a spool in the state dir, so
        the step never holds the corpus: the steps after it get a reference, and read the file as
        they walk it (ingest streams it).

        Also the run's preflight, before anything is embedded: every asset's settings, the
        question set (when this run builds it), every reranker's model or endpoint, and the results
        folder the report will publish into (never one holding the state dir or the code)."""
        validate_run_config(context.run.run_config, sweep)
        if AssetKey("report") in selected_assets(context):
            safe_results_dir(context, op_config(context, "report", ReportConfig).results_dir, state.dir())
        if AssetKey("findings") in selected_assets(context):
            preflight_findings(op_config(context, "findings", FindingsConfig), llm)
        snapshot = load_corpus(config.source, config.path, lenient=config.lenient,  # checked and signed streaming
                               max_document_chars=config.max_document_chars,
                               follow_outside_links=config.follow_outside_links,
                               spool_to=state.dir().corpus_spools)
        preflight_answers(context, snapshot, llm, judge_llm)  # a self-judging run is refused here, before any call
        builds_questions = AssetKey("question_set") in selected_assets(context)
        context.add_output_metadata(preflight_run(
            snapshot, questions=op_config(context, "question_set", QuestionSetConfig) if builds_questions else None,
            variants=sweep.variants, warn=context.log.warning,
            reranker_identity=lambda spec: rerankers.build(spec, embedder=embedder.get(), warm=False).identity()))
        return snapshot

    return corpus_snapshot


def question_set_asset(sweep: SweepConfig) -> AssetsDefinition:
    """question_set, split for fusion tuning when the sweep tunes a variant."""

    @asset(group_name="retrieval_eval")
    def question_set(
        context: AssetExecutionContext,
        config: QuestionSetConfig,
        corpus_snapshot: CorpusSnapshot,
        state: StateResource,
        llm: LLMResource,
    ) -> QuestionSet:
        """The question set, checked against the corpus it was written for (generated ones are cached per
        document): eval_pipeline.questions.build.build_question_set. When a variant tunes its fusion
        or chooses its refusal threshold (`abstain: auto`), split into the tuning part and the
        held-out rest that every variant is scored on
        (eval_pipeline.ranking.fusion_tuning.split_question_set). With `compare_with`, the second
        set is built (and cached) the same way and recorded in this one's header, for the report
        to rank and compare (eval_pipeline.questions.build.build_compared_set)."""
        qs, metadata = build_question_set(config, corpus_snapshot, llm_client=llm.get, state=state.dir(),
                                          warn=context.log.warning)
        if sweep.tuning is not None:  # tuned on one part (fusion, refusal thresholds), every variant scored on the rest
            fraction, seed = sweep.tuning
            qs = split_question_set(qs, fraction=fraction, seed=seed)
            metadata = {**metadata, "tuning_questions": qs.split["n_tuning"],
                        "held_out_questions": qs.split["n_held_out"]}
        check_thresholds_can_be_chosen(sweep.variants, qs, source=sweep.source)  # before anything is ranked
        if config.compare_with is not None:
            name = config.compare_with.name
            other, other_metadata = build_compared_set(config, corpus_snapshot, llm_client=llm.get,
                                                       state=state.dir(), warn=context.log.warning)
            qs = record_compared_set(qs, name, other)
            metadata = {**metadata, "compare_with": name, "compare_with path": Path(other.path),
                        "compare_with questions": len(other.questions),
                        "compare_with fingerprint": other.fingerprint,
                        **{f"compare_with {k}": v for k, v in other_metadata.items()
                           if k.startswith("generation_") and isinstance(v, (int, float))}}
        context.add_output_metadata(to_metadata(metadata))
        return qs

    return question_set


def variant_metrics_asset(partitions: PartitionsDefinition) -> AssetsDefinition:
    """variant_metrics, on the sweep's partitions."""

    @asset(
        group_name="retrieval_eval",
        partitions_def=partitions,
        backfill_policy=BackfillPolicy.single_run(),
        io_manager_key="variant_io_manager",
    )
    def variant_metrics(
        context: AssetExecutionContext, ranked_results: dict[str, pd.DataFrame], question_set: QuestionSet,
        state: StateResource,
    ) -> dict[str, pd.DataFrame]:
        """Per-question scores of each variant (hit@k, MRR, recall, nDCG@10, miss class, latency); each
        partition carries its own numbers (eval_pipeline.scoring.partitions.partition_metrics), both
        kept in the state dir by their inputs."""
        cache = state.dir().scored_partitions
        scored = score_partitions(ranked_results, context.partition_keys, question_set.questions, cache=cache)
        for key, frame in scored.items():  # each partition's own numbers, plotted over time on the asset page
            add_partition_metadata(context, key, partition_metrics(key, frame, cache=cache))
        return scored

    return variant_metrics


def verdict_asset(sweep: SweepConfig) -> AssetsDefinition:
    """verdict, judged with the sweep's gates, baseline and tolerances."""

    @asset(group_name="retrieval_eval")
    def verdict(
        context: AssetExecutionContext,
        variant_metrics: dict[str, pd.DataFrame],
        answer_metrics: dict[str, pd.DataFrame],
        corpus_snapshot: CorpusSnapshot,
        pgvector_store: IndexStores,
        question_set: QuestionSet,
        database: DatabaseResource,
        state: StateResource,
        embedder: EmbedderResource,
        rerankers: RerankerResource,
    ) -> RunVerdict:
        """Whether the run passes, decided in one place, retrieval and answers, failing closed: each
        variant against its history of the same benchmark, else against its reference configuration
        ranked on today's questions (paired), else not compared, which fails until a run is accepted
        (eval_pipeline.verdict.run.decide_run). The report renders it; the gate checks read it."""
        decided = decide_run(
            variant_metrics, sweep=sweep, snapshot=corpus_snapshot, stores=pgvector_store, question_set=question_set,
            embedder_for=index_embedder_of(embedder, sweep), connection_string=database.connection_string(),
            run_id=context.run_id, statistics_cache=state.dir().statistics, answer_metrics=answer_metrics,
            rank_reference=reference_ranker(context, corpus_snapshot, pgvector_store, question_set, database, state,
                                            embedder, rerankers, sweep),
            record_history=op_config(context, "report", ReportConfig).record_history)
        context.add_output_metadata(to_metadata(verdict_metadata(decided, sweep.baseline)))
        context.log.info(console_summary(decided))  # the CI log's summary; scripts/run_job.sh repeats it at the end
        return decided

    return verdict


def findings_asset(sweep: SweepConfig) -> AssetsDefinition:
    """findings, measured with the sweep's settings."""

    @asset(group_name="retrieval_eval")
    def findings(
        context: AssetExecutionContext,
        config: FindingsConfig,
        verdict: RunVerdict,
        variant_metrics: dict[str, pd.DataFrame],
        corpus_snapshot: CorpusSnapshot,
        pgvector_store: IndexStores,
        question_set: QuestionSet,
        database: DatabaseResource,
        state: StateResource,
        llm: LLMResource,
        embedder: EmbedderResource,
        rerankers: RerankerResource,
    ) -> Findings:
        """What the report shows beyond the verdict, measured once so the report only renders:
        power, the audit, label coverage and flips, graded holes (`grade_holes`), the indexes'
        costs and recommendation, and a second question set (`question_set.compare_with`) ranked
        by every variant of the run, index by index, for "Do the question sets agree?"
        (eval_pipeline.reporting.run.measure_findings)."""
        compared = load_compared_sets(question_set, corpus_snapshot)
        if compared:
            started = time.perf_counter()
            embedder_for = index_embedder_of(embedder, sweep)
            compared = rank_compared_sets(
                compared, run_pairs(list(verdict.gates), pgvector_store, sweep), stores=pgvector_store,
                embedder_for=embedder_for, builder_for=lambda index: reranker_builder(rerankers, embedder_for(index)),
                snapshot=corpus_snapshot, state=state.dir(), connection_string=database.connection_string(),
                code_version=code_version(), log=context.log.info, tuning_from=question_set,
                miss_k=op_config(context, "ranked_results", RankingConfig).miss_k)
            context.log.info(f"compare_with: {', '.join(c.name for c in compared)} ranked by {len(verdict.gates)} "
                             f"partition(s) in {time.perf_counter() - started:.1f} s")
        measured = measure_findings(
            verdict, variant_metrics, sweep=sweep, snapshot=corpus_snapshot, stores=pgvector_store,
            question_set=question_set, connection_string=database.connection_string(), state=state.dir(),
            llm=llm.get if config.grade_holes else None, compared_sets=compared,
            relevance_calibration=config.relevance_calibration)
        context.add_output_metadata({"sections": ", ".join(measured.sections) or "none",
                                     "verdict_run": measured.verdict_run or ""})
        return measured

    return findings


def report_asset(sweep: SweepConfig) -> AssetsDefinition:
    """report, rendering the verdict and the findings with the sweep's settings."""

    @asset(group_name="retrieval_eval")
    def report(
        context: AssetExecutionContext,
        config: ReportConfig,
        verdict: RunVerdict,
        findings: Findings,
        variant_metrics: dict[str, pd.DataFrame],
        corpus_snapshot: CorpusSnapshot,
        pgvector_store: IndexStores,
        question_set: QuestionSet,
        database: DatabaseResource,
        state: StateResource,
    ) -> dict:
        """results.md with intervals, significance, the verdict, answer quality and plots;
        per_query.jsonl and TREC run files; the run recorded in the Postgres history tables, once
        published (eval_pipeline.reporting.run.render_run). It decides and measures nothing: the
        verdict decided, the findings measured; this renders and publishes them."""
        run = render_run(
            verdict, variant_metrics, findings, sweep=sweep, snapshot=corpus_snapshot, stores=pgvector_store,
            question_set=question_set, connection_string=database.connection_string(), state=state.dir(),
            run_id=context.run_id, results_dir=safe_results_dir(context, config.results_dir, state.dir()),
            record_history=config.record_history, warn=context.log.warning)
        context.log.info(f"report written to {run.report_path}")
        context.add_output_metadata(to_metadata(run.metadata))
        return run.output

    return report


def question_set_audit_check(sweep: SweepConfig) -> AssetChecksDefinition:
    """question_set_audit, with the variants file's audit thresholds (blocking when it says so)."""

    @asset_check(
        asset="question_set",
        additional_ins={"corpus_snapshot": AssetIn("corpus_snapshot")},
        blocking=sweep.audit.blocking,
        description="The question set is a fair test: few questions answerable by surface overlap alone, few "
        "near-duplicates, most documents asked about (thresholds: the variants file's audit section). A warning "
        "unless the variants file says `audit: {blocking: true}`.",
    )
    def question_set_audit(context: AssetCheckExecutionContext, question_set: QuestionSet,
                           corpus_snapshot: CorpusSnapshot, state: StateResource) -> AssetCheckResult:
        result = run_audit(question_set.questions, corpus_snapshot, sweep.audit, limited=question_set.limited,
                           cache_dir=state.dir().audits)
        for problem in result.problems:
            context.log.warning(f"question set audit: {problem}")
        severity = AssetCheckSeverity.ERROR if result.thresholds.blocking else AssetCheckSeverity.WARN
        return AssetCheckResult(passed=result.passed, metadata=to_metadata(audit_metadata(result)), severity=severity)

    return question_set_audit


def answer_gate_names(gate_checks: dict[str, str]) -> dict[str, str]:
    """variant key -> the answer gate's check name, e.g. hybrid+mmr -> answer_gate__hybrid_mmr."""
    return {key: name.replace("gate__", "answer_gate__", 1) for key, name in gate_checks.items()}


def regression_gate_check(gate_checks: dict[str, str]) -> AssetChecksDefinition:
    """regression_gate: one check per partition key (`gate_checks`: key -> check name)."""

    @multi_asset_check(
        specs=[AssetCheckSpec(name, asset="verdict", blocking=False,
                              description=f"Variant {key}: no gated metric dropped by more than its tolerance "
                              "against its previous eligible run and its pinned reference on the same benchmark, "
                              "or, where the benchmark changed, against its reference configuration ranked on "
                              "today's questions; "
                              "fails when nothing could judge it (not_compared). The run fails through verdict_passed.")
               for key, name in gate_checks.items()],
        description="The regression gate, one check per variant, as the verdict decided it.",
    )
    def regression_gate(verdict: RunVerdict):
        """One result per variant of the variants file (eval_pipeline.reporting.run.variant_gate_checks):
        a failing variant is its own failed check, with every failing metric, the runs or
        configurations compared, what decided and the treatment change."""
        for key, (passed, metadata) in variant_gate_checks(verdict_output(verdict), list(gate_checks)).items():
            yield AssetCheckResult(check_name=gate_checks[key], asset_key="verdict", passed=passed,
                                   severity=AssetCheckSeverity.ERROR, metadata=to_metadata(metadata))

    return regression_gate


def answer_gate_check(answer_checks: dict[str, str]) -> AssetChecksDefinition:
    """answer_gate: one check per partition key (`answer_checks`: key -> check name)."""

    @multi_asset_check(
        specs=[AssetCheckSpec(name, asset="verdict", blocking=False,
                              description=f"Variant {key}: answer pass rate and mean score, per grader, did not "
                              "drop by more than the variants file's answers.gate tolerances since the previous "
                              "eligible run and the pinned reference of the same golden set, corpus and grading "
                              "yardstick; fails closed when that measurement has a history but nothing comparable; "
                              "every answer was generated.")
               for key, name in answer_checks.items()],
        description="The answer gate, one check per variant, as the verdict decided it.",
    )
    def answer_gate(verdict: RunVerdict):
        """One result per variant (eval_pipeline.reporting.answers.answer_gate_checks): a variant
        fails when any grader's gate fails."""
        for key, (passed, metadata) in answer_gate_checks(answer_check_output(verdict), list(answer_checks)).items():
            yield AssetCheckResult(check_name=answer_checks[key], asset_key="verdict", passed=passed,
                                   severity=AssetCheckSeverity.ERROR, metadata=to_metadata(metadata))

    return answer_gate


@dataclass(frozen=True)
class AssetGraph:
    """The assets and checks of one sweep, by name (a check by its function's name, e.g.
    question_set_audit, regression_gate), in the order the definitions list them."""

    assets: dict[str, AssetsDefinition]
    checks: dict[str, AssetChecksDefinition]
    gate_checks: dict[str, str]  # partition key -> regression gate check, e.g. hybrid+mmr -> gate__hybrid_mmr
    answer_gate_checks: dict[str, str]  # partition key -> answer gate check, e.g. answer_gate__hybrid_mmr


def build_assets(sweep: SweepConfig) -> AssetGraph:
    """Every asset and check of the graph for `sweep` (definitions.py reads the variants file
    once and calls this): the partitioned assets share one partitions definition, and every op
    that reads the sweep reads this value."""
    partitions = partitions_of(sweep)
    gate_checks = gate_check_names(sweep.keys)
    answer_checks = answer_gate_names(gate_checks)
    built: list[AssetsDefinition] = [
        corpus_snapshot_asset(sweep), build_pgvector_store(sweep), question_set_asset(sweep),
        build_ranked_results(sweep, partitions), variant_metrics_asset(partitions), golden_prompts,
        *build_answer_assets(sweep, partitions), verdict_asset(sweep), findings_asset(sweep), report_asset(sweep),
    ]
    checks = {"question_set_audit": question_set_audit_check(sweep), "no_errored_questions": no_errored_questions,
              "verdict_passed": verdict_passed, "verdict_gate": verdict_gate,
              "regression_gate": regression_gate_check(gate_checks), "answer_gate": answer_gate_check(answer_checks)}
    return AssetGraph(assets={a.key.to_user_string(): a for a in built}, checks=checks, gate_checks=gate_checks,
                      answer_gate_checks=answer_checks)
