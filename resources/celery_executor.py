"""The Celery executor of job `retrieval_eval_celery`: dagster-celery's, plus a watch for workers that die.

dagster-celery's executor submits each step as a Celery task and polls its result; when the
worker running a task is killed (SIGKILL, out of memory, its node gone) no result ever arrives,
and the run waits forever. This executor runs dagster-celery's own execution loop with the same
config schema and the same task (so workers started with `dagster-celery worker start -A
dagster_celery.app` or `celery -A dagster_celery.app worker` serve it), but each submitted task
is watched: every `EVAL_PIPELINE_CELERY_CHECK_EVERY` seconds (default 5) one broadcast asks the
workers what they are running; a task whose worker has not answered for
`EVAL_PIPELINE_CELERY_LOST_AFTER` seconds (default 20), or that Celery reports as
`WorkerLostError` (its pool process died), is submitted again, up to
`EVAL_PIPELINE_CELERY_LOST_RETRIES` times (default 1), and the event log says so. After that the
step fails with an error naming the step and the worker, and the run fails.

Workers must be started with `task_acks_late` and `task_track_started` (the README's worker
config does it): with late acks a worker reserves no second task while it runs one, so a dead
worker takes no queued task with it, and a started task names its worker. The lost task is
revoked; with late acks its message would come back after the broker's visibility timeout (an
hour by default), and the live workers discard it as revoked.

Broker and result backend: `execution: config: broker` / `backend` in the run config, else
`EVAL_PIPELINE_CELERY_BROKER` / `EVAL_PIPELINE_CELERY_BACKEND`; the backend defaults to the
broker when that is a redis:// URL (Celery's rpc:// backend needs AMQP).

dagster-celery is an optional dependency (`pip install -e .[celery]`): it is imported only when a
run starts, so loading the definitions never needs it.
"""

from __future__ import annotations

import math
import os
import time
from typing import Any, Callable, Optional

from dagster import (
    Array,
    DagsterEvent,
    Executor,
    Field,
    Noneable,
    Permissive,
    StringSource,
    executor,
    multiple_process_executor_requirements,
)
from dagster._core.events import EngineEventData
from dagster._core.execution.retries import RetryMode, get_retries_config

BROKER_ENV = "EVAL_PIPELINE_CELERY_BROKER"
BACKEND_ENV = "EVAL_PIPELINE_CELERY_BACKEND"
CHECK_EVERY_ENV = "EVAL_PIPELINE_CELERY_CHECK_EVERY"
LOST_AFTER_ENV = "EVAL_PIPELINE_CELERY_LOST_AFTER"
LOST_RETRIES_ENV = "EVAL_PIPELINE_CELERY_LOST_RETRIES"

# dagster_celery.executor.CELERY_CONFIG without importing dagster_celery, and with no default
# backend (so that an unset one can fall back to the environment and to the broker).
CELERY_CONFIG = {
    "broker": Field(Noneable(StringSource), is_required=False,
                    description=f"the Celery broker URL (default: ${BROKER_ENV})"),
    "backend": Field(Noneable(StringSource), is_required=False,
                     description=f"the Celery result backend (default: ${BACKEND_ENV}, else the broker if redis://)"),
    "include": Field(Array(str), is_required=False, description="modules every worker should import"),
    "config_source": Field(Noneable(Permissive()), is_required=False, description="more Celery settings"),
    "retries": get_retries_config(),
}


def _env_number(name: str, default: float, *, minimum: float) -> float:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"{name} must be a number, got {raw!r}") from None
    if not math.isfinite(value) or value < minimum:
        raise ValueError(f"{name} must be >= {minimum:g}, got {raw!r}")
    return value


def celery_settings(config: dict, environ: Optional[dict] = None) -> dict:
    """Broker, backend, include and config_source from the executor config and the environment."""
    environ = os.environ if environ is None else environ
    broker = config.get("broker") or environ.get(BROKER_ENV)
    if not broker:
        raise ValueError(f"the celery executor needs a broker: set execution.config.broker in the run config "
                         f"or {BROKER_ENV} (e.g. redis://127.0.0.1:6379/0), the URL the workers listen on")
    backend = config.get("backend") or environ.get(BACKEND_ENV)
    if not backend:
        backend = broker if broker.startswith(("redis://", "rediss://")) else "rpc://"
    return {"broker": broker, "backend": backend, "include": list(config.get("include") or []),
            "config_source": dict(config.get("config_source") or {})}


@executor(name="celery", config_schema=CELERY_CONFIG, requirements=multiple_process_executor_requirements())
def watched_celery_executor(init_context):
    """dagster-celery's executor, with lost workers' tasks resubmitted (see resources/celery_executor.py)."""
    try:
        import dagster_celery  # noqa: PLC0415, F401  deferred: the optional `celery` extra, checked here
    except ImportError:
        raise ImportError("job retrieval_eval_celery needs dagster-celery: pip install -e '.[celery]'") from None
    config = init_context.executor_config
    return WatchedCeleryExecutor(
        retries=RetryMode.from_config(config["retries"]), **celery_settings(config),
        check_every=_env_number(CHECK_EVERY_ENV, 5.0, minimum=0.5),
        lost_after=_env_number(LOST_AFTER_ENV, 20.0, minimum=1.0),
        lost_retries=int(_env_number(LOST_RETRIES_ENV, 1, minimum=0)),
    )


class WatchedCeleryExecutor(Executor):
    """Runs dagster_celery's core execution loop; `app_args()` and `retries` are what it reads
    from the executor, as from dagster_celery's CeleryExecutor."""

    def __init__(self, *, retries: RetryMode, broker: str, backend: str, include: list, config_source: dict,
                 check_every: float, lost_after: float, lost_retries: int):
        # deferred: the optional `celery` extra
        from dagster_celery.config import DEFAULT_CONFIG, dict_wrapper  # noqa: PLC0415

        self._retries = retries
        self.broker, self.backend, self.include = broker, backend, include
        self.config_source = dict_wrapper(dict(DEFAULT_CONFIG, **config_source))
        self.check_every, self.lost_after, self.lost_retries = check_every, lost_after, lost_retries

    @property
    def retries(self) -> RetryMode:
        return self._retries

    def app_args(self) -> dict:
        return {"broker": self.broker, "backend": self.backend, "include": self.include,
                "config_source": self.config_source, "retries": self.retries}

    def execute(self, plan_context, execution_plan):
        # deferred: the optional `celery` extra
        from dagster_celery.core_execution_loop import core_celery_execution_loop  # noqa: PLC0415
        from dagster_celery.executor import _submit_task  # noqa: PLC0415

        watches: dict[int, WorkerWatch] = {}

        def submit(app, context, step, queue, priority, known_state):
            watch = watches.setdefault(id(app), WorkerWatch(app, every=self.check_every))
            return WatchedTask(
                lambda: _submit_task(app, context, step, queue, priority, known_state), watch=watch,
                step_key=step.key, lost_after=self.lost_after, lost_retries=self.lost_retries,
                report=lambda message: _engine_event(context, step, message),
            )

        return core_celery_execution_loop(plan_context, execution_plan, step_execution_fn=submit)


def _engine_event(context, step, message: str) -> None:
    """An engine event on the step: in the event log and the run's output (creating it logs it)."""
    DagsterEvent.engine_event(context.for_step(step), message, EngineEventData())


class WorkerWatch:
    """Which workers answer and which task each runs: one `inspect().active()` broadcast every
    `every` seconds, shared by all the run's tasks. It waits for as many replies as workers it has
    seen, so with every worker alive it returns as soon as they have answered."""

    def __init__(self, app, *, every: float, timeout: float = 2.0, clock: Callable[[], float] = time.monotonic):
        self.app, self.every, self.timeout, self.clock = app, every, timeout, clock
        self.checked_at = -math.inf
        self.live: set[str] = set()
        self.seen: set[str] = set()
        self.running: dict[str, str] = {}  # task id -> hostname

    def refresh(self) -> float:
        """Ask the workers again if `every` seconds have passed; returns when they were last asked."""
        now = self.clock()
        if now - self.checked_at >= self.every:
            self.checked_at = now
            replies = self.active()
            self.live = set(replies)
            self.seen |= self.live
            self.running = {task["id"]: host for host, tasks in replies.items() for task in tasks or () if "id" in task}
        return self.checked_at

    def active(self) -> dict[str, list[dict]]:
        inspect = self.app.control.inspect(timeout=self.timeout, limit=len(self.seen) or None)
        try:
            return inspect.active() or {}
        except Exception:  # noqa: BLE001  the broker blinked: no news, not a lost worker
            return {host: [{"id": task_id} for task_id, h in self.running.items() if h == host] for host in self.live}


class LostWorkerError(RuntimeError):
    """The worker running a step's task died and the task could not be resubmitted again."""


class WatchedTask:
    """What dagster_celery's loop polls (`ready`, `get`, `revoke`) in place of an AsyncResult:
    the current attempt's result, resubmitted when its worker is lost."""

    def __init__(self, submit: Callable[[], Any], *, watch: WorkerWatch, step_key: str, lost_after: float,
                 lost_retries: int, report: Callable[[str], Any]):
        self._submit, self.watch, self.step_key = submit, watch, step_key
        self.lost_after, self.lost_retries, self.report = lost_after, lost_retries, report
        self.result = submit()
        self.attempt = 1
        self.worker: Optional[str] = None
        self.missing_since: Optional[float] = None
        self.error: Optional[LostWorkerError] = None
        self.judged_at = -math.inf  # the watch's last answer this task was judged on

    def ready(self) -> bool:
        if self.error is not None:
            return True
        if self.result.ready():
            if self.result.failed() and type(self.result.result).__name__ == "WorkerLostError":
                return self._lost(f"its pool process on celery worker {self.worker or '(unknown)'} died "
                                  f"({self.result.result})")
            return True
        checked_at = self.watch.refresh()
        if checked_at == self.judged_at:
            return False
        self.judged_at = checked_at
        self.worker = self._holder() or self.worker
        if self.worker is None:
            return False  # still queued: no worker has it
        now = self.watch.clock()
        if self.worker in self.watch.live:
            self.missing_since = None
            return False
        self.missing_since = self.missing_since if self.missing_since is not None else now
        if now - self.missing_since < self.lost_after:
            return False
        return self._lost(f"celery worker {self.worker} stopped answering for {now - self.missing_since:.0f} s "
                          "(killed, out of memory, or its machine is gone)")

    def _holder(self) -> Optional[str]:
        held = self.watch.running.get(self.result.id)
        if held:
            return held
        try:
            if self.result.state == "STARTED" and isinstance(self.result.info, dict):
                return self.result.info.get("hostname")
        except Exception:  # noqa: BLE001
            return None
        return None

    def _lost(self, why: str) -> bool:
        old = self.result
        try:
            old.revoke()  # with late acks its message returns after the visibility timeout: discard it then
        except Exception:  # noqa: BLE001
            pass
        if self.attempt > self.lost_retries:
            self.error = LostWorkerError(
                f"step {self.step_key} was lost: {why} while running it (task {old.id}, attempt {self.attempt} of "
                f"{self.lost_retries + 1}). Check the workers (`celery -A dagster_celery.app inspect ping`) and re-run "
                f"the job, or re-execute this run from failure (steps that succeeded are not run again); raise "
                f"{LOST_RETRIES_ENV} to resubmit more often")
            return True
        self.attempt += 1
        self.report(f"step {self.step_key}: {why} while running it (task {old.id}); submitting it again, "
                    f"attempt {self.attempt} of {self.lost_retries + 1}")
        self.result = self._submit()
        self.worker, self.missing_since, self.judged_at = None, None, self.watch.checked_at
        return False

    def get(self, *args, **kwargs):
        if self.error is not None:
            raise self.error
        return self.result.get(*args, **kwargs)

    def revoke(self, *args, **kwargs):
        return self.result.revoke(*args, **kwargs)
