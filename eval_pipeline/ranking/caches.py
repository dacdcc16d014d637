"""The ranking's caches: question embeddings, and a variant's results, each keyed on
everything that decides them."""

from __future__ import annotations

import hashlib
import io
import json
import sys
import time
import unicodedata
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from eval_pipeline.common import versions
from eval_pipeline.common.atomic import atomic_write_bytes
from eval_pipeline.common.registry import plugin_code_digest
from eval_pipeline.common.versions import package_versions, startup_code_digest
from eval_pipeline.questions.sets import Question
from eval_pipeline.ranking.results import identity_json
from eval_pipeline.ranking.variants import Variant
from eval_pipeline.store.database import connect

# Questions embedded in one call: the texts and vectors held at once (the embedder batches
# inside a call too), whatever the size of the question set.
QUERY_BATCH = 1024


class QueryEmbeddingCache:
    """Question embeddings on disk, keyed by the embedder's identity (model and weights by
    content) and the exact question texts. Computed `QUERY_BATCH` questions at a time into one
    float32 matrix, the form they are cached in, so a computed run and a cached one rank on
    the same numbers. What computing them took is kept beside them (`recorded_seconds`): a
    query's latency includes its embedding whether this run computed it or read it, so two
    indexes with one embedder, or a warm run and a cold one, are timed alike."""

    def __init__(self, folder: str | Path):
        self.folder = Path(folder)

    def _path(self, identity: str, questions: Sequence[Question]) -> Path:
        # JSON, not separators: a qid or a question may contain any character but NUL.
        payload = identity_json({"embedder": identity, "questions": [[q.qid, q.question] for q in questions]})
        return self.folder / f"{hashlib.sha256(payload.encode()).hexdigest()[:32]}.npy"

    def recorded_seconds(self, embedder, questions: Sequence[Question]) -> float | None:
        """What computing these embeddings took when they were cached (None: not cached)."""
        try:
            return float(self._path(embedder.identity, questions).with_suffix(".seconds").read_text())
        except (OSError, ValueError):
            return None

    def get_or_compute(self, embedder, questions: Sequence[Question]) -> tuple[dict[str, list[float]], float, bool]:
        """(embeddings by qid, seconds spent embedding in this call, whether they came from the
        cache). An entry whose cost was not recorded is computed again."""
        path = self._path(embedder.identity, questions)
        if path.exists() and self.recorded_seconds(embedder, questions) is not None:
            try:
                matrix = np.load(path)
                if matrix.shape[0] == len(questions):
                    return {q.qid: matrix[i].tolist() for i, q in enumerate(questions)}, 0.0, True
            except (OSError, ValueError):
                pass  # a damaged cache file is recomputed
        embedder.warm_up()  # loading the model is not query latency
        started = time.perf_counter()
        matrix = None
        for start in range(0, len(questions), QUERY_BATCH):
            batch = questions[start : start + QUERY_BATCH]
            # the query side of an embedder that has two (OpenAIEmbedder.input_types), else `embed`
            vectors = getattr(embedder, "embed_queries", embedder.embed)([q.question for q in batch])
            if len(vectors) != len(batch):
                what = "questions" if len(questions) == len(batch) else f"questions (batch at {start})"
                raise RuntimeError(f"embedder returned {len(vectors)} vectors for {len(batch)} {what}")
            block = np.asarray(vectors, dtype=np.float32)
            if matrix is None:
                matrix = np.empty((len(questions), block.shape[1]), dtype=np.float32)
            matrix[start : start + len(batch)] = block
        seconds = time.perf_counter() - started
        if matrix is None:
            matrix = np.empty((0, 0), dtype=np.float32)
        buffer = io.BytesIO()
        np.save(buffer, matrix)
        atomic_write_bytes(path, buffer.getvalue())
        atomic_write_bytes(path.with_suffix(".seconds"), f"{seconds!r}\n".encode())
        return {q.qid: matrix[i].tolist() for i, q in enumerate(questions)}, seconds, False


# Installed packages whose version can change a ranking (tokenizers, models, HNSW, BM25).
RESULT_PACKAGES = ("numpy", "torch", "transformers", "sentence-transformers", "tokenizers", "haystack-ai",
                   "sentence-transformers-haystack", "pgvector-haystack", "pgvector", "psycopg", "bm25s", "PyStemmer",
                   "openai")


# The registries whose kinds rank or score a result: a plugin kind of one of them (a team's engine
# or leg, reranker or metric, registered from outside the package) is code that decides a result.
RESULT_REGISTRIES = ("engine", "reranker", "measure")


def result_environment() -> dict[str, str]:
    """Versions of the installed packages that decide rankings ('absent' when not installed),
    a digest of the code they install (``package-code``: `versions.package_code_digest`) and of
    the code Python runs at start-up (``startup-code``: .pth files, sitecustomize): a results
    cache entry from before an upgrade, or a patch at the same version, is not reused after it. With plugin kinds
    (`RESULT_REGISTRIES`), ``plugin-code``: the digest of their source files, which the
    checkout's version and the package's source digest do not cover (a plugin lives outside
    them), so its edit is not replayed from the cache and is part of the engine identity."""
    environment = package_versions(RESULT_PACKAGES)
    # a patched or editable install ranks differently under the same version number, and so does
    # a package patched at start-up by a .pth line or sitecustomize
    environment["package-code"] = versions.package_code_digest(RESULT_PACKAGES)
    environment["startup-code"] = startup_code_digest()
    # the tokenizers case-fold and split words by Python's Unicode tables
    environment["python"] = ".".join(str(part) for part in sys.version_info[:3])
    environment["unicode"] = unicodedata.unidata_version
    plugins = plugin_code_digest(*RESULT_REGISTRIES)
    if plugins:
        environment["plugin-code"] = plugins
    return environment


# Where importable code lives (relative to the project root): a change here, tracked or not,
# changes what runs (the engine's identity, the checkout's version in eval_pipeline.verdict).
CODE_PATHS = ("eval_pipeline", "assets", "resources", "definitions.py")


def engine_identity(database: Mapping[str, str] | None = None) -> str:
    """What ranked a result, beyond its configuration: the code (its syntax, under the code
    paths, taken once per process; a plugin kind's, `result_environment`), the versions of the
    packages that decide a ranking and, given, the database server's and vector extension's
    (``database``: `store_environment`); 16 hex characters. Recorded with every ranked result:
    a paired comparison re-ranks a reference configuration with today's engine, which only
    stands for the reference when it is the same engine, and a partition ranked by another
    engine is not this run's measurement."""
    payload = json.dumps({"code": versions.source_digest(*CODE_PATHS), "packages": result_environment(),
                          "database": dict(database or {})}, sort_keys=True)
    return hashlib.sha256(payload.encode()).hexdigest()[:16]


def store_environment(connection_string: str) -> dict[str, str]:
    """The database server's and the vector extension's versions (HNSW search can change
    between pgvector releases)."""
    with connect(connection_string) as conn:
        server = conn.execute("SHOW server_version").fetchone()[0]
        row = conn.execute("SELECT extversion FROM pg_extension WHERE extname = 'vector'").fetchone()
    return {"postgres": str(server), "pgvector-extension": row[0] if row else "absent"}


class ResultsCache:
    """A variant's ranked results, reused when nothing that decides them has changed.

    The key covers the vector table (itself a fingerprint of corpus, chunking and the
    embedder's weights), the query embedder's identity, the questions, the variant's whole configuration, its reranker's
    full identity (weights by content; an LLM's endpoint, model and settings), the miss
    depth, the code version and the environment (package, server and extension versions).
    Without a clean code version (not a git checkout, or uncommitted changes) nothing is
    cached: the code that produced a result must be known. Results with an errored question,
    an incomplete diagnosis or a reranker fallback (an LLM reranker whose answer named no
    candidate, so the first-stage order was kept) are never stored, and such an entry found on
    disk is a miss: an outage, or an endpoint answering 200 with nothing usable, must not be
    replayed once it is fixed (the key cannot tell: the endpoint's identity did not change).
    Latency columns are those measured when the result was computed.
    """

    def __init__(self, folder: str | Path):
        self.folder = Path(folder)

    @staticmethod
    def key(*, table: str, questions_fingerprint: str, variant: Variant, miss_k: int, code_version: str,
            reranker: Mapping | None, environment: Mapping[str, str], query_embedder: str) -> str | None:
        """`query_embedder` is the identity of the embedder that embeds the questions: the table's
        name covers the one that embedded the chunks, and a run can pair a table with another."""
        if not code_version or code_version == "unknown" or code_version.endswith("-dirty"):
            return None
        payload = identity_json({
            "table": table, "questions": questions_fingerprint, "variant": variant.describe(), "key": variant.key,
            "query_embedder": query_embedder,
            "reranker": dict(reranker) if reranker is not None else None, "miss_k": miss_k,
            "code": code_version, "environment": dict(environment),
        })
        return hashlib.sha256(payload.encode()).hexdigest()[:32]

    def has(self, key: str | None) -> bool:
        return key is not None and (self.folder / f"{key}.parquet").exists()

    def get(self, key: str | None) -> pd.DataFrame | None:
        if not self.has(key):
            return None
        try:
            frame = pd.read_parquet(self.folder / f"{key}.parquet")
        except (OSError, ValueError):
            return None  # a damaged entry is recomputed
        # an entry `put` would refuse (written by older code) is not replayed: ranked again
        return frame if self.cacheable(frame) else None

    @staticmethod
    def cacheable(frame: pd.DataFrame) -> bool:
        """No errored question, no failed diagnosis leg, and no question whose reranker fell
        back to the first-stage order (`rerank_fallback` truthy; None, NaN and False are not)."""
        if any(column in frame and frame[column].notna().any() for column in ("error", "diagnosis_error")):
            return False
        return "rerank_fallback" not in frame or not frame["rerank_fallback"].dropna().astype(bool).any()

    def put(self, key: str | None, frame: pd.DataFrame) -> bool:
        """Store `frame` under `key`; False (nothing stored) without a key or for results
        that are not `cacheable` (an error, a diagnosis error or a reranker fallback)."""
        if key is None or not self.cacheable(frame):
            return False
        buffer = io.BytesIO()
        frame.to_parquet(buffer, index=False)
        atomic_write_bytes(self.folder / f"{key}.parquet", buffer.getvalue())
        return True
