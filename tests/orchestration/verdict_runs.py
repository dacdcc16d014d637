"""Whole-job runs of a project through a sequence of changes, for the tests of the verdict
(test_verdict_fails_closed.py, test_verdict_reruns.py): one state dir (and history) per
project, `dagster job execute` on the tiny fixture without answers unless a golden set is given,
and what a run left: its exit code, report, gate lines, checks and materializations.

Most of those tests start the same way: a brand-new project's first run (`dense` and `bm25`, no
answers). That run is made once per session (`first_run`, tests/orchestration/conftest.py) and
each such test continues from a copy of its state dir (`continue_after`): its own history and
vector server, holding exactly what the first run left."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from unittest import mock

import yaml

from tests.integration.cli import REPO, start_job, tiny_job_config

# one line per variant, or per group of variants judged alike: "- 3 variants, `a`, `b`, `c`: **passed** (first_run)."
GATE_LINE = re.compile(r"^- (?:\d+ variants, )?(?P<variants>`[^`]+`(?:, `[^`]+`)*): \*\*(?P<verdict>passed|FAILED)\*\* "
                       r"\((?P<state>\w+)\)", re.M)
RUN_ID = re.compile(r"(?:retrieval_eval|__ASSET_JOB\w*) - ([0-9a-f]{8}-(?:[0-9a-f]{4}-){3}[0-9a-f]{12}) - ")
INSTANCE_ENV = ("EVAL_PIPELINE_DAGSTER_PG_URL", "EVAL_PIPELINE_ARTIFACTS_DIR", "EVAL_PIPELINE_COMPUTE_LOGS_DIR")
TOLERANCES = {"hit@1": 0.05, "hit@5": 0.05, "mrr": 0.05, "ndcg@10": 0.05}

DENSE = {"engine": "pg-dense", "name": "dense"}
REGRESSED = {**DENSE, "abstain_below": 5.0}  # no score reaches it: every answerable question a miss
BM25 = {"engine": "bm25"}


@dataclass
class Run:
    code: int
    report: str
    log: str

    @property
    def run_id(self) -> str:
        match = RUN_ID.search(self.log)
        assert match, self.log[-3000:]
        return match.group(1)

    @property
    def gates(self) -> dict[str, tuple[str, str]]:
        """variant -> (passed|FAILED, state), from the report's gate lines."""
        return {v.strip("`"): (m["verdict"], m["state"]) for m in GATE_LINE.finditer(self.report)
                for v in m["variants"].split(", ")}


class Project:
    """One state dir (and history) through a sequence of whole-job runs on the tiny corpus."""

    def __init__(self, tmp_path: Path, env: dict):
        self.tmp, self.env = tmp_path, env

    def variants(self, name: str, *variants: dict, strict: bool = False, **top) -> Path:
        path = self.tmp / f"{name}.variants.yaml"
        gate = {"tolerances": TOLERANCES, **({"strict": True} if strict else {})}
        path.write_text(yaml.safe_dump({"variants": list(variants), "gate": gate, **top}, sort_keys=False))
        return path

    def finish(self, name: str, code: int) -> Run:
        report = self.tmp / name / "results.md"
        log = (self.tmp / f"{name}.log").read_text(errors="replace")
        return Run(code, report.read_text(encoding="utf-8") if report.exists() else "", log)

    def run(self, name: str, variants: Path, *, questions: Path | None = None, golden: Path | None = None,
            fresh: bool = False) -> Run:
        """`dagster job execute -j retrieval_eval`; answers only with a golden set; `fresh`: as a
        new process (tests/integration/cli.start_job)."""
        config = tiny_job_config(self.tmp / name, **({"path": str(questions)} if questions else {}))
        config["ops"]["golden_prompts"] = {"config": {"source": "file", "path": str(golden)} if golden
                                           else {"source": "none"}}
        job = start_job(self.tmp, name, {**self.env, "EVAL_PIPELINE_VARIANTS": str(variants)}, config, fresh=fresh)
        return self.finish(name, job.wait(timeout=600))

    def accept(self, run_id: str, *variants: str) -> None:
        """`python -m eval_pipeline.history accept RUN_ID [--variant V ...]`, as the README says (a
        variant that failed against a comparable yardstick is accepted only when named)."""
        named = [arg for v in variants for arg in ("--variant", v)]
        out = subprocess.run([sys.executable, "-m", "eval_pipeline.history", "accept", run_id, *named], cwd=REPO,
                             env=self.env, capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, out.stdout + out.stderr

    def events(self, run_id: str, kind: str) -> list:
        """The run's event-log entries of one Dagster event type (by name)."""
        from dagster import DagsterEventType, DagsterInstance

        with mock.patch.dict(os.environ, {k: self.env[k] for k in INSTANCE_ENV}):
            instance = DagsterInstance.from_config(self.env["DAGSTER_HOME"])  # the runs' instance
            try:
                return instance.get_records_for_run(run_id, of_type=DagsterEventType[kind], limit=1000).records
            finally:
                instance.dispose()

    def checks(self, run_id: str) -> dict:
        """check name -> its evaluation (passed, metadata), from the run's event log."""
        evaluations = [r.event_log_entry.dagster_event.event_specific_data
                       for r in self.events(run_id, "ASSET_CHECK_EVALUATION")]
        return {e.check_name: e for e in evaluations}


@dataclass(frozen=True)
class FirstRun:
    """A project's first run, made once: the state dir it left (its server stopped) and the run."""

    state: Path
    run: Run


def make_first_run(root: Path, dagster_url: str) -> FirstRun:
    """A brand-new project in `root`, run once with `dense` and `bm25` (no answers); its vector
    server is stopped so that the state dir can be copied."""
    from eval_pipeline.store.database import EmbeddedPostgres
    from tests.integration.cli import job_environment

    state = root / "state"
    project = Project(root, job_environment(state, dagster_url))
    try:
        run = project.run("base", project.variants("good", DENSE, BM25), fresh=True)  # a new process (job_zygote)
    finally:
        EmbeddedPostgres(state).stop()
    return FirstRun(state, run)


def continue_after(first: FirstRun, tmp_path: Path, job_env, cls: type[Project] = Project) -> Project:
    """A project of this test's own (state dir `tmp_path/state`) holding a copy of what `first`
    left: the same history, tables and caches, as if its first run had just been made here."""
    copy_state(first.state, tmp_path / "state")
    return cls(tmp_path, job_env("state"))


def copy_state(state: Path, to: Path) -> Path:
    """A copy of a state dir whose vector server is stopped, owners and modes kept: run as root,
    the embedded Postgres runs as a user of its own, which must still own the copied data dir."""
    subprocess.run(["cp", "-a", str(state), str(to)], check=True)
    return to
