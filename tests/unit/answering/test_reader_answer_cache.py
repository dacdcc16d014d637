"""A damaged answer-cache entry is answered again with a warning naming the file, never a bare
KeyError on every run (#25)."""

from __future__ import annotations

import logging

import pytest

from eval_pipeline.answering.cache import AnswerCache, answer_key
from eval_pipeline.answering.context import ContextEntry

CONTEXT = (ContextEntry(1, "a:0", "a", "Alpha text."),)
GENERATOR = {"kind": "llm", "llm": {"model": "m"}, "prompt_version": "answer-1+x"}


@pytest.mark.parametrize("content, why", [
    ("{}", "no 'text' string"),
    ('{"text": 5, "cached": true}', "no 'text' string"),
    ("[]", "not a JSON object"),
    ('"answer"', "not a JSON object"),
    ("{half", "invalid JSON"),
])
def test_a_damaged_entry_is_answered_again_with_a_warning(tmp_path, caplog, content, why):
    cache = AnswerCache(tmp_path)
    cache.answer_all([("q1", CONTEXT)], GENERATOR, lambda p, c: {"text": "x"})
    path = cache._path(answer_key("q1", CONTEXT, GENERATOR))
    path.write_text(content, encoding="utf-8")
    with caplog.at_level(logging.WARNING, logger="eval_pipeline.answering.cache"):
        assert cache.get(answer_key("q1", CONTEXT, GENERATOR)) is None
        (again,) = cache.answer_all([("q1", CONTEXT)], GENERATOR, lambda p, c: {"text": "y"})
    assert again == {"text": "y", "cached": False}
    assert f"{path}: damaged answer cache entry ({why}); answering again" in caplog.messages
    (reread,) = cache.answer_all([("q1", CONTEXT)], GENERATOR, lambda p, c: {"text": "z"})
    assert reread == {"text": "y", "cached": True}  # the answer given again replaced the damaged entry


def test_warnings_go_to_the_log_given(tmp_path):
    heard: list[str] = []
    cache = AnswerCache(tmp_path, log=heard.append)
    key = answer_key("q1", CONTEXT, GENERATOR)
    assert cache.get(key) is None and heard == []  # absent is not damaged
    cache.put(key, {"text": "x"})
    assert cache.get(key) == {"text": "x"} and heard == []
    cache._path(key).write_text("{}", encoding="utf-8")
    assert cache.get(key) is None
    assert heard == [f"{cache._path(key)}: damaged answer cache entry (no 'text' string); answering again"]
