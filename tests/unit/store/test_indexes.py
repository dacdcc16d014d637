"""The variants file's `indexes:`: keys derived and unique, the default index, and every bad entry
rejected at load naming file:line, the index and the setting."""

from __future__ import annotations

import textwrap
from dataclasses import FrozenInstanceError
from pathlib import Path

import pytest
import yaml

from eval_pipeline.config.sweep import _strict_loader
from eval_pipeline.store.indexes import (
    BUNDLED_MODEL_ID,
    DEFAULT_INDEX,
    IndexSpec,
    parse_indexes,
    valid_key,
)
from eval_pipeline.store.ingest import ChunkingConfig

SOURCE = "variants.yaml"


def _model_folder(parent: Path, name: str) -> Path:
    folder = parent / name
    folder.mkdir(parents=True)
    (folder / "config.json").write_text("{}", encoding="utf-8")
    return folder


def _load(text: str, **kwargs):
    """`indexes:` of a variants file as the strict loader reads it (mappings carry their line)."""
    data = yaml.load(textwrap.dedent(text), Loader=_strict_loader())  # noqa: S506 - a SafeLoader
    return parse_indexes(data.get("indexes"), SOURCE, **kwargs)


def _error(text: str, **kwargs) -> str:
    with pytest.raises(ValueError) as info:
        _load(text, **kwargs)
    return str(info.value)


# ---- the default index and keys -----------------------------------------------------------


def test_no_indexes_is_one_default_index_equal_to_todays_defaults():
    assert parse_indexes(None, SOURCE) == (DEFAULT_INDEX,)
    assert _load("variants: [hybrid]\n") == (DEFAULT_INDEX,)
    assert DEFAULT_INDEX.embedder == "bundled" and DEFAULT_INDEX.model is None
    assert DEFAULT_INDEX.chunking == ChunkingConfig() == ChunkingConfig("word", 150, 20, True)
    assert DEFAULT_INDEX.key == "minilm-w150-o20"
    assert DEFAULT_INDEX.identity() == {
        "embedder": "bundled", "model": BUNDLED_MODEL_ID, "base_url": None,
        "chunking": {"split_by": "word", "split_length": 150, "split_overlap": 20, "embed_title": True}}


def test_the_default_index_builds_todays_default_embedder():
    from eval_pipeline.store.embedders import LocalEmbedder, default_model_path

    embedder = DEFAULT_INDEX.build_embedder()
    assert isinstance(embedder, LocalEmbedder) and embedder.model == default_model_path()
    assert embedder.model_id == DEFAULT_INDEX.model_id == BUNDLED_MODEL_ID  # the same name in identities


def test_keys_are_derived_readable_and_from_the_chunking(tmp_path):
    folder = _model_folder(tmp_path, "BGE Small_en-v1.5")
    specs = _load(f"""
        indexes:
          - embedder: bundled
          - chunking: {{split_length: 300, split_overlap: 50, embed_title: false}}
          - embedder: {{kind: local, model: "{folder}"}}
            chunking: {{split_by: passage, split_length: 5, split_overlap: 1}}
          - embedder: {{kind: openai, model: nomic-ai/nomic-embed-text, base_url: "http://127.0.0.1:8000/v1"}}
            chunking: {{split_by: passage, split_length: 2, split_overlap: 0}}
          - name: minilm-w150
            chunking: {{split_length: 150, split_overlap: 10}}
    """)
    assert [s.key for s in specs] == ["minilm-w150-o20", "minilm-w300-o50-notitle", "bge-small_en-v1.5-p5-o1",
                                      "nomic-embed-text-p2-o0", "minilm-w150"]
    local, remote = specs[2], specs[3]
    assert local.embedder == "local" and local.model == str(folder) and Path(local.model).is_absolute()
    assert remote.embedder == "openai" and remote.base_url == "http://127.0.0.1:8000/v1"
    assert specs[1].chunking == ChunkingConfig("word", 300, 50, False)


def test_keys_are_valid_dagster_partition_keys_in_both_dimensions(tmp_path):
    from dagster import MultiPartitionsDefinition, StaticPartitionsDefinition

    long = _model_folder(tmp_path, "A" * 80 + "  weird (copy) ...  ")
    dotted = _model_folder(tmp_path, "...model...v2")
    specs = _load(f"""
        indexes:
          - embedder: {{kind: local, model: "{long}"}}
          - embedder: {{kind: local, model: "{dotted}"}}
          - {{}}
    """)
    keys = [s.key for s in specs]
    assert all(valid_key(k) and len(k) <= 64 and "..." not in k for k in keys), keys
    assert keys[0].endswith("-w150-o20") and keys[0].startswith("aaaa")
    assert keys[1] == "model..v2-w150-o20"
    partitions = MultiPartitionsDefinition({"index": StaticPartitionsDefinition(keys),
                                            "variant": StaticPartitionsDefinition(["hybrid", "hybrid+mmr"])})
    assert len(partitions.get_partition_keys()) == 6


def test_the_identity_is_what_the_index_is_not_what_it_is_called():
    named = IndexSpec(name="mine", chunking=ChunkingConfig(split_length=200))
    assert named.key == "mine"
    assert named.identity() == IndexSpec(chunking=ChunkingConfig(split_length=200)).identity()
    assert named.identity() != DEFAULT_INDEX.identity()
    assert named.describe() == {"key": "mine", **named.identity()}
    with pytest.raises(FrozenInstanceError):
        named.name = "other"  # type: ignore[misc]
    remote = IndexSpec(embedder="openai", model="text-embedding-3-small", base_url="https://example.test/v1")
    assert remote.identity()["model"] == "openai:https://example.test/v1:text-embedding-3-small"


def test_an_openai_key_comes_from_the_environment_never_the_file(monkeypatch):
    (spec,) = _load("""
        indexes:
          - embedder: {kind: openai, model: text-embedding-3-small, api_key_env: MY_EMBEDDINGS_KEY}
    """)
    monkeypatch.setenv("MY_EMBEDDINGS_KEY", "sk-test-secret")
    embedder = spec.build_embedder(batch_size=8)
    assert embedder._api_key == "sk-test-secret" and embedder.batch_size == 8
    assert "sk-test" not in repr(embedder) and "sk-test" not in repr(spec) and "sk-test" not in str(spec.identity())
    (default_env,) = _load("indexes: [{embedder: {kind: openai, model: m}}]")
    assert default_env.api_key_env == "OPENAI_API_KEY"


def test_a_relative_local_folder_is_resolved_against_base_dir(tmp_path):
    _model_folder(tmp_path / "models", "e5-small")
    (spec,) = _load("indexes: [{embedder: {kind: local, model: models/e5-small}}]", base_dir=tmp_path)
    assert spec.model == str(tmp_path / "models" / "e5-small") and spec.key == "e5-small-w150-o20"
    assert spec.build_embedder().model == spec.model


# ---- bad entries: file:line, index N, the setting -----------------------------------------


@pytest.mark.parametrize("text, expected", [
    ("""
     indexes:
       - embedder: bundled
       - embedder: bundled
         chunks: {split_length: 100}
     """, r"variants.yaml:4: index 2: unknown setting(s) ['chunks']; valid: name, embedder, chunking"),
    ("""
     indexes:
       - embedder: {kind: huggingface, model: x}
     """, "variants.yaml:3: index 1: embedder.kind 'huggingface' is not valid; valid: bundled, local, openai"),
    ("""
     indexes:
       - embedder: 42
     """, "variants.yaml:3: index 1: embedder must be a kind (bundled, local, openai) or a mapping"),
    ("""
     indexes:
       - embedder: local
     """, "index 1: embedder.model is required for kind local: a sentence-transformers model folder"),
    ("""
     indexes:
       - chunking: {split_length: 100}
       - embedder:
           kind: openai
           base_url: http://127.0.0.1:8000/v1
     """, "variants.yaml:5: index 2: embedder.model is required for kind openai: the endpoint's model name"),
    ("""
     indexes:
       - embedder: {kind: bundled, model: /some/where}
     """, ("variants.yaml:3: index 1: embedder 'bundled' has no setting(s) ['model'] (the bundled model takes no "
          "model: use kind local for a model folder)")),
    ("""
     indexes:
       - embedder: {kind: local, model: /no/such/model/folder}
     """, "variants.yaml:3: index 1: embedder.model '/no/such/model/folder' does not exist"),
    ("""
     indexes:
       - embedder: {kind: openai, model: m, api_key: sk-live-123}
     """, ("variants.yaml:3: index 1: embedder.api_key is not allowed in the variants file: secrets come only from "
          "the environment")),
    ("""
     indexes:
       - api_key: sk-live-123
     """, ("variants.yaml:3: index 1: api_key is not allowed in the variants file: secrets come only from the "
          "environment")),
    ("""
     indexes:
       - embedder: {kind: openai, model: m, base_url: "https://user:pw@example.test/v1"}
     """, "variants.yaml:3: index 1: embedder.base_url carries credentials"),
    ("""
     indexes:
       - embedder: {kind: openai, model: m, base_url: example.test}
     """, "variants.yaml:3: index 1: embedder.base_url must be an http(s):// URL"),
    ("""
     indexes:
       - embedder: {kind: openai, model: m, api_key_env: "not a name"}
     """, "variants.yaml:3: index 1: embedder.api_key_env must name an environment variable"),
    ("""
     indexes:
       - embedder: bundled
         chunking:
           split_length: 50
           split_overlap: 50
     """, "variants.yaml:5: index 1: chunking.split_overlap 50 must be below split_length 50"),
    ("""
     indexes:
       - chunking: {split_by: passage, split_length: 5}
     """, ("variants.yaml:3: index 1: chunking.split_overlap 20 (its default, 20: give split_overlap) must be below "
          "split_length 5")),
    ("""
     indexes:
       - chunking: {split_by: token}
     """, "variants.yaml:3: index 1: chunking.split_by 'token' is not valid; valid: word, sentence, passage"),
    ("""
     indexes:
       - chunking: {split_by: sentence, split_length: 5, split_overlap: 1}
     """, "variants.yaml:3: index 1: chunking.split_by 'sentence' needs nltk and its punkt sentence model"),
    ("""
     indexes:
       - chunking: {split_length: 0}
     """, "index 1: chunking.split_length must be an integer in [1, 10000], got 0"),
    ("""
     indexes:
       - chunking: {split_length: true}
     """, "index 1: chunking.split_length must be an integer in [1, 10000], got True"),
    ("""
     indexes:
       - chunking: {split_overlap: -1}
     """, "index 1: chunking.split_overlap must be an integer >= 0, got -1"),
    ("""
     indexes:
       - chunking: {embed_title: "yes"}
     """, "index 1: chunking.embed_title must be true or false, got 'yes'"),
    ("""
     indexes:
       - chunking: {overlap: 10}
     """, ("index 1: unknown chunking setting(s) ['overlap']; valid: split_by, split_length, split_overlap, "
          "embed_title")),
    ("""
     indexes:
       - name: MiniLM W150
     """, "variants.yaml:3: index 1: name 'MiniLM W150' must be 1-64 characters"),
    ("""
     indexes:
       - name: a...b
     """, "index 1: name 'a...b' must be 1-64 characters"),
    ("""
     indexes:
       - embedder: bundled
       - chunking: {split_length: 150, split_overlap: 20}
     """, "variants.yaml:4: index 2: key 'minilm-w150-o20' is the key of index 1; give one of them a 'name'"),
    ("""
     indexes:
       - name: fast
       - name: fast
         chunking: {split_length: 80}
     """, "variants.yaml:4: index 2: key 'fast' is the key of index 1; give it another 'name'"),
    ("""
     indexes:
       - name: one
       - name: two
     """, "variants.yaml:4: index 2: the same embedder and chunking as index 1 ('one')"),
    ("""
     indexes: []
     """, ("variants.yaml: indexes is empty: list at least one index, or leave indexes out for the default "
          "(minilm-w150-o20)")),
    ("""
     indexes: {embedder: bundled}
     """, "indexes must be a list of indexes"),
    ("""
     indexes: [bundled]
     """, "variants.yaml: index 1: expected a mapping like {embedder: bundled, chunking: {split_length: 150}}"),
])
def test_a_bad_index_entry_is_rejected_naming_file_line_index_and_setting(text, expected):
    message = _error(text)
    assert expected in message, message


def test_a_local_model_must_be_a_model_folder(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    a_file = tmp_path / "weights.bin"
    a_file.write_bytes(b"x")
    message = _error(f"indexes: [{{embedder: {{kind: local, model: '{empty}'}}}}]")
    assert "index 1: embedder.model" in message and "holds no modules.json or config.json" in message
    message = _error(f"indexes: [{{embedder: {{kind: local, model: '{a_file}'}}}}]")
    assert "is a file, not a model folder" in message
    message = _error("indexes: [{embedder: {kind: local, model: base_url_typo, base_url: 'http://x'}}]")
    assert "embedder 'local' has no setting(s) ['base_url'] (base_url is for kind openai)" in message


def test_a_missing_local_model_name_is_refused_offline(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-cache"))
    message = _error("indexes: [{embedder: {kind: local, model: some-org/not-a-cached-model}}]")
    assert "'some-org/not-a-cached-model' does not exist" in message
    assert "is not in the local Hugging Face cache; nothing is downloaded" in message


def test_the_spec_checks_itself_when_built_in_code():
    with pytest.raises(ValueError, match="embedder 'elastic' is not valid"):
        IndexSpec(embedder="elastic")
    with pytest.raises(ValueError, match="embedder local needs a model"):
        IndexSpec(embedder="local")
    with pytest.raises(ValueError, match="takes no model"):
        IndexSpec(model="/m")
    with pytest.raises(ValueError, match="base_url applies to embedder kind openai only"):
        IndexSpec(base_url="http://x")
    with pytest.raises(ValueError, match="name 'Bad Name'"):
        IndexSpec(name="Bad Name")


def test_the_module_docstrings_example_parses_to_the_keys_it_names(tmp_path):
    import re

    import eval_pipeline.store.indexes as module

    folder = _model_folder(tmp_path, "bge-small-en-v1.5")
    block = module.__doc__.split("`minilm-w150-o20` × `hybrid+mmr`:\n\n", 1)[1].split("\n\n", 1)[0]
    text = textwrap.dedent(block).replace("/models/bge-small-en-v1.5", str(folder))
    stated = re.findall(r"# key: (\S+)", text)
    keys = [s.key for s in _load(text)]
    assert len(keys) == 4 and stated == [keys[0], keys[2], keys[3]]
    assert keys[1] == "minilm-w300"


def test_an_openai_index_may_name_its_input_types_and_they_are_its_identity():
    specs = _load("""
        indexes:
          - embedder: {kind: openai, model: e5, base_url: "http://127.0.0.1:9/v1"}
            chunking: {split_length: 100, split_overlap: 10}
          - embedder: {kind: openai, model: e5, base_url: "http://127.0.0.1:9/v1",
                       input_type: {document: passage, query: query}}
    """)
    plain, typed = specs
    assert plain.input_types is None and typed.input_types == ("passage", "query")
    assert typed.identity()["input_type"] == {"document": "passage", "query": "query"}
    assert "input_type" not in plain.identity()
    embedder = typed.build_embedder()
    assert embedder.input_types == ("passage", "query") and embedder.identity != plain.build_embedder().identity


@pytest.mark.parametrize("value", ["passage", "{document: passage}", "{document: passage, query: ''}",
                                   "{document: passage, query: query, other: x}"])
def test_a_bad_input_type_is_refused_naming_the_setting(value):
    message = _error(f"""
        indexes:
          - embedder: {{kind: openai, model: e5, input_type: {value}}}
    """)
    assert "index 1: embedder.input_type must be {document: <type>, query: <type>}" in message


def test_input_type_is_for_the_openai_kind_only():
    message = _error("""
        indexes:
          - embedder: {kind: bundled, input_type: {document: passage, query: query}}
    """)
    assert "embedder 'bundled' has no setting(s) ['input_type']" in message
