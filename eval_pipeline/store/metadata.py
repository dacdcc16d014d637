"""What the pgvector_store asset shows about the table it built or reused."""

from __future__ import annotations

from typing import Any

from eval_pipeline.store.ingest import StoreInfo


def store_metadata(info: StoreInfo, database: str) -> dict[str, Any]:
    """The pgvector_store asset's metadata."""
    return {"table": info.table, "chunks": info.chunk_count, "dims": info.dims, "embedder": info.embedder,
            "reused": info.reused, "seconds": round(info.seconds, 3),
            "chunks_per_second": None if info.reused else round(info.chunks_per_second, 1), "database": database}
