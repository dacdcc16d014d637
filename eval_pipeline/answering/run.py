"""The answers asset without Dagster: for each variant and golden prompt, the numbered context
from the variant's top-k results and an answer written from it, cached as it arrives.

Each prompt is first retrieved by the variant exactly as a retrieval question is ranked (the
golden set is ranked as a question set, with the same engines and caches); the context is the
top `k` documents, each through the chunk that ranked it (the results' `chunk_ids`), numbered
from 1. Then the generator answers:

- `extractive` (`ExtractiveGenerator`): every missing answer of the run in one batch, so each
  distinct sentence is embedded once; its generation time is the batch's time shared evenly
  (documented per answer as `generation_ms`).
- `llm` (`LLMGenerator`): one call per missing answer, through the client's concurrency limit;
  each answer is cached the moment it arrives, so a killed run resumes where it stopped; a
  failed call is that answer's `error` (counted, never cached, never dropped).

The cache key is the prompt, the exact context and the generator's identity (model, endpoint,
prompt version, settings), so two variants that retrieve the same context share one answer.
The cache record keeps the text and the context it was written from (the graders read both);
the answers frame holds the text only with `keep_text` (see `ANSWER_COLUMNS`).
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

import pandas as pd

from eval_pipeline.answering.cache import AnswerCache, answer_key
from eval_pipeline.answering.context import ContextEntry, cited_documents, numbered_context
from eval_pipeline.answering.context import context_from_record as context_from_record  # bench scripts import it here
from eval_pipeline.answering.extractive import ANSWERING_CODE, EXTRACTIVE_VERSION, ExtractiveGenerator
from eval_pipeline.answering.llm import SYSTEM_PROMPT, LLMGenerator
from eval_pipeline.answering.prompts import CheckedGoldenSet
from eval_pipeline.answering.repair import repair_answers
from eval_pipeline.answering.served import ServedBy, safe_identity
from eval_pipeline.common.checks import missing
from eval_pipeline.ranking import steps
from eval_pipeline.store.ingest import fetch_chunk_texts

ANSWER_COLUMNS = [
    "variant", "prompt_id", "form", "tags", "gold", "context_doc_ids", "context_chunk_ids", "retrieved_gold",
    "answer_key", "answer", "answer_chars", "cited_docs", "unknown_citations", "provider", "model_sent",
    "model_reported", "prompt_tokens", "completion_tokens", "retrieval_ms", "generation_ms", "cached", "error",
    "context_k", "generator_settings",  # the treatment: recorded with the run, named when it changes
    # what the answers were produced from, checked by the steps after (a step can read another run's output)
    "corpus_signature", "store_table", "variant_config", "set_fingerprint",
    "engine_identity",  # the code, packages and database that ranked the golden prompts (the verdict checks it)
]


def context_chunks(frames: Mapping[str, pd.DataFrame], k: int) -> set[str]:
    """The chunk ids the contexts of every variant need (the top `k` of each result)."""
    return {c for frame in frames.values() for ids, error in zip(frame["chunk_ids"], frame["error"]) if missing(error)
            for c in list(ids)[:k]}


def _contexts(frame: pd.DataFrame, texts: Mapping[str, str], k: int) -> dict[str, tuple[ContextEntry, ...]]:
    out: dict[str, tuple[ContextEntry, ...]] = {}
    for row in frame.itertuples(index=False):
        if not missing(row.error):  # an errored question has no context; it is answered as failed
            out[row.qid] = ()
            continue
        chunks = [(c, d, texts[c]) for c, d in zip(list(row.chunk_ids)[:k], list(row.doc_ids)[:k])]
        out[row.qid] = numbered_context(chunks, k)
    return out


def extractive_served(generator: ExtractiveGenerator) -> ServedBy:
    """The extractive generator's identity as an answer records it: no endpoint, and a
    'reported model' naming the method's version and the embedder's weights (a changed
    embedder picks other sentences: another generator)."""
    digest = hashlib.sha256(f"{generator.embedder.identity}|{ANSWERING_CODE()}".encode()).hexdigest()[:8]
    return ServedBy("local", "extractive", f"extractive-v{EXTRACTIVE_VERSION}+{digest}+s{generator.sentences}")


def _record_context(context: Sequence[ContextEntry]) -> list[list[Any]]:
    return [[e.number, e.chunk_id, e.doc_id, e.text] for e in context]


def _extractive_records(generator: ExtractiveGenerator, jobs: Mapping[str, tuple[str, tuple]],
                        cache: AnswerCache) -> dict[str, dict[str, Any]]:
    if not jobs:
        return {}
    keys = list(jobs)
    started = time.perf_counter()
    answers = generator.answer_all([jobs[k][0] for k in keys], [jobs[k][1] for k in keys])
    ms = (time.perf_counter() - started) * 1000.0 / len(keys)
    served = extractive_served(generator)
    out = {}
    for key, answer in zip(keys, answers):
        record = {"text": answer.text, "context": _record_context(jobs[key][1]), "system_prompt": None,
                  "provider": served.provider,
                  "model_sent": served.model_sent, "model_reported": served.model_reported, "prompt_tokens": 0,
                  "completion_tokens": 0, "generation_ms": ms}
        cache.put(key, record)
        out[key] = {**record, "cached": False}
    return out


def _llm_records(generator, jobs: Mapping[str, tuple[str, tuple]], cache: AnswerCache) -> dict[str, Any]:
    def produce(key: str) -> dict[str, Any]:
        prompt, context = jobs[key]
        answer = generator.answer(prompt, context)
        record = {"text": answer.text, "context": _record_context(context), "system_prompt": SYSTEM_PROMPT,
                  "provider": answer.served.provider,
                  "model_sent": answer.served.model_sent, "model_reported": answer.served.model_reported,
                  "prompt_tokens": answer.prompt_tokens, "completion_tokens": answer.completion_tokens,
                  "generation_ms": answer.seconds * 1000.0}
        cache.put(key, record)  # the moment it arrives: a killed run keeps it
        return {**record, "cached": False}

    keys = list(jobs)
    results = generator.llm.map(produce, keys) if hasattr(generator.llm, "map") else [_call(produce, k) for k in keys]
    return dict(zip(keys, results))


def _call(fn, x):
    try:
        return fn(x)
    except Exception as exc:  # noqa: BLE001 - kept in place, like LLMClient.map
        return exc


def answer_variants(
    frames: Mapping[str, pd.DataFrame],
    golden: CheckedGoldenSet,
    *,
    texts: Mapping[str, str],
    generator,
    cache: AnswerCache,
    k: int,
    keep_text: bool = False,
    log: Callable[[str], None] = lambda _: None,
) -> dict[str, pd.DataFrame]:
    """One frame per variant (columns `ANSWER_COLUMNS`, one row per prompt in set order) from
    each variant's ranked results of the golden prompts (`frames`), the chunk texts, and the
    generator. Answers come from the cache when the prompt, context and generator are unchanged."""
    identity = generator.identity()
    settings = json.dumps(safe_identity(identity), sort_keys=True, default=str)
    contexts = {v: _contexts(f, texts, k) for v, f in frames.items()}
    jobs: dict[str, tuple[str, tuple]] = {}
    keyed: dict[tuple[str, str], str] = {}
    ranked = {v: {row.qid: row for row in f.itertuples(index=False)} for v, f in frames.items()}
    for variant in frames:
        for p in golden.prompts:
            if missing(ranked[variant][p.id].error):
                cache_key = answer_key(p.prompt, contexts[variant][p.id], identity)
                keyed[(variant, p.id)] = cache_key
                if cache_key not in jobs and cache.get(cache_key) is None:
                    jobs[cache_key] = (p.prompt, contexts[variant][p.id])
    log(f"{len(keyed)} answer(s) for {len(frames)} variant(s), {len(set(keyed.values()))} distinct, "
        f"{len(jobs)} to generate")
    if isinstance(generator, ExtractiveGenerator):
        fresh = _extractive_records(generator, jobs, cache)
    else:
        fresh = _llm_records(generator, jobs, cache)
    out, billed = {}, set()
    fingerprint = golden.golden.fingerprint if golden.golden is not None else None  # no prompts without a set
    for variant in frames:
        rows = []
        for p in golden.prompts:
            r = ranked[variant][p.id]
            key = keyed.get((variant, p.id))
            record = fresh.get(key) if key in fresh else (cache.get(key) if key else None)
            if record is not None and not isinstance(record, BaseException) and (key not in fresh or key in billed):
                record = {**record, "cached": True}  # a shared answer is spent once, by its first user
            billed.add(key)
            rows.append({**_row(variant, p, r, contexts[variant][p.id], key, record, keep_text), "context_k": k,
                         "generator_settings": settings, "set_fingerprint": fingerprint})
        out[variant] = pd.DataFrame(rows, columns=ANSWER_COLUMNS)
    return out


def _row(variant: str, prompt, ranked, context, key, record, keep_text: bool) -> dict[str, Any]:
    gold = list(prompt.gold)
    docs = [e.doc_id for e in context]
    row: dict[str, Any] = {
        "variant": variant, "prompt_id": prompt.id, "form": prompt.form, "tags": list(prompt.tags), "gold": gold,
        "context_doc_ids": docs, "context_chunk_ids": [e.chunk_id for e in context],
        "retrieved_gold": bool(set(gold) & set(docs)) if gold else None, "answer_key": key,
        "retrieval_ms": None if missing(ranked.latency_ms) else float(ranked.latency_ms),
    }
    if not missing(ranked.error):
        return {**row, **_failed(f"retrieval failed: {ranked.error}")}
    if record is None:
        return {**row, **_failed("the answer is in neither the cache nor this run (the cache was changed meanwhile)")}
    if isinstance(record, BaseException):
        return {**row, **_failed(f"{type(record).__name__}: {record}")}
    cited, unknown = cited_documents(record["text"], context)
    return {**row, "answer": record["text"] if keep_text else None, "answer_chars": len(record["text"]),
            "cited_docs": list(cited), "unknown_citations": list(unknown), "provider": record["provider"],
            "model_sent": record["model_sent"], "model_reported": record["model_reported"],
            "prompt_tokens": int(record["prompt_tokens"]), "completion_tokens": int(record["completion_tokens"]),
            "generation_ms": float(record["generation_ms"]), "cached": bool(record["cached"]), "error": None}


def _failed(error: str) -> dict[str, Any]:
    return {"answer": None, "answer_chars": 0, "cited_docs": [], "unknown_citations": [], "provider": None,
            "model_sent": None, "model_reported": None, "prompt_tokens": 0, "completion_tokens": 0,
            "generation_ms": None, "cached": False, "error": error}


def make_generator(kind: str, *, embedder, llm: Callable[[], Any], sentences: int, max_tokens: int | None):
    """The generator a run names: `extractive` (no model, the embedder picks sentences) or
    `llm` (`llm()` gives the client; called only for this kind, so nothing else needs a model)."""
    if kind == "extractive":
        return ExtractiveGenerator(embedder=embedder, sentences=sentences)
    if kind == "llm":
        return LLMGenerator(llm=llm(), max_tokens=max_tokens)
    raise ValueError(f"answers.generator must be 'extractive' or 'llm', got {kind!r}")


def produce_answers(variants: Sequence[Any], golden: CheckedGoldenSet, *, snapshot, store, state,
                    connection_string: str, embedder, build_reranker: Callable[..., Any], generator, k: int,
                    keep_text: bool, code_version: str, log: Callable[[str], None],
                    tuning_from=None, repair_check: Callable[[Any, str], Any] | None = None,
                    ) -> dict[str, pd.DataFrame]:
    """The answers asset: each variant retrieves the golden prompts (ranked as a question set,
    with the ranking's caches), then the generator answers from each top-`k` context. No
    golden set: an empty frame per variant (the report says why). A variant that tunes its
    fusion or chooses its refusal threshold (`abstain: {policy: auto}`) does so on `tuning_from`'s
    tuning part (the question set's), as when it was ranked.
    With `repair_check` (answers.repair: the static grader's `static_failures`), each answer that
    fails it is asked for once more (eval_pipeline.answering.repair)."""
    if golden.golden is None:
        return {v.key: pd.DataFrame(columns=ANSWER_COLUMNS) for v in variants}
    prompts = golden.as_question_set()
    # a variant that chooses its fusion (tune:) or its refusal threshold (abstain: auto) chooses it on the
    # question set's tuning part, as when it was ranked: without that part an auto threshold has nothing to go on
    if tuning_from is not None and tuning_from.tuning and any(getattr(v, "tune", None) or steps.chooses_threshold(v)
                                                              for v in variants):
        check_prompts_held_out(prompts, tuning_from)
        prompts = replace(prompts, tuning=tuning_from.tuning, split=tuning_from.split)
    def log_ranking(line: str) -> None:  # said as what it is: in the answers step, "reused unchanged" read as answers
        log(f"ranking the golden prompts: {line}")

    frames = steps.rank_in_one_step(variants, snapshot=snapshot, store=store, question_set=prompts,
                                    state=state, connection_string=connection_string, embedder=embedder,
                                    build_reranker=build_reranker, miss_k=10, reuse=True,
                                    code_version=code_version, log=log_ranking)
    texts = fetch_chunk_texts(connection_string, store.table, context_chunks(frames, k))
    cache = AnswerCache(state.answers)
    answers = answer_variants(frames, golden, texts=texts, generator=generator, cache=cache, k=k,
                              keep_text=keep_text, log=log)
    if repair_check is not None:
        answers = repair_answers(answers, golden, generator=generator, cache=cache, check=repair_check, log=log)
    return {v: frame.assign(corpus_signature=store.corpus_signature, store_table=store.table,
                            variant_config=_one(frames[v]["variant_config"]),
                            engine_identity=_one(frames[v]["engine_identity"], "engine identities"))
            for v, frame in answers.items()}


def check_prompts_held_out(prompts, question_set) -> None:
    """No golden prompt is a question the fusion was tuned on (by id or by its text): a tuned
    variant's answers to it would be scored on what it was tuned on. A ValueError names them."""
    def text(s: str) -> str:
        return " ".join(s.lower().split())

    tuning_ids, tuning_texts = {q.qid for q in question_set.tuning}, {text(q.question) for q in question_set.tuning}
    leaked = [p.qid for p in prompts.questions if p.qid in tuning_ids or text(p.question) in tuning_texts]
    if leaked:
        shown = ", ".join(leaked[:5]) + (", ..." if len(leaked) > 5 else "")
        raise ValueError(f"{len(leaked)} golden prompt(s) of {prompts.path} are fusion-tuning questions ({shown}): "
                         "a tuned variant would be scored on what it was tuned on. Materialize golden_prompts again "
                         "(built from the split question set it holds only the held-out part), remove them from "
                         "the golden file, or use another tuning seed")


def produce_pair_answers(pairs: Sequence[tuple[str, str, Any]], golden: CheckedGoldenSet, *, stores: Mapping[str, Any],
                         embedder_for: Callable[[str], Any], builder_for: Callable[[str], Callable[..., Any]],
                         **common: Any) -> dict[str, pd.DataFrame]:
    """`produce_answers` for (partition key, index key, variant) pairs, index by index (its
    table `stores[index]`, its embedder `embedder_for(index)`, its reranker builder
    `builder_for(index)`), each frame keyed and labelled by its partition key. Pairs that
    retrieve the same context share one cached answer."""
    out: dict[str, pd.DataFrame] = {}
    for index in dict.fromkeys(i for _, i, _ in pairs):
        group = [(key, v) for key, i, v in pairs if i == index]
        frames = produce_answers([v for _, v in group], golden, store=stores[index], embedder=embedder_for(index),
                                 build_reranker=builder_for(index), **common)
        for key, v in group:
            out[key] = frames[v.key].assign(variant=key)
    return out


def _one(column: pd.Series, what: str = "variant configurations") -> str:
    values = sorted(set(column.dropna()))
    if len(values) != 1:
        raise ValueError(f"the golden prompts' results have {len(values)} {what} (expected one)")
    return values[0]


def answers_metadata(frame: pd.DataFrame) -> dict[str, Any]:
    """One partition's numbers for the asset page (plotted over time)."""
    ok = frame[frame["error"].isna()]
    return {"answers": len(frame), "errored": int(frame["error"].notna().sum()), "cached": int(frame["cached"].sum()),
            "with_citation": int(sum(len(c) > 0 for c in ok["cited_docs"])),
            "unknown_citations": int(sum(len(c) for c in ok["unknown_citations"])),
            "gold_in_context": int((frame["retrieved_gold"] == True).sum()),  # noqa: E712
            "prompt_tokens": int(frame["prompt_tokens"].sum()),
            "completion_tokens": int(frame["completion_tokens"].sum())}
