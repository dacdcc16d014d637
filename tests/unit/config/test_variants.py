"""Partition keys from a variants file; invalid files rejected with messages that list what is valid."""

import re
from pathlib import Path

import pytest

from eval_pipeline.config.sweep import load_sweep, parse_sweep
from eval_pipeline.ranking.variants import VariantConfigError

REPO = Path(__file__).resolve().parents[3]


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
        ({"tolerance": {}}, "gate: unknown setting(s) ['tolerance']; valid: 'tolerances', 'strict', 'effect'"),
        ([{"tolerances": {}}], "gate must be a mapping with 'tolerances', 'strict' and/or 'effect'"),
        ({"effect": 0}, "gate.effect must be a number in (0, 1], got 0"),
        ({"effect": True}, "gate.effect must be a number in (0, 1], got True"),
        ({"effect": "0.02"}, "gate.effect must be a number in (0, 1], got '0.02'"),
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


def test_leg_settings_are_parsed_per_leg_and_decide_the_first_stage():
    sweep = parse_sweep({"variants": [
        {"engine": "pg-keyword", "match": "any", "name": "kw-any"},
        {"engine": "pg-keyword"},
        {"engine": "bm25", "stemmer": "none", "fields": "title+body", "name": "bm25-raw"},
        {"engine": "pg-dense", "exact": True, "name": "dense-exact"},
        {"engine": "hybrid", "legs": ["keyword", "bm25"], "match": "websearch", "stopwords": "none"},
    ]})
    v = sweep.by_key()
    assert v["kw-any"].leg_settings("keyword") == {"match": "any"}
    assert v["pg-keyword"].leg_settings("keyword") == {}
    assert v["kw-any"].first_stage != v["pg-keyword"].first_stage  # another candidate pool
    assert v["bm25-raw"].leg_settings("bm25") == {"stemmer": "none", "fields": "title+body"}
    assert v["dense-exact"].leg_settings("dense") == {"exact": True}
    assert v["hybrid"].leg_settings("keyword") == {"match": "websearch"}
    assert v["hybrid"].leg_settings("bm25") == {"stopwords": "none"}
    assert v["kw-any"].describe()["match"] == "any"  # recorded with the variant's config
    assert "match" not in v["pg-keyword"].describe()  # defaults are not written out


@pytest.mark.parametrize("item, message", [
    ({"engine": "pg-dense", "match": "any"}, "unknown setting(s) ['match']"),
    ({"engine": "hybrid", "legs": ["keyword", "dense"], "stemmer": "none"}, "unknown setting(s) ['stemmer']"),
    ({"engine": "pg-keyword", "match": "some"}, "match 'some' is not valid; valid: all, any, websearch"),
    ({"engine": "pg-keyword", "ranking": "bm25"}, "ranking 'bm25' is not valid; valid: ts_rank_cd, ts_rank"),
    ({"engine": "pg-keyword", "normalization": 64}, "normalization must be an integer in [0, 63], got 64"),
    ({"engine": "bm25", "stemmer": "porter"}, "stemmer 'porter' is not valid; valid: english, none"),
    ({"engine": "bm25", "fields": "title"}, "fields 'title' is not valid; valid: body, title+body"),
    ({"engine": "pg-dense", "exact": "yes"}, "exact must be true or false, got 'yes'"),
    ({"engine": "pg-dense", "chunk_top_k": 1001}, "chunk_top_k 1001 is too deep for the dense leg"),
    ({"engine": "hybrid", "depth": 300}, "chunk_top_k 1500 is too deep for the dense leg"),
])
def test_bad_leg_settings_name_the_setting(item, message):
    with pytest.raises(VariantConfigError, match=re.escape(message)):
        parse_sweep({"variants": [item]})


def test_the_audit_section_is_read_and_checked_naming_its_line(tmp_path):
    path = tmp_path / "variants.yaml"
    path.write_text("variants: [bm25]\naudit:\n  max_surface_share: 0.3\n  blocking: true\n")
    sweep = load_sweep(path)
    assert sweep.audit.max_surface_share == 0.3 and sweep.audit.blocking
    assert parse_sweep({"variants": ["bm25"]}).audit.blocking is False  # a warning by default
    path.write_text("variants: [bm25]\naudit:\n  max_surface_share: 1.5\n")
    with pytest.raises(VariantConfigError, match=rf"{path}:3: audit.max_surface_share must be a number from 0 to 1"):
        load_sweep(path)
    with pytest.raises(VariantConfigError, match="unknown audit setting"):
        parse_sweep({"variants": ["bm25"], "audit": {"surface": 0.3}}, source="v.yaml")


def test_the_effect_to_detect_defaults_to_two_points():
    assert parse_sweep({"variants": ["bm25"]}).effect == 0.02
    assert parse_sweep({"variants": ["bm25"], "gate": {"effect": 0.05}}).effect == 0.05
