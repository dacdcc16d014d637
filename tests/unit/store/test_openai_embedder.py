"""The OpenAI-compatible embedder, driven with the real `openai` client against a local server."""

from eval_pipeline.store.embedders import OpenAIEmbedder
from tests.openai_stub import OpenAIStub, fake_vector


def test_batches_order_and_auth_over_the_wire():
    texts = [f"question number {i}" for i in range(7)]
    with OpenAIStub() as stub:
        embedder = OpenAIEmbedder(model="text-embedding-test", base_url=stub.base_url,
                                  api_key="sk-test-not-a-real-key", batch_size=3)
        vectors = embedder.embed(texts)
    assert vectors == [fake_vector(t) for t in texts]  # re-ordered by index
    assert [len(r["body"]["input"]) for r in stub.requests] == [3, 3, 1]  # batched, never one by one
    assert all(r["path"] == "/v1/embeddings" for r in stub.requests)
    assert all(r["body"]["model"] == "text-embedding-test" for r in stub.requests)
    assert all({k.lower(): v for k, v in r["headers"].items()}["authorization"] == "Bearer sk-test-not-a-real-key" for r in stub.requests)


def test_key_never_in_repr_or_model_id():
    embedder = OpenAIEmbedder(model="m", base_url="http://127.0.0.1:1/v1", api_key="sk-secret-123")
    assert "sk-secret-123" not in repr(embedder)
    assert "sk-secret-123" not in embedder.model_id
