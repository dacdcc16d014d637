"""The sweep with Dagster's multiprocess executor: variants ranked in parallel steps, same results."""

import re

import pytest

from tests.integration.cli import metrics_table, start_job, tiny_job_config

pytestmark = pytest.mark.integration

RANK_STEP_DONE = re.compile(r" - (\d+) - ranked_results\.rank_variants\[(\w+)\] - STEP_SUCCESS")


def test_parallel_job_ranks_in_separate_processes_and_agrees_with_in_process(tmp_path, job_env):
    env = job_env("state")
    serial = start_job(tmp_path, "serial", env, tiny_job_config(tmp_path / "serial"))
    assert serial.wait(timeout=600) == 0, (tmp_path / "serial.log").read_text()[-3000:]

    config = tiny_job_config(tmp_path / "parallel")
    # reuse: false, or every variant would come from the serial run's results cache
    config["ops"]["ranked_results"] = {"config": {"workers": 3, "reuse": False}}
    parallel = start_job(tmp_path, "parallel", env, config, job="retrieval_eval_parallel")
    assert parallel.wait(timeout=600) == 0, (tmp_path / "parallel.log").read_text()[-3000:]

    log = (tmp_path / "parallel.log").read_text()
    assert re.search(r"7 variant\(s\) in 3 step\(s\)", log), log[-3000:]
    done = RANK_STEP_DONE.findall(log)
    assert len({mapping for _, mapping in done}) == 3
    assert len({pid for pid, _ in done}) == 3  # each batch in its own process
    serial_log = (tmp_path / "serial.log").read_text()
    assert re.search(r"7 variant\(s\) in 1 step\(s\)", serial_log)  # in-process: one step shares every leg
    assert metrics_table(tmp_path / "parallel") == metrics_table(tmp_path / "serial")
