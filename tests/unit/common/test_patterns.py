"""A user's regular expression (a golden prompt's `regex` assertion) never hangs a run: a
pattern that backtracks catastrophically is refused when the golden set is loaded, naming the
file, line and pattern; any search runs with a time bound (issue #25, item 9: `^(\\w+\\s?)*$`
ran 13 minutes on 10 answers)."""

from __future__ import annotations

import json
import time

import pytest

from eval_pipeline.common.patterns import PatternTimeout, bounded_search, check_bounded, compile_pattern
from eval_pipeline.grading.assertions import check_regex

# Patterns that make a backtracking engine take exponential time. The `regex` engine guards
# against most of them (they finish in milliseconds); the rest are refused at load.
CATASTROPHIC = [r"^(\w+\s?)*$", r"(a+)+$", r"^(a|aa)+$", r"(x+x+)+y", r"^(\d+)*[a-z]$", r"(.*a){25}",
                r"^(a|a?)+$", r"^(\w|\d)+!x$"]
UNGUARDED = r"^(a|aa)+$"  # exponential even for the `regex` engine
FINE = [r"\bpgvector\b", r"^\d{4}-\d{2}-\d{2}$", r"(?i)hnsw|ivfflat", r"^[A-Z][a-z]+(\s[a-z]+)*\.$", r"a.*b.*c"]
LONG_TEXTS = ["a" * 200 + "!", "word " * 200 + "!", "x" * 200, "1" * 200 + "!"]


@pytest.mark.parametrize("pattern", CATASTROPHIC)
def test_a_catastrophic_pattern_is_refused_at_load_or_runs_in_bounded_time(pattern):
    started = time.monotonic()
    compiled = compile_pattern(pattern, ())
    try:
        check_bounded(compiled, pattern)
    except PatternTimeout as refused:
        assert "backtrack" in str(refused) and pattern in str(refused)
    else:
        for text in LONG_TEXTS:
            try:
                bounded_search(compiled, text, timeout=0.5)
            except PatternTimeout:
                pass
    assert time.monotonic() - started < 15


def test_a_pattern_even_the_engine_cannot_guard_is_refused_at_load():
    with pytest.raises(PatternTimeout, match="backtrack"):
        check_bounded(compile_pattern(UNGUARDED, ()), UNGUARDED)


@pytest.mark.parametrize("pattern", FINE)
def test_an_ordinary_pattern_is_accepted(pattern):
    check_bounded(compile_pattern(pattern, ()), pattern)


def test_a_search_is_bounded_in_time():
    compiled = compile_pattern(UNGUARDED, ())
    started = time.monotonic()
    with pytest.raises(PatternTimeout):
        bounded_search(compiled, "a" * 60 + "!", timeout=0.2)
    assert time.monotonic() - started < 5


def test_the_deterministic_grader_never_hangs():
    started = time.monotonic()
    assert not check_regex("word " * 400 + "!", r"^(\w+\s?)*$")  # the pattern: fast now
    assert time.monotonic() - started < 2
    with pytest.raises(PatternTimeout):
        check_regex("a" * 60 + "!", UNGUARDED)
    assert time.monotonic() - started < 15


def test_flags_and_invalid_patterns():
    assert bounded_search(compile_pattern("HNSW", ("i",)), "an hnsw index")
    with pytest.raises(ValueError, match="not a valid regular expression"):
        compile_pattern("(", ())


def test_loading_a_golden_set_with_a_catastrophic_pattern_names_file_line_and_pattern(tmp_path):
    from eval_pipeline.questions.golden import GoldenPromptError, load_golden_prompts

    path = tmp_path / "golden.jsonl"
    rows = [{"kind": "eval-pipeline/golden-prompts", "version": 1, "set": "team.words"},
            {"id": "p1", "prompt": "say hi", "assertions": [{"type": "contains", "value": "hi"}]},
            {"id": "p2", "prompt": "say words", "assertions": [{"type": "regex", "pattern": UNGUARDED}]}]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n", encoding="utf-8")
    with pytest.raises(GoldenPromptError) as err:
        load_golden_prompts(path, require_fingerprint=False)
    message = str(err.value)
    assert f"{path}:3" in message and "backtrack" in message and UNGUARDED in message
