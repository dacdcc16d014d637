"""The variants table in place on the verdict's and the report's asset pages (issue #28, item 4):
Dagster shows a table entry in place, where a long markdown entry opens in a dialog scrolled to
its bottom, so a reader sees each variant's gate and numbers without opening the report. It is
the console's table (one home: eval_pipeline.reporting.console.summary_table), failed gates first."""

from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd
from dagster import TableMetadataValue

import tests.unit.reporting.test_console
from assets.metadata import to_metadata
from eval_pipeline.common.metadata import Records
from eval_pipeline.gates.retrieval import GateResult
from eval_pipeline.reporting.console import summary_table
from eval_pipeline.reporting.run import report_metadata, verdict_metadata
from tests.unit.reporting.test_console import Answers

SUMMARY = pd.DataFrame([{"variant": "pg-dense", "ndcg@10": 0.81234, "hit@5": 0.9, "mrr": 0.7},
                        {"variant": "hybrid", "ndcg@10": 0.7, "hit@5": 0.878, "mrr": 0.65}])
HYBRID_ROWS = [{"variant": "hybrid", "state": "comparable", "metric": "hit@5", "actual": 0.878, "yardstick": 0.937,
                "delta": -0.059, "tolerance": 0.05, "passed": False, "against": "previous"}]


@dataclass
class Verdict(tests.unit.reporting.test_console.Verdict):
    """The console tests' verdict, with what the assets' metadata reads besides."""

    eligible: bool = False
    decided_by: dict[str, str] = field(default_factory=dict)
    previous: dict[str, dict] = field(default_factory=lambda: {"hybrid": {"metrics": {"ndcg@10": 0.72}}})

    @property
    def passed(self) -> bool:
        return all(g.passed for g in self.gates.values())

    gate_passed = passed

    def gate_rows(self) -> list[dict]:
        return [r for g in self.gates.values() for r in g.rows if r.get("passed") is False]


def _verdict() -> Verdict:
    return Verdict(SUMMARY, {"pg-dense": GateResult(True, "first_run", [], "its first run"),
                             "hybrid": GateResult(False, "comparable", HYBRID_ROWS, "compared with run abc")})


def test_the_table_is_the_consoles_with_the_failed_gate_first():
    table = summary_table(_verdict())
    assert table.columns == ("variant", "nDCG@10 (Δ)", "hit@5 (Δ)", "MRR (Δ)", "gate", "why")
    assert [row[0] for row in table.rows] == ["hybrid", "pg-dense"]
    assert table.rows[0][2] == "0.878 (-0.059)"
    assert table.rows[0][4] == "FAILED (vs history)"
    assert table.rows[0][5] == "hit@5 -0.059 beyond its tolerance 0.050"
    assert table.rows[1][1:] == ("0.812", "0.900", "0.700", "passed (first run)", "its first run")


def test_the_report_shows_the_verdict_then_the_variants_table_first():
    metadata = report_metadata(_verdict(), {"report": "/tmp/results.md"}, {}, "# report", headline="Gate FAILED.")
    assert list(metadata)[:2] == ["verdict", "variants"]
    assert metadata["variants"] == summary_table(_verdict())


def test_the_verdict_asset_shows_the_variants_table_after_its_headline():
    metadata = verdict_metadata(_verdict(), "pg-dense")
    assert list(metadata)[:2] == ["headline", "variants"]


def test_records_become_a_table_the_ui_shows_in_place():
    shown = to_metadata({"variants": summary_table(_verdict())})["variants"]
    assert isinstance(shown, TableMetadataValue)
    assert [c.name for c in shown.schema.columns] == ["variant", "nDCG@10 (Δ)", "hit@5 (Δ)", "MRR (Δ)", "gate", "why"]
    assert shown.records[0].data["variant"] == "hybrid"
    assert shown.records[0].data["gate"] == "FAILED (vs history)"
    assert len(shown.records) == 2


def test_an_empty_run_has_an_empty_table_not_an_error():
    table = summary_table(Verdict(SUMMARY[:0], {}))
    assert table.rows == ()
    assert isinstance(Records(("a",), ()), Records)


# --- a hostile review's findings (2026-12-05) ----------------------------------------------------


def _row(metric, delta, passed, against="previous", actual=0.7):
    return {"metric": metric, "actual": actual, "yardstick": actual - (delta or 0.0), "delta": delta,
            "tolerance": 0.01, "passed": passed, "against": against}


def _hybrid_failed(rows) -> Verdict:
    return Verdict(SUMMARY[SUMMARY.variant == "hybrid"], {"hybrid": GateResult(False, "comparable", rows)})


def test_a_variant_failed_against_one_yardstick_shows_that_change_not_a_passing_ones():
    rows = [_row("ndcg@10", -0.08, False, "previous"), _row("ndcg@10", 0.01, True, "reference")]
    table = summary_table(_hybrid_failed(rows))
    assert table.rows[0][1] == "0.700 (-0.080)"
    assert table.rows[0][-1] == "ndcg@10 -0.080 beyond its tolerance 0.010"


def test_a_metric_that_could_not_be_measured_says_so_not_a_zero_change():
    rows = [_row("ndcg@10", None, False)]
    table = summary_table(_hybrid_failed(rows))
    assert table.rows[0][-1] == "ndcg@10 not measured (nothing scored)"


def test_a_variant_whose_answers_failed_says_so_and_comes_first():
    gates = {"pg-dense": GateResult(True, "first_run", [], "its first run"),
             "hybrid": GateResult(True, "comparable", [_row("ndcg@10", 0.0, True)], "ok")}
    answers = Answers({"hybrid": {"judge": GateResult(False, "comparable", [], "pass_rate dropped")}})
    table = summary_table(Verdict(SUMMARY, gates, answers=answers))
    assert table.rows[0][0] == "hybrid"
    assert table.rows[0][4] == "passed (vs history); answers FAILED (judge)"


def test_a_variant_whose_answers_failed_says_why_in_the_why_column():
    """Its retrieval passed: the why column tells the answer gate's failure (the CI log's one place
    for it), not that retrieval's metrics were within tolerance."""
    gates = {"hybrid": GateResult(True, "comparable", [_row("ndcg@10", 0.0, True)], "ok")}
    not_compared = GateResult(False, "not_compared", [], "FAILED (not compared): the yardstick changed "
                              "('deterministic:v1+aaa' -> 'deterministic:v1+bbb')")
    dropped = GateResult(False, "comparable", [{"metric": "pass_rate", "delta": -0.2, "tolerance": 0.1,
                                                "passed": False}], "pass_rate dropped")
    answers = Answers({"hybrid": {"deterministic": not_compared, "judge": dropped}})
    why = summary_table(Verdict(SUMMARY, gates, answers=answers)).rows[0][-1]
    assert why.startswith("answers (deterministic): FAILED (not compared): the yardstick changed"), why
    assert why.endswith("(+1 more)"), why
    answers = Answers({"hybrid": {"judge": dropped}})
    assert summary_table(Verdict(SUMMARY, gates, answers=answers)).rows[0][-1] == \
        "answers (judge): pass_rate -0.200 beyond its tolerance 0.100"
