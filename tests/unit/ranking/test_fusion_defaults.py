"""A variant's fusion defaults have one home, eval_pipeline.ranking.defaults (issue #24): the
fusion, a variant, the variants file's checks and fusion tuning agree with it. (engines.py and
variants.py still write the numbers out; this holds them to the one home until they import it.)"""

from __future__ import annotations

import inspect

import pytest

from eval_pipeline.ranking import defaults, fusion_tuning
from eval_pipeline.ranking.engines import fuse
from eval_pipeline.ranking.variants import Variant, VariantConfigError, parse_variant


def test_the_rrf_k_default_is_one_number():
    assert defaults.RRF_K == 61  # Haystack DocumentJoiner's fixed k
    assert inspect.signature(fuse).parameters["rrf_k"].default == defaults.RRF_K
    assert Variant(key="v", engine="hybrid").rrf_k == defaults.RRF_K
    assert parse_variant({"engine": "hybrid"}, "test").rrf_k == defaults.RRF_K
    assert inspect.signature(fusion_tuning.fused_ranking).parameters["rrf_k"].default == defaults.RRF_K
    assert inspect.signature(fusion_tuning.fusion_score).parameters["rrf_k"].default == defaults.RRF_K


def test_the_depth_default_is_one_number():
    assert Variant(key="v", engine="hybrid").depth == defaults.DEPTH
    assert parse_variant({"engine": "hybrid"}, "test").depth == defaults.DEPTH
    assert inspect.signature(fusion_tuning.fused_ranking).parameters["depth"].default == defaults.DEPTH


@pytest.mark.parametrize("bad", [defaults.RRF_K_RANGE[0] - 1, defaults.RRF_K_RANGE[1] + 1])
def test_the_rrf_k_range_is_the_variants_files(bad):
    lo, hi = defaults.RRF_K_RANGE
    assert parse_variant({"engine": "hybrid", "rrf_k": lo}, "test").rrf_k == lo
    assert parse_variant({"engine": "hybrid", "rrf_k": hi}, "test").rrf_k == hi
    with pytest.raises(VariantConfigError, match=rf"rrf_k must be an integer in \[{lo}, {hi}\]"):
        parse_variant({"engine": "hybrid", "rrf_k": bad}, "test")
    with pytest.raises(ValueError, match=rf"grid.*must be an integer in \[{lo}, {hi}\]"):
        fusion_tuning.tune_fusion({"keyword": {"q": []}, "dense": {"q": []}}, {"q": {"a": 1}}, ["q"],
                                  method="rrf_k", grid=[bad])
