"""The variants file, read once when definitions load (definitions.py), and the sweep's
partitions built from it: one per variant;
or, when the file lists `indexes:`, one per (index, variant) pair, a two-dimensional partition
whose key reads `minilm-w150-o20|hybrid+mmr` (dimensions `index` and `variant`: the UI
filters by either).

The file is `EVAL_PIPELINE_VARIANTS`, else `variants.yaml` at the repository root. It is read
each time the code location loads: "Reload definitions" in the UI starts a fresh code server
process, which reads the file again and shows added or removed variants as partitions.

A bad variants file fails the load with one line naming the file, the variant and the setting:
`dagster job execute` prints it as `Error: …` (a click error, no traceback), and the UI shows
it as the code location's error message.
"""

import os
from pathlib import Path

import click
from dagster import MultiPartitionsDefinition, PartitionsDefinition, StaticPartitionsDefinition

from eval_pipeline.common.state import PROJECT_ROOT
from eval_pipeline.config.sweep import SweepConfig, load_sweep
from eval_pipeline.ranking.variants import VariantConfigError


class VariantsFileError(click.ClickException):
    """A variants file that cannot be used, as one line for the CLI and the UI."""

    def __str__(self) -> str:
        return self.message


def variants_file() -> Path:
    return Path(os.environ.get("EVAL_PIPELINE_VARIANTS") or PROJECT_ROOT / "variants.yaml")


def read_sweep(path: Path) -> SweepConfig:
    """The sweep of the variants file at `path`; a bad file is one line (`VariantsFileError`)."""
    try:
        return load_sweep(path)
    except VariantConfigError as exc:
        raise VariantsFileError(f"bad variants file: {exc}") from None


def partitions_of(sweep: SweepConfig) -> PartitionsDefinition:
    """Variants alone, or index × variant (whose keys are `SweepConfig.keys`, in the same order)."""
    if not sweep.indexes_listed:
        return StaticPartitionsDefinition(sweep.keys)
    return MultiPartitionsDefinition({"index": StaticPartitionsDefinition([i.key for i in sweep.indexes]),
                                      "variant": StaticPartitionsDefinition([v.key for v in sweep.variants])})

