"""The fourth attack review of the verdict: the holes that need the history (Postgres).

Fast like the third review's tests: every test calls ``judge_run`` directly against the real
embedded Postgres, under a table prefix of its own; 100 questions, question i a hit at rank 1
for i < hits, so the metrics are exact fractions. A configuration is ``{"engine", "knob"}``:
two variants with the same knob have the same configuration identity whatever their names.

The holes (each test's docstring says what the attacker did and what the verdict said):

1. a new name inherited the history of a *live* variant with its configuration, or of a retired
   name's; it may inherit only from a name that vanished in this run with its configuration;
2. eligibility was decided per run: a variant added in a run that failed, or a project whose
   first run had an errored question, was a "first run" for ever;
7. the accept hint named no run and no variant, and accepting a whole run accepted the
   regressions of its comparable variants too.

(The holes that need no database are in tests/unit/verdict/test_identity_holes.py.)
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
TOL = {"hit@1": 0.05, "mrr": 0.05}
QUALITY = {"good": 100, "other": 100, "third": 100, "bad": 50}


def frame(variant: str, hits: int, *, errored: int = 0) -> pd.DataFrame:
    """Question i is a hit at rank 1 for i < hits, else a miss; the last ``errored`` errored."""
    qrels = {f"q{i:03d}": {f"d{i}": 1} for i in range(N)}
    failed = [f"q{i:03d}" for i in range(N - errored, N)]
    rankings = {q: ([f"d{i}"] if i < hits else ["x"]) for i, q in enumerate(qrels) if q not in failed}
    df = score_queries(rankings, qrels, errored=failed)
    df.insert(0, "variant", variant)
    df["doc_ids"] = [list(rankings.get(q, [])) for q in df["qid"]]
    df["latency_ms"] = 1.0
    df["miss_class"] = [None if h else "never_candidate" for h in df["hit@1"]]
    return df


def provenance(configs: dict[str, str]) -> dict:
    return {
        "corpus_signature": "corpus-1", "question_set_fingerprint": "qs-1", "labels_fingerprint": "labels-1",
        "benchmark_fingerprint": "bench-1", "embedder": "minilm", "embedder_revision": "rev-1",
        "chunking": {"split_length": 150}, "scoring_protocol": SCORING_PROTOCOL, "code_version": "code-1",
        "engine_identity": "E1", "variants": {v: {"engine": "pg-dense", "knob": k} for v, k in configs.items()},
    }


def states(verdict) -> dict[str, tuple[str, bool]]:
    return {v: (g.state, g.passed) for v, g in verdict.gates.items()}


@pytest.fixture
def judge(pg_uri):
    """judge_run(run_id, {variant: knob}) under a table prefix of this test's own; ``hits``
    overrides a variant's quality, ``errored`` makes its last questions error."""
    prefix = f"t4_{uuid.uuid4().hex[:12]}"

    def run(run_id, configs, *, hits=None, errored=None, strict=False, limited=False, record=True):
        hits, errored = hits or {}, errored or {}
        per_variant = {v: frame(v, hits.get(v, QUALITY[k]), errored=errored.get(v, 0)) for v, k in configs.items()}

        def rank_reference(variant, reference):
            return frame(variant, QUALITY[reference["variant"]["knob"]])

        return judge_run(per_variant, baseline=next(iter(configs)), provenance=provenance(configs),
                         tolerances=TOL, strict=strict, run_id=run_id, limited=limited, connection_string=pg_uri,
                         history_prefix=prefix, sweep_keys=list(configs), rank_reference=rank_reference,
                         record=record)

    run.prefix = prefix
    run.uri = pg_uri
    yield run
    with psycopg.connect(pg_uri, autocommit=True) as conn:
        for table in reversed(list(table_names(prefix).values())):
            conn.execute(f'DROP TABLE IF EXISTS "{table}" CASCADE')


# --- hole 1: what a new name inherits --------------------------------------------------------


def test_a_renamed_variant_given_a_live_variants_configuration_does_not_inherit_its_history(judge):
    """HOLE 1. r0 {a: good, b: other}. r1 renames b to b2 and gives it a's configuration (a is
    still there). b2 has no history by name, so it was looked up by configuration and found a's:
    "comparable", passed, and b's disappearance was named nowhere. Expected: b2 does not inherit
    a live variant's history; it is new while b vanished: not compared, named, failing."""
    assert judge("r0", {"a": "good", "b": "other"}).passed
    renamed = judge("r1", {"a": "good", "b2": "good"}, hits={"b2": 90})
    gate = renamed.gates["b2"]
    assert renamed.previous["b2"] is None, renamed.previous["b2"]
    assert (gate.state, gate.passed) == ("not_compared", False), gate.message
    assert "'b'" in gate.message and "vanished" in gate.message
    assert "python -m eval_pipeline.history accept r1 --variant b2" in gate.message
    assert not renamed.eligible


def test_a_new_variant_with_a_live_variants_configuration_is_a_new_variant(judge):
    """HOLE 1. r1 adds n with a's configuration (nothing vanished): it was judged against a's
    history. It is a genuinely new variant: a first run, said so."""
    assert judge("r0", {"a": "good"}).passed
    added = judge("r1", {"a": "good", "n": "good"})
    assert added.previous["n"] is None
    assert states(added)["n"] == ("first_run", True)
    assert "new variant" in added.gates["n"].message


def test_a_name_given_a_retired_variants_configuration_is_a_new_variant(judge):
    """HOLE 1. b was removed and its removal accepted (r1); later c is added with b's old
    configuration: it inherited b's history from before its retirement. It inherits nothing (no
    previous run, no reference of b's), but since the forty-fourth review it is not new either: the
    same configuration on the same benchmark is the same measurement, whatever was accepted since
    (an acceptance once hid a never-known name's drop this way). Not compared, its message naming b;
    with no drop from b's runs, one whole acceptance ends it."""
    assert judge("r0", {"a": "good", "b": "other"}).passed
    assert judge("r1", {"a": "good"}).passed
    accept_reference(judge.uri, "r1", prefix=judge.prefix)
    added = judge("r2", {"a": "good", "c": "other"})
    assert added.previous["c"] is None
    assert states(added)["c"] == ("not_compared", False)
    assert "its configuration was recorded as 'b' (the latest run r0)" in added.gates["c"].message
    assert "c" in accept_reference(judge.uri, "r2", prefix=judge.prefix)
    assert states(judge("r3", {"a": "good", "c": "other"}))["c"] == ("comparable", True)


def test_a_retired_name_reused_is_judged_against_its_own_history(judge):
    """HELD. A reused name keeps its own history (by name): a regression under it fails."""
    assert judge("r0", {"a": "good", "b": "other"}).passed
    assert judge("r1", {"a": "good"}).passed
    accept_reference(judge.uri, "r1", prefix=judge.prefix)
    reused = judge("r2", {"a": "good", "b": "bad"})
    assert reused.previous["b"]["run_id"] == "r0"
    assert states(reused)["b"] == ("comparable", False)


def test_a_rename_with_the_same_configuration_keeps_its_history(judge):
    """HELD. b renamed to b2 with b's configuration (b vanished in this run) inherits b's
    history: its regression fails against it."""
    assert judge("r0", {"a": "good", "b": "other"}).passed
    renamed = judge("r1", {"a": "good", "b2": "other"}, hits={"b2": 50})
    assert renamed.previous["b2"]["run_id"] == "r0" and renamed.previous["b2"]["variant"] == "b"
    assert states(renamed)["b2"] == ("comparable", False)
    assert renamed.inherits == {"b2": "b"}


def test_a_renamed_variant_does_not_take_a_live_variants_history_when_its_own_vanished_twin_exists(judge):
    """HOLE 1. a and b share a configuration; b is renamed to b2 (same configuration): b2
    inherits from b (vanished), never from a (live), even when a ran later."""
    assert judge("r0", {"a": "good", "b": "good"}, hits={"b": 96}).passed
    renamed = judge("r1", {"a": "good", "b2": "good"}, hits={"b2": 96})
    assert renamed.previous["b2"]["variant"] == "b"


# --- hole 2: eligibility per variant, not per run --------------------------------------------


def test_a_variant_added_in_a_failed_run_is_not_a_first_run_later(judge):
    """HOLE 2. r1 adds n while a regresses (the run fails: nothing of it is a yardstick). r2: n
    regressed; it has no eligible run, so it was a "first run" and passed. It has a recorded
    run: failing until accepted, with the exact command; and its drop from that run, no yardstick, is
    shown as the measured failure it is (the forty-first review: "nothing can judge it" hid it, and
    accepting the run whole took it)."""
    assert judge("r0", {"a": "good"}).passed
    failed = judge("r1", {"a": "good", "n": "other"}, hits={"a": 50})
    assert not failed.passed and states(failed)["n"] == ("first_run", True)
    regressed = judge("r2", {"a": "good", "n": "other"}, hits={"n": 50})
    gate = regressed.gates["n"]
    assert (gate.state, gate.passed) == ("comparable", False), gate.message
    assert "r1" in gate.message and "accept r2 --variant n" in gate.message
    assert "hit@1 1.0000 -> 0.5000" in gate.message and "against run r1, which recorded it" in gate.message, gate.message
    assert not regressed.eligible


def test_a_project_whose_first_run_had_an_errored_question_is_not_new_for_ever(judge):
    """HOLE 2. The project's first run had an errored question (recorded, not eligible). Every
    later run was "the project's first run" and passed, however bad. It has a recorded run."""
    first = judge("r0", {"a": "good"}, errored={"a": 1})
    assert not first.eligible
    regressed = judge("r1", {"a": "good"}, hits={"a": 50})
    # its drop from the first run (no yardstick) shown: a measured failure, so accepting it names the variant
    assert states(regressed)["a"] == ("comparable", False), regressed.gates["a"].message
    assert "against run r0, which recorded it" in regressed.gates["a"].message, regressed.gates["a"].message
    with pytest.raises(ValueError):
        accept_reference(judge.uri, "r1", prefix=judge.prefix)
    # accepting a run ends it: the next is compared with it
    accept_reference(judge.uri, "r1", variants=["a"], prefix=judge.prefix)
    assert states(judge("r2", {"a": "good"}, hits={"a": 50}))["a"] == ("comparable", True)


def test_a_smoke_run_does_not_make_a_variant_known(judge):
    """HELD. A limited run (a subset, a smoke run) measured nothing a full run is compared with:
    the first full run after it is still the project's first run, and a variant's first run."""
    assert judge("r0", {"a": "good"}, limited=True).gate_passed
    full = judge("r1", {"a": "good"})
    assert states(full)["a"] == ("first_run", True) and "project's first run" in full.gates["a"].message
    smoke = judge("r2", {"a": "good", "n": "other"}, limited=True)
    assert smoke.gate_passed
    assert states(judge("r3", {"a": "good", "n": "other"}))["n"] == ("first_run", True)


def test_an_empty_history_is_the_projects_first_run(judge):
    """HELD. A genuinely empty history: the project's first run passes, said so."""
    first = judge("r0", {"a": "good"})
    assert states(first)["a"] == ("first_run", True)
    assert "project's first run" in first.gates["a"].message


# --- hole 6: a history that cannot be read -----------------------------------------------------


def test_a_damaged_history_is_not_an_empty_one(judge):
    """HOLE 6. The history's metrics table is gone (the runs table is there): it was read as no
    history at all, so every variant was the project's first run. It fails closed."""
    assert judge("r0", {"a": "good"}).passed
    with psycopg.connect(judge.uri, autocommit=True) as conn:
        conn.execute(f'DROP TABLE "{table_names(judge.prefix)["metrics"]}" CASCADE')
    damaged = judge("r1", {"a": "good"}, hits={"a": 50}, record=False)
    gate = damaged.gates["a"]
    assert (gate.state, gate.passed) == ("not_compared", False), gate.message
    assert "history could not be read" in gate.message and "damaged" in gate.message


# --- hole 7: accepting ------------------------------------------------------------------------


def test_accepting_a_run_whose_comparable_variant_failed_needs_that_variant_named(judge):
    """HOLE 7. r1: a regressed against a comparable yardstick (failed), n is new. `accept r1`
    accepted a's regression with n's first run. It is refused unless a is named."""
    assert judge("r0", {"a": "good"}).passed
    failed = judge("r1", {"a": "good", "n": "other"}, hits={"a": 50})
    assert failed.accept_command == "python -m eval_pipeline.history accept r1 --variant a"
    with pytest.raises(ValueError, match="--variant a"):
        accept_reference(judge.uri, "r1", prefix=judge.prefix)
    assert accept_reference(judge.uri, "r1", variants=["n"], prefix=judge.prefix) == ["n"]
    assert accept_reference(judge.uri, "r1", variants=["a", "n"], prefix=judge.prefix) == ["a", "n"]
    assert read_run(judge.uri, "r1", prefix=judge.prefix) is not None


# --- hole 1 on the answer side ------------------------------------------------------------------


def test_an_answer_gate_of_a_new_name_does_not_take_a_live_variants_history(pg_uri):
    """HOLE 1 (answers). b2 is new and has a's retrieval configuration while a is still there:
    its answer rows were looked up by configuration and found a's. Only a name the retrieval
    verdict found renamed (``renamed``) is looked up by configuration; b2 is a new measurement."""
    from eval_pipeline.verdict.answers import judge_answer_run, record_answers
    from tests.integration.answer_history_lock import fresh_default_history
    from tests.orchestration.test_verdict_attacks_third import answer_frame

    with fresh_default_history(pg_uri):
        first = judge_answer_run({"a": answer_frame("a", 0.9)}, order=["a"], corpus_signature="corpus-1",
                                 tolerances={"max_pass_rate_drop": 0.05}, strict=False, connection_string=pg_uri,
                                 run_id="ans0", configurations={"a": "cfg-x"}, renamed=set())
        record_answers(first, pg_uri, "ans0", run_eligible=True)
        frames = {"a": answer_frame("a", 0.9), "b2": answer_frame("b2", 0.5)}
        live = judge_answer_run(frames, order=["a", "b2"], corpus_signature="corpus-1",
                                tolerances={"max_pass_rate_drop": 0.05}, strict=False, connection_string=pg_uri,
                                run_id="ans1", configurations={"a": "cfg-x", "b2": "cfg-x"}, renamed=set())
        assert live.gates["b2"]["deterministic"].state == "first_run", live.gates["b2"]["deterministic"].message
        renamed = judge_answer_run({"b2": answer_frame("b2", 0.5)}, order=["b2"], corpus_signature="corpus-1",
                                   tolerances={"max_pass_rate_drop": 0.05}, strict=False, connection_string=pg_uri,
                                   run_id="ans2", configurations={"b2": "cfg-x"}, renamed={"b2"})
        gate = renamed.gates["b2"]["deterministic"]
        assert not gate.passed and gate.state == "comparable", gate.message  # a's history, by configuration


def test_a_rename_made_in_a_failed_run_keeps_the_vanished_names_history(judge):
    """HELD. b renamed to b2 (same configuration) in a run that failed (a regressed): b2 is
    recorded with no yardstick of its own; b is still the vanished name it came from, so the
    next run judges b2 against b's history, not as not compared."""
    assert judge("r0", {"a": "good", "b": "other"}).passed
    assert not judge("r1", {"a": "good", "b2": "other"}, hits={"a": 50}).passed
    again = judge("r2", {"a": "good", "b2": "other"}, hits={"b2": 50})
    assert again.previous["b2"] is not None and again.previous["b2"]["variant"] == "b"
    assert states(again)["b2"] == ("comparable", False)


def test_accepting_answers_whose_gate_failed_against_a_comparable_run_needs_the_variant_named(pg_uri):
    """HOLE 7 (answers). `accept RUN_ID` accepted every answer row of the run, the ones whose
    gate failed against a comparable yardstick too (a measured regression). Refused unless the
    variant is named, the refusal naming the exact command."""
    from eval_pipeline.history.answers import accept_answer_run
    from eval_pipeline.verdict.answers import judge_answer_run, record_answers
    from tests.integration.answer_history_lock import fresh_default_history
    from tests.orchestration.test_verdict_attacks_third import answer_frame

    tol = {"max_pass_rate_drop": 0.05}
    with fresh_default_history(pg_uri):
        for run_id, rate in (("ans0", 0.9), ("ans1", 0.5)):
            verdict = judge_answer_run({"a": answer_frame("a", rate)}, order=["a"], corpus_signature="corpus-1",
                                       tolerances=tol, strict=False, connection_string=pg_uri, run_id=run_id)
            record_answers(verdict, pg_uri, run_id, run_eligible=verdict.passed)
        assert verdict.gates["a"]["deterministic"].state == "comparable"
        assert not verdict.gates["a"]["deterministic"].passed
        accepted, refused = accept_answer_run(pg_uri, "ans1")
        assert accepted == [] and "accept ans1 --variant a" in refused[0]
        accepted, refused = accept_answer_run(pg_uri, "ans1", variants=["a"])
        assert accepted == [("a", "deterministic")] and refused == []


def test_an_answer_measurement_recorded_in_a_failed_run_is_not_new_later(pg_uri):
    """HOLE 2 (answers). The deterministic grades of `a` were first recorded in a run that failed
    (not a yardstick); the next run's regressed grades were "a new measurement" and passed. They
    have a recorded row: not compared, failing until accepted; and since a gate nothing comparable
    judged is compared with its recorded rows, the drop from ans0's 0.90 is shown: a measured failure."""
    from eval_pipeline.verdict.answers import judge_answer_run, record_answers
    from tests.integration.answer_history_lock import fresh_default_history
    from tests.orchestration.test_verdict_attacks_third import answer_frame

    tol = {"max_pass_rate_drop": 0.05}
    with fresh_default_history(pg_uri):
        first = judge_answer_run({"a": answer_frame("a", 0.9)}, order=["a"], corpus_signature="corpus-1",
                                 tolerances=tol, strict=False, connection_string=pg_uri, run_id="ans0")
        assert first.gates["a"]["deterministic"].state == "first_run"
        record_answers(first, pg_uri, "ans0", run_eligible=False)  # the run's retrieval gate failed
        later = judge_answer_run({"a": answer_frame("a", 0.5)}, order=["a"], corpus_signature="corpus-1",
                                 tolerances=tol, strict=False, connection_string=pg_uri, run_id="ans1")
        gate = later.gates["a"]["deterministic"]
        assert (gate.state, gate.passed) == ("comparable", False), gate.message
        assert "vs recorded run ans0: 0.9000 -> 0.5000" in gate.message, gate.message
        assert "ans0" in gate.message and "accept ans1 --variant a" in gate.message
