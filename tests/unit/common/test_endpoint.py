"""A credential in an endpoint URL (a proxy's basic auth, an Azure-style `?api-key=`) never
reaches an identity, a log line, a cache key or a pickle: the endpoint is a type that renders
only its safe form; the whole URL goes to the HTTP client alone (issue #25)."""

from __future__ import annotations

import json
import pickle

import pytest

from eval_pipeline.common.endpoint import Endpoint, safe_url
from eval_pipeline.common.llm import LLMClient
from eval_pipeline.store.embedders import OpenAIEmbedder

SECRETS = ("user:S3CRETpw@", "S3CRETpw", "api-key=K3YVALUE", "K3YVALUE", "frag-T0KEN")
URLS = ("http://user:S3CRETpw@127.0.0.1:8080/v1", "https://proxy.example.com/v1?api-key=K3YVALUE",
        "https://proxy.example.com/v1#frag-T0KEN", "http://user:S3CRETpw@h.example.com/v1?api-key=K3YVALUE#frag-T0KEN")


def leaks(text: str) -> list[str]:
    return [s for s in SECRETS if s in text]


@pytest.mark.parametrize("url", URLS)
def test_every_rendering_of_an_endpoint_is_the_safe_form(url):
    e = Endpoint(url)
    for text in (str(e), repr(e), f"{e}", f"{e!r}", "%s" % e, e.safe, json.dumps({"e": str(e)})):
        assert leaks(text) == [], text
    assert e.for_client() == url  # the HTTP client alone gets the whole URL


@pytest.mark.parametrize("url", URLS)
def test_a_pickled_endpoint_keeps_no_secret(url):
    data = pickle.dumps(Endpoint(url))
    assert leaks(data.decode("latin-1")) == []
    assert str(pickle.loads(data)) == safe_url(url)


def test_the_safe_form_keeps_scheme_host_port_and_path():
    assert safe_url("http://u:p@127.0.0.1:8080/v1?k=v#f") == "http://127.0.0.1:8080/v1"
    assert str(Endpoint("https://api.openai.com/v1")) == "https://api.openai.com/v1"


@pytest.mark.parametrize("bad", ["", None, 3])
def test_an_endpoint_is_a_non_empty_string(bad):
    with pytest.raises(ValueError, match="endpoint"):
        Endpoint(bad)


@pytest.mark.parametrize("url", URLS)
def test_the_llm_client_s_identity_repr_and_model_string_hold_no_secret(url, monkeypatch):
    for client in (LLMClient(model="m", base_url=url), None):
        if client is None:
            monkeypatch.setenv("OPENAI_BASE_URL", url)
            client = LLMClient(model="m")
        assert leaks(json.dumps(client.identity())) == [] and leaks(repr(client)) == []
        assert leaks(str(client.base_url)) == [] and leaks(f"{client.model}@{client.base_url}") == []
        assert client.endpoint.for_client() == url


@pytest.mark.parametrize("url", URLS)
def test_the_openai_embedder_s_model_id_identity_and_repr_hold_no_secret(url):
    e = OpenAIEmbedder(model="text-embedding-3-small", base_url=url)
    for text in (e.model_id, e.identity, repr(e), str(e.base_url)):
        assert leaks(text) == [], text


def test_the_http_client_s_own_request_log_never_shows_the_credential(caplog):
    """httpx logs every request's URL at INFO; a user who raises that logger must not see the
    proxy's password or a key in the query (found by a check of #25)."""
    import logging

    from eval_pipeline.common.endpoint import Endpoint
    from eval_pipeline.common.llm import LLMClient
    from tests.openai_stub import OpenAIStub

    with OpenAIStub(chat=lambda body: "fine") as stub:
        url = stub.base_url.replace("http://", "http://proxyuser:Pr0xySecret@")
        client = LLMClient(base_url=url, api_key="sk-test", model="m")
        azure = Endpoint("https://example.invalid/openai?api-key=QueryKey42").for_client()  # handed to a client
        with caplog.at_level(logging.INFO, logger="httpx"):
            client.complete([{"role": "user", "content": "hi"}])
            logging.getLogger("httpx").info("HTTP Request: POST %s \"HTTP/1.1 200 OK\"", azure)
    text = "\n".join(r.getMessage() for r in caplog.records)
    assert "HTTP Request" in text  # the client did log its requests
    assert "Pr0xySecret" not in text and "proxyuser" not in text and "QueryKey42" not in text, text
