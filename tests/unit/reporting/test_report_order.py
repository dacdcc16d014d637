"""The report reads in the order a reader needs it (issue #28, item 4): the regression gate
first, then the variants, the causes, how far to trust the numbers, the provenance; a sentence
that holds for many variants is written once with their names."""

from types import SimpleNamespace

import pandas as pd

from eval_pipeline.gates.retrieval import GateResult
from eval_pipeline.reporting.answers import _collapsed
from eval_pipeline.reporting.report import SECTIONS, _gate_section, render_report
from eval_pipeline.scoring.variant import HEADLINE_METRICS


def _verdict(states):
    gates = {v: GateResult(passed, state, [], message) for v, (passed, state, message) in states.items()}
    return SimpleNamespace(gates=gates, history={v: SimpleNamespace(treatment_changes=[]) for v in gates},
                           decided_by={}, previous={v: None for v in gates}, reference={v: None for v in gates},
                           previous_gates={}, reference_gates={}, gate_rows=lambda: [])


def test_variants_judged_alike_share_one_line():
    verdict = _verdict({"a": (True, "first_run", "its first run"), "b": (True, "first_run", "its first run"),
                        "c": (False, "not_compared", "FAILED: nothing comparable")})
    lines = _gate_section(verdict)
    assert "- 2 variants, `a`, `b`: **passed** (first_run)." in lines
    assert "- `c`: **FAILED** (not_compared)." in lines
    assert sum(line == "  - its first run" for line in lines) == 1


def test_one_answer_gate_sentence_for_many_pairs():
    assert _collapsed([("`a` static", "passed"), ("`b` static", "passed"), ("`c` static", "FAILED: x")]) == [
        "- 2 (variant, grader) pairs, `a` static, `b` static: passed", "- `c` static: FAILED: x"]


def test_trust_sits_before_the_provenance_and_the_gate_before_the_variants():
    assert SECTIONS["validity"].slot == "before_provenance" and SECTIONS["set_validity"].slot == "before_provenance"
    summary = pd.DataFrame([{"variant": "a", **{m: 1.0 for m in HEADLINE_METRICS}, "n_answerable": 1, "n_errored": 0,
                             "latency_p50_ms": 1.0, "latency_p95_ms": 1.0}])
    per_query = pd.DataFrame([{"variant": "a", "qid": "q", "answerable": True, "miss_class": None, "doc_ids": ["d"],
                               "gold": ["d"], "question": "?"}])
    text = render_report(summary, per_query, {"corpus": "x"},
                         sections={"before_provenance": ["## How far the numbers can be trusted", ""]})
    assert text.index("## Variants") < text.index("## How far the numbers can be trusted") < text.index("## Provenance")


def test_ranks_print_as_people_write_them():
    from eval_pipeline.reporting.set_validity import _ranks_shown

    shown = _ranks_shown(pd.DataFrame({"variant": ["a", "b"], "mean A": [0.1, 0.2], "rank A": [1.0, 1.5],
                                       "mean B": [0.1, 0.2], "rank B": [3.0, float("nan")], "shift": [2.0, -5.5]}))
    assert list(shown["rank A"]) == ["1", "1.5"] and list(shown["rank B"]) == ["3", "–"]
    assert list(shown["shift"]) == ["+2", "-5.5"]


def test_a_grader_at_zero_everywhere_is_explained():
    from eval_pipeline.reporting.answers import _zero_everywhere

    rows = [{"grader": "static", "pass_rate": 0.0, "generator": "local:extractive->extractive-v1+abc"},
            {"grader": "static", "pass_rate": 0.0, "generator": "local:extractive->extractive-v1+abc"},
            {"grader": "deterministic", "pass_rate": 0.5, "generator": "local:extractive->extractive-v1+abc"}]
    notes = _zero_everywhere(SimpleNamespace(rows=rows))
    assert len([n for n in notes if n]) == 1 and "extractive generator returns sentences" in notes[0]
    llm = [{"grader": "static", "pass_rate": 0.0, "generator": "api.example:gpt"}]
    assert "no answer of any variant passed" in _zero_everywhere(SimpleNamespace(rows=llm))[0]
