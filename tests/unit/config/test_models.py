"""The variants file's typed values: a frozen `SweepConfig` that refuses unknown fields and
values of the wrong type (the reader checked the file; a wrong type reaching the model is a
bug, not something to coerce), with the tuning split readable as a tuple."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from eval_pipeline.config.models import DEFAULT_TUNING, SweepConfig, TuningSplit
from eval_pipeline.config.sweep import parse_sweep
from eval_pipeline.ranking.variants import Variant
from eval_pipeline.recommend import Budgets
from eval_pipeline.store.indexes import DEFAULT_INDEX
from eval_pipeline.validity.audit import AuditThresholds


def _minimal(**overrides) -> SweepConfig:
    return SweepConfig(**{"variants": (Variant("bm25", "bm25"),), "baseline": "bm25", "source": "v.yaml",
                          **overrides})


def test_the_defaults_are_those_of_a_file_without_the_optional_sections():
    sweep = _minimal()
    assert sweep.keys == ["bm25"] and sweep.indexes == (DEFAULT_INDEX,) and not sweep.indexes_listed
    assert sweep.cron == "0 2 * * *" and sweep.effect == 0.02 and sweep.tuning is None
    assert sweep.audit == AuditThresholds() and sweep.budgets == Budgets()
    assert parse_sweep({"variants": ["bm25"]}).keys == sweep.keys


def test_the_sweep_is_frozen():
    sweep = _minimal()
    with pytest.raises(ValidationError, match="frozen"):
        sweep.baseline = "other"  # type: ignore[misc]


def test_an_unknown_field_is_refused():
    with pytest.raises(ValidationError, match="extra_forbidden|Extra inputs are not permitted"):
        _minimal(tolerance={"mrr": 0.1})  # the field is `tolerances`


@pytest.mark.parametrize("field, value", [
    ("strict", "yes"),  # not coerced to True
    ("effect", "0.1"),
    ("effect", 0.0),  # (0, 1]
    ("effect", 1.5),
    ("variants", ()),  # at least one
    ("variants", ({"engine": "bm25"},)),  # a Variant, not its mapping
    ("audit", {"blocking": True}),
    ("indexes", ()),
    ("tuning", (0.3, "0")),
])
def test_a_value_of_the_wrong_type_or_range_is_refused(field, value):
    with pytest.raises(ValidationError, match=field):
        _minimal(**{field: value})


def test_the_tuning_split_reads_as_a_pair():
    split = parse_sweep({"variants": ["hybrid", {"engine": "hybrid", "tune": "rrf_k", "name": "tuned"}],
                         "tuning": {"fraction": 0.5, "seed": 3}}).tuning
    assert isinstance(split, TuningSplit) and split == (0.5, 3) and (split.fraction, split.seed) == (0.5, 3)
    fraction, seed = split
    assert (fraction, seed) == (0.5, 3)
    assert DEFAULT_TUNING == (0.3, 0)
