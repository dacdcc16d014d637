"""What each column of the DataFrames the UI describes holds (ranked_results, variant_metrics,
answer_metrics partitions): its type as a reader says it and one line on what it means. The
one place these are written; `assets.metadata.to_metadata` builds each partition's
`dagster/column_schema` from it, so the UI's column list says `list[string]` or `json` with a
description instead of pandas' `object`.

A column with no entry keeps its pandas dtype and no description
(tests/orchestration/test_column_schema.py asks for an entry for every column the library's
frames have)."""

from __future__ import annotations

import re
from typing import NamedTuple


class Column(NamedTuple):
    type: str
    description: str


_MISSES = "why an answerable question missed"
_STAGE = "ms the {stage} stage took on the question (empty when the variant has no such stage)"

COLUMNS: dict[str, Column] = {
    # who and which question
    "variant": Column("string", "the variant (partition key's variant)"),
    "index": Column("string", "the index (embedder × chunking) the variant ranked"),
    "qid": Column("string", "the question's id in the question set"),
    "question": Column("string", "the question's text"),
    "gold": Column("list[string]", "the question's relevant document ids (empty for an abstention question)"),
    "form": Column("string", "MATCH (worded as its document) or GAP (other words); empty when unknown"),
    "hard_class": Column("string", "a hard slice the question belongs to (abstention, body-only, deep-chunk, "
                                   "multi-gold), or empty"),
    "answerable": Column("bool", "the question has a relevant document (false: an abstention question)"),
    # what the variant returned
    "doc_ids": Column("list[string]", "the documents returned, best first"),
    "chunk_ids": Column("list[string]", "the chunk that ranked each returned document, in the same order"),
    "scores": Column("list[float]", "each returned document's score, in the same order"),
    "returned": Column("int", "how many documents were returned (0: refused or nothing found)"),
    "first_relevant_rank": Column("int", "rank of the first relevant document returned (empty: none, or an "
                                         "abstention question)"),
    "latency_ms": Column("float", "ms to rank the question, every stage"),
    "error": Column("string", "the error a stage raised on the question, or empty"),
    "errored": Column("bool", "a stage raised on the question (scored as an empty list: 0 on every metric)"),
    "abstained": Column("bool", "the variant refused to answer (its abstention threshold)"),
    "confidence": Column("float", "the variant's confidence in its list (the abstention score)"),
    "unrefused_doc_ids": Column("list[string]", "what a refused question would have returned (empty if not refused)"),
    "pre_rerank": Column("list[string]", "the documents before reranking, best first (empty without a reranker)"),
    "keyword_docs": Column("list[string]", "the keyword leg's own candidates, for the diagnosis of a miss"),
    "dense_docs": Column("list[string]", "the dense leg's own candidates, for the diagnosis of a miss"),
    "rerank_fallback": Column("bool", "the reranker failed and the first-stage order was kept"),
    "diagnosis_error": Column("string", "why a leg's candidates could not be read for the diagnosis, or empty"),
    # why a question missed (eval_pipeline.ranking.diagnosis, eval_pipeline.ranking.microscope)
    "miss_class": Column("string", f"{_MISSES}: never_candidate, keyword_only, dense_only, both_legs, "
                                   "lost_in_fusion, demoted_by_reranker, abstained, errored; empty for a hit"),
    "triage": Column("string", f"{_MISSES}, the latest stage that lost the gold: errored, dropped_by_threshold, "
                               "demoted_by_reranker, lost_in_fusion, outranked_in_pool, never_candidate"),
    "dense_cause": Column("string", "for a dense leg's miss: crowding (the gold nearly made the list) or embedding "
                                    "(the gold is far from the query)"),
    "microscope": Column("json", "the miss's evidence: each leg's gold rank and top candidates, cosines, gist"),
    # what produced the results
    "variant_config": Column("json", "the variant's settings and its legs' and reranker's identities"),
    "store_table": Column("string", "the pgvector table ranked"),
    "questions_fingerprint": Column("string", "fingerprint of the question set ranked"),
    "tuning_fingerprint": Column("string", "fingerprint of the tuning part a tuned variant chose its settings on"),
    "code_version": Column("string", "the checkout's commit (-dirty: with uncommitted changes)"),
    "engine_identity": Column("string", "digest of the ranking engine's code and environment"),
    "corpus_signature": Column("string", "signature of the corpus (ids and content hashes)"),
    # answer_metrics: one row per grader
    "grader": Column("string", "the grader (deterministic, static, judge, ...)"),
    "set_id": Column("string", "the golden prompt set's id"),
    "set_name": Column("string", "the golden prompt set's name"),
    "set_fingerprint": Column("string", "fingerprint of the golden prompts"),
    "limited": Column("bool", "a limited run (a subset of the prompts): never a yardstick"),
    "generator": Column("string", "the answers' generator: provider:model as sent -> as reported"),
    "yardstick": Column("string", "the grader's identity (version and code digest): rows compare only when equal"),
    "n_prompts": Column("int", "prompts answered"),
    "n_errored": Column("int", "prompts whose answer errored"),
    "n_scored": Column("int", "answers the grader scored (not errored, grader applicable)"),
    "pass_rate": Column("float", "share of scored answers that passed"),
    "pass_rate_low": Column("float", "pass rate's 95% interval, low end"),
    "pass_rate_high": Column("float", "pass rate's 95% interval, high end"),
    "mean_score": Column("float", "the grader's mean score over scored answers"),
    "mean_low": Column("float", "mean score's 95% interval, low end"),
    "mean_high": Column("float", "mean score's 95% interval, high end"),
    "n_grader_failed": Column("int", "answers the grader could not grade (failed or unparseable)"),
    "grounded_rate": Column("float", "share of answers whose claims the context supports"),
    "corpus_rate": Column("float", "share of answers whose claims the corpus supports"),
    "citations_per_answer": Column("float", "citations per answer"),
    "self_judged": Column("bool", "the judge model is the generator's (allowed explicitly; labelled)"),
    "treatment_json": Column("json", "what the answers were produced with (generator, context_k, prompt)"),
    "metrics_json": Column("json", "every measured number: per assertion type, form, hits and misses, cost"),
    "repair_json": Column("json", "pass rates before and after the repair pass, when `repair` is on"),
    "agreement_json": Column("json", "the grader's agreement with human labels and the PPI interval, when calibrated"),
    "gradings_json": Column("json", "each answer's grading, as answers.jsonl holds it"),
    "hallucinations_json": Column("json", "the grounding grader's unsupported claims, per answer"),
}

# Families of columns named by a pattern: the metrics at each cutoff, their values without the
# refusal, and each stage's latency.
_PATTERNS: list[tuple[re.Pattern[str], Column]] = [
    (re.compile(r"hit@(\d+)"), Column("float", "1 when a relevant document is in the top {0}, else 0 "
                                               "(empty for an abstention question)")),
    (re.compile(r"recall@(\d+)"), Column("float", "share of the relevant documents in the top {0}")),
    (re.compile(r"precision@(\d+)"), Column("float", "share of the top {0} that is relevant")),
    (re.compile(r"ndcg@(\d+)"), Column("float", "nDCG of the top {0} (graded relevance, log2 discount)")),
    (re.compile(r"mrr"), Column("float", "1 / rank of the first relevant document (0: no relevant document returned)")),
    (re.compile(r"map"), Column("float", "average precision over the relevant documents")),
    (re.compile(r"(.+) without refusal"), Column("float", "{0} of the list the variant would have returned had it "
                                                          "not refused")),
    (re.compile(r"ms_(\w+)"), Column("float", _STAGE.replace("{stage}", "{0}"))),
]


def describe(name: str) -> Column | None:
    """The column `name`'s type and description, or None when nothing here says."""
    if name in COLUMNS:
        return COLUMNS[name]
    for pattern, column in _PATTERNS:
        found = pattern.fullmatch(name)
        if found:
            return Column(column.type, column.description.format(*found.groups()))
    return None
