"""A history of its own for each test: a schema of the session server's one database for histories,
named by the connection string's search path, instead of a new database.

A new database copies its template (about 0.2 s on these machines, more than the rest of a short
verdict test); a schema costs one statement. The library reads and writes a history through the
search path (every table, function and trigger it makes is unqualified), and users do keep
histories in schemas of their own (tests/unit/verdict/test_verdict_attacks_twentieth.py), so the
tests' histories are isolated as before: nothing of one test is on another's search path."""

from __future__ import annotations

import uuid
from urllib.parse import quote

DATABASE = "histories"


def fresh_history_uri(embedded_pg, tag: str) -> str:
    """The URI of a new, empty schema ``<tag>_<hex>`` of the session server's history database, as the
    only schema on its search path."""
    import psycopg
    from psycopg import sql

    base = embedded_pg.uri(DATABASE)
    schema = f"{tag}_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
    return base + ("&" if "?" in base else "?") + "options=" + quote(f"-csearch_path={schema}", safe="")
