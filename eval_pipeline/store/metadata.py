"""What the pgvector_store asset shows about the tables it built or reused."""

from __future__ import annotations

from typing import Any

from eval_pipeline.store.ingest import StoreInfo


def store_metadata(info: StoreInfo, database: str) -> dict[str, Any]:
    """One table's metadata; `chunks_embedded` and `chunks_from_store` are what its build took
    from the model and from the vector store (whichever run built it: see `reused`)."""
    return {"table": info.table, "chunks": info.chunk_count, "dims": info.dims, "embedder": info.embedder,
            "reused": info.reused, "seconds": round(info.seconds, 3),
            "chunks_per_second": None if info.reused else round(info.chunks_per_second, 1),
            "chunks_embedded": info.chunks_embedded, "chunks_from_store": info.chunks_from_store,
            "database": database}


def index_costs(stores) -> list[dict[str, Any]]:
    """One row per index (an `IndexStores`): what it is and what it costs, whichever run
    built it: build seconds and chunks/s (None when its build was not timed), chunks, storage,
    and the chunks its build embedded and took from the vector store (None: not counted)."""
    rows = []
    for key, info in stores.tables.items():
        rate = info.build_chunks_per_second
        described = stores.described.get(key, {})
        chunking = info.chunking
        rows.append({
            "index": key, "model": described.get("model", info.embedder), "embedder": described.get("embedder", ""),
            "chunking": f"{chunking.split_by} {chunking.split_length}/{chunking.split_overlap}"
                        + ("" if chunking.embed_title else ", no title"),
            "table": info.table, "chunks": info.chunk_count, "dims": info.dims, "reused": info.reused,
            "build_seconds": None if info.build_seconds is None else round(float(info.build_seconds), 3),
            "chunks_per_second": None if rate is None else round(rate, 1),
            "storage_bytes": stores.storage_bytes.get(info.table),
            "chunks_embedded": info.chunks_embedded, "chunks_from_store": info.chunks_from_store,
        })
    return rows


def index_set_metadata(stores, database: str, *, shards: int) -> dict[str, Any]:
    """The pgvector_store asset's metadata: every index's cost as numbers the UI plots
    (`<index> build_seconds`, ...), all of them as one JSON list, and with one index its
    table's metadata as before."""
    rows = index_costs(stores)
    out: dict[str, Any] = {"indexes": len(rows), "shards": shards, "database": database}
    if len(rows) == 1:
        out.update(store_metadata(next(iter(stores.tables.values())), database))
    for row in rows:
        for name in ("chunks", "build_seconds", "chunks_per_second", "storage_bytes", "chunks_embedded",
                     "chunks_from_store"):
            out[f"{row['index']} {name}"] = row[name]
    out["index costs"] = rows
    return out
