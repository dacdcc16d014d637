"""The LLM client behind the pipeline's LLM resource: any OpenAI-compatible chat endpoint.

One `LLMClient` is shared by everything that calls a model in a run (question generation,
the listwise reranker), so that:

- one limiter bounds the requests in flight across all threads and callers: a provider's
  rate limit is per key, not per caller. By default a semaphore of `max_concurrency` slots
  (this process); inject `eval_pipeline.store.limiter.PostgresLimiter` to share the limit
  with every process of the run (and other runs) through the database;
- retries are ours, not the `openai` client's (it is built with ``max_retries=0``): we retry
  with exponential backoff and full jitter on 429, 5xx, timeouts, connection errors and on a
  200 whose body is not a usable completion (not JSON, no choices, no text).  Other 4xx
  (bad request, auth, unknown model) fail at once: retrying cannot fix them, and a paid sweep
  should stop early rather than burn its retry budget on every item;
- usage (calls, failures, retries, tokens, cost) is counted in one place, thread-safely;
- the API key never leaves the client: not in repr/str, not in error messages, not in logs.
  Errors are raised outside the handler, so the `openai` exception (which carries the request,
  whose headers hold the key) is neither their cause nor their context.

Construction is cheap; the `openai` client is created on first use (or in `warm_up()`).
"""

from __future__ import annotations

import json
import logging
import os
import random
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from eval_pipeline.common import prices as pricing
from eval_pipeline.common.checks import is_integer, is_real
from eval_pipeline.common.endpoint import Endpoint
from eval_pipeline.common.limiter import Limiter, LocalLimiter

if TYPE_CHECKING:
    from openai import OpenAI

log = logging.getLogger(__name__)

T = TypeVar("T")
R = TypeVar("R")

DEFAULT_BASE_URL = "https://api.openai.com/v1"
_MAX_REASON_CHARS = 200


class LLMCallError(RuntimeError):
    """A call that still failed after its retries (or failed with an error retrying cannot fix).

    `attempts` is the number of HTTP requests made, `status_code` the last HTTP status (None for
    timeouts, connection errors and unusable bodies) and `reason` a short, key-free description
    of the last error.
    """

    def __init__(self, message: str, *, attempts: int, status_code: int | None, reason: str, retryable: bool):
        super().__init__(message)
        self.attempts = attempts
        self.status_code = status_code
        self.reason = reason
        self.retryable = retryable


class _InvalidResponse(Exception):
    """A 200 whose body is not a usable chat completion; retried like a 5xx."""


class LLMClient:
    """Chat completions against an OpenAI-compatible endpoint, with retries, a shared
    concurrency limit and usage accounting.

    `api_key=None` falls back to OPENAI_API_KEY, then to a placeholder (local servers such as
    vLLM or Ollama ignore it).  `base_url=None` means OPENAI_BASE_URL, then OpenAI itself.
    Cost is reported only when at least one price is given; a missing price counts as 0 (a
    local server has no completion price, a flat-rate one may have none for prompts).
    `limiter` (default: `max_concurrency` slots in this process) bounds the requests in flight.
    """

    def __init__(
        self,
        *,
        model: str,
        base_url: str | None = None,
        api_key: str | None = None,
        temperature: float = 0.0,
        timeout: float = 60.0,
        max_concurrency: int = 4,
        max_retries: int = 4,
        backoff_base: float = 0.5,
        backoff_max: float = 20.0,
        price_per_1k_prompt: float | None = None,
        price_per_1k_completion: float | None = None,
        seed: int | None = None,
        limiter: Limiter | None = None,
    ):
        if not model or not isinstance(model, str):
            raise ValueError(f"model must be a non-empty string, got {model!r}")
        if not is_integer(max_concurrency) or max_concurrency < 1:
            raise ValueError(f"max_concurrency must be an integer >= 1, got {max_concurrency!r}")
        if not is_integer(max_retries) or max_retries < 0:
            raise ValueError(f"max_retries must be an integer >= 0, got {max_retries!r}")
        if not _is_number(timeout) or timeout <= 0:
            raise ValueError(f"timeout must be a number > 0 (seconds), got {timeout!r}")
        if not _is_number(temperature) or not 0.0 <= temperature <= 2.0:
            raise ValueError(f"temperature must be in [0, 2], got {temperature!r}")
        if not _is_number(backoff_base) or backoff_base < 0:
            raise ValueError(f"backoff_base must be a number >= 0 (seconds), got {backoff_base!r}")
        if not _is_number(backoff_max) or backoff_max < 0:
            raise ValueError(f"backoff_max must be a number >= 0 (seconds), got {backoff_max!r}")
        for name, price in (("price_per_1k_prompt", price_per_1k_prompt),
                            ("price_per_1k_completion", price_per_1k_completion)):
            if price is not None and (not _is_number(price) or price < 0):
                raise ValueError(f"{name} must be a number >= 0 or None, got {price!r}")

        self.model = model
        self.endpoint = Endpoint(base_url or os.environ.get("OPENAI_BASE_URL") or DEFAULT_BASE_URL)
        self._api_key = api_key or os.environ.get("OPENAI_API_KEY") or "unused"
        self.temperature = float(temperature)
        self.timeout = float(timeout)
        self.max_concurrency = max_concurrency
        self.max_retries = max_retries
        self.backoff_base = float(backoff_base)
        self.backoff_max = float(backoff_max)
        self.price_per_1k_prompt = price_per_1k_prompt
        self.price_per_1k_completion = price_per_1k_completion
        self.seed = seed

        # held for one request only, never while backing off; `map` runs max_concurrency threads
        self._limiter: Limiter = limiter if limiter is not None else LocalLimiter(max_concurrency)
        self._lock = threading.Lock()
        self._client: OpenAI | None = None
        self._random = random.Random()
        self._sleep = time.sleep  # tests may replace it
        self._calls = self._failures = self._retries = 0
        self._prompt_tokens = self._completion_tokens = 0

    # --- identity and accounting ---------------------------------------------------------

    @property
    def base_url(self) -> str:
        """The endpoint as it may be shown and stored (never its credentials: `endpoint`)."""
        return self.endpoint.safe

    def __repr__(self) -> str:  # never the key
        return (f"LLMClient(model={self.model!r}, base_url={self.base_url!r}, "
                f"max_concurrency={self.max_concurrency}, max_retries={self.max_retries})")

    __str__ = __repr__

    def identity(self) -> dict[str, str]:
        """What produced an answer, for provenance and cache keys; never the key."""
        return {"kind": "openai-compatible", "model": self.model, "base_url": self.base_url,
                "temperature": f"{self.temperature:g}"}

    @property
    def usage(self) -> dict[str, Any]:
        """A snapshot: calls (complete() invocations), failures (calls that raised), retries
        (extra requests after a failed attempt), prompt/completion tokens of successful calls
        and cost in the price unit (None when no price is configured)."""
        with self._lock:
            out: dict[str, Any] = {
                "calls": self._calls,
                "failures": self._failures,
                "retries": self._retries,
                "prompt_tokens": self._prompt_tokens,
                "completion_tokens": self._completion_tokens,
            }
        price = pricing.price_of(self.price_per_1k_prompt, self.price_per_1k_completion)
        out["cost"] = None if price is None else pricing.cost(out["prompt_tokens"], out["completion_tokens"], price)
        return out

    # --- calls ---------------------------------------------------------------------------

    def warm_up(self) -> None:
        if self._client is not None:
            return
        with self._lock:
            if self._client is None:
                from openai import OpenAI  # noqa: PLC0415  deferred: openai takes ~1 s to import

                self._client = OpenAI(base_url=self.endpoint.for_client(), api_key=self._api_key,
                                      timeout=self.timeout, max_retries=0)

    def complete(self, messages: list[dict[str, str]], *, max_tokens: int | None = None) -> str:
        """The text of the first choice (see `complete_detailed`)."""
        return self.complete_detailed(messages, max_tokens=max_tokens).text

    def complete_detailed(self, messages: list[dict[str, str]], *, max_tokens: int | None = None) -> Completion:
        """The first choice's text, the model the response says answered, and the tokens.
        Raises LLMCallError once retries are exhausted or on a non-retryable error; the message
        names the model, endpoint and last error, never the key."""
        if max_tokens is not None and (not is_integer(max_tokens)
                                       or max_tokens < 1):
            raise ValueError(f"max_tokens must be an integer >= 1 or None, got {max_tokens!r}")
        self.warm_up()
        if self._client is None:
            raise ValueError("LLMClient._client is None after warm_up()")
        with self._lock:
            self._calls += 1
        kwargs: dict[str, Any] = {"model": self.model, "messages": messages, "temperature": self.temperature}
        if max_tokens is not None:
            kwargs["max_tokens"] = max_tokens
        if self.seed is not None:
            kwargs["seed"] = self.seed

        attempts = 0
        while True:
            attempts += 1
            failure: tuple[bool, int | None, str] | None = None
            try:
                with self._limiter.slot():  # held for one request only, never while backing off
                    response = self._client.chat.completions.create(**kwargs)
                completion = _parse_completion(response)
            except Exception as exc:  # noqa: BLE001 - classified below; unknown errors re-raised
                retryable, status, reason = self._classify(exc)
                if retryable is None:  # not an API error: a bug or bad arguments, not ours to hide
                    with self._lock:
                        self._failures += 1
                    raise
                failure = (retryable, status, reason)
                delay = self._backoff(attempts, exc)
            if failure is None:
                with self._lock:
                    self._prompt_tokens += completion.prompt_tokens
                    self._completion_tokens += completion.completion_tokens
                return completion
            retryable, status, reason = failure
            if not retryable or attempts > self.max_retries:
                with self._lock:
                    self._failures += 1
                # Raised outside the except block: the openai exception (whose request holds
                # the key in its headers) is then neither the cause nor the context.
                raise self._error(attempts, status, reason, retryable)
            with self._lock:
                self._retries += 1
            log.warning("LLM call to %s (model %s) failed: %s; retry %d/%d in %.2f s",
                        self.base_url, self.model, reason, attempts, self.max_retries, delay)
            self._sleep(delay)

    def map(self, fn: Callable[[T], R], items: Sequence[T]) -> list[R | BaseException]:
        """fn over items with at most `max_concurrency` in flight; one entry per item, in input
        order: the result, or the exception fn raised (nothing is lost, nothing is re-raised)."""
        items = list(items)
        if not items:
            return []
        with ThreadPoolExecutor(max_workers=min(self.max_concurrency, len(items)),
                                thread_name_prefix="llm-map") as pool:
            futures = [pool.submit(fn, item) for item in items]
            out: list[R | BaseException] = []
            for future in futures:
                exc = future.exception()
                out.append(exc if exc is not None else future.result())
        return out

    # --- internals -----------------------------------------------------------------------

    def _scrub(self, text: str) -> str:
        if self._api_key and self._api_key != "unused":
            text = text.replace(self._api_key, "***")
        text = " ".join(text.split())
        return text if len(text) <= _MAX_REASON_CHARS else text[:_MAX_REASON_CHARS] + "..."

    def _classify(self, exc: BaseException) -> tuple[bool | None, int | None, str]:
        """(retryable, HTTP status, key-free reason); retryable None: not an API failure."""
        import openai  # noqa: PLC0415  deferred: openai takes ~1 s to import

        if isinstance(exc, _InvalidResponse):
            return True, None, f"invalid response: {self._scrub(str(exc))}"
        if isinstance(exc, json.JSONDecodeError):
            return True, None, f"invalid response: body is not JSON ({self._scrub(str(exc))})"
        if isinstance(exc, openai.APIResponseValidationError):
            return True, getattr(exc, "status_code", None), f"invalid response: {self._scrub(exc.message)}"
        if isinstance(exc, openai.APIStatusError):
            status = exc.status_code
            retryable = status == 429 or status >= 500
            return retryable, status, f"HTTP {status}: {self._scrub(exc.message)}"
        if isinstance(exc, openai.APITimeoutError):
            return True, None, f"timed out after {self.timeout:g} s"
        if isinstance(exc, openai.APIConnectionError):
            return True, None, f"connection error: {self._scrub(str(exc))}"
        return None, None, type(exc).__name__

    def _backoff(self, attempt: int, exc: BaseException) -> float:
        """Full jitter: uniform(0, min(max, base * 2**(attempt-1))); a 429's Retry-After (in
        seconds) is a floor, still capped at backoff_max so one header cannot stall a sweep."""
        cap = min(self.backoff_max, self.backoff_base * (2 ** (attempt - 1)))
        with self._lock:
            delay = self._random.uniform(0.0, cap)
        response = getattr(exc, "response", None)
        if getattr(exc, "status_code", None) == 429 and response is not None:
            try:
                delay = max(delay, min(self.backoff_max, float(response.headers.get("retry-after", ""))))
            except (TypeError, ValueError):
                pass
        return delay

    def _error(self, attempts: int, status: int | None, reason: str, retryable: bool) -> LLMCallError:
        if retryable:
            what = f"failed after {attempts} attempt(s) ({self.max_retries} retries)"
        else:
            what = "failed with a non-retryable error"
        return LLMCallError(f"LLM call to {self.base_url} (model {self.model}) {what}: {reason}",
                            attempts=attempts, status_code=status, reason=reason, retryable=retryable)


@dataclass(frozen=True)
class Completion:
    text: str
    model: str | None  # the model the response reports (None: absent or not a string)
    prompt_tokens: int
    completion_tokens: int


def _parse_completion(response: Any) -> Completion:
    """The completion, or _InvalidResponse for an unusable body.

    The `openai` client does not validate bodies: a non-JSON body with a non-JSON content type
    comes back as a str, and missing fields come back as missing attributes."""
    choices = getattr(response, "choices", None)
    if not isinstance(choices, list):
        raise _InvalidResponse(f"no choices list in a {type(response).__name__} body")
    if not choices:
        raise _InvalidResponse("empty choices")
    message = getattr(choices[0], "message", None)
    content = getattr(message, "content", None)
    if not isinstance(content, str):
        raise _InvalidResponse("first choice has no text content")
    usage = getattr(response, "usage", None)
    model = getattr(response, "model", None)
    return Completion(content, model if isinstance(model, str) and model else None,
                      _int(getattr(usage, "prompt_tokens", 0)), _int(getattr(usage, "completion_tokens", 0)))


def _int(value: Any) -> int:
    return value if is_integer(value) and value >= 0 else 0


def _is_number(value: Any) -> bool:
    return is_real(value) and value == value
