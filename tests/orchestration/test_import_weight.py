"""Loading the definitions imports no model or plotting stack.

Every `dagster job execute` (and every step process of the multiprocess executor) loads
`definitions`; a warm re-run that reuses the table, the ranked results and the statistics
never needs torch, Haystack, scipy or matplotlib, and importing them cost ~4 s of a ~10 s
warm run (bench/warm_rerun.py). The steps that need them import them when they run.
"""

import os
import subprocess
import sys
from pathlib import Path

HEAVY = ("torch", "haystack", "haystack_integrations", "sentence_transformers", "scipy", "matplotlib", "bm25s")


def test_loading_the_definitions_imports_no_heavy_library(tmp_path):
    code = ("import sys, definitions; "
            f"print(','.join(m for m in {HEAVY!r} if m in sys.modules))")
    env = {**os.environ, "DAGSTER_HOME": str(tmp_path)}
    out = subprocess.run([sys.executable, "-c", code], cwd=Path(__file__).resolve().parents[2], env=env,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "", f"imported at load time: {out.stdout.strip()}"
