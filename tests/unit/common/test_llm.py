"""LLMClient against a local OpenAI-compatible stub, through the real `openai` client:
retries per fault kind, failures that outlast the retries, `map` losing nothing, the shared
concurrency bound, usage/cost accounting and the key never leaking."""

import logging
import threading

import pytest

from eval_pipeline.common.llm import LLMCallError, LLMClient
from tests.openai_stub import Fault, OpenAIStub

KEY = "sk-test-SECRET-123"
MESSAGES = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "say hi"}]


def client_for(stub: OpenAIStub, **overrides) -> LLMClient:
    options = dict(model="stub-model", base_url=stub.base_url, api_key=KEY, timeout=0.5,
                   backoff_base=0.01, backoff_max=0.05, max_retries=2)
    options.update(overrides)
    return LLMClient(**options)


def test_happy_path_usage_and_cost():
    with OpenAIStub(chat=lambda body: "three word answer") as stub:
        client = client_for(stub, price_per_1k_prompt=2.0, price_per_1k_completion=10.0, seed=7, temperature=0.3)
        assert client.complete(MESSAGES) == "three word answer"
        assert client.complete(MESSAGES, max_tokens=5) == "three word answer"
    bodies = [r["body"] for r in stub.requests]
    assert [r["path"] for r in stub.requests] == ["/v1/chat/completions"] * 2
    assert bodies[0]["model"] == "stub-model" and bodies[0]["messages"] == MESSAGES
    assert bodies[0]["temperature"] == 0.3 and bodies[0]["seed"] == 7
    assert "max_tokens" not in bodies[0] and bodies[1]["max_tokens"] == 5
    headers = {k.lower(): v for k, v in stub.requests[0]["headers"].items()}
    assert headers["authorization"] == f"Bearer {KEY}"  # the key is used, just never shown
    # stub tokens: words; prompt "be brief" + "say hi" = 4, completion 3
    assert client.usage == {"calls": 2, "failures": 0, "retries": 0, "prompt_tokens": 8,
                            "completion_tokens": 6, "cost": pytest.approx((8 * 2.0 + 6 * 10.0) / 1000)}


def test_default_echo_and_no_cost_without_prices():
    with OpenAIStub() as stub:
        client = client_for(stub)
        assert client.complete(MESSAGES) == "echo: say hi"
    assert client.usage["cost"] is None
    assert client.identity() == {"kind": "openai-compatible", "model": "stub-model", "base_url": stub.base_url,
                                 "temperature": "0"}  # sampling changes answers: part of the identity


@pytest.mark.parametrize("fault", ["429", "500", "hang", "garbage", "empty", "html"])
def test_each_fault_is_retried_then_succeeds(fault):
    with OpenAIStub(chat=lambda body: "fine", hang_seconds=2.0) as stub:
        stub.faults = [fault, fault]
        client = client_for(stub, max_retries=2)
        assert client.complete(MESSAGES) == "fine"
    assert stub.answered == [fault, fault, "ok"]
    usage = client.usage
    assert (usage["calls"], usage["retries"], usage["failures"]) == (1, 2, 0)
    assert usage["completion_tokens"] == 1  # only the successful answer is counted


def test_faults_outlasting_retries_raise_and_count_a_failure():
    with OpenAIStub() as stub:
        stub.faults = ["500", "429", "500"]
        client = client_for(stub, max_retries=2)
        with pytest.raises(LLMCallError) as info:
            client.complete(MESSAGES)
        assert client.complete(MESSAGES) == "echo: say hi"  # the next call is unaffected
    err = info.value
    assert err.attempts == 3 and err.status_code == 500 and err.retryable
    assert "stub-model" in str(err) and "HTTP 500" in str(err)
    assert err.__cause__ is None and err.__context__ is None  # the openai exception holds the request
    assert client.usage["failures"] == 1 and client.usage["retries"] == 2 and client.usage["calls"] == 2


def test_other_4xx_fail_at_once():
    with OpenAIStub() as stub:
        stub.faults = ["400", "400"]
        client = client_for(stub, max_retries=4)
        with pytest.raises(LLMCallError, match="non-retryable.*HTTP 400") as info:
            client.complete(MESSAGES)
    assert len(stub.requests) == 1 and info.value.attempts == 1 and not info.value.retryable
    assert client.usage["retries"] == 0 and client.usage["failures"] == 1


def test_zero_retries_means_one_attempt():
    with OpenAIStub() as stub:
        stub.faults = ["429"]
        client = client_for(stub, max_retries=0)
        with pytest.raises(LLMCallError):
            client.complete(MESSAGES)
    assert len(stub.requests) == 1


def test_map_loses_no_item():
    fail = {3, 11, 17}

    def chat(body):
        text = body["messages"][-1]["content"]
        return Fault("500") if text.startswith("FAIL") else f"answer to {text}"

    items = [f"FAIL {i}" if i in fail else f"item {i}" for i in range(20)]
    with OpenAIStub(chat=chat) as stub:
        # transient faults, taken by whichever request comes first; at most max_retries of
        # them, so no healthy item can run out of retries
        stub.faults = ["429", "garbage", "empty", "hang", "500"]
        client = client_for(stub, max_retries=5, max_concurrency=4)
        results = client.map(lambda text: client.complete([{"role": "user", "content": text}]), items)
    assert len(results) == 20
    for i, result in enumerate(results):
        if i in fail:
            assert isinstance(result, LLMCallError), (i, result)
        else:
            assert result == f"answer to item {i}", (i, result)
    usage = client.usage
    assert usage["calls"] == 20 and usage["failures"] == 3
    per_item = {}
    for r in stub.chat_requests():
        per_item[r["body"]["messages"][-1]["content"]] = per_item.get(r["body"]["messages"][-1]["content"], 0) + 1
    assert all(per_item[f"FAIL {i}"] == 6 for i in fail)  # 1 + max_retries attempts each
    assert usage["retries"] == len(stub.requests) - 20  # every request beyond the first per item
    assert 3 * 5 <= usage["retries"] <= 3 * 5 + 5


def test_map_returns_exceptions_of_fn_in_place_and_handles_empty():
    client = LLMClient(model="m", base_url="http://127.0.0.1:1/v1", max_concurrency=3)

    def fn(x):
        if x % 4 == 0:
            raise KeyError(x)
        return x * 10

    results = client.map(fn, range(10))
    assert [type(r) if isinstance(r, BaseException) else r for r in results] == [
        KeyError, 10, 20, 30, KeyError, 50, 60, 70, KeyError, 90]
    assert client.map(fn, []) == []


def test_concurrency_bound_is_shared_across_threads():
    with OpenAIStub(delay=0.1) as stub:
        client = client_for(stub, max_concurrency=3)
        # 9 independent threads, not client.map: the bound must come from the client itself
        threads = [threading.Thread(target=client.complete, args=(MESSAGES,)) for _ in range(9)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=10)
    assert len(stub.requests) == 9
    assert 2 <= stub.max_in_flight <= 3


def test_map_concurrency_bound():
    with OpenAIStub(delay=0.05) as stub:
        client = client_for(stub, max_concurrency=2)
        results = client.map(lambda i: client.complete([{"role": "user", "content": str(i)}]), range(8))
    assert results == [f"echo: {i}" for i in range(8)]
    assert stub.max_in_flight <= 2


def test_an_injected_limiter_bounds_the_requests_and_is_released_between_attempts():
    """The client holds one of the limiter's slots per HTTP request (never while backing off):
    a one-slot limiter serializes threads, and a failed attempt gives its slot back."""
    from contextlib import contextmanager

    from eval_pipeline.common.limiter import LocalLimiter

    class Recording(LocalLimiter):
        def __init__(self, slots):
            super().__init__(slots)
            self.entered = self.left = 0

        @contextmanager
        def slot(self):
            with super().slot() as number:
                self.entered += 1
                try:
                    yield number
                finally:
                    self.left += 1

    limiter = Recording(1)
    with OpenAIStub(delay=0.05) as stub:
        client = client_for(stub, max_concurrency=4, limiter=limiter)
        stub.faults = ["500"]
        threads = [threading.Thread(target=client.complete, args=(MESSAGES,)) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=10)
    assert stub.max_in_flight == 1  # the limiter's one slot, not max_concurrency's four
    assert limiter.entered == limiter.left == len(stub.requests) == 5  # four calls, one retried


def test_the_local_limiter_checks_its_slots():
    from eval_pipeline.common.limiter import LocalLimiter

    with pytest.raises(ValueError, match="slots must be an integer >= 1"):
        LocalLimiter(0)
    assert LocalLimiter(2).describe() == "in-process, 2 slot(s)"


def test_key_never_shown(caplog):
    caplog.set_level(logging.DEBUG)  # includes openai's and httpx's own debug logging
    with OpenAIStub() as stub:
        client = client_for(stub, max_retries=1)
        assert KEY not in repr(client) and KEY not in str(client) and KEY not in str(client.identity())
        assert KEY not in str(client.usage)
        errors = []
        for faults in (["500", "500"], ["400"], ["hang", "garbage"]):
            stub.faults = faults
            with pytest.raises(LLMCallError) as info:
                client.complete(MESSAGES)
            errors.append(info.value)
        logging.getLogger("test").exception("reported", exc_info=errors[0])
    for err in errors:
        assert KEY not in str(err) and KEY not in repr(err) and KEY not in err.reason
    assert caplog.records  # retries were logged
    assert KEY not in caplog.text
    assert all(KEY not in r.getMessage() for r in caplog.records)


def test_key_from_environment_is_used_and_hidden(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    with OpenAIStub() as stub:
        client = LLMClient(model="m", base_url=stub.base_url, timeout=0.5)
        client.complete(MESSAGES)
    assert {k.lower(): v for k, v in stub.requests[0]["headers"].items()}["authorization"] == f"Bearer {KEY}"
    assert KEY not in repr(client)


@pytest.mark.parametrize(
    "overrides, name",
    [
        ({"max_concurrency": 0}, "max_concurrency"),
        ({"max_retries": -1}, "max_retries"),
        ({"timeout": 0}, "timeout"),
        ({"timeout": -1.0}, "timeout"),
        ({"temperature": -0.1}, "temperature"),
        ({"temperature": 2.5}, "temperature"),
        ({"price_per_1k_prompt": -1.0}, "price_per_1k_prompt"),
        ({"price_per_1k_completion": -0.01}, "price_per_1k_completion"),
        ({"backoff_base": -1}, "backoff_base"),
        ({"model": ""}, "model"),
    ],
)
def test_validation_names_the_parameter(overrides, name):
    options = {"model": "m", **overrides}
    with pytest.raises(ValueError, match=name):
        LLMClient(**options)


def test_max_tokens_validated():
    client = LLMClient(model="m", base_url="http://127.0.0.1:1/v1")
    with pytest.raises(ValueError, match="max_tokens"):
        client.complete(MESSAGES, max_tokens=0)


def test_a_failed_call_names_the_endpoint_without_credentials():
    from eval_pipeline.common.llm import LLMClient

    client = LLMClient(model="m", base_url="https://user:s3cret@api.example.com/v1?key=sk-XYZ", api_key="k")
    error = client._error(3, 500, "server error", True)
    assert "api.example.com/v1" in str(error) and "s3cret" not in str(error) and "sk-XYZ" not in str(error)
    assert "s3cret" not in repr(client) and "sk-XYZ" not in repr(client)
