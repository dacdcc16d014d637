"""The forty-first review of the verdict: the rest of the fortieth review's class (a gate recorded
``not_compared`` while a comparison it could make shows, or would show, a drop, so accepting the run
whole takes the drop unseen: ``retrieval_to_accept`` and ``accept_answer_run`` refuse a whole
acceptance only for a measured failure or a named treatment change), and what the fortieth
review's fixes say falsely.

1. The rename suspicion's branch of ``judge_run`` now judges a variant against its own previous
   run, but never against its own pinned reference: a regression in steps (each within tolerance,
   their sum not) is hidden behind "a possible rename", recorded ``not_compared``, accepted whole.
2. When the previous run is the pinned reference (a variant's first eligible run, or the run just
   accepted) and the engine changed with the benchmark, nothing is paired: the reference's
   configuration, paired by configuration alone when the reference is another run, is not ranked,
   so a configuration change's drop is ``not_compared`` and accepted whole.
3. A variant whose only recorded run is in a run another variant made ineligible is "not new, and
   nothing can judge it": its own measurement of the same benchmark (its gate passed) is never
   compared, and the whole acceptance takes its drop.
4. The answers carry the engine that ranked their context (checked against this run's), but it is
   neither recorded with the answer rows nor a treatment change: a golden-set edit made with a
   ranking code change names nothing and is accepted whole (the fortieth review's hole 4 with the
   code in place of the settings).
5. ``verdict.answers.retrieval_changes`` compares the whole ``variant_config``, tuning outcomes
   included (``tuned``, ``abstain_tuned``: RUN_OUTCOMES, which ``configuration_fingerprint`` leaves
   out as "not part of what the variant is"): a corpus change moves a tuned variant's tuning score,
   named as a treatment change made in the same run, and the whole acceptance of a corpus change
   (the README's flow) is refused.

Each was a strict xfail that failed at its last assertion(s); all five are closed: the rename suspicion
wraps whatever the variant's own yardsticks (previous, reference, anchor) measured; a previous run that is
also the pinned reference, on another benchmark and engine, is paired as the reference by configuration;
a variant with recorded runs and no yardstick is judged against the runs that recorded it on the same
benchmark, a drop shown as the measured failure it is; answer rows record the engine that ranked their
context and a change of it is named; tuning outcomes are no retrieval setting. Judged like the fortieth
review's: ``judge_run(record=True)`` on the session's embedded Postgres under a table prefix of its
own (its ``judge`` fixture), ``judge_answer_run`` + ``record_answers`` on a fresh default answer
history (the eighth review's ``answers`` fixture); about 25 s for the five.
"""

from __future__ import annotations

import json

import pytest

from tests.unit.verdict import test_verdict_attacks_eighth as eighth
from tests.unit.verdict import test_verdict_attacks_fortieth as fortieth
from tests.unit.verdict.test_verdict_attacks_eighth import ANSWER_TOL
from tests.verdict_frames import answer_frame_with

answers = eighth.answers  # a fresh default answer history under the tests' lock
judge = fortieth.judge  # judge_run recording under a table prefix of its own; judge.accept

pytestmark = pytest.mark.integration


# --------------------------------------------------------------------------------------------
# 1. the rename suspicion judges the previous run only: a regression in steps is not compared
# --------------------------------------------------------------------------------------------


def test_a_regression_in_steps_is_measured_against_its_own_reference_while_another_vanished(judge):
    """x added in r1 (its first run: its pinned reference), r2 -0.04 (passes, eligible), r3 -0.04
    again while y vanished: 0.92 against r1's 1.00 is a measured drop, shown nowhere."""
    judge("r0", "A", {"a": "ka", "y": "ky"})
    assert judge("r1", "A", {"a": "ka", "y": "ky", "x": "kx"}).passed
    assert judge("r2", "A", {"a": "ka", "y": "ky", "x": "kx"}, hits={"x": 96}).passed
    r3 = judge("r3", "A", {"a": "ka", "x": "kx"}, hits={"x": 92})
    gate = r3.gates["x"]
    assert r3.vanished == ["y"] and r3.previous["x"]["run_id"] == "r2" and not gate.passed, gate.message
    assert r3.reference["x"]["run_id"] == "r1", r3.reference["x"]
    # was: "FAILED (not compared): 'x' was added since the last acceptance and 'y' vanished ...", no drop
    assert gate.state == "comparable" and "hit@1 1.0000 -> 0.9200" in gate.message, gate.message
    with pytest.raises(ValueError):  # was accepted whole: x's hit@1 0.92 pinned, the -0.08 never shown
        judge.accept("r3")



# --------------------------------------------------------------------------------------------
# 2. the previous run is the pinned reference and the engine changed with the benchmark
# --------------------------------------------------------------------------------------------


def _rank_by_knob(variant, reference):
    """A reference configuration ranked on today's questions: k1 finds every gold at rank 1, others half."""
    from tests.verdict_frames import scored_frame

    return scored_frame(variant, {"k1": 100}.get(reference["variant"]["knob"], 50), 100)


def test_a_configuration_drop_is_paired_when_the_previous_run_is_the_reference_and_the_engine_changed(
        judge, monkeypatch):
    """r1 on benchmark A, configuration k1 (its first run: the pinned reference and the previous run).
    r2: a question edit (benchmark B), a code change (engine E1 -> E2) and configuration k2, half the
    hits. The previous run cannot be paired (another engine), the reference is the same run, so nothing
    is paired. Control (held, not kept): with an r0 before r1 (the reference then another run), k1 is
    ranked on B by configuration (1.00 against 0.50), the gate is ``paired`` and ``accept r2`` refused."""
    from eval_pipeline.verdict import retrieval

    engine = {"id": "E1"}
    monkeypatch.setattr(retrieval, "engine_identity", lambda database=None: engine["id"])
    assert judge("r1", "A", {"v": "k1"}).passed
    engine["id"] = "E2"
    r2 = judge("r2", "B", {"v": "k2"}, hits={"v": 50}, rank_reference=_rank_by_knob)
    gate = r2.gates["v"]
    assert not gate.passed and r2.reference["v"]["run_id"] == "r1" == r2.previous["v"]["run_id"], gate.message
    # was: "FAILED (not compared): ... no paired comparison could be made: the code or the packages that rank
    # changed since run r1 (engine E1 -> E2) ...", k1's 1.00 on today's questions never ranked
    assert gate.state == "paired" and "hit@1 1.0000 -> 0.5000" in gate.message, gate.message
    with pytest.raises(ValueError):  # was accepted whole: k2 at 0.50 pinned, the drop never shown
        judge.accept("r2")

# --------------------------------------------------------------------------------------------
# 3. a variant whose only run is in a run another variant failed: "nothing can judge it"
# --------------------------------------------------------------------------------------------


def test_a_variant_whose_first_run_was_in_an_ineligible_run_keeps_its_drop_measured(judge):
    """r0 {a}. r1 adds x (its first run, its own gate passes: hit@1 1.00) while a regresses, so r1 is
    not eligible (run-level). r2: a recovered, x 0.50 on the same benchmark. x has no yardstick
    (``ever`` None), ``recorded`` r1: "not new, and nothing can judge it", not compared, no number
    shown; ``accept r2`` whole pins x at 0.50, with r1's 1.00 of the same configuration and benchmark
    in the history."""
    assert judge("r0", "A", {"a": "ka"}).passed
    r1 = judge("r1", "A", {"a": "ka", "x": "kx"}, hits={"a": 50})
    assert not r1.gates["a"].passed and r1.gates["x"].passed and not r1.eligible
    r2 = judge("r2", "A", {"a": "ka", "x": "kx"}, hits={"x": 50})
    gate = r2.gates["x"]
    # was not_compared, "nothing can judge it", no number: now the drop from r1 (no yardstick) is shown
    assert not gate.passed and gate.state == "comparable", gate.message
    assert gate.message.startswith("FAILED: dropped more than tolerated: hit@1 1.0000 -> 0.5000"), gate.message
    assert "against run r1, which recorded it on this benchmark" in gate.message, gate.message
    with pytest.raises(ValueError):  # was accepted whole: x's 0.50 pinned, its 1.00 in r1 never shown
        judge.accept("r2")


# --------------------------------------------------------------------------------------------
# 4. the engine that ranked the answers' context is carried, never recorded nor compared
# --------------------------------------------------------------------------------------------


def test_a_golden_set_change_with_an_engine_change_is_not_accepted_whole(answers):
    """a0: bm25's answers pass 0.90, their context ranked by engine E1. a1: the golden set edited
    (fp-2) and the ranking code changed (engine E2: a tokenizer edit, say; the retrieval settings,
    the configuration, the generator and the answer treatment unchanged): 0.50. The fortieth
    review's hole 4 with the code in place of the settings: nothing measures the answers across the
    key change, and nothing names what else changed, so `accept a1` whole takes the drop."""
    from eval_pipeline.history.answers import accept_answer_run
    from eval_pipeline.verdict.answers import judge_answer_run, record_answers

    def run(run_id, rate, engine, **columns):
        frame = answer_frame_with("bm25", rate, engine_identity=engine, **columns)
        verdict = judge_answer_run({"bm25": frame}, order=["bm25"], corpus_signature="corpus-1",
                                   tolerances=ANSWER_TOL, strict=False, connection_string=answers.uri, run_id=run_id,
                                   configurations={"bm25": "cfg-bm25"})
        record_answers(verdict, answers.uri, run_id, run_eligible=verdict.passed)
        return verdict.gates["bm25"]["deterministic"]

    assert run("a0", 0.90, "E1").passed
    gate = run("a1", 0.50, "E2", set_fingerprint="fp-2")
    assert not gate.passed and gate.state == "not_compared", gate.message
    accepted, refused = accept_answer_run(answers.uri, "a1")
    assert accepted == [], (accepted, refused, gate.message)  # was [("bm25", "deterministic")]


# --------------------------------------------------------------------------------------------
# 5. what a tuned variant's tuning scored is named as a retrieval change
# --------------------------------------------------------------------------------------------


def _answer_run(answers, run_id, rate, config, *, corpus="corpus-1"):
    from eval_pipeline.verdict.answers import judge_answer_run, record_answers

    frame = answer_frame_with("bm25", rate, variant_config=json.dumps(config))
    verdict = judge_answer_run({"bm25": frame}, order=["bm25"], corpus_signature=corpus, tolerances=ANSWER_TOL,
                               strict=False, connection_string=answers.uri, run_id=run_id,
                               configurations={"bm25": "cfg-bm25"})
    record_answers(verdict, answers.uri, run_id, run_eligible=verdict.passed)
    return verdict.gates["bm25"]["deterministic"]


def test_a_tuning_outcome_moved_by_a_corpus_change_is_not_a_retrieval_change(answers):
    """a0: bm25 tunes its rrf_k (chose 60, scoring 0.61 on the tuning part). a1: documents added to
    the corpus (corpus-1 -> corpus-2: the answer key changed, not compared, the README's flow is to
    accept it whole); the same settings, the same choice, the tuning part scored 0.63 on the new
    corpus. The control (held, not kept): the same without ``tuned`` is accepted whole."""
    from eval_pipeline.history.answers import accept_answer_run

    def config(score):
        return {"engine": "bm25", "tune": "rrf_k", "tuned": {"chosen": {"rrf_k": 60}, "tuning_score": score}}

    assert _answer_run(answers, "a0", 0.90, config(0.61)).passed
    gate = _answer_run(answers, "a1", 0.88, config(0.63), corpus="corpus-2")
    assert not gate.passed and gate.state == "not_compared", gate.message
    assert "corpus_signature 'corpus-1' -> 'corpus-2'" in gate.message, gate.message
    # was: "...; and the treatment changed in the same run (retrieval tuned.tuning_score: 0.61 -> 0.63) ..."
    assert "tuned" not in gate.message, gate.message
    accepted, refused = accept_answer_run(answers.uri, "a1")
    assert accepted == [("bm25", "deterministic")], (accepted, refused)
