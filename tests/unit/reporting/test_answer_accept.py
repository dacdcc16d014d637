"""A failed answer gate says how to accept the run's answers, as a failed retrieval gate says how
to accept the run: the answer gate's check carries ``accept`` (the Launchpad's config and the
command, both naming the run, both the answers alone: the variant's retrieval reference stays),
and the console names the variant on a line of its own, but only where that acceptance takes
every failed grader of it (`history.answers.answers_to_accept`) and is not refused for its
retrieval (`history.runs.retrieval_to_accept`). Nothing here touches a database: the verdicts
are built in memory, with the rows the verdict records (tests/unit/verdict/
test_answer_accept_attacks.py follows the offers against a real history)."""

from __future__ import annotations

import pandas as pd
import pytest

from eval_pipeline.gates.retrieval import GateResult
from eval_pipeline.reporting.answers import answer_check_output, answer_gate_checks
from eval_pipeline.reporting.console import console_summary
from eval_pipeline.verdict.answers import AnswerVerdict
from eval_pipeline.verdict.retrieval import RunVerdict

RUN = "r9"
YARDSTICK = "deterministic:v1+f34d5d89a3b0"


def _record(variant: str, grader: str = "deterministic", **changes) -> dict:
    """A row as the answer verdict records it: complete, comparable."""
    return {"run_id": RUN, "variant": variant, "grader": grader, "set_id": "golden", "set_fingerprint": "fp",
            "corpus_signature": "corpus", "generator": "extractive", "yardstick": YARDSTICK, "limited": False,
            "errored": 0, "n_scored": 8, "pass_rate": 0.5, "mean_score": 0.6} | changes


def _verdict(*, record: dict | None = None, summary: dict | None = None, **fields) -> RunVerdict:
    """hybrid passed retrieval and failed its deterministic answer gate (a measured drop); dense
    passed both."""
    counts = summary or {"n_errored": 0}  # hybrid's retrieval counts (dense's are 0)
    frame = pd.DataFrame([{"variant": "dense", **{k: 0 for k in counts}}, {"variant": "hybrid", **counts}])
    gates = {"dense": GateResult(True, "comparable", [], "passed"),
             "hybrid": GateResult(False, "comparable", [], "FAILED: pass_rate dropped by 0.2")}
    rows = [{**_record(v), "gate": g, "previous": None, "reference": None, "treatment_changes": []}
            for v, g in gates.items()]
    answers = AnswerVerdict(True, "", rows=rows, gates={v: {"deterministic": g} for v, g in gates.items()},
                            records=[_record("dense"), record if record is not None else _record("hybrid")])
    verdict = RunVerdict(frame, pd.DataFrame(), pd.DataFrame(), run_id=RUN,
                         gates={"dense": GateResult(True, "comparable", [], "ok"),
                                "hybrid": GateResult(True, "comparable", [], "ok")})
    verdict.answers = answers
    for name, value in fields.items():
        setattr(verdict, name, value)
    return verdict


def test_a_failed_answer_gate_carries_how_to_accept_the_run_by_name():
    verdict = _verdict()
    assert verdict.acceptable_answer_failures == ["hybrid"]
    checks = answer_gate_checks(answer_check_output(verdict), ["dense", "hybrid"])
    passed, metadata = checks["hybrid"]
    assert not passed
    assert 'launch accept_reference with {run_id: "r9", variants: ["hybrid"], answers_only: true}' \
        in metadata["accept"]
    assert metadata["accept"].endswith("python -m eval_pipeline.history accept r9 --variant hybrid --answers-only")
    assert "its retrieval reference stays" in metadata["accept"]
    assert "accept" not in checks["dense"][1]  # a passed gate has nothing to accept


def test_the_console_names_a_variant_whose_answer_gate_alone_failed_for_its_answers_alone():
    verdict = _verdict()
    assert verdict.accept_command is None
    assert verdict.answers_accept_command == "python -m eval_pipeline.history accept r9 --variant hybrid --answers-only"
    assert ("to make this run's answers the reference once they are intended and the report has recorded the run "
            "(retrieval references stay): "
            "python -m eval_pipeline.history accept r9 --variant hybrid --answers-only") in console_summary(verdict)


def test_a_variant_failing_both_gates_is_named_once_by_the_whole_acceptance():
    verdict = _verdict()
    verdict.gates["hybrid"] = GateResult(False, "comparable", [], "FAILED")
    assert verdict.accept_command == "python -m eval_pipeline.history accept r9 --variant hybrid"
    assert verdict.answers_accept_command is None


@pytest.mark.parametrize("case", [
    "limited", "no run id", "maybe renamed", "grader missing from the run", "errored answers", "nothing scored",
    "limited answer row", "no record of the grader", "retrieval errored", "reranker fallbacks"])
def test_no_accept_is_offered_where_an_acceptance_by_name_would_not_take_it(case):
    """What `answers_to_accept` refuses for a named variant (a row with a yardstick problem, a
    grader this run did not measure) and what makes `retrieval_to_accept` refuse the whole
    acceptance (limited, renamed, errored questions, fallbacks) is never offered."""
    settings = {
        "limited": dict(limited=True),
        "no run id": dict(run_id=""),
        "maybe renamed": dict(maybe_renamed={"hybrid": ["old"]}),
        "errored answers": dict(record=_record("hybrid", errored=2)),
        "nothing scored": dict(record=_record("hybrid", n_scored=0)),
        "limited answer row": dict(record=_record("hybrid", limited=True)),
        "no record of the grader": dict(record=_record("hybrid", grader="judge")),
        "retrieval errored": dict(summary={"n_errored": 3}),
        "reranker fallbacks": dict(summary={"n_errored": 0, "n_rerank_fallback": 1}),
    }.get(case, {})
    verdict = _verdict(**settings)
    if case == "grader missing from the run":
        verdict.answers.missing.append(("hybrid", "deterministic", "r1"))
    assert verdict.acceptable_answer_failures == []
    assert verdict.accept_command is None and verdict.answers_accept_command is None
    _, metadata = answer_gate_checks(answer_check_output(verdict), ["hybrid"])["hybrid"]
    assert "accept" not in metadata
