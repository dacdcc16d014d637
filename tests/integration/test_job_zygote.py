"""The warmed-up interpreter the lane's whole-job runs fork from (tests/job_zygote.py) answers as
a new `dagster` process would: exit codes, signals, its own session, log, environment and
working directory, and the project imported after the fork; and its `python -m` / `python -c` runs
as a new `python` process would."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

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


# --- `python -m module` / `python -c code` runs (job_zygote.spawn_python, cli.start_python) ----

PROBE = (
    "import os, sys\n"
    "print('ARGV', sys.argv)\n"
    "print('NAME', __name__, getattr(__spec__, 'name', None), globals().get('__file__'))\n"
    "print('MAIN', sys.modules['__main__'].__dict__ is globals())\n"
    "print('PATH0', repr(sys.path[0]))\n"
    "print('ENV', os.environ.get('EVAL_PIPELINE_PROBE'))\n"
    "print('CWD', os.getcwd())\n"
    "print('LOADED', sorted(m for m in sys.modules if m.split('.')[0] in "
    "('eval_pipeline', 'assets', 'resources', 'definitions')))\n"
    "print('to stderr', file=sys.stderr)\n"
    "raise SystemExit(int(sys.argv[-1]))\n")


def _spawn_python(tmp_path, args, *, apart: bool = True, **env):
    log, err = tmp_path / "run.log", tmp_path / "run.err"
    log.write_text("")
    err.write_text("")
    child = job_zygote.spawn_python(args, env={**job_zygote.SESSION_ENV, **env}, cwd=tmp_path, log=log,
                                    err=err if apart else None)
    return child, log, err


def _fresh_python(tmp_path, args, **env) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], cwd=tmp_path, env={**job_zygote.SESSION_ENV, **env},
                          capture_output=True, text=True, timeout=300)


def _alike(tmp_path, args, **env) -> tuple[int, str]:
    """Runs `python <args>` forked and as a new process; asks for the same exit code, output and
    stderr (a traceback's last line: the forked one has the zygote's frames above the module's)."""
    child, log, err = _spawn_python(tmp_path, args, **env)
    code = child.wait(timeout=120)
    fresh = _fresh_python(tmp_path, args, **env)
    assert code == fresh.returncode, (log.read_text()[-2000:], err.read_text()[-2000:])
    assert log.read_text() == fresh.stdout
    if "Traceback" in fresh.stderr:
        assert err.read_text().strip().splitlines()[-1] == fresh.stderr.strip().splitlines()[-1], err.read_text()
    else:
        assert err.read_text() == fresh.stderr
    return code, log.read_text()


def test_a_forked_python_m_run_is_the_module_as_main(tmp_path):
    """`python -m probe ...`: exit code (0, nonzero, an exception's 1), argv, `__main__`,
    sys.path[0], environment, working directory, stdout and stderr apart, as a new process; and
    the module and the project are imported after the fork (a changed module is run as changed)."""
    (tmp_path / "probe.py").write_text(PROBE)
    for last, expected in (("0", 0), ("5", 5), ("boom", 1)):
        code, out = _alike(tmp_path, ["-m", "probe", "a b", last], EVAL_PIPELINE_PROBE="seen")
        assert code == expected
    probe = str(tmp_path / "probe.py")
    assert f"ARGV [{probe!r}, 'a b', 'boom']" in out and f"NAME __main__ probe {probe}" in out, out
    assert "MAIN True" in out and f"PATH0 {str(tmp_path)!r}" in out and "ENV seen" in out, out
    assert f"CWD {tmp_path}" in out and "LOADED []" in out, out

    (tmp_path / "probe.py").write_text("print('changed after the first runs')\nraise SystemExit(7)\n")
    child, log, err = _spawn_python(tmp_path, ["-m", "probe"])
    assert child.wait(timeout=120) == 7 and log.read_text() == "changed after the first runs\n"


def test_a_forked_python_c_run_is_the_code_as_main(tmp_path):
    code, out = _alike(tmp_path, ["-c", PROBE, "a b", "4"], EVAL_PIPELINE_PROBE="seen")
    assert code == 4
    assert "ARGV ['-c', 'a b', '4']" in out and "NAME __main__ None None" in out and "MAIN True" in out, out
    assert "PATH0 ''" in out and "ENV seen" in out and f"CWD {tmp_path}" in out and "LOADED []" in out, out
    assert _alike(tmp_path, ["-c", PROBE, "boom"])[0] == 1
    assert _alike(tmp_path, ["-c", "import sys; sys.exit('said and 1')"])[0] == 1


def test_a_forked_python_run_of_a_missing_module_says_so_in_its_log(tmp_path):
    """Without a stderr file, stderr goes to the log, as Popen(stderr=STDOUT)."""
    child, log, _ = _spawn_python(tmp_path, ["-m", "no_such_module_anywhere"], apart=False)
    assert child.wait(timeout=120) == 1
    fresh = _fresh_python(tmp_path, ["-m", "no_such_module_anywhere"])
    assert fresh.returncode == 1 and log.read_text() == fresh.stdout + fresh.stderr
    assert "No module named no_such_module_anywhere" in log.read_text()
    with pytest.raises(ValueError, match="-m module"):
        job_zygote.spawn_python(["-u", "-m", "probe"], env=dict(job_zygote.SESSION_ENV), cwd=tmp_path,
                                log=tmp_path / "never.log")


def test_cli_python_runs_fork_under_start_dagsters_rules(tmp_path):
    """cli.run_python answers as subprocess.run(capture_output=True, text=True), forked or not;
    `fresh=True` and EVAL_PIPELINE_FRESH_JOBS=1 start a new process, an environment that
    differs in what an import reads is refused."""
    from tests.integration import cli

    env = {**job_zygote.SESSION_ENV, "EVAL_PIPELINE_PROBE": "seen"}
    args = ["-c", PROBE, "a b", "6"]
    started = cli.start_python(tmp_path, "started", env, args)
    assert isinstance(started, job_zygote.Child) and started.wait(timeout=120) == 6
    forked = cli.run_python(tmp_path, "forked", env, args, timeout=120)
    fresh = cli.run_python(tmp_path, "fresh", env, args, timeout=120, fresh=True)
    assert forked.returncode == fresh.returncode == 6
    assert forked.stdout == fresh.stdout and forked.stderr == fresh.stderr == "to stderr\n"
    assert f"CWD {cli.REPO}" in forked.stdout and "ENV seen" in forked.stdout, forked.stdout
    forced = cli.start_python(tmp_path, "forced", {**env, job_zygote.FRESH_ENV: "1"}, args)
    assert isinstance(forced, subprocess.Popen) and forced.wait(timeout=120) == 6
    with pytest.raises(ValueError, match=r"differs from the job zygote's in \['HF_HUB_OFFLINE'\].*fresh=True"):
        cli.run_python(tmp_path, "refused", {**env, "HF_HUB_OFFLINE": "0"}, args, timeout=120)
    with pytest.raises(subprocess.TimeoutExpired):
        cli.run_python(tmp_path, "slow", env, ["-c", "import time; time.sleep(600)"], timeout=1)


# --- a python run's PYTHONPATH (another checkout's code: the verdict reviews' older installs) ----

PATH_PROBE = (
    "import sys\n"
    "print('LOADED', sorted(m for m in sys.modules if m.split('.')[0] == 'eval_pipeline'))\n"
    "print('PATH', sys.path)\n"
    "import eval_pipeline, helper_mod\n"
    "print('FROM', eval_pipeline.__file__, eval_pipeline.WHERE, helper_mod.__file__)\n"
    "raise SystemExit(int(sys.argv[-1]))\n")


def _older_checkout(tmp_path):
    """A folder with an eval_pipeline of its own (what `git archive <commit> eval_pipeline` gives),
    another with a module, and an empty working directory."""
    old, lib, work = tmp_path / "old", tmp_path / "lib", tmp_path / "work"
    (old / "eval_pipeline").mkdir(parents=True)
    (old / "eval_pipeline" / "__init__.py").write_text("WHERE = 'the older checkout'\n")
    lib.mkdir()
    (lib / "helper_mod.py").write_text("print('helper imported')\n")
    (lib / "probe.py").write_text(PATH_PROBE)
    work.mkdir()
    return old, lib, work


@pytest.mark.skipif(bool(job_zygote.SESSION_ENV.get("PYTHONPATH")),
                    reason="the session has a PYTHONPATH of its own (a checkout tested through PYTHONPATH): the job "
                           "zygote inherits it, so a run's other PYTHONPATH is never applied but starts a new process")
def test_a_forked_python_runs_pythonpath_is_applied_as_a_new_interpreter_applies_it(tmp_path):
    """PYTHONPATH's entries (repeated, and site-packages among them) land where a new interpreter
    puts them: the whole sys.path, the module found through it by `-m`, the eval_pipeline imported
    (the older checkout's: nothing of the project is loaded when the run starts), output and exit
    code are a new process's."""
    import sysconfig

    old, lib, work = _older_checkout(tmp_path)
    python_path = os.pathsep.join([str(old), str(lib), str(old), sysconfig.get_paths()["purelib"]])
    env = {"PYTHONPATH": python_path}
    assert job_zygote.forks({**job_zygote.SESSION_ENV, **env}, python=True)
    assert not job_zygote.forks({**job_zygote.SESSION_ENV, **env})  # a dagster run's is not applied
    for args in (["-c", PATH_PROBE, "4"], ["-m", "probe", "5"]):
        code, out = _alike(work, args, **env)
        assert code == int(args[-1])
        assert "LOADED []" in out and f"FROM {old / 'eval_pipeline' / '__init__.py'} the older checkout" in out, out
        assert f"{lib / 'helper_mod.py'}" in out, out
    assert f"PATH [{str(work)!r}, {str(old)!r}, {str(lib)!r}, " in out, out  # -m: the working directory first
    # the same run without it: this checkout's eval_pipeline (through the editable install), as in a new process
    code, out = _alike(work, ["-c", "import eval_pipeline; print(eval_pipeline.__file__)"])
    assert code == 0 and out.strip() == str(job_zygote.REPO / "eval_pipeline" / "__init__.py"), out


@pytest.mark.skipif(bool(job_zygote.SESSION_ENV.get("PYTHONPATH")),
                    reason="the session has a PYTHONPATH of its own (a checkout tested through PYTHONPATH): the job "
                           "zygote inherits it, so a run's other PYTHONPATH is never applied but starts a new process")
def test_a_pythonpath_the_zygote_cannot_apply_starts_a_new_process(tmp_path):
    """An entry holding a module the zygote has loaded (a new interpreter would import that one),
    or a relative entry, is a difference in what an import reads: refused without `fresh`, and a
    new process with it. This checkout's folder (its `tests` package is the zygote's own) is none."""
    from tests.integration import cli

    old, lib, work = _older_checkout(tmp_path)
    (lib / "yaml").mkdir()
    (lib / "yaml" / "__init__.py").write_text("WHERE = 'a yaml of its own'\n")
    for python_path in (f"{old}{os.pathsep}{lib}", f"{old}{os.pathsep}lib"):
        env = {**job_zygote.SESSION_ENV, "PYTHONPATH": python_path}
        assert job_zygote.unforkable(env, python=True) == ["PYTHONPATH"], python_path
        with pytest.raises(ValueError, match=r"differs from the job zygote's in \['PYTHONPATH'\].*fresh=True"):
            cli.run_python(tmp_path, "refused", env, ["-c", "print(1)"], timeout=120, cwd=work)
    env = {**job_zygote.SESSION_ENV, "PYTHONPATH": f"{lib}{os.pathsep}{old}"}
    fresh = cli.run_python(tmp_path, "fresh", env, ["-c", "import yaml; print(yaml.WHERE)"], timeout=120, cwd=work,
                           fresh=True)
    assert fresh.returncode == 0 and fresh.stdout == "a yaml of its own\n", fresh.stderr
    assert job_zygote.forks({**job_zygote.SESSION_ENV, "PYTHONPATH": f"{old}{os.pathsep}{cli.REPO}"}, python=True)
    env = {**job_zygote.SESSION_ENV, "PYTHONPATH": str(old), job_zygote.FRESH_ENV: "1"}
    forced = cli.start_python(tmp_path, "forced", env, ["-c", "print(1)"], cwd=work)
    assert isinstance(forced, subprocess.Popen) and forced.wait(timeout=120) == 0
    forked = cli.start_python(tmp_path, "forked", {**env, job_zygote.FRESH_ENV: ""}, ["-c", "print(1)"], cwd=work)
    assert isinstance(forked, job_zygote.Child) and forked.wait(timeout=120) == 0


def test_a_library_run_forks_from_a_library_zygote_of_its_own_environment(tmp_path):
    """`cli.run_python(..., library=True)` (an older install's code alone): forked from a zygote
    that preloads only LIBRARY_PRELOAD (never the project) and started with the run's own
    environment, so the run answers as a new process does, with its PYTHONPATH applied; another
    environment gets another zygote; EVAL_PIPELINE_FRESH_JOBS=1 and `fresh` are new processes; a
    PYTHONPATH it cannot apply is refused."""
    from tests.integration import cli

    old, lib, work = _older_checkout(tmp_path)
    base = {**job_zygote.SESSION_ENV, "PYTHONPATH": f"{old}{os.pathsep}{lib}"}
    probe = PATH_PROBE.replace("raise SystemExit", "import os; print('ENV', os.environ.get('OPENBLAS_NUM_THREADS'))\n"
                               "print('PRELOADED', sorted(m for m in ('numpy', 'pandas', 'torch', 'dagster')"
                               " if m in sys.modules))\nraise SystemExit")
    zygotes = []
    for extra in ({}, {"OPENBLAS_NUM_THREADS": "1"}):  # read when numpy's OpenBLAS loads
        env = {**base, **extra, "EVAL_PIPELINE_PROBE": "call time"}
        forked = cli.run_python(tmp_path, "forked", env, ["-c", probe, "3"], timeout=120, cwd=work, library=True)
        fresh = cli.run_python(tmp_path, "fresh", env, ["-c", probe, "3"], timeout=120, cwd=work, library=True,
                               fresh=True)
        assert forked.returncode == fresh.returncode == 3, (forked.stderr[-2000:], fresh.stderr[-2000:])
        preloaded_line = next(line for line in forked.stdout.splitlines() if line.startswith("PRELOADED"))
        assert forked.stdout.replace(preloaded_line + "\n", "") == fresh.stdout.replace(
            next(line for line in fresh.stdout.splitlines() if line.startswith("PRELOADED")) + "\n", ""), (
            forked.stdout, fresh.stdout)
        assert preloaded_line == "PRELOADED ['numpy', 'pandas']" and forked.stderr == fresh.stderr, forked.stdout
        assert "LOADED []" in forked.stdout and f"FROM {old / 'eval_pipeline' / '__init__.py'}" in forked.stdout
        assert f"ENV {extra.get('OPENBLAS_NUM_THREADS')}" in forked.stdout, forked.stdout
        zygote = job_zygote.library_zygote(env)
        blas = "OPENBLAS_NUM_THREADS"
        assert "PYTHONPATH" not in zygote.env and zygote.env.get(blas) == extra.get(blas), zygote.env.get(blas)
        assert job_zygote.library_zygote({**env, "EVAL_PIPELINE_PROBE": "another"}) is zygote  # call time: the same
        zygotes.append(zygote)
    assert zygotes[0] is not zygotes[1]
    forced = cli.start_python(tmp_path, "forced", {**base, job_zygote.FRESH_ENV: "1"}, ["-c", "print(1)"], cwd=work,
                              library=True)
    assert isinstance(forced, subprocess.Popen) and forced.wait(timeout=120) == 0
    (lib / "pandas").mkdir()
    with pytest.raises(ValueError, match="cannot apply this PYTHONPATH.*pandas"):
        cli.run_python(tmp_path, "refused", base, ["-c", "print(1)"], timeout=120, cwd=work, library=True)
