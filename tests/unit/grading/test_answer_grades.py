"""Tests for eval_pipeline.grading.assertions: the deterministic and static graders.

Every case is hand-made; expected scores are worked out in the comments next to them.
"""

from __future__ import annotations

import builtins
import copy
import os
import sys
from types import MappingProxyType

import pytest

from eval_pipeline.grading.assertions import (
    AssertionResult,
    DeterministicGrade,
    StaticCheck,
    StaticGrade,
    check_contains,
    check_exact,
    check_json_schema,
    check_regex,
    grade_deterministic,
    grade_static,
    json_schema_problems,
    python_blocks,
)

E_COMPOSED = "caf\u00e9"  # é as one code point
E_DECOMPOSED = "cafe\u0301"  # e + combining acute accent
FENCE = "```"


# ---------------------------------------------------------------------------
# exact
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("answer, value, expected", [
    ("Paris", "Paris", True),
    ("  Paris\n", "Paris", True),          # the answer is trimmed
    ("Paris", "  Paris  ", True),          # so is the value
    ("\u00a0Paris\t", "Paris", True),      # NBSP is whitespace to str.strip
    ("\u200bParis", "Paris", False),       # a zero-width space is not
    ("paris", "Paris", False),             # no case folding
    ("Paris.", "Paris", False),
    ("Pa ris", "Paris", False),            # inner whitespace counts
    ("", "Paris", False),                  # empty answer
    ("", "", True),                        # a blank value asserts an empty answer
    ("   \n", "", True),
    ("Ελλάδα", "Ελλάδα", True),            # Greek
    ("🚀 launch", "🚀 launch", True),      # emoji
    ("🚀", "🛸", False),
])
def test_exact(answer, value, expected):
    assert check_exact(answer, value) is expected


def test_exact_treats_composed_and_decomposed_as_the_same_text():
    assert E_COMPOSED != E_DECOMPOSED and len(E_COMPOSED) == 4 and len(E_DECOMPOSED) == 5
    assert check_exact(E_DECOMPOSED, E_COMPOSED)
    assert check_exact(E_COMPOSED, E_DECOMPOSED)


def test_exact_is_nfc_not_nfkc():
    # the ligature "ﬁ" (U+FB01) is a compatibility character: NFC keeps it
    assert not check_exact("\ufb01le", "file")
    # full-width digits are not ASCII digits either
    assert not check_exact("\uff11\uff12", "12")


# ---------------------------------------------------------------------------
# contains
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("answer, value, kwargs, expected", [
    ("The approver is Alice.", "alice", {}, True),             # case-insensitive by default
    ("The approver is Alice.", "alice", {"case_sensitive": True}, False),
    ("The approver is Alice.", "Alice", {"case_sensitive": True}, True),
    ("Die STRASSE ist lang", "straße", {}, True),              # casefold: ß -> ss
    ("Die Straße ist lang", "STRASSE", {}, True),
    ("Die Straße ist lang", "STRASSE", {"case_sensitive": True}, False),
    ("ΟΔΥΣΣΕΥΣ", "οδυσσευς", {}, True),                        # final sigma folds to σ
    ("deploy 🚀 now", "🚀", {}, True),
    ("", "x", {}, False),                                      # empty answer
    ("say no more", " no ", {}, True),                         # the value is not trimmed
    ("no more", " no ", {}, False),
])
def test_contains(answer, value, kwargs, expected):
    assert check_contains(answer, value, **kwargs) is expected


def test_contains_normalises_both_sides():
    assert check_contains(f"Le {E_DECOMPOSED} est ouvert", E_COMPOSED)
    assert check_contains(f"Le {E_COMPOSED} est ouvert", E_DECOMPOSED, case_sensitive=True)
    assert check_contains(f"LE {E_DECOMPOSED.upper()}", E_COMPOSED)  # CAFÉ, decomposed, folded


def test_contains_rejects_an_empty_value_and_a_non_bool_flag():
    with pytest.raises(ValueError, match="value"):
        check_contains("anything", "")
    with pytest.raises(ValueError, match="case_sensitive"):
        check_contains("anything", "a", case_sensitive="false")
    with pytest.raises(ValueError, match="value"):
        check_contains("anything", None)


# ---------------------------------------------------------------------------
# regex
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("answer, pattern, flags, expected", [
    ("Ticket INC-1234 is open", r"INC-\d{4}", (), True),           # search, not match
    ("Ticket inc-1234 is open", r"INC-\d{4}", (), False),
    ("Ticket inc-1234 is open", r"INC-\d{4}", ["i"], True),
    ("first\nsecond", r"^second$", (), False),
    ("first\nsecond", r"^second$", ["m"], True),
    ("begin\nend", r"begin.end", (), False),
    ("begin\nend", r"begin.end", ["s"], True),
    ("BEGIN\nEND", r"^begin.end$", ["i", "m", "s"], True),
    ("  42  \n", r"^\d+$", (), True),                               # the answer is trimmed
    ("", r"^$", (), True),                                          # empty answer
    ("", r".", (), False),
    ("Ωμέγα", r"^\w+$", (), True),                                  # \w is Unicode
    ("go 🚀", "🚀$", (), True),
])
def test_regex(answer, pattern, flags, expected):
    assert check_regex(answer, pattern, flags) is expected


def test_regex_sees_the_nfc_answer():
    assert check_regex(E_DECOMPOSED, f"^{E_COMPOSED}$")
    assert check_regex(E_DECOMPOSED, r"^\w{4}$")  # 4 letters after NFC, not 4 + a combining mark


def test_regex_rejects_bad_flags_and_patterns():
    with pytest.raises(ValueError, match="flags"):
        check_regex("x", "x", ["x"])
    with pytest.raises(TypeError, match="flags"):
        check_regex("x", "x", "im")  # a bare string, not a list
    with pytest.raises(ValueError, match="pattern"):
        check_regex("x", "(unclosed")


# ---------------------------------------------------------------------------
# json_schema
# ---------------------------------------------------------------------------

CHANGE = {
    "type": "object",
    "required": ["approver", "steps"],
    "properties": {
        "approver": {"type": "string"},
        "steps": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["id", "owner"],
                "properties": {
                    "id": {"type": "integer"},
                    "owner": {
                        "type": "object",
                        "required": ["name"],
                        "properties": {"name": {"type": "string"}, "oncall": {"type": "boolean"}},
                    },
                },
            },
        },
    },
}

GOOD = '{"approver": "Alice", "steps": [{"id": 1, "owner": {"name": "Bob"}}, {"id": 2, "owner": {"name": "Zoë", "oncall": true}}], "extra": null}'


def test_json_schema_nested_pass_with_extra_keys():
    assert json_schema_problems(GOOD, CHANGE) == []
    assert check_json_schema(GOOD, CHANGE)


def test_json_schema_required_at_depth_and_wrong_type_at_depth():
    # steps[0].owner lacks "name"; steps[1].id is a string; steps[1].owner.oncall is a string
    answer = '{"approver": "Alice", "steps": [{"id": 1, "owner": {}}, {"id": "2", "owner": {"name": "B", "oncall": "yes"}}]}'
    assert json_schema_problems(answer, CHANGE) == [
        "$.steps[0].owner.name: required key is missing",
        '$.steps[1].id: expected integer, got string ("2")',
        '$.steps[1].owner.oncall: expected boolean, got string ("yes")',
    ]
    assert not check_json_schema(answer, CHANGE)


def test_json_schema_missing_top_level_key_and_wrong_top_level_type():
    assert json_schema_problems('{"steps": []}', CHANGE) == ["$.approver: required key is missing"]
    # an array is not an object: required/properties do not apply to it
    assert json_schema_problems("[1, 2]", CHANGE) == ["$: expected object, got array"]
    assert json_schema_problems('"done"', {"type": "object"}) == ['$: expected object, got string ("done")']


def test_json_schema_required_key_with_null_value_is_present():
    assert check_json_schema('{"approver": null, "steps": []}', {"type": "object", "required": ["approver"]})
    # ... but its declared type still applies
    assert json_schema_problems('{"approver": null, "steps": []}', CHANGE) == ["$.approver: expected string, got null (null)"]


@pytest.mark.parametrize("document, type_name, expected", [
    ("3", "integer", True),
    ("-0", "integer", True),
    ("3.0", "integer", False),       # a JSON number with a fraction is a number, not an integer
    ("1e2", "integer", False),
    ("true", "integer", False),      # a boolean is never an integer ...
    ("false", "number", False),      # ... nor a number
    ("3", "number", True),           # an integer is a number
    ("3.5", "number", True),
    ("true", "boolean", True),
    ("0", "boolean", False),
    ("null", "null", True),
    ('""', "string", True),
    ('"3"', "integer", False),
    ("[]", "array", True),
    ("{}", "object", True),
    ("{}", "array", False),
])
def test_json_schema_types(document, type_name, expected):
    assert check_json_schema(document, {"type": type_name}) is expected


def test_json_schema_bool_at_depth_is_not_an_integer():
    schema = {"type": "array", "items": {"type": "integer"}}
    assert json_schema_problems("[1, true, 2.0, 3]", schema) == [
        "$[1]: expected integer, got boolean (true)",
        "$[2]: expected integer, got number (2.0)",
    ]


def test_json_schema_type_list():
    schema = {"type": "object", "properties": {"due": {"type": ["string", "null"]}}}
    assert check_json_schema('{"due": null}', schema)
    assert check_json_schema('{"due": "friday"}', schema)
    assert json_schema_problems('{"due": 5}', schema) == ["$.due: expected string or null, got integer (5)"]


def test_json_schema_array_of_arrays():
    schema = {"type": "array", "items": {"type": "array", "items": {"type": "string"}}}
    assert check_json_schema('[["a"], [], ["b", "c"]]', schema)
    assert json_schema_problems('[["a"], ["b", 1]]', schema) == ["$[1][1]: expected string, got integer (1)"]


def test_json_schema_unicode_keys_and_values():
    schema = {"type": "object", "required": ["προσοχή", "first name", "🚀"],
              "properties": {"προσοχή": {"type": "string"}, "first name": {"type": "string"}}}
    assert check_json_schema('{"προσοχή": "ναι", "first name": "Zoë", "🚀": 1}', schema)
    # Greek letters make an identifier (dotted path); a space or an emoji does not (quoted path)
    assert json_schema_problems('{"προσοχή": 1}', schema) == [
        '$["first name"]: required key is missing',
        '$["🚀"]: required key is missing',
        "$.προσοχή: expected string, got integer (1)",
    ]


def test_json_schema_fenced_json_with_prose_around():
    answer = (
        "Here is the change record you asked for:\n\n"
        "```json\n" + GOOD + "\n```\n\n"
        "Let me know if the approver should change."
    )
    assert check_json_schema(answer, CHANGE)
    # a bare (untagged) fence is read too
    assert check_json_schema(f"Result:\n{FENCE}\n{{\"approver\": \"A\", \"steps\": []}}\n{FENCE}\n", CHANGE)
    # the tag is case-insensitive; tildes fence too
    assert check_json_schema("Result:\n~~~JSON\n{\"approver\": \"A\", \"steps\": []}\n~~~\n", CHANGE)


def test_json_schema_prefers_a_json_fence_over_an_earlier_untagged_one():
    answer = f"Run:\n{FENCE}\n$ make change\n{FENCE}\nThen:\n{FENCE}json\n{{\"approver\": \"A\", \"steps\": []}}\n{FENCE}\n"
    assert check_json_schema(answer, CHANGE)


def test_json_schema_reads_only_the_first_json_fence():
    # first json fence is wrong; a later good one is not consulted
    answer = f"{FENCE}json\n{{\"steps\": []}}\n{FENCE}\n{FENCE}json\n{{\"approver\": \"A\", \"steps\": []}}\n{FENCE}\n"
    assert json_schema_problems(answer, CHANGE) == ["$.approver: required key is missing"]


def test_json_schema_never_reads_other_tags_or_unfenced_json():
    assert json_schema_problems(f"{FENCE}python\n{{\"a\": 1}}\n{FENCE}", {"type": "object"}) == [
        "$: the answer is not JSON and has no ```json or untagged fence"
    ]
    assert not check_json_schema('The record is {"approver": "A", "steps": []} as requested.', CHANGE)


def test_json_schema_invalid_json_in_a_fence_names_the_line():
    problems = json_schema_problems("Record:\n\n```json\n{\"approver\": }\n```", {"type": "object"})
    assert len(problems) == 1 and problems[0].startswith("$: the ```json block at line 3 is not valid JSON")


def test_json_schema_rejects_nan_and_infinity():
    assert not check_json_schema("NaN", {"type": "number"})
    assert not check_json_schema('{"x": Infinity}', {"type": "object"})


def test_json_schema_empty_and_whitespace_answers():
    for answer in ("", "   \n\t"):
        assert json_schema_problems(answer, {}) == ["$: the answer is not JSON and has no ```json or untagged fence"]


def test_json_schema_empty_schema_accepts_any_json():
    assert check_json_schema("null", {})
    assert check_json_schema('  [1, "two", {"3": [4]}]  ', {})


def test_json_schema_annotations_are_ignored():
    schema = {"$schema": "x", "title": "T", "description": "D", "$comment": "C", "type": "object"}
    assert check_json_schema("{}", schema)


@pytest.mark.parametrize("schema, where", [
    ({"type": "int"}, r"\$: unknown type 'int'"),
    ({"type": []}, r"\$: type must be"),
    ({"type": "object", "additionalProperties": False}, r"\$: unsupported keyword 'additionalProperties'"),
    ({"required": "name"}, r"\$: required must be a list"),
    ({"properties": {"a": {"type": "array", "items": {"type": "float"}}}}, r"\$\.a\[\*\]: unknown type 'float'"),
    ({"properties": {"a": "string"}}, r"\$\.a must be a mapping"),
    ({"items": [{"type": "string"}]}, r"\$\[\*\] must be a mapping"),
    (True, r"\$ must be a mapping"),
])
def test_json_schema_rejects_a_malformed_schema_whatever_the_answer(schema, where):
    for answer in ("{}", "", "not json"):
        with pytest.raises(ValueError, match=where):
            check_json_schema(answer, schema)


def test_json_schema_deeply_nested_answer_is_a_problem_not_a_crash():
    answer = "[" * 100_000 + "]" * 100_000
    problems = json_schema_problems(answer, {"type": "array"})
    assert problems == ["$: the answer's JSON is too deeply nested to read"]


# ---------------------------------------------------------------------------
# grade_deterministic
# ---------------------------------------------------------------------------


def test_grade_all_hold():
    grade = grade_deterministic("  Paris  ", [
        {"type": "exact", "value": "Paris"},
        {"type": "contains", "value": "par"},
        {"type": "regex", "pattern": "^P"},
    ])
    assert grade == DeterministicGrade(passed=True, score=1.0, results=(
        AssertionResult("exact", True, ""),
        AssertionResult("contains", True, ""),
        AssertionResult("regex", True, ""),
    ))


def test_grade_score_is_the_fraction_that_hold():
    # exact fails ("Paris, France" != "Paris"), contains holds, regex with "i" holds,
    # json_schema fails (not JSON): 2 of 4 hold -> 0.5
    grade = grade_deterministic("Paris, France", [
        {"type": "exact", "value": "Paris"},
        {"type": "contains", "value": "FRANCE", "case_sensitive": False},
        {"type": "regex", "pattern": "^paris", "flags": ["i"]},
        {"type": "json_schema", "schema": {"type": "object"}},
    ])
    assert grade.passed is False
    assert grade.score == 0.5
    assert [(r.type, r.held) for r in grade.results] == [
        ("exact", False), ("contains", True), ("regex", True), ("json_schema", False),
    ]
    assert grade.results[0].reason == "trimmed answer 'Paris, France' is not exactly 'Paris'"
    assert grade.results[3].reason == "$: the answer is not JSON and has no ```json or untagged fence"
    assert isinstance(grade.results[0], tuple) and grade.results[0][:2] == ("exact", False)


def test_grade_one_of_three():
    # only the case-sensitive contains holds: 1/3
    grade = grade_deterministic("Use kubectl rollout undo", [
        {"type": "contains", "value": "kubectl", "case_sensitive": True},
        {"type": "contains", "value": "KUBECTL", "case_sensitive": True},
        {"type": "regex", "pattern": r"helm\s+rollback"},
    ])
    assert grade.score == pytest.approx(1 / 3)
    assert grade.passed is False
    assert grade.results[1].reason == "answer does not contain 'KUBECTL' (case-sensitive)"
    assert grade.results[2].reason == r"no match for /helm\s+rollback/"


def test_grade_an_empty_answer_evaluates_every_assertion():
    # exact "" holds, contains fails, regex ^$ holds, json fails: 2/4
    grade = grade_deterministic("", [
        {"type": "exact", "value": ""},
        {"type": "contains", "value": "x"},
        {"type": "regex", "pattern": "^$"},
        {"type": "json_schema", "schema": {}},
    ])
    assert grade.score == 0.5 and grade.passed is False
    assert [r.held for r in grade.results] == [True, False, True, False]


def test_grade_without_assertions_is_not_gradable():
    grade = grade_deterministic("anything", [])
    assert grade == DeterministicGrade(passed=None, score=None, results=())
    assert grade_deterministic("", ()).score is None


def test_grade_json_reason_lists_at_most_five_problems():
    answer = "[" + ", ".join(['"x"'] * 7) + "]"
    grade = grade_deterministic(answer, [{"type": "json_schema", "schema": {"type": "array", "items": {"type": "integer"}}}])
    reason = grade.results[0].reason
    assert reason.count("expected integer") == 5 and reason.endswith("; and 2 more")


@pytest.mark.parametrize("spec, message", [
    ({"type": "semantic", "value": "x"}, "unknown assertion type 'semantic'"),
    ({"value": "x"}, "unknown assertion type None"),
    ({"type": ["exact"], "value": "x"}, "unknown assertion type"),
    ({"type": "exact"}, r"missing field\(s\) \['value'\]"),
    ({"type": "regex", "value": "x"}, r"missing field\(s\) \['pattern'\]"),
    ({"type": "contains", "value": "x", "case_sensitve": True}, r"unknown field\(s\) \['case_sensitve'\]"),
    ({"type": "exact", "value": "x", "case_sensitive": True}, r"unknown field\(s\) \['case_sensitive'\]"),
    ({"type": "contains", "value": ""}, "value must not be empty"),
    ({"type": "exact", "value": 3}, "value must be a str"),
    ({"type": "regex", "pattern": "x", "flags": ["g"]}, "flags may hold only"),
    ({"type": "regex", "pattern": "x", "flags": "i"}, "flags must be a sequence"),
    ({"type": "json_schema", "schema": {"type": "int"}}, "unknown type 'int'"),
])
def test_grade_refuses_a_malformed_assertion(spec, message):
    with pytest.raises(ValueError, match=message) as info:
        grade_deterministic("answer", [{"type": "exact", "value": "answer"}, spec])
    assert "assertions[1]" in str(info.value)


def test_grade_refuses_a_malformed_assertion_even_on_an_empty_answer():
    with pytest.raises(ValueError, match="unknown assertion type 'llm'"):
        grade_deterministic("", [{"type": "llm"}])


def test_grade_argument_types():
    with pytest.raises(TypeError, match="answer"):
        grade_deterministic(None, [{"type": "exact", "value": "x"}])
    with pytest.raises(TypeError, match="assertions"):
        grade_deterministic("x", {"type": "exact", "value": "x"})  # one mapping, not a list of them
    with pytest.raises(ValueError, match=r"assertions\[0\] must be a mapping"):
        grade_deterministic("x", ["exact"])


def test_grade_accepts_read_only_mappings_and_does_not_mutate_its_inputs():
    assertions = [
        {"type": "exact", "value": " Paris "},
        {"type": "regex", "pattern": "P", "flags": ["i", "m"]},
        {"type": "json_schema", "schema": copy.deepcopy(CHANGE)},
        {"type": "contains", "value": "ari"},
    ]
    before = copy.deepcopy(assertions)
    grade_deterministic(" Paris ", assertions)
    assert assertions == before
    frozen = tuple(MappingProxyType(a) for a in assertions)
    assert grade_deterministic("Paris", frozen).score == 0.75  # all but json_schema


# ---------------------------------------------------------------------------
# fences and python_blocks
# ---------------------------------------------------------------------------


def test_python_blocks_tags_untagged_and_sessions():
    answer = (
        "Intro\n"
        "```python\nx = 1\n```\n"
        "```\ny = 2\n```\n"                        # untagged: skipped
        "```PY\nz = 3\n```\n"                      # tag is case-insensitive
        "```python3 title=demo.py\nw = 4\n```\n"   # first word of the info string
        "```python\n\n>>> 1 + 1\n2\n```\n"         # a >>> session: skipped
        "```pycon\nv = 5\n```\n"                   # other tags: skipped
        "```bash\npip install x\n```\n"
    )
    assert python_blocks(answer) == ["x = 1", "z = 3", "w = 4"]


def test_python_blocks_fence_details():
    # tildes; a longer closing fence; an indented fence in a list item (dedented);
    # an inline ```python x``` is not a fence; an unclosed fence runs to the end
    answer = (
        "~~~python\na = 1\n~~~\n"
        "````python\nb = '```'\n```\nc = 2\n``````\n"
        "1. step one\n\n   ```python\n   if a:\n       b = 1\n   ```\n"
        "Inline ```python nope``` here.\n"
        "```python\nlast = 1\n"
    )
    assert python_blocks(answer) == ["a = 1", "b = '```'\n```\nc = 2", "if a:\n    b = 1", "last = 1"]


def test_python_blocks_handles_crlf_and_empty_answers():
    assert python_blocks("```python\r\nx = 1\r\n```\r\n") == ["x = 1"]
    assert python_blocks("") == []


# ---------------------------------------------------------------------------
# grade_static
# ---------------------------------------------------------------------------


def _checks(grade: StaticGrade) -> list[tuple[str, str, bool]]:
    return [(c.kind, c.subject, c.held) for c in grade.checks]


def test_static_all_checks_hold():
    answer = (
        "Wrap the layer in `nn.Linear` and call json.dumps on the result.\n\n"
        "```python\nimport json\nimport torch.nn as nn\nfrom collections import OrderedDict\n"
        "layer = nn.Linear(4, 2)\n```\n"
    )
    grade = grade_static(answer, allowed_imports=["torch"], symbols=["torch.nn.Linear", "json.dumps"])
    assert _checks(grade) == [
        ("parses", "block 1", True),
        ("import", "json", True),
        ("import", "torch.nn", True),
        ("import", "collections", True),
        ("symbol", "torch.nn.Linear", True),
        ("symbol", "json.dumps", True),
    ]
    assert grade.passed is True and grade.score == 1.0


def test_static_syntax_error_reports_the_line():
    answer = "Fix:\n\n```python\nx = 1\ndef broken(:\n    pass\n```\n"
    grade = grade_static(answer)
    assert grade == StaticGrade(passed=False, score=0.0, checks=(
        StaticCheck("parses", "block 1", False,
                    "SyntaxError at line 2 of block 1 (answer line 5): invalid syntax"),
    ))


def test_static_imports_of_a_block_that_does_not_parse_are_not_checked():
    # block 1 parses, block 2 does not (its "import requests" is not checked), os is stdlib:
    # 3 checks, 2 hold -> 2/3
    answer = "```python\nimport os\n```\n```python\nimport requests\nprint(\n```\n"
    grade = grade_static(answer)
    assert _checks(grade) == [("parses", "block 1", True), ("parses", "block 2", False), ("import", "os", True)]
    assert grade.score == pytest.approx(2 / 3)
    assert grade.checks[1].reason == "SyntaxError at line 2 of block 2 (answer line 6): '(' was never closed"


def test_static_relative_imports_are_rejected():
    answer = "```python\nfrom . import helpers\nfrom ..pkg.mod import thing\nfrom .utils import x\n```\n"
    grade = grade_static(answer, allowed_imports=["pkg", "utils"])
    # 1 parse check holds, 3 relative imports fail: 1/4
    assert _checks(grade) == [
        ("parses", "block 1", True),
        ("import", ".", False),
        ("import", "..pkg.mod", False),
        ("import", ".utils", False),
    ]
    assert grade.score == 0.25
    assert grade.checks[1].reason == "relative import of '.' (block 1, line 1)"


def test_static_disallowed_root_and_component_boundaries():
    answer = (
        "```python\nimport torch\nimport torchvision\nimport requests.adapters\n"
        "from google.cloud import storage\nfrom google.protobuf import message\n```\n"
    )
    grade = grade_static(answer, allowed_imports=("torch", "google.cloud"))
    assert _checks(grade) == [
        ("parses", "block 1", True),
        ("import", "torch", True),
        ("import", "torchvision", False),      # "torch" allows torch.*, not torchvision
        ("import", "requests.adapters", False),
        ("import", "google.cloud", True),      # a dotted entry allows that package
        ("import", "google.protobuf", False),  # but not its siblings
    ]
    assert grade.score == pytest.approx(3 / 6)
    assert grade.checks[2].reason == (
        "'torchvision' (block 1, line 2): root 'torchvision' is neither in allowed_imports nor the standard library"
    )


def test_static_allowed_imports_none_allows_any_absolute_import():
    answer = "```python\nimport requests\nimport torch.nn\nfrom . import local\n```\n"
    grade = grade_static(answer, allowed_imports=None)
    # parses, requests, torch.nn hold; the relative import still fails: 3/4
    assert _checks(grade) == [
        ("parses", "block 1", True), ("import", "requests", True), ("import", "torch.nn", True),
        ("import", ".", False),
    ]
    assert grade.score == 0.75
    # the default allows the standard library only
    assert grade_static("```python\nimport requests\n```").score == 0.5


def test_static_standard_library_is_always_allowed():
    answer = (
        "```python\nfrom __future__ import annotations\nimport os.path, sys\nimport xml.etree.ElementTree as ET\n"
        "from urllib.parse import urlparse\n"
        "def f():\n    try:\n        import tomllib\n    except ImportError:\n        import json\n```\n"
    )
    grade = grade_static(answer)
    assert [c.subject for c in grade.checks if c.kind == "import"] == [
        "__future__", "os.path", "sys", "xml.etree.ElementTree", "urllib.parse", "tomllib", "json",
    ]
    assert grade.passed is True and grade.score == 1.0


def test_static_counts_each_module_once():
    # "import os" in two blocks and twice in one: one import check
    answer = "```python\nimport os\nimport os\n```\n```python\nimport os\nimport yaml\n```\n"
    grade = grade_static(answer)
    assert _checks(grade) == [
        ("parses", "block 1", True), ("parses", "block 2", True),
        ("import", "os", True), ("import", "yaml", False),
    ]
    assert grade.score == 0.75


def test_static_session_and_untagged_fences_are_skipped():
    answer = (
        "```python\n>>> import evil\n>>> evil.run(\n```\n"  # a session, and it would not parse
        "```\nimport requests\ndef (:\n```\n"              # untagged, same
    )
    assert grade_static(answer) == StaticGrade(passed=None, score=None, checks=())
    # with a symbol declared there is one check; the code in fences is not prose
    grade = grade_static(answer + "See evil.run above.", symbols=["requests"])
    assert _checks(grade) == [("symbol", "requests", False)]
    assert grade.score == 0.0


def test_static_not_applicable_without_python_or_symbols():
    for answer in ("", "Plain prose, no code.", "```bash\nrm -rf build\n```"):
        assert grade_static(answer, allowed_imports=["numpy"]) == StaticGrade(None, None, ())


def test_static_empty_answer_with_symbols_fails_them():
    grade = grade_static("", symbols=["kubectl"])
    assert grade == StaticGrade(False, 0.0, (
        StaticCheck("symbol", "kubectl", False, "'kubectl' is not mentioned in the prose outside the code blocks"),
    ))


@pytest.mark.parametrize("prose, symbol, expected", [
    ("Use torch.nn.Linear here.", "torch.nn.Linear", True),      # full path
    ("Use `nn.Linear` here.", "torch.nn.Linear", True),          # two-part suffix
    ("Use Linear here.", "torch.nn.Linear", False),              # the last part alone does not count
    ("Use nn.Linear.", "torch.nn.Linear", True),                 # sentence full stop
    ("Use nn.LinearLayer.", "torch.nn.Linear", False),           # word boundary at the end
    ("Use cnn.Linear.", "torch.nn.Linear", False),               # word boundary at the start
    ("Use nn.linear.", "torch.nn.Linear", False),                # case-sensitive
    ("Use functional.relu.", "torch.nn.functional.relu", True),  # any suffix of >= 2 parts
    ("Use nn.functional.relu.", "torch.nn.functional.relu", True),
    ("Call nn.Linear(4, 2).", "nn.Linear", True),
    ("Call torch.nn.Linear.", "nn.Linear", True),                # a longer path mentions it too
    ("Call Linear.", "Linear", True),                            # an undotted symbol is itself
    ("Call nn.Linear.", "Linear", True),
    ("Call LinearRegression.", "Linear", False),
    ("Call my_Linear.", "Linear", False),                        # _ is a word character
    ("Set --dry-run first.", "--dry-run", True),                 # non-word edges work
    ("Θέσε το όριο_max.", "όριο_max", True),                     # unicode words
    ("Θέσε τοόριο_max.", "όριο_max", False),
])
def test_static_symbol_tolerance(prose, symbol, expected):
    grade = grade_static(prose, symbols=[symbol])
    assert grade.checks[0].held is expected


def test_static_symbols_in_decomposed_form_match_composed_prose():
    assert grade_static(f"Open the {E_COMPOSED}.", symbols=[E_DECOMPOSED]).passed is True


def test_static_symbol_only_in_code_does_not_count():
    answer = "Here:\n```python\nimport torch\nlayer = torch.nn.Linear(2, 2)\n```\n"
    grade = grade_static(answer, allowed_imports=["torch"], symbols=["torch.nn.Linear"])
    # parses holds, import holds, symbol fails: 2/3
    assert _checks(grade) == [("parses", "block 1", True), ("import", "torch", True), ("symbol", "torch.nn.Linear", False)]
    assert grade.score == pytest.approx(2 / 3)


def test_static_unparseable_source_is_a_failed_check_not_an_exception():
    grade = grade_static("```python\nx = 'a\x00b'\n```")
    assert grade.passed is False and grade.checks[0].kind == "parses"
    deep = "```python\nx = " + "(" * 1000 + ")" * 1000 + "\n```"
    assert grade_static(deep).checks[0].held is False


def test_static_argument_validation():
    with pytest.raises(TypeError, match="allowed_imports"):
        grade_static("x", allowed_imports="torch")
    with pytest.raises(TypeError, match="symbols"):
        grade_static("x", symbols="nn.Linear")
    with pytest.raises(ValueError, match="allowed_imports"):
        grade_static("x", allowed_imports=["torch nn"])
    with pytest.raises(ValueError, match="allowed_imports"):
        grade_static("x", allowed_imports=[""])
    with pytest.raises(ValueError, match="symbols"):
        grade_static("x", symbols=[" "])
    with pytest.raises(ValueError, match="symbols"):
        grade_static("x", symbols=[3])
    with pytest.raises(TypeError, match="answer"):
        grade_static(b"```python\nx\n```")


def test_static_does_not_mutate_its_inputs():
    allowed = ["torch"]
    symbols = ["torch.nn.Linear"]
    grade_static("Use nn.Linear.\n```python\nimport torch\n```", allowed_imports=allowed, symbols=symbols)
    assert allowed == ["torch"] and symbols == ["torch.nn.Linear"]
    # one-shot iterables are fine too
    grade = grade_static("Use nn.Linear.", allowed_imports=iter(allowed), symbols=iter(symbols))
    assert grade.passed is True


def test_static_never_runs_the_code(tmp_path, monkeypatch):
    marker = tmp_path / "x"
    imported_marker = tmp_path / "imported"
    # a module that would leave a file behind if anything imported it
    (tmp_path / "answer_side_effect_mod.py").write_text(
        f"open({str(imported_marker)!r}, 'w').close()\n", encoding="utf-8"
    )
    monkeypatch.syspath_prepend(str(tmp_path))

    def forbidden(*args, **kwargs):
        raise AssertionError("the grader ran code")

    monkeypatch.setattr(builtins, "exec", forbidden)
    monkeypatch.setattr(builtins, "eval", forbidden)
    monkeypatch.setattr(os, "system", forbidden)
    answer = (
        "Run this:\n```python\n"
        f'import os; os.system("touch {marker}")\n'
        "import answer_side_effect_mod\n"
        "```\n"
    )
    grade = grade_static(answer, allowed_imports=["answer_side_effect_mod"])
    assert _checks(grade) == [
        ("parses", "block 1", True), ("import", "os", True), ("import", "answer_side_effect_mod", True),
    ]
    assert not marker.exists()
    assert not imported_marker.exists()
    assert "answer_side_effect_mod" not in sys.modules
    # the deterministic grader does not run it either
    grade_deterministic(answer, [{"type": "contains", "value": "os.system"}])
    assert not marker.exists()
