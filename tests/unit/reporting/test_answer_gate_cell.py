"""The answer table's gate cell never puts a passing gate that judged nothing in the words of
a failed one: `not_comparable` (a warning, passed) and `not_compared` (failed closed) differ."""

from eval_pipeline.gates.retrieval import GateResult
from eval_pipeline.reporting.answers import _gate_cell


def test_each_state_reads_as_what_it_decided():
    assert _gate_cell(GateResult(True, "comparable")) == "passes"
    assert _gate_cell(GateResult(True, "first_run")) == "first run"
    assert _gate_cell(GateResult(True, "not_comparable")) == "not comparable (warning)"
    assert _gate_cell(GateResult(False, "not_compared")) == "**fails**"
    assert _gate_cell(GateResult(False, "not_comparable")) == "**fails**"
