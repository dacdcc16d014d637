"""One repair of answers that fail their static checks, through the real `openai` client against
the OpenAI-compatible test server: kept only when strictly cleaner, cached like answers, a no-op
for the extractive generator."""

import math

import pandas as pd
import pytest

from eval_pipeline.answering.cache import AnswerCache
from eval_pipeline.answering.extractive import ExtractiveGenerator
from eval_pipeline.answering.llm import REPAIR_PROMPT_VERSION, LLMGenerator
from eval_pipeline.answering.prompts import CheckedGoldenSet
from eval_pipeline.answering.repair import repair_answers, repair_summary
from eval_pipeline.answering.run import answer_variants
from eval_pipeline.common.llm import LLMClient
from eval_pipeline.grading.run import static_failures
from eval_pipeline.questions.golden import GoldenPrompt, GoldenPromptSet, StaticOptions
from tests.openai_stub import Fault, OpenAIStub

STATIC = StaticOptions(allowed_imports=("numpy",), symbols=("numpy.array",))
GOOD = "Use `numpy.array` [1].\n```python\nimport numpy\n```"
PROMPTS = (
    GoldenPrompt("p1", "Make an array (fixable)", static=STATIC),
    GoldenPrompt("p2", "Make an array (stubborn)", static=STATIC),
    GoldenPrompt("p3", "What is an array?"),
    GoldenPrompt("p4", "Make an array (fine)", static=STATIC),
)
GOLDEN = CheckedGoldenSet(GoldenPromptSet("t.repair", PROMPTS, "memory"), "corpus-1", "test")
TEXTS = {"doc:0": "An array is made from a list of numbers."}


def chat(body):
    """First answers by prompt; a repair (its message lists the failed checks) fixes p1 only."""
    user = body["messages"][-1]["content"]
    repairing = "It failed these checks:" in user
    if "(fixable)" in user:
        return GOOD if repairing else "```python\nimport requests\n```"  # 2 failures: import, symbol
    if "(stubborn)" in user:
        return "```python\nimport requests\n```" if repairing else "```python\nx = (\n```"  # 2 failures, then 2
    if "(broken)" in user and repairing:
        return Fault("400")
    if "(broken)" in user:
        return "no code"
    return GOOD if "(fine)" in user else "An array is a list of numbers [1]."


def ranked(golden):
    return pd.DataFrame([{"qid": p.id, "chunk_ids": ["doc:0"], "doc_ids": ["doc"], "error": None, "latency_ms": 1.0}
                         for p in golden.prompts])


def client(stub):
    return LLMClient(model="gen-model", base_url=stub.base_url, api_key="sk-test", max_retries=0)


def answer_and_repair(generator, cache, golden=GOLDEN, keep_text=False, log=None):
    answers = answer_variants({"v": ranked(golden)}, golden, texts=TEXTS, generator=generator, cache=cache, k=1,
                              keep_text=keep_text)
    return answers, repair_answers(answers, golden, generator=generator, cache=cache, check=static_failures,
                                   log=log or (lambda m: None))


def test_a_failing_answer_is_asked_once_with_its_reasons_and_kept_only_when_strictly_cleaner(tmp_path):
    with OpenAIStub(chat=chat) as stub:
        generator = LLMGenerator(llm=client(stub))
        cache = AnswerCache(tmp_path)
        before, after = answer_and_repair(generator, cache, keep_text=True)
        repairs = [r for r in stub.chat_requests() if "It failed these checks:" in r["body"]["messages"][-1]["content"]]
    frame = after["v"].set_index("prompt_id")
    assert frame["repair"].to_dict() == {"p1": "kept", "p2": "rejected", "p3": "not_applicable", "p4": "passed"}
    assert frame.loc["p1", "checks_failed_before"] == 2 and frame.loc["p1", "checks_failed_after"] == 0
    assert frame.loc["p2", "checks_failed_before"] == 2 and frame.loc["p2", "checks_failed_after"] == 2
    assert len(repairs) == 2  # p1 and p2, once each
    fixable = next(r for r in repairs if "(fixable)" in r["body"]["messages"][-1]["content"])["body"]["messages"][-1]
    assert "- 'requests' (block 1, line 1): root 'requests' is neither in allowed_imports" in fixable["content"]
    assert "- 'numpy.array' is not mentioned in the prose" in fixable["content"]
    assert "<answer>\n```python\nimport requests\n```\n</answer>" in fixable["content"]  # the old answer, as data
    # the kept repair replaces the answer the graders read; the rejected one leaves it
    original = before["v"].set_index("prompt_id")
    assert frame.loc["p1", "answer_key"] != original.loc["p1", "answer_key"] and frame.loc["p1", "answer"] == GOOD
    assert cache.get(frame.loc["p1", "answer_key"])["text"] == GOOD
    assert frame.loc["p1", "cited_docs"] == ["doc"]
    assert frame.loc["p2", "answer_key"] == original.loc["p2", "answer_key"]
    # the repair is paid for, kept or not
    assert frame.loc["p2", "repair_prompt_tokens"] > 0
    assert frame.loc["p2", "prompt_tokens"] == original.loc["p2", "prompt_tokens"] + frame.loc["p2",
                                                                                             "repair_prompt_tokens"]
    summary = repair_summary(after["v"], price={"prompt_per_1k": 1.0, "completion_per_1k": 2.0})
    p, c = int(frame["repair_prompt_tokens"].sum()), int(frame["repair_completion_tokens"].sum())
    assert summary == {"n_checked": 3, "n_failing_before": 2, "pass_rate_before": pytest.approx(1 / 3),
                       "pass_rate_after": pytest.approx(2 / 3), "n_repairs_asked": 2, "n_kept": 1, "n_rejected": 1,
                       "n_failed": 0, "n_no_op": 0, "repair_prompt_tokens": p, "repair_completion_tokens": c,
                       "repair_cost": pytest.approx((p * 1.0 + c * 2.0) / 1000)}


def test_repairs_are_cached_like_answers(tmp_path):
    with OpenAIStub(chat=chat) as stub:
        generator = LLMGenerator(llm=client(stub))
        cache = AnswerCache(tmp_path)
        _, first = answer_and_repair(generator, cache)
        calls = len(stub.chat_requests())
        _, second = answer_and_repair(generator, cache)
        assert len(stub.chat_requests()) == calls  # answers and repairs from the cache
    assert second["v"]["repair"].tolist() == first["v"]["repair"].tolist()
    assert second["v"]["cached"].all() and not first["v"].set_index("prompt_id").loc["p1", "cached"]
    assert REPAIR_PROMPT_VERSION.startswith("repair-1+")


def test_a_failed_repair_call_keeps_the_original_and_says_why(tmp_path):
    golden = CheckedGoldenSet(GoldenPromptSet("t.broken", (GoldenPrompt("b1", "Make it (broken)", static=STATIC),),
                                              "memory"), "corpus-1", "test")
    with OpenAIStub(chat=chat) as stub:
        generator = LLMGenerator(llm=client(stub))
        before, after = answer_and_repair(generator, AnswerCache(tmp_path), golden=golden)
    row = after["v"].iloc[0]
    assert row["repair"] == "failed" and "400" in row["repair_error"]
    assert row["answer_key"] == before["v"].iloc[0]["answer_key"]
    assert row["checks_failed_after"] == row["checks_failed_before"] == 1  # the symbol is not mentioned


class WordEmbedder:
    identity = "test-words-v1"

    def warm_up(self):
        pass

    def embed(self, texts):
        return [[float("array" in t.lower()), 1.0] for t in texts]


def test_with_the_extractive_generator_repair_is_a_no_op_that_says_so(tmp_path):
    said = []
    generator = ExtractiveGenerator(embedder=WordEmbedder(), sentences=1)
    before, after = answer_and_repair(generator, AnswerCache(tmp_path), log=said.append)
    frame = after["v"].set_index("prompt_id")
    assert set(frame.loc[["p1", "p2", "p4"], "repair"]) == {"no_op"}  # prose only: every code prompt fails
    assert frame.loc["p3", "repair"] == "not_applicable"
    assert (frame["answer_key"] == before["v"].set_index("prompt_id")["answer_key"]).all()
    assert len(said) == 1 and "repair is a no-op (3 failing answer(s)" in said[0]
    summary = repair_summary(after["v"])
    assert (summary["n_no_op"], summary["n_repairs_asked"], summary["repair_cost"]) == (3, 0, 0.0)
    assert summary["pass_rate_before"] == summary["pass_rate_after"] == 0.0


def test_a_summary_without_checks_is_nan_not_zero():
    frame = pd.DataFrame({"repair": ["not_applicable"], "checks_failed_after": [None], "repair_prompt_tokens": [0],
                          "repair_completion_tokens": [0]})
    summary = repair_summary(frame)
    assert summary["n_checked"] == 0 and math.isnan(summary["pass_rate_before"])
