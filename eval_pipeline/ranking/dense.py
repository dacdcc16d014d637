"""Lean cosine retrieval on the pgvector table: Haystack's ranking, without shipping the embeddings.

Haystack's `PgvectorEmbeddingRetriever` (vector_function="cosine_similarity") runs::

    SELECT *, 1 - (embedding <=> '[q]') AS score FROM t ORDER BY embedding <=> '[q]' ASC LIMIT k

and builds a Document from every row, the 384-float embedding included (its text form parsed
into a list per row): ~147 ms a query at k = 500 on SciFact, where selecting only what a ranking
needs takes a few milliseconds.  Here the query is the same (the same distance operator, the same
`1 - distance` score, the same ORDER BY, so the planner can use the same HNSW index, with the
query vector written the same way, `str(float(x))` per element), but only the chunk id, the
`meta->>'doc_id'` and the score come back.  Ids and scores are therefore identical to Haystack's;
equal scores are ordered by id (Haystack leaves them to the executor), the project's rule (see
`chunks_to_documents`).

Two modes:

- HNSW (default): ``ORDER BY embedding <=> q LIMIT k`` in a subquery (the form the pgvector index
  serves), the k rows re-ordered by (score desc, id) outside it.  An HNSW scan returns at most
  `hnsw.ef_search` rows (pgvector's default 40 would silently cut a top-100 query to 40), so the
  session's ef_search is set to max(40, top_k) before the query whenever it changes.  pgvector
  caps ef_search at 1000, so top_k > 1000 is refused in this mode (use exact).  As for Haystack,
  the planner still chooses between the index and a sequential scan (which is exact): it scans
  the demo table (~100 chunks) and, at pgvector 0.8.5, SciFact's 5,183 chunks too, for any k;
  add ``options=-c enable_seqscan=off`` to the connection string to force the index.
- exact (``exact=True``): ``ORDER BY 1 - distance DESC, id LIMIT k``, which no index can serve,
  so every row is scored (sequential scan and a top-k sort): the true cosine top k, ties at the
  cut included, deterministically.

Where the time goes on a scan: the table's `embedding` column has pgvector's default storage
(EXTERNAL), and a SciFact row (embedding ~1.5 kB, content ~1 kB, content_tsv ~1.5 kB) is over
the 2 kB TOAST threshold, so the embedding is stored out of line and every scanned row reads it
back through the TOAST index (~3 buffer hits a row): ~8 ms of a ~9 ms scan at 5,183 chunks.
With ``ALTER TABLE t ALTER COLUMN embedding SET STORAGE PLAIN`` before the rows are written (or
rewritten) the same scan takes ~2 ms (bench/dense_leg.py).

- `LeanEmbeddingRetriever`: a Haystack component (`run(query_embedding, top_k) -> {"documents": [...]}`).
- `LeanDenseEngine`: the `pg-dense` engine interface (`chunk_hits`, `search`, `close`) on top of it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from haystack import Document, component, default_from_dict, default_to_dict
from haystack.utils import Secret, deserialize_secrets_inplace
from psycopg import sql

from eval_pipeline.common.checks import is_integer
from eval_pipeline.ranking.hits import ChunkHit, RankedDoc, chunks_to_documents
from eval_pipeline.store.database import connect
from eval_pipeline.store.tsvector import secret_value

if TYPE_CHECKING:
    import psycopg

EMBEDDING_COLUMN = "embedding"
DEFAULT_EF_SEARCH = 40  # pgvector's default hnsw.ef_search
MAX_EF_SEARCH = 1000  # pgvector's upper bound for hnsw.ef_search
_MAX_IDENT = 63  # Postgres truncates longer identifiers (NAMEDATALEN - 1 bytes)


def ef_search_for(top_k: int) -> int:
    """The hnsw.ef_search a top_k query needs: pgvector's default 40, raised to top_k."""
    return max(DEFAULT_EF_SEARCH, top_k)


def vector_literal(query_embedding: Sequence[float]) -> str:
    """The query vector as pgvector text, written exactly as pgvector-haystack writes it
    (``[x,y,...]`` with ``str(float(x))``), so both parse to the same float32 vector.
    Refuses NaN and infinities (pgvector would reject them with a less helpful message)."""
    try:
        values = [float(x) for x in query_embedding]
    except (TypeError, ValueError) as exc:
        raise TypeError("query_embedding must be a sequence of floats") from exc
    bad = next((v for v in values if not math.isfinite(v)), None)
    if bad is not None:
        raise ValueError(f"query_embedding must be finite, got {bad!r}")
    return "[" + ",".join(str(v) for v in values) + "]"


def _check_identifier(value: Any, what: str) -> str:
    if not isinstance(value, str) or not value or "\x00" in value or len(value.encode()) > _MAX_IDENT:
        raise ValueError(f"{what} must be a non-empty name of at most {_MAX_IDENT} bytes without NUL, got {value!r}")
    return value


def _check_top_k(top_k: Any, exact: bool) -> int:
    if not is_integer(top_k) or top_k < 1:
        raise ValueError(f"top_k must be an integer >= 1, got {top_k!r}")
    if not exact and top_k > MAX_EF_SEARCH:
        raise ValueError(f"top_k {top_k!r} is more than an HNSW scan can return (pgvector caps hnsw.ef_search at "
                         f"{MAX_EF_SEARCH}); use exact=True for deeper candidate lists")
    return int(top_k)


def dense_query_sql(table: str, top_k: int, *, exact: bool = False, schema: str = "public"):
    """The query, with one parameter `q` (the vector text, see `vector_literal`); rows (chunk id,
    doc id, score), best first, equal scores in id order.

    The distance is computed once per row (a second `embedding <=> q` in the select list would be
    evaluated again for every scanned row), and `meta->>'doc_id'` only for the top_k rows that
    come out of the inner LIMIT.  The score is `1 - distance`, the same float8 arithmetic as
    Haystack's `1 - (embedding <=> q)`.  HNSW: the inner ORDER BY is the distance alone, the form
    the index serves.  Exact: it is `1 - distance DESC, id`, which no index serves."""
    target = sql.Identifier(schema, table)
    limit = sql.Literal(int(top_k))
    if exact:
        return sql.SQL(
            "SELECT id, meta->>'doc_id', score FROM ("
            "SELECT id, meta, 1 - (embedding <=> %(q)s::vector) AS score FROM {t} "
            "ORDER BY score DESC, id LIMIT {k}) AS hits "
            "ORDER BY score DESC, id"
        ).format(t=target, k=limit)
    return sql.SQL(
        "SELECT id, meta->>'doc_id', 1 - distance AS score FROM ("
        "SELECT id, meta, embedding <=> %(q)s::vector AS distance FROM {t} "
        "ORDER BY distance LIMIT {k}) AS hits "
        "ORDER BY score DESC, id"
    ).format(t=target, k=limit)


@component
class LeanEmbeddingRetriever:
    """Cosine retrieval over the `embedding` column, with Haystack's ids and scores (see module doc).

    Returns Documents with id, meta ``{"doc_id": ...}`` and score (no content, no embedding),
    best first, equal scores in id order.  The connection opens in `warm_up` (or the first `run`);
    construction does not touch the database.
    """

    def __init__(
        self,
        *,
        connection_string: Secret | str,
        table: str,
        top_k: int = 10,
        exact: bool = False,
        schema: str = "public",
    ):
        if isinstance(connection_string, str):
            connection_string = Secret.from_token(connection_string)
        if not isinstance(connection_string, Secret):
            raise ValueError("connection_string must be a string or a haystack Secret")
        if not isinstance(exact, bool):
            raise ValueError(f"exact must be True or False, got {exact!r}")
        self.connection_string = connection_string
        self.table = _check_identifier(table, "table")
        self.schema = _check_identifier(schema, "schema")
        self.exact = exact
        self.top_k = _check_top_k(top_k, exact)
        self.dims: int | None = None  # read from the column's type in warm_up
        self._conn: psycopg.Connection[Any] | None = None
        self._ef_search: int | None = None  # the session's hnsw.ef_search, once we set it
        self._sql: dict[int, Any] = {}

    def warm_up(self) -> None:
        """Open the connection and check that the table has a vector `embedding` column."""
        if self._conn is not None and not self._conn.closed and not self._conn.broken:
            return
        self.close()
        conninfo = secret_value(self.connection_string)
        # connect(): a connect timeout, an application_name, and errors without the password
        conn = connect(conninfo, autocommit=True, application_name=f"eval-pipeline dense {self.table}")
        try:
            self.dims = self._column_dims(conn)
        except Exception:
            conn.close()
            raise
        self._conn = conn
        self._ef_search = None

    def _column_dims(self, conn) -> int | None:
        row = conn.execute(
            """SELECT c.oid IS NOT NULL, t.typname, a.atttypmod
               FROM (SELECT 1) AS one
               LEFT JOIN pg_catalog.pg_namespace n ON n.nspname = %s
               LEFT JOIN pg_catalog.pg_class c ON c.relnamespace = n.oid AND c.relname = %s
                                               AND c.relkind IN ('r', 'p', 'v', 'm', 'f')
               LEFT JOIN pg_catalog.pg_attribute a ON a.attrelid = c.oid AND a.attname = %s AND NOT a.attisdropped
               LEFT JOIN pg_catalog.pg_type t ON t.oid = a.atttypid""",
            (self.schema, self.table, EMBEDDING_COLUMN),
        ).fetchone()
        exists, type_name, typmod = row
        if not exists:
            raise ValueError(f"table {self.schema}.{self.table} does not exist (table={self.table!r})")
        if type_name != "vector":
            what = f"is of type {type_name}" if type_name else "is missing"
            raise ValueError(f"table {self.schema}.{self.table}: its {EMBEDDING_COLUMN!r} column {what}; "
                             "a pgvector `vector` column is needed")
        return int(typmod) if typmod is not None and typmod > 0 else None

    def close(self) -> None:
        if self._conn is not None:
            try:
                self._conn.close()
            finally:
                self._conn = None
                self._ef_search = None

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    def search_rows(self, query_embedding: Sequence[float], top_k: int | None = None) -> list[tuple[str, str, float]]:
        """(chunk id, doc id, score) of the top_k chunks, best first, equal scores in id order.
        The engine's path: no Document is built."""
        if query_embedding is None or len(query_embedding) == 0:
            raise ValueError("query_embedding must be a non-empty list of floats")
        top_k = self.top_k if top_k is None else _check_top_k(top_k, self.exact)
        vector = vector_literal(query_embedding)
        self.warm_up()
        if self._conn is None:
            raise ValueError("LeanEmbeddingRetriever._conn is None after warm_up()")
        if self.dims is not None and len(query_embedding) != self.dims:
            raise ValueError(f"query_embedding has {len(query_embedding)} dimensions; "
                             f"{self.schema}.{self.table} stores {self.dims}")
        statement = self._sql.get(top_k)
        if statement is None:
            statement = self._sql[top_k] = dense_query_sql(self.table, top_k, exact=self.exact, schema=self.schema)
        if not self.exact:
            ef = ef_search_for(top_k)
            if ef != self._ef_search:
                self._conn.execute("SELECT pg_catalog.set_config('hnsw.ef_search', %s, false)", (str(ef),))
                self._ef_search = ef
        return self._conn.execute(statement, {"q": vector}).fetchall()

    @component.output_types(documents=list[Document])
    def run(self, query_embedding: list[float], top_k: int | None = None) -> dict[str, list[Document]]:
        """The top_k chunks by cosine similarity to query_embedding (score = 1 - cosine distance)."""
        rows = self.search_rows(query_embedding, top_k)
        return {"documents": [Document(id=r[0], meta={"doc_id": r[1]}, score=float(r[2])) for r in rows]}

    def to_dict(self) -> dict[str, Any]:
        return default_to_dict(
            self, connection_string=self.connection_string.to_dict(), table=self.table, top_k=self.top_k,
            exact=self.exact, schema=self.schema,
        )

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> LeanEmbeddingRetriever:
        deserialize_secrets_inplace(data["init_parameters"], keys=["connection_string"])
        return default_from_dict(cls, data)


class LeanDenseEngine:
    """Drop-in for PgDenseEngine (same name, interface, ids and scores; no embeddings shipped).

    Warms up in the constructor, so a missing table fails here and the connection is opened
    outside a sweep's timed queries.  `exact=True` scores every chunk instead of walking the
    HNSW index."""

    name = "pg-dense"
    needs_embedding = True

    def __init__(self, connection_string: str, table: str, *, chunk_top_k: int = 100, depth: int = 20,
                 exact: bool = False, schema: str = "public"):
        self.depth = depth
        self.chunk_top_k = chunk_top_k
        self.exact = exact
        self.retriever = LeanEmbeddingRetriever(
            connection_string=connection_string, table=table, top_k=chunk_top_k, exact=exact, schema=schema,
        )
        self.retriever.warm_up()

    def chunk_hits(self, query: str, query_embedding: Sequence[float] | None) -> list[ChunkHit]:
        if query_embedding is None:
            raise ValueError("pg-dense needs a query embedding")
        return [ChunkHit(r[0], r[1], float(r[2])) for r in self.retriever.search_rows(query_embedding)]

    def search(self, query: str, query_embedding: Sequence[float] | None) -> list[RankedDoc]:
        return chunks_to_documents(self.chunk_hits(query, query_embedding), self.depth)

    def close(self) -> None:
        self.retriever.close()
