"""Reading a few documents' chunks back from a vector table, by document id: what a step needs
about some documents (the golds of the questions it ranks), without reading the whole table
into memory as `eval_pipeline.store.ingest.fetch_chunks` and `fetch_chunk_embeddings` do."""

from __future__ import annotations

import json
from collections.abc import Iterable

import numpy as np

from eval_pipeline.store.database import connect


def fetch_document_chunks(connection_string: str, table: str, doc_ids: Iterable[str]
                          ) -> list[tuple[str, str, str, np.ndarray | None]]:
    """(chunk id, doc id, content, embedding as a float32 array) of every chunk of `doc_ids`, in
    chunk id order; a document the table does not hold has no row. One query (a scan of the
    table's metadata column), holding only those chunks."""
    from psycopg import sql

    wanted = sorted(set(doc_ids))
    if not wanted:
        return []
    with connect(connection_string, application_name=f"eval-pipeline fetch_document_chunks {table}") as conn:
        rows = conn.execute(
            sql.SQL("SELECT id, meta->>'doc_id', content, embedding::text FROM {} WHERE meta->>'doc_id' = ANY(%s) "
                    "ORDER BY id").format(sql.Identifier(table)), (wanted,)).fetchall()
    return [(r[0], r[1], r[2], np.asarray(json.loads(r[3]), dtype=np.float32) if r[3] is not None else None)
            for r in rows]
