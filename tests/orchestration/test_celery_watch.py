"""The Celery executor's watch for dead workers (resources/celery_executor.py), on fakes: no broker,
no worker. The real thing, with a worker SIGKILLed mid-task, is tests/orchestration/test_celery_executor.py."""

import pytest

from resources.celery_executor import (
    BACKEND_ENV,
    BROKER_ENV,
    LostWorkerError,
    WatchedTask,
    WorkerWatch,
    _env_number,
    celery_settings,
)


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


class FakeResult:
    def __init__(self, task_id, *, state="PENDING", info=None):
        self.id, self.state, self.info = task_id, state, info
        self.done, self.error, self.revoked = False, None, False

    def ready(self):
        return self.done

    def failed(self):
        return self.done and self.error is not None

    @property
    def result(self):
        return self.error

    def get(self):
        if self.error is not None:
            raise self.error
        return ["events"]

    def revoke(self):
        self.revoked = True


class WorkerLostError(Exception):  # the name Celery reports when a pool process dies
    pass


class FakeWatch(WorkerWatch):
    def __init__(self, clock):
        super().__init__(app=None, every=5.0, clock=clock)
        self.replies = {}

    def active(self):
        return self.replies


def _task(watch, *, lost_retries=1, lost_after=20.0, prefix="t"):
    submitted, reports = [], []

    def submit():
        submitted.append(FakeResult(f"{prefix}{len(submitted) + 1}"))
        return submitted[-1]

    task = WatchedTask(submit, watch=watch, step_key="ranked_results.rank_variants[0_a]", lost_after=lost_after,
                       lost_retries=lost_retries, report=reports.append)
    return task, submitted, reports


def _tick(task, clock, seconds):
    clock.now += seconds
    return task.ready()


def test_a_task_on_a_live_worker_is_left_alone_and_its_result_returned():
    clock = Clock()
    watch = FakeWatch(clock)
    task, submitted, reports = _task(watch)
    watch.replies = {"w1@h": [{"id": "t1"}], "w2@h": []}
    for _ in range(20):
        assert not _tick(task, clock, 5)
    submitted[0].done = True
    assert task.ready() and task.get() == ["events"]
    assert len(submitted) == 1 and reports == []


def test_a_task_whose_worker_stops_answering_is_submitted_again_then_fails_naming_step_and_worker():
    clock = Clock()
    watch = FakeWatch(clock)
    task, submitted, reports = _task(watch, lost_retries=1)
    watch.replies = {"w1@h": [{"id": "t1"}], "w2@h": []}
    assert not _tick(task, clock, 5)
    assert task.worker == "w1@h"
    watch.replies = {"w2@h": []}  # w1 killed
    for _ in range(4):  # 5, 10, 15 s missing: not yet lost
        assert not _tick(task, clock, 5)
        assert len(submitted) == 1
    assert not _tick(task, clock, 5)  # 20 s: lost, submitted again
    assert len(submitted) == 2 and submitted[0].revoked
    assert "w1@h stopped answering" in reports[0] and "attempt 2 of 2" in reports[0]

    watch.replies = {"w2@h": [{"id": "t2"}]}
    assert not _tick(task, clock, 5)
    watch.replies = {}  # the second worker dies too: past the retries, the step fails
    for _ in range(4):
        assert not _tick(task, clock, 5)
    assert _tick(task, clock, 5)
    with pytest.raises(LostWorkerError, match=r"step ranked_results.rank_variants\[0_a\] was lost: celery worker w2@h"):
        task.get()
    assert len(submitted) == 2


def test_a_started_task_names_its_worker_without_the_broadcast():
    clock = Clock()
    watch = FakeWatch(clock)
    task, submitted, _ = _task(watch)
    submitted[0].state, submitted[0].info = "STARTED", {"hostname": "w2@h", "pid": 7}
    watch.replies = {"w1@h": []}
    assert not _tick(task, clock, 5)
    assert task.worker == "w2@h" and task.missing_since == clock.now


def test_a_queued_task_is_never_lost():
    clock = Clock()
    watch = FakeWatch(clock)
    task, submitted, _ = _task(watch)
    for _ in range(50):
        assert not _tick(task, clock, 5)
    assert len(submitted) == 1


def test_a_dead_pool_process_is_submitted_again_at_once():
    clock = Clock()
    watch = FakeWatch(clock)
    task, submitted, reports = _task(watch, lost_retries=2)
    submitted[0].done, submitted[0].error = True, WorkerLostError("Worker exited prematurely: signal 9 (SIGKILL)")
    assert not task.ready()
    assert len(submitted) == 2 and "pool process" in reports[0]


def test_every_task_is_judged_on_each_answer():
    """One broadcast serves every task in the tick, not only the first one polled."""
    clock = Clock()
    watch = FakeWatch(clock)
    a, sub_a, _ = _task(watch)
    b, sub_b, _ = _task(watch, prefix="u")
    watch.replies = {"w1@h": [{"id": sub_a[0].id}], "w2@h": []}
    sub_b[0].state, sub_b[0].info = "STARTED", {"hostname": "w2@h"}
    clock.now += 5
    assert not a.ready() and not b.ready()
    assert a.worker == "w1@h" and b.worker == "w2@h"


def test_broker_and_backend_from_config_then_environment():
    assert celery_settings({"broker": "redis://b:1/0"}, {})["backend"] == "redis://b:1/0"
    assert celery_settings({}, {BROKER_ENV: "redis://e:1/0", BACKEND_ENV: "redis://e:1/1"})["backend"] == "redis://e:1/1"
    assert celery_settings({"broker": "redis://c/0"}, {BROKER_ENV: "redis://e/0"})["broker"] == "redis://c/0"
    assert celery_settings({}, {BROKER_ENV: "pyamqp://guest@h//"})["backend"] == "rpc://"
    with pytest.raises(ValueError, match=BROKER_ENV):
        celery_settings({}, {})


def test_bad_numbers_in_the_environment_are_named(monkeypatch):
    monkeypatch.setenv("EVAL_PIPELINE_CELERY_LOST_AFTER", "soon")
    with pytest.raises(ValueError, match="EVAL_PIPELINE_CELERY_LOST_AFTER must be a number"):
        _env_number("EVAL_PIPELINE_CELERY_LOST_AFTER", 20, minimum=1)
    monkeypatch.setenv("EVAL_PIPELINE_CELERY_LOST_AFTER", "0")
    with pytest.raises(ValueError, match=">= 1"):
        _env_number("EVAL_PIPELINE_CELERY_LOST_AFTER", 20, minimum=1)
