"""A report renders only the findings measured beside its own verdict (sixth review, hole 4):
findings left from an earlier run are refused, naming the findings, before anything is written."""

from __future__ import annotations

from types import SimpleNamespace

import pandas as pd
import pytest

from eval_pipeline.ranking.inputs import InconsistentInputs
from eval_pipeline.reporting.run import Findings, render_run
from eval_pipeline.verdict.run import metrics_digest


def test_findings_of_another_verdict_are_refused(tmp_path):
    frames = {"dense": pd.DataFrame({"qid": ["q1"], "ndcg@10": [1.0]})}
    verdict = SimpleNamespace(gates={"dense": None}, metrics_digest=metrics_digest(frames), run_id="run-2")
    stale = Findings(sections={}, verdict_run="run-1", metrics_digest="0" * 16)
    with pytest.raises(InconsistentInputs, match=r"findings were measured beside another verdict \(run run-1\), not "
                                                 r"this one \(run run-2\): materialize findings and report again"):
        render_run(verdict, frames, stale, sweep=None, snapshot=None, stores=None, question_set=None,
                   connection_string="", state=None, run_id="run-2", results_dir=tmp_path / "out",
                   record_history=True, warn=print)
    assert not (tmp_path / "out").exists()


def test_a_section_adds_to_the_report_and_never_replaces_what_the_checks_read():
    from eval_pipeline.reporting.report import SectionPart
    from eval_pipeline.reporting.run import add_sections

    output, metadata = {"verdict_failed": ["dense (retrieval)"], "summary": "table"}, {"headline": "FAILED"}
    mine = SimpleNamespace(name="mine")
    add_sections(output, metadata, [(mine, SectionPart(output={"mine": 1}, metadata={"mine count": 1}))])
    assert output["mine"] == 1 and metadata["mine count"] == 1
    with pytest.raises(ValueError, match=r"report section 'sneaky' writes the report's own key\(s\) verdict_failed"):
        add_sections(output, metadata, [(SimpleNamespace(name="sneaky"), SectionPart(output={"verdict_failed": []}))])
    assert output["verdict_failed"] == ["dense (retrieval)"]
