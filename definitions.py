"""The one Definitions object: `dagster dev` and `dagster job execute -m definitions -j retrieval_eval` load it.

Resources are chosen from the environment so that CI, the nightly run and the UI can swap them
without code changes:
- EVAL_PIPELINE_DB=embedded (default) | testcontainers | external (then EVAL_PIPELINE_DATABASE_URL)
- EVAL_PIPELINE_EMBEDDER=local (default) | openai (then EVAL_PIPELINE_EMBEDDER_MODEL,
  OPENAI_BASE_URL, OPENAI_API_KEY)
- EVAL_PIPELINE_LLM_SHARED_LIMIT=0 (default) | 1: the LLM's concurrency limit per process, or
  shared by every process and run through the database
- the judge (`judge_llm`: the model of the `judge` and `decision` graders), apart from the
  generator's: EVAL_PIPELINE_JUDGE_BASE_URL, EVAL_PIPELINE_JUDGE_MODEL, EVAL_PIPELINE_JUDGE_API_KEY,
  EVAL_PIPELINE_JUDGE_TEMPERATURE (a setting left unset is the generator's; none set: the judge is
  the generator's `llm`, and a run whose LLM grader would grade the LLM generator's answers is
  refused unless `ops.graded_answers.config.allow_self_judging`, then labelled self-judged)
- EVAL_PIPELINE_SCHEDULE=stopped (default) | running: the nightly schedule's state when the
  code location first loads (a state set in the UI afterwards wins)
- job retrieval_eval_celery (needs the `celery` extra and running workers, see the README):
  EVAL_PIPELINE_CELERY_BROKER, the broker URL when the run config's `execution: config: broker`
  is unset; EVAL_PIPELINE_CELERY_BACKEND, the result backend (default: the broker if redis://);
  EVAL_PIPELINE_CELERY_CHECK_EVERY (5 s), EVAL_PIPELINE_CELERY_LOST_AFTER (20 s) and
  EVAL_PIPELINE_CELERY_LOST_RETRIES (1): how a task whose worker died is noticed and submitted
  again (resources/celery_executor.py). Every worker needs the same environment as the run
  (EVAL_PIPELINE_STATE_DIR on storage they all mount, EVAL_PIPELINE_DB=external and its URL).

The variants file (EVAL_PIPELINE_VARIANTS, else variants.yaml) is read here, once, into a typed
`SweepConfig`; the assets, checks, jobs and schedule are built from that value
(`assets.build_assets`, `build_jobs`, `build_schedule`), so every op reads the sweep it was
built with, never a global. A bad file fails the load with one line
(`Error: bad variants file: ...`, assets.partitions.VariantsFileError).
"""

import gc
import os
import warnings

from dagster import (
    AssetSelection,
    AssetSpec,
    BetaWarning,
    DefaultScheduleStatus,
    Definitions,
    EnvVar,
    ExecutorDefinition,
    ScheduleDefinition,
    define_asset_job,
    in_process_executor,
    map_asset_specs,
)

from eval_pipeline.common.registry import load_plugins

# What is loaded stays loaded: a run's steps execute in this process (in_process_executor), and each
# full garbage collection would walk Dagster's and the project's ~225k objects again (about 0.1 s each,
# several per run). Frozen out of the collector's walks here (Dagster's, already imported) and at the
# end of the file (ours): a warm demo run 13.2 -> 11.6 s, a cold one 43.6 -> 41.4 s (bench/RESULTS.md section 42).
gc.freeze()

# The partitioned assets' backfill_policy (one run for a whole sweep) is a beta parameter of this
# Dagster version: said once here, not four times on every load of the code location.
warnings.filterwarnings("ignore", message=r"Parameter `backfill_policy`", category=BetaWarning)

# The kinds EVAL_PIPELINE_PLUGINS names (engines, rerankers, graders, report sections, metrics:
# eval_pipeline.common.registry), imported before anything reads a registry or the variants file.
load_plugins()

import assets  # noqa: E402
from assets.partitions import read_sweep, variants_file  # noqa: E402
from assets.reference import accept_reference_job  # noqa: E402
from eval_pipeline.config.sweep import SweepConfig  # noqa: E402
from eval_pipeline.store.database import DATABASE_KIND_ENV, DATABASE_URL_ENV  # noqa: E402
from resources import DatabaseResource, EmbedderResource, LLMResource, RerankerResource, StateResource  # noqa: E402
from resources.celery_executor import watched_celery_executor  # noqa: E402
from resources.io import RunScopedPickleIOManager, VariantParquetIOManager  # noqa: E402
from resources.parallel_executor import forkserver_multiprocess_executor  # noqa: E402

STATE = StateResource()  # EVAL_PIPELINE_STATE_DIR, else .eval_state/ in the checkout


def _database() -> DatabaseResource:
    kind = os.environ.get(DATABASE_KIND_ENV, "embedded")
    if kind == "external":
        return DatabaseResource(kind="external", url=EnvVar(DATABASE_URL_ENV), state=STATE)
    return DatabaseResource(kind=kind, state=STATE)


def _base_url() -> EnvVar | None:
    """OPENAI_BASE_URL as an EnvVar, never its value: a resource's config is saved in every job
    snapshot (and shown in the Launchpad), and the URL may carry a proxy's credentials."""
    return EnvVar("OPENAI_BASE_URL") if os.environ.get("OPENAI_BASE_URL") else None


def _embedder() -> EmbedderResource:
    if os.environ.get("EVAL_PIPELINE_EMBEDDER", "local") == "openai":
        return EmbedderResource(
            kind="openai",
            model=EnvVar("EVAL_PIPELINE_EMBEDDER_MODEL"),
            base_url=_base_url(),
            api_key=EnvVar("OPENAI_API_KEY"),
        )
    return EmbedderResource(kind="local", model=os.environ.get("EVAL_PIPELINE_EMBEDDER_MODEL"))


def _shared_limit() -> bool:
    return os.environ.get("EVAL_PIPELINE_LLM_SHARED_LIMIT", "0").strip().lower() in ("1", "true", "yes")


def _llm() -> LLMResource:
    """OPENAI_BASE_URL, EVAL_PIPELINE_LLM_MODEL and OPENAI_API_KEY; the key stays an EnvVar.
    EVAL_PIPELINE_LLM_SHARED_LIMIT=1 shares the concurrency limit across processes and runs
    through the database (for the multiprocess job, or workers)."""
    shared = _shared_limit()
    return LLMResource(
        base_url=_base_url(),
        model=os.environ.get("EVAL_PIPELINE_LLM_MODEL"),
        api_key=EnvVar("OPENAI_API_KEY") if "OPENAI_API_KEY" in os.environ else None,
        shared_limit=shared,
        database=_database() if shared else None,
    )


JUDGE_ENV = ("EVAL_PIPELINE_JUDGE_BASE_URL", "EVAL_PIPELINE_JUDGE_MODEL", "EVAL_PIPELINE_JUDGE_API_KEY",
             "EVAL_PIPELINE_JUDGE_TEMPERATURE")


def _judge_llm() -> LLMResource:
    """The judge's model, apart from the generator's (the `judge` and `decision` graders call
    it): EVAL_PIPELINE_JUDGE_BASE_URL, _MODEL, _API_KEY and _TEMPERATURE, each unset one the
    generator's (OPENAI_BASE_URL, EVAL_PIPELINE_LLM_MODEL, 0); its concurrency limit shared like the
    generator's (EVAL_PIPELINE_LLM_SHARED_LIMIT, per endpoint and model). The URL, model and key stay
    EnvVars (never their values in a job snapshot or the Launchpad). The key: the judge's own;
    without it the generator's OPENAI_API_KEY only when the judge calls the generator's endpoint,
    never another one (a third party must not receive it). None of the variables set: the
    generator's resource itself, which graded_answers refuses as self-judging (or labels it,
    when allowed) whenever the generator is that model."""
    if not any(os.environ.get(name) for name in JUDGE_ENV):
        return _llm()
    own_endpoint = bool(os.environ.get("EVAL_PIPELINE_JUDGE_BASE_URL"))
    if os.environ.get("EVAL_PIPELINE_JUDGE_API_KEY"):
        key: EnvVar | None = EnvVar("EVAL_PIPELINE_JUDGE_API_KEY")
    else:
        key = EnvVar("OPENAI_API_KEY") if not own_endpoint and "OPENAI_API_KEY" in os.environ else None
    raw = os.environ.get("EVAL_PIPELINE_JUDGE_TEMPERATURE", "").strip()
    try:
        temperature = float(raw) if raw else 0.0
    except ValueError:
        temperature = float("nan")
    if not 0.0 <= temperature <= 2.0:
        raise ValueError(f"EVAL_PIPELINE_JUDGE_TEMPERATURE must be a number in [0, 2], got {raw!r}")
    return LLMResource(
        base_url=EnvVar("EVAL_PIPELINE_JUDGE_BASE_URL") if own_endpoint else _base_url(),
        model=(EnvVar("EVAL_PIPELINE_JUDGE_MODEL") if os.environ.get("EVAL_PIPELINE_JUDGE_MODEL")
               else os.environ.get("EVAL_PIPELINE_LLM_MODEL")),
        api_key=key, inherit_openai_key=not own_endpoint, temperature=temperature,
        shared_limit=_shared_limit(), database=_database() if _shared_limit() else None)


# The variants file, read once as the code location loads; everything below is built from it.
SWEEP: SweepConfig = read_sweep(variants_file())
GRAPH = assets.build_assets(SWEEP)
ALL_ASSETS = list(GRAPH.assets.values())
ALL_CHECKS = list(GRAPH.checks.values())
GATE_CHECKS = GRAPH.gate_checks  # partition key -> regression gate check, e.g. hybrid+mmr -> gate__hybrid_mmr


def whole_sweep_tags(sweep: SweepConfig) -> dict[str, str]:
    """One run materializes the chain and every variant: `dagster job execute` has no partition
    flag, so the job carries the full partition range as tags, and the partitioned assets
    (single-run backfill policy) receive every key in one run."""
    return {"dagster/asset_partition_range_start": sweep.keys[0], "dagster/asset_partition_range_end": sweep.keys[-1]}


def build_jobs(sweep: SweepConfig) -> list:
    """The three whole-sweep jobs, one per executor (the same assets, the same partition range).

    - retrieval_eval, in-process: the steps share one loaded model and ranked_results ranks
      every variant in one step, sharing every leg; the multiprocess executor loads the model
      per step.
    - retrieval_eval_parallel, Dagster's multiprocess executor, its steps forked from a server
      that imported the heavy packages once (resources/parallel_executor.py): ranked_results
      splits the variants into as many steps as the executor runs at once (`execution: config:
      max_concurrent`, default the CPU count; or `ops: ranked_results: config: workers`), and
      they run in parallel.
      Variants that share a candidate pool stay in one step, and so do all API-backed rerankers
      (one client, one concurrency limit). Pays off with more cores than variants' shared work,
      or slow rerankers.
    - retrieval_eval_celery, on a Celery worker pool (dagster-celery's executor, which this one
      wraps to resubmit a task whose worker died): every step is a task, and ranked_results'
      batches (2 unless `ops: ranked_results: config: workers` says more) run on different
      workers. Broker from the run config (`execution: config: broker`) or
      EVAL_PIPELINE_CELERY_BROKER.
    """
    executors: dict[str, ExecutorDefinition] = {"retrieval_eval": in_process_executor,
                                                 "retrieval_eval_parallel": forkserver_multiprocess_executor,
                                                 "retrieval_eval_celery": watched_celery_executor}
    descriptions = {
        "retrieval_eval": "The whole sweep in one run, in one process: corpus, index, questions, every variant's "
                          "ranking and metrics, answers, the verdict (fails when a gate fails) and the report.",
        "retrieval_eval_parallel": "The whole sweep with ranked_results' batches in separate processes.",
        "retrieval_eval_celery": "The whole sweep on a Celery worker pool (broker: execution.config.broker or "
                                 "EVAL_PIPELINE_CELERY_BROKER).",
    }
    return [define_asset_job(name, selection=AssetSelection.all(), executor_def=executor, tags=whole_sweep_tags(sweep),
                             description=descriptions[name])
            for name, executor in executors.items()]


# Stopped unless EVAL_PIPELINE_SCHEDULE=running (or turned on in the UI: Automation).
def _schedule_status() -> DefaultScheduleStatus:
    value = os.environ.get("EVAL_PIPELINE_SCHEDULE", "stopped").strip().lower()
    if value not in ("stopped", "running"):
        raise ValueError(f"EVAL_PIPELINE_SCHEDULE must be 'stopped' or 'running', got {value!r}")
    return DefaultScheduleStatus.RUNNING if value == "running" else DefaultScheduleStatus.STOPPED


def build_schedule(job, sweep: SweepConfig) -> ScheduleDefinition:
    """The nightly run of `job` (the whole sweep: the job's tags carry the partition range), on
    the variants file's cron."""
    return ScheduleDefinition(name="nightly_retrieval_eval", job=job, cron_schedule=sweep.cron,
                              execution_timezone="UTC", default_status=_schedule_status(),
                              description=f"The whole sweep every night ({sweep.cron} UTC, the variants file's "
                                          "schedule.cron): its verdict against the previous night and the reference.")


# What the Catalog shows beside each asset, said here once for every asset (the factories in
# assets/ build them without): its kinds, the icons and filters of the Catalog (at most three),
# and who to ask about it. Dagster's owners are a team ("team:NAME") or an email address.
OWNERS = ["team:eval-pipeline"]
ASSET_KINDS: dict[str, set[str]] = {
    "corpus_snapshot": {"python"},
    "pgvector_store": {"postgres", "pgvector"},
    "question_set": {"python"},
    "ranked_results": {"pandas", "parquet", "postgres"},
    "variant_metrics": {"pandas", "parquet"},
    "golden_prompts": {"python"},
    "answers": {"pandas", "parquet", "openai"},
    "graded_answers": {"pandas", "parquet"},
    "answer_metrics": {"pandas", "parquet"},
    "verdict": {"python"},
    "findings": {"python"},
    "report": {"markdown", "matplotlib"},
}


def with_kinds_and_owner(spec: AssetSpec) -> AssetSpec:
    """`spec` with its kinds (ASSET_KINDS; an asset not listed there yet is shown as `python`,
    never a failed load: tests/orchestration/test_asset_specs.py asks for its entry) and OWNERS."""
    return spec.merge_attributes(kinds=ASSET_KINDS.get(spec.key.to_user_string(), {"python"}), owners=OWNERS)


WHOLE_SWEEP = whole_sweep_tags(SWEEP)
retrieval_eval, retrieval_eval_parallel, retrieval_eval_celery = build_jobs(SWEEP)
nightly = build_schedule(retrieval_eval, SWEEP)


defs = Definitions(
    assets=map_asset_specs(with_kinds_and_owner, ALL_ASSETS),
    asset_checks=ALL_CHECKS,
    jobs=[retrieval_eval, retrieval_eval_parallel, retrieval_eval_celery, accept_reference_job],
    schedules=[nightly],
    executor=in_process_executor,  # also for materializations from the UI and `dagster asset materialize`
    resources={
        "state": STATE,
        "database": _database(),
        "embedder": _embedder(),
        "llm": _llm(),
        "judge_llm": _judge_llm(),
        "rerankers": RerankerResource(llm=_llm()),
        "io_manager": RunScopedPickleIOManager(base_dir=str(STATE.dir().asset_outputs)),
        "variant_io_manager": VariantParquetIOManager(base_dir=str(STATE.dir().variant_outputs)),
    },
)
gc.freeze()  # what loading the definitions made (see the top of the file)
