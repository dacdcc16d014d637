"""Content-addressed embeddings: every vector an embedder computed, kept by (the embedder's
identity, a hash of the exact text embedded), so that a text is embedded once per model.

Why: embedding is the floor of ingest on CPU. A new corpus version (1 % of its documents
changed), another chunking of the same corpus (every document shorter than the chunk length
gives the same chunk), a rebuilt table: each built a new table and embedded every chunk again.
Ingest (`eval_pipeline.store.ingest`) now asks this store first, embeds only the misses, in
batches, and puts them here; every table, chunking and corpus version of the embedder shares it.

- **One table per embedder identity** (`vectors_<16 hex of sha256(identity)>`), in the same
  Postgres as the chunk tables, so it follows the database to a worker pool. A row is
  (sha256 of the text's UTF-8 bytes, the vector, when it was stored, when it was last used).
  `eval_vector_stores` lists them: identity, model, dims, created.
- **What the identity holds** (`store_identity`): the embedder's `identity` (for a local model
  its weights by content, the project's embedding code and the packages that embed; for an
  endpoint its URL, model, `input_type`s and the project's request code) plus the device.
  Weights swapped at the same path, or an edit of the code that embeds, are another identity,
  so another table: nothing is reused across them.
- **Only for embedders that declare it**: an embedder is used with the store when its
  `content_addressed` attribute is true (LocalEmbedder, OpenAIEmbedder). A test double or a
  wrapper whose `identity` is a label, not what computes the vectors, is embedded every time.
- **Batch-independence**: a vector reused from the store was computed in another batch than a
  cold build would compute it in. For the bundled all-MiniLM-L6-v2 on CPU, a text embedded
  alone and in a batch of 203 SciFact texts differ by at most 1.8e-7 (tests/integration/
  test_vector_store_reuse.py checks 1e-6), so the batch is not part of the key.
- **Exact values**: pgvector stores float4; the chunk tables store the same float4 (what the
  model gave, as float32). A vector read back here is written to a chunk table unchanged.
- **Size**: one row is about 1.6 kB for 384 dimensions (the vector, 1,544 B, the key and two
  timestamps, the tuple header) plus its primary-key entry: about 1.7 kB per distinct text.
  `python -m eval_pipeline.store.vectors list` shows each store's rows and bytes; `prune
  --older-than 30d` deletes rows not used for 30 days, `drop IDENTITY_OR_TABLE` a whole store.
"""

from __future__ import annotations

import hashlib
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from eval_pipeline.common.state import default_state_dir
from eval_pipeline.store.database import (
    DATABASE_KIND_ENV,
    DATABASE_URL_ENV,
    CommandLineParser,
    advisory_lock,
    advisory_unlock,
    command_line_database_url,
    connect,
)

STORES_TABLE = "eval_vector_stores"
TABLE_PREFIX = "vectors_"
# A hit refreshes its row's last use at most this often: a nightly run does not rewrite the
# whole store to say it read it.
TOUCH_AFTER = "1 hour"


def store_identity(embedder: Any) -> str | None:
    """What a stored vector is keyed by besides its text: the embedder's identity and device,
    or None when the embedder does not declare `content_addressed` (then nothing is reused)."""
    if not getattr(embedder, "content_addressed", False):
        return None
    device = getattr(embedder, "device", None)
    return embedder.identity + (f"|device:{device}" if device is not None else "")


def table_for(identity: str) -> str:
    return TABLE_PREFIX + hashlib.sha256(identity.encode("utf-8")).hexdigest()[:16]


def text_key(text: str) -> bytes:
    """The stored key of a text: sha256 of its exact UTF-8 bytes (no normalization: the model
    sees these bytes)."""
    return hashlib.sha256(text.encode("utf-8")).digest()


def vector_literal(vector: Sequence[float]) -> str:
    """pgvector's text form; the chunk tables are written in the same one."""
    return "[" + ",".join(map(str, vector)) + "]"


def parse_vector(text: str) -> list[float]:
    return [float(x) for x in text[1:-1].split(",")] if len(text) > 2 else []


def prepare(conn) -> None:
    """The registry of stores (called with the vector extension present, under ingest's
    database-preparation lock)."""
    conn.execute(
        f"""CREATE TABLE IF NOT EXISTS {STORES_TABLE} (
            table_name text PRIMARY KEY,
            identity text NOT NULL,
            model text NOT NULL,
            dims integer NOT NULL,
            created_at timestamptz NOT NULL DEFAULT now())""")


@dataclass
class Reuse:
    """What one or more `embed_through_store` calls did: texts embedded by the model, and
    texts whose vectors came from the store."""

    embedded: int = 0
    from_store: int = 0

    def add(self, other: "Reuse") -> None:
        self.embedded += other.embedded
        self.from_store += other.from_store


class VectorStore:
    """One embedder identity's stored vectors, on an autocommit connection of its own: a
    vector put here is kept even if the chunk table's transaction that wanted it fails."""

    def __init__(self, connection_string: str, identity: str, model_id: str):
        self.identity, self.model_id = identity, model_id
        self.table = table_for(identity)
        self._conn = connect(connection_string, autocommit=True, application_name=f"eval-pipeline {self.table}")
        self._exists = self._table_exists()

    def close(self) -> None:
        self._conn.close()

    def __enter__(self) -> "VectorStore":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _table_exists(self) -> bool:
        return bool(self._conn.execute("SELECT to_regclass(%s) IS NOT NULL", (f"public.{self.table}",)).fetchone()[0])

    def get(self, keys: Sequence[bytes]) -> dict[bytes, str]:
        """{key: vector text} for the keys stored; their last use refreshed."""
        if not self._exists or not keys:
            return {}
        unique = list(dict.fromkeys(keys))
        rows = self._conn.execute(f"SELECT key, embedding::text FROM {self.table} WHERE key = ANY(%s)",
                                  (unique,)).fetchall()
        if rows:
            self._conn.execute(f"UPDATE {self.table} SET used_at = now() WHERE key = ANY(%s) AND used_at < now() - "
                               f"interval '{TOUCH_AFTER}'", ([r[0] for r in rows],))
        return {bytes(r[0]): r[1] for r in rows}

    def put(self, keys: Sequence[bytes], vectors: Sequence[str]) -> None:
        """Store vectors (text form); a key already stored keeps its first vector."""
        if not keys:
            return
        if not self._exists:
            self._create(len(parse_vector(vectors[0])))
        self._conn.execute(f"INSERT INTO {self.table} (key, embedding) SELECT k, v::vector FROM unnest(%s::bytea[], "
                           "%s::text[]) AS t(k, v) ON CONFLICT (key) DO NOTHING", (list(keys), list(vectors)))

    def _create(self, dims: int) -> None:
        """The table and its registry row, under a lock: two shards of a build may both get here."""
        key = f"{self.table}:create"
        advisory_lock(self._conn, key, what=f"creating the vector store {self.table}")
        try:
            self._conn.execute(f"""CREATE TABLE IF NOT EXISTS {self.table} (
                key bytea PRIMARY KEY,
                embedding vector({int(dims)}) NOT NULL,
                stored_at timestamptz NOT NULL DEFAULT now(),
                used_at timestamptz NOT NULL DEFAULT now())""")
            if dims <= 1000:  # in the row, as the chunk tables keep theirs (ingest.PLAIN_STORAGE_MAX_DIMS)
                self._conn.execute(f"ALTER TABLE {self.table} ALTER COLUMN embedding SET STORAGE PLAIN")
            self._conn.execute(f"INSERT INTO {STORES_TABLE} (table_name, identity, model, dims) VALUES "
                               "(%s, %s, %s, %s) ON CONFLICT (table_name) DO NOTHING",
                               (self.table, self.identity, self.model_id, dims))
        finally:
            advisory_unlock(self._conn, key)
        self._exists = True


def embed_through_store(embedder: Any, texts: Sequence[str], store: VectorStore | None) -> tuple[list[str], Reuse]:
    """Vectors (pgvector text form) for `texts`, in their order: those stored from the store,
    the others embedded in one call (the embedder batches it) and stored. A text repeated in
    `texts` is embedded once. Without a store, every text is embedded."""
    if store is None:
        vectors = embedder.embed(list(texts))
        _check_count(vectors, texts)
        return [vector_literal(v) for v in vectors], Reuse(embedded=len(texts))
    keys = [text_key(t) for t in texts]
    found = store.get(keys)
    missing: dict[bytes, str] = {}
    for key, text in zip(keys, texts):
        if key not in found and key not in missing:
            missing[key] = text
    if missing:
        vectors = embedder.embed(list(missing.values()))
        _check_count(vectors, missing)
        fresh = [vector_literal(v) for v in vectors]
        store.put(list(missing), fresh)
        found.update(zip(missing, fresh))
    return [found[k] for k in keys], Reuse(embedded=len(missing), from_store=len(texts) - len(missing))


def _check_count(vectors, texts) -> None:
    if len(vectors) != len(texts):
        raise RuntimeError(f"the embedder returned {len(vectors)} vectors for {len(texts)} texts")


# --- list, prune, drop -----------------------------------------------------------------------


_AGE = re.compile(r"^(\d+)\s*(d|h|m|s|days?|hours?|minutes?|seconds?)$")
_UNITS = {"d": "days", "h": "hours", "m": "minutes", "s": "seconds"}


def parse_age(text: str) -> str:
    """'30d', '12h', '90m', '10s' as a Postgres interval; a ValueError names the bad value."""
    match = _AGE.match(text.strip().lower())
    if not match:
        raise ValueError(f"--older-than {text!r}: give a number and a unit, e.g. 30d, 12h, 90m, 10s")
    return f"{int(match.group(1))} {_UNITS[match.group(2)[0]]}"


def list_stores(connection_string: str) -> list[dict[str, Any]]:
    """Each store: table, identity, model, dims, rows, bytes (pg_total_relation_size), oldest use."""
    with connect(connection_string, autocommit=True, application_name="eval-pipeline vectors list") as conn:
        if not conn.execute("SELECT to_regclass(%s) IS NOT NULL", (STORES_TABLE,)).fetchone()[0]:
            return []
        stores = conn.execute(f"SELECT table_name, identity, model, dims FROM {STORES_TABLE} ORDER BY created_at"
                              ).fetchall()
        out = []
        for table, identity, model, dims in stores:
            if not conn.execute("SELECT to_regclass(%s) IS NOT NULL", (table,)).fetchone()[0]:
                continue
            rows, oldest = conn.execute(f"SELECT count(*), min(used_at) FROM {table}").fetchone()
            size = conn.execute("SELECT pg_total_relation_size(%s::regclass)", (table,)).fetchone()[0]
            out.append({"table": table, "identity": identity, "model": model, "dims": dims, "rows": rows,
                        "bytes": int(size), "oldest_use": oldest})
    return out


def prune(connection_string: str, older_than: str, *, tables: Sequence[str] | None = None) -> dict[str, int]:
    """Delete the rows not used for `older_than` ('30d'...) from every store (or `tables`);
    {table: rows deleted}. A later build embeds those texts again."""
    interval = parse_age(older_than)
    chosen = [s["table"] for s in list_stores(connection_string)]
    if tables is not None:
        unknown = sorted(set(tables) - set(chosen))
        if unknown:
            raise ValueError(f"no vector store {unknown[0]!r}; stores: {', '.join(chosen) or 'none'}")
        chosen = [t for t in chosen if t in set(tables)]
    deleted = {}
    with connect(connection_string, autocommit=True, application_name="eval-pipeline vectors prune") as conn:
        for table in chosen:
            deleted[table] = conn.execute(f"DELETE FROM {table} WHERE used_at < now() - %s::interval",
                                          (interval,)).rowcount
    return deleted


def drop(connection_string: str, which: str) -> str:
    """Drop one store, named by its table or its identity; returns the table dropped."""
    stores = list_stores(connection_string)
    match = [s["table"] for s in stores if which in (s["table"], s["identity"])]
    if not match:
        raise ValueError(f"no vector store {which!r}; stores: {', '.join(s['table'] for s in stores) or 'none'}")
    with connect(connection_string, autocommit=True, application_name="eval-pipeline vectors drop") as conn:
        with conn.transaction():
            conn.execute(f"DROP TABLE IF EXISTS {match[0]}")
            conn.execute(f"DELETE FROM {STORES_TABLE} WHERE table_name = %s", (match[0],))
    return match[0]


def main(argv: list[str] | None = None) -> int:
    parser = CommandLineParser(prog="python -m eval_pipeline.store.vectors",
                                     description="The stored embeddings: list, prune by age, drop a store.")
    parser.add_argument("--url-env", default=None, help="read the database URL from this environment variable "
                        f"(default: {DATABASE_URL_ENV} when {DATABASE_KIND_ENV}=external, as the jobs; else the "
                        "embedded server of --state-dir: EVAL_PIPELINE_STATE_DIR, else the checkout's .eval_state)")
    parser.add_argument("--state-dir", default=None)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("list", help="each store: table, model, dims, rows, bytes, oldest use")
    pruning = sub.add_parser("prune", help="delete rows not used for a while")
    pruning.add_argument("--older-than", required=True, help="e.g. 30d, 12h, 90m")
    pruning.add_argument("--table", action="append", default=None, help="only this store (repeatable)")
    dropping = sub.add_parser("drop", help="drop a whole store")
    dropping.add_argument("store", help="its table (vectors_...) or its identity")
    args = parser.parse_args(argv)
    try:
        if args.command == "prune":
            parse_age(args.older_than)  # before connecting
        url = command_line_database_url(args.url_env, args.state_dir or default_state_dir(), "eval")
        if args.command == "list":
            for s in list_stores(url):
                print(f"{s['table']}  {s['rows']} vectors  {s['bytes']} bytes  dims {s['dims']}  oldest use "
                      f"{s['oldest_use']}  {s['model']}")
        elif args.command == "prune":
            for table, count in prune(url, args.older_than, tables=args.table).items():
                print(f"{table}: {count} vectors deleted")
        else:
            print(f"dropped {drop(url, args.store)}")
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
