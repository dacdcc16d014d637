"""The sweep with Dagster's multiprocess executor: variants ranked in parallel steps, same results.

Checked on structured facts from the Dagster instance each run wrote to (run storage in a session
Postgres; the serial run's read right after it by the shared clean run, which another test worker
may have made: shared_runs.RunFacts), not on log text: the run's step keys, the process id
recorded with each step event, and the output metadata of ranked_results' collect step."""

import pytest
from dagster import DagsterInstance, DagsterRunStatus, RunsFilter

from tests.integration.cli import metrics_table, start_job, tiny_job_config
from tests.orchestration.shared_runs import COLLECT_STEP, run_facts

pytestmark = pytest.mark.integration

RANK_STEP = "ranked_results.rank_variants"
N_VARIANTS = 7


def _instance(monkeypatch, env) -> DagsterInstance:
    """The instance `dagster job execute` used: same DAGSTER_HOME and storage settings."""
    for name in ("DAGSTER_HOME", "EVAL_PIPELINE_DAGSTER_PG_URL", "EVAL_PIPELINE_ARTIFACTS_DIR",
                 "EVAL_PIPELINE_COMPUTE_LOGS_DIR"):
        monkeypatch.setenv(name, env[name])
    return DagsterInstance.get()


def _run_ids(instance, job):
    return {r.dagster_run.run_id for r in instance.get_run_records(filters=RunsFilter(job_name=job))}


def _new_run(instance, job, before):
    (run_id,) = _run_ids(instance, job) - before  # exactly one new run of this job
    run = instance.get_run_by_id(run_id)
    assert run.status == DagsterRunStatus.SUCCESS, run.status
    return run_id


def _rank_steps(step_keys):
    return sorted(k for k in step_keys if k.startswith(RANK_STEP + "["))


def test_parallel_job_ranks_in_separate_processes_and_agrees_with_in_process(tmp_path, job_env, monkeypatch,
                                                                              clean_run):
    # The in-process ("serial") run is the session's clean run (tests/orchestration/conftest.py,
    # shared with test_reliability.py); the parallel run continues from a copy of its state dir.
    clean_run = clean_run.get()
    assert clean_run.code == 0, clean_run.log[-3000:]
    env = job_env(clean_run.copy_state(tmp_path / "state").name)
    instance = _instance(monkeypatch, env)
    serial = clean_run.facts  # read from the instance it wrote to, right after it ran
    assert serial is not None, clean_run.log[-3000:]
    assert serial.job_name == "retrieval_eval" and serial.status == DagsterRunStatus.SUCCESS

    config = tiny_job_config(tmp_path / "parallel")
    # reuse: false, or every variant would come from the serial run's results cache
    config["ops"]["ranked_results"] = {"config": {"workers": 3, "reuse": False}}
    before = _run_ids(instance, "retrieval_eval_parallel")
    parallel = start_job(tmp_path, "parallel", env, config, job="retrieval_eval_parallel")
    assert parallel.wait(timeout=600) == 0, (tmp_path / "parallel.log").read_text()[-3000:]
    parallel_id = _new_run(instance, "retrieval_eval_parallel", before)

    # in-process: one rank step shares every leg, in the process that ran every other step
    started, succeeded, meta = serial.started, serial.succeeded, serial.collect_metadata
    (rank_step,) = _rank_steps(started)
    assert set(started) == set(succeeded) and COLLECT_STEP in succeeded
    assert meta is not None, "no output metadata recorded for the collect step"
    assert meta["steps"] == 1
    variants = meta["variants"].split(", ")
    assert len(variants) == N_VARIANTS == len(set(variants))
    assert None not in started.values()
    assert len(set(started.values()) | set(succeeded.values())) == 1

    # multiprocess: three rank steps, each in its own process, all of them ranking (no reuse)
    parallel_run = run_facts(instance, parallel_id)
    started, succeeded, meta = parallel_run.started, parallel_run.succeeded, parallel_run.collect_metadata
    rank_steps = _rank_steps(started)
    assert len(rank_steps) == 3 and set(rank_steps) <= set(succeeded), rank_steps
    assert meta is not None, "no output metadata recorded for the collect step"
    assert meta["steps"] == 3
    assert meta["variants"].split(", ") == variants  # the same variants, in the sweep's order
    assert meta["reused_unchanged"] == "none"
    for step in rank_steps:
        assert started[step] is not None and started[step] == succeeded[step], step  # start to end in one process
    rank_pids = {started[step] for step in rank_steps}
    assert len(rank_pids) == 3  # each batch in its own process
    assert started[COLLECT_STEP] not in rank_pids  # and none of them the collect step's

    assert metrics_table(tmp_path / "parallel") == metrics_table(clean_run.results)
