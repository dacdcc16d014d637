"""The sweep's partitions: one per variant of the variants file, read when definitions load.

A bad variants file fails here, at load time, with a message naming the variant and setting.
"""

import os
from pathlib import Path

from dagster import StaticPartitionsDefinition

from eval_pipeline.variants import SweepConfig, load_sweep

REPO_ROOT = Path(__file__).resolve().parent.parent
VARIANTS_FILE = Path(os.environ.get("EVAL_PIPELINE_VARIANTS", REPO_ROOT / "variants.yaml"))

SWEEP: SweepConfig = load_sweep(VARIANTS_FILE)
variant_partitions = StaticPartitionsDefinition(SWEEP.keys)
