"""Per-question score frames for the verdict's tests that judge runs without ranking anything."""

from __future__ import annotations

import json

import pandas as pd

from eval_pipeline.metrics.retrieval import MEASURES, score_queries

# (hits, second, n, id of the scorer, ids of the registered measures) -> (the scorer, the measures, the
# frame `score_queries` gave, before the per-call columns); the entry holds the objects its key
# names, so no id in a key can be taken by another object while the entry lives
_SCORED: dict[tuple, tuple[object, tuple, pd.DataFrame]] = {}


def scored_frame(variant: str, hits: int, n: int = 100, *, second: int = 0) -> pd.DataFrame:
    """`variant`'s per-question scores on `n` questions of one gold document each, the first
    `hits` of them found at rank 1, the next `second` at rank 2, and the others missed (never a
    candidate); 1 ms latency, no reranker fallback.

    Scored once a process for each (hits, n) and each set of measures: the same rankings scored by
    the same measures give the same frame, and scoring was most of what this helper cost (called
    over a thousand times in tests/unit/verdict, on a few distinct inputs). The key names the
    `score_queries` this module calls and every measure registered now, by identity, so a test
    that registers, replaces or removes a measure, or patches the scorer here, scores afresh.
    Each call returns its own deep copy (a fresh frame, fresh ``doc_ids`` lists): a caller that
    changes its frame changes nothing another call gets."""
    qrels = {f"q{i:03d}": {f"d{i}": 1} for i in range(n)}
    rankings = {q: ([f"d{i}"] if i < hits else ["x", f"d{i}"] if i < hits + second else ["x"])
                for i, q in enumerate(qrels)}
    scorer, measures = score_queries, tuple(MEASURES)  # read now: the registry and the name may be patched
    key = (hits, second, n, id(scorer), tuple(map(id, measures)))
    if key not in _SCORED:
        _SCORED[key] = (scorer, measures, scorer(rankings, qrels, errored=[]))
    df = _SCORED[key][2].copy(deep=True)
    df.insert(0, "variant", variant)
    df["doc_ids"] = [list(rankings[q]) for q in df["qid"]]
    df["latency_ms"] = 1.0
    df["miss_class"] = [None if h else "never_candidate" for h in df["hit@10"]]
    df["rerank_fallback"] = False
    return df


def bench_provenance(bench: str, configs: dict[str, str]) -> dict:
    """A run's provenance on benchmark ``bench`` (its fingerprints all named after it) with each
    variant's configuration a pg-dense engine and its ``knob``: what the verdict reviews' ``judge``
    fixtures record, so two runs with the same ``bench`` measure the same benchmark."""
    from eval_pipeline.history.runs import SCORING_PROTOCOL

    return {"corpus_signature": "corpus-1", "question_set_fingerprint": f"qs-{bench}",
            "labels_fingerprint": f"labels-{bench}", "benchmark_fingerprint": f"bench-{bench}",
            "embedder": "minilm", "embedder_revision": "rev-1", "chunking": {"split_length": 150},
            "scoring_protocol": SCORING_PROTOCOL, "code_version": "abc",
            "variants": {v: {"engine": "pg-dense", "knob": k} for v, k in configs.items()}}


def answer_frame(variant: str, pass_rate: float, *, engine: str = "bm25") -> pd.DataFrame:
    """One variant's answer_metrics row for the deterministic grader on a 50-prompt golden set,
    passing ``pass_rate`` of it, its configuration an ``engine``: what the verdict reviews'
    ``answers`` fixtures judge and record."""
    row = {"variant": variant, "grader": "deterministic", "set_id": "team.tiny", "set_name": "team.tiny",
           "set_fingerprint": "fp-1", "limited": False, "generator": "extractive:v1", "yardstick": "deterministic:v1",
           "n_prompts": 50, "n_errored": 0, "n_scored": 50, "pass_rate": pass_rate, "pass_rate_low": 0.0,
           "pass_rate_high": 1.0, "mean_score": pass_rate, "mean_low": 0.0, "mean_high": 1.0, "n_grader_failed": 0,
           "corpus_signature": "corpus-1", "store_table": "t", "variant_config": json.dumps({"engine": engine}),
           "treatment_json": json.dumps({"context_k": 5}), "metrics_json": json.dumps({})}
    return pd.DataFrame([row])


def answer_frame_with(variant: str, pass_rate: float, **columns) -> pd.DataFrame:
    """`answer_frame` with the variant's own name as its configuration's engine and any of its
    columns replaced (set_fingerprint, generator, grader, treatment_json...): what the tenth to
    twelfth reviews judge."""
    frame = answer_frame(variant, pass_rate, engine=variant)
    for column, value in columns.items():
        frame[column] = [value]
    return frame
