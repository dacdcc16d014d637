"""Loading the definitions imports no model or plotting stack.

Every `dagster job execute` (and every step process of the multiprocess executor) loads
`definitions`; a warm re-run that reuses the table, the ranked results and the statistics
never needs torch, Haystack, scipy or matplotlib, and importing them cost ~4 s of a ~10 s
warm run (bench/warm_rerun.py). The steps that need them import them when they run.

What loading leaves behind is frozen out of the garbage collector's walks (``gc.freeze``): the
steps of an in-process run would otherwise walk the ~225k objects of Dagster and the project at
every full collection (bench/RESULTS.md section 42).
"""

import os
import subprocess
import sys
from pathlib import Path

HEAVY = ("torch", "haystack", "haystack_integrations", "sentence_transformers", "scipy", "matplotlib", "bm25s")


def test_loading_the_definitions_imports_no_heavy_library_and_freezes_what_it_loaded(tmp_path):
    code = ("import gc, sys, definitions; "
            f"print(','.join(m for m in {HEAVY!r} if m in sys.modules)); "
            "print(gc.get_freeze_count(), len(gc.get_objects()))")
    env = {**os.environ, "DAGSTER_HOME": str(tmp_path)}
    out = subprocess.run([sys.executable, "-c", code], cwd=Path(__file__).resolve().parents[2], env=env,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    heavy, counts = out.stdout.split("\n")[:2]
    assert heavy.strip() == "", f"imported at load time: {heavy.strip()}"
    frozen, walked = map(int, counts.split())
    assert frozen > 100_000 and walked < frozen / 10, (frozen, walked)  # what loading made is out of the walks
