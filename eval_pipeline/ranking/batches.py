"""Splitting a sweep's variants into batches, one Dagster step each."""

from __future__ import annotations

from collections.abc import Sequence

from eval_pipeline.common.checks import is_integer
from eval_pipeline.ranking.variants import Variant

API_RERANKERS = ("llm",)  # rerankers that call a rate-limited, paid endpoint


def plan_batches(variants: Sequence[Variant], workers: int) -> list[list[Variant]]:
    """Split the variants to rank into at most `workers` batches, each ranked by its own Sweep
    (one Dagster step each, so the multiprocess executor runs them in parallel).

    - Variants that share a first stage (they differ only by reranker or threshold) stay in one
      batch, so a reranker sweep still queries the store once per question.
    - Every variant with an API-backed reranker goes to one batch: they share one client and so
      one concurrency limit, and never hit the endpoint from two processes at once.
    - Groups are dealt largest first to the batch with the fewest variants; each batch keeps
      the variants' order.  `workers=1` gives one batch: the whole sweep in one step, with
      the legs shared by every variant (the fastest on one machine).

    What parallel batches cannot share: each computes the dense and keyword legs that the miss
    diagnosis reads, and loads its own models.
    """
    if not is_integer(workers) or workers < 1:
        raise ValueError(f"workers must be an integer >= 1, got {workers!r}")
    groups: dict[object, list[Variant]] = {}
    for v in variants:
        group = "api" if v.reranker.kind in API_RERANKERS else v.first_stage
        groups.setdefault(group, []).append(v)
    # a first stage shared with an API-backed variant joins the API group
    api_stages = {v.first_stage for v in groups.get("api", [])}
    for stage in [g for g in groups if g in api_stages]:
        groups["api"].extend(groups.pop(stage))
    order = {v.key: i for i, v in enumerate(variants)}
    batches: list[list[Variant]] = [[] for _ in range(min(workers, len(groups)))]
    for members in sorted(groups.values(), key=lambda g: (-len(g), order[g[0].key])):
        min(batches, key=len).extend(members)
    return [sorted(b, key=lambda v: order[v.key]) for b in batches if b]
