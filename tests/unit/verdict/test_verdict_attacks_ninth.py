"""The ninth review of the verdict, aimed first at the eighth review's fixes (7035804..7c0a77e):
``moved_reference`` (the pinned reference moves only to the one the previous run was judged
against, or to one accepted since), a gated metric missing from a yardstick failing as not
compared, the drift ledger (``carried_drift``), the accept rules, and renames. Tests that need the
history judge runs with the eighth review's ``judge`` and ``answers`` fixtures against the
session's embedded Postgres (marked ``integration``); nothing here needs Dagster.

What did not hold until fixed (each was a strict xfail, now a plain test): a gated metric the
ledger lacks makes the drift unknown, so the gate is not compared; a reference found through an
earlier name is never "accepted since" for this variant; `not_compared_unless_measured` keeps a
measured failure's state when a moved reference or a missing ledger is added to it (the run is
then accepted only naming the variant); the moved-reference check reads the last run of any
benchmark. The holes as found:

1. a gated metric missing from the previous run's drift ledger is silently unchecked across a
   benchmark change: ``carried_drift`` keeps only ``m in carried``, so a metric gated since (or
   one whose delta was None) is judged only against paired rankings that run today's code,
   blind to an earlier code regression (the whole ledger missing is not compared);
2. a renamed variant's pinned reference is looked up through its earlier name alone: once the
   earlier name comes back as another configuration and is accepted by name (the README's flow
   for a failed gate), the renamed variant is judged against that other configuration's numbers
   (retrieval: ``earlier_names`` in ``judge_run``; answers: ``answer_earlier_names`` in
   ``judge_answer_run``), and a regression in steps passes;
3. a measured regression recorded as ``not_compared``, so ``accept_reference`` /
   ``accept_answer_run`` accept the run whole without the variant named:

   a. the no-drift-recorded rule replaces the state of a gate that had already failed against
      the previous run on today's questions;
   b. a moved reference makes the retrieval gate not compared without judging the previous run
      (still in the history) at all;
   c. the answer verdict overwrites a gate that failed against the previous row with the moved
      reference's ``not_compared``;

4. ``moved_reference`` is checked against the previous run on *today's* benchmark, not the
   latest run: after an accepted run on an edited benchmark is deleted and the edit reverted,
   the old first run is both the previous run and the reference ("judged against none, now the
   reference": exempt), so the reference falls back silently.

What held (plain tests): a gated metric NaN today and numeric in the yardstick fails (higher and
lower is better, direct and paired); a newly gated metric is judged against the reference on the
same benchmark; ``evaluate_gate`` alone says ``not_compared`` beside a measured drop, but the
verdict records the comparison's state, so accepting that run whole is refused; after a moved
reference, accepting the not-compared run or the older previous run ends it (no loop), for
retrieval and answers. Read and judged sound without a test: a NaN in an answer yardstick (its
delta is NaN and fails); timestamps (``created_at`` is the run's transaction time, acceptances
``clock_timestamp()``; an equal or earlier acceptance is treated as not "since": closed); answer
rows accepted before ``accepted_at`` existed read their ``created_at`` as the acceptance, which
fails closed once until re-accepted.

Not attacked to the end: clock steps between server restarts; the answer side of hole 1 (its
gate keeps no ledger); the anchor yardstick (``reference_run`` by identity) under deletions.
"""

from __future__ import annotations

import pytest

from tests.unit.verdict import test_verdict_attacks_eighth as eighth
from tests.unit.verdict.test_verdict_attacks_eighth import (
    ANSWER_TOL,
    _answer_frame,
    _answer_gate,
    _delete_run,
    _second_rank_frame,
    _why,
)

judge, answers = eighth.judge, eighth.answers  # the eighth review's fixtures: runs judged against the session Postgres

TOL_BOTH = {"hit@1": 0.05, "hit@10": 0.05}
TOL_HIT10 = {"hit@10": 0.05}


@pytest.mark.parametrize("metric", ["hit@1", "false_refusal_rate"], ids=["higher-is-better", "lower-is-better"])
@pytest.mark.parametrize("state", ["comparable", "paired"])
def test_a_gated_metric_nan_today_and_numeric_in_the_yardstick_fails(metric, state):
    """Held: nothing measured today of a metric the yardstick has fails its row (delta None), for a
    measure whose rise is the regression too, direct or paired."""
    from eval_pipeline.gates.retrieval import evaluate_gate

    gate = evaluate_gate({metric: float("nan")}, {metric: 0.1}, {metric: 0.05}, state, strict=False)
    assert not gate.passed and gate.rows[0]["passed"] is False, gate


def _ranked_today(hits: int):
    """A paired ranking that runs today's code: the reference's (same) configuration ranked on
    today's questions scores what today's run scores."""
    return lambda variant, reference: _second_rank_frame(variant, hits)


def _hit1_dropped_while_ungated(judge):
    judge("r1", "A", {"v": "good"}, frame=_second_rank_frame, tolerances=TOL_HIT10)  # hit@1 1.00
    step = judge("r2", "A", {"v": "good"}, hits={"v": 50}, frame=_second_rank_frame, tolerances=TOL_HIT10)
    assert step.gates["v"].passed, _why(step)  # hit@1 0.50, not gated: hit@10 stays 1.00


@pytest.mark.integration
def test_a_newly_gated_metric_is_judged_against_the_reference_on_the_same_benchmark(judge):
    """Held (the control): hit@1 gated from r3 on is judged against the pinned reference r1."""
    _hit1_dropped_while_ungated(judge)
    step = judge("r3", "A", {"v": "good"}, hits={"v": 50}, frame=_second_rank_frame, tolerances=TOL_BOTH)
    assert not step.gates["v"].passed, _why(step)


@pytest.mark.integration
def test_a_gated_metric_missing_from_the_drift_ledger_is_not_silently_skipped(judge):
    """The drift ledger r2 recorded holds hit@10 only (what it gated). r3 gates hit@1 too, on a
    changed benchmark: the paired ranking runs today's code (blind to r2's drop), and carried_drift
    drops hit@1 (``m in carried``), so the 0.50 fall from the reference is never seen; the whole
    ledger missing is not compared (the seventh review's rule), one metric of it missing passes."""
    _hit1_dropped_while_ungated(judge)
    step = judge("r3", "B", {"v": "good"}, hits={"v": 50}, frame=_second_rank_frame, tolerances=TOL_BOTH,
                 rank_reference=_ranked_today(50))
    assert not step.gates["v"].passed, _why(step)


@pytest.mark.integration
def test_a_reused_earlier_name_accepted_for_another_configuration_does_not_repin_the_renamed_variant(judge):
    """v (good) renamed w in r2; v comes back in r3 as another configuration (bad: hit@1 0.50),
    fails against v's own history and is accepted by name, as the README says. w's pinned reference
    is then looked up through its earlier name v (``earlier_names`` in judge_run) and found at r3's
    v, another configuration at 0.50: w slides 1.00 -> 0.88 in steps of 0.04, each within 0.05."""
    from eval_pipeline.history.runs import accept_reference

    judge("r1", "A", {"v": "good"})
    assert judge("r2", "A", {"w": "good"}).gates["w"].passed  # the rename: w inherits v's lineage
    back = judge("r3", "A", {"w": "good", "v": "bad"})
    assert back.gates["w"].passed and not back.gates["v"].passed, _why(back, "v")
    accept_reference(judge.uri, "r3", variants=["v"], prefix=judge.prefix)  # the new v's trade-off, accepted
    steps = [judge(run_id, "A", {"w": "good", "v": "bad"}, hits={"w": hits})
             for run_id, hits in (("r4", 96), ("r5", 92), ("r6", 88))]
    assert not all(step.gates["w"].passed for step in steps), [
        (step.reference["w"]["variant"], _why(step, "w")) for step in steps]


@pytest.mark.integration
def test_accepting_whole_a_run_that_regressed_beside_a_metric_missing_from_the_yardstick_is_refused(judge):
    """Held: evaluate_gate alone says ``not_compared`` (hit@10 absent from the yardstick) beside
    hit@1's measured drop, but ``_judge_against`` records the comparison's state (``comparable``),
    so accepting the run whole is refused."""
    from eval_pipeline.history.runs import accept_reference

    judge("r1", "A", {"v": "good"}, frame=_second_rank_frame, tolerances=TOL_BOTH)
    judge.sql("UPDATE {metrics} SET value = NULL WHERE run_id = %s AND metric = 'hit@10'", "r1")
    failed = judge("r2", "A", {"v": "good"}, hits={"v": 50}, frame=_second_rank_frame, tolerances=TOL_BOTH)
    assert not failed.gates["v"].passed, _why(failed)  # hit@1 1.00 -> 0.50 measured, hit@10 not in r1
    with pytest.raises(ValueError):
        accept_reference(judge.uri, "r2", prefix=judge.prefix)


@pytest.mark.integration
def test_accepting_whole_a_run_that_regressed_step_to_step_without_a_drift_ledger_is_refused(judge):
    from eval_pipeline.history.runs import accept_reference

    judge("r1", "A", {"v": "good"})
    assert judge("r2", "B", {"v": "good"}).gates["v"].passed  # paired against r1, drift recorded
    judge.sql("UPDATE {runs} SET provenance = provenance - 'drift' WHERE run_id = %s", "r2")  # older code
    failed = judge("r3", "B", {"v": "good"}, hits={"v": 50})  # 1.00 -> 0.50 against r2, on the same questions
    assert not failed.gates["v"].passed, _why(failed)
    with pytest.raises(ValueError):
        accept_reference(judge.uri, "r3", prefix=judge.prefix)


@pytest.mark.integration
def test_accepting_whole_a_run_that_regressed_from_its_previous_run_while_the_reference_moved_is_refused(judge):
    from eval_pipeline.history.runs import accept_reference

    judge("r1", "A", {"v": "good"})
    assert judge("r2", "A", {"v": "good"}, hits={"v": 97}).gates["v"].passed
    judge.sql("DELETE FROM {measurements} WHERE run_id = %s", "r1")  # the reference moved (eighth review: not compared)
    failed = judge("r3", "A", {"v": "good"}, hits={"v": 50})  # 0.97 -> 0.50 against r2, still in the history
    # fixed: the measured drop from r2 stays a measured failure (state comparable), the moved reference said
    assert not failed.gates["v"].passed and failed.gates["v"].state == "comparable", _why(failed)
    assert "not comparable with the pinned reference" in failed.gates["v"].message, _why(failed)
    with pytest.raises(ValueError):
        accept_reference(judge.uri, "r3", prefix=judge.prefix)


@pytest.mark.integration
def test_accepting_whole_an_answer_row_that_regressed_while_the_reference_moved_is_refused(answers):
    from eval_pipeline.history.answers import accept_answer_run

    assert answers("a0", {"bm25": 0.90}).passed
    assert answers("a1", {"bm25": 0.85}).passed
    answers.sql("DELETE FROM eval_measurements WHERE run_id = %s", "a0")
    gate = _answer_gate(answers("a2", {"bm25": 0.50}))  # -0.35 against a1, measured
    # fixed: the measured drop stays a measured failure, the moved reference said beside it
    assert not gate.passed and gate.state == "comparable", gate.message
    assert "not comparable with the pinned reference" in gate.message, gate.message
    accepted, _ = accept_answer_run(answers.uri, "a2")
    assert accepted == [], accepted


@pytest.mark.integration
@pytest.mark.parametrize("accepted", ["r3", "r2"], ids=["the-not-compared-run", "the-previous-run"])
def test_accepting_a_run_after_a_moved_reference_ends_it(judge, accepted):
    """Held: no loop once a run is accepted as the README says, whether the not-compared run or the
    older previous run (accepted after r3 was recorded: its acceptance is "since")."""
    from eval_pipeline.history.runs import accept_reference

    judge("r1", "A", {"v": "good"})
    assert judge("r2", "A", {"v": "good"}, hits={"v": 97}).gates["v"].passed
    judge.sql("DELETE FROM {measurements} WHERE run_id = %s", "r1")
    assert judge("r3", "A", {"v": "good"}, hits={"v": 97}).gates["v"].state == "not_compared"
    accept_reference(judge.uri, accepted, prefix=judge.prefix)
    for run_id in ("r4", "r5"):
        step = judge(run_id, "A", {"v": "good"}, hits={"v": 97})
        assert step.gates["v"].passed, _why(step)


@pytest.mark.integration
def test_accepting_an_answer_row_after_a_moved_reference_ends_it(answers):
    """Held: the answer side too (the not-compared row accepted, two rows after it pass)."""
    from eval_pipeline.history.answers import accept_answer_run

    assert answers("a0", {"bm25": 0.90}).passed
    assert answers("a1", {"bm25": 0.85}).passed
    answers.sql("DELETE FROM eval_measurements WHERE run_id = %s", "a0")
    assert not _answer_gate(answers("a2", {"bm25": 0.85})).passed
    assert accept_answer_run(answers.uri, "a2")[0] == [("bm25", "deterministic")]
    for run_id in ("a3", "a4"):
        gate = _answer_gate(answers(run_id, {"bm25": 0.85}))
        assert gate.passed, gate.message


def _answers_renamed(answers, run_id: str, rates: dict[str, float], configurations: dict[str, str], **renaming):
    """answers(...) with the variants' configurations given (a rename keeps one under a new name)."""
    from eval_pipeline.verdict.answers import judge_answer_run, record_answers

    verdict = judge_answer_run({v: _answer_frame(v, r) for v, r in rates.items()}, order=list(rates),
                               corpus_signature="corpus-1", tolerances=ANSWER_TOL, strict=False,
                               connection_string=answers.uri, run_id=run_id, configurations=configurations, **renaming)
    record_answers(verdict, answers.uri, run_id, run_eligible=verdict.passed)
    return verdict


@pytest.mark.integration
def test_a_reused_earlier_answer_name_accepted_for_another_configuration_does_not_repin_the_renamed_variant(answers):
    """The answer half of the rename attack: bm25 (cfg-x) renamed dense in a1; bm25 back in a2 as
    cfg-y at 0.50, failed and accepted by name; dense slides 0.90 -> 0.63 in steps of 0.09 (each
    within 0.1) against bm25's 0.50."""
    from eval_pipeline.history.answers import accept_answer_run

    assert _answers_renamed(answers, "a0", {"bm25": 0.90}, {"bm25": "cfg-x"}).passed
    assert _answers_renamed(answers, "a1", {"dense": 0.90}, {"dense": "cfg-x"}, vanished=["bm25"],
                            renamed={"dense"}).passed
    back = _answers_renamed(answers, "a2", {"dense": 0.90, "bm25": 0.50}, {"dense": "cfg-x", "bm25": "cfg-y"})
    assert _answer_gate(back, "dense").passed and not _answer_gate(back, "bm25").passed
    assert accept_answer_run(answers.uri, "a2", variants=["bm25"])[0] == [("bm25", "deterministic")]
    steps = [_answers_renamed(answers, run_id, {"dense": rate, "bm25": 0.50}, {"dense": "cfg-x", "bm25": "cfg-y"})
             for run_id, rate in (("a3", 0.81), ("a4", 0.72), ("a5", 0.63))]
    assert not all(_answer_gate(step, "dense").passed for step in steps), [
        _answer_gate(step, "dense").message for step in steps]


@pytest.mark.integration
def test_a_deleted_acceptance_does_not_fall_back_silently_when_the_benchmark_reverts(judge):
    """r1 on A (0.90) is the first reference; on B (questions edited) r2 is accepted (1.00) and r3
    judged against it. r2 deleted, and the edit reverted (A again): the previous run on A is r1,
    the first run, judged against none and now the reference again, so the exemption passes r4 at
    0.92 against r1, though the latest run r3 was judged against r2."""
    from eval_pipeline.history.runs import accept_reference

    judge("r1", "A", {"v": "good"}, hits={"v": 90})
    assert judge("r2", "B", {"v": "good"}).gates["v"].passed  # paired against r1's configuration ranked on B
    accept_reference(judge.uri, "r2", prefix=judge.prefix)
    assert judge("r3", "B", {"v": "good"}).reference["v"]["run_id"] == "r2"
    _delete_run(judge, "r2")
    step = judge("r4", "A", {"v": "good"}, hits={"v": 92})
    assert not step.gates["v"].passed, _why(step)
