"""A failed verdict stays failed however the run is executed again: whole-job runs on the tiny
fixture (tests/fixtures/tiny_*), each test in a state dir (and history) of its own, without
answers (`golden_prompts: source: none`), so only the retrieval gate decides. A deterministic
regression: `abstain_below: 5.0` on the dense variant (every answerable question a miss).

* re-executing a failed (regressed) run from failure, after a later run that passed, reads the
  failed run's own outputs (never the latest materialization, the passing run's): it fails;
* materializing the verdict without the report (the one-variant flow: ranked_results and
  variant_metrics for one partition, then the verdict) fails through the verdict's blocking
  check `verdict_gate` when the verdict failed, and passes when it passed.

Seven Dagster runs in all: four `dagster job execute` (the first test's first run is the
session's shared one, tests/orchestration/conftest.py), two `dagster asset materialize` and one
re-execution.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
import yaml

from tests.integration.cli import REPO, run_python, start_dagster
from tests.orchestration import verdict_runs
from tests.orchestration.verdict_runs import BM25, DENSE, REGRESSED, Run

pytestmark = pytest.mark.integration

# Re-execute a run from failure as the UI's "Re-execute from failure" does, in a process of its
# own with the job's environment (`python -c`, forked from the job zygote: tests/job_zygote.py);
# prints one JSON line: the run, its parent, success, the check evaluations and the steps that ran.
REEXECUTE = textwrap.dedent("""
    import json, os, sys
    from dagster import DagsterEventType, DagsterInstance, ReexecutionOptions, execute_job
    from dagster._core.definitions.reconstruct import ReconstructableRepository

    repo, parent = sys.argv[1], sys.argv[2]
    sys.path.insert(0, repo)
    instance = DagsterInstance.from_config(os.environ["DAGSTER_HOME"])
    try:
        job = ReconstructableRepository.for_module("definitions", "defs", working_directory=repo) \\
            .get_reconstructable_job("retrieval_eval")
        result = execute_job(job, instance=instance,
                             reexecution_options=ReexecutionOptions.from_failure(parent, instance))
        run = instance.get_run_by_id(result.run_id)
        checks = {}
        steps = []
        for event in result.all_events:
            if event.event_type == DagsterEventType.ASSET_CHECK_EVALUATION:
                data = event.event_specific_data
                checks[data.check_name] = data.passed
            elif event.event_type in (DagsterEventType.STEP_SUCCESS, DagsterEventType.STEP_FAILURE):
                steps.append([event.step_key, event.event_type_value])
        print("REEXECUTION " + json.dumps({"run_id": result.run_id, "parent_run_id": run.parent_run_id,
                                           "success": result.success, "checks": checks, "steps": steps}))
    finally:
        instance.dispose()
""")


class Project(verdict_runs.Project):
    """A project that also materializes assets apart and re-executes a run from failure."""

    def materialize(self, name: str, variants: Path, select: str, partition: str | None = None, *,
                    with_report: bool = False) -> Run:
        """`dagster asset materialize --select SELECT [--partition P]`: the assets not selected
        are read from their latest materializations; `with_report`: the report is written to
        tmp/<name>/results.md."""
        config = self.tmp / f"{name}.yaml"
        ops = {"report": {"config": {"results_dir": str(self.tmp / name)}}} if with_report else {}
        config.write_text(yaml.safe_dump({"ops": ops}))
        args = ["asset", "materialize", "-m", "definitions", "--select", select, "-c", str(config)]
        args += ["--partition", partition] if partition else []
        proc = start_dagster(self.tmp, name, {**self.env, "EVAL_PIPELINE_VARIANTS": str(variants)}, args)
        return self.finish(name, proc.wait(timeout=600))

    def reexecute_from_failure(self, parent_run_id: str, variants: Path) -> dict:
        out = run_python(self.tmp, "reexecute", {**self.env, "EVAL_PIPELINE_VARIANTS": str(variants)},
                         ["-c", REEXECUTE, str(REPO), parent_run_id], timeout=600)
        lines = [line for line in out.stdout.splitlines() if line.startswith("REEXECUTION ")]
        assert len(lines) == 1, f"exit {out.returncode}\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}"
        return json.loads(lines[0].removeprefix("REEXECUTION "))

    def passed_checks(self, run_id: str) -> dict[str, bool]:
        """check name -> passed, from the run's event log."""
        return {name: e.passed for name, e in self.checks(run_id).items()}

    def materialized(self, run_id: str) -> set[str]:
        """The asset keys (joined with '/') the run materialized."""
        return {r.event_log_entry.dagster_event.asset_key.to_user_string()
                for r in self.events(run_id, "ASSET_MATERIALIZATION")}


@pytest.fixture
def project(tmp_path, job_env):
    return Project(tmp_path, job_env("state"))


@pytest.fixture
def started(tmp_path, job_env, first_run):
    """(project, its first run): a brand-new project's first run (`dense` and `bm25`, no answers),
    made once per session (tests/orchestration/conftest.py); the project continues from a copy of
    the state it left. (Not for `dagster asset materialize`: the assets it does not select are read
    from their latest materializations, by then another project's.)"""
    first = first_run.get()
    return verdict_runs.continue_after(first, tmp_path, job_env, Project), first.run


def test_re_executing_a_regressed_run_from_failure_after_a_good_run_stays_failed(started):
    """A regressed run fails in the report's blocking check `verdict_passed` (a step of its
    own). Re-executed from failure after a later run passed, that step must read the failed
    run's report, not the latest materialization (the passing run's)."""
    project, base = started
    good, bad = project.variants("good", DENSE, BM25), project.variants("bad", REGRESSED, BM25)
    assert base.code == 0, base.log[-3000:]
    regressed = project.run("regressed", bad)
    assert regressed.code == 1, regressed.log[-3000:]
    assert regressed.gates == {"dense": ("FAILED", "comparable"), "bm25": ("passed", "comparable")}
    assert project.passed_checks(regressed.run_id)["verdict_passed"] is False
    again = project.run("good-again", good)
    assert again.code == 0, again.log[-3000:]
    assert project.passed_checks(again.run_id)["verdict_passed"] is True

    rerun = project.reexecute_from_failure(regressed.run_id, bad)
    assert rerun["parent_run_id"] == regressed.run_id and rerun["run_id"] != regressed.run_id
    assert rerun["checks"].get("verdict_passed") is False, rerun
    assert rerun["success"] is False, rerun


def test_materializing_the_verdict_without_the_report_fails_a_failed_verdict(project):
    """The one-variant flow: ranked_results, variant_metrics (partition dense) and the verdict,
    without the report. With `dense` regressed the verdict fails, and so does the run, through
    the verdict's blocking check `verdict_gate`; with nothing regressed it passes."""
    good, bad = project.variants("good", DENSE, BM25), project.variants("bad", REGRESSED, BM25)
    base = project.run("base", good)
    assert base.code == 0, base.log[-3000:]
    select = "ranked_results,variant_metrics,verdict"

    control = project.materialize("verdict-good", good, select, partition="dense")
    assert control.code == 0, control.log[-3000:]
    assert "verdict" in project.materialized(control.run_id)
    checks = project.passed_checks(control.run_id)
    assert checks["verdict_gate"] is True and checks["gate__dense"] is True, checks

    regressed = project.materialize("verdict-regressed", bad, select, partition="dense")
    assert regressed.code != 0, regressed.log[-3000:]
    assert "verdict" in project.materialized(regressed.run_id)
    checks = project.passed_checks(regressed.run_id)
    assert checks["gate__dense"] is False and checks["gate__bm25"] is True, checks
    assert checks["verdict_gate"] is False, checks
