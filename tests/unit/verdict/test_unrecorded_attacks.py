"""Attacks on 9e25a61 (`RunVerdict.unrecorded`, set by `decide_run(record_history=...)`, which the verdict
asset reads from the run config of the `report` op through `assets/run.py:op_config`).

The class attacked: a way out offered that cannot be taken, and a run offered for acceptance that the
history will not hold (or the reverse: an acceptance refused that would work). Each run is judged as
`decide_run` judges it (judge_run, the refusals, judge_answer_run, the ways out disclosed) in a database of
its own, and recorded as `render_run` records it (reporting/run.py:155-157: `record_verdict` and
`record_answers` under `run_id = verdict.run_id or run_id`, reporting/run.py:142) when a report records it.
The whole-job versions of holes 1 and 2 are tests/orchestration/test_unrecorded_attacks_job.py.

Holes (each was a strict xfail confirmed failing on its assertion with --runxfail, each with a passing
control; all four closed since by the lead, their tests now plain: 1. `record_verdict` refuses a verdict
decided as not recorded and `render_run` does not record one, with a warning; 2. the console's offers say
"and the report has recorded it", as the not-compared gates' hint does; 3. `op_config` processes a setting
by Dagster's rules for the class's schema; 4. a refused variant's hint is replaced whole):

1. FAILS CLOSED (false refusal, false text): the verdict decides `unrecorded` from the config of ITS OWN run,
   but the report that records a verdict may run later in another run with another config: `render_run`
   records `verdict.run_id` (reporting/run.py:142) whenever ITS `record_history` is true
   (reporting/run.py:155), never reading `verdict.unrecorded`. A run judged with `record_history: false`
   whose report is materialized again (report alone, or a Launchpad re-execution with the config edited) with
   the default `true` is recorded; `accept RUN --variant V` then works, while every gate, check and the
   console said "no acceptance of this run takes it ... a later run" and "(not recorded: ...)".
   `test_hole_an_unrecorded_verdict_recorded_by_a_later_report_can_be_accepted`.
2. FAILS OPEN (a way out offered that cannot be taken): the reverse. A verdict decided with the report's
   `record_history` true (the default: also when the report is NOT in the run's selection, op_config reads
   the absent section's defaults, assets/__init__.py:394 never asks `selected_assets`) offers
   `accept RUN --variant V` on the console line (reporting/console.py:165-167) with no "once the report has
   recorded this run" (the check's `accept`, history/runs.py:1088, says it; the console line, which
   scripts/run_job.sh repeats at the end, does not). When the report does not record the run (its step
   failed after the verdict: a publish error; the verdict alone; a later report with `record_history: false`),
   the command fails with "no recorded run".
   `test_hole_the_console_offers_a_run_no_report_recorded_without_saying_it_must_be`.
3. REGRESSION (the verdict breaks on a config Dagster accepts): Dagster takes `record_history: {env: VAR}`
   for the report's Config field (the report reads the variable's value), but `op_config`
   (assets/run.py:14) builds `ReportConfig(**raw)` from the raw run config: pydantic refuses the mapping and
   the verdict asset raises ValidationError before deciding anything (assets/__init__.py:394). The whole job
   already failed so in the corpus_snapshot preflight (assets/__init__.py:283, op_config of the report, and
   validate_run_config); new is a run that selects the verdict and the report without corpus_snapshot
   (`verdict,findings,report`), which worked before 9e25a61.
   `test_hole_op_config_reads_an_env_record_history_as_dagster_does`.
4. false text: a refused variant's gate message keeps its sentence head: "to make this run the reference
   once its numbers are intended: a later run: no acceptance of this run takes it, the report does not
   record it (report.record_history: false)" (verdict/retrieval.py:236-237 replaces only the command, the
   hint of verdict/retrieval.py:782 stays): it says how to make THIS run the reference, then that it cannot
   be. `test_hole_a_refused_gate_message_does_not_say_how_to_make_this_run_the_reference`.

Held (plain tests): a limited run with record_history false is refused as limited (the first reason) and the
console names both; nothing of an unrecorded run is offered where its retrieval AND its answers failed (no
whole command, no answers-only command, no check `accept`, no Launchpad config); `latest` after an
unrecorded run is the previous recorded run, and no text of the unrecorded run names `latest`; the recorded
control of every hole offers its command and the command works; `record_history` given as a plain bool in
a config agrees with the report's.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from tests.unit.verdict import test_unrecorded_run as base

pytestmark = pytest.mark.integration

NOT_RECORDED = base.NOT_RECORDED


judge = base.judge  # the base file's: each run judged as the verdict asset judges it


def _accepts(uri: str, run_id: str, variants: list[str], *, answers_only: bool = False) -> str:
    """'' when `accept run_id --variant ...` (what the CLI and the accept_reference job call) takes it, else why."""
    from eval_pipeline.history.answers import accept_run

    try:
        accept_run(uri, run_id, variants=variants, answers_only=answers_only, note="test", accepted_by="t")
    except ValueError as exc:
        return str(exc) or type(exc).__name__
    return ""


def _checks(verdict) -> dict[str, dict]:
    from eval_pipeline.reporting.run import variant_gate_checks, verdict_output

    return {k: m for k, (_, m) in variant_gate_checks(verdict_output(verdict), list(verdict.gates)).items()}


def _answer_checks(verdict) -> dict[str, dict]:
    from eval_pipeline.reporting.answers import answer_check_output, answer_gate_checks

    return {k: m for k, (_, m) in answer_gate_checks(answer_check_output(verdict), list(verdict.gates)).items()}


def _said(verdict) -> str:
    from eval_pipeline.reporting.console import console_summary

    texts = [g.message for g in verdict.gates.values()]
    texts += [g.message for graders in (verdict.answers.gates.values() if verdict.answers else [])
              for g in graders.values()]
    texts += [str(v) for checks in (_checks(verdict), _answer_checks(verdict)) for m in checks.values()
              for v in m.values()]
    return "\n".join([*texts, console_summary(verdict)])


# --------------------------------------------------------------------------------------------
# 1. a verdict decided unrecorded, recorded by a later report: the refusal was false
# --------------------------------------------------------------------------------------------


def test_hole_an_unrecorded_verdict_recorded_by_a_later_report_can_be_accepted(judge):
    """Closed: `record_verdict` refuses a verdict decided as not recorded (and `render_run` does not
    call it, with a warning), so what the verdict said holds: accept refuses the run."""
    judge("r0", {"a": 40, "b": 40})
    verdict, per_variant = judge("r1", {"a": 20, "b": 40}, recorded=False)  # run r1: record_history: false
    assert verdict.acceptance_refusals == {"a": NOT_RECORDED, "b": NOT_RECORDED}
    assert verdict.accept_command is None and "accept r1" not in _said(verdict)
    with pytest.raises(ValueError, match=r"run r1's verdict was decided for a run the report does not record "
                       r"\(report.record_history: false\): it is not recorded"):
        judge.record(verdict, per_variant)  # run r2 materializes the report alone, record_history true (the default)
    # what the verdict said must hold: the run it refused is not acceptable (or it was not recorded)
    assert _accepts(judge.uri, "r1", ["a"]) != "", "the verdict refused every acceptance of r1; accept took it"


def test_control_a_recorded_verdict_offers_what_accept_takes(judge):
    judge("r0", {"a": 40, "b": 40})
    verdict, _ = judge("r1", {"a": 20, "b": 40})
    assert verdict.acceptable_failures == ["a"] and "accept r1 --variant a" in _said(verdict)
    assert _accepts(judge.uri, "r1", ["a"]) == ""


def test_fact_the_unrecorded_verdict_unrecorded_by_its_own_report_is_refused_by_accept(judge):
    """The commit's case, held: the report of the same run does not record, accept refuses as the verdict says."""
    judge("r0", {"a": 40, "b": 40})
    verdict, _ = judge("r1", {"a": 20, "b": 40}, recorded=False)
    assert "no recorded run" in _accepts(judge.uri, "r1", ["a"])
    assert verdict.accept_command is None and "accept r1" not in _said(verdict)


# --------------------------------------------------------------------------------------------
# 2. a verdict that believes the report records: the console's offer, when it does not
# --------------------------------------------------------------------------------------------


def test_hole_the_console_offers_a_run_no_report_recorded_without_saying_it_must_be(judge):
    """Closed: the console's offer says it needs the report to have recorded the run."""
    from eval_pipeline.reporting.console import console_summary

    judge("r0", {"a": 40, "b": 40})
    # decided with record_history true (the default), then no report recorded it
    verdict, _ = judge("r1", {"a": 20, "b": 40}, recorded=True, record=False)
    line = next(x for x in console_summary(verdict).splitlines() if x.startswith("to make this run the reference"))
    refused = _accepts(judge.uri, "r1", ["a"])
    assert "no recorded run" in refused
    # the offer either works or says what it needs, as the check's `accept` does
    assert refused == "" or "recorded" in line, line


def test_control_the_checks_accept_says_it_needs_the_report_to_have_recorded_the_run(judge):
    judge("r0", {"a": 40, "b": 40})
    verdict, _ = judge("r1", {"a": 20, "b": 40}, recorded=True, record=False)
    assert "the report has recorded this run" in _checks(verdict)["a"]["accept"]


# --------------------------------------------------------------------------------------------
# 3. op_config against what Dagster accepts for the report's config
# --------------------------------------------------------------------------------------------


def _context(ops: dict, selection=None):
    return SimpleNamespace(run=SimpleNamespace(run_config={"ops": ops}, asset_selection=selection))


@pytest.fixture(scope="module")
def retrieval_eval_job():
    import definitions

    return definitions.defs.resolve_job_def("retrieval_eval")


def test_hole_op_config_reads_an_env_record_history_as_dagster_does(retrieval_eval_job, monkeypatch):
    """Closed: op_config processes the raw settings by Dagster's own rules for the class's schema."""
    from dagster import validate_run_config

    from assets import ReportConfig
    from assets.run import op_config

    monkeypatch.setenv("HC_RECORD_HISTORY", "false")
    ops = {"report": {"config": {"record_history": {"env": "HC_RECORD_HISTORY"}}}}
    validate_run_config(retrieval_eval_job, {"ops": ops})  # Dagster takes it: the report reads False
    assert op_config(_context(ops), "report", ReportConfig).record_history is False


def test_control_a_plain_bool_record_history_reads_as_dagster_does(retrieval_eval_job):
    from dagster import validate_run_config

    from assets import ReportConfig
    from assets.run import op_config

    for value in (False, True):
        ops = {"report": {"config": {"record_history": value}}}
        validate_run_config(retrieval_eval_job, {"ops": ops})
        assert op_config(_context(ops), "report", ReportConfig).record_history is value
    assert op_config(_context({}), "report", ReportConfig).record_history is True  # absent: the default
    assert op_config(_context({"report": {"config": None}}), "report", ReportConfig).record_history is True


def test_fact_dagster_refuses_a_string_record_history_and_extra_keys(retrieval_eval_job):
    """`record_history: "false"` and extra keys never reach op_config: Dagster refuses the run config."""
    from dagster import DagsterInvalidConfigError, validate_run_config

    for config in ({"record_history": "false"}, {"record_history": False, "extra": 1}):
        with pytest.raises(DagsterInvalidConfigError):
            validate_run_config(retrieval_eval_job, {"ops": {"report": {"config": config}}})


# --------------------------------------------------------------------------------------------
# 4. the refused gate's sentence
# --------------------------------------------------------------------------------------------


def test_hole_a_refused_gate_message_does_not_say_how_to_make_this_run_the_reference(judge):
    """Closed: a refused variant's hint is replaced whole ("the reference can only be a later run: ...")."""
    verdict, _ = judge("r0", {"a": 40}, recorded=False, strict=True)  # a strict first run: not compared
    message = verdict.gates["a"].message
    assert not verdict.gates["a"].passed and "a later run: no acceptance of this run takes it" in message, message
    assert "to make this run the reference" not in message, message


def test_control_a_recorded_run_keeps_its_sentence(judge):
    verdict, _ = judge("r0", {"a": 40}, strict=True)
    assert "to make this run the reference once its numbers are intended and the report has recorded it: " \
        "python -m eval_pipeline.history accept r0 --variant a" in verdict.gates["a"].message


# --------------------------------------------------------------------------------------------
# held
# --------------------------------------------------------------------------------------------


def test_held_a_limited_unrecorded_run_is_refused_as_limited_and_the_console_names_both(judge):
    from eval_pipeline.reporting.console import console_summary

    judge("r0", {"a": 40})
    verdict, _ = judge("r1", {"a": 20}, recorded=False, limited=True)
    assert verdict.acceptance_refusals == {"a": "it is a limited run"}
    assert console_summary(verdict).splitlines()[0] == (
        "eval-pipeline: 1 variant(s), run r1 (limited: not a baseline) (not recorded: report.record_history: false)")
    assert "accept r1" not in _said(verdict)


def test_held_retrieval_and_answers_failed_unrecorded_offer_nothing(judge):
    judge("r0", {"a": 40, "b": 40}, {"a": 0.9, "b": 0.9})
    verdict, _ = judge("r1", {"a": 20, "b": 40}, {"a": 0.5, "b": 0.5}, recorded=False)
    assert not verdict.gates["a"].passed and not verdict.answers.gates["b"]["deterministic"].passed
    assert verdict.accept_command is None and verdict.answers_accept_command is None
    said = _said(verdict)
    assert "accept r1" not in said and '"r1"' not in said and "--answers-only" not in said, said
    assert all("accept" not in m for m in (*_checks(verdict).values(), *_answer_checks(verdict).values()))
    assert "no recorded run" in _accepts(judge.uri, "r1", ["b"], answers_only=True)


def test_held_latest_after_an_unrecorded_run_is_the_previous_recorded_run(judge):
    from eval_pipeline.history.runs import resolve_run_id

    judge("r0", {"a": 40, "b": 40})
    verdict, _ = judge("r1", {"a": 20, "b": 40}, recorded=False)
    assert resolve_run_id(judge.uri, "latest") == "r0"
    assert "latest" not in _said(verdict)
