"""The index sweep in the variants file and the graph's partitions: (index, variant) pair keys,
the baseline pair, budgets, bad entries refused at load (through the file, as the code
location reads it), and which variants share results across indexes."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pandas as pd
import pytest

from eval_pipeline.judging.sweep_file import load_sweep, pair_key
from eval_pipeline.ranking.variants import RerankerSpec, Variant, VariantConfigError
from eval_pipeline.store.ingest import ChunkingConfig, StoreInfo

REPO = Path(__file__).resolve().parents[1]

SWEEP = """\
baseline: {baseline}
indexes:
  - embedder: bundled
    chunking: {{split_length: 150, split_overlap: 20}}
  - name: minilm-w60
    chunking: {{split_length: 60, split_overlap: 10}}
variants:
  - engine: pg-dense
  - engine: hybrid
    reranker: {{kind: mmr, lambda_: 0.7}}
  - engine: metadata
recommend: {{max_p95_ms: 50, max_storage_mb: 2, min_quality: 0.3}}
"""


def _sweep(tmp_path: Path, baseline: str = "pg-dense", text: str = SWEEP):
    path = tmp_path / "variants.yaml"
    path.write_text(textwrap.dedent(text).format(baseline=baseline), encoding="utf-8")
    return load_sweep(path)


def test_pair_keys_are_index_major_and_read_back(tmp_path):
    sweep = _sweep(tmp_path)
    assert sweep.indexes_listed
    assert sweep.keys == ["minilm-w150-o20|pg-dense", "minilm-w150-o20|hybrid+mmr", "minilm-w150-o20|metadata",
                          "minilm-w60|pg-dense", "minilm-w60|hybrid+mmr", "minilm-w60|metadata"]
    index, variant = sweep.pair("minilm-w60|hybrid+mmr")
    assert (index.key, variant.key) == ("minilm-w60", "hybrid+mmr")
    assert index.chunking == ChunkingConfig("word", 60, 10, True)
    with pytest.raises(KeyError, match="'hybrid' is not a partition key"):
        sweep.pair("hybrid")  # a variant key alone is not a pair
    with pytest.raises(KeyError, match="'other|pg-dense' is not a partition key"):
        sweep.pair("other|pg-dense")


def test_the_partitions_are_index_by_variant_with_the_files_keys(tmp_path):
    from dagster import MultiPartitionsDefinition

    from assets.partitions import partitions_of

    sweep = _sweep(tmp_path)
    partitions = partitions_of(sweep)
    assert isinstance(partitions, MultiPartitionsDefinition)
    assert [d.name for d in partitions.partitions_defs] == ["index", "variant"]
    assert [str(k) for k in partitions.get_partition_keys()] == sweep.keys
    key = partitions.get_partition_keys()[4]
    assert key.keys_by_dimension == {"index": "minilm-w60", "variant": "hybrid+mmr"}
    assert pair_key("minilm-w60", "hybrid+mmr") == str(key)


def test_without_indexes_a_partition_is_a_variant_as_before(tmp_path):
    from dagster import StaticPartitionsDefinition

    from assets.partitions import partitions_of

    sweep = _sweep(tmp_path, text="variants:\n  - engine: pg-dense\n  - engine: bm25\n")
    assert not sweep.indexes_listed and sweep.keys == ["pg-dense", "bm25"] and sweep.baseline == "pg-dense"
    assert isinstance(partitions_of(sweep), StaticPartitionsDefinition)
    index, variant = sweep.pair("bm25")
    assert variant.key == "bm25" and index.key == "minilm-w150-o20"  # the one index, a handle only


def test_the_baseline_is_a_pair(tmp_path):
    assert _sweep(tmp_path).baseline == "minilm-w150-o20|pg-dense"  # a variant: on the first index
    assert _sweep(tmp_path, "minilm-w60|metadata").baseline == "minilm-w60|metadata"
    with pytest.raises(VariantConfigError, match="'nope' is not an index key; keys: minilm-w150-o20, minilm-w60"):
        _sweep(tmp_path, "nope|pg-dense")
    with pytest.raises(VariantConfigError, match="baseline 'minilm-w60|bm25' is not a variant key"):
        _sweep(tmp_path, "minilm-w60|bm25")
    with pytest.raises(VariantConfigError, match="names an index, but the file lists no indexes"):
        _sweep(tmp_path, text="baseline: minilm-w150-o20|pg-dense\nvariants:\n  - engine: pg-dense\n")


def test_budgets_come_from_the_file(tmp_path):
    budgets = _sweep(tmp_path).budgets
    assert (budgets.max_p95_ms, budgets.max_storage_bytes, budgets.min_quality) == (50.0, 2_000_000.0, 0.3)


@pytest.mark.parametrize("entry, message", [
    ("  - chunking: {split_length: 60, split_overlap: 60}",
     "variants.yaml:2: index 1: chunking.split_overlap 60 must be below split_length 60"),
    ("  - embedder: {kind: local, model: /nowhere/model}",
     "variants.yaml:2: index 1: embedder.model '/nowhere/model' does not exist"),
    ("  - embedder: {kind: openai, model: m, api_key: sk-secret}",
     "variants.yaml:2: index 1: embedder.api_key is not allowed in the variants file"),
    ("  - chunking: {split_by: token}",
     "variants.yaml:2: index 1: chunking.split_by 'token' is not valid; valid: word, sentence, passage"),
    ("  - chunking: {split_lenght: 60}",
     "variants.yaml:2: index 1: unknown chunking setting(s) ['split_lenght']"),
    ("  - embedder: {kind: local, model: 'package:no_such_package_here/weights'}",
     "variants.yaml:2: index 1: embedder.model 'package:no_such_package_here/weights': no installed package"),
])
def test_a_bad_index_entry_is_refused_when_the_file_loads_naming_the_setting(tmp_path, entry, message):
    path = tmp_path / "variants.yaml"
    path.write_text("indexes:\n" + entry + "\nvariants:\n  - engine: pg-dense\n", encoding="utf-8")
    with pytest.raises(VariantConfigError) as info:
        load_sweep(path)
    assert str(info.value).replace(str(tmp_path) + "/", "").startswith(message), str(info.value)
    assert "sk-secret" not in str(info.value)


def test_the_code_location_refuses_a_bad_index_in_one_line(tmp_path):
    """As `dagster job execute` reads the file: a click error naming the file, line and setting."""
    path = tmp_path / "bad.yaml"
    path.write_text("indexes:\n  - chunking: {split_length: 10, split_overlap: 10}\nvariants:\n  - engine: bm25\n")
    result = subprocess.run([sys.executable, "-c", "import assets.partitions"], cwd=REPO, capture_output=True,
                            text=True, env={**__import__("os").environ, "EVAL_PIPELINE_VARIANTS": str(path)})
    assert result.returncode != 0
    assert f"bad variants file: {path}:2: index 1: chunking.split_overlap 10 must be below split_length 10" \
        in result.stderr


def test_a_package_model_folder_resolves_to_the_installed_weights(tmp_path):
    text = SWEEP.replace("  - name: minilm-w60\n", "  - name: sre-w60\n    embedder: {{kind: local, model: "
                         "'package:sre_embedding_model/model_weights'}}\n")
    index, _ = _sweep(tmp_path, text=text).pair("sre-w60|pg-dense")
    assert index.embedder == "local" and Path(index.model, "modules.json").is_file()


def _store(table: str, chunking: ChunkingConfig) -> StoreInfo:
    return StoreInfo(table, "f", "corpus", "model", chunking, 10, 384, 0.0, True)


def test_only_metadata_without_a_reranker_is_index_independent_and_keyed_on_the_chunks():
    from eval_pipeline.ranking.steps import index_independent, results_table

    metadata, dense = Variant("metadata", "metadata"), Variant("pg-dense", "pg-dense")
    reranked = Variant("metadata+mmr", "metadata", reranker=RerankerSpec("mmr", {"lambda_": 0.7}))
    assert index_independent(metadata) and not index_independent(dense) and not index_independent(reranked)
    w150, w60 = ChunkingConfig("word", 150, 20), ChunkingConfig("word", 60, 10)
    # two embedders, one chunking: the same chunks, so metadata is ranked once
    assert results_table(_store("chunks_a", w150), metadata) == results_table(_store("chunks_b", w150), metadata)
    assert results_table(_store("chunks_a", w150), metadata) != results_table(_store("chunks_c", w60), metadata)
    assert results_table(_store("chunks_a", w150), dense) == "chunks_a"


def test_an_alias_takes_its_sources_results_labelled_as_its_own_pair():
    from eval_pipeline.ranking.steps import Alias, RankedBatch, merge_ranked_batches

    frame = pd.DataFrame({"variant": ["idx-a|metadata"], "qid": ["q1"], "index": ["idx-a"],
                          "store_table": ["chunks_a"]})
    results, metadata = merge_ranked_batches([RankedBatch(frames={"idx-a|metadata": frame})],
                                             ["idx-a|metadata", "idx-b|metadata"],
                                             {"idx-b|metadata": Alias("idx-a|metadata", "idx-b", "chunks_b")})
    copied = results["idx-b|metadata"]
    assert copied[["variant", "index", "store_table"]].iloc[0].tolist() == ["idx-b|metadata", "idx-b", "chunks_b"]
    assert results["idx-a|metadata"]["store_table"].iloc[0] == "chunks_a"  # the source is not changed
    assert metadata["shared_across_indexes"] == "idx-b|metadata (from idx-a|metadata)"


def test_run_config_chunking_is_refused_when_the_file_lists_indexes(tmp_path):
    """The chunking of each index is the file's: a run config that also sets one is an error
    in the run's first step, naming the setting (not silently ignored)."""
    path = tmp_path / "v.yaml"
    path.write_text(SWEEP.format(baseline="pg-dense"))
    code = ("import assets\n"
            "try:\n"
            "    assets.validate_run_config({'ops': {'pgvector_store': {'config': {'split_length': 30}}}})\n"
            "except ValueError as exc:\n"
            "    print(exc)\n")
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True,
                            env={**__import__("os").environ, "EVAL_PIPELINE_VARIANTS": str(path)})
    assert "ops.pgvector_store.config.split_length: the variants file" in result.stdout, result.stderr[-2000:]
