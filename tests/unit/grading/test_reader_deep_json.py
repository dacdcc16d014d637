"""The grader never crashes on depth: a json_schema nested deeper than MAX_SCHEMA_DEPTH is a
ValueError naming the assertion and the path (a malformed spec, as the loader refuses it), and
an answer whose JSON is nested deeply is a failed assertion with a reason (#25, item 7)."""

from __future__ import annotations

import pytest

from eval_pipeline.grading.assertions import grade_deterministic, json_schema_problems
from eval_pipeline.questions.golden import MAX_SCHEMA_DEPTH


def _schema(depth: int) -> dict:
    schema: dict = {"type": "array"}
    for _ in range(depth - 1):
        schema = {"type": "object", "properties": {"a": schema}}
    return schema


@pytest.mark.parametrize("depth", [MAX_SCHEMA_DEPTH + 1, 3000])
def test_a_schema_deeper_than_the_limit_is_a_value_error(depth):
    spec = {"type": "json_schema", "schema": _schema(depth)}
    with pytest.raises(ValueError) as info:
        grade_deterministic("{}", [spec])
    where = "$" + ".a" * MAX_SCHEMA_DEPTH
    assert str(info.value) == (f"assertions[0] (json_schema): schema at {where}: nested deeper than "
                               f"{MAX_SCHEMA_DEPTH} levels")


def test_a_schema_at_the_limit_grades():
    answer = '{"a": ' * (MAX_SCHEMA_DEPTH - 1) + "[]" + "}" * (MAX_SCHEMA_DEPTH - 1)
    assert json_schema_problems(answer, _schema(MAX_SCHEMA_DEPTH)) == []


@pytest.mark.parametrize("depth", [900, 5000, 200_000])
@pytest.mark.parametrize("fenced", [False, True])
def test_a_deeply_nested_answer_is_a_failed_assertion(depth, fenced):
    body = '{"a": ' * depth + "1" + "}" * depth
    answer = f"here:\n```json\n{body}\n```\n" if fenced else body
    grade = grade_deterministic(answer, [{"type": "json_schema", "schema": _schema(MAX_SCHEMA_DEPTH)}])
    assert grade.passed is False
    assert grade.results[0].reason  # why, never an exception
