"""What a ranked_results partition shows: its rows, columns, errors, fallbacks, latency."""

from __future__ import annotations

from typing import Any

import pandas as pd

from eval_pipeline.common.metadata import frame_metadata, number


def ranked_partition_metadata(frame: pd.DataFrame) -> dict[str, Any]:
    """One ranked_results partition's metadata: size, schema, errors and median latency."""
    fallbacks = int(frame["rerank_fallback"].fillna(False).astype(bool).sum()) if "rerank_fallback" in frame else 0
    return {"table": frame_metadata(frame), "errored": int(frame["error"].notna().sum()), "rerank_fallbacks": fallbacks,
            "latency p50 ms": number(frame["latency_ms"].median()) if len(frame) else None}
