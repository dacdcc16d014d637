"""Shared fixtures. Integration tests get one real embedded Postgres per session, in a fresh
data dir, stopped by its PID at teardown (a leftover server would outlive the test run).

Layout: tests/unit/<package>/ for the library's stage packages (eval_pipeline/<package>),
tests/integration/ for the library against the real database, model or subprocesses, and
tests/orchestration/ for the Dagster layer (assets/, resources/, definitions.py) and whole-job
runs. Helpers shared across folders stay at tests/ (and tests/integration/cli.py)."""

import os
import signal
import time
from pathlib import Path

import pytest

FIXTURES = Path(__file__).parent / "fixtures"
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
# OpenMP's idle threads sleep instead of spinning (libgomp spins by default after each parallel
# region): the lane runs two workers and their runs' processes on two cores, and a spinning torch
# thread takes the core another process waits for. It changes when a thread waits, not what it
# computes. Measured on three model-heavy test files at once: user CPU -11 %, wall -6 % (bench/RESULTS.md
# section 33); in a profile of the whole lane, libgomp's spin loops were 4.9 % of the machine's CPU.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
# The sweep the tests' whole-job runs use unless a test names its own (tests/fixtures/variants_tiny.yaml
# says why); set before anything imports definitions.
os.environ.setdefault("EVAL_PIPELINE_VARIANTS", str(Path(__file__).parent / "fixtures" / "variants_tiny.yaml"))


def _wait_gone(pid: int, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.1)
    return False


@pytest.fixture(scope="session")
def pg_state_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("pgstate")


@pytest.fixture(scope="session")
def embedded_pg(pg_state_dir):
    from eval_pipeline.store.database import EmbeddedPostgres

    pg = EmbeddedPostgres(pg_state_dir)
    pg.start()
    pid = pg.pid
    yield pg
    try:
        pg.stop()
    finally:
        pid = pg.pid or pid
        if pid is not None and not _wait_gone(pid, 10):
            os.kill(pid, signal.SIGKILL)


@pytest.fixture(scope="session")
def pg_uri(embedded_pg):
    return embedded_pg.uri("eval")


@pytest.fixture
def fresh_package_code(monkeypatch, tmp_path):
    """No identity computed before the test, no state dir, and the machine-wide digest cache in
    the test's own folder (a test never writes into the user's ~/.cache)."""
    from eval_pipeline.common import versions

    monkeypatch.setattr(versions, "_PACKAGE_CODE", {})
    monkeypatch.delenv("EVAL_PIPELINE_STATE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "user-cache"))
    yield
    import importlib

    importlib.invalidate_caches()


@pytest.fixture
def job_env(tmp_path, embedded_pg):
    """Environment for `dagster job execute`: run storage in the session server; each named
    state dir gets its own vector server, stopped after the test."""
    from eval_pipeline.store.database import EmbeddedPostgres
    from tests.integration.cli import job_environment

    dagster_url = embedded_pg.uri("dagster", driver="psycopg2")
    states = []

    def make(name, **extra):
        state = tmp_path / name
        states.append(state)
        return job_environment(state, dagster_url, **extra)

    yield make
    for state in states:
        EmbeddedPostgres(state).stop()


@pytest.fixture(scope="session")
def local_embedder():
    from eval_pipeline.store.embedders import LocalEmbedder

    embedder = LocalEmbedder()
    embedder.warm_up()
    return embedder


@pytest.fixture(scope="session")
def tiny_snapshot():
    from eval_pipeline.corpus.sources import load_corpus

    return load_corpus("jsonl", str(FIXTURES / "tiny_corpus.jsonl"))


@pytest.fixture(scope="session")
def tiny_questions(tiny_snapshot):
    from eval_pipeline.questions.sets import load_question_set

    return load_question_set(
        FIXTURES / "tiny_questions.jsonl",
        corpus_signature=tiny_snapshot.signature,
        doc_ids=[d.doc_id for d in tiny_snapshot.documents],
    )


def pytest_collection_modifyitems(config, items):
    """Fail the run when marker and folder disagree: every test under tests/integration/ is
    marked `integration`, and so is every test using the real Postgres or the real model
    (`-m "not integration"` must never start a server or load a model)."""
    heavy = {"embedded_pg", "pg_uri", "pg_state_dir", "local_embedder", "job_env"}
    integration_dir = Path(__file__).parent / "integration"
    wrong = []
    for item in items:
        if item.get_closest_marker("integration") is not None:
            continue
        uses = sorted(heavy & set(getattr(item, "fixturenames", ())))
        if integration_dir in Path(item.path).parents or uses:
            wrong.append(f"{item.nodeid}" + (f" (uses {', '.join(uses)})" if uses else " (under tests/integration/)"))
    if wrong:
        raise pytest.UsageError("tests that need the real database, model or jobs are not marked integration:\n  "
                                + "\n  ".join(wrong))
    longest_first(items)


# The files whose tests take longest (each one or more whole-job runs in sequence: a few minutes
# each), in that order. `make test` runs the integration lane on several workers, a file to a
# worker (pytest-xdist, --dist loadfile, in collection order): started last, one of these would
# leave the other workers idle while it runs. A hint for the order only: a file missing from it
# (or a name no longer there) just runs in its place.
LONGEST_FILES = (  # by their summed test durations in one run of the lane on 2 workers (2026-12-06, 18:05 UTC)
    "tests/orchestration/test_celery_executor.py",
    "tests/orchestration/test_verdict_fails_closed.py",
    "tests/orchestration/test_ui_launch_index_sweep.py",  # one index sweep through dagster dev
    "tests/orchestration/test_parallel_executor_attacks.py",
    "tests/orchestration/test_ui.py",
    "tests/orchestration/test_verdict_scenario.py",
    "tests/orchestration/test_reliability.py",
    "tests/orchestration/test_job.py",
    "tests/orchestration/test_parallel.py",
    "tests/integration/test_index_sweep.py",
    "tests/orchestration/test_answer_quality_job.py",
    "tests/integration/test_vector_store_reuse.py",
    "tests/orchestration/test_console.py",
    "tests/integration/test_sharded_ingest.py",
    "tests/orchestration/test_gate.py",
    "tests/orchestration/test_measurement_validity.py",
    "tests/integration/test_real_embedding_server.py",
    "tests/orchestration/test_verdict_reruns.py",
    "tests/orchestration/test_compare_with_job.py",
    "tests/orchestration/test_secret_scan.py",
)


def longest_first(items: list) -> None:
    """The files of LONGEST_FILES first, in its order; every other test keeps its place after
    them (a stable sort: the tests of one file stay in their order)."""
    root = Path(__file__).parent.parent
    rank = {name: i for i, name in enumerate(LONGEST_FILES)}

    def key(item) -> int:
        try:
            name = Path(item.path).relative_to(root).as_posix()
        except ValueError:
            return len(rank)
        return rank.get(name, len(rank))

    items.sort(key=key)
