"""The variants file as typed values: `SweepConfig` and the settings it owns, pydantic models
like the Dagster run config they sit beside.

Why models and not the raw mapping: every op that reads the sweep gets one checked, frozen
value passed to it (definitions.py reads the file once and hands it to the asset factories),
so a setting is read by attribute with a known type, never by key from a global.

The models are frozen and refuse unknown fields. Strict: a value of the wrong type is a bug
of the reader (eval_pipeline.config.sweep), which has already checked the file and named its
line; the model does not coerce it. Types owned by other packages (a variant, an index, the
recommendation's budgets, the audit's thresholds) are checked as instances of their own
classes, which validate themselves when built.
"""

from __future__ import annotations

from typing import NamedTuple

from pydantic import BaseModel, ConfigDict, Field, InstanceOf

from eval_pipeline.ranking.variants import Variant
from eval_pipeline.recommend import Budgets
from eval_pipeline.store.indexes import DEFAULT_INDEX, IndexSpec
from eval_pipeline.validity.audit import AuditThresholds

# A pair's partition key: Dagster's multi-partition key, the dimensions in name order (index,
# then variant) joined by "|", which neither an index key nor a variant key can hold.
PAIR_SEPARATOR = "|"

DEFAULT_CRON = "0 2 * * *"
DEFAULT_EFFECT = 0.02

Prices = dict[str, dict[str, float]]
"""model -> {"prompt_per_1k": float, "completion_per_1k": float} (eval_pipeline.common.prices)."""


def pair_key(index: str, variant: str) -> str:
    """`minilm-w150-o20|hybrid+mmr`: the partition key of an (index, variant) pair."""
    return f"{index}{PAIR_SEPARATOR}{variant}"


class TuningSplit(NamedTuple):
    """`tuning: {fraction, seed}`: the questions fusion tuning sees (a `fraction` of them, drawn
    with `seed`) are never scored; every variant is scored on the same held-out rest. A tuple,
    so `fraction, seed = sweep.tuning` reads it."""

    fraction: float
    seed: int


DEFAULT_TUNING = TuningSplit(0.3, 0)


class FrozenSettings(BaseModel):
    """The base of the variants file's models: frozen, no unknown field, no coercion."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True, arbitrary_types_allowed=True)


class SweepConfig(FrozenSettings):
    """The sweep. Without `indexes:` in the file there is one index (the embedder resource's,
    on `StoreConfig`'s chunking) and a partition key is a variant key, as it always was; with
    it, a partition is an (index, variant) pair and its key is `pair_key(index, variant)`.
    `baseline` is a partition key either way."""

    variants: tuple[InstanceOf[Variant], ...] = Field(min_length=1, description="`variants:`, in the file's order")
    baseline: str = Field(description="`baseline:`, as a partition key")
    source: str = Field(description="the file read (named in every message)")
    tolerances: dict[str, float] = Field(default_factory=dict, description="`gate.tolerances`: metric -> max drop")
    strict: bool = Field(default=False, description="`gate.strict`: a variant that cannot be compared fails")
    cron: str = Field(default=DEFAULT_CRON, description="`schedule.cron`: the nightly run (5 fields, UTC)")
    audit: InstanceOf[AuditThresholds] = Field(default_factory=AuditThresholds, description="`audit:`")
    effect: float = Field(default=DEFAULT_EFFECT, gt=0, le=1, description="`gate.effect`: the change the question "
                          "set should detect (the report's questions needed)")
    answer_tolerances: dict[str, float] = Field(default_factory=dict, description="`answers.gate`: "
                                                "max_pass_rate_drop, max_mean_score_drop")
    answer_strict: bool = Field(default=False, description="`answers.gate.strict`: an answer run that cannot be "
                                "compared fails the answer gate (default: `gate.strict`)")
    prices: Prices = Field(default_factory=dict, description="`answers.prices`: model -> price per 1k tokens")
    indexes: tuple[InstanceOf[IndexSpec], ...] = Field(default=(DEFAULT_INDEX,), min_length=1,
                                                       description="`indexes:`, in the file's order")
    indexes_listed: bool = Field(default=False, description="the file has `indexes:`: partitions are (index, "
                                 "variant) pairs")
    budgets: InstanceOf[Budgets] = Field(default_factory=Budgets, description="`recommend:`: what a recommended "
                                         "pair stays within")
    tuning: TuningSplit | None = Field(default=None, description="`tuning:`; None when no variant tunes its fusion")

    @property
    def keys(self) -> list[str]:
        """The partition keys, in the file's order (index by index when indexes are listed)."""
        if not self.indexes_listed:
            return [v.key for v in self.variants]
        return [pair_key(i.key, v.key) for i in self.indexes for v in self.variants]

    def by_key(self) -> dict[str, Variant]:
        """Variant key -> variant."""
        return {v.key: v for v in self.variants}

    def index_by_key(self) -> dict[str, IndexSpec]:
        return {i.key: i for i in self.indexes}

    def pair(self, key: str) -> tuple[IndexSpec, Variant]:
        """The index and the variant of a partition key (a KeyError naming it when it is not one)."""
        index, sep, variant = str(key).rpartition(PAIR_SEPARATOR)
        if self.indexes_listed != bool(sep):
            raise KeyError(f"{key!r} is not a partition key of {self.source} (keys look like {self.keys[0]!r})")
        spec = self.index_by_key().get(index) if sep else self.indexes[0]
        variant_ = self.by_key().get(variant)
        if spec is None or variant_ is None:
            raise KeyError(f"{key!r} is not a partition key of {self.source} (keys look like {self.keys[0]!r})")
        return spec, variant_
