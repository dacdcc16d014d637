"""The console summary (issue #28, item 8): a compact table at the end of a CI log (variant,
headline metrics with their deltas, the gate and why) and one verdict line a script reads."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from eval_pipeline.gates.retrieval import GateResult
from eval_pipeline.reporting.console import VERDICT_PREFIX, console_summary, verdict_line


@dataclass
class Verdict:
    summary: pd.DataFrame
    gates: dict[str, GateResult]
    answers: Any = None
    run_id: str = "1234567890abcdef"
    limited: bool = False


@dataclass
class Answers:
    gates: dict[str, dict[str, GateResult]] = field(default_factory=dict)


SUMMARY = pd.DataFrame([{"variant": "pg-dense", "ndcg@10": 0.81234, "hit@5": 0.9, "mrr": 0.7},
                        {"variant": "hybrid", "ndcg@10": 0.7, "hit@5": 0.878, "mrr": 0.65},
                        {"variant": "new", "ndcg@10": 0.5, "hit@5": 0.6, "mrr": float("nan")}])


def _gates(hybrid_passed: bool) -> dict[str, GateResult]:
    rows = [{"metric": "hit@5", "actual": 0.878, "yardstick": 0.937, "delta": -0.059, "tolerance": 0.05,
             "passed": hybrid_passed},
            {"metric": "ndcg@10", "actual": 0.7, "yardstick": 0.72, "delta": -0.02, "tolerance": 0.05, "passed": True}]
    return {"pg-dense": GateResult(True, "comparable", [{"metric": "ndcg@10", "actual": 0.812, "yardstick": 0.812,
                                                          "delta": 0.0, "tolerance": 0.05, "passed": True}], "ok"),
            "hybrid": GateResult(hybrid_passed, "comparable", rows, "compared with run abc"),
            "new": GateResult(True, "first_run", [], "'new' is a new variant: its first run, nothing to compare with")}


def test_a_failed_gate_is_the_table_and_the_verdict_line():
    text = console_summary(Verdict(SUMMARY, _gates(False)))
    lines = text.splitlines()
    assert lines[0] == "eval-pipeline: 3 variant(s), run 1234567890abcdef"  # the whole id: what `accept` takes
    header = lines[2]
    assert header.split() == ["variant", "nDCG@10", "(Δ)", "hit@5", "(Δ)", "MRR", "(Δ)", "gate", "why"]
    hybrid = next(line for line in lines if line.startswith("hybrid"))
    assert "0.700 (-0.020)" in hybrid and "0.878 (-0.059)" in hybrid
    assert "FAILED (vs history)" in hybrid and "hit@5 -0.059 beyond its tolerance 0.050" in hybrid
    dense = next(line for line in lines if line.startswith("pg-dense"))
    assert "0.812 (+0.000)" in dense and "0.900" in dense and "passed (vs history)" in dense
    assert dense.endswith("1 metric(s) within tolerance")
    both = GateResult(True, "comparable", [{"metric": m, "against": a, "delta": 0.0, "tolerance": 0.05, "passed": True}
                                           for m in ("hit@1", "mrr") for a in ("previous", "reference")])
    assert console_summary(Verdict(SUMMARY[:1], {"pg-dense": both})).count(
        "2 metric(s) within tolerance of the previous and the reference") == 1
    three = GateResult(True, "paired", [{"metric": "mrr", "against": a, "delta": 0.0, "tolerance": 0.05, "passed": True}
                                        for a in ("previous", "reference", "reference (carried)")])
    assert console_summary(Verdict(SUMMARY[:1], {"pg-dense": three})).count(
        "1 metric(s) within tolerance of the previous, the reference and the reference (carried)") == 1
    new = next(line for line in lines if line.startswith("new"))
    assert "passed (first run)" in new and "–" in new  # its MRR is not measured
    assert lines[-2] == f"{VERDICT_PREFIX} FAILED (1 of 3 variant(s) failed: hybrid)"
    assert lines[-1].startswith("exit codes: 0 every gate passed, 1 a gate failed, 2 the run broke")


def test_a_passing_run_and_the_answer_gates():
    verdict = Verdict(SUMMARY, _gates(True), answers=Answers({"hybrid": {"deterministic": GateResult(True, "comparable")},
                                                              "new": {"static": GateResult(False, "not_compared")}}))
    text = console_summary(verdict)
    assert "answers: 2 (variant, grader) gate(s), 1 failed: new static" in text
    assert verdict_line(verdict) == f"{VERDICT_PREFIX} FAILED (answer gate failed: new static)"
    verdict.answers = None
    assert verdict_line(verdict) == f"{VERDICT_PREFIX} PASSED (3 of 3 variant(s) passed their gates)"


def test_a_long_reason_is_cut_to_one_line():
    gates = {"x": GateResult(False, "not_compared", [], "FAILED: " + "word " * 40 + "\nsecond line")}
    text = console_summary(Verdict(pd.DataFrame([{"variant": "x", "ndcg@10": 0.5}]), gates))
    row = next(line for line in text.splitlines() if line.startswith("x "))
    assert row.endswith("…") and "\n" not in row and "FAILED (not compared)" in row


def test_a_failed_run_ends_with_the_command_that_accepts_it():
    """The table's `why` is one cut line: the command that accepts the run for every failed
    variant, with the run's whole id, is printed whole before the verdict line; none when every
    gate passed."""
    verdict = Verdict(SUMMARY, _gates(False))
    verdict.accept_command = "python -m eval_pipeline.history accept 1234567890abcdef --variant hybrid"
    lines = console_summary(verdict).splitlines()
    assert lines[-4] == ("to make this run the reference once its numbers are intended and the report has recorded it: "
                         "python -m eval_pipeline.history accept 1234567890abcdef --variant hybrid")
    assert lines[-2].startswith(f"{VERDICT_PREFIX} FAILED")
    verdict.accept_command = None
    assert "history accept" not in console_summary(verdict)


def test_the_accept_command_names_the_failed_variants_quoted_and_is_none_for_a_limited_run():
    """RunVerdict.accept_command: retrieval's failed variants, each quoted for a shell where it needs
    it; a variant the run did not measure is not named; none for a limited run (never a reference)
    and none when every gate passed. A variant whose answer gate alone failed is named only where
    an acceptance takes it (tests/unit/reporting/test_answer_accept.py): not here, where its grader
    has no row this run records (naming it would accept nothing of it)."""
    from eval_pipeline.verdict.answers import AnswerVerdict
    from eval_pipeline.verdict.retrieval import RunVerdict

    empty = pd.DataFrame()
    verdict = RunVerdict(empty, empty, empty, gates=_gates(False), run_id="r9")
    assert verdict.accept_command == "python -m eval_pipeline.history accept r9 --variant hybrid"
    verdict.answers = AnswerVerdict(True, "", gates={"new": {"static": GateResult(False, "not_compared")}})
    assert verdict.accept_command == "python -m eval_pipeline.history accept r9 --variant hybrid"
    verdict.gates["gone"] = GateResult(False, "not_compared")
    verdict.unmeasured.append("gone")
    verdict.gates["minilm|hybrid+mmr"] = GateResult(False, "comparable")
    assert verdict.accept_command == ("python -m eval_pipeline.history accept r9 --variant hybrid "
                                      "--variant 'minilm|hybrid+mmr'")
    verdict.limited = True
    assert verdict.accept_command is None
    verdict.limited, verdict.gates = False, _gates(True)
    assert verdict.accept_command is None
