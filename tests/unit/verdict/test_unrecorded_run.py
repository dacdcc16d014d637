"""A run the report will not record (`report.record_history: false`) offers no acceptance of itself.

`accept` refuses a run the history does not hold ("no recorded run"), so a gate, a check or the
console that names `accept <this run>` for such a run names a command that cannot work. The verdict
asset knows the report's setting (the same run's config) and says why instead: every variant is in
`acceptance_refusals`, the messages name a later run, the console's first line says the run is not
recorded, and nothing offers a command for it. Each run is judged as `decide_run` judges (judge_run,
the refusals, judge_answer_run, the ways out disclosed) in a database of its own.
"""

from __future__ import annotations

import pytest

from tests.history_schema import fresh_history_uri
from tests.unit.verdict.test_answer_accept_attacks import ANSWER_TOL, TOL, _answers, _frame

pytestmark = pytest.mark.integration

NOT_RECORDED = "the report does not record it (report.record_history: false)"


@pytest.fixture
def judge(embedded_pg):
    """`judge(run_id, {variant: hits}, {variant: pass rate}, recorded=..., record=..., strict=..., limited=...)`:
    (verdict, per_variant), a run judged as the verdict asset judges it (`judge_run`, then decide_run's
    `complete_verdict`) with the report's `record_history` = ``recorded``; recorded as `render_run` records a
    verdict when ``record`` (default: ``recorded``). `judge.record(verdict, per_variant)` records one so,
    whatever run decided it; `judge.uri` is the run's database. The two reviews of this file judge with it."""
    from eval_pipeline.history.runs import SCORING_PROTOCOL
    from eval_pipeline.verdict.answers import record_answers
    from eval_pipeline.verdict.retrieval import judge_run, record_verdict
    from eval_pipeline.verdict.run import complete_verdict

    uri = fresh_history_uri(embedded_pg, "unrec")  # a schema of its own (tests/history_schema.py)

    def run(run_id: str, hits: dict[str, int], grades: dict | None = None, *, recorded: bool = True,
            record: bool | None = None, strict: bool = False, limited: bool = False):
        provenance = {"corpus_signature": "corpus-1", "question_set_fingerprint": "qs-1", "labels_fingerprint": "l-1",
                      "benchmark_fingerprint": "bench-1", "embedder": "minilm", "embedder_revision": "rev-1",
                      "chunking": {"split_length": 150}, "scoring_protocol": SCORING_PROTOCOL, "code_version": "abc",
                      "variants": {v: {"engine": "pg-dense", "knob": v} for v in hits}}
        per_variant = {v: _frame(v, h) for v, h in hits.items()}
        verdict = judge_run(per_variant, baseline=next(iter(hits)), provenance=provenance, tolerances=TOL,
                            strict=strict, run_id=run_id, limited=limited, connection_string=uri,
                            sweep_keys=list(hits), record=False)
        complete_verdict(verdict, {v: _answers(v, g) for v, g in (grades or {}).items()}, run_id=run_id,
                         record_history=recorded, order=list(per_variant), corpus_signature="corpus-1",
                         answer_tolerances=ANSWER_TOL, connection_string=uri)
        if recorded if record is None else record:
            store(verdict, per_variant)
        return verdict, per_variant

    def store(verdict, per_variant):
        """What render_run does with its own record_history true (reporting/run.py)."""
        record_verdict(verdict, uri, run_id=verdict.run_id, per_variant=per_variant)
        if verdict.answers is not None and verdict.answers.records:
            record_answers(verdict.answers, uri, verdict.run_id, run_eligible=verdict.eligible)

    run.uri, run.record = uri, store
    return run


def _checks(verdict) -> dict[str, dict]:
    from eval_pipeline.reporting.run import variant_gate_checks, verdict_output

    return {k: m for k, (_, m) in variant_gate_checks(verdict_output(verdict), list(verdict.gates)).items()}


def _answer_checks(verdict) -> dict[str, dict]:
    from eval_pipeline.reporting.answers import answer_check_output, answer_gate_checks

    return {k: m for k, (_, m) in answer_gate_checks(answer_check_output(verdict), list(verdict.gates)).items()}


def _everything_said(verdict) -> str:
    """Every text a user reads of the verdict: the gates' messages (retrieval and answers), the
    checks' metadata and the console's summary."""
    from eval_pipeline.reporting.console import console_summary

    texts = [g.message for g in verdict.gates.values()]
    texts += [g.message for graders in verdict.answers.gates.values() for g in graders.values()]
    texts += [str(v) for checks in (_checks(verdict), _answer_checks(verdict)) for m in checks.values()
              for v in m.values()]
    return "\n".join([*texts, console_summary(verdict)])


def _assert_offers_nothing_of(verdict, run_id: str) -> None:
    assert verdict.acceptable_failures == [] and verdict.acceptable_answer_failures == []
    assert verdict.accept_command is None and verdict.answers_accept_command is None
    said = _everything_said(verdict)
    assert f"accept {run_id}" not in said and f"run_id: \"{run_id}\"" not in said, said
    assert all("accept" not in m for m in _checks(verdict).values())
    assert all("accept" not in m for m in _answer_checks(verdict).values())


def test_a_regression_the_report_will_not_record_names_no_command_for_it(judge):
    judge("r0", {"a": 40, "b": 40}, {"a": 0.9, "b": 0.9})
    verdict, _ = judge("r1", {"a": 20, "b": 40}, {"a": 0.9, "b": 0.9}, recorded=False)
    assert not verdict.gates["a"].passed and verdict.gates["a"].state == "comparable"
    _assert_offers_nothing_of(verdict, "r1")
    assert verdict.acceptance_refusals == {"a": NOT_RECORDED, "b": NOT_RECORDED}
    assert "(not recorded: report.record_history: false)" in _everything_said(verdict)


def test_an_answer_drop_the_report_will_not_record_names_no_command_for_it(judge):
    judge("r0", {"a": 40}, {"a": 0.9})
    verdict, _ = judge("r1", {"a": 40}, {"a": 0.5}, recorded=False)
    assert verdict.gates["a"].passed and not verdict.answers.gates["a"]["deterministic"].passed
    _assert_offers_nothing_of(verdict, "r1")
    assert "(not recorded: report.record_history: false)" in _everything_said(verdict)


def test_a_strict_first_run_the_report_will_not_record_names_no_command_for_it(judge):
    verdict, _ = judge("r0", {"a": 40}, recorded=False, strict=True)
    assert verdict.gates["a"].state == "not_compared" and not verdict.gates["a"].passed
    _assert_offers_nothing_of(verdict, "r0")
    assert NOT_RECORDED in verdict.gates["a"].message


def test_the_console_says_the_run_is_not_recorded(judge):
    from eval_pipeline.reporting.console import console_summary

    verdict, _ = judge("r0", {"a": 40}, recorded=False)
    assert console_summary(verdict).splitlines()[0] == (
        "eval-pipeline: 1 variant(s), run r0 (not recorded: report.record_history: false)")


@pytest.mark.parametrize("case", ["regression", "answer drop", "strict first run"])
def test_control_the_same_runs_recorded_name_their_command(judge, case):
    """The control: recorded, each of the runs above names `accept <run>` and its check offers it."""
    if case == "regression":
        judge("r0", {"a": 40, "b": 40}, {"a": 0.9, "b": 0.9})
        (verdict, _), run_id = judge("r1", {"a": 20, "b": 40}, {"a": 0.9, "b": 0.9}), "r1"
        assert verdict.acceptable_failures == ["a"] and "accept" in _checks(verdict)["a"]
    elif case == "answer drop":
        judge("r0", {"a": 40}, {"a": 0.9})
        (verdict, _), run_id = judge("r1", {"a": 40}, {"a": 0.5}), "r1"
        assert verdict.acceptable_answer_failures == ["a"] and "accept" in _answer_checks(verdict)["a"]
    else:
        (verdict, _), run_id = judge("r0", {"a": 40}, strict=True), "r0"
        assert verdict.acceptable_failures == ["a"]
    assert f"accept {run_id}" in _everything_said(verdict)
    assert verdict.acceptance_refusals == {}
