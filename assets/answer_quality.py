"""Answer quality: golden_prompts -> answers -> graded_answers -> answer_metrics, then a section
of the report and the blocking answer_gate checks (assets/__init__.py).

answers, graded_answers and answer_metrics are partitioned like ranked_results (by variant, or
by (index, variant) pair): a whole sweep is one run, and one partition can be re-run from the
UI. Each asset calls one eval_pipeline function and attaches metadata; nothing spends tokens
unless the run chose the `llm` generator or a grader that calls a model (`judge`, `decision`).

The LLM graders call the `judge_llm` resource, the generator the `llm` one. A judge that is the
model that wrote the answers (same endpoint and model) is refused before any paid call, unless
`graded_answers.allow_self_judging`: then every judge number is labelled self-judged
(eval_pipeline.grading.independence). `answers.repair` asks the generator once more for an
answer failing its static checks (eval_pipeline.answering.repair); the grounding grader looks
items up in the corpus through each variant's keyword index.

golden_prompts does not depend on the sweep; `build_answer_assets(sweep, partitions)` builds the
three partitioned assets for one sweep (definitions.py reads the variants file once and passes it).
"""

import json
from enum import Enum
from typing import Literal, Optional

import pandas as pd
from dagster import (
    AssetExecutionContext,
    AssetKey,
    AssetsDefinition,
    BackfillPolicy,
    Config,
    PartitionsDefinition,
    asset,
)
from pydantic import Field

from assets.metadata import add_partition_metadata, to_metadata
from assets.ranking import index_embedder_of, reranker_builder, run_pairs
from assets.run import op_config, selected_assets
from eval_pipeline.answering.prompts import CheckedGoldenSet, preflight_golden, resolve_golden
from eval_pipeline.answering.repair import repair_summary
from eval_pipeline.answering.run import answers_metadata, make_generator, produce_pair_answers
from eval_pipeline.config.sweep import SweepConfig
from eval_pipeline.corpus.sources import CorpusSnapshot
from eval_pipeline.grading.independence import Independence, judge_independence
from eval_pipeline.grading.judges import GRADERS, check_graders, token_spending
from eval_pipeline.grading.presentation import grades_metadata
from eval_pipeline.grading.run import (
    DEFAULT_GRADERS,
    check_calibration,
    grade_run,
    static_failures,
)
from eval_pipeline.grading.summary import answer_metric_frames
from eval_pipeline.questions.sets import QuestionSet
from eval_pipeline.store.indexes import IndexStores
from eval_pipeline.verdict.retrieval import code_version
from resources import DatabaseResource, EmbedderResource, LLMResource, RerankerResource, StateResource


def _grader_enum() -> type[Enum]:
    """The graders a run may choose, one member per registered grader (the registry, with the
    plugins EVAL_PIPELINE_PLUGINS names, as the definitions load: eval_pipeline.grading.registry);
    any other name is refused when the run is launched."""
    kind = Enum("GraderName", {name: name for name in GRADERS}, type=str)  # type: ignore[misc]
    kind.__doc__ = "The graders a run may choose; any other name is refused when the run is launched."
    return kind


GraderName = _grader_enum()


class GoldenPromptsConfig(Config):
    source: Literal["auto", "file", "question_set", "none"] = Field(
        default="auto", description="auto: the demo set on the demo corpus, else the question set's gists, else none; "
        "file: a golden prompt set (path); question_set: each question's gist as the reference; none: no answers")
    path: Optional[str] = Field(default=None, description="file: the golden prompt set (JSONL with header)")
    include_abstentions: bool = Field(default=False, description="question_set: keep abstention questions")
    limit: Optional[int] = Field(default=None, ge=1, description="a quick run on the first N prompts; its results "
                                 "get a suffixed set name and never serve as a baseline")


class AnswersConfig(Config):
    generator: Literal["extractive", "llm"] = Field(
        default="extractive", description="extractive: the retrieved sentences closest to the question (no model, "
        "offline); llm: the LLM resource writes the answer (spends tokens)")
    context_k: int = Field(default=5, ge=1, le=50, description="documents in the numbered context")
    sentences: int = Field(default=3, ge=1, le=20, description="extractive: sentences per answer")
    max_tokens: Optional[int] = Field(default=None, ge=1, description="llm: the answer's token budget")
    keep_text: bool = Field(default=False, description="keep the answer text in the outputs and results "
                            "(default: only grades and identity; the text stays in the state dir's answer cache)")
    repair: bool = Field(default=False, description="llm: an answer failing its static checks is asked for once "
                         "more with the failures, and kept only when it fails fewer (spends tokens; cached like "
                         "answers); extractive: a no-op that says so")


class GradedAnswersConfig(Config):
    graders: list[GraderName] = Field(
        default=list(DEFAULT_GRADERS), description="deterministic and static spend no tokens; judge and decision "
        "call the LLM resource (opt-in)")
    max_tokens: Optional[int] = Field(default=None, ge=1, description="judge/decision: the reply's token budget")
    allow_self_judging: bool = Field(default=False, description="judge/decision: let the model that wrote the "
                                     "answers grade them (refused by default); every judge number is then labelled "
                                     "self-judged and never compared with an independent judge's")
    calibration: Optional[str] = Field(default=None, description="judge/decision: a calibration file (JSON lines "
                                       "of id, question, text, human; judge rows with a context, decision rows "
                                       "with a reference): the judge grades it and the report shows its agreement "
                                       "with people (kappa) and the PPI interval of its pass rate")

    def grader_names(self) -> list[str]:
        """The chosen graders as plain names (the launchpad gives enum members, the default strings)."""
        return [getattr(g, "value", g) for g in self.graders]


@asset(group_name="answer_quality")
def golden_prompts(context: AssetExecutionContext, config: GoldenPromptsConfig, corpus_snapshot: CorpusSnapshot,
                   question_set: QuestionSet) -> CheckedGoldenSet:
    """The golden prompt set each variant answers, checked against the corpus
    (eval_pipeline.answering.prompts.resolve_golden)."""
    golden = resolve_golden(config.source, config.path, corpus_signature=corpus_snapshot.signature,
                            doc_ids=[d.doc_id for d in corpus_snapshot.documents], question_set=question_set,
                            include_abstentions=config.include_abstentions, limit=config.limit)
    context.log.info(f"golden prompts: {golden.reason}")
    counts = golden.golden.counts() if golden.golden is not None else {"prompts": 0}
    context.add_output_metadata({**counts, "set": golden.set_name or "none", "source": golden.reason,
                                 "limited": golden.limited})
    return golden


def build_answer_assets(sweep: SweepConfig, partitions: PartitionsDefinition) -> list[AssetsDefinition]:
    """answers, graded_answers and answer_metrics of `sweep`, on its partitions."""

    @asset(group_name="answer_quality", partitions_def=partitions, backfill_policy=BackfillPolicy.single_run(),
           io_manager_key="variant_io_manager")
    def answers(context: AssetExecutionContext, config: AnswersConfig, golden_prompts: CheckedGoldenSet,
                corpus_snapshot: CorpusSnapshot, pgvector_store: IndexStores, question_set: QuestionSet,
                database: DatabaseResource,
                state: StateResource, embedder: EmbedderResource, rerankers: RerankerResource,
                llm: LLMResource, judge_llm: LLMResource) -> dict[str, pd.DataFrame]:
        """Each variant retrieves every golden prompt and answers it from its top-k context, cached
        as each answer arrives (eval_pipeline.answering.run.produce_answers); with `repair`, an
        answer failing its static checks is asked for once more (eval_pipeline.answering.repair).
        When this run grades them with a model, the judge's independence is checked first."""
        if AssetKey("graded_answers") in selected_assets(context):  # before the first paid call
            graded = op_config(context, "graded_answers", GradedAnswersConfig)
            check_judge(context, graded, judge_llm, generator=llm if config.generator == "llm" else None)
        generator = make_generator(config.generator, embedder=embedder.get(), llm=llm.get, sentences=config.sentences,
                                   max_tokens=config.max_tokens)
        embedder_for = index_embedder_of(embedder, sweep)
        frames = produce_pair_answers(
            run_pairs(context.partition_keys, pgvector_store, sweep), golden_prompts, snapshot=corpus_snapshot,
            stores=pgvector_store, state=state.dir(), connection_string=database.connection_string(),
            embedder_for=embedder_for, builder_for=lambda index: reranker_builder(rerankers, embedder_for(index)),
            generator=generator, tuning_from=question_set, k=config.context_k, keep_text=config.keep_text,
            code_version=code_version(), log=context.log.info,
            repair_check=static_failures if config.repair else None)
        if config.repair:
            frames = {key: with_repair_setting(frame) for key, frame in frames.items()}
        for key, frame in frames.items():
            add_partition_metadata(context, key, {**answers_metadata(frame), **repair_metadata(frame)})
        return frames

    @asset(group_name="answer_quality", partitions_def=partitions, backfill_policy=BackfillPolicy.single_run(),
           io_manager_key="variant_io_manager")
    def graded_answers(context: AssetExecutionContext, config: GradedAnswersConfig, answers: dict[str, pd.DataFrame],
                       golden_prompts: CheckedGoldenSet, state: StateResource, database: DatabaseResource,
                       judge_llm: LLMResource) -> dict[str, pd.DataFrame]:
        """Every chosen grader on every answer (eval_pipeline.grading.run.grade_variants); a
        grader that calls a model runs only when chosen, on the `judge_llm` resource, after its
        independence from the answers' generator is checked (refused, or labelled self-judged when
        allowed); the grounding grader probes the corpus through each variant's keyword index.
        With a calibration file, the judge grades it too (its agreement, in the report)."""
        independence = check_judge(context, config, judge_llm, generator=generator_of(answers))
        client = judge_llm.get() if token_spending(config.grader_names()) else None
        frames, usage = grade_run(answers, golden_prompts, graders=config.grader_names(), state=state.dir(),
                                  llm=client, connection_string=database.connection_string(),
                                  max_tokens=config.max_tokens,
                                  self_judged=independence is not None and independence.kind == "self",
                                  calibration=config.calibration, prices=sweep.prices, log=context.log.info)
        if client is not None and independence is not None:  # shown in the UI: who judged, how independently
            context.add_output_metadata(to_metadata({**usage, "judge": f"{client.base_url} {client.model}",
                                                     "judge independence": independence.kind}))
        for key, frame in frames.items():
            add_partition_metadata(context, key, grades_metadata(frame))
        return frames

    @asset(group_name="answer_quality", partitions_def=partitions, backfill_policy=BackfillPolicy.single_run(),
           io_manager_key="variant_io_manager")
    def answer_metrics(context: AssetExecutionContext, answers: dict[str, pd.DataFrame],
                       graded_answers: dict[str, pd.DataFrame],
                       golden_prompts: CheckedGoldenSet, state: StateResource) -> dict[str, pd.DataFrame]:
        """Per variant and grader: pass rate and mean score with intervals (kept in the state
        dir by their inputs), by assertion type and question form, on retrieval hits and misses,
        latency, tokens and cost; the generator's identity and the grading yardstick
        (eval_pipeline.grading.summary.answer_metric_frames)."""
        frames, metadata = answer_metric_frames(answers, graded_answers, golden_prompts, prices=sweep.prices,
                                                interval_cache=state.dir().statistics)
        for key, values in metadata.items():  # with the grounding rates, repair and agreement figures as numbers
            add_partition_metadata(context, key, values)
        return frames

    return [answers, graded_answers, answer_metrics]


def preflight_answers(context: AssetExecutionContext, snapshot: CorpusSnapshot, llm: LLMResource,
                      judge_llm: Optional[LLMResource] = None) -> None:
    """The answer settings checked in the run's first step, before anything is embedded: a
    golden prompt file (naming its file, line and field), a calibration file, a model for the
    `llm` generator and for a grader that spends tokens (no model configured fails now, not after
    the ranking), and, given `judge_llm`, the judge's independence from the generator (a
    self-judging run refused now; without it the answers step checks it before its first call)."""
    selection = selected_assets(context)
    golden, answering = op_config(context, "golden_prompts", GoldenPromptsConfig), op_config(context, "answers",
                                                                                             AnswersConfig)
    grading = op_config(context, "graded_answers", GradedAnswersConfig)
    graders = check_graders(grading.grader_names(), "graded_answers.graders")
    if AssetKey("golden_prompts") in selection:
        preflight_golden(golden.source, golden.path, corpus_signature=snapshot.signature,
                         doc_ids=[d.doc_id for d in snapshot.documents], limit=golden.limit)
    if AssetKey("answers") in selection and answering.generator == "llm":
        llm.get()
    if AssetKey("graded_answers") in selection and token_spending(graders):
        (judge_llm or llm).get()
        if judge_llm is not None:
            check_judge(context, grading, judge_llm,
                        generator=llm if AssetKey("answers") in selection and answering.generator == "llm" else None)
    if AssetKey("graded_answers") in selection and grading.calibration:
        check_calibration(grading.calibration, graders)


JUDGE_SETTINGS = "EVAL_PIPELINE_JUDGE_MODEL (or EVAL_PIPELINE_JUDGE_BASE_URL), the judge_llm resource's model/base_url,"
ALLOW_SETTING = "ops.graded_answers.config.allow_self_judging"


def check_judge(context: AssetExecutionContext, config: GradedAnswersConfig, judge_llm: LLMResource, *,
                generator) -> Optional[Independence]:
    """The judge's independence from the generator (`independence.judge_independence`) when
    the run grades with a model: None when no chosen grader calls one. `generator` is the `llm`
    resource when the LLM generator writes the answers, a (safe endpoint, model) pair read from
    the answers, or None (the extractive generator: independent). Self-judging without
    `allow_self_judging` raises, naming the settings (never a key); allowed, it is logged as a
    warning; a judge on the generator's host is a warning."""
    spending = token_spending(config.grader_names())
    if not spending:
        return None
    if generator is None:
        endpoint, model = None, None
    elif isinstance(generator, tuple):
        endpoint, model = generator
    else:
        endpoint, model = generator.base_url, generator.model
    if not judge_llm.model:
        raise ValueError("judge_llm.model is not set (EVAL_PIPELINE_JUDGE_MODEL, else EVAL_PIPELINE_LLM_MODEL): the "
                         f"{' and '.join(spending)} grader(s) need a model")
    if generator is not None and not model:
        raise ValueError("llm.model is not set (EVAL_PIPELINE_LLM_MODEL): the llm generator needs a model")
    independence = judge_independence(endpoint, model, judge_llm.base_url, judge_llm.model,
                                      allow_self_judging=config.allow_self_judging, graders=spending,
                                      allow_setting=ALLOW_SETTING, judge_settings=JUDGE_SETTINGS)
    if independence.message:
        context.log.warning(independence.message)
    return independence


def generator_of(answers: dict[str, pd.DataFrame]) -> Optional[tuple[Optional[str], str]]:
    """The (endpoint, model) of the LLM generator that wrote `answers`, from their recorded
    settings (safe endpoints: the comparison needs no credential); None when no answer came
    from a model (the extractive generator)."""
    for frame in answers.values():
        for settings in frame.get("generator_settings", pd.Series(dtype=object)).dropna().unique():
            identity = json.loads(settings)
            if identity.get("kind") == "llm":
                llm = identity.get("llm") or {}
                return llm.get("base_url"), str(llm.get("model"))
    return None


def with_repair_setting(frame: pd.DataFrame) -> pd.DataFrame:
    """The answers with `repair` in their generator settings: a repaired answer is another
    treatment (named when it changes between runs), and each kept repair has its own cache key
    (`answer_key`, eval_pipeline.answering.repair.repair_key)."""
    if not len(frame):
        return frame
    settings = {s: json.dumps({**json.loads(s), "repair": True}, sort_keys=True)
                for s in frame["generator_settings"].dropna().unique()}
    return frame.assign(generator_settings=frame["generator_settings"].map(lambda s: settings.get(s, s)))


def repair_metadata(frame: pd.DataFrame) -> dict:
    """A partition's repair numbers for the asset page (none when the run did not repair)."""
    if "repair" not in frame or not len(frame):
        return {}
    summary = repair_summary(frame)
    return {f"repair {k.replace('_', ' ')}": v for k, v in summary.items() if k != "repair_cost"}
