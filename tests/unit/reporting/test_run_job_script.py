"""scripts/run_job.sh maps a run to the documented exit codes (issue #28, item 8): 0 every
gate passed, 1 a gate failed, 2 the run broke before a verdict; and prints the verdict's summary
table again at the end of the log. A stand-in for `dagster` prints what a run prints."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[3] / "scripts" / "run_job.sh"

SUMMARY = """2026-12-05 06:14:17 +0000 - dagster - INFO - retrieval_eval - abc - verdict - eval-pipeline: 2 variant(s), run abcdef12

variant  nDCG@10 (Δ)  gate  why
hybrid   0.700 (-0.020)  {gate}  x

eval-pipeline verdict: {verdict} (...)
exit codes: 0 every gate passed, 1 a gate failed, 2 the run broke before a verdict (scripts/run_job.sh)
2026-12-05 06:14:18 +0000 - dagster - INFO - retrieval_eval - abc - report - report written to results.md
"""


def _run(tmp_path: Path, output: str, code: int) -> subprocess.CompletedProcess:
    (tmp_path / "out.txt").write_text(output)
    fake = tmp_path / "dagster"
    fake.write_text(f"#!/usr/bin/env bash\ncat {tmp_path / 'out.txt'}\nexit {code}\n")
    fake.chmod(0o755)
    return subprocess.run([str(SCRIPT), "retrieval_eval"], capture_output=True, text=True, timeout=30,
                          env={**os.environ, "DAGSTER": str(fake)})


@pytest.mark.parametrize("verdict, dagster_code, expected", [("PASSED", 0, 0), ("FAILED", 1, 1)])
def test_the_verdict_decides_the_code_and_the_summary_ends_the_log(tmp_path, verdict, dagster_code, expected):
    out = _run(tmp_path, SUMMARY.format(gate="passed" if expected == 0 else "FAILED", verdict=verdict), dagster_code)
    assert out.returncode == expected, out.stderr
    tail = out.stdout.rstrip().splitlines()
    assert tail[-1].startswith("exit codes:") and tail[-2] == f"eval-pipeline verdict: {verdict} (...)"
    assert "eval-pipeline: 2 variant(s), run abcdef12" in tail  # the block's first line without the log prefix


def test_a_run_that_broke_before_a_verdict_is_code_2(tmp_path):
    out = _run(tmp_path, "dagster - ERROR - retrieval_eval - abc - question_set - bad setting\n", 1)
    assert out.returncode == 2
    assert "the run broke before a verdict (dagster exit code 1)" in out.stderr


def test_a_job_without_a_verdict_that_succeeds_is_code_0(tmp_path):
    assert _run(tmp_path, "RUN_SUCCESS\n", 0).returncode == 0


def test_the_console_level_reaches_dagster_and_a_bad_one_is_refused(tmp_path):
    fake = tmp_path / "dagster"
    fake.write_text(f"#!/usr/bin/env bash\necho \"$@\" > {tmp_path / 'args'}\n"
                    f"while [ $# -gt 0 ]; do [ \"$1\" = -c ] && cat \"$2\" >> {tmp_path / 'configs'}; shift; done\n")
    fake.chmod(0o755)

    def run(level=None):
        env = {**os.environ, "DAGSTER": str(fake)}
        env.pop("EVAL_PIPELINE_LOG_LEVEL", None)
        if level is not None:
            env["EVAL_PIPELINE_LOG_LEVEL"] = level
        return subprocess.run([str(SCRIPT), "retrieval_eval", "-c", "mine.yaml"], capture_output=True, text=True,
                              timeout=30, env=env)

    assert run().returncode == 0
    assert (tmp_path / "args").read_text().split()[:5] == ["job", "execute", "-m", "definitions", "-j"]
    assert (tmp_path / "args").read_text().rstrip().endswith("-c mine.yaml")  # the caller's config comes last: it wins
    assert "log_level: INFO" in (tmp_path / "configs").read_text()
    assert run(" debug ").returncode == 0 and "log_level: DEBUG" in (tmp_path / "configs").read_text()
    bad = run("LOUD")
    assert bad.returncode == 2 and "EVAL_PIPELINE_LOG_LEVEL='LOUD' is not a log level" in bad.stderr
