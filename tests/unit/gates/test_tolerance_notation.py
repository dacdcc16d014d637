"""Retrieval-gate tolerances in scientific notation (issue #26): PyYAML reads `1e-2` without a
dot as a string, which the file's author meant as the number 0.01."""

from __future__ import annotations

import pytest
import yaml

from eval_pipeline.gates.retrieval import validate_tolerances


def test_yaml_reads_scientific_notation_without_a_dot_as_text():
    assert yaml.safe_load("hit@1: 1e-2") == {"hit@1": "1e-2"}  # why the gate must read it


@pytest.mark.parametrize("text, value", [("1e-2", 0.01), ("5E-2", 0.05), ("+1e-2", 0.01), (" 2.5e-1 ", 0.25),
                                         ("1e0", 1.0), ("0e0", 0.0), (".5e-1", 0.05)])
def test_a_scientific_literal_is_a_number(text, value):
    assert validate_tolerances({"hit@1": text}) == {"hit@1": pytest.approx(value, abs=0)}


def test_from_a_yaml_file():
    raw = yaml.safe_load("tolerances: {hit@1: 1e-2, mrr: 0.05}")["tolerances"]
    assert validate_tolerances(raw) == {"hit@1": 0.01, "mrr": 0.05}


@pytest.mark.parametrize("text", ["0.05", "1e", "e-2", "nan", "inf", "1e999", "2e0", "-1e-2", "0x1", "1_0e-2",
                                  "１e-2"])
def test_other_text_is_still_refused_naming_the_setting(text):
    with pytest.raises(ValueError, match=rf"^gate tolerance for 'hit@1' must be a finite number in \[0, 1\], "
                                         rf"got '{text}'$"):
        validate_tolerances({"hit@1": text})
