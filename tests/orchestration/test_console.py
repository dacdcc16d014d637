"""The console of a CI run (issue #28, item 8), through scripts/run_job.sh as the README tells a
CI user: at the default level a few dozen lines, ending with the verdict's summary table and
its verdict line; exit 0 when every gate passed, 1 on a regression, 2 when the run broke
before a verdict."""

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.integration.cli import REPO, dense_and_bm25_variants, tiny_job_config

pytestmark = pytest.mark.integration


def _run(tmp_path: Path, name: str, env: dict, config: dict) -> subprocess.CompletedProcess:
    cfg = tmp_path / f"{name}.yaml"
    cfg.write_text(yaml.safe_dump(config))
    env = {**env, "DAGSTER": str(Path(sys.executable).parent / "dagster"), "DAGSTER_HOME": str(REPO)}  # the project's
    env.pop("EVAL_PIPELINE_LOG_LEVEL", None)  # the user's default
    return subprocess.run([str(REPO / "scripts" / "run_job.sh"), "retrieval_eval", "-c", str(cfg)], cwd=REPO,
                          env=env, capture_output=True, text=True, timeout=900)


def test_the_console_ends_with_the_verdict_and_its_exit_code(tmp_path, job_env):
    good = job_env("state", EVAL_PIPELINE_VARIANTS=dense_and_bm25_variants(tmp_path, "good"))
    first = _run(tmp_path, "first", good, tiny_job_config(tmp_path / "first"))
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    lines = first.stdout.rstrip().splitlines()
    assert len(lines) < 120, f"{len(lines)} lines at the default level"
    assert " - DEBUG - " not in first.stdout
    assert lines[-2] == "eval-pipeline verdict: PASSED (2 of 2 variant(s) passed their gates)"
    assert lines[-1].startswith("exit codes: 0 every gate passed")
    table = lines[lines.index(next(line for line in lines if line.startswith("eval-pipeline: 2 variant(s)"))):]
    assert any(row.startswith("dense ") and "passed (first run)" in row for row in table)

    # a threshold no score reaches: dense refuses every question, a regression
    bad = {**good, "EVAL_PIPELINE_VARIANTS": dense_and_bm25_variants(tmp_path, "bad", abstain_below=5.0)}
    regressed = _run(tmp_path, "regressed", bad, tiny_job_config(tmp_path / "regressed"))
    assert regressed.returncode == 1, regressed.stdout[-3000:] + regressed.stderr[-3000:]
    tail = regressed.stdout.rstrip().splitlines()
    assert tail[-2].startswith("eval-pipeline verdict: FAILED (1 of 2 variant(s) failed: dense)")
    dense = next(row for row in tail if row.startswith("dense "))
    assert "FAILED (vs history)" in dense and "beyond its tolerance" in dense
    # the report records the run (record_history by default): the console offers its acceptance
    assert "(not recorded" not in regressed.stdout
    assert "to make this run the reference once its numbers are intended and the report has recorded it: " \
        "python -m eval_pipeline.history accept " in regressed.stdout

    # a run that breaks before any verdict: a corpus file that does not exist
    config = tiny_job_config(tmp_path / "broken")
    config["ops"]["corpus_snapshot"]["config"]["path"] = str(tmp_path / "no-such-corpus.jsonl")
    broken = _run(tmp_path, "broken", good, config)
    assert broken.returncode == 2, broken.stdout[-3000:] + broken.stderr[-3000:]
    assert "the run broke before a verdict" in broken.stderr
