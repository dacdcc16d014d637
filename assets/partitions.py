"""The sweep's partitions: one per variant of the variants file, read when definitions load.

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
from dagster import StaticPartitionsDefinition

from eval_pipeline.common.state import PROJECT_ROOT
from eval_pipeline.judging.sweep_file import SweepConfig, load_sweep
from eval_pipeline.ranking.variants import VariantConfigError


class VariantsFileError(click.ClickException):
    """A variants file that cannot be used, as one line for the CLI and the UI."""

    def __str__(self) -> str:
        return self.message


def variants_file() -> Path:
    return Path(os.environ.get("EVAL_PIPELINE_VARIANTS") or PROJECT_ROOT / "variants.yaml")


def read_sweep(path: Path) -> SweepConfig:
    try:
        return load_sweep(path)
    except VariantConfigError as exc:
        raise VariantsFileError(f"bad variants file: {exc}") from None


VARIANTS_FILE = variants_file()
SWEEP: SweepConfig = read_sweep(VARIANTS_FILE)
variant_partitions = StaticPartitionsDefinition(SWEEP.keys)
