"""The columns of a variant's ranked results and what says what produced them."""

from __future__ import annotations

import json
from collections.abc import Mapping

import pandas as pd

from eval_pipeline.ranking.variants import Variant
from eval_pipeline.store.database import error_text as scrubbed

STAGES = ("embed", "keyword", "dense", "bm25", "metadata", "fusion", "rerank")


STAGE_COLUMNS = [f"ms_{s}" for s in STAGES]  # NaN where the variant has no such stage


RESULT_COLUMNS = [
    "variant", "qid", "doc_ids", "chunk_ids", "scores", "latency_ms", *STAGE_COLUMNS, "error", "abstained",
    "pre_rerank", "keyword_docs", "dense_docs", "rerank_fallback", "diagnosis_error", "confidence", "unrefused_doc_ids",
]


PROVENANCE_COLUMNS = ["variant_config", "store_table", "questions_fingerprint", "code_version", "engine_identity"]


def variant_identity(variant: Variant, reranker=None, legs: Mapping[str, Mapping] | None = None) -> dict:
    """Everything about a variant that decides its results: its settings, each leg's resolved
    settings (`legs`: the engines' defaults filled in, so a changed default is seen in the
    record) and, when it has a reranker, the reranker's identity (model weights by content,
    an LLM's endpoint, model and sampling settings). Computed before any model is loaded."""
    out = dict(variant.describe())
    if legs:
        out["leg_settings"] = {leg: dict(settings) for leg, settings in legs.items() if settings}
        if not out["leg_settings"]:
            del out["leg_settings"]
    if reranker is not None:
        out["reranker_identity"] = dict(reranker.identity())
    return out


def identity_json(identity: Mapping) -> str:
    return json.dumps(identity, sort_keys=True, default=str)


def error_text(exc: BaseException, connection_string: str | None = None) -> str:
    """A question's error as stored in results, history and reports: type and message, with
    the password of `connection_string` (and its fragments, and any connection-string password) removed,
    cut to 500 characters."""
    return scrubbed(exc, connection_string)[:500]


def stage_latency_summary(results: pd.DataFrame) -> dict[str, dict[str, float]]:
    """p50, p95, max and mean per stage (and total) in ms, over the questions of one variant."""
    out: dict[str, dict[str, float]] = {}
    for stage, column in [*zip(STAGES, STAGE_COLUMNS), ("total", "latency_ms")]:
        values = results[column].dropna() if column in results else pd.Series(dtype=float)
        if len(values):
            out[stage] = {
                "p50": float(values.quantile(0.5)), "p95": float(values.quantile(0.95)),
                "max": float(values.max()), "mean": float(values.mean()),
            }
    return out
