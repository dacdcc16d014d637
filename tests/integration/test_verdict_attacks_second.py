"""The second attack review's holes, closed: unit-level against the real Postgres. Each test is
a way a regression passed (or a regressed run became a yardstick) before, and must not now."""
from __future__ import annotations

import uuid

import psycopg
import pytest

from eval_pipeline.history.runs import (
    SCORING_PROTOCOL,
    accept_reference,
    table_names,
)
from eval_pipeline.metrics.retrieval import score_queries
from eval_pipeline.verdict.retrieval import judge_run

pytestmark = pytest.mark.integration
N = 100
TOL = {"hit@1": 0.05, "mrr": 0.05}
QUALITY = {"good": 100, "other": 100, "fresh": 100, "minus3": 97, "minus6": 94, "bad": 50}


def frame(variant, hits, *, errored=(), fallback=()):
    qrels = {f"q{i:03d}": {f"d{i}": 1} for i in range(N)}
    rankings = {q: ([f"d{i}"] if i < hits else ["x"]) for i, q in enumerate(qrels)}
    df = score_queries(rankings, qrels, errored=list(errored))
    df.insert(0, "variant", variant)
    df["doc_ids"] = [list(rankings[q]) for q in df["qid"]]
    df["latency_ms"] = 1.0
    df["miss_class"] = [None if h else "never_candidate" for h in df["hit@1"]]
    df["rerank_fallback"] = [q in set(fallback) for q in df["qid"]]
    return df


def provenance(bench, configs):
    return {
        "corpus_signature": "corpus-1", "question_set_fingerprint": f"qs-{bench}",
        "labels_fingerprint": f"labels-{bench}", "benchmark_fingerprint": f"bench-{bench}",
        "embedder": "minilm", "embedder_revision": "rev-1", "chunking": {"split_length": 150},
        "scoring_protocol": SCORING_PROTOCOL, "code_version": "abc",
        "variants": {v: {"engine": "pg-dense", "knob": k} for v, k in configs.items()},
    }


def rank_reference(variant, reference):
    return frame(variant, QUALITY[reference["variant"]["knob"]])


def states(verdict):
    return {v: (g.state, g.passed) for v, g in verdict.gates.items()}


@pytest.fixture
def judge(pg_uri):
    prefix = f"x_{uuid.uuid4().hex[:12]}"

    def run(run_id, bench, configs, *, tolerances=TOL, strict=False, prov=None, frames=None, sweep=None,
            ranker=rank_reference, record=True, limited=False):
        per_variant = frames or {v: frame(v, QUALITY[k]) for v, k in configs.items()}
        return judge_run(per_variant, baseline=next(iter(configs)), provenance=prov or provenance(bench, configs),
                         tolerances=tolerances, strict=strict, run_id=run_id, limited=limited,
                         connection_string=pg_uri, history_prefix=prefix, record=record,
                         sweep_keys=sweep or list(configs), rank_reference=ranker)

    run.prefix = prefix
    run.uri = pg_uri
    yield run
    with psycopg.connect(pg_uri, autocommit=True) as conn:
        for table in reversed(list(table_names(prefix).values())):
            conn.execute(f'DROP TABLE IF EXISTS "{table}" CASCADE')


def test_a_variants_own_history_wins_over_another_variants_with_its_configuration(judge):
    """`a` takes `z`'s configuration (and drops 1.00 -> 0.50): judged by its own name's history,
    even when `z`'s row was accepted since."""
    assert judge("r0", "B1", {"a": "good", "z": "bad"}).gate_passed
    accept_reference(judge.uri, "r0", variants=["z"], prefix=judge.prefix)
    r1 = judge("r1", "B1", {"a": "bad", "z": "bad"})
    assert r1.previous["a"]["variant"] == "a" and r1.gates["a"].state == "comparable"
    assert not r1.gate_passed and not r1.eligible


def test_accepting_an_older_run_for_one_variant_keeps_the_variants_known_since(judge):
    assert judge("r0", "B1", {"b": "other"}).gate_passed
    assert judge("r1", "B1", {"a": "good", "b": "other"}).gate_passed
    assert judge("r2", "B1", {"a": "good", "b": "other"}).gate_passed
    accept_reference(judge.uri, "r0", variants=["b"], prefix=judge.prefix)
    r3 = judge("r3", "B1", {"a2": "bad", "b": "other"})
    assert r3.vanished == ["a"] and states(r3)["a2"] == ("not_compared", False) and not r3.gate_passed


@pytest.mark.parametrize("fault", ["errored", "fallback"])
def test_a_paired_reference_ranking_with_errors_or_fallbacks_is_no_yardstick(judge, fault):
    assert judge("r0", "B1", {"a": "good"}).gate_passed
    broken = [f"q{i:03d}" for i in range(60)]

    def ranker(variant, reference):  # the reference configuration, ranked today, on a flaky endpoint
        return frame(variant, 100, **{fault: broken})

    r1 = judge("r1", "B2", {"a": "bad"}, ranker=ranker)
    assert states(r1) == {"a": ("not_compared", False)}
    assert ("errored" if fault == "errored" else "fell back") in r1.gates["a"].message


def test_a_run_with_reranker_fallbacks_cannot_be_accepted(judge):
    frames = {"a": frame("a", 100), "b": frame("b", 100, fallback=["q000"])}
    judge("r0", "B1", {"a": "good", "b": "other"}, frames=frames)
    with pytest.raises(ValueError, match="fallbacks for variant"):
        accept_reference(judge.uri, "r0", prefix=judge.prefix)


def test_a_rename_done_as_an_addition_then_a_removal_fails(judge):
    assert judge("r0", "B1", {"a": "good", "b": "other"}).gate_passed
    assert judge("r1", "B1", {"a": "good", "a2": "bad", "b": "other"}).gate_passed  # a genuinely new variant
    r2 = judge("r2", "B1", {"a2": "bad", "b": "other"})  # `a` removed: `a2` was added since the last acceptance
    assert r2.vanished == ["a"] and states(r2)["a2"] == ("not_compared", False) and not r2.gate_passed
    accept_reference(judge.uri, "r2", prefix=judge.prefix)  # acknowledges the removal
    assert judge("r3", "B1", {"a2": "bad", "b": "other"}).gate_passed


def test_code_regressions_in_steps_after_a_benchmark_change_fail_against_its_first_run(judge):
    """After a question edit, the pinned reference's configuration (today's own) cannot see a code
    change: the first run on today's benchmark anchors it."""
    def prov(bench, engine):
        return {**provenance(bench, {"a": "good"}), "engine_identity": engine}

    assert judge("r0", "B1", {"a": "good"}, prov=prov("B1", "E1")).gate_passed
    assert states(judge("r1", "B2", {"a": "good"}, prov=prov("B2", "E1"))) == {"a": ("paired", True)}
    assert judge("r2", "B2", {"a": "good"}, prov=prov("B2", "E2"), frames={"a": frame("a", 97)}).gate_passed
    r3 = judge("r3", "B2", {"a": "good"}, prov=prov("B2", "E3"), frames={"a": frame("a", 94)})
    assert not r3.gate_passed and any(r["against"] == "anchor" and r["passed"] is False for r in r3.gate_rows())


def test_a_partition_ranked_by_another_engine_is_refused():
    """A one-variant run after a code change: the other variants' partitions were ranked by the
    old code; the verdict refuses them rather than record them under the new engine."""
    from eval_pipeline.verdict.retrieval import results_provenance
    from eval_pipeline.ranking.inputs import InconsistentInputs

    stale = frame("b", 100).assign(store_table="t", questions_fingerprint="q", variant_config="{}",
                                   engine_identity="old-engine")
    with pytest.raises(InconsistentInputs, match="ranked by engine"):
        results_provenance({"b": stale}, tables={"b": "t"}, questions_fingerprint="q", engine="new-engine")
    assert results_provenance({"b": stale}, tables={"b": "t"}, questions_fingerprint="q", engine="old-engine")
