"""Partition keys from a variants file; invalid files rejected with messages that list what is valid."""

from pathlib import Path

import pytest

from eval_pipeline.judging.sweep_file import load_sweep, parse_sweep
from eval_pipeline.ranking.variants import VariantConfigError

REPO = Path(__file__).resolve().parent.parent


def test_keys_are_derived_and_readable():
    sweep = parse_sweep({"baseline": "hybrid", "variants": [
        "pg-dense",
        {"engine": "hybrid"},
        {"engine": "hybrid", "reranker": "mmr"},
        {"engine": "hybrid", "reranker": {"kind": "cross-encoder", "model": "/m"}, "name": "hybrid+ce-mini"},
        {"engine": "bm25", "depth": 100},
    ]})
    assert sweep.keys == ["pg-dense", "hybrid", "hybrid+mmr", "hybrid+ce-mini", "bm25"]
    assert sweep.baseline == "hybrid"
    by_key = sweep.by_key()
    assert by_key["hybrid+ce-mini"].reranker.options == {"model": "/m"}
    assert by_key["bm25"].chunk_top_k == 500  # 5 x depth by default
    # variants that differ only by reranker share their first stage (candidate pool)
    assert by_key["hybrid"].first_stage == by_key["hybrid+mmr"].first_stage
    assert by_key["hybrid"].first_stage != by_key["pg-dense"].first_stage


def test_the_repository_variants_file_loads():
    sweep = load_sweep(REPO / "variants.yaml")
    assert sweep.baseline in sweep.keys and len(sweep.keys) >= 5


@pytest.mark.parametrize(
    "data, message",
    [
        ({"variants": [{"engine": "elastic"}]},
         "variant 1: engine 'elastic' is not valid; valid engines: pg-keyword, pg-dense, hybrid, bm25, metadata"),
        ({"variants": [{"engine": "hybrid", "reranker": "colbert"}]},
         "reranker 'colbert' is not valid; valid rerankers: none, cross-encoder, bi-encoder, llm, mmr"),
        ({"variants": [{"engine": "pg-dense", "fusion": "rrf"}]}, "unknown setting(s) ['fusion']; valid: "),
        ({"variants": [{"engine": "hybrid", "fusion": "max"}]}, "fusion 'max' is not valid; valid: rrf, merge, dbsf"),
        ({"variants": [{"engine": "hybrid", "legs": ["dense"]}]}, "must list two or more distinct of keyword, dense, bm25"),
        ({"variants": [{"engine": "hybrid", "weights": [1, -1]}]}, "weights [1, -1] must be 2 non-negative numbers"),
        ({"variants": [{"engine": "hybrid", "fusion": "merge", "rrf_k": 10}]}, "rrf_k only applies to fusion: rrf"),
        ({"variants": [{"engine": "bm25", "depth": 0}]}, "depth must be an integer in [1, 1000], got 0"),
        ({"variants": [{"engine": "bm25", "depth": "10"}]}, "depth must be an integer in [1, 1000], got '10'"),
        ({"variants": [{"engine": "bm25", "abstain_below": float("nan")}]}, "abstain_below must be a finite number"),
        ({"variants": ["bm25", "bm25"]}, "variant 2 has the key 'bm25' of variant 1; give one of them a 'name'"),
        ({"variants": [{"engine": "bm25", "name": "BM 25!"}]}, "name 'BM 25!' must be 1-64 characters"),
        ({"variants": ["bm25"], "baseline": "hybrid"}, "baseline 'hybrid' is not a variant key; keys: bm25"),
        ({"variants": []}, "'variants' must be a non-empty list"),
        ({"variants": ["bm25"], "extra": 1}, "unknown top-level setting(s) ['extra']"),
        ([1, 2], "expected a mapping"),
    ],
)
def test_invalid_configs_are_rejected(data, message):
    with pytest.raises(VariantConfigError) as info:
        parse_sweep(data, source="v.yaml")
    assert message in str(info.value)
    assert str(info.value).startswith("v.yaml")


def test_bad_yaml_names_the_file(tmp_path):
    path = tmp_path / "variants.yaml"
    path.write_text("variants: [\n")
    with pytest.raises(VariantConfigError, match=f"{path}: invalid YAML"):
        load_sweep(path)


@pytest.mark.parametrize(
    "gate, message",
    [
        ({"tolerances": {"mrr": float("nan")}}, "gate.tolerances: gate tolerance for 'mrr' must be a finite number in [0, 1]"),
        ({"tolerances": {"mrr": "0.05"}}, "gate tolerance for 'mrr' must be a finite number in [0, 1]"),
        ({"tolerances": {"mrr": 1.5}}, "gate tolerance for 'mrr' must be a finite number in [0, 1]"),
        ({"tolerances": {"mrr": -0.01}}, "gate tolerance for 'mrr' must be a finite number in [0, 1]"),
        ({"tolerances": {"precision": 0.1}}, "precision"),
        ({"tolerances": {}}, "gate.tolerances"),
        ({"strict": "yes"}, "gate.strict must be true or false, got 'yes'"),
        ({"tolerance": {}}, "gate must be a mapping with 'tolerances' and/or 'strict'"),
    ],
)
def test_gate_settings_are_validated_at_load(gate, message):
    with pytest.raises(VariantConfigError) as info:
        parse_sweep({"variants": ["bm25"], "gate": gate}, source="v.yaml")
    assert message in str(info.value)


def test_gate_and_schedule_defaults_and_overrides():
    sweep = parse_sweep({"variants": ["bm25"]})
    assert sweep.tolerances == {"hit@1": 0.05, "hit@5": 0.05, "mrr": 0.05, "ndcg@10": 0.05}
    assert sweep.strict is False and sweep.cron == "0 2 * * *"
    sweep = parse_sweep({"variants": ["bm25"], "gate": {"tolerances": {"mrr": -0.0}, "strict": True},
                         "schedule": {"cron": "30 4 * * 1-5"}})
    assert sweep.tolerances == {"mrr": 0.0} and sweep.strict and sweep.cron == "30 4 * * 1-5"
    with pytest.raises(VariantConfigError, match="schedule.cron 'nightly' must have 5 fields"):
        parse_sweep({"variants": ["bm25"], "schedule": {"cron": "nightly"}})
