"""The stored, GIN-indexed tsvector column that the keyword leg searches, and its query
(`keyword_query_sql`, with the match and ranking settings of `keyword_settings`).

Kept apart from `keyword_index` (the Haystack component) and free of Haystack imports, so that
ingest, which adds the column to every table it builds or reuses, does not pay for importing
Haystack and torch on a run that reuses everything (see bench/warm_rerun.py).
"""

from __future__ import annotations

import hashlib

from psycopg import sql

from eval_pipeline.common.checks import is_integer
from eval_pipeline.store.database import DEFAULT_LOCK_LOG_EVERY, advisory_lock, advisory_unlock, connect


def secret_value(connection_string) -> str:
    """The connection string, from a plain string or a haystack Secret (duck-typed)."""
    if hasattr(connection_string, "resolve_value"):
        value = connection_string.resolve_value()
        if not value:
            raise ValueError("connection_string resolved to an empty value")
        return value
    if not isinstance(connection_string, str) or not connection_string:
        raise ValueError("connection_string must be a non-empty string or a haystack Secret")
    return connection_string


TSV_COLUMN = "content_tsv"
_MAX_IDENT = 63  # Postgres truncates longer identifiers, which could make two index names collide


def tsv_index_name(table: str) -> str:
    """`<table>_tsv`, or a hashed form when that would exceed Postgres' 63-byte identifier limit."""
    name = f"{table}_tsv"
    if len(name.encode()) <= _MAX_IDENT:
        return name
    digest = hashlib.sha256(table.encode()).hexdigest()[:12]
    return f"{table.encode()[:40].decode(errors='ignore')}_{digest}_tsv"


def check_language(conn, language: str) -> None:
    if not isinstance(language, str) or not language:
        raise ValueError(f"language must be a text search configuration name, got {language!r}")
    row = conn.execute("SELECT 1 FROM pg_catalog.pg_ts_config WHERE cfgname = %s", (language,)).fetchone()
    if row is None:
        known = [r[0] for r in conn.execute("SELECT cfgname FROM pg_catalog.pg_ts_config ORDER BY 1").fetchall()]
        raise ValueError(f"language {language!r} is not a text search configuration of this server; "
                         f"valid: {', '.join(known)}")


def column_language(conn, schema: str, table: str) -> tuple[bool, str | None]:
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


def ensure_tsvector_column(connection_string: str, table: str, language: str = "english", *, schema: str = "public",
                           lock_timeout: float | None = None, lock_log_every: float = DEFAULT_LOCK_LOG_EVERY,
                           log=None) -> bool:
    """Add `content_tsv tsvector GENERATED ALWAYS AS (to_tsvector(language, coalesce(content, ''))) STORED`
    and a GIN index on it to `schema.table`, unless they are there already.

    Idempotent and safe to call concurrently (the check and the DDL run under an advisory lock
    keyed on the table).  Returns True when it created the column or the index.  An existing
    `content_tsv` column built for another language, or not generated from `content`, is an
    error rather than silently re-used: its scores would not match the query's language.
    Adding the column rewrites the table (an ACCESS EXCLUSIVE lock while it runs), so a
    concurrent caller may wait: `log` (default: the `eval_pipeline.store.database` logger) hears every
    `lock_log_every` seconds who holds the lock, and after `lock_timeout` seconds (default:
    EVAL_PIPELINE_LOCK_TIMEOUT, else one hour) it raises `LockTimeoutError` saying what to do.
    """
    lock_key = f"eval_pipeline.ranking.keyword_index:{schema}.{table}"
    index = tsv_index_name(table)
    created = False
    with connect(secret_value(connection_string), autocommit=True,
                 application_name=f"eval-pipeline tsvector {table}") as conn:
        check_language(conn, language)
        exists = conn.execute(
            "SELECT 1 FROM pg_catalog.pg_tables WHERE schemaname = %s AND tablename = %s", (schema, table)
        ).fetchone()
        if exists is None:
            raise ValueError(f"table {schema}.{table} does not exist")
        advisory_lock(conn, lock_key, what=f"adding {TSV_COLUMN} to {schema}.{table}", timeout=lock_timeout,
                      log_every=lock_log_every, log=log)
        try:
            has_column, built_for = column_language(conn, schema, table)
            if has_column and built_for != language:
                raise ValueError(
                    f"{schema}.{table}.{TSV_COLUMN} exists but is "
                    + (f"built for language {built_for!r}, not {language!r}" if built_for
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
            advisory_unlock(conn, lock_key)
    return created


# --- how a query matches and how matches are ranked ---------------------------------------------

KEYWORD_MATCHES = ("all", "any", "websearch")
KEYWORD_RANKINGS = ("ts_rank_cd", "ts_rank")
MAX_NORMALIZATION = 63  # the six documented bits 1|2|4|8|16|32; 0 ignores the document length
# (ranking, normalization) when unset, by match: `all` is Haystack's PgvectorKeywordRetriever
# (ts_rank_cd, 0); with ORed terms ts_rank dividing by 1 + log(length) ranks far better (bench/keyword_match.py).
KEYWORD_DEFAULTS = {"all": ("ts_rank_cd", 0), "any": ("ts_rank", 1), "websearch": ("ts_rank", 1)}


def keyword_settings(match: str = "all", ranking: str | None = None, normalization: int | None = None) -> dict:
    """The validated, resolved keyword settings `{"match", "ranking", "normalization"}`.

    - match `all`: every query term must occur (`plainto_tsquery`, Haystack's behaviour);
      `any`: at least one (the query's lexemes ORed); `websearch`: `websearch_to_tsquery`
      (`"quoted phrase"`, `-term`, `or`).
    - ranking: `ts_rank_cd` (cover density) or `ts_rank` (term frequency).
    - normalization: Postgres' rank normalization bitmask, 0..63 (1: divide by 1 + log(document
      length), 2: by the length, 4: by the mean harmonic distance between extents, ts_rank_cd
      only (ts_rank ignores it), 8: by the number of unique words, 16: by 1 + log of that,
      32: rank / (rank + 1)).

    Worth knowing: ts_rank scores an AND query by pairs of found terms, so with websearch's
    `-term` every match scores 1e-20 (use ts_rank_cd there); ts_rank_cd on ORed terms adds up
    every occurrence, which ranks far worse than ts_rank (bench/RESULTS.md).

    A setting left as None takes the default of the match (KEYWORD_DEFAULTS).  Free of
    Haystack and of any database: a variants parser can call it to fail early and to record
    the resolved values.  Raises ValueError naming the bad value and what is valid.
    """
    if not isinstance(match, str) or match not in KEYWORD_MATCHES:
        raise ValueError(f"match must be one of {', '.join(map(repr, KEYWORD_MATCHES))}, got {match!r}")
    default_ranking, default_normalization = KEYWORD_DEFAULTS[match]
    ranking = default_ranking if ranking is None else ranking
    normalization = default_normalization if normalization is None else normalization
    if not isinstance(ranking, str) or ranking not in KEYWORD_RANKINGS:
        raise ValueError(f"ranking must be one of {', '.join(map(repr, KEYWORD_RANKINGS))}, got {ranking!r}")
    if not is_integer(normalization) or not 0 <= normalization <= MAX_NORMALIZATION:
        raise ValueError(f"normalization must be an integer bitmask 0..{MAX_NORMALIZATION} "
                         f"(1, 2, 4, 8, 16, 32 or a sum of them), got {normalization!r}")
    return {"match": match, "ranking": ranking, "normalization": int(normalization)}


# `any`: the query's lexemes ORed, built in the server from to_tsvector's lexemes (the same parser
# and dictionaries as plainto_tsquery: stopwords dropped; unique, sorted), each one quoted as a
# tsquery lexeme (in quotes, a quote chr(39) and a backslash chr(92) doubled).  The query text is
# only ever a bound parameter, never read as tsquery syntax.  No lexemes (only stopwords or
# punctuation) gives NULL, which matches nothing.
_ANY_QUERY = (
    "(SELECT string_agg(chr(39) || replace(replace(lexeme, chr(92), repeat(chr(92), 2)), chr(39), repeat(chr(39), 2))"
    " || chr(39), ' | ')::tsquery FROM unnest(tsvector_to_array(to_tsvector({language}, %s))) AS lexeme)"
)
_QUERY_EXPRESSIONS = {
    "all": "plainto_tsquery({language}, %s)",
    "websearch": "websearch_to_tsquery({language}, %s)",
    "any": _ANY_QUERY,
}


def keyword_query_sql(table: str, language: str = "english", *, schema: str = "public", match: str = "all",
                      ranking: str | None = None, normalization: int | None = None):
    """The retrieval statement; parameters: (query, top_k).  The language is a literal (validated
    against pg_ts_config by the callers), as in Haystack's statement, so the plans are alike.

    The one place the keyword query is built: `match`, `ranking` and `normalization` as in
    `keyword_settings` (validated here too; the ranking function and normalization are
    inserted from that whitelist, never from caller text).  The defaults are Haystack's
    statement: `ts_rank_cd(content_tsv, plainto_tsquery(language, q), 0)` (0 is what the
    two-argument form uses), best first, equal scores in id order.
    """
    settings = keyword_settings(match, ranking, normalization)
    language_literal = sql.Literal(language)
    query = sql.SQL(_QUERY_EXPRESSIONS[settings["match"]]).format(language=language_literal)
    return sql.SQL(
        "SELECT id, content, meta, {rank}({column}, query, {normalization}) AS score "
        "FROM {schema}.{table}, {query} AS terms(query) "
        "WHERE {column} @@ query "
        "ORDER BY score DESC, id "
        "LIMIT %s"
    ).format(schema=sql.Identifier(schema), table=sql.Identifier(table), column=sql.Identifier(TSV_COLUMN),
             rank=sql.SQL(settings["ranking"]), normalization=sql.Literal(settings["normalization"]),
             query=query)
