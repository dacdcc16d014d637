"""The stamp commands answer bad input with the project's one-line message and exit 2, not a
Python traceback (found by a check of #25)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from eval_pipeline.common.state import PROJECT_ROOT


@pytest.mark.parametrize("module", ["eval_pipeline.questions.sets", "eval_pipeline.questions.golden"])
def test_a_bad_file_is_one_line_naming_it_and_exit_2(tmp_path, module):
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(b'{"question": "caf\xe9"}\n')  # not UTF-8
    done = subprocess.run([sys.executable, "-m", module, "stamp", str(bad)], capture_output=True, text=True,
                          cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(PROJECT_ROOT)}, timeout=120)
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    assert done.stderr.startswith(f"python -m {module}: error: ") and str(bad) in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
