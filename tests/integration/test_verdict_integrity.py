"""The gate's verdict against the real history tables: which earlier run is the yardstick.

Each test builds runs whose metrics are exact fractions of 100 questions (question i is a hit
at rank 1 for i < hits, else a miss), judges them with `judge_run` against the embedded
Postgres under a table prefix of its own, and checks the verdict a clean comparison gives.
"""

from __future__ import annotations

import uuid

import pandas as pd
import psycopg
import pytest

from eval_pipeline.history.runs import SCORING_PROTOCOL, accept_reference, read_run, table_names
from eval_pipeline.metrics.retrieval import score_queries
from eval_pipeline.verdict.retrieval import judge_run

pytestmark = pytest.mark.integration

N = 100
TOLERANCES = {"hit@1": 0.05, "mrr": 0.05}


def frame(variant: str, hits: int, errored: int = 0) -> pd.DataFrame:
    """100 answerable questions: the first `errored` error, then hits up to `hits`, then misses."""
    qrels = {f"q{i:03d}": {f"d{i}": 1} for i in range(N)}
    rankings = {q: ([f"d{i}"] if errored <= i < hits else ["x"]) for i, q in enumerate(qrels)}
    failed = [f"q{i:03d}" for i in range(errored)]
    df = score_queries(rankings, qrels, errored=failed)
    df.insert(0, "variant", variant)
    df["doc_ids"] = [list(rankings[q]) if q not in failed else [] for q in df["qid"]]
    df["latency_ms"] = 1.0
    df["miss_class"] = [None if h else "never_candidate" for h in df["hit@1"]]
    return df


def provenance(labels: str = "labels-1", **overrides) -> dict:
    base = {
        "corpus_signature": "corpus-1",
        "question_set_fingerprint": f"qs-{labels}",
        "labels_fingerprint": labels,
        "benchmark_fingerprint": f"bench-{labels}",
        "embedder": "minilm",
        "embedder_revision": "rev-1",
        "chunking": {"split_length": 150},
        "scoring_protocol": SCORING_PROTOCOL,
        "code_version": "abc",
        "variants": {"a": {"engine": "pg-dense"}},
    }
    base.update(overrides)
    return base


@pytest.fixture
def judge(pg_uri):
    prefix = f"v_{uuid.uuid4().hex[:12]}"

    def run(run_id, hits, *, errored=0, labels="labels-1", strict=False, limited=False, record=True,
            tolerances=TOLERANCES, **prov):
        return judge_run({"a": frame("a", hits, errored)}, baseline="a", provenance=provenance(labels, **prov),
                         tolerances=tolerances, strict=strict, run_id=run_id, limited=limited,
                         connection_string=pg_uri, history_prefix=prefix, record=record)

    run.prefix = prefix
    yield run
    with psycopg.connect(pg_uri, autocommit=True) as conn:
        for table in (f"{prefix}_references", *reversed(list(table_names(prefix).values()))):
            conn.execute(f'DROP TABLE IF EXISTS "{table}" CASCADE')


def test_a_run_on_other_labels_in_between_never_hides_the_yardstick(judge):
    """Item 1: full set, then a subset with other labels, then a regression on the full set."""
    assert judge("r0", 100).gate_passed
    other = judge("r1", 100, labels="labels-subset")
    # another benchmark, the same configuration and engine: today's results are the reference
    # configuration's on these questions (paired), and the run is a yardstick of its benchmark
    assert other.gates["a"].state == "paired" and other.gate_passed
    regressed = judge("r2", 94)
    assert regressed.gates["a"].state == "comparable"
    assert regressed.previous["a"]["run_id"] == "r0"
    assert not regressed.gate_passed


def test_a_run_with_errored_questions_is_never_the_yardstick(judge):
    """Item 2: r1 errors on one question (a drop of 0.01, inside the tolerance, so its gate
    passes) but fails its errored-questions check; r2 drops 0.06 from r0 and must fail,
    though it is only 0.05 below r1."""
    judge("r0", 100)
    errored = judge("r1", 100, errored=1)
    assert errored.gate_passed and not errored.eligible
    regressed = judge("r2", 94)
    assert regressed.previous["a"]["run_id"] == "r0"
    assert not regressed.gate_passed


def test_a_run_whose_gate_failed_is_never_the_yardstick(judge):
    judge("r0", 100)
    assert not judge("r1", 80).gate_passed
    again = judge("r2", 80)  # the same regression a second time
    assert again.previous["a"]["run_id"] == "r0" and not again.gate_passed


def test_a_regression_in_steps_fails_against_the_pinned_reference(judge):
    """Item 6: 1.00 -> 0.97 -> 0.94 passes step by step, fails against the first eligible run."""
    judge("r0", 100)
    step = judge("r1", 97)
    assert step.gate_passed and step.reference["a"]["run_id"] == "r0"
    second = judge("r2", 94)
    assert second.previous["a"]["run_id"] == "r1"
    assert second.previous_gates["a"].passed  # 0.03 below the previous run
    assert second.reference["a"]["run_id"] == "r0"
    assert not second.reference_gates["a"].passed  # 0.06 below the reference
    assert not second.gate_passed
    assert {r["against"] for r in second.gate_rows()} == {"previous", "reference"}


def test_an_accepted_run_becomes_the_reference_and_the_yardstick(judge, pg_uri):
    judge("r0", 100)
    assert not judge("r1", 90).gate_passed  # a deliberate drop, say for latency
    with pytest.raises(ValueError, match="--variant a"):  # a measured regression is accepted only when named
        accept_reference(pg_uri, "r1", note="faster, accepted", prefix=judge.prefix)
    accepted = accept_reference(pg_uri, "r1", variants=["a"], note="faster, accepted", prefix=judge.prefix)
    assert accepted == ["a"]
    after = judge("r2", 90)
    assert after.previous["a"]["run_id"] == "r1" and after.reference["a"]["run_id"] == "r1"
    assert after.gate_passed


def test_accepting_a_limited_or_errored_run_is_refused(judge, pg_uri):
    judge("r0", 100, limited=True)
    judge("r1", 100, errored=2)
    with pytest.raises(ValueError, match="limited"):
        accept_reference(pg_uri, "r0", prefix=judge.prefix)
    with pytest.raises(ValueError, match="errored"):
        accept_reference(pg_uri, "r1", prefix=judge.prefix)
    with pytest.raises(ValueError, match="no recorded run 'nope'"):
        accept_reference(pg_uri, "nope", prefix=judge.prefix)


@pytest.mark.parametrize("strict", [False, True])
def test_new_labels_and_another_engine_fail_until_accepted(judge, pg_uri, strict):
    """New labels with the code changed since: nothing can judge the run (a paired ranking would
    run today's code on both sides), so it fails, strict or not, until a run is accepted."""
    judge("r0", 100, strict=strict, engine_identity="engine-1")
    if strict:  # strict: an empty history judges nothing, so the first run is accepted, not passed
        accept_reference(pg_uri, "r0", prefix=judge.prefix)
    new_labels = judge("r1", 100, labels="labels-2", strict=strict, engine_identity="engine-2")
    assert new_labels.gates["a"].state == "not_compared" and not new_labels.gate_passed
    assert "engine" in new_labels.gates["a"].message and "accept" in new_labels.gates["a"].message
    again = judge("r2", 100, labels="labels-2", strict=strict, engine_identity="engine-2")
    assert again.gates["a"].state == "not_compared" and not again.gate_passed  # a failed run is no yardstick
    accept_reference(pg_uri, "r2", prefix=judge.prefix)
    accepted = judge("r3", 100, labels="labels-2", strict=strict, engine_identity="engine-2")
    assert accepted.gates["a"].state == "comparable" and accepted.gate_passed


def test_a_benchmark_identity_that_is_incomplete_is_never_passed(judge):
    """A run whose benchmark fingerprint is missing cannot be paired by its configuration: the
    same configuration would vouch for results measured on unknown questions."""
    judge("r0", 100)
    unknown = judge("r1", 80, benchmark_fingerprint=None)
    assert unknown.gates["a"].state == "not_compared" and not unknown.gate_passed


def test_judging_without_recording_still_reads_the_history(judge, pg_uri):
    """`record_history: false` must not turn the gate into a pass: it still compares."""
    judge("r0", 100)
    unrecorded = judge("r1", 80, record=False)
    assert unrecorded.gates["a"].state == "comparable" and not unrecorded.gate_passed
    assert read_run(pg_uri, "r1", prefix=judge.prefix) is None


def test_eligibility_is_recorded(judge, pg_uri):
    judge("r0", 100)
    judge("r1", 80)
    assert read_run(pg_uri, "r0", prefix=judge.prefix)["eligible"] is True
    assert read_run(pg_uri, "r1", prefix=judge.prefix)["eligible"] is False


def test_a_gate_loosened_with_the_regression_still_judges_with_the_old_tolerances(judge, pg_uri):
    """Raising a tolerance (or no longer gating a metric) in the same change as a regression
    moves the yardstick: the run is judged with the tolerances its yardstick was judged with,
    until a run under the new ones is accepted."""
    judge("r0", 100)
    loosened = judge("r1", 80, tolerances={"hit@1": 0.5})  # mrr no longer gated, hit@1 tolerates 0.5
    assert not loosened.gate_passed
    assert {r["metric"] for r in loosened.gates["a"].failures} == {"hit@1", "mrr"}
    assert "loosened" in loosened.gates["a"].message and "hit@1 0.05 -> 0.5" in loosened.gates["a"].message
    accept_reference(pg_uri, "r1", variants=["a"], prefix=judge.prefix)  # a failed: named
    assert judge("r2", 60, tolerances={"hit@1": 0.5}).gate_passed  # the accepted run's tolerances apply now


def test_strict_judges_nothing_unjudged_not_even_a_first_run(judge, pg_uri):
    """An empty history (a fresh CI checkout, a new database) cannot judge: under strict the first
    run fails until it is accepted, and a new variant later fails until a run of it is accepted."""
    first = judge("r0", 10, strict=True)  # hit@1 0.10: nothing says whether that is a regression
    assert first.gates["a"].state == "not_compared" and not first.gate_passed
    assert "first run" in first.gates["a"].message
    accept_reference(pg_uri, "r0", prefix=judge.prefix)
    assert judge("r1", 10, strict=True).gates["a"].state == "comparable"
    assert judge("r2", 10).gates["a"].state == "comparable"


def test_the_accept_reference_job_records_who_accepted_and_why(pg_uri):
    """The Launchpad's way to accept: the `accept_reference` job, through the database resource;
    the acceptance is recorded with who, when and why (in the default history, `eval_*`, under
    run ids of this test's own)."""
    from assets.reference import accept_reference_job
    from resources import DatabaseResource, StateResource

    r0, r1 = f"job-{uuid.uuid4().hex[:8]}", f"job-{uuid.uuid4().hex[:8]}"
    for run_id, hits in ((r0, 100), (r1, 90)):
        judge_run({"a": frame("a", hits)}, baseline="a", provenance=provenance(f"labels-{r0}"), tolerances=TOLERANCES,
                  strict=False, run_id=run_id, limited=False, connection_string=pg_uri)
    result = accept_reference_job.execute_in_process(
        run_config={"ops": {"accept_reference_run": {"config": {"run_id": r1, "note": "faster, accepted",
                                                                 "accepted_by": "ana", "variants": ["a"]}}}},
        resources={"database": DatabaseResource(kind="external", url=pg_uri, state=StateResource())})
    assert result.success
    with psycopg.connect(pg_uri) as conn:
        row = conn.execute("SELECT aspect, accepted_by, note, accepted_at IS NOT NULL FROM eval_references "
                           "WHERE run_id = %s", (r1,)).fetchone()
    assert row == ("retrieval", "ana", "faster, accepted", True)


def _two_variants(pg_uri, prefix, run_id, *, strict, answer_strict=False):
    """Variant a (hit@1 0.9) and a new variant b (a configuration of its own)."""
    return judge_run({"a": frame("a", 90), "b": frame("b", 10)}, baseline="a",
                     provenance=provenance(variants={"a": {"engine": "pg-dense"}, "b": {"engine": "bm25"}}),
                     tolerances=TOLERANCES, strict=strict, answer_strict=answer_strict, run_id=run_id, limited=False,
                     connection_string=pg_uri, history_prefix=prefix)


def test_turning_strict_off_with_a_new_variant_still_judges_it_strictly(judge, pg_uri):
    """`strict` is pinned like the tolerances: switched off in the same change as a new variant
    (which strict would fail until accepted), the new variant still fails; once a run under the
    new setting is accepted, it applies."""
    assert judge("r0", 90, strict=True).gates["a"].state == "not_compared"
    accept_reference(pg_uri, "r0", prefix=judge.prefix)
    assert judge("r1", 90, strict=True).gate_passed
    loosened = _two_variants(pg_uri, judge.prefix, "r2", strict=False)
    assert loosened.gates["a"].passed and not loosened.gates["b"].passed
    assert loosened.gates["b"].state == "not_compared" and "strict" in loosened.gates["b"].message
    assert loosened.policy == {"strict": True, "answer_strict": False}
    assert read_run(pg_uri, "r2", prefix=judge.prefix)["provenance"]["effective_gate_policy"]["strict"] is True
    accept_reference(pg_uri, "r2", prefix=judge.prefix)  # accepting it accepts its setting too
    relaxed = judge_run({"a": frame("a", 90), "b": frame("b", 10), "c": frame("c", 10)}, baseline="a",
                        provenance=provenance(variants={"a": {"engine": "pg-dense"}, "b": {"engine": "bm25"},
                                                        "c": {"engine": "metadata"}}),
                        tolerances=TOLERANCES, strict=False, run_id="r3", limited=False, connection_string=pg_uri,
                        history_prefix=judge.prefix)
    assert relaxed.gates["c"].state == "first_run" and relaxed.gate_passed


def test_the_answer_gate_s_strict_is_pinned_the_same_way(judge, pg_uri):
    judge("r0", 90)
    first = _two_variants(pg_uri, judge.prefix, "r1", strict=False, answer_strict=True)
    assert first.policy == {"strict": False, "answer_strict": True}
    later = _two_variants(pg_uri, judge.prefix, "r2", strict=False, answer_strict=False)
    assert later.policy == {"strict": False, "answer_strict": True}
    assert any("answer_strict" in note for notes in later.loosened.values() for note in notes)
