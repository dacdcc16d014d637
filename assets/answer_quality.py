"""Answer quality: golden_prompts -> answers -> graded_answers -> answer_metrics, then a section
of the report and the blocking answer_gate checks (assets/__init__.py).

answers, graded_answers and answer_metrics are partitioned like ranked_results (by variant, or
by (index, variant) pair): a whole sweep is one run, and one partition can be re-run from the
UI. Each asset calls one eval_pipeline function and attaches metadata; nothing spends tokens
unless the run chose the `llm` generator or a grader that calls a model (`judge`, `decision`).

golden_prompts does not depend on the sweep; `build_answer_assets(sweep, partitions)` builds the
three partitioned assets for one sweep (definitions.py reads the variants file once and passes it).
"""

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

from assets.metadata import to_metadata
from assets.ranking import index_embedder_of, reranker_builder, run_pairs
from assets.run import op_config, selected_assets
from eval_pipeline.answering.prompts import CheckedGoldenSet, resolve_golden
from eval_pipeline.answering.run import answers_metadata, make_generator, produce_pair_answers
from eval_pipeline.config.sweep import SweepConfig
from eval_pipeline.corpus.sources import CorpusSnapshot
from eval_pipeline.grading.run import (
    DEFAULT_GRADERS,
    answer_metric_frames,
    grade_variants,
    grades_metadata,
    grading_usage,
)
from eval_pipeline.questions.sets import QuestionSet
from eval_pipeline.store.indexes import IndexStores
from eval_pipeline.verdict.retrieval import code_version
from resources import DatabaseResource, EmbedderResource, LLMResource, RerankerResource, StateResource


def _grader_enum() -> type[Enum]:
    """The graders a run may choose, one member per registered grader (the registry, with the
    plugins EVAL_PIPELINE_PLUGINS names, as the definitions load: eval_pipeline.grading.registry);
    any other name is refused when the run is launched."""
    from eval_pipeline.grading.judges import GRADERS

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


class GradedAnswersConfig(Config):
    graders: list[GraderName] = Field(
        default=list(DEFAULT_GRADERS), description="deterministic and static spend no tokens; judge and decision "
        "call the LLM resource (opt-in)")
    max_tokens: Optional[int] = Field(default=None, ge=1, description="judge/decision: the reply's token budget")

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
                llm: LLMResource) -> dict[str, pd.DataFrame]:
        """Each variant retrieves every golden prompt and answers it from its top-k context, cached
        as each answer arrives (eval_pipeline.answering.run.produce_answers)."""
        generator = make_generator(config.generator, embedder=embedder.get(), llm=llm.get, sentences=config.sentences,
                                   max_tokens=config.max_tokens)
        embedder_for = index_embedder_of(embedder, sweep)
        frames = produce_pair_answers(
            run_pairs(context.partition_keys, pgvector_store, sweep), golden_prompts, snapshot=corpus_snapshot,
            stores=pgvector_store, state=state.dir(), connection_string=database.connection_string(),
            embedder_for=embedder_for, builder_for=lambda index: reranker_builder(rerankers, embedder_for(index)),
            generator=generator, tuning_from=question_set, k=config.context_k, keep_text=config.keep_text,
            code_version=code_version(), log=context.log.info)
        for key, frame in frames.items():
            context.add_asset_metadata(to_metadata(answers_metadata(frame)), partition_key=key)
        return frames

    @asset(group_name="answer_quality", partitions_def=partitions, backfill_policy=BackfillPolicy.single_run(),
           io_manager_key="variant_io_manager")
    def graded_answers(context: AssetExecutionContext, config: GradedAnswersConfig, answers: dict[str, pd.DataFrame],
                       golden_prompts: CheckedGoldenSet, state: StateResource,
                       llm: LLMResource) -> dict[str, pd.DataFrame]:
        """Every chosen grader on every answer (eval_pipeline.grading.run.grade_variants); a
        grader that calls a model runs only when chosen."""
        from eval_pipeline.answering.cache import AnswerCache
        from eval_pipeline.grading.judges import token_spending

        client = llm.get() if token_spending(config.grader_names()) else None
        before = client.usage if client is not None else None
        frames, yardsticks = grade_variants(answers, golden_prompts, graders=config.grader_names(),
                                            cache=AnswerCache(state.dir().answers), llm=client,
                                            grade_cache=state.dir().answer_grades, max_tokens=config.max_tokens)
        if client is not None:
            context.add_output_metadata(to_metadata(grading_usage(before, client.usage, client.model, sweep.prices)))
        for key, frame in frames.items():
            frames[key] = frame.assign(yardstick=frame["grader"].map(yardsticks[key]))
            context.add_asset_metadata(to_metadata(grades_metadata(frames[key])), partition_key=key)
        return frames

    @asset(group_name="answer_quality", partitions_def=partitions, backfill_policy=BackfillPolicy.single_run(),
           io_manager_key="variant_io_manager")
    def answer_metrics(context: AssetExecutionContext, answers: dict[str, pd.DataFrame],
                       graded_answers: dict[str, pd.DataFrame],
                       golden_prompts: CheckedGoldenSet) -> dict[str, pd.DataFrame]:
        """Per variant and grader: pass rate and mean score with intervals, by assertion type and
        question form, on retrieval hits and misses, latency, tokens and cost; the generator's
        identity and the grading yardstick (eval_pipeline.grading.run.answer_metric_frames)."""
        frames, metadata = answer_metric_frames(answers, graded_answers, golden_prompts, prices=sweep.prices)
        for key, values in metadata.items():
            context.add_asset_metadata(to_metadata(values), partition_key=key)
        return frames

    return [answers, graded_answers, answer_metrics]


def preflight_answers(context: AssetExecutionContext, snapshot: CorpusSnapshot, llm: LLMResource) -> None:
    """The answer settings checked in the run's first step, before anything is embedded: a
    golden prompt file (naming its file, line and field), and a model for the `llm` generator
    or a grader that spends tokens (no model configured fails now, not after the ranking)."""
    from eval_pipeline.answering.prompts import preflight_golden
    from eval_pipeline.grading.judges import check_graders, token_spending

    selection = selected_assets(context)
    golden, answering = op_config(context, "golden_prompts", GoldenPromptsConfig), op_config(context, "answers",
                                                                                             AnswersConfig)
    graders = check_graders(op_config(context, "graded_answers", GradedAnswersConfig).grader_names(),
                            "graded_answers.graders")
    if AssetKey("golden_prompts") in selection:
        preflight_golden(golden.source, golden.path, corpus_signature=snapshot.signature,
                         doc_ids=[d.doc_id for d in snapshot.documents], limit=golden.limit)
    if AssetKey("answers") in selection and answering.generator == "llm":
        llm.get()
    if AssetKey("graded_answers") in selection and token_spending(graders):
        llm.get()
