"""The forty-fifth review of the verdict: 712dd4a, c31a138, 1299ca1 (a gate left ``not_compared`` compared with
every full measurement recorded before under the variant's name, or of its configuration under a name not in
today's variants file, with no acceptance window, ``history.measurements._OWN_OR_RETIRED_NAME``; each with the
stricter of today's tolerances and those it was judged with, on every metric it pinned that today's summary row
has) attacked for "a regression that passes, or is accepted whole unnamed", and for false refusals.

No regression found passing or accepted whole unnamed. Holes (both fail closed; both closed since, their tests plain):

1. a message that misleads (retrieval and answers): a retired configuration re-added under a new name after the
   old name's removal was accepted whole is "not new" (by design: one acceptance), but its not-compared message
   says "'y' has recorded runs (the latest r0) but none was eligible or accepted": y never ran, r0 is x's and
   WAS eligible. The user is not told the refusal comes from x's runs, so a new variant's refusal is unexplained
   (the drop's message, when there is one, does not name x either: "against run r0, which recorded it").
2. a false measured drop: a run that finds every gold at rank 1 (rc_nauc NaN) is judged against a recorded run's
   pinned rc_nauc as "dropped more than tolerated: rc_nauc 0.0000 -> –", so an improvement is a measured
   regression and the whole acceptance is refused, also with rc_nauc dropped from today's gate. The gate's rule
   (a live yardstick says the same of a perfect run), now reached from every recorded run; one named acceptance
   ends it. rc_nauc is NaN whenever random equals oracle, after a run that missed every question as much as
   after a perfect one, so a NaN cannot be read as "no drop" without another metric saying which.

Closed: 1's messages name the retired name (``without_yardstick(recorded_as=...)``: "its configuration was recorded
as 'x' (the latest run r0), a name gone from the variants file"; the drop "against run r0, which recorded it on this
benchmark as 'x'"). 2: the measure says which from the run's own row (``Measure.nan_at_best``: rc_nauc's aurc
exactly 0, nothing lost), and the gate passes such a row with no delta, saying why, on every comparison (the live
yardstick too); a NaN after a run that lost everything (aurc 1) still fails its row (the control).

Held (plain tests): naming the variant (the way out the refusal names) ends the refusal on the next run, on the
retrieval side (``accept r2 --variant y``) and the answer side (``--answers-only`` and the whole acceptance naming
y), twice in a row: the retired name's old drop is not shown again; ``latest`` whole is refused as r2 and
``latest`` naming a variant is refused naming r2; two retired names of one configuration at different values (the
older, higher one shown, one acceptance ends it); a retired name measured only on another benchmark is not
compared (no drop claimed); a retired configuration re-added after its removal was accepted: its drop shown
against the old run, the whole acceptance refused, one acceptance naming it ends it (and without a drop, one whole
acceptance ends it, on both sides).
"""

from __future__ import annotations

import json

import pytest

from tests.unit.verdict import test_answer_accept_attacks as atk17
from tests.unit.verdict import test_verdict_attacks_eighth as eighth
from tests.unit.verdict import test_verdict_attacks_fortieth as fortieth
from tests.unit.verdict import test_verdict_attacks_fortyfourth as fortyfourth

answers = eighth.answers  # a fresh default answer history under the tests' lock
history = atk17.history  # a run judged as the verdict asset does, recorded as the report does
judge = fortieth.judge  # judge_run recording under a table prefix of its own; judge.accept
ranked = fortyfourth.ranked  # judge with frames and tolerances given; ranked.accept

pytestmark = pytest.mark.integration

GRADER = "deterministic"
TOL_RC = {"hit@1": 0.05, "rc_nauc": 0.05}


def _as_x(rate):
    """y's grades with x's configuration as ranked (x renamed to y: only the name moved)."""
    return {GRADER: {"pass_rate": rate, "variant_config": json.dumps({"engine": "x"})}}


def _measured(gate, base: str, now: str) -> None:
    assert not gate.passed and gate.state == "comparable", gate.message
    assert f"{base} -> {now}" in gate.message, gate.message


def _passed(gate) -> None:
    assert gate.passed and gate.state == "comparable", gate.message


def _x_never_known(judge):
    """r0 {a}; r1 adds x (kx, every gold at rank 1) while a regresses: r1 not eligible, x never known."""
    assert judge("r0", "A", {"a": "ka"}).passed
    r1 = judge("r1", "A", {"a": "ka", "x": "kx"}, hits={"a": 50})
    assert not r1.eligible and r1.gates["x"].passed


# ---------------------------------------------------------------------------------------------------------
# the way out the refusal names: does it end it? (retrieval)
# ---------------------------------------------------------------------------------------------------------


def test_held_naming_the_renamed_variant_ends_the_refusal_retrieval(judge):
    from eval_pipeline.history.runs import NameTheRun

    _x_never_known(judge)
    r2 = judge("r2", "A", {"a": "ka", "y": "kx"}, hits={"y": 50})
    _measured(r2.gates["y"], "1.0000", "0.5000")
    assert r2.accept_command == "python -m eval_pipeline.history accept r2 --variant y", r2.accept_command
    with pytest.raises(NameTheRun, match="accept r2 --variant y"):
        judge.accept("r2")
    assert judge.accept("r2", variants=["y"]) == ["y"]
    r3 = judge("r3", "A", {"a": "ka", "y": "kx"}, hits={"y": 50})
    _passed(r3.gates["y"])
    r4 = judge("r4", "A", {"a": "ka", "y": "kx"}, hits={"y": 50})
    _passed(r4.gates["y"])


def test_held_two_retired_names_of_one_configuration_at_different_values(judge):
    """x1 (kx) 1.00 in r1, x2 (kx) 0.60 in r2, both never eligible; y (kx) 0.60 in r3: the older, higher x1 run
    is shown (fail closed), one acceptance naming y ends it."""
    _x_never_known(judge)  # x is x1
    r2 = judge("r2", "A", {"a": "ka", "x2": "kx"}, hits={"a": 50, "x2": 60})
    _measured(r2.gates["x2"], "1.0000", "0.6000")
    r3 = judge("r3", "A", {"a": "ka", "y": "kx"}, hits={"a": 50, "y": 60})
    _measured(r3.gates["y"], "1.0000", "0.6000")
    assert judge.accept("r3", variants=["y"]) == ["y"]
    _passed(judge("r4", "A", {"a": "ka", "y": "kx"}, hits={"a": 50, "y": 60}).gates["y"])


def test_held_a_retired_name_on_another_benchmark_is_not_compared(judge):
    """x (kx) measured only on benchmark B; y (kx) on A at 0.50: no drop is claimed from x's B run."""
    assert judge("r0", "B", {"a": "ka"}).passed
    assert not judge("r1", "B", {"a": "ka", "x": "kx"}, hits={"a": 50}).eligible
    gate = judge("r2", "A", {"a": "ka", "y": "kx"}, hits={"y": 50}).gates["y"]
    assert "1.0000 -> 0.5000" not in gate.message, gate.message
    assert gate.state != "comparable", gate.message


def test_held_a_retired_configuration_re_added_after_its_removal_was_accepted(judge):
    """x (kx) known and eligible in r0; removed in r1, the removal accepted whole; y (kx) re-added in r2 at 0.50:
    the drop from x's r0 is shown, the message names x's run; one acceptance naming y ends it."""
    from eval_pipeline.history.runs import NameTheRun

    assert judge("r0", "A", {"a": "ka", "x": "kx"}).passed
    r1 = judge("r1", "A", {"a": "ka"})
    assert r1.vanished == ["x"], r1.vanished
    judge.accept("r1")
    r2 = judge("r2", "A", {"a": "ka", "y": "kx"}, hits={"y": 50})
    gate = r2.gates["y"]
    _measured(gate, "1.0000", "0.5000")
    assert "r0" in gate.message, gate.message
    with pytest.raises(NameTheRun, match="--variant y"):
        judge.accept("r2")
    assert judge.accept("r2", variants=["y"]) == ["y"]
    _passed(judge("r3", "A", {"a": "ka", "y": "kx"}, hits={"y": 50}).gates["y"])


# ---------------------------------------------------------------------------------------------------------
# the message of a retired configuration re-added after its removal was accepted
# ---------------------------------------------------------------------------------------------------------


def test_a_re_added_retired_configuration_is_told_whose_eligible_run_it_is(judge):
    """x (kx) eligible in r0; its removal accepted whole in r1; y (kx) re-added in r2 without a drop. y is "not new"
    (fail closed, by design: one acceptance). Its message says "'y' has recorded runs (the latest r0) but none was
    eligible or accepted ... it is not new": y never ran, r0 is x's and WAS eligible; a user looking r0 up finds no
    y and an eligible run, and cannot tell why a new variant is refused."""
    assert judge("r0", "A", {"a": "ka", "x": "kx"}).passed
    assert judge("r1", "A", {"a": "ka"}).vanished == ["x"]
    judge.accept("r1")
    gate = judge("r2", "A", {"a": "ka", "y": "kx"}).gates["y"]
    assert not gate.passed and gate.state == "not_compared", gate.message
    assert "'x'" in gate.message and "none was eligible" not in gate.message, gate.message


# ---------------------------------------------------------------------------------------------------------
# a pinned metric NaN today (rc_nauc of a run that found every gold at rank 1)
# ---------------------------------------------------------------------------------------------------------


def _perfect_after_recorded(ranked, today):
    """r0 {a} gated on hit@1 and rc_nauc; r1 adds x at 90 found (rc_nauc a number) while a drops: x never known.
    r2: x finds every gold at rank 1 (hit@1 0.90 -> 1.00, rc_nauc NaN: random == oracle), gated on ``today``."""
    assert ranked("r0", {"a": "ka"}, tolerances=TOL_RC).passed
    r1 = ranked("r1", {"a": "ka", "x": "kx"}, hits={"a": 50, "x": 90}, tolerances=TOL_RC)
    assert not r1.eligible and r1.gates["x"].passed
    return ranked("r2", {"a": "ka", "x": "kx"}, tolerances=today)


@pytest.mark.parametrize("today", [TOL_RC, {"hit@1": 0.05}], ids=["rc_nauc-gated", "rc_nauc-dropped"])
def test_a_perfect_run_is_not_a_measured_drop_from_a_recorded_run(ranked, today):
    """x improves 0.90 -> 1.00; its rc_nauc is undefined (random == oracle). Against x's recorded r1 the pinned
    rc_nauc row fails (NaN today): "FAILED: dropped more than tolerated: rc_nauc 0.0000 -> – (delta –)", a measured
    regression, so the whole acceptance is refused and the variant must be named. With rc_nauc dropped from today's
    gate too (the project's pin and r1's keep it). Fail closed, and one named acceptance ends it; the normal
    comparable path (a live yardstick) says the same of a perfect run, so this is the gate's rule, not the new
    lookup's, reached now from every recorded run."""
    r2 = _perfect_after_recorded(ranked, today)
    gate = r2.gates["x"]
    assert "rc_nauc 0.0000 -> \u2013" not in gate.message, gate.message
    ranked.accept("r2")


def test_a_perfect_run_passes_against_a_live_yardstick_that_measured_rc_nauc(judge):
    """The comparable path: r1 finds 90 of 100 golds (rc_nauc a number), r2 all of them: rc_nauc undefined (every
    loss 0, aurc 0: no confidence could do better). Its row passes against r1, the message says why, the gate
    passes and the next run is judged against r2."""
    assert judge("r1", "A", {"v": "k"}, hits={"v": 90}, tolerances=TOL_RC).passed
    r2 = judge("r2", "A", {"v": "k"}, tolerances=TOL_RC)
    _passed(r2.gates["v"])
    assert "rc_nauc undefined today: the run is at its best" in r2.gates["v"].message, r2.gates["v"].message
    assert r2.passed and r2.eligible


def test_a_run_that_missed_everything_still_fails_its_nan_rc_nauc(judge):
    """The control: r2 misses every question, rc_nauc NaN too (every loss 1, aurc 1): not at its best, so its
    row fails a comparable gate gated on rc_nauc alone, as a measured failure."""
    assert judge("r1", "A", {"v": "k"}, hits={"v": 90}, tolerances={"rc_nauc": 0.05}).passed
    gate = judge("r2", "A", {"v": "k"}, hits={"v": 0}, tolerances={"rc_nauc": 0.05}).gates["v"]
    assert not gate.passed and gate.state == "comparable", gate.message
    assert "rc_nauc 0.0000 -> \u2013" in gate.message and "undefined today" not in gate.message, gate.message


# ---------------------------------------------------------------------------------------------------------
# the answer side: the way out the refusal names
# ---------------------------------------------------------------------------------------------------------


def _renamed_answer_drop(history):
    """r0 {a}; r1 adds x (answers 0.90) while a's retrieval regresses: x never known; r2 renames x to y (x's
    configuration), y answers 0.50: measured against x's r1."""
    history("r0", {"a": 40}, {"a": 0.9})
    r1 = history("r1", {"a": 30, "x": 40}, {"a": 0.9, "x": 0.9})
    assert not r1.eligible and r1.answers.gates["x"][GRADER].passed
    r2 = history("r2", {"a": 40, "y": 40}, {"a": 0.9, "y": _as_x(0.5)}, configs={"y": "x"})
    _measured(r2.answers.gates["y"][GRADER], "0.9000", "0.5000")
    return r2


@pytest.mark.parametrize("answers_only", [True, False], ids=["answers-only", "whole-named"])
def test_held_naming_the_renamed_variant_ends_the_answer_refusal(history, answers_only):
    from eval_pipeline.history.answers import accept_run
    from eval_pipeline.history.runs import NameTheRun, resolve_run_id

    _renamed_answer_drop(history)
    latest = resolve_run_id(history.uri, "latest")
    assert latest == "r2"
    assert ("y", GRADER) not in accept_run(history.uri, latest, answers_only=True).answers  # whole: refused
    with pytest.raises(NameTheRun, match="r2"):  # `latest` naming a variant: refused, naming the run
        resolve_run_id(history.uri, "latest", naming=["y"])
    taken = accept_run(history.uri, "r2", variants=["y"], answers_only=answers_only)
    assert ("y", GRADER) in taken.answers, taken
    for run_id in ("r3", "r4"):
        r = history(run_id, {"a": 40, "y": 40}, {"a": 0.9, "y": _as_x(0.5)}, configs={"y": "x"})
        _passed(r.answers.gates["y"][GRADER])


def test_a_re_added_retired_configuration_is_told_whose_eligible_row_it_is_answers(history):
    """x eligible in r0 (answers 0.90), its removal accepted whole in r1, y (x's configuration) re-added in r2 at
    0.90: not compared, "the deterministic grading of 'y' has recorded runs (the latest r0) but none was eligible or
    accepted"; one acceptance ends it (r3 passes, held)."""
    from eval_pipeline.history.answers import accept_run

    assert history("r0", {"a": 40, "x": 40}, {"a": 0.9, "x": 0.9}).eligible
    assert history("r1", {"a": 40}, {"a": 0.9}).vanished == ["x"]
    accept_run(history.uri, "r1")
    r2 = history("r2", {"a": 40, "y": 40}, {"a": 0.9, "y": _as_x(0.9)}, configs={"y": "x"})
    gate = r2.answers.gates["y"][GRADER]
    assert not gate.passed and gate.state == "not_compared", gate.message
    taken = accept_run(history.uri, "r2")
    assert ("y", GRADER) in taken.answers and "y" in taken.retrieval, taken
    r3 = history("r3", {"a": 40, "y": 40}, {"a": 0.9, "y": _as_x(0.9)}, configs={"y": "x"})
    _passed(r3.answers.gates["y"][GRADER])
    _passed(r3.gates["y"])
    assert "'x'" in gate.message and "none was eligible" not in gate.message, gate.message
