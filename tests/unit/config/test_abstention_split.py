"""The tuning split exists when a variant chooses its refusal threshold (`abstain: {policy: auto}`),
not only when one tunes its fusion: `auto` picks its threshold on the tuning part, and without a
split it would have none (issue #26)."""

import pytest

from eval_pipeline.config.models import DEFAULT_TUNING, TuningSplit
from eval_pipeline.config.sweep import parse_sweep
from eval_pipeline.ranking.variants import VariantConfigError


def test_an_auto_abstain_variant_alone_gets_the_default_split():
    sweep = parse_sweep({"variants": [{"engine": "pg-dense", "abstain": {"policy": "auto"}}]})
    assert sweep.tuning == DEFAULT_TUNING


def test_a_tuning_section_is_accepted_for_an_auto_abstain_variant():
    sweep = parse_sweep({"variants": [{"engine": "bm25", "abstain": {"policy": "auto"}}],
                         "tuning": {"fraction": 0.4, "seed": 3}})
    assert sweep.tuning == TuningSplit(0.4, 3)


def test_no_split_without_tuning_or_auto_abstention():
    sweep = parse_sweep({"variants": [{"engine": "pg-dense", "abstain": {"policy": "threshold", "below": 0.3}}]})
    assert sweep.tuning is None


def test_an_unused_tuning_section_names_both_reasons():
    with pytest.raises(VariantConfigError, match=r"tune: rrf_k.*abstain: \{policy: auto\}"):
        parse_sweep({"variants": [{"engine": "pg-dense"}], "tuning": {"fraction": 0.3}})
