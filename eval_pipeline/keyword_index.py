"""Postgres full-text keyword retrieval on a stored, GIN-indexed tsvector column.

Haystack's `PgvectorKeywordRetriever` runs::

    SELECT t.*, ts_rank_cd(to_tsvector(lang, content), query) AS score
    FROM t, plainto_tsquery(lang, q) query
    WHERE to_tsvector(lang, content) @@ query ORDER BY score DESC LIMIT k

which re-parses every matching row's content (`to_tsvector` inside `ts_rank_cd`) and ships
every column of the hits, the 384-float embedding included.  Here the tsvector is computed
once, at write time, into a stored generated column with a GIN index on it, and the query
selects only what a ranking needs.  The ranking function is the same (`ts_rank_cd` with the
default normalization over the same tsvector and the same `plainto_tsquery`), so ids and
scores are identical to Haystack's; ties are ordered by id, so the order is deterministic
(Haystack leaves the order of equal scores to the executor).

- `ensure_tsvector_column(conn_str, table)`: add the column and its index, idempotently and
  safely under concurrent callers.
- `IndexedKeywordRetriever`: a Haystack component (`run(query, top_k) -> {"documents": [...]}`).
- `IndexedKeywordEngine`: the `pg-keyword` engine interface (`chunk_hits`, `search`) on top of it.

Side effect to know about: Haystack's retrievers select `table.*`, so once the column exists
they also fetch it, and `Document.from_dict` files it under `meta["content_tsv"]`.  Nothing in
this project reads that key; it costs those retrievers the transfer of the tsvector text.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

from haystack import Document, component, default_from_dict, default_to_dict
from haystack.utils import Secret, deserialize_secrets_inplace

from eval_pipeline.engines import ChunkHit, RankedDoc, chunks_to_documents

TSV_COLUMN = "content_tsv"
_MAX_IDENT = 63  # Postgres truncates longer identifiers, which could make two index names collide


def tsv_index_name(table: str) -> str:
    """`<table>_tsv`, or a hashed form when that would exceed Postgres' 63-byte identifier limit."""
    name = f"{table}_tsv"
    if len(name.encode()) <= _MAX_IDENT:
        return name
    digest = hashlib.sha256(table.encode()).hexdigest()[:12]
    return f"{table.encode()[:40].decode(errors='ignore')}_{digest}_tsv"


def _secret_value(connection_string: Secret | str) -> str:
    if isinstance(connection_string, Secret):
        value = connection_string.resolve_value()
        if not value:
            raise ValueError("connection_string resolved to an empty value")
        return value
    if not isinstance(connection_string, str) or not connection_string:
        raise ValueError("connection_string must be a non-empty string or a haystack Secret")
    return connection_string


def _check_language(conn, language: str) -> None:
    if not isinstance(language, str) or not language:
        raise ValueError(f"language must be a text search configuration name, got {language!r}")
    row = conn.execute("SELECT 1 FROM pg_catalog.pg_ts_config WHERE cfgname = %s", (language,)).fetchone()
    if row is None:
        known = [r[0] for r in conn.execute("SELECT cfgname FROM pg_catalog.pg_ts_config ORDER BY 1").fetchall()]
        raise ValueError(f"language {language!r} is not a text search configuration of this server; "
                         f"valid: {', '.join(known)}")


def _column_language(conn, schema: str, table: str) -> tuple[bool, str | None]:
    """(column exists, the configuration its generation expression names, if any)."""
    row = conn.execute(
        """SELECT a.attgenerated, pg_catalog.pg_get_expr(d.adbin, d.adrelid)
           FROM pg_catalog.pg_attribute a
           JOIN pg_catalog.pg_class c ON c.oid = a.attrelid
           JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
           LEFT JOIN pg_catalog.pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
           WHERE n.nspname = %s AND c.relname = %s AND a.attname = %s AND NOT a.attisdropped""",
        (schema, table, TSV_COLUMN),
    ).fetchone()
    if row is None:
        return False, None
    generated, expression = row
    if generated != "s" or not expression or "to_tsvector(" not in expression:
        return True, None
    # pg_get_expr renders it as to_tsvector('english'::regconfig, COALESCE(content, ''::text))
    start = expression.find("to_tsvector('") + len("to_tsvector('")
    end = expression.find("'::regconfig", start)
    return True, expression[start:end] if end > start else None


def ensure_tsvector_column(conn_str: str, table: str, language: str = "english", *, schema: str = "public") -> bool:
    """Add `content_tsv tsvector GENERATED ALWAYS AS (to_tsvector(language, coalesce(content, ''))) STORED`
    and a GIN index on it to `schema.table`, unless they are there already.

    Idempotent and safe to call concurrently (the check and the DDL run under an advisory lock
    keyed on the table).  Returns True when it created the column or the index.  An existing
    `content_tsv` column built for another language, or not generated from `content`, is an
    error rather than silently re-used: its scores would not match the query's language.
    Adding the column rewrites the table (an ACCESS EXCLUSIVE lock while it runs).
    """
    import psycopg
    from psycopg import sql

    lock_key = f"eval_pipeline.keyword_index:{schema}.{table}"
    index = tsv_index_name(table)
    created = False
    with psycopg.connect(_secret_value(conn_str), autocommit=True) as conn:
        _check_language(conn, language)
        exists = conn.execute(
            "SELECT 1 FROM pg_catalog.pg_tables WHERE schemaname = %s AND tablename = %s", (schema, table)
        ).fetchone()
        if exists is None:
            raise ValueError(f"table {schema}.{table} does not exist")
        conn.execute("SELECT pg_advisory_lock(hashtext(%s))", (lock_key,))
        try:
            has_column, column_language = _column_language(conn, schema, table)
            if has_column and column_language != language:
                raise ValueError(
                    f"{schema}.{table}.{TSV_COLUMN} exists but is "
                    + (f"built for language {column_language!r}, not {language!r}" if column_language
                       else "not a generated to_tsvector(content) column")
                    + "; drop it first to rebuild it"
                )
            if not has_column:
                conn.execute(
                    sql.SQL(
                        "ALTER TABLE {schema}.{table} ADD COLUMN {column} tsvector GENERATED ALWAYS AS "
                        "(to_tsvector({language}::regconfig, coalesce(content, ''))) STORED"
                    ).format(
                        schema=sql.Identifier(schema), table=sql.Identifier(table),
                        column=sql.Identifier(TSV_COLUMN), language=sql.Literal(language),
                    )
                )
                created = True
            has_index = conn.execute(
                "SELECT 1 FROM pg_catalog.pg_indexes WHERE schemaname = %s AND tablename = %s AND indexname = %s",
                (schema, table, index),
            ).fetchone()
            if has_index is None:
                conn.execute(
                    sql.SQL("CREATE INDEX IF NOT EXISTS {index} ON {schema}.{table} USING GIN ({column})").format(
                        index=sql.Identifier(index), schema=sql.Identifier(schema), table=sql.Identifier(table),
                        column=sql.Identifier(TSV_COLUMN),
                    )
                )
                conn.execute(sql.SQL("ANALYZE {schema}.{table}").format(
                    schema=sql.Identifier(schema), table=sql.Identifier(table)))
                created = True
        finally:
            conn.execute("SELECT pg_advisory_unlock(hashtext(%s))", (lock_key,))
    return created


def keyword_query_sql(table: str, language: str = "english", *, schema: str = "public"):
    """The retrieval statement; parameters: (query, top_k).  The language is a literal (validated
    against pg_ts_config by the callers), as in Haystack's statement, so the plans are alike."""
    from psycopg import sql

    return sql.SQL(
        "SELECT id, content, meta, ts_rank_cd({column}, query) AS score "
        "FROM {schema}.{table}, plainto_tsquery({language}, %s) query "
        "WHERE {column} @@ query "
        "ORDER BY score DESC, id "
        "LIMIT %s"
    ).format(schema=sql.Identifier(schema), table=sql.Identifier(table), column=sql.Identifier(TSV_COLUMN),
             language=sql.Literal(language))


@component
class IndexedKeywordRetriever:
    """Keyword retrieval with `ts_rank_cd` on the stored `content_tsv` column (see module doc).

    Returns Documents with id, content, meta and score (no embedding), best first, equal
    scores in id order.  The table needs the column: call `ensure_tsvector_column` first, or
    pass `ensure_column=True` to have `warm_up` do it.
    """

    def __init__(
        self,
        *,
        connection_string: Secret | str,
        table: str,
        top_k: int = 10,
        language: str = "english",
        schema: str = "public",
        ensure_column: bool = False,
    ):
        if isinstance(connection_string, str):
            connection_string = Secret.from_token(connection_string)
        if not isinstance(connection_string, Secret):
            raise ValueError("connection_string must be a string or a haystack Secret")
        if not isinstance(table, str) or not table:
            raise ValueError("table must be a non-empty string")
        self._check_top_k(top_k)
        self.connection_string = connection_string
        self.table = table
        self.top_k = top_k
        self.language = language
        self.schema = schema
        self.ensure_column = ensure_column
        self._conn = None
        self._sql = None

    @staticmethod
    def _check_top_k(top_k) -> None:
        if not isinstance(top_k, int) or isinstance(top_k, bool) or top_k < 1:
            raise ValueError(f"top_k must be an integer >= 1, got {top_k!r}")

    def warm_up(self) -> None:
        """Open the connection (and, with ensure_column, add the column and index if missing)."""
        if self._conn is not None and not self._conn.closed and not self._conn.broken:
            return
        import psycopg

        conninfo = _secret_value(self.connection_string)
        if self.ensure_column:
            ensure_tsvector_column(conninfo, self.table, self.language, schema=self.schema)
        conn = psycopg.connect(conninfo, autocommit=True)
        try:
            _check_language(conn, self.language)
            has_column, column_language = _column_language(conn, self.schema, self.table)
        except Exception:
            conn.close()
            raise
        if not has_column or column_language != self.language:
            conn.close()
            raise ValueError(
                f"{self.schema}.{self.table} has no {TSV_COLUMN} column for language {self.language!r}; "
                "call eval_pipeline.keyword_index.ensure_tsvector_column first"
            )
        self._conn = conn
        self._sql = keyword_query_sql(self.table, self.language, schema=self.schema)

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    @component.output_types(documents=list[Document])
    def run(self, query: str, top_k: int | None = None) -> dict[str, list[Document]]:
        """The top_k chunks matching every query term (plainto_tsquery), best ts_rank_cd first."""
        if not query:
            raise ValueError("query must be a non-empty string")
        top_k = top_k or self.top_k
        self._check_top_k(top_k)
        self.warm_up()
        rows = self._conn.execute(self._sql, (query, top_k)).fetchall()
        return {"documents": [
            Document(id=row[0], content=row[1], meta=dict(row[2] or {}), score=float(row[3])) for row in rows
        ]}

    def to_dict(self) -> dict[str, Any]:
        return default_to_dict(
            self, connection_string=self.connection_string.to_dict(), table=self.table, top_k=self.top_k,
            language=self.language, schema=self.schema, ensure_column=self.ensure_column,
        )

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> IndexedKeywordRetriever:
        deserialize_secrets_inplace(data["init_parameters"], keys=["connection_string"])
        return default_from_dict(cls, data)


class IndexedKeywordEngine:
    """Drop-in for `engines.PgKeywordEngine` (same name, interface and results; faster).

    Warms up in the constructor (connection opened outside a sweep's timed queries).  The table
    must already have the column: add it with `ensure_tsvector_column` when the table is built
    (or reused), before any other connection queries the table.  Adding it later, while another
    connection holds a prepared `SELECT table.*` (psycopg prepares a statement run 5 times, as
    Haystack's keyword query is), makes that connection fail with "cached plan must not change
    result type".  `ensure_column=True` adds it here anyway, for standalone use.
    """

    name = "pg-keyword"
    needs_embedding = False

    def __init__(self, connection_string: str, table: str, chunk_top_k: int = 100, *, depth: int = 20,
                 language: str = "english", ensure_column: bool = False):
        self.depth = depth
        self.retriever = IndexedKeywordRetriever(
            connection_string=connection_string, table=table, top_k=chunk_top_k, language=language,
            ensure_column=ensure_column,
        )
        self.retriever.warm_up()

    def chunk_hits(self, query: str, query_embedding: Sequence[float] | None = None) -> list[ChunkHit]:
        return [ChunkHit(d.id, d.meta["doc_id"], float(d.score)) for d in self.retriever.run(query=query)["documents"]]

    def search(self, query: str, query_embedding: Sequence[float] | None = None) -> list[RankedDoc]:
        return chunks_to_documents(self.chunk_hits(query), self.depth)

    def close(self) -> None:
        self.retriever.close()
