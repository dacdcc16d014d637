"""The Launchpad pre-fills every config default, `pgvector_store`'s chunking included: a run
launched from it without touching anything must not count those defaults as the user's
chunking, or the index sweep cannot be launched from the UI at all (issue #28, item 1). A
chunking value that differs from the default is still refused: the variants file sets each
index's chunking."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
SWEEP = """\
indexes:
  - embedder: bundled
    chunking: {split_length: 150, split_overlap: 20}
  - name: minilm-w60
    chunking: {split_length: 60, split_overlap: 10}
variants:
  - engine: pg-dense
"""


def validate(tmp_path, store_config: dict) -> str:
    path = tmp_path / "v.yaml"
    path.write_text(SWEEP)
    code = ("import assets\n"
            "from assets.store import StoreConfig\n"
            "defaults = {k: f.default for k, f in StoreConfig.model_fields.items()}\n"
            f"given = {store_config!r}\n"
            "given = {k: defaults[k] if v == 'DEFAULT' else v for k, v in given.items()}\n"
            "try:\n"
            "    assets.validate_run_config({'ops': {'pgvector_store': {'config': given}}})\n"
            "    print('accepted')\n"
            "except ValueError as exc:\n"
            "    print(exc)\n")
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True,
                            env={**os.environ, "EVAL_PIPELINE_VARIANTS": str(path)})
    assert result.returncode == 0, result.stderr[-2000:]
    return result.stdout.strip()


def test_the_launchpad_s_prefilled_chunking_defaults_are_not_the_user_s_setting(tmp_path):
    given = {k: "DEFAULT" for k in ("split_by", "split_length", "split_overlap", "embed_title")}
    assert validate(tmp_path, given) == "accepted"


def test_a_chunking_value_other_than_the_default_is_still_refused(tmp_path):
    out = validate(tmp_path, {"split_by": "DEFAULT", "split_length": 30})
    assert out.startswith("ops.pgvector_store.config.split_length: the variants file"), out
