"""A variants file is committed with the code: an index's `base_url` carrying a credential (a
user and password, or a key in its query such as Azure's `?api-key=`) is refused when the file
loads, naming the setting; secrets come only from the environment (issue #25)."""

from __future__ import annotations

import pytest

from eval_pipeline.store.indexes import parse_indexes


def parse(base_url: str):
    return parse_indexes([{"embedder": {"kind": "openai", "model": "text-embedding-3-small", "base_url": base_url}}],
                         source="v.yaml")


@pytest.mark.parametrize("url", ["https://u:pw@proxy.example.com/v1", "https://proxy.example.com/v1?api-key=K3Y",
                                 "https://proxy.example.com/v1?token=T0K", "https://proxy.example.com/v1?sig=abc",
                                 "https://proxy.example.com/v1?x=1&Api_Key=K3Y", "https://proxy.example.com/v1#K3Y"])
def test_a_credential_in_an_index_endpoint_is_refused(url):
    with pytest.raises(ValueError, match="base_url") as err:
        parse(url)
    assert "K3Y" not in str(err.value) and "pw" not in str(err.value).replace("password", "")


def test_an_endpoint_with_a_harmless_query_loads():
    (spec,) = parse("https://example.openai.azure.com/openai/v1?api-version=2024-10-21")
    assert spec.base_url.endswith("api-version=2024-10-21")
