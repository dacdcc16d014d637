"""The regression gate end to end: exit codes of `dagster job execute`, limited runs, the schedule."""

from pathlib import Path

import pytest

from tests.integration.cli import dense_and_bm25_variants, start_job, tiny_job_config

pytestmark = pytest.mark.integration


def _run(tmp_path, name, env, **question_set) -> tuple[int, str]:
    job = start_job(tmp_path, name, env, tiny_job_config(tmp_path / name, **question_set))
    code = job.wait(timeout=600)
    return code, (tmp_path / name / "results.md").read_text() if (tmp_path / name / "results.md").exists() else ""


def test_gate_exit_codes(tmp_path, job_env):
    """First run: baseline, exit 0. A change that drops the metrics past the tolerance: exit 1,
    with the report written and naming the failure. Back to the good configuration: the
    failed run is not the yardstick, so it compares with the first run and exits 0."""
    good = job_env("state", EVAL_PIPELINE_VARIANTS=dense_and_bm25_variants(tmp_path, "good"))
    code, report = _run(tmp_path, "first", good)
    assert code == 0, (tmp_path / "first.log").read_text()[-3000:]
    assert "No comparable previous run" in report

    # A threshold no score reaches: dense refuses every question (a treatment change, still comparable).
    bad = {**good, "EVAL_PIPELINE_VARIANTS": dense_and_bm25_variants(tmp_path, "bad", abstain_below=5.0)}
    code, report = _run(tmp_path, "regressed", bad)
    assert code == 1
    assert "Gate FAILED for `dense`" in report
    assert "| dense | previous | hit@1 | 0.000 | 1.000 | -1.000 | 0.050 |" in report
    log = (tmp_path / "regressed.log").read_text()
    assert "Asset check 'gate__dense' on 'verdict' did not pass" in log  # decided by the verdict
    assert "Asset check 'gate__bm25' on 'verdict' passed" in log
    assert "Asset check 'verdict_passed' on 'report' did not pass" in log  # which fails the run

    code, report = _run(tmp_path, "recovered", good)
    assert code == 0, (tmp_path / "recovered.log").read_text()[-3000:]
    assert "Gate passed (2 of 2 variants compared with their previous run)" in report


def test_limited_run_is_suffixed_and_never_a_baseline(tmp_path, job_env):
    env = job_env("state", EVAL_PIPELINE_VARIANTS=dense_and_bm25_variants(tmp_path, "v"))
    config = {"path": str(Path(__file__).resolve().parents[1] / "fixtures" / "tiny_questions.jsonl"), "limit": 3}
    job = start_job(tmp_path, "limited", env, tiny_job_config(tmp_path / "out", **config))
    assert job.wait(timeout=600) == 0, (tmp_path / "limited.log").read_text()[-3000:]
    assert sorted(p.name for p in (tmp_path / "out").glob("*.md")) == ["results.limited-3.md"]
    assert "limited run: not a baseline" in (tmp_path / "out" / "results.limited-3.md").read_text()
    code, report = _run(tmp_path, "full", env)
    assert code == 0
    assert "No comparable previous run" in report  # the limited run was not used


def test_nightly_schedule_requests_the_whole_sweep():
    from datetime import datetime, timezone

    from dagster import build_schedule_context

    import definitions
    from definitions import SWEEP

    schedule = definitions.nightly
    assert schedule.cron_schedule == SWEEP.cron == "0 2 * * *"
    result = schedule.evaluate_tick(build_schedule_context(
        scheduled_execution_time=datetime(2026, 12, 1, 2, 0, tzinfo=timezone.utc)))
    assert len(result.run_requests) == 1
    job = definitions.defs.resolve_job_def("retrieval_eval")
    assert job.tags["dagster/asset_partition_range_start"] == SWEEP.keys[0]
    assert job.tags["dagster/asset_partition_range_end"] == SWEEP.keys[-1]
