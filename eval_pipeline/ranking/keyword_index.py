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

- `ensure_tsvector_column(connection_string, table)` (in `eval_pipeline.store.tsvector`, re-exported here): add
  the column and its index, idempotently and safely under concurrent callers.
- `IndexedKeywordRetriever`: a Haystack component (`run(query, top_k) -> {"documents": [...]}`).
- `IndexedKeywordEngine`: the `pg-keyword` engine interface (`chunk_hits`, `search`) on top of it.

Both take three keyword-only settings (validated by `keyword_settings`, built into SQL by
`keyword_query_sql`, both in `eval_pipeline.store.tsvector`); the defaults are Haystack's:

- `match`: `"all"` (plainto_tsquery: every query term must occur), `"any"` (the query's
  lexemes ORed: at least one term) or `"websearch"` (websearch_to_tsquery: `"phrase"`,
  `-term`, `or`).  On questions longer than a few words `all` often matches nothing (SciFact
  claims: most of them); `any` then still ranks every chunk that shares a term.
- `ranking`: `"ts_rank_cd"` or `"ts_rank"`; `normalization`: Postgres' bitmask 0..63.  Unset,
  they take the match's defaults: ts_rank_cd / 0 for `all` (Haystack parity), ts_rank / 1
  (divide by 1 + log of the document length) for `any` and `websearch`, which ranks ORed terms
  far better (figures in bench/RESULTS.md, bench/keyword_match.py).

`settings()` returns the resolved `{"match", "ranking", "normalization"}` (for cache keys and a
variant's recorded config); `to_dict` records them, so `from_dict` gives the same retriever.

Side effect to know about: Haystack's retrievers select `table.*`, so once the column exists
they also fetch it, and `Document.from_dict` files it under `meta["content_tsv"]`.  Nothing in
this project reads that key; it costs those retrievers the transfer of the tsvector text.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Literal, cast

from haystack import Document, component, default_from_dict, default_to_dict
from haystack.utils import Secret, deserialize_secrets_inplace

from eval_pipeline.common.checks import is_integer
from eval_pipeline.ranking.hits import ChunkHit, RankedDoc, chunks_to_documents
from eval_pipeline.store.database import connect
from eval_pipeline.store.tsvector import (  # noqa: F401  (re-exported: the column belongs to this retriever)
    TSV_COLUMN,
    check_language,
    column_language,
    ensure_tsvector_column,
    keyword_query_sql,
    keyword_settings,
    secret_value,
    tsv_index_name,
)

if TYPE_CHECKING:
    import psycopg
    from psycopg import sql


@component
class IndexedKeywordRetriever:
    """Keyword retrieval on the stored `content_tsv` column (see module doc): by default
    `plainto_tsquery` ranked by `ts_rank_cd`, as Haystack's PgvectorKeywordRetriever.

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
        match: Literal["all", "any", "websearch"] = "all",
        ranking: Literal["ts_rank_cd", "ts_rank"] | None = None,
        normalization: int | None = None,
    ):
        settings = keyword_settings(match, ranking, normalization)  # first: a bad value fails before anything
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
        self.match = settings["match"]
        self.ranking = settings["ranking"]
        self.normalization = settings["normalization"]
        self._conn: psycopg.Connection[Any] | None = None
        self._sql: sql.Composed | None = None

    def settings(self) -> dict[str, Any]:
        """The resolved keyword settings {"match", "ranking", "normalization"}: what, beside the
        table, language and top_k, decides this retriever's results (cache keys, recorded config)."""
        return {"match": self.match, "ranking": self.ranking, "normalization": self.normalization}

    @staticmethod
    def _check_top_k(top_k) -> None:
        if not is_integer(top_k) or top_k < 1:
            raise ValueError(f"top_k must be an integer >= 1, got {top_k!r}")

    def warm_up(self) -> None:
        """Open the connection (and, with ensure_column, add the column and index if missing)."""
        if self._conn is not None and not self._conn.closed and not self._conn.broken:
            return
        conninfo = secret_value(self.connection_string)
        if self.ensure_column:
            ensure_tsvector_column(conninfo, self.table, self.language, schema=self.schema)
        # connect(): a connect timeout, an application_name, and errors without the password
        conn = connect(conninfo, autocommit=True, application_name=f"eval-pipeline keyword {self.table}")
        try:
            check_language(conn, self.language)
            has_column, built_for = column_language(conn, self.schema, self.table)
        except Exception:
            conn.close()
            raise
        if not has_column or built_for != self.language:
            conn.close()
            raise ValueError(
                f"{self.schema}.{self.table} has no {TSV_COLUMN} column for language {self.language!r}; "
                "call eval_pipeline.ranking.keyword_index.ensure_tsvector_column first"
            )
        self._conn = conn
        self._sql = keyword_query_sql(self.table, self.language, schema=self.schema, **self.settings())

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
        """The top_k chunks matching the query (see `match`), best score first, ties in id order.

        A query without lexemes (only stopwords or punctuation) matches nothing: [] in every mode.
        """
        if not query:
            raise ValueError("query must be a non-empty string")
        top_k = top_k or self.top_k
        self._check_top_k(top_k)
        self.warm_up()
        if self._conn is None or self._sql is None:
            raise ValueError("IndexedKeywordRetriever._conn or _sql is None after warm_up()")
        rows = self._conn.execute(self._sql, (query, top_k)).fetchall()
        return {"documents": [
            Document(id=row[0], content=row[1], meta=dict(row[2] or {}), score=float(row[3])) for row in rows
        ]}

    def to_dict(self) -> dict[str, Any]:
        return default_to_dict(
            self, connection_string=self.connection_string.to_dict(), table=self.table, top_k=self.top_k,
            language=self.language, schema=self.schema, ensure_column=self.ensure_column,
            match=self.match, ranking=self.ranking, normalization=self.normalization,
        )

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> IndexedKeywordRetriever:
        deserialize_secrets_inplace(data["init_parameters"], keys=["connection_string"])
        return default_from_dict(cls, data)


class IndexedKeywordEngine:
    """Drop-in for an engine on Haystack's PgvectorKeywordRetriever (same name, interface and results; faster).

    `match`, `ranking` and `normalization` as for IndexedKeywordRetriever (defaults: Haystack's
    ranking); `settings()` returns them resolved.

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
                 language: str = "english", ensure_column: bool = False,
                 match: Literal["all", "any", "websearch"] = "all",
                 ranking: Literal["ts_rank_cd", "ts_rank"] | None = None, normalization: int | None = None):
        self.depth = depth
        self.retriever = IndexedKeywordRetriever(
            connection_string=connection_string, table=table, top_k=chunk_top_k, language=language,
            ensure_column=ensure_column, match=match, ranking=ranking, normalization=normalization,
        )
        self.retriever.warm_up()

    def settings(self) -> dict[str, Any]:
        """The resolved keyword settings {"match", "ranking", "normalization"}."""
        return self.retriever.settings()

    def chunk_hits(self, query: str, query_embedding: Sequence[float] | None = None) -> list[ChunkHit]:
        # run() gives every document a score (Document.score is Optional)
        return [ChunkHit(d.id, d.meta["doc_id"], float(cast(float, d.score)))
                for d in self.retriever.run(query=query)["documents"]]

    def search(self, query: str, query_embedding: Sequence[float] | None = None) -> list[RankedDoc]:
        return chunks_to_documents(self.chunk_hits(query), self.depth)

    def close(self) -> None:
        self.retriever.close()
