"""Runs a sweep of variants over a question set, sharing all work that variants have in common.

- Query embeddings are computed once per run (in one batch) and cached on disk by
  (embedder, question texts), so a re-run does not embed again; cached work costs 0 ms.
- Each leg (pg keyword, pg dense, bm25) is queried once per question and chunk depth, and
  each first-stage candidate pool once per question; variants that differ only by reranker
  or threshold reuse the pool, so a reranker sweep never re-queries the store.
- Latency is recorded per stage (embed, keyword, dense, bm25, metadata, fusion, rerank) and
  attributed to every variant that needs the stage: it is the latency that variant would
  have on its own.
- An error in any stage is recorded against the questions and variants it touches; the
  question stays in the results as an errored miss.  A reranker that fails (an LLM call
  that still fails after its retries) errors the question; one that falls back to the
  first-stage order (an LLM answer naming no candidate) marks it `rerank_fallback`.
- Every miss gets a diagnosis (see `diagnose_miss`); a leg the diagnosis needed that failed
  is recorded in `diagnosis_error`.
- Every row carries what produced it (`variant_config`: the variant's settings and its
  reranker's full identity; `store_table`; `questions_fingerprint`), so a partition
  computed under another variants file or question set is recorded as what it was;
  `code_version` names the code that ranked it.
"""

from __future__ import annotations

import hashlib
import io
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from eval_pipeline.atomic import atomic_write_bytes
from eval_pipeline.checks import is_integer
from eval_pipeline.corpus import CorpusSnapshot
from eval_pipeline.engines import (
    BM25Engine,
    ChunkHit,
    MetadataEngine,
    PgDenseEngine,
    RankedDoc,
    chunks_to_documents,
    fuse,
)
from eval_pipeline.questions import Question
from eval_pipeline.variants import Variant

STAGES = ("embed", "keyword", "dense", "bm25", "metadata", "fusion", "rerank")
MISS_CLASSES = (
    "never_candidate",   # no leg had the gold document among its candidates
    "keyword_only",      # only the keyword leg had it, and this variant did not surface it
    "dense_only",        # only the dense leg had it
    "both_legs",         # both legs had it, yet this (single-leg) engine missed it
    "lost_in_fusion",    # a fused leg had it in its own top k, the fused list did not
    "demoted_by_reranker",  # it was in the top k before reranking and not after
    "abstained",         # the variant's score threshold returned nothing
    "errored",           # a stage raised on this question
)
STAGE_COLUMNS = [f"ms_{s}" for s in STAGES]  # NaN where the variant has no such stage
RESULT_COLUMNS = [
    "variant", "qid", "doc_ids", "scores", "latency_ms", *STAGE_COLUMNS, "error", "abstained",
    "pre_rerank", "keyword_docs", "dense_docs", "rerank_fallback", "diagnosis_error",
]
PROVENANCE_COLUMNS = ["variant_config", "store_table", "questions_fingerprint", "code_version"]


def variant_identity(variant: Variant, reranker=None) -> dict:
    """Everything about a variant that decides its results: its settings and, when it has a
    reranker, the reranker's identity (model weights by content, an LLM's endpoint, model
    and sampling settings). Computed before any model is loaded."""
    out = dict(variant.describe())
    if reranker is not None:
        out["reranker_identity"] = dict(reranker.identity())
    return out


def identity_json(identity: Mapping) -> str:
    import json

    return json.dumps(identity, sort_keys=True, default=str)


def diagnose_miss(
    gold: Sequence[str],
    *,
    final: Sequence[str],
    k: int,
    keyword: Sequence[str],
    dense: Sequence[str],
    pre_rerank: Sequence[str] | None,
    fused: bool,
    abstained: bool = False,
    errored: bool = False,
) -> str | None:
    """Why an answerable question missed (no gold document in the top k); None for a hit.

    The checks run from the last stage back to the first, so a miss is blamed on the latest
    stage that lost the gold document.  `keyword` and `dense` are the legs' candidate
    documents, best first: "lost in fusion" means a leg alone would have hit; otherwise the
    class says which legs had the gold document among their candidates at all.
    """
    gold = set(gold)
    if not gold or gold & set(final[:k]):
        return None
    if errored:
        return "errored"
    if abstained:
        return "abstained"
    if pre_rerank is not None and gold & set(pre_rerank[:k]):
        return "demoted_by_reranker"
    if fused and gold & (set(keyword[:k]) | set(dense[:k])):
        return "lost_in_fusion"
    in_keyword, in_dense = bool(gold & set(keyword)), bool(gold & set(dense))
    if in_keyword and in_dense:
        return "both_legs"
    if in_keyword:
        return "keyword_only"
    if in_dense:
        return "dense_only"
    return "never_candidate"


class QueryEmbeddingCache:
    """Question embeddings on disk, keyed by the embedder's identity (model and weights by
    content) and the exact question texts."""

    def __init__(self, folder: str | Path):
        self.folder = Path(folder)

    def _path(self, identity: str, questions: Sequence[Question]) -> Path:
        # JSON, not separators: a qid or a question may contain any character but NUL.
        payload = identity_json({"embedder": identity, "questions": [[q.qid, q.question] for q in questions]})
        return self.folder / f"{hashlib.sha256(payload.encode()).hexdigest()[:32]}.npy"

    def get_or_compute(self, embedder, questions: Sequence[Question]) -> tuple[dict[str, list[float]], float, bool]:
        """(embeddings by qid, seconds spent embedding, whether they came from the cache)."""
        path = self._path(embedder.identity, questions)
        if path.exists():
            try:
                matrix = np.load(path)
                if matrix.shape[0] == len(questions):
                    return {q.qid: matrix[i].tolist() for i, q in enumerate(questions)}, 0.0, True
            except (OSError, ValueError):
                pass  # a damaged cache file is recomputed
        embedder.warm_up()  # loading the model is not query latency
        started = time.perf_counter()
        vectors = embedder.embed([q.question for q in questions])
        seconds = time.perf_counter() - started
        if len(vectors) != len(questions):
            raise RuntimeError(f"embedder returned {len(vectors)} vectors for {len(questions)} questions")
        buffer = io.BytesIO()
        np.save(buffer, np.asarray(vectors, dtype=np.float32))
        atomic_write_bytes(path, buffer.getvalue())
        return {q.qid: list(v) for q, v in zip(questions, vectors)}, seconds, False


def error_text(exc: BaseException, conninfo: str | None = None) -> str:
    """A question's error as stored in results, history and reports: type and message, with
    the password of `conninfo` (and its fragments, and any connection-string password) removed,
    cut to 500 characters."""
    from eval_pipeline.database import error_text as scrubbed

    return scrubbed(exc, conninfo)[:500]


@dataclass
class _Timed:
    value: object
    ms: float
    error: str | None


def _timed(fn, *args, conninfo: str | None = None) -> _Timed:
    started = time.perf_counter()
    try:
        value, error = fn(*args), None
    except Exception as exc:  # kept per question, never fatal for the run
        value, error = None, error_text(exc, conninfo)
    return _Timed(value, (time.perf_counter() - started) * 1000.0, error)


class Sweep:
    """All variants of one run over one store and one question set."""

    def __init__(
        self,
        *,
        snapshot: CorpusSnapshot,
        connection_string: str,
        table: str,
        dims: int,
        query_embeddings: Mapping[str, Sequence[float]],
        embed_ms_per_query: float,
        rerankers: Mapping[str, object] | None = None,
        miss_k: int = 10,
        code_version: str = "unknown",
    ):
        self.snapshot = snapshot
        self.connection_string = connection_string
        self.table = table
        self.dims = dims
        self.query_embeddings = query_embeddings
        self.embed_ms = embed_ms_per_query
        self.rerankers = dict(rerankers or {})
        self.miss_k = miss_k
        self.code_version = code_version
        self._stores: dict[int, object] = {}  # one document store per HNSW ef_search
        self._chunks: list[tuple[str, str, str]] | None = None
        self._chunk_embeddings: dict[str, np.ndarray] | None = None
        self._legs: dict[tuple[str, int], object] = {}
        self._leg_cache: dict[tuple[str, int, str], _Timed] = {}
        self._pool_cache: dict[tuple, tuple[list[RankedDoc], dict[str, float], str | None, bool]] = {}
        self._metadata: MetadataEngine | None = None
        self.queries_by_stage: dict[str, int] = {s: 0 for s in STAGES}

    # --- shared resources -----------------------------------------------------------------

    @staticmethod
    def ef_search(top_k: int) -> int:
        """The HNSW ef_search of a dense leg of depth `top_k`: pgvector's default 40, raised to
        the depth (an HNSW scan returns at most ef_search rows). It depends on the leg alone,
        never on the deepest leg of the sweep: a variant ranks the same alone, in the whole
        sweep or in one batch of the parallel job."""
        return max(40, top_k)

    def _document_store(self, ef_search: int):
        if ef_search not in self._stores:
            from eval_pipeline.ingest import open_document_store

            self._stores[ef_search] = open_document_store(self.connection_string, self.table, self.dims, hnsw=True,
                                                          ef_search=ef_search)
        return self._stores[ef_search]

    def chunks(self) -> list[tuple[str, str, str]]:
        if self._chunks is None:
            from eval_pipeline.ingest import fetch_chunks

            self._chunks = fetch_chunks(self.connection_string, self.table)
        return self._chunks

    def chunk_text(self) -> dict[str, str]:
        return {cid: text for cid, _, text in self.chunks()}

    def chunk_embeddings(self) -> dict[str, np.ndarray]:
        if self._chunk_embeddings is None:
            from eval_pipeline.ingest import fetch_chunk_embeddings

            self._chunk_embeddings = fetch_chunk_embeddings(self.connection_string, self.table)
        return self._chunk_embeddings

    def _leg(self, name: str, top_k: int):
        key = (name, top_k)
        if key not in self._legs:
            if name == "keyword":
                from eval_pipeline.keyword_index import IndexedKeywordEngine  # imports Haystack: only when ranking

                # Same ranking as Haystack's PgvectorKeywordRetriever, on a stored, indexed tsvector
                # (parity tested in tests/integration/test_keyword_index.py).
                self._legs[key] = IndexedKeywordEngine(self.connection_string, self.table, chunk_top_k=top_k)
            elif name == "dense":
                self._legs[key] = PgDenseEngine(self._document_store(self.ef_search(top_k)), chunk_top_k=top_k)
            elif name == "bm25":
                self._legs[key] = BM25Engine(self.chunks(), chunk_top_k=top_k)
            else:
                raise ValueError(f"unknown leg {name!r}")
        return self._legs[key]

    def leg_hits(self, name: str, top_k: int, q: Question) -> _Timed:
        key = (name, top_k, q.qid)
        if key not in self._leg_cache:
            try:
                leg = self._leg(name, top_k)
            except Exception as exc:  # e.g. the database is unreachable: this question errors, the next retries
                return _Timed(None, 0.0, error_text(exc, self.connection_string))
            self.queries_by_stage[name] += 1
            self._leg_cache[key] = _timed(leg.chunk_hits, q.question, self.query_embeddings.get(q.qid),
                                          conninfo=self.connection_string)
        return self._leg_cache[key]

    # --- stages ---------------------------------------------------------------------------

    def first_stage(self, v: Variant, q: Question) -> tuple[list[RankedDoc], dict[str, float], str | None, bool]:
        """(candidate documents, stage ms, error, fused) for the variant's first stage; cached."""
        key = (v.first_stage, q.qid)
        if key in self._pool_cache:
            return self._pool_cache[key]
        pool_depth = max(v.depth, v.rerank_depth)
        stage_ms: dict[str, float] = {}
        error = None
        pool: list[RankedDoc] = []
        fused = v.engine == "hybrid"
        if v.engine == "metadata":
            if self._metadata is None:
                self._metadata = MetadataEngine(self.snapshot.documents)
            self.queries_by_stage["metadata"] += 1
            timed = _timed(lambda text: self._metadata.search(text)[:pool_depth], q.question)
            stage_ms["metadata"] = timed.ms
            pool, error = timed.value or [], timed.error
        else:
            legs = list(v.legs) if fused else [{"pg-keyword": "keyword", "pg-dense": "dense", "bm25": "bm25"}[v.engine]]
            hits: list[list[ChunkHit]] = []
            for leg in legs:
                if leg == "dense":
                    stage_ms["embed"] = self.embed_ms
                timed = self.leg_hits(leg, v.chunk_top_k, q)
                stage_ms[leg] = timed.ms
                error = error or timed.error
                hits.append(timed.value or [])
            if error is None:
                if fused:
                    timed = _timed(lambda: fuse(hits, mode=v.fusion, rrf_k=v.rrf_k, weights=v.weights))
                    stage_ms["fusion"] = timed.ms
                    error = timed.error
                    chunk_list = timed.value or []
                else:
                    chunk_list = hits[0]
                pool = chunks_to_documents(chunk_list, pool_depth)
        result = (pool, stage_ms, error, fused)
        self._pool_cache[key] = result
        return result

    def _candidates(self, docs: Sequence[RankedDoc], with_embeddings: bool):
        from eval_pipeline.rerankers import Candidate

        texts = self.chunk_text()
        embeddings = self.chunk_embeddings() if with_embeddings else {}
        out = []
        for d in docs:
            emb = embeddings.get(d.chunk_id) if with_embeddings else None
            out.append(Candidate(doc_id=d.doc_id, text=texts.get(d.chunk_id, ""), score=d.score,
                                 embedding=tuple(float(x) for x in emb) if emb is not None else None))
        return out

    def _with_chunk_ids(self, docs: Sequence[RankedDoc]) -> list[RankedDoc]:
        """Metadata results carry no chunk; rerankers read the document's first chunk."""
        if all(d.chunk_id for d in docs):
            return list(docs)
        first = {}
        for cid, doc_id, _ in self.chunks():
            first.setdefault(doc_id, cid)
        return [d if d.chunk_id else RankedDoc(d.doc_id, d.score, first.get(d.doc_id)) for d in docs]

    def run_variant(self, v: Variant, questions: Sequence[Question]) -> pd.DataFrame:
        from eval_pipeline.questions import question_set_fingerprint

        reranker = self.rerankers.get(v.key) if v.reranker.kind != "none" else None
        if v.reranker.kind != "none" and reranker is None:
            raise ValueError(f"variant {v.key!r} needs a {v.reranker.kind} reranker and none was given")
        diag_top_k = v.chunk_top_k
        rows = []
        for q in questions:
            pool, stage_ms, error, fused = self.first_stage(v, q)
            stage_ms = dict(stage_ms)
            pre_rerank = None
            final = list(pool)
            fallback = False
            if error is None and reranker is not None and pool:
                pre_rerank = [d.doc_id for d in pool[: v.depth]]
                head = self._with_chunk_ids(pool[: v.rerank_depth])
                needs_embeddings = v.reranker.kind == "mmr"
                fallbacks_before = getattr(reranker, "fallbacks", 0)
                timed = _timed(lambda: reranker.rerank(
                    q.question, self._candidates(head, needs_embeddings), query_embedding=self.query_embeddings.get(q.qid)))
                fallback = getattr(reranker, "fallbacks", 0) != fallbacks_before
                stage_ms["rerank"] = timed.ms
                self.queries_by_stage["rerank"] += 1
                if timed.error:
                    error = timed.error
                else:
                    reranked = [RankedDoc(c.doc_id, float(c.score)) for c in timed.value]
                    final = reranked + list(pool[v.rerank_depth:])
            final = final[: v.depth] if error is None else []
            abstained = False
            if error is None and v.abstain_below is not None and (not final or final[0].score < v.abstain_below):
                final, abstained = [], True
            keyword_docs = dense_docs = []
            diagnosis_error = None
            if error is None and v.engine != "metadata":
                keyword_docs, keyword_error = self._diag_docs(self._keyword_leg_of(v), diag_top_k, q)
                dense_docs, dense_error = self._diag_docs("dense", diag_top_k, q)
                diagnosis_error = keyword_error or dense_error
            rows.append({
                "variant": v.key,
                "qid": q.qid,
                "doc_ids": [d.doc_id for d in final],
                "scores": [float(d.score) for d in final],
                "latency_ms": float(sum(stage_ms.values())),
                **{f"ms_{s}": stage_ms.get(s, float("nan")) for s in STAGES},
                "error": error,
                "abstained": abstained,
                "pre_rerank": pre_rerank,
                "keyword_docs": keyword_docs,
                "dense_docs": dense_docs,
                "rerank_fallback": fallback,
                "diagnosis_error": diagnosis_error,
            })
        frame = pd.DataFrame(rows, columns=RESULT_COLUMNS)
        frame["variant_config"] = identity_json(variant_identity(v, reranker))
        frame["store_table"] = self.table
        frame["questions_fingerprint"] = question_set_fingerprint(questions)
        frame["code_version"] = self.code_version
        frame["miss_class"] = [
            diagnose_miss(q.gold, final=r["doc_ids"], k=self.miss_k, keyword=r["keyword_docs"], dense=r["dense_docs"],
                          pre_rerank=r["pre_rerank"], fused=v.engine == "hybrid", abstained=r["abstained"],
                          errored=r["error"] is not None)
            for q, (_, r) in zip(questions, frame.iterrows())
        ]
        return frame

    @staticmethod
    def _keyword_leg_of(v: Variant) -> str:
        """The lexical leg a miss is diagnosed against: bm25 for variants built on it."""
        if v.engine == "bm25" or (v.engine == "hybrid" and "bm25" in v.legs and "keyword" not in v.legs):
            return "bm25"
        return "keyword"

    def _diag_docs(self, leg: str, top_k: int, q: Question) -> tuple[list[str], str | None]:
        """A leg's candidate documents for the diagnosis (shared with variants that use the
        leg), and the leg's error if it failed (the diagnosis is then incomplete)."""
        timed = self.leg_hits(leg, top_k, q)
        error = f"{leg} leg: {timed.error}" if timed.error else None
        return [d.doc_id for d in chunks_to_documents(timed.value or [], 10**9)], error

    def run(self, variants: Sequence[Variant], questions: Sequence[Question]) -> dict[str, pd.DataFrame]:
        return {v.key: self.run_variant(v, questions) for v in variants}


API_RERANKERS = ("llm",)  # rerankers that call a rate-limited, paid endpoint


def plan_batches(variants: Sequence[Variant], workers: int) -> list[list[Variant]]:
    """Split the variants to rank into at most `workers` batches, each ranked by its own Sweep
    (one Dagster step each, so the multiprocess executor runs them in parallel).

    - Variants that share a first stage (they differ only by reranker or threshold) stay in one
      batch, so a reranker sweep still queries the store once per question.
    - Every variant with an API-backed reranker goes to one batch: they share one client and so
      one concurrency limit, and never hit the endpoint from two processes at once.
    - Groups are dealt largest first to the batch with the fewest variants; each batch keeps
      the variants' order.  `workers=1` gives one batch: the whole sweep in one step, with
      the legs shared by every variant (the fastest on one machine).

    What parallel batches cannot share: each computes the dense and keyword legs that the miss
    diagnosis reads, and loads its own models.
    """
    if not is_integer(workers) or workers < 1:
        raise ValueError(f"workers must be an integer >= 1, got {workers!r}")
    groups: dict[object, list[Variant]] = {}
    for v in variants:
        group = "api" if v.reranker.kind in API_RERANKERS else v.first_stage
        groups.setdefault(group, []).append(v)
    # a first stage shared with an API-backed variant joins the API group
    api_stages = {v.first_stage for v in groups.get("api", [])}
    for stage in [g for g in groups if g in api_stages]:
        groups["api"].extend(groups.pop(stage))
    order = {v.key: i for i, v in enumerate(variants)}
    batches: list[list[Variant]] = [[] for _ in range(min(workers, len(groups)))]
    for group in sorted(groups.values(), key=lambda g: (-len(g), order[g[0].key])):
        min(batches, key=len).extend(group)
    return [sorted(b, key=lambda v: order[v.key]) for b in batches if b]


def stage_latency_summary(results: pd.DataFrame) -> dict[str, dict[str, float]]:
    """p50, p95, max and mean per stage (and total) in ms, over the questions of one variant."""
    out: dict[str, dict[str, float]] = {}
    for stage, column in [*zip(STAGES, STAGE_COLUMNS), ("total", "latency_ms")]:
        values = results[column].dropna() if column in results else pd.Series(dtype=float)
        if len(values):
            out[stage] = {
                "p50": float(values.quantile(0.5)), "p95": float(values.quantile(0.95)),
                "max": float(values.max()), "mean": float(values.mean()),
            }
    return out


# Installed packages whose version can change a ranking (tokenizers, models, HNSW, BM25).
RESULT_PACKAGES = ("numpy", "torch", "transformers", "sentence-transformers", "tokenizers", "haystack-ai",
                   "sentence-transformers-haystack", "pgvector-haystack", "pgvector", "psycopg", "bm25s", "openai")


def result_environment() -> dict[str, str]:
    """Versions of the installed packages that decide rankings ('absent' when not installed):
    a results cache entry from before an upgrade is not reused after it."""
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for name in RESULT_PACKAGES:
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = "absent"
    return out


def store_environment(connection_string: str) -> dict[str, str]:
    """The database server's and the vector extension's versions (HNSW search can change
    between pgvector releases)."""
    from eval_pipeline.database import connect

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
    cached: the code that produced a result must be known. Results with an errored question
    or an incomplete diagnosis are never stored: an outage must not be replayed.
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
            return pd.read_parquet(self.folder / f"{key}.parquet")
        except (OSError, ValueError):
            return None  # a damaged entry is recomputed

    @staticmethod
    def cacheable(frame: pd.DataFrame) -> bool:
        """No errored question and no failed diagnosis leg."""
        return all(column not in frame or not frame[column].notna().any() for column in ("error", "diagnosis_error"))

    def put(self, key: str | None, frame: pd.DataFrame) -> bool:
        """Store `frame` under `key`; False (nothing stored) without a key or for results
        that are not `cacheable`."""
        if key is None or not self.cacheable(frame):
            return False
        buffer = io.BytesIO()
        frame.to_parquet(buffer, index=False)
        atomic_write_bytes(self.folder / f"{key}.parquet", buffer.getvalue())
        return True
