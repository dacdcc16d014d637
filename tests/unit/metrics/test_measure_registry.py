"""The measure registry (eval_pipeline.metrics.retrieval.MEASURES), ir_measures-style: each
measure is a name (``ndcg@10``), its pure function, its cutoff and its rules, and every list of
metric names in the library is derived from it. Issue #24: one home per shared idea."""

from __future__ import annotations

import math
import random

import pytest

from eval_pipeline.metrics import retrieval
from eval_pipeline.metrics.retrieval import (
    COMPARED,
    DEFAULT_KS,
    GATED,
    HEADLINE,
    HISTORY,
    HOLES,
    INTERVAL,
    MEASURES,
    PARTITION,
    PRIMARY_METRIC,
    SLICED,
    Measure,
    average_precision,
    hit_at_k,
    is_metric,
    measure,
    metric_names,
    ndcg_at_k,
    recall_at_k,
    reciprocal_rank,
    score_queries,
    scored_measures,
)


def test_every_measure_has_a_name_a_function_a_cutoff_and_rules():
    names = [m.name for m in MEASURES]
    assert len(names) == len(set(names))
    for m in MEASURES:
        assert isinstance(m, Measure) and callable(m.function) and m.rules
        assert m.k is None or (isinstance(m.k, int) and m.k >= 1)
        assert m.name == (m.family if m.k is None else f"{m.family}@{m.k}")


def test_the_registry_is_the_columns_score_queries_computes():
    frame = score_queries({"q": ["a"]}, {"q": {"a": 1}})
    metric_columns = [c for c in frame.columns if is_metric(c)]
    assert metric_columns == [m.name for m in scored_measures(DEFAULT_KS)]
    # every question measure is a column; the run measures (refusal rates...) are the summary's
    assert sorted(metric_columns) == sorted(m.name for m in MEASURES if m.scope == "question")
    # other cutoffs: the per-k families at those ks, the fixed measures as registered
    assert [m.name for m in scored_measures((1, 3))] == [
        "hit@1", "hit@3", "recall@1", "recall@3", "mrr", "ndcg@10", "map"]


def test_a_measure_is_its_function_at_its_cutoff():
    rng = random.Random(7)
    docs = [f"d{i}" for i in range(12)]
    for _ in range(200):
        qrels = {d: rng.choice([0, 1, 2, 3]) for d in rng.sample(docs, 5)}
        qrels[rng.choice(docs)] = 2
        ranking = [rng.choice(docs) for _ in range(rng.randint(0, 10))]
        assert measure("ndcg@10")(ranking, qrels) == ndcg_at_k(ranking, qrels, 10)
        assert measure("ndcg@3")(ranking, qrels) == ndcg_at_k(ranking, qrels, 3)
        assert measure("hit@5")(ranking, qrels) == hit_at_k(ranking, qrels, 5)
        assert measure("recall@20")(ranking, qrels) == recall_at_k(ranking, qrels, 20)
        assert measure("mrr")(ranking, qrels) == reciprocal_rank(ranking, qrels)
        assert measure("map")(ranking, qrels) == average_precision(ranking, qrels)


def test_measure_looks_up_a_registered_name_or_a_family_at_another_cutoff():
    assert measure("ndcg@10") is next(m for m in MEASURES if m.name == "ndcg@10")
    other = measure("hit@7")
    assert (other.name, other.family, other.k, other.function) == ("hit@7", "hit", 7, hit_at_k)
    for bad in ("mrr@5", "ndcg@0", "ndcg@01", "ndcg", "precison@5", "", "hit@x"):
        with pytest.raises(ValueError, match="not a registered measure"):
            measure(bad)


def test_is_metric_says_which_columns_are_measures():
    assert all(is_metric(m.name) for m in MEASURES)
    assert is_metric("hit@7") and is_metric("ndcg@3")
    for column in ("qid", "answerable", "returned", "first_relevant_rank", "latency_ms", "variant", "hit"):
        assert not is_metric(column)


def test_the_primary_metric_is_the_one_measure_marked_primary():
    assert PRIMARY_METRIC == "ndcg@10"


def test_the_named_lists_are_derived_from_the_registry():
    assert metric_names(HEADLINE) == ("hit@1", "hit@3", "hit@5", "hit@10", "hit@20", "mrr", "recall@10", "ndcg@10")
    assert metric_names(PARTITION) == ("hit@1", "hit@5", "hit@10", "mrr", "recall@10", "ndcg@10")
    assert metric_names(INTERVAL) == ("hit@1", "hit@5", "mrr", "ndcg@10")
    assert metric_names(HOLES) == ("hit@1", "hit@5", "hit@10", "ndcg@10")
    assert metric_names(HISTORY) == ("hit@10", "mrr", "ndcg@10")
    assert metric_names(SLICED) == ("hit@5", "mrr")
    assert metric_names(COMPARED) == ("ndcg@10", "mrr", "hit@1", "hit@5")  # rank-sensitive first
    assert metric_names(GATED) == ("hit@1", "hit@5", "mrr", "ndcg@10")
    with pytest.raises(ValueError, match="no list"):
        metric_names("headlines")


def test_holes_are_cut_at_the_judged_depth():
    """The judged-holes section may only use measures cut at the judged pool's depth."""
    from eval_pipeline.reporting.validity import JUDGED_K

    for name in metric_names(HOLES):
        assert measure(name).k is not None and measure(name).k <= JUDGED_K


def test_the_library_lists_are_the_registry_lists():
    from eval_pipeline.metrics.statistics import DEFAULT_COMPARE_METRICS
    from eval_pipeline.ranking import fusion_tuning
    from eval_pipeline.reporting.indexes import QUALITY_METRIC
    from eval_pipeline.reporting.validity import HOLE_METRICS, P_BEST_METRIC
    from eval_pipeline.scoring.partitions import PARTITION_METRICS
    from eval_pipeline.scoring.variant import HEADLINE_METRICS

    assert list(HEADLINE_METRICS) == list(metric_names(HEADLINE))
    assert tuple(PARTITION_METRICS) == metric_names(PARTITION)
    assert tuple(HOLE_METRICS) == metric_names(HOLES)
    assert tuple(DEFAULT_COMPARE_METRICS) == metric_names(COMPARED)
    assert QUALITY_METRIC == P_BEST_METRIC == PRIMARY_METRIC
    assert fusion_tuning.ndcg_at_k is retrieval.ndcg_at_k  # no local copy of nDCG
    assert not hasattr(fusion_tuning, "_ndcg_at_k")


def test_the_gate_s_the_verdict_s_and_the_history_s_lists_are_the_registry_s():
    """The gate's, the verdict's and the history's lists are derived from the registry."""
    from eval_pipeline.gates.retrieval import DEFAULT_TOLERANCES, GATEABLE_METRICS
    from eval_pipeline.history.runs import QUESTION_METRICS
    from eval_pipeline.verdict.retrieval import COMPARE_METRICS, INTERVAL_METRICS

    assert set(GATEABLE_METRICS) == {m.name for m in MEASURES}
    assert set(DEFAULT_TOLERANCES) == set(metric_names(GATED))
    assert tuple(QUESTION_METRICS) == metric_names(HISTORY)
    assert tuple(INTERVAL_METRICS) == metric_names(INTERVAL)
    assert tuple(COMPARE_METRICS) == metric_names(COMPARED)


def test_score_queries_fills_every_scored_measure():
    frame = score_queries({"q": ["x", "a"]}, {"q": {"a": 1}}, ks=(1, 2))
    row = frame.iloc[0]
    for m in scored_measures((1, 2)):
        assert row[m.name] == pytest.approx(m(["x", "a"], {"a": 1}))
    assert math.isclose(row["ndcg@10"], 1 / math.log2(3))
