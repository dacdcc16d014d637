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

from eval_pipeline.config.sweep import load_sweep, pair_key
from eval_pipeline.ranking.variants import RerankerSpec, Variant, VariantConfigError
from eval_pipeline.store.ingest import ChunkingConfig, StoreInfo

REPO = Path(__file__).resolve().parents[3]

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
    result = subprocess.run([sys.executable, "-c", "import definitions"], cwd=REPO, capture_output=True,
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
    from assets import validate_run_config

    path = tmp_path / "v.yaml"
    path.write_text(SWEEP.format(baseline="pg-dense"))
    with pytest.raises(ValueError, match="^ops.pgvector_store.config.split_length: the variants file"):
        validate_run_config({"ops": {"pgvector_store": {"config": {"split_length": 30}}}}, load_sweep(path))


# --- fusion tuning in the sweep -------------------------------------------------------------

TUNE = "baseline: hybrid\nvariants:\n  - engine: hybrid\n  - {entry}\n{extra}"


def _tune_sweep(tmp_path, entry: str, extra: str = ""):
    path = tmp_path / "variants.yaml"
    path.write_text(TUNE.format(entry=entry, extra=extra), encoding="utf-8")
    return load_sweep(path)


def test_a_tuned_variant_makes_the_sweep_split_its_questions(tmp_path):
    sweep = _tune_sweep(tmp_path, "{engine: hybrid, tune: rrf_k, name: tuned}")
    assert sweep.by_key()["tuned"].tune == "rrf_k" and sweep.tuning == (0.3, 0)  # the default split
    assert "tune" in sweep.by_key()["tuned"].describe()  # in the results cache key and the provenance
    sweep = _tune_sweep(tmp_path, "{engine: hybrid, tune: weights, name: tuned}", "tuning: {fraction: 0.5, seed: 3}\n")
    assert sweep.tuning == (0.5, 3)
    assert _tune_sweep(tmp_path, "{engine: bm25}").tuning is None  # nothing tuned: no split


@pytest.mark.parametrize("entry, extra, message", [
    ("{engine: hybrid, tune: depth, name: t}", "", "tune 'depth' is not valid; valid: rrf_k, weights"),
    ("{engine: hybrid, tune: rrf_k, rrf_k: 20, name: t}", "", "tune: rrf_k chooses rrf_k; do not also give rrf_k"),
    ("{engine: hybrid, tune: weights, weights: [1, 1], name: t}", "", "do not also give weights"),
    ("{engine: hybrid, fusion: merge, tune: rrf_k, name: t}", "", "tune: rrf_k needs fusion: rrf"),
    ("{engine: hybrid, fusion: dbsf, tune: weights, name: t}", "", "cannot tune fusion dbsf"),
    ("{engine: pg-dense, tune: rrf_k}", "", "unknown setting(s) ['tune']"),
    ("{engine: bm25}", "tuning: {fraction: 0.3}\n", "tuning is set but no variant has `tune"),
    ("{engine: hybrid, tune: rrf_k, name: t}", "tuning: {fraction: 1.0}\n", "tuning.fraction must be a number strictly"),
    ("{engine: hybrid, tune: rrf_k, name: t}", "tuning: {seed: -1}\n", "tuning.seed must be an integer >= 0"),
    ("{engine: hybrid, tune: rrf_k, name: t}", "tuning: {frac: 0.3}\n", "tuning must be a mapping with 'fraction'"),
])
def test_a_bad_tuning_setting_is_refused_when_the_file_loads(tmp_path, entry, extra, message):
    with pytest.raises(VariantConfigError) as info:
        _tune_sweep(tmp_path, entry, extra)
    assert message in str(info.value) and str(tmp_path) in str(info.value)


def _questions(n: int):
    from eval_pipeline.questions.sets import Question, QuestionSet

    qs = tuple(Question(qid=f"q{i:03d}", question=f"question {i}", gold=(f"d{i % 7}",) if i % 5 else ())
               for i in range(n))
    return QuestionSet(questions=qs, header={}, path="qs.jsonl")


def test_the_split_question_set_scores_only_the_held_out_part_and_is_stable():
    from eval_pipeline.ranking.fusion_tuning import split_question_set

    full = _questions(60)
    split = split_question_set(full, fraction=0.3, seed=1)
    tuning, held = {q.qid for q in split.tuning}, {q.qid for q in split.questions}
    assert tuning and held and not tuning & held and tuning | held == {q.qid for q in full.questions}
    assert [q.qid for q in split.questions] == [q.qid for q in full.questions if q.qid in held]  # file order
    assert split.split == {"fraction": 0.3, "seed": 1, "n_tuning": len(tuning), "n_held_out": len(held)}
    assert split.fingerprint != full.fingerprint  # scored on other questions: another benchmark identity
    again = split_question_set(_questions(80), fraction=0.3, seed=1)  # questions added: none changes side
    assert tuning <= {q.qid for q in again.tuning} and held <= {q.qid for q in again.questions}


def test_a_split_without_an_answerable_question_on_a_side_is_refused():
    """Two questions, one answerable: whichever side the other lands on has nothing to score."""
    from eval_pipeline.questions.sets import Question, QuestionSet
    from eval_pipeline.ranking.fusion_tuning import split_question_set

    qs = QuestionSet(questions=(Question("a", "x", ("d",)), Question("b", "y", ())), header={}, path="two.jsonl")
    with pytest.raises(ValueError, match="two.jsonl: the (tuning|held-out) part of the fusion-tuning split"):
        split_question_set(qs, fraction=0.5, seed=0)


def test_a_tuned_variants_results_key_holds_its_tuning_questions():
    """Attack: change a tuning question only. The scored questions are the same, so a key on
    them alone would serve the old tuned results; the tuning part is in the key too."""
    from dataclasses import replace

    from eval_pipeline.questions.sets import Question
    from eval_pipeline.ranking.fusion_tuning import split_question_set
    from eval_pipeline.ranking.steps import results_questions

    split = split_question_set(_questions(40), fraction=0.3, seed=0)
    first = split.tuning[0]
    edited = replace(split, tuning=(Question(first.qid, "another wording", first.gold), *split.tuning[1:]))
    tuned, plain = Variant("t", "hybrid", tune="rrf_k"), Variant("h", "hybrid")
    assert results_questions(split, tuned) != results_questions(edited, tuned)
    assert results_questions(split, plain) == results_questions(edited, plain) == split.fingerprint


def test_index_independent_results_from_the_cache_are_labelled_with_this_pairs_table(tmp_path):
    """Attack: index A ranked `metadata` in an earlier run; now the file lists only index B, of
    the same chunking with another embedder. The cached results are B's too (same chunks), but
    they still name A's table: served as they are, the report would refuse the run as
    inconsistent. They are served labelled with the table of the pair they are for."""
    from types import SimpleNamespace

    from eval_pipeline.common.state import StateDir
    from eval_pipeline.ranking.caches import ResultsCache
    from eval_pipeline.ranking.steps import Batch, rank_batch
    from eval_pipeline.store.ingest import store_fingerprint

    chunking = ChunkingConfig("word", 150, 20)
    embedder = SimpleNamespace(identity="embedder-b", model_id="b", revision="b")
    store = StoreInfo("chunks_b", store_fingerprint("corpus", chunking, "embedder-b"), "corpus", "b", chunking, 3,
                      384, 0.0, True)
    questions = SimpleNamespace(questions=(), corpus_signature="corpus", path="qs", fingerprint="fp", tuning=())
    state = StateDir(tmp_path)
    frame = pd.DataFrame({"variant": ["metadata"], "qid": ["q1"], "doc_ids": [["d1"]], "store_table": ["chunks_a"]})
    ResultsCache(state.ranked_results).put("k" * 32, frame)
    batch = Batch({"metadata": "k" * 32}, True, {"metadata": None}, "v1", 0.0, "not needed", index="idx-b",
                  partition_keys={"metadata": "idx-b|metadata"})
    result = rank_batch(batch, [Variant("metadata", "metadata")], snapshot=SimpleNamespace(signature="corpus"),
                        store=store, question_set=questions, state=state, connection_string="unused",
                        embedder=embedder, build_reranker=None, miss_k=10)
    served = result.frames["idx-b|metadata"]
    assert served["store_table"].tolist() == ["chunks_b"] and served["variant"].tolist() == ["idx-b|metadata"]
    assert result.reused == ["idx-b|metadata"]


def test_a_store_built_for_an_edited_index_is_refused_not_reported_under_the_new_definition(tmp_path):
    """Attack: change an index's chunking in the file but keep its name, and materialize only
    the ranking and the report: the stored table is the old chunking's. Refused, naming it."""
    from eval_pipeline.store.indexes import IndexStores

    before, after = _sweep(tmp_path), _sweep(tmp_path, text=SWEEP.replace("split_length: 60, split_overlap: 10",
                                                                           "split_length: 80, split_overlap: 10"))
    stores = IndexStores(tables={i.key: None for i in before.indexes},
                         described={i.key: i.describe() for i in before.indexes})
    stores.check_current(before.index_by_key(), ["minilm-w60"])  # unchanged: fine
    stores.check_current(after.index_by_key(), ["minilm-w150-o20"])  # this index did not change
    with pytest.raises(ValueError, match="index 'minilm-w60' is .* in the variants file, but pgvector_store holds it "
                                         "as .*: materialize pgvector_store again"):
        stores.check_current(after.index_by_key(), ["minilm-w150-o20", "minilm-w60"])


def test_a_builds_seconds_are_its_shards_wall_span_not_their_sum():
    from eval_pipeline.store.ingest import ShardResult, shards_wall_seconds

    side_by_side = [ShardResult(0, 10, 10, 5.0, "t", started=100.0), ShardResult(1, 10, 10, 6.0, "t", started=100.5)]
    assert shards_wall_seconds(side_by_side) == pytest.approx(6.5)  # not 11
    one_after_the_other = [ShardResult(0, 10, 10, 5.0, "t", started=100.0), ShardResult(1, 10, 10, 6.0, "t", 105.0)]
    assert shards_wall_seconds(one_after_the_other) == pytest.approx(11.0)
    assert shards_wall_seconds([ShardResult(0, 1, 1, 1.0)]) is None


def test_golden_prompts_that_are_tuning_questions_are_refused():
    from eval_pipeline.answering.run import check_prompts_held_out
    from eval_pipeline.questions.sets import Question, QuestionSet
    from eval_pipeline.ranking.fusion_tuning import split_question_set

    split = split_question_set(_questions(40), fraction=0.3, seed=0)
    tuned_on = split.tuning[0]
    held = QuestionSet(questions=(Question("p1", split.questions[0].question, ()),), header={}, path="golden:g")
    check_prompts_held_out(held, split)  # held-out questions as prompts: fine
    for prompt in (Question(tuned_on.qid, "other words", ()), Question("p2", "  " + tuned_on.question.upper(), ())):
        with pytest.raises(ValueError, match="1 golden prompt\\(s\\) of golden:g are fusion-tuning questions"):
            check_prompts_held_out(QuestionSet(questions=(prompt,), header={}, path="golden:g"), split)


def test_a_tuned_pair_ranked_on_other_tuning_questions_is_refused_by_the_report():
    """Attack: edit a tuning question's labels and re-run the report alone. The held-out part,
    and so the scored questions' fingerprint, is the same; the tuned value may not be."""
    import json

    from eval_pipeline.verdict.retrieval import InconsistentInputs, results_provenance

    config = json.dumps({"engine": "hybrid", "tune": "rrf_k", "rrf_k": 5, "tuned": {"method": "rrf_k"}})
    frame = pd.DataFrame({"variant": ["t"], "store_table": ["tb"], "questions_fingerprint": ["held"],
                          "variant_config": [config], "code_version": ["c"], "tuning_fingerprint": ["old"]})
    assert results_provenance({"t": frame}, tables={"t": "tb"}, questions_fingerprint="held", tuning_fingerprint="old")
    with pytest.raises(InconsistentInputs, match="variant 't' was tuned on the tuning questions \\['old'\\], this "
                                                 "run's are 'new'"):
        results_provenance({"t": frame}, tables={"t": "tb"}, questions_fingerprint="held", tuning_fingerprint="new")


def test_answers_of_a_pair_without_metrics_this_run_are_left_out_not_refused():
    from eval_pipeline.verdict.answers import check_answers_belong

    frame = pd.DataFrame({"corpus_signature": ["c"], "store_table": ["old"], "variant_config": ["{}"]})
    check_answers_belong({"idx|pg-dense": frame}, corpus_signature="c", tables={"idx|bm25": "tb"}, variant_configs={})


def test_gate_check_names_do_not_depend_on_the_order_of_the_file():
    from eval_pipeline.reporting.run import gate_check_names

    keys = ["e5.base-w150-o20|hybrid", "e5-base-w150-o20|hybrid", "minilm|bm25"]
    names = gate_check_names(keys)
    assert names == gate_check_names(list(reversed(keys)))
    assert len(set(names.values())) == 3 and names["minilm|bm25"] == "gate__minilm_bm25"


def test_the_bundled_model_listed_again_by_its_folder_is_one_table_twice_and_refused(tmp_path):
    from eval_pipeline.store.embedders import default_model_path

    text = ("indexes:\n  - embedder: bundled\n"
            f"  - embedder: {{kind: local, model: \"{default_model_path()}\"}}\n"
            "variants:\n  - engine: pg-dense\n")
    path = tmp_path / "variants.yaml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(VariantConfigError, match="index 2: the same embedder and chunking as index 1"):
        load_sweep(path)


@pytest.mark.parametrize("value, expected", [(3, 3.0), (0.25, 0.25), (float("nan"), None), (float("inf"), None),
                                             (None, None), (True, None), ("1.5", None)])
def test_a_measurement_that_may_be_absent_is_a_finite_float_or_none(value, expected):
    """The one reader the gate, the answer section and the Indexes section share."""
    import numpy as np

    from eval_pipeline.common.checks import finite_number

    assert finite_number(value) == expected
    if expected is not None:
        assert finite_number(np.float64(value)) == expected and type(finite_number(np.float64(value))) is float
