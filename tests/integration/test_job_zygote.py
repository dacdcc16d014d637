"""The warmed-up interpreter the lane's whole-job runs fork from (tests/job_zygote.py) answers as
a new `dagster` process would: exit codes, signals, its own session, log, environment and
working directory, and the project imported after the fork."""

from __future__ import annotations

import os
import signal
import subprocess

import pytest

from tests import job_zygote

pytestmark = pytest.mark.integration


def _spawn(tmp_path, args, **env):
    log = tmp_path / "run.log"
    log.write_text("")
    return job_zygote.spawn(args, env={**job_zygote.SESSION_ENV, **env}, cwd=tmp_path, log=log), log


def test_a_forked_run_exits_as_a_new_process_would(tmp_path):
    child, log = _spawn(tmp_path, ["--version"])
    assert child.wait(timeout=120) == 0
    assert "dagster" in log.read_text().lower()
    fresh = subprocess.run([str(job_zygote.DAGSTER_SCRIPT), "--version"], capture_output=True, text=True)
    assert log.read_text().strip() == fresh.stdout.strip()

    child, log = _spawn(tmp_path, ["job", "execute", "-m", "no_such_module_anywhere", "-j", "x"])
    assert child.wait(timeout=120) == fresh_code(tmp_path) != 0
    assert "no_such_module_anywhere" in log.read_text()


def fresh_code(tmp_path) -> int:
    return subprocess.run([str(job_zygote.DAGSTER_SCRIPT), "job", "execute", "-m", "no_such_module_anywhere",
                           "-j", "x"], cwd=tmp_path, capture_output=True).returncode


def test_a_killed_run_reports_the_signal_in_its_own_session(tmp_path):
    (tmp_path / "sleeper.py").write_text("import time\ntime.sleep(600)\n")
    child, _ = _spawn(tmp_path, ["job", "execute", "-f", "sleeper.py", "-j", "x"])
    assert child.poll() is None
    assert os.getpgid(child.pid) == child.pid  # a session (and process group) of its own
    with pytest.raises(subprocess.TimeoutExpired):
        child.wait(timeout=0.5)
    os.killpg(child.pid, signal.SIGKILL)
    assert child.wait(timeout=60) == -signal.SIGKILL


def test_the_environment_and_the_project_are_the_runs_own(tmp_path):
    """The child sees the run's environment and working directory, and imports the project
    from the files as they are when it starts (nothing of it is loaded in the zygote)."""
    (tmp_path / "probe.py").write_text(
        "import os, sys\n"
        "print('ENV', os.environ.get('EVAL_PIPELINE_PROBE'))\n"
        "print('CWD', os.getcwd())\n"
        "print('LOADED', sorted(m for m in sys.modules if m.split('.')[0] in "
        "('eval_pipeline', 'assets', 'resources', 'definitions')))\n"
        "raise SystemExit(3)\n")
    child, log = _spawn(tmp_path, ["job", "execute", "-f", "probe.py", "-j", "x"], EVAL_PIPELINE_PROBE="seen")
    assert child.wait(timeout=120) == 3
    text = log.read_text()
    assert "ENV seen" in text and f"CWD {tmp_path}" in text and "LOADED []" in text, text[-2000:]


def test_a_run_whose_environment_changes_an_import_starts_fresh():
    assert job_zygote.forks({**job_zygote.SESSION_ENV, "EVAL_PIPELINE_VARIANTS": "x.yaml", "DAGSTER_HOME": "/d"})
    assert not job_zygote.forks({**job_zygote.SESSION_ENV, "HF_HUB_OFFLINE": "0"})
    assert not job_zygote.forks({**job_zygote.SESSION_ENV, "PYTHONPATH": "/elsewhere"})
    assert not job_zygote.forks({**job_zygote.SESSION_ENV, job_zygote.FRESH_ENV: "1"})


def test_what_the_preloaded_imports_set_is_no_difference_once_the_worker_imported_them_too(tmp_path):
    """The preloaded packages set variables of their own when imported (KMP_DUPLICATE_LIB_OK,
    KMP_INIT_AT_FORK, TORCHINDUCTOR_CACHE_DIR): after any test of the worker imports them (the
    embedder, say), every job environment built from ``os.environ`` carries them. The zygote's
    imports set the same values (a forked run has them), so such a run still forks; the same
    variable with another value does not."""
    import importlib

    for name in job_zygote.PRELOAD:  # what a test using the embedder does to this process's environment
        importlib.import_module(name)

    set_by_imports = job_zygote.imported_environment()
    assert set_by_imports and not set(set_by_imports) & set(job_zygote.SESSION_ENV), set_by_imports
    worker = {**job_zygote.SESSION_ENV, **{k: os.environ[k] for k in set_by_imports if k in os.environ}}
    assert set(set_by_imports) <= set(worker), (set_by_imports, "not set in this process by the same imports")
    assert job_zygote.forks(worker)
    assert job_zygote.forks({**worker, "EVAL_PIPELINE_VARIANTS": "x.yaml"})
    name = next(iter(set_by_imports))
    assert not job_zygote.forks({**worker, name: set_by_imports[name] + "-other"})
    # what the lane's runs use: an environment built now, from this process's
    from tests.integration.cli import job_environment

    assert job_zygote.forks(job_environment(tmp_path / "state", "postgresql+psycopg2://u@h/dagster"))


def test_a_run_that_cannot_fork_must_say_it_starts_fresh(tmp_path):
    """A run whose environment differs in what an import reads is refused unless the test says
    `fresh=True`: such runs once started as new processes silently, by test order."""
    from tests.integration.cli import start_dagster

    env = {**job_zygote.SESSION_ENV, "HF_HUB_OFFLINE": "0"}
    with pytest.raises(ValueError, match=r"differs from the job zygote's in \['HF_HUB_OFFLINE'\].*fresh=True"):
        start_dagster(tmp_path, "refused", env, ["--version"])
    assert not (tmp_path / "refused.log").exists()
    proc = start_dagster(tmp_path, "fresh", env, ["--version"], fresh=True)
    assert isinstance(proc, subprocess.Popen) and proc.wait(timeout=120) == 0
