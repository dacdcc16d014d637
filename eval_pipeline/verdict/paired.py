"""The paired comparison: when the benchmark changed, the reference configuration is ranked on
today's questions in the same run, and the variant is judged against it question by question.

History can only judge a variant against numbers measured on the same benchmark. When the
questions, the labels or the scored subset changed, there are none, and a gate that passes
for lack of them lets a regression through in the same change that moved the yardstick. The
pinned reference is therefore a *configuration* as well as a run: the variant's recorded
configuration in its latest yardstick run (and in its pinned reference, when that is another).
Ranked today on today's questions by today's engine, it gives the numbers the variant is
judged against, on exactly the same questions.

A reference configuration stands for its run only when today's engine (code and packages:
:func:`eval_pipeline.history.identity.engine_identity`) is the one that ranked it, and it can
only be ranked on the index the variant ranks on now; otherwise there is no paired
comparison, and the verdict is ``not_compared`` (it fails until a run is accepted).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import pandas as pd

from eval_pipeline.history.identity import RUN_OUTCOMES, configuration_fingerprint, variant_configuration
from eval_pipeline.metrics.retrieval import PRIMARY_METRIC
from eval_pipeline.ranking.inputs import ConfigurationRefused
from eval_pipeline.ranking.steps import rank_in_one_step
from eval_pipeline.ranking.variants import parse_variant
from eval_pipeline.scoring.variant import score_variant

__all__ = ["PairedReference", "RankConfiguration", "paired_reference", "rank_configuration"]

# (partition key, the reference's recorded configuration) -> its per-question scores on
# today's questions (eval_pipeline.scoring.variant.score_variant's frame)
RankConfiguration = Callable[[str, Mapping[str, Any]], pd.DataFrame]


@dataclass(frozen=True)
class PairedReference:
    """What a reference run's configuration gives today: its per-question scores (None when
    it cannot be ranked, with ``why``), and whether it is the variant's own configuration."""

    run_id: str
    scores: pd.DataFrame | None
    why: str
    same_configuration: bool = False
    failed: bool = False  # no scores because the ranking failed (raised, errored), not by design: a re-run may judge


def paired_reference(run: Mapping[str, Any], *, variant: str, provenance: Mapping[str, Any],
                     current_scores: pd.DataFrame, engine: str | None,
                     rank: RankConfiguration | None, ranked: dict[str, pd.DataFrame]) -> PairedReference:
    """The paired numbers of ``run`` (a history record: run id, the variant's name in it,
    provenance) for ``variant`` of the current run (``provenance``, ``current_scores``).
    ``ranked`` caches what ``rank`` returned, by configuration fingerprint, across variants.

    ``engine`` (today's) must be the one that ranked ``run`` when given: for the variant's latest
    yardstick, since a code change after it would be on both sides of the comparison, unseen.
    The pinned reference is paired by its configuration alone (``engine`` None): every engine
    change since it was judged, on its benchmark, by the runs in between."""
    run_id = run["run_id"]
    recorded = run["provenance"]
    if engine is not None and recorded.get("engine_identity") != engine:
        return PairedReference(run_id, None, f"the code or the packages that rank changed since run {run_id} (engine "
                               f"{recorded.get('engine_identity') or 'not recorded'} -> {engine}): its configuration "
                               "ranked today would not be what that run measured")
    reference = variant_configuration(recorded, run["variant"])
    current = variant_configuration(provenance, variant)
    if reference is None or current is None:
        return PairedReference(run_id, None, f"run {run_id} does not record the configuration of {run['variant']!r}")
    fingerprint = configuration_fingerprint(recorded, run["variant"])
    if fingerprint is None:  # never: the run records the configuration (`reference`)
        raise ValueError(f"run {run_id} has no configuration fingerprint for {run['variant']!r}")
    if fingerprint == configuration_fingerprint(provenance, variant):
        return PairedReference(run_id, current_scores, "the reference configuration is this variant's own: today's "
                               "results are its results", same_configuration=True)
    if reference["index"] != current["index"]:
        return PairedReference(run_id, None, f"run {run_id} ranked on another index ({reference['index']}); it "
                               "cannot be ranked on this variant's index")
    if rank is None:
        return PairedReference(run_id, None, "no ranking is available to this verdict (no store or question set)")
    if fingerprint not in ranked:
        try:
            ranked[fingerprint] = rank(variant, reference)
        except Exception as exc:  # a configuration today's code refuses, or a failure (a model gone, a timeout)
            return PairedReference(run_id, None, f"the configuration of run {run_id} could not be ranked today: "
                                   f"{type(exc).__name__}: {exc}", failed=not isinstance(exc, ConfigurationRefused))
    unsound = _unsound(ranked[fingerprint])
    if unsound:  # a yardstick with errors or fallbacks is not the configuration's measurement
        return PairedReference(run_id, None, f"the configuration of run {run_id}, ranked today, {unsound}",
                               failed=True)
    return PairedReference(run_id, ranked[fingerprint], f"the configuration of run {run_id} ranked on today's "
                           "questions")


def _unsound(scores: pd.DataFrame) -> str:
    """Why a paired ranking cannot be a yardstick (questions errored, a reranker fell back on
    the first-stage order), or ''."""
    problems = []
    if "errored" in scores and scores["errored"].fillna(False).astype(bool).any():
        problems.append(f"errored on {int(scores['errored'].fillna(False).astype(bool).sum())} question(s)")
    if "rerank_fallback" in scores and scores["rerank_fallback"].fillna(False).astype(bool).any():
        problems.append(f"fell back on the first-stage order on "
                        f"{int(scores['rerank_fallback'].fillna(False).astype(bool).sum())} question(s)")
    return " and ".join(problems)


def paired_counts(current: pd.DataFrame, reference: pd.DataFrame, metric: str = PRIMARY_METRIC) -> tuple[int, int, int]:
    """(worse, tied, better) answerable questions of ``current`` against ``reference`` on
    ``metric``, question by question."""
    cur = current[current["answerable"]].set_index("qid")[metric]
    ref = reference[reference["answerable"]].set_index("qid")[metric].reindex(cur.index)
    delta = (cur - ref).fillna(0.0)
    return int((delta < -1e-12).sum()), int((delta.abs() <= 1e-12).sum()), int((delta > 1e-12).sum())


def rank_configuration(configuration: Mapping[str, Any], *, name: str, snapshot, store, question_set, state,
                       connection_string: str, embedder, build_reranker: Callable[..., Any], miss_k: int,
                       code_version: str, log: Callable[[str], None]) -> pd.DataFrame:
    """A recorded configuration (:func:`variant_configuration`'s ``variant`` part) ranked on
    today's questions, on ``store``, through the same plan, caches and Sweep as the ranking
    asset, and scored: per-question scores. A ConfigurationRefused when today's code refuses it
    or would rank another configuration."""
    recorded = dict(configuration["variant"])
    # the settings as the variants file gives them; the rest of the record is derived from them
    given = {k: v for k, v in recorded.items() if k not in DERIVED}
    try:
        variant = parse_variant({**given, "name": name}, f"the reference configuration {name}")
    except ValueError as exc:
        raise ConfigurationRefused(str(exc)) from exc

    log(f"paired comparison: ranking {name} ({variant.describe()}) on today's questions")
    started = time.perf_counter()
    frames = rank_in_one_step([variant], snapshot=snapshot, store=store, question_set=question_set, state=state,
                              connection_string=connection_string, embedder=embedder, build_reranker=build_reranker,
                              miss_k=miss_k, reuse=True, code_version=code_version, log=log)
    frame = frames[variant.key]
    # what ranked today must be what was recorded: resolved leg defaults, the reranker's identity
    # (its weights by content, an LLM's endpoint and model)
    today = {k: v for k, v in json.loads(frame["variant_config"].iloc[0]).items()
             if k not in RUN_OUTCOMES}  # chosen on today's tuning part
    if json.dumps(today, sort_keys=True, default=str) != json.dumps(recorded, sort_keys=True, default=str):
        changed = sorted(k for k in set(today) | set(recorded) if today.get(k) != recorded.get(k))
        raise ConfigurationRefused(f"ranked today, the configuration is not the one recorded (differs in "
                                   f"{', '.join(changed)})")
    scores = score_variant(frame, question_set.questions)
    log(f"paired comparison: {name} ranked and scored on {len(question_set.questions)} questions in "
        f"{time.perf_counter() - started:.2f} s")
    return scores


# What a recorded configuration holds beyond the variants file's settings: each leg's resolved
# settings and the reranker's identity (checked after ranking), what the tuning chose.
DERIVED = ("leg_settings", "reranker_identity", *RUN_OUTCOMES)
