"""The forty-fourth review of the verdict: 712dd4a (a gate left ``not_compared`` compared with every full
measurement recorded before under the variant's name, or of its configuration under a name gone from the
variants file since the latest acceptance, ``history.measurements._OWN_OR_RETIRED_NAME``, each with the stricter
of today's tolerances and those it was judged with) attacked for the class "a regression that passes, or is
accepted whole unnamed, because the yardstick moved or nothing was comparable".

Holes (all closed since, their tests plain):

1. the window "since the latest acceptance" of a retired name is ``m.seq > max(x.seq)`` over EVERY accepted
   measurement of the aspect, of any variant: accepting ANOTHER variant by name (``accept r1 --variant a``, a's
   deliberate drop) in the very run that recorded x moves it past x's row whenever x was recorded before a in
   that run (the variants file's order). x renamed y in r2 at 50/100: ``recorded_run_of`` (heirs, no window) says
   "recorded runs (the latest r1)", ``recorded_rows`` (windowed) reads nothing, so y is "nothing can judge it"
   and ``accept r2`` whole takes y at 0.50 beside x's 1.00 of the same configuration and benchmark. With a listed
   before x (a control, held) the same history shows the drop and refuses the whole acceptance.
   1b: the same with the acceptance of a in a LATER run that no longer listed x (x left the file unreported: never
   known, ``vanished`` empty, so its removal was never acknowledged): y is "never recorded" (false), first_run,
   PASSED at 0.50 (fails open);
2. the answer side of 1, FAILING OPEN: an answers-only acceptance of another variant (``accept r1 --variant a
   --answers-only``) moves the answer window past x's row; y (x renamed, its retrieval not an heir: x was never
   known) is looked up by name, ``answer_recorded_elsewhere`` (windowed) finds nothing: "a new measurement ... its
   first run", PASSED at 0.50 beside x's 0.90 of the same set, corpus, yardstick and configuration;
3. the answer side of 1 with the whole named acceptance of a (retrieval and answers): y's answers are "recorded
   runs (the latest r1)" (found through the heir, no window) but ``recorded_answer_rows`` (windowed) reads
   nothing: not compared, and ``accept_run r2`` whole takes y's 0.50;
4. a gated metric DROPPED in the same run as its drop: ``_shown_against_recorded`` pins the recorded run's
   tolerances (hit@1 0.05) but keeps only ``m in current``, and ``current`` holds only today's gated metrics
   (``effective``: no yardstick, and the project's gate in force never gated hit@1): x's hit@1 1.00 -> 0.50
   (mrr within its 0.3) is not compared with r1, nothing is shown, ``accept r2`` whole takes it. The loosening
   itself is not named either (``verdict.loosened`` empty). ``pinned_tolerances`` documents "a gated metric
   dropped ... would let it through"; the filter undoes exactly that. With hit@1 still gated (control, held) the
   drop is shown and the whole acceptance refused.

Closed: the retired name's rows are read with no window (``_OWN_OR_RETIRED_NAME``): an acceptance acknowledges
what it was shown, and a name never known was never shown gone, so no acceptance of another variant hides it;
the same configuration on the same benchmark is the same measurement under any name (fail closed: re-adding a
retired configuration under a new name needs one acceptance). 4: the recorded run is compared on every metric it
pinned that today's summary row has (``_shown_against_recorded(measured=...)``), gated today or not.

Held (plain tests): 1-3's controls (the other variant listed first: the drop shown, the whole acceptance
refused); 4's control; a retired name's recorded run is judged with ITS tolerances (keyed by its name), on both
sides: a loosening in the rename run does not hide the drop; two live variants sharing the retired configuration
both read it (the one that dropped is measured, the other not compared without a false drop); a live variant
with the same configuration is not read as a retired one; an acceptance of a run that never measured the aspect
(answers-only of a run) does not move the retrieval window. Noted (a fact, by design): a rename that also
changes the configuration, of a variant never known, is a first run (nothing links the names).
"""

from __future__ import annotations

import json

import pytest

from tests.unit.verdict import test_answer_accept_attacks as atk17
from tests.unit.verdict import test_verdict_attacks_eighth as eighth
from tests.unit.verdict import test_verdict_attacks_fortieth as fortieth
from tests.unit.verdict.test_verdict_attacks_eighth import ANSWER_TOL
from tests.verdict_frames import answer_frame_with, scored_frame

answers = eighth.answers  # a fresh default answer history under the tests' lock
history = atk17.history  # a run judged as the verdict asset does, recorded as the report does
judge = fortieth.judge  # judge_run recording under a table prefix of its own; judge.accept

pytestmark = pytest.mark.integration

N = 100
GRADER = "deterministic"
LOOSE = {"max_pass_rate_drop": 0.5, "max_mean_score_drop": 0.5}


@pytest.fixture
def ranked(judge):
    """The fortieth review's ``judge`` on benchmark A with the tolerances of each run given (and its
    ``hits`` or ``frames``); ``ranked.accept`` is ``accept_reference``."""

    def run(run_id, configs, *, tolerances, **frames):
        return judge(run_id, "A", configs, tolerances=tolerances, **frames)

    run.accept = judge.accept
    return run


def _as_x(rate):
    """y's grades with x's configuration as ranked (x renamed to y: only the name moved)."""
    return {GRADER: {"pass_rate": rate, "variant_config": json.dumps({"engine": "x"})}}


def _pairs(first: str, one: str, other: str, one_value, other_value) -> dict:
    """{one: one_value, other: other_value} in the order ``first`` (``one``'s name or another) gives."""
    pairs = [(one, one_value), (other, other_value)]
    return dict(pairs if first == one else pairs[::-1])


def _measured(gate, base: str, now: str) -> None:
    assert not gate.passed and gate.state == "comparable", gate.message
    assert f"{base} -> {now}" in gate.message, gate.message


# ---------------------------------------------------------------------------------------------------------
# 1. another variant's acceptance moves the retired name's window (retrieval)
# ---------------------------------------------------------------------------------------------------------


def _another_accepted(judge, first: str):
    """r0 {a}; r1 adds x (1.00) while a regresses (0.50): r1 not eligible; a's drop accepted BY NAME."""
    assert judge("r0", "A", {"a": "ka"}).passed
    r1 = judge("r1", "A", _pairs(first, "x", "a", "kx", "ka"), hits={"a": 50})
    assert not r1.eligible and r1.gates["x"].passed and not r1.gates["a"].passed
    assert judge.accept("r1", variants=["a"]) == ["a"]


def _renamed_drop(judge, first: str):
    r2 = judge("r2", "A", _pairs("y" if first == "x" else first, "y", "a", "kx", "ka"), hits={"a": 50, "y": 50})
    return r2.gates["y"]


def test_another_variant_accepted_by_name_in_the_same_run_hides_the_renamed_drop(judge):
    from eval_pipeline.history.runs import NameTheRun

    _another_accepted(judge, "x")
    gate = _renamed_drop(judge, "x")
    assert "the latest r1" in gate.message, gate.message  # recorded_run_of (through the heir) sees r1
    _measured(gate, "1.0000", "0.5000")
    with pytest.raises(NameTheRun, match="--variant y"):
        judge.accept("r2")


def test_an_acceptance_of_another_variant_after_x_left_makes_its_renamed_drop_a_passing_first_run(judge):
    assert judge("r0", "A", {"a": "ka"}).passed
    assert not judge("r1", "A", {"a": "ka", "x": "kx"}, hits={"a": 50}).eligible
    r2 = judge("r2", "A", {"a": "ka"}, hits={"a": 50})  # x left the file: nothing says so (never known)
    assert r2.vanished == [] and "'x'" not in " ".join(g.message for g in r2.gates.values())
    assert judge.accept("r2", variants=["a"]) == ["a"]  # a's drop, deliberately
    gate = judge("r3", "A", {"a": "ka", "y": "kx"}, hits={"a": 50, "y": 50}).gates["y"]
    _measured(gate, "1.0000", "0.5000")


def test_held_control_1_with_a_listed_first_the_renamed_drop_is_measured(judge):
    from eval_pipeline.history.runs import NameTheRun

    _another_accepted(judge, "a")
    _measured(_renamed_drop(judge, "a"), "1.0000", "0.5000")
    with pytest.raises(NameTheRun, match="--variant y"):
        judge.accept("r2")


# ---------------------------------------------------------------------------------------------------------
# 2, 3. the same window on the answer side
# ---------------------------------------------------------------------------------------------------------


def _answers_of_another_accepted(history, first: str, *, answers_only: bool):
    """r0 {a}; r1 adds x (answers 0.90) while a's retrieval regresses: r1 not eligible; a accepted by name (its
    answers alone, or the whole of a)."""
    from eval_pipeline.history.answers import accept_run

    history("r0", {"a": 40}, {"a": 0.9})
    r1 = history("r1", _pairs(first, "x", "a", 40, 30), {"x": 0.9, "a": 0.9})
    assert not r1.eligible and r1.answers.gates["x"][GRADER].passed
    taken = accept_run(history.uri, "r1", variants=["a"], answers_only=answers_only)
    assert taken.answers == [("a", GRADER)] and taken.retrieval == ([] if answers_only else ["a"]), taken


def _renamed_answers(history, first: str, *, answers_only: bool):
    """r2: x renamed y (its configuration), y answers 0.50; a's retrieval as its pinned reference has it."""
    hits = _pairs("y" if first == "x" else first, "y", "a", 40, 40 if answers_only else 30)
    return history("r2", hits, {"y": _as_x(0.5), "a": 0.9}, configs={"y": "x"})


def test_an_answers_only_acceptance_of_another_variant_makes_the_renamed_answer_drop_a_passing_first_run(history):
    _answers_of_another_accepted(history, "x", answers_only=True)
    r2 = _renamed_answers(history, "x", answers_only=True)
    _measured(r2.answers.gates["y"][GRADER], "0.9000", "0.5000")


def test_a_named_acceptance_of_another_variant_hides_the_renamed_answer_drop(history):
    from eval_pipeline.history.answers import accept_run

    _answers_of_another_accepted(history, "x", answers_only=False)
    r2 = _renamed_answers(history, "x", answers_only=False)
    gate = r2.answers.gates["y"][GRADER]
    assert "the latest r1" in gate.message, gate.message
    _measured(gate, "0.9000", "0.5000")
    assert ("y", GRADER) not in accept_run(history.uri, "r2").answers


@pytest.mark.parametrize("answers_only", [True, False])
def test_held_control_2_3_with_a_listed_first_the_renamed_answer_drop_is_measured(history, answers_only):
    from eval_pipeline.history.answers import accept_run

    _answers_of_another_accepted(history, "a", answers_only=answers_only)
    r2 = _renamed_answers(history, "a", answers_only=answers_only)
    _measured(r2.answers.gates["y"][GRADER], "0.9000", "0.5000")
    assert ("y", GRADER) not in accept_run(history.uri, "r2", variants=["a"]).answers


# ---------------------------------------------------------------------------------------------------------
# 4. a gated metric dropped in the same run
# ---------------------------------------------------------------------------------------------------------


def _metric_dropped(ranked, today):
    """r0 {a} gated on mrr (0.3); r1 gates hit@1 too and adds x (1.00) while a's mrr drops: not eligible. r2 gates
    ``today``: x finds half its golds at rank 2 (hit@1 1.00 -> 0.50, mrr 1.00 -> 0.75, within 0.3)."""
    assert ranked("r0", {"a": "ka"}, tolerances={"mrr": 0.3}).passed
    r1 = ranked("r1", {"a": "ka", "x": "kx"}, hits={"a": 50}, tolerances={"hit@1": 0.05, "mrr": 0.3})
    assert not r1.eligible and r1.gates["x"].passed
    return ranked("r2", {"a": "ka", "x": "kx"}, frames={"x": scored_frame("x", 50, N, second=50)}, tolerances=today)


def test_a_gated_metric_dropped_in_the_same_run_does_not_hide_its_drop_from_the_recorded_run(ranked):
    from eval_pipeline.history.runs import NameTheRun

    r2 = _metric_dropped(ranked, {"mrr": 0.3})
    _measured(r2.gates["x"], "1.0000", "0.5000")
    with pytest.raises(NameTheRun, match="--variant x"):
        ranked.accept("r2")


def test_held_control_4_with_the_metric_still_gated_the_drop_is_measured(ranked):
    from eval_pipeline.history.runs import NameTheRun

    r2 = _metric_dropped(ranked, {"hit@1": 0.05, "mrr": 0.3})
    _measured(r2.gates["x"], "1.0000", "0.5000")
    with pytest.raises(NameTheRun, match="--variant x"):
        ranked.accept("r2")


# ---------------------------------------------------------------------------------------------------------
# held
# ---------------------------------------------------------------------------------------------------------


def test_held_a_retired_name_s_run_is_judged_with_its_own_tolerances_retrieval(ranked):
    """x judged at 0.05 in r1 (ineligible); r2 renames x to y and loosens to 0.6: y's 0.50 is compared with x's r1
    at 0.05 (its ``effective_tolerances`` read under ITS name)."""
    loose = {"hit@1": 0.6, "mrr": 0.6}
    assert ranked("r0", {"a": "ka"}, tolerances=loose).passed
    r1 = ranked("r1", {"a": "ka", "x": "kx"}, hits={"a": 30}, tolerances={"hit@1": 0.05, "mrr": 0.05})
    assert not r1.eligible and r1.gates["x"].passed
    r2 = ranked("r2", {"a": "ka", "y": "kx"}, hits={"y": 50}, tolerances=loose)
    _measured(r2.gates["y"], "1.0000", "0.5000")


def test_held_a_retired_name_s_row_is_judged_with_its_own_tolerances_answers(answers):
    from eval_pipeline.verdict.answers import judge_answer_run, record_answers

    def run(run_id, variant, rate, tolerances, eligible):
        frame = answer_frame_with(variant, rate, variant_config=json.dumps({"engine": "x"}))
        verdict = judge_answer_run({variant: frame}, order=[variant], corpus_signature="corpus-1",
                                   tolerances=tolerances, strict=False, connection_string=answers.uri, run_id=run_id,
                                   configurations={variant: "cfg-x"})
        record_answers(verdict, answers.uri, run_id, run_eligible=eligible)
        return verdict.gates[variant][GRADER]

    assert run("a0", "x", 0.9, ANSWER_TOL, False).passed
    _measured(run("a1", "y", 0.5, LOOSE, True), "0.9000", "0.5000")


def test_held_two_live_variants_sharing_the_retired_configuration_both_read_it(judge):
    """x (kx) recorded in r1, never eligible; r2 lists y and z both with x's configuration: y (0.50) is measured
    against x's r1, z (1.00) is not compared with no false drop."""
    assert judge("r0", "A", {"a": "ka"}).passed
    assert not judge("r1", "A", {"a": "ka", "x": "kx"}, hits={"a": 50}).eligible
    r2 = judge("r2", "A", {"a": "ka", "y": "kx", "z": "kx"}, hits={"y": 50})
    _measured(r2.gates["y"], "1.0000", "0.5000")
    z = r2.gates["z"]
    assert not z.passed and z.state == "not_compared" and "->" not in z.message, z.message


def test_held_a_live_variant_with_the_same_configuration_is_not_read_as_retired(judge):
    """x (kx) lives on beside y (kx, new): y is a first run, never compared with live x's numbers."""
    assert judge("r0", "A", {"a": "ka", "x": "kx"}).passed
    r1 = judge("r1", "A", {"a": "ka", "x": "kx", "y": "kx"}, hits={"y": 50})
    assert r1.gates["y"].passed and r1.gates["y"].state == "first_run", r1.gates["y"].message
    assert r1.gates["x"].passed and r1.gates["x"].state == "comparable", r1.gates["x"].message


def test_held_an_answers_only_acceptance_does_not_move_the_retrieval_window(history):
    """a's answers accepted alone in r1: x's retrieval row stays read for y (x renamed) in r2."""
    _answers_of_another_accepted(history, "x", answers_only=True)
    r2 = history("r2", {"y": 20, "a": 40}, {"y": _as_x(0.9), "a": 0.9}, configs={"y": "x"})
    _measured(r2.gates["y"], "1.0000", "0.5000")


def test_noted_a_rename_that_also_changes_the_configuration_of_a_never_known_variant_is_a_first_run(judge):
    """By design: nothing links y (kz) to x (kx, never eligible): a genuinely new variant."""
    assert judge("r0", "A", {"a": "ka"}).passed
    assert not judge("r1", "A", {"a": "ka", "x": "kx"}, hits={"a": 50}).eligible
    gate = judge("r2", "A", {"a": "ka", "y": "kz"}, hits={"y": 50}).gates["y"]
    assert gate.passed and gate.state == "first_run", gate.message


@pytest.mark.parametrize("live", [None, ["x", "y"]])
def test_a_variant_listed_but_not_measured_today_is_not_a_retired_name_on_the_answer_side(answers, live):
    """x and y share a configuration and are both in the variants file; x's answers (0.90) were recorded in
    a0, not eligible. a1 measures y alone (x's partition not materialized today), judged as the whole job judges
    it (``renamed``: no rename found): y is new. With ``live`` the variants file's names (what
    ``complete_verdict`` passes, the retrieval side's ``sweep_keys``), x is live and its row is not y's: y passes
    as a first run. Without (``live`` defaults to the variants measured today), x counts as retired: y is not
    new and x's 0.90 is shown as y's drop."""
    from eval_pipeline.verdict.answers import judge_answer_run, record_answers

    def run(run_id, variant, rate, **settings):
        frame = answer_frame_with(variant, rate, variant_config=json.dumps({"engine": "x"}))
        verdict = judge_answer_run({variant: frame}, order=[variant], corpus_signature="corpus-1",
                                   tolerances=ANSWER_TOL, strict=False, connection_string=answers.uri, run_id=run_id,
                                   configurations={variant: "cfg-x"}, renamed=set(), **settings)
        record_answers(verdict, answers.uri, run_id, run_eligible=False)
        return verdict.gates[variant][GRADER]

    assert run("a0", "x", 0.9).passed
    gate = run("a1", "y", 0.5, live=live)
    if live is None:
        _measured(gate, "0.9000", "0.5000")
    else:
        assert gate.passed and gate.state == "first_run", gate.message
