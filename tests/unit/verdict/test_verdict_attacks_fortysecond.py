"""The forty-second review of the verdict: the forty-first review's fixes (7f7ec4e) attacked, the class
"a drop recorded ``not_compared``" (accepting the run whole takes it unseen: ``retrieval_to_accept``
refuses a whole acceptance only for a measured failure).

A variant with recorded runs and no yardstick (``ever`` None, ``recorded`` set) is now compared with its
latest recorded run (``_shown_against_recorded``) when that run measured today's benchmark. Holes:

1. only the latest recorded run: a regression in steps across two ineligible runs (each step within
   tolerance, the sum not) stays "nothing can judge it", not compared, accepted whole;
2. only the latest recorded run, and only when it measured today's benchmark: a run in between on
   another benchmark (a question edit, reverted) hides the earlier run of today's benchmark;
3. a drop shown once (r2 ``comparable`` against r1) is forgotten by the next run: r3's latest recorded
   run is r2, with the same low numbers, so r3 is "nothing can judge it" and accepted whole;
4. only without any yardstick: a yardstick of another benchmark and engine (nothing pairs) hides a
   recorded (ineligible) run of today's benchmark;
5. the answer side has no such comparison at all: a measurement whose rows were all ineligible is
   "nothing can judge it" and accepted whole beside a row of the same key;
6. a variant whose only run was ineligible is not ``known`` (``project_history``): renamed with its
   configuration, the new name PASSES as a first run ("never recorded, and no vanished variant had its
   configuration": false on both counts), the run eligible, the drop its pinned reference;
7. ``retrieval_changes`` leaves out ``tuned`` whole: what the tuning chose (a setting the answers'
   context was ranked with) is named nowhere when it moves with a golden-set edit;
8. the report of the 7f7ec4e fix itself crashes: the gate rows of a drop shown against the latest
   recorded run have no ``against`` (``report._gate_section``, ``run.variant_gate_checks``: KeyError).

Holes 1-4 and 6-8 are closed and their tests plain: a gate left ``not_compared`` by nothing comparable is
compared with every run that recorded the variant (under its name, or the name it had when renamed before
any run of it was eligible: ``history.runs.recorded_as_another``) on today's benchmark, newest first, and a
drop from any is the measured failure (its rows ``against: recorded``), whatever branch left it not compared;
a configuration recorded since the latest acceptance under a name gone from the variants file is not new;
what a tuning chose is compared, its scores are not. Hole 5 (the answer side) is closed the same way: an
answer gate left ``not_compared`` is compared with every row of its key (set, corpus, yardstick) recorded
before, eligible or not (``history.answers.recorded_answer_rows``, ``gates.answers.shown_against_recorded``).

Judged like the forty-first review's: ``judge_run(record=True)`` under a table prefix of its own (the
fortieth review's ``judge`` fixture).
"""

from __future__ import annotations

import pytest

from tests.unit.verdict import test_verdict_attacks_eighth as eighth
from tests.unit.verdict import test_verdict_attacks_fortieth as fortieth

answers = eighth.answers  # a fresh default answer history under the tests' lock
judge = fortieth.judge  # judge_run recording under a table prefix of its own; judge.accept

pytestmark = pytest.mark.integration


def _ineligible_first_run(judge):
    """r0 {a}; r1 adds x (1.00, its gate passes) while a regresses: r1 not eligible, x no yardstick."""
    assert judge("r0", "A", {"a": "ka"}).passed
    r1 = judge("r1", "A", {"a": "ka", "x": "kx"}, hits={"a": 50})
    assert not r1.gates["a"].passed and r1.gates["x"].passed and not r1.eligible


def _shown_and_refused(judge, run_id: str, *, hits: int, drop: str) -> None:
    """Run ``run_id`` with x at ``hits`` of 100: x's hit@1 ``drop`` is shown as the measured failure
    (``comparable``), and ``accept run_id`` whole refuses it."""
    gate = judge(run_id, "A", {"a": "ka", "x": "kx"}, hits={"x": hits}).gates["x"]
    assert not gate.passed, gate.message
    assert gate.state == "comparable" and f"hit@1 {drop}" in gate.message, gate.message
    with pytest.raises(ValueError):
        judge.accept(run_id)


def test_a_regression_in_steps_across_ineligible_runs_is_shown(judge):
    """r1 x 1.00 (ineligible), r2 x 0.96 (within tolerance of r1: not compared, so r2 ineligible too),
    r3 x 0.92: 0.96 -> 0.92 is within tolerance of r2, so "nothing can judge it", while r1's 1.00 on
    the same benchmark and configuration shows -0.08. ``accept r3`` whole pins x at 0.92."""
    _ineligible_first_run(judge)
    r2 = judge("r2", "A", {"a": "ka", "x": "kx"}, hits={"x": 96})
    assert not r2.gates["x"].passed and r2.gates["x"].state == "not_compared" and not r2.eligible
    _shown_and_refused(judge, "r3", hits=92, drop="1.0000 -> 0.9200")


def test_a_run_on_another_benchmark_in_between_does_not_hide_the_drop(judge):
    """r1 x 1.00 on A (ineligible); r2 on B (a question edit: x not compared, ineligible); r3 on A again
    (the edit reverted), x 0.50: the latest recorded run r2 measured B, so nothing is compared, while r1
    measured A with 1.00."""
    _ineligible_first_run(judge)
    r2 = judge("r2", "B", {"a": "ka", "x": "kx"})
    assert not r2.gates["x"].passed and not r2.eligible, r2.gates["x"].message
    _shown_and_refused(judge, "r3", hits=50, drop="1.0000 -> 0.5000")


def test_a_drop_shown_once_is_not_forgotten_by_the_next_run(judge):
    """r1 x 1.00 (ineligible); r2 x 0.50: shown, ``comparable`` against r1 (the 7f7ec4e fix), r2 not
    eligible. r3 x 0.50 again (nothing fixed): its latest recorded run is r2, 0.50 -> 0.50 is no drop, so
    "nothing can judge it", not compared, and ``accept r3`` whole pins 0.50. With a yardstick the failure
    would stay (the previous eligible run is still r1's kind)."""
    _ineligible_first_run(judge)
    r2 = judge("r2", "A", {"a": "ka", "x": "kx"}, hits={"x": 50})
    assert not r2.gates["x"].passed and r2.gates["x"].state == "comparable" and not r2.eligible
    _shown_and_refused(judge, "r3", hits=50, drop="1.0000 -> 0.5000")


def test_a_recorded_run_of_todays_benchmark_is_compared_beside_a_yardstick_of_another(judge, monkeypatch):
    """r0 on B (engine E1): x 1.00, eligible. r1 on A (a question edit, engine E1): x paired with its own
    configuration (passes) while a's configuration change cannot be paired: r1 not eligible. r2 on A, a code
    change (E2), x 0.50: its only yardstick is r0 (another benchmark and engine: nothing pairs), so not
    compared, while r1 measured A with 1.00 for the same configuration; ``accept r2`` whole pins 0.50."""
    from eval_pipeline.verdict import retrieval

    engine = {"id": "E1"}
    monkeypatch.setattr(retrieval, "engine_identity", lambda database=None: engine["id"])
    assert judge("r0", "B", {"a": "ka", "x": "kx"}).passed
    r1 = judge("r1", "A", {"a": "ka2", "x": "kx"})
    assert r1.gates["x"].passed and not r1.eligible, r1.gates["a"].message
    engine["id"] = "E2"
    _shown_and_refused(judge, "r2", hits=50, drop="1.0000 -> 0.5000")


def test_an_answer_measurement_whose_rows_were_all_ineligible_keeps_its_drop_measured(answers):
    """a0: bm25's answers 0.90 recorded in a run not eligible (another variant's retrieval failed, say:
    ``run_eligible=False``). a1: the same set, corpus, generator and configuration, 0.50: no eligible row,
    so "recorded before ... nothing can judge it", no number shown; ``accept_answer_run a1`` whole took
    0.50 with a0's 0.90 of the same key in the history. Now a0's row shows the drop, and the whole
    acceptance refuses it."""
    from eval_pipeline.history.answers import accept_answer_run
    from eval_pipeline.verdict.answers import judge_answer_run, record_answers
    from tests.unit.verdict.test_verdict_attacks_eighth import ANSWER_TOL
    from tests.verdict_frames import answer_frame_with

    def run(run_id, rate, eligible):
        frame = answer_frame_with("bm25", rate)
        verdict = judge_answer_run({"bm25": frame}, order=["bm25"], corpus_signature="corpus-1",
                                   tolerances=ANSWER_TOL, strict=False, connection_string=answers.uri, run_id=run_id,
                                   configurations={"bm25": "cfg-bm25"})
        record_answers(verdict, answers.uri, run_id, run_eligible=eligible)
        return verdict.gates["bm25"]["deterministic"]

    assert run("a0", 0.90, False).passed
    gate = run("a1", 0.50, True)
    assert not gate.passed, gate.message
    assert gate.state == "comparable" and "0.9" in gate.message, gate.message
    accepted, refused = accept_answer_run(answers.uri, "a1")
    assert accepted == [], (accepted, refused, gate.message)


def test_a_rename_of_a_variant_whose_only_run_was_ineligible_keeps_its_drop_measured(judge):
    """r1 adds x (kx, 1.00) while a regresses: r1 not eligible. r2 renames x to y (the same configuration)
    and y is at 0.50: x is not in the project's ``known`` variants (never eligible), so nothing vanished and
    y is "a new variant (never recorded, and no vanished variant had its configuration)": it PASSES as a
    first run, r2 is eligible and y's 0.50 becomes its pinned reference, with x's 1.00 of the same
    configuration and benchmark in r1 never shown (false on both counts: recorded as x, and x had it)."""
    _ineligible_first_run(judge)
    r2 = judge("r2", "A", {"a": "ka", "y": "kx"}, hits={"y": 50})
    gate = r2.gates["y"]
    assert not gate.passed and not r2.eligible, gate.message
    assert gate.state == "comparable" and "hit@1 1.0000 -> 0.5000" in gate.message, gate.message


def test_a_tuning_choice_moved_with_a_golden_set_edit_is_named(answers):
    """a0: bm25 tunes rrf_k, chose 60, answers 0.90. a1: the golden set edited (fp-2) and the retrieval
    questions' tuning part edited in the same run, so the tuning chose rrf_k 5: the answers' context is
    ranked with another setting, 0.50. Not compared (the key changed), and nothing names the setting that
    changed (``configuration_fingerprint`` leaves the choice out too), so ``accept a1`` whole takes it. The
    forty-first review's hole 5 was the score only; the choice went out with it."""
    import json

    from eval_pipeline.history.answers import accept_answer_run
    from eval_pipeline.verdict.answers import judge_answer_run, record_answers
    from tests.unit.verdict.test_verdict_attacks_eighth import ANSWER_TOL
    from tests.verdict_frames import answer_frame_with

    def run(run_id, rate, chosen, **columns):
        config = {"engine": "bm25", "tune": "rrf_k", "tuned": {"chosen": {"rrf_k": chosen}, "tuning_score": 0.6}}
        frame = answer_frame_with("bm25", rate, variant_config=json.dumps(config), **columns)
        verdict = judge_answer_run({"bm25": frame}, order=["bm25"], corpus_signature="corpus-1",
                                   tolerances=ANSWER_TOL, strict=False, connection_string=answers.uri, run_id=run_id,
                                   configurations={"bm25": "cfg-bm25"})
        record_answers(verdict, answers.uri, run_id, run_eligible=verdict.passed)
        return verdict.gates["bm25"]["deterministic"]

    assert run("a0", 0.90, 60).passed
    gate = run("a1", 0.50, 5, set_fingerprint="fp-2")
    assert not gate.passed and gate.state == "not_compared", gate.message
    assert "rrf_k" in gate.message, gate.message
    accepted, refused = accept_answer_run(answers.uri, "a1")
    assert accepted == [], (accepted, refused, gate.message)


def test_the_report_of_a_drop_shown_against_the_latest_recorded_run_renders(judge):
    """The forty-first review's hole 3 as fixed (x's drop from r1 shown, ``comparable``), rendered: the
    only failing rows are x's, which have no ``against``, so the gate section's failures table raises."""
    from eval_pipeline.reporting.report import _gate_section
    from eval_pipeline.reporting.run import variant_gate_checks

    _ineligible_first_run(judge)
    r2 = judge("r2", "A", {"a": "ka", "x": "kx"}, hits={"x": 50})
    assert r2.gates["x"].state == "comparable" and not r2.gates["x"].passed
    lines = _gate_section(r2)
    assert any("hit@1" in line for line in lines), lines
    report = {"gate_messages": {v: g.message for v, g in r2.gates.items()}, "gate_rows": r2.gate_rows()}
    assert not variant_gate_checks(report, ["x"])["x"][0]
