"""The verdict refuses partitions ranked for another configuration than the variants file gives
them now (fifth review of #23): a derived or run-chosen field (leg settings, the reranker's
identity, fusion tuning's value, an auto refusal threshold) is not a difference."""

import json

import pandas as pd
import pytest

from eval_pipeline.config.sweep import parse_sweep
from eval_pipeline.ranking.inputs import InconsistentInputs
from eval_pipeline.verdict.run import check_partitions_current

SWEEP = parse_sweep({"baseline": "dense", "variants": [
    {"engine": "pg-dense", "name": "dense"},
    {"engine": "hybrid", "tune": "rrf_k", "name": "tuned"},
    {"engine": "pg-dense", "abstain": {"policy": "auto"}, "name": "refuses"}]}, source="v.yaml")


def _frame(config: dict) -> pd.DataFrame:
    return pd.DataFrame({"qid": ["q1"], "variant_config": [json.dumps(config, sort_keys=True)]})


def _recorded(key: str, **extra) -> dict:
    return {**SWEEP.by_key()[key].describe(), **extra}


def test_partitions_of_the_current_file_pass_with_what_the_run_derived_or_chose():
    check_partitions_current({
        "dense": _frame(_recorded("dense", leg_settings={"dense": {"top_k": 100}})),
        "tuned": _frame(_recorded("tuned", rrf_k=10, tuned={"rrf_k": 10})),
        "refuses": _frame(_recorded("refuses", abstain_tuned={"threshold": 0.3})),
    }, SWEEP)


def test_a_partition_ranked_for_another_configuration_is_refused_naming_the_setting():
    with pytest.raises(InconsistentInputs, match=r"partition 'dense' was ranked for another configuration than "
                                                 r"v\.yaml gives it now \(depth: 3 -> 20\)"):
        check_partitions_current({"dense": _frame(_recorded("dense", depth=3))}, SWEEP)
