"""A question set without an abstention slice says so in the report's trust section (issue #26)."""

from __future__ import annotations

import math

from eval_pipeline.reporting.validity import no_abstention_warning


def test_a_set_without_abstention_questions_is_warned_about():
    (line,) = no_abstention_warning({"abstention_share": 0.0})
    assert "no abstention question" in line and "abstention_frac" in line


def test_a_set_with_a_slice_or_without_the_count_is_not():
    assert no_abstention_warning({"abstention_share": 0.19}) == []
    assert no_abstention_warning({}) == []
    assert no_abstention_warning({"abstention_share": math.nan}) == []
