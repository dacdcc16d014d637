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

import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from eval_pipeline.corpus.sources import CorpusSnapshot
from eval_pipeline.questions.sets import Question, question_set_fingerprint
from eval_pipeline.ranking.abstention import confidence, refuses
from eval_pipeline.ranking.diagnosis import diagnose_miss
from eval_pipeline.ranking.engines import (
    ENGINES,
    ChunkHit,
    RankedDoc,
    chunks_to_documents,
    fuse,
    leg_kind,
)
from eval_pipeline.ranking.microscope import answer_chunk, miss_record
from eval_pipeline.ranking.rerankers import RERANKERS, Candidate
from eval_pipeline.ranking.results import RESULT_COLUMNS, STAGES, error_text, identity_json, variant_identity
from eval_pipeline.ranking.variants import Variant, resolved_leg_settings
from eval_pipeline.store import ingest
from eval_pipeline.store.ingest import fetch_document_chunks

if TYPE_CHECKING:
    from eval_pipeline.ranking.rerankers import Reranker


@dataclass
class _Timed:
    value: Any  # what the timed call returned; None when it raised
    ms: float
    error: str | None


def _frozen(settings: Mapping[str, Any]) -> tuple:
    return tuple(sorted(settings.items()))


def _timed(fn, *args, connection_string: str | None = None) -> _Timed:
    started = time.perf_counter()
    try:
        value, error = fn(*args), None
    except Exception as exc:  # kept per question, never fatal for the run
        value, error = None, error_text(exc, connection_string)
    return _Timed(value, (time.perf_counter() - started) * 1000.0, error)


class Sweep:
    """All variants of one run over one store and one question set."""

    def __init__(
        self,
        *,
        snapshot: CorpusSnapshot,
        connection_string: str,
        table: str,
        query_embeddings: Mapping[str, Sequence[float]],
        embed_ms_per_query: float,
        rerankers: Mapping[str, Reranker] | None = None,
        miss_k: int = 10,
        code_version: str = "unknown",
    ):
        self.snapshot = snapshot
        self.connection_string = connection_string
        self.table = table
        self.query_embeddings = query_embeddings
        self.embed_ms = embed_ms_per_query
        self.rerankers = dict(rerankers or {})
        self.miss_k = miss_k
        self.code_version = code_version
        self._chunks: list[tuple[str, str, str]] | None = None
        self._chunk_text: dict[str, str] | None = None
        self._first_chunk: dict[str, str] | None = None
        self._chunk_embeddings: dict[str, np.ndarray] | None = None
        self._evidence_failed: str | None = None  # why the microscope could not read the store's chunks
        # The microscope's evidence: the chunks (id, text, embedding) of gold documents, by doc id,
        # read from the store for the golds of the questions being ranked (never the whole table).
        self._gold_chunks: dict[str, list[tuple[str, str, np.ndarray | None]]] = {}
        self._golds_asked: frozenset[str] = frozenset()
        self._legs: dict[tuple[str, int, tuple], Any] = {}  # (leg, top_k, settings) -> its engine
        self._leg_cache: dict[tuple[str, int, tuple, str], _Timed] = {}
        self._pool_cache: dict[tuple, tuple[list[RankedDoc], dict[str, float], str | None, bool]] = {}
        self._engines: dict[str, Any] = {}  # engine name -> its document-level engine (metadata)
        self.queries_by_stage: dict[str, int] = {s: 0 for s in STAGES}

    # --- shared resources -----------------------------------------------------------------

    def chunks(self) -> list[tuple[str, str, str]]:
        if self._chunks is None:
            self._chunks = ingest.fetch_chunks(self.connection_string, self.table)
        return self._chunks

    def chunk_text(self) -> dict[str, str]:
        """{chunk id: text}, built once: every reranked question reads it."""
        if self._chunk_text is None:
            self._chunk_text = {cid: text for cid, _, text in self.chunks()}
        return self._chunk_text

    def first_chunk(self) -> dict[str, str]:
        """{doc id: its first chunk id}, built once: every metadata result reads it."""
        if self._first_chunk is None:
            self._first_chunk = {}
            for cid, doc_id, _ in self.chunks():
                self._first_chunk.setdefault(doc_id, cid)
        return self._first_chunk

    def chunk_embeddings(self) -> dict[str, np.ndarray]:
        if self._chunk_embeddings is None:
            self._chunk_embeddings = ingest.fetch_chunk_embeddings(self.connection_string, self.table)
        return self._chunk_embeddings

    def _leg(self, name: str, top_k: int, settings: Mapping[str, Any]):
        """The engine of one leg at one depth with one set of settings (the variants file's,
        see `Variant.leg_settings`; {} for the leg's defaults). Variants that agree on all
        three share it, and its hits."""
        key = (name, top_k, _frozen(settings))
        if key not in self._legs:
            kind = leg_kind(name)  # eval_pipeline.ranking.engines.ENGINES: how the leg is built
            if kind.build is None:
                raise ValueError(f"leg {name!r} has no builder")
            self._legs[key] = kind.build(self, top_k, settings)
        return self._legs[key]

    def leg_hits(self, name: str, top_k: int, q: Question, settings: Mapping[str, Any] | None = None) -> _Timed:
        settings = settings or {}
        key = (name, top_k, _frozen(settings), q.qid)
        if key not in self._leg_cache:
            try:
                leg = self._leg(name, top_k, settings)
            except Exception as exc:  # e.g. the database is unreachable: this question errors, the next retries
                return _Timed(None, 0.0, error_text(exc, self.connection_string))
            self.queries_by_stage[name] = self.queries_by_stage.get(name, 0) + 1
            self._leg_cache[key] = _timed(leg.chunk_hits, q.question, self.query_embeddings.get(q.qid),
                                          connection_string=self.connection_string)
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
        kind = ENGINES[v.engine]
        fused = kind.fuses
        if kind.search is not None:  # a document-level engine (metadata): its own stage, no legs
            if v.engine not in self._engines:
                self._engines[v.engine] = kind.search(self)
            engine = self._engines[v.engine]
            self.queries_by_stage[v.engine] = self.queries_by_stage.get(v.engine, 0) + 1
            timed = _timed(lambda text: engine.search(text)[:pool_depth], q.question)
            stage_ms[v.engine] = timed.ms
            pool, error = timed.value or [], timed.error
        else:
            legs = list(v.used_legs)
            hits: list[list[ChunkHit]] = []
            for leg in legs:
                if "query_embedding" in leg_kind(leg).needs:
                    stage_ms["embed"] = self.embed_ms
                timed = self.leg_hits(leg, v.chunk_top_k, q, v.leg_settings(leg))
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

    def gold_chunks(self, gold: Sequence[str]) -> list[tuple[str, str, str, np.ndarray | None]]:
        """(chunk id, doc id, text, embedding) of the chunks of the `gold` documents, in chunk id
        order. The first call reads the chunks of the golds of every question being ranked
        (`run_variant`'s) in one query and keeps them: what the microscope holds is those
        documents' chunks, not the table."""
        unread = {d for d in gold if d not in self._gold_chunks}
        if unread:
            wanted = unread | {d for d in self._golds_asked if d not in self._gold_chunks}
            rows = fetch_document_chunks(self.connection_string, self.table, wanted)
            for doc_id in wanted:
                self._gold_chunks[doc_id] = []
            for cid, doc_id, text, embedding in rows:
                self._gold_chunks[doc_id].append((cid, text, embedding))
        return sorted((cid, doc_id, text, embedding) for doc_id in set(gold)
                      for cid, text, embedding in self._gold_chunks[doc_id])

    def _candidates(self, docs: Sequence[RankedDoc], with_embeddings: bool):
        texts = self.chunk_text()
        embeddings = self.chunk_embeddings() if with_embeddings else {}
        out = []
        for d in docs:
            cid = d.chunk_id  # None for a document without a chunk: no text, no embedding
            emb = embeddings.get(cid) if with_embeddings and cid is not None else None
            out.append(Candidate(doc_id=d.doc_id, text=texts.get(cid, "") if cid is not None else "", score=d.score,
                                 embedding=tuple(float(x) for x in emb) if emb is not None else None))
        return out

    def _with_chunk_ids(self, docs: Sequence[RankedDoc]) -> list[RankedDoc]:
        """Metadata results carry no chunk: rerankers read, and the results name, the document's
        first chunk."""
        if all(d.chunk_id for d in docs):
            return list(docs)
        first = self.first_chunk()
        return [d if d.chunk_id else RankedDoc(d.doc_id, d.score, first.get(d.doc_id)) for d in docs]

    def run_variant(self, v: Variant, questions: Sequence[Question]) -> pd.DataFrame:
        reranker = self.rerankers.get(v.key) if v.reranker.kind != "none" else None
        if v.reranker.kind != "none" and reranker is None:
            raise ValueError(f"variant {v.key!r} needs a {v.reranker.kind} reranker and none was given")
        self._golds_asked = self._golds_asked | {d for q in questions for d in q.gold}  # read together at a miss
        diag_top_k = v.chunk_top_k
        diag_legs = self.diagnosis_legs(v)
        sides = {leg: leg_kind(leg).side for leg in diag_legs}
        diagnosed: dict[str, dict[str, list[str]]] = {}
        rows = []
        misses: list[dict[str, Any] | None] = []  # the microscope's record of each miss (None: a hit)
        for q in questions:
            pool, stage_ms, error, fused = self.first_stage(v, q)
            stage_ms = dict(stage_ms)
            pre_rerank = None
            final = list(pool)
            fallback = False
            if error is None and reranker is not None and pool:
                pre_rerank = [d.doc_id for d in pool[: v.depth]]
                head = self._with_chunk_ids(pool[: v.rerank_depth])
                needs_embeddings = "embeddings" in RERANKERS[v.reranker.kind].needs
                fallbacks_before = getattr(reranker, "fallbacks", 0)
                timed = _timed(lambda: reranker.rerank(
                    q.question, self._candidates(head, needs_embeddings),
                    query_embedding=self.query_embeddings.get(q.qid)))
                fallback = getattr(reranker, "fallbacks", 0) != fallbacks_before
                stage_ms["rerank"] = timed.ms
                self.queries_by_stage["rerank"] += 1
                if timed.error:
                    error = timed.error
                else:
                    chunk_of = {d.doc_id: d.chunk_id for d in head}
                    reranked = [RankedDoc(c.doc_id, float(c.score), chunk_of.get(c.doc_id)) for c in timed.value]
                    final = reranked + list(pool[v.rerank_depth:])
            final = final[: v.depth] if error is None else []
            unrefused = list(final)
            abstained = False
            conf = self._confidence(v, q, final) if error is None else float("nan")
            if error is None and v.abstain.policy != "none" and refuses(v.abstain, conf):
                final, abstained = [], True
            diag_docs: dict[str, list[str]] = {}
            diagnosis_error = None
            if error is None and v.used_legs:
                for leg in diag_legs:
                    diag_docs[leg], leg_error = self._diag_docs(v, leg, diag_top_k, q)
                    diagnosis_error = diagnosis_error or leg_error
            diagnosed[q.qid] = diag_docs
            keyword_docs = diag_docs.get(next((leg for leg in diag_legs if sides[leg] == "keyword"), ""), [])
            dense_docs = diag_docs.get(next((leg for leg in diag_legs if sides[leg] == "dense"), ""), [])
            rows.append({
                "variant": v.key,
                "qid": q.qid,
                "doc_ids": [d.doc_id for d in final],
                # the chunk that ranked each document: what an answer is written from
                "chunk_ids": [d.chunk_id for d in self._with_chunk_ids(final)],
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
                "confidence": conf,
                # what a refused question would have returned: its metrics without the refusal
                "unrefused_doc_ids": [d.doc_id for d in unrefused] if abstained else None,
            })
            misses.append(self._microscope(v, q, final=final, unrefused=unrefused, pool=pool, pre_rerank=pre_rerank,
                                           abstained=abstained, errored=error is not None, fused=fused))
        frame = pd.DataFrame(rows, columns=RESULT_COLUMNS)
        resolved = {leg: resolved_leg_settings(leg, v.leg_settings(leg)) for leg in v.used_legs}
        frame["variant_config"] = identity_json(variant_identity(v, reranker, resolved))
        frame["store_table"] = self.table
        frame["questions_fingerprint"] = question_set_fingerprint(questions)
        frame["code_version"] = self.code_version
        frame["miss_class"] = [
            diagnose_miss(q.gold, final=r["doc_ids"], k=self.miss_k, legs=diagnosed[q.qid], sides=sides,
                          fused_legs=v.used_legs, pre_rerank=r["pre_rerank"], fused=ENGINES[v.engine].fuses,
                          abstained=r["abstained"], errored=r["error"] is not None)
            for q, (_, r) in zip(questions, frame.iterrows())
        ]
        frame["triage"] = [m["triage"] if m else None for m in misses]
        frame["dense_cause"] = [m["dense_cause"] if m else None for m in misses]
        frame["microscope"] = [json.dumps(m, sort_keys=True) if m else None for m in misses]
        return frame

    def _confidence(self, v: Variant, q: Question, final: Sequence[RankedDoc]) -> float:
        """The question's confidence under the variant's abstention score (its policy's, or the
        default one for a variant that never refuses: every variant gets a risk-coverage curve).
        `dense_cosine` reads the dense leg's hits the first stage queried (cached)."""
        dense_hits = None
        if v.abstain.score == "dense_cosine" and v.dense_leg is not None and final:
            dense_hits = self.leg_hits(v.dense_leg, v.chunk_top_k, q, v.leg_settings(v.dense_leg)).value
        return confidence(v.abstain.score, final, dense_hits)

    # --- the microscope -------------------------------------------------------------------

    def _microscope(self, v: Variant, q: Question, *, final: Sequence[RankedDoc], unrefused: Sequence[RankedDoc],
                    pool: Sequence[RankedDoc], pre_rerank: Sequence[str] | None, abstained: bool, errored: bool,
                    fused: bool) -> dict[str, Any] | None:
        """The microscope's record of a miss of `v` on `q` (eval_pipeline.ranking.microscope), None for a
        hit. Its legs are the variant's own (`used_legs`; an engine without legs is its own "leg": its
        first-stage list), each leg's candidates as the sweep queried them (cached: no new query). The
        cosines and the answer chunk read the store's chunks and embeddings once per sweep, only for a
        miss that needs them; a failure there is kept in the record (`evidence_error`), never raised."""
        k = self.miss_k
        gold = list(q.gold)
        if not gold or any(d.doc_id in set(gold) for d in final[:k]):
            return None
        legs: dict[str, list[RankedDoc]] = {}
        for leg in v.used_legs:
            timed = self.leg_hits(leg, v.chunk_top_k, q, v.leg_settings(leg))
            legs[leg] = chunks_to_documents(timed.value or [], 10**9)
        if not v.used_legs:
            legs[v.engine] = list(pool)
        dense_leg = next((leg for leg in v.used_legs if leg_kind(leg).side == "dense"), None)
        gold_cosine = kth_cosine = None
        answer = None
        evidence_error = self._evidence_failed  # the store's chunks could not be read once: not again per miss
        in_leg: list[float] = []
        if dense_leg is not None:  # the dense leg's own scores are cosines
            dense_docs = legs[dense_leg]
            kth_cosine = float(dense_docs[k - 1].score) if len(dense_docs) >= k else None
            in_leg = [float(d.score) for d in dense_docs if d.doc_id in set(gold)]
            gold_cosine = max(in_leg) if in_leg else None
        if evidence_error is None:
            try:
                if dense_leg is not None and not in_leg:
                    gold_cosine = self._gold_cosine(q, gold)
                if q.gist:
                    answer = answer_chunk(q.gist, {cid: text for cid, _, text, _ in self.gold_chunks(gold)})
            except Exception as exc:  # the evidence is incomplete, the miss is still recorded
                evidence_error = self._evidence_failed = error_text(exc, self.connection_string)
        record = miss_record(variant=v.key, qid=q.qid, gold=gold, k=k, final=final, legs=legs, fused=fused,
                             pre_rerank=pre_rerank, unrefused=unrefused, abstained=abstained, errored=errored,
                             gold_cosine=gold_cosine, kth_cosine=kth_cosine, dense_leg=dense_leg, answer=answer)
        if record is not None:
            record["evidence_error"] = evidence_error
        return record

    def _gold_cosine(self, q: Question, gold: Sequence[str]) -> float | None:
        """The best cosine of a gold document's chunks to the question's embedding (None without an
        embedding or a chunk)."""
        query = self.query_embeddings.get(q.qid)
        if query is None:
            return None
        vectors = [embedding for _, _, _, embedding in self.gold_chunks(gold) if embedding is not None]
        if not vectors:
            return None
        qv = np.asarray(query, dtype=np.float64)
        qn = float(np.linalg.norm(qv))
        best = None
        for vec in vectors:
            vn = float(np.linalg.norm(vec))
            if qn and vn:
                cos = float(np.dot(qv, vec) / (qn * vn))
                best = cos if best is None else max(best, cos)
        return best

    @staticmethod
    def diagnosis_legs(v: Variant) -> list[str]:
        """The legs a miss of `v` is diagnosed against: every leg it uses, plus the keyword leg
        when none of them is on the keyword side and the dense leg when none is on the dense side
        (a single-leg engine is compared with the other side); keyword-side legs first. None for
        an engine without legs (metadata)."""
        own = list(v.used_legs)
        if not own:
            return []
        sides: dict[str, str] = {leg: leg_kind(leg).side for leg in own}
        for side, default in (("keyword", "keyword"), ("dense", "dense")):
            if side not in sides.values() and default not in sides:
                sides[default] = side
        return sorted(sides, key=lambda leg: sides[leg] != "keyword")

    def _diag_docs(self, v: Variant, leg: str, top_k: int, q: Question) -> tuple[list[str], str | None]:
        """A leg's candidate documents for the diagnosis, with the variant's settings for the
        leg (shared with variants that use the leg alike), and the leg's error if it failed
        (the diagnosis is then incomplete)."""
        timed = self.leg_hits(leg, top_k, q, v.leg_settings(leg))
        error = f"{leg} leg: {timed.error}" if timed.error else None
        return [d.doc_id for d in chunks_to_documents(timed.value or [], 10**9)], error

    def run(self, variants: Sequence[Variant], questions: Sequence[Question]) -> dict[str, pd.DataFrame]:
        return {v.key: self.run_variant(v, questions) for v in variants}
