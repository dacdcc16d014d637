"""Prices and cost have one home, eval_pipeline.common.prices (issue #24): the price table's
shape and checks, and the one cost formula the LLM client's usage, the answers' cost and the
graders' bill all use."""

from __future__ import annotations

import pytest

from eval_pipeline.common import prices
from eval_pipeline.common.prices import PRICE_KEYS, check_prices, cost, price_of

PRICE = {"prompt_per_1k": 0.5, "completion_per_1k": 1.5}


def test_cost_is_tokens_over_1000_times_the_per_1k_price():
    # 1000 prompt tokens at 0.5 per 1k + 2000 completion tokens at 1.5 per 1k = 0.5 + 3.0
    assert cost(1000, 2000, PRICE) == pytest.approx(3.5)
    assert cost(8, 6, {"prompt_per_1k": 2.0, "completion_per_1k": 10.0}) == pytest.approx((8 * 2.0 + 6 * 10.0) / 1000)
    assert cost(0, 0, PRICE) == 0.0


def test_a_price_from_two_numbers():
    """The LLM resource's two fields: no price without either, a missing one costs nothing."""
    assert price_of(None, None) is None
    assert price_of(0.5, None) == {"prompt_per_1k": 0.5, "completion_per_1k": 0.0}
    assert price_of(None, 2) == {"prompt_per_1k": 0.0, "completion_per_1k": 2.0}
    assert set(price_of(1, 1)) == set(PRICE_KEYS)


def test_the_price_table_is_checked_in_one_place():
    from eval_pipeline.grading import answer_metrics

    assert answer_metrics.check_prices is check_prices and answer_metrics.PRICE_KEYS is PRICE_KEYS
    assert check_prices({"m": {"prompt_per_1k": 1, "completion_per_1k": 0}}) == {
        "m": {"prompt_per_1k": 1.0, "completion_per_1k": 0.0}}
    with pytest.raises(ValueError, match="unknown key"):
        check_prices({"m": {**PRICE, "cached_per_1k": 0}})


def test_every_cost_is_the_one_formula(monkeypatch):
    """The client's usage, an answer's cost and the graders' bill all call prices.cost."""
    from eval_pipeline.common.llm import LLMClient
    from eval_pipeline.grading import answer_metrics
    from eval_pipeline.grading.presentation import grading_usage

    calls = []

    def marked(prompt_tokens, completion_tokens, price):
        calls.append((prompt_tokens, completion_tokens, dict(price)))
        return 42.0

    monkeypatch.setattr(prices, "cost", marked)
    client = LLMClient(model="m", base_url="http://127.0.0.1:9/v1", price_per_1k_prompt=0.5)
    assert client.usage["cost"] == 42.0
    before = {"calls": 0, "failures": 0, "prompt_tokens": 0, "completion_tokens": 0}
    after = {"calls": 1, "failures": 0, "prompt_tokens": 10, "completion_tokens": 20}
    assert grading_usage(before, after, "m", {"m": PRICE})["grading cost"] == 42.0
    row = {"model_reported": "m", "model_sent": "m", "prompt_tokens": 3, "completion_tokens": 4}
    assert answer_metrics._row_cost(row, {"m": PRICE}) == (42.0, "m")
    assert calls == [(0, 0, {"prompt_per_1k": 0.5, "completion_per_1k": 0.0}), (10, 20, PRICE), (3, 4, PRICE)]
