"""Prices and cost, one home (issue #24): the price of a model's tokens, the price table the
variants file gives (`answers: {prices: ...}`) and the one cost formula. The LLM client's usage
(common.llm), an answer's cost (grading.answer_metrics) and the graders' bill (grading.summary)
all compute cost here.

A price is ``{"prompt_per_1k": float, "completion_per_1k": float}``: the price of 1,000
prompt tokens and of 1,000 completion tokens, in the table's unit. Cost = (prompt tokens x
prompt_per_1k + completion tokens x completion_per_1k) / 1000.
"""

from __future__ import annotations

from collections.abc import Mapping

from eval_pipeline.common.checks import is_finite

__all__ = ["PRICE_KEYS", "Price", "PriceTable", "check_prices", "cost", "price_of"]

PRICE_KEYS = ("prompt_per_1k", "completion_per_1k")

Price = Mapping[str, float]  # {"prompt_per_1k": ..., "completion_per_1k": ...}
PriceTable = Mapping[str, Price]  # model -> its price


def cost(prompt_tokens: int, completion_tokens: int, price: Price) -> float:
    """What the tokens cost at `price` (per 1,000 tokens, prompt and completion separately)."""
    return (prompt_tokens * price["prompt_per_1k"] + completion_tokens * price["completion_per_1k"]) / 1000.0


def price_of(prompt_per_1k: float | None, completion_per_1k: float | None) -> dict[str, float] | None:
    """A price from its two numbers, as the LLM resource takes them: None when neither is given
    (no cost is reported); a missing one counts as 0 (a local server has no completion price,
    a flat-rate one may have none for prompts)."""
    if prompt_per_1k is None and completion_per_1k is None:
        return None
    return {"prompt_per_1k": float(prompt_per_1k or 0.0), "completion_per_1k": float(completion_per_1k or 0.0)}


def check_prices(prices: object) -> dict[str, dict[str, float]]:
    """The price table, checked: a new ``{model: {"prompt_per_1k": float, "completion_per_1k":
    float}}``.

    Checked at launch so that a typo in a price file fails before tokens are spent, not in the
    report. Model names are non-empty strings; each entry has exactly the two keys (an extra
    or misspelt key would otherwise be a price silently ignored), each a finite number >= 0
    (a bool is not a number). ValueError names the model and the key. An empty table is
    valid: every answer with tokens is then unpriced.
    """
    if not isinstance(prices, Mapping):
        raise ValueError(f"prices must be a mapping of model -> per-1k prices, got {type(prices).__name__}")
    checked: dict[str, dict[str, float]] = {}
    for model, entry in prices.items():
        if not isinstance(model, str) or not model:
            raise ValueError(f"prices: a model name must be a non-empty str, got {model!r}")
        if not isinstance(entry, Mapping):
            raise ValueError(f"prices[{model!r}] must be a mapping with keys {list(PRICE_KEYS)}, got {entry!r}")
        extra = sorted(str(k) for k in entry if k not in PRICE_KEYS)
        if extra:
            raise ValueError(f"prices[{model!r}] has unknown key(s) {extra}; allowed: {list(PRICE_KEYS)}")
        for key in PRICE_KEYS:
            if key not in entry:
                raise ValueError(f"prices[{model!r}] is missing key {key!r}")
            value = entry[key]
            if not is_finite(value) or float(value) < 0:
                raise ValueError(f"prices[{model!r}][{key!r}] must be a finite number >= 0, got {value!r}")
        checked[model] = {key: float(entry[key]) for key in PRICE_KEYS}
    return checked
