"""Answers are cached the moment they arrive, keyed by everything that decides them; a run's
generator is known only when every answer names the same one."""

import pytest

from eval_pipeline.answering.cache import AnswerCache, answer_key
from eval_pipeline.answering.context import ContextEntry
from eval_pipeline.answering.served import ServedBy, provider_of, run_generator

CONTEXT = (ContextEntry(1, "a:0", "a", "Alpha text."), ContextEntry(2, "b:0", "b", "Beta text."))
GENERATOR = {"kind": "llm", "llm": {"model": "m", "base_url": "http://127.0.0.1:1/v1"}, "prompt_version": "answer-1+x"}


def test_every_input_that_decides_an_answer_changes_its_key():
    base = answer_key("q?", CONTEXT, GENERATOR)
    assert answer_key("q?", CONTEXT, dict(GENERATOR)) == base
    others = [
        answer_key("q!", CONTEXT, GENERATOR),
        answer_key("q?", CONTEXT[:1], GENERATOR),
        answer_key("q?", (CONTEXT[1], CONTEXT[0]), GENERATOR),
        answer_key("q?", (ContextEntry(1, "a:0", "a", "Alpha text!"), CONTEXT[1]), GENERATOR),
        answer_key("q?", CONTEXT, {**GENERATOR, "prompt_version": "answer-2+y"}),
        answer_key("q?", CONTEXT, {**GENERATOR, "llm": {"model": "m2", "base_url": "http://127.0.0.1:1/v1"}}),
    ]
    assert base not in others and len(set(others)) == len(others)


def test_a_killed_run_resumes_with_what_it_had_and_failures_are_not_cached(tmp_path):
    items = [("q1", CONTEXT), ("q2", CONTEXT), ("q3", CONTEXT)]
    calls = []

    def produce(prompt, context):
        calls.append(prompt)
        if prompt == "q2" and calls.count("q2") == 1:
            raise RuntimeError("endpoint down (injected)")
        return {"text": f"answer to {prompt} [1]"}

    cache = AnswerCache(tmp_path)
    first = cache.answer_all(items, GENERATOR, produce)
    assert [r["text"] if isinstance(r, dict) else "error" for r in first] == ["answer to q1 [1]", "error",
                                                                             "answer to q3 [1]"]
    assert isinstance(first[1], RuntimeError) and first[0]["cached"] is False
    second = AnswerCache(tmp_path).answer_all(items, GENERATOR, produce)
    assert calls == ["q1", "q2", "q3", "q2"]  # only the failed one is asked again
    assert [r["cached"] for r in second] == [True, False, True]


def test_a_damaged_cache_entry_is_answered_again(tmp_path):
    cache = AnswerCache(tmp_path)
    cache.answer_all([("q1", CONTEXT)], GENERATOR, lambda p, c: {"text": "x"})
    (path,) = list(tmp_path.rglob("*.json"))
    path.write_text("{half")
    again = cache.answer_all([("q1", CONTEXT)], GENERATOR, lambda p, c: {"text": "y"})
    assert again[0]["text"] == "y"


@pytest.mark.parametrize("url, host", [
    ("https://user:secret@api.example.com:8443/v1?key=sk-123#frag", "api.example.com:8443/v1"),
    ("https://api.example.com/v1/", "api.example.com/v1"),
    ("http://127.0.0.1:8000/v1", "127.0.0.1:8000/v1"),
    ("http://127.0.0.1:8001/v1", "127.0.0.1:8001/v1"),
    ("http://gw:8000/a/v1", "gw:8000/a/v1"),
    ("http://[::1]:8000", "::1:8000"),
    ("http://localhost:notaport/v1", "localhost/v1"),
    (None, "default"),
])
def test_the_provider_is_the_host_its_port_and_its_path_only(url, host):
    """Never the user, password, query or fragment; the port and the path, when named, since two
    servers on one host, or two deployments behind one gateway, can serve different weights
    under one model name."""
    assert provider_of(url) == host


def test_a_run_has_a_generator_only_when_every_answer_names_the_same_valid_one():
    one = ServedBy("api.example.com", "gpt-x", "gpt-x-2026-01")
    assert run_generator([one, one]) == "api.example.com:gpt-x->gpt-x-2026-01"
    assert run_generator([one, ServedBy("api.example.com", "gpt-x", "gpt-x-2026-02")]) is None  # mixed
    assert run_generator([one, None]) is None  # missing
    assert run_generator([one, ServedBy("api.example.com", "gpt-x", None)]) is None  # the response named none
    assert run_generator([]) is None
