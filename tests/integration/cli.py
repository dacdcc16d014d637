"""Running `dagster job execute` as CI and the README do, for tests of whole-job behaviour (and
`python -m` / `python -c` runs of a job or graph in a process of their own)."""

import os
import subprocess
import sys
from pathlib import Path

import yaml

from eval_pipeline.store.database import with_pool_plugin
from tests import job_zygote

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures"
# The tests' Dagster home: the project's own dagster.yaml, its storage on the session's Postgres
# through the URL `make demo` uses (a kept connection per storage: eval_pipeline/store/pooled_engine.py).
DAGSTER_HOME = REPO


def job_environment(state_dir: Path, dagster_url: str, **extra) -> dict:
    env = dict(os.environ)
    env.update(
        DAGSTER_HOME=str(DAGSTER_HOME),
        EVAL_PIPELINE_STATE_DIR=str(state_dir),
        EVAL_PIPELINE_ARTIFACTS_DIR=str(state_dir / "dagster"),
        EVAL_PIPELINE_COMPUTE_LOGS_DIR=str(state_dir / "dagster" / "logs"),
        EVAL_PIPELINE_DAGSTER_PG_URL=with_pool_plugin(dagster_url),  # as `make demo` has it
    )
    env.update(extra)
    return env


def tiny_job_config(results_dir: Path, **question_set) -> dict:
    return {"ops": {
        "corpus_snapshot": {"config": {"source": "jsonl", "path": str(FIXTURES / "tiny_corpus.jsonl")}},
        "question_set": {"config": question_set or {"path": str(FIXTURES / "tiny_questions.jsonl")}},
        "pgvector_store": {"config": {"split_length": 30, "split_overlap": 5}},
        "report": {"config": {"results_dir": str(results_dir)}},
    }}


def dense_and_bm25_variants(tmp_path: Path, name: str, **dense_knobs) -> str:
    """A variants file of two variants (`dense`, the baseline, with `dense_knobs`, and bm25) and
    a gate on hit@1, MRR and nDCG@10: the path, for EVAL_PIPELINE_VARIANTS."""
    knobs = "".join(f", {k}: {v}" for k, v in dense_knobs.items())
    path = tmp_path / f"{name}.yaml"
    path.write_text(f"baseline: dense\nvariants:\n  - {{engine: pg-dense, name: dense{knobs}}}\n  - bm25\n"
                    "gate: {tolerances: {hit@1: 0.05, mrr: 0.05, ndcg@10: 0.05}}\n")
    return str(path)


def start_job(tmp_path, name, env, config, job: str = "retrieval_eval", *,
              fresh: bool = False) -> subprocess.Popen | job_zygote.Child:
    """`dagster job execute -m definitions -j <job> -c <name>.yaml` (`start_dagster`)."""
    cfg = tmp_path / f"{name}.yaml"
    cfg.write_text(yaml.safe_dump(config))
    return start_dagster(tmp_path, name, env, ["job", "execute", "-m", "definitions", "-j", job, "-c", str(cfg)],
                         fresh=fresh)


def start_dagster(tmp_path, name, env, args: list[str], *, fresh: bool = False) -> subprocess.Popen | job_zygote.Child:
    """`dagster <args>` in the checkout, its output in <name>.log, in a session of its own. Forked
    from the test worker's warmed-up interpreter (tests/job_zygote.py, which says what differs)
    unless `fresh` (a test comparing two runs for equality, or a run whose environment is its
    own on purpose) or `EVAL_PIPELINE_FRESH_JOBS=1`: then a new process. An environment that
    differs from the zygote's in what an import reads, without `fresh`, is an error: such runs
    once started as new processes silently, at about four times a forked run's cost."""
    log_path = tmp_path / f"{name}.log"
    if _forked(name, env, fresh):
        log_path.write_text("")
        return job_zygote.spawn(args, env=env, cwd=REPO, log=log_path)
    with open(log_path, "w") as log:
        return subprocess.Popen([str(job_zygote.DAGSTER_SCRIPT), *args], cwd=REPO, env=env, stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True)


def _forked(name: str, env: dict, fresh: bool, *, python: bool = False) -> bool:
    """Whether run `name` starts from the job zygote (`start_dagster`'s rules; a python run's
    PYTHONPATH is applied by the zygote where it can be, see tests/job_zygote.py)."""
    if fresh or job_zygote.fresh_forced(env):
        return False
    differing = job_zygote.unforkable(env, python=python)
    if differing:
        raise ValueError(f"run {name!r}: its environment differs from the job zygote's in {differing}, which an "
                         "import may read; pass fresh=True if a new process is meant")
    return True


def start_python(tmp_path, name, env, args: list[str], *, fresh: bool = False, cwd: Path = REPO,
                 library: bool = False) -> subprocess.Popen | job_zygote.Child:
    """`python -m module ...` or `python -c code ...` (`args`) in `cwd` (the checkout, or another
    checkout's folder, with its PYTHONPATH in `env`), its output in <name>.log and its stderr in
    <name>.err, in a session of its own: forked from the job zygote or a new process by
    `start_dagster`'s rules (a PYTHONPATH the zygote cannot apply as a new interpreter would is a
    difference in what an import reads). `library`: a run of the library's code alone (an older
    install's eval_pipeline), forked from the library zygote of its environment (tests/job_zygote.py)."""
    log_path, err_path = tmp_path / f"{name}.log", tmp_path / f"{name}.err"
    if library and not fresh and not job_zygote.fresh_forced(env):
        log_path.write_text("")
        err_path.write_text("")
        return job_zygote.spawn_library_python(args, env=env, cwd=cwd, log=log_path, err=err_path)
    if not library and _forked(name, env, fresh, python=True):
        log_path.write_text("")
        err_path.write_text("")
        return job_zygote.spawn_python(args, env=env, cwd=cwd, log=log_path, err=err_path)
    with open(log_path, "w") as log, open(err_path, "w") as err:
        return subprocess.Popen([sys.executable, *args], cwd=cwd, env=env, stdout=log, stderr=err,
                                start_new_session=True)


def run_python(tmp_path, name, env, args: list[str], *, timeout: float, fresh: bool = False,
               cwd: Path = REPO, library: bool = False) -> subprocess.CompletedProcess:
    """`start_python`, waited for: what subprocess.run(capture_output=True, text=True) answers
    (killed and TimeoutExpired after `timeout` seconds)."""
    proc = start_python(tmp_path, name, env, args, fresh=fresh, cwd=cwd, library=library)
    try:
        code = proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise
    return subprocess.CompletedProcess(proc.args, code, (tmp_path / f"{name}.log").read_text(),
                                       (tmp_path / f"{name}.err").read_text())


def _rows(section: str) -> list[list[str]]:
    return [[cell.strip() for cell in line.strip("|").split("|")] for line in section.splitlines()
            if line.startswith("| ")]


def metrics_table(results_dir: Path) -> list[list[str]]:
    """The variants x metrics table of results.md without the latency columns (timings
    differ), then the answer-quality table without its latency and gate columns (a run's gate
    state depends on the history before it)."""
    text = (results_dir / "results.md").read_text()
    answers_at = text.find("## Answer quality")
    table = text[text.index("## Variants"):answers_at if answers_at >= 0 else text.index("## hit@5 by question kind")]
    rows = [row[:-2] for row in _rows(table)]
    if answers_at >= 0:
        answer_table = text[answers_at:text.index("\n### ", answers_at) if "\n### " in text[answers_at:] else None]
        rows += [row[:6] + row[7:-1] for row in _rows(answer_table)]
    return rows


class CountingEmbedder:
    """The real embedder, counting the texts and calls it is asked to embed; subclasses
    inject faults around the real call."""

    def __init__(self, inner):
        self.inner, self.texts, self.calls = inner, 0, 0

    @property
    def model_id(self):
        return self.inner.model_id

    @property
    def identity(self):
        return self.inner.identity

    @property
    def revision(self):
        return self.inner.revision

    def warm_up(self):
        self.inner.warm_up()

    def embed(self, texts):
        self.texts += len(texts)
        self.calls += 1
        return self.inner.embed(texts)


def demo_corpus_with(folder: Path, extra_docs) -> Path:
    """The demo corpus plus `extra_docs` (JSON records) as one JSONL corpus file in `folder`:
    real documents around the hand-made cases a test needs."""
    import json

    from eval_pipeline.corpus.sources import DEMO_DATA_DIR

    path = Path(folder) / "corpus.jsonl"
    lines = (DEMO_DATA_DIR / "corpus.jsonl").read_text(encoding="utf-8").splitlines()
    lines += [json.dumps(d, ensure_ascii=False) for d in extra_docs]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


class HashingEmbedder:
    """A deterministic bag-of-words embedder (32 dims, no model): ingest tests that need many
    batches, or a child process that must start fast, without paying for the real model."""

    model_id = revision = "test-hashing-v1"
    identity = "test-hashing-v1"

    def __init__(self):
        self.calls: list[int] = []  # the number of texts in each call

    def warm_up(self):
        pass

    def embed(self, texts):
        import hashlib

        import numpy as np

        self.calls.append(len(texts))
        out = []
        for text in texts:
            v = np.zeros(32, dtype=np.float32)
            for word in text.lower().split():
                v[hashlib.sha256(word.encode()).digest()[0] % 32] += 1.0
            out.append((v / (np.linalg.norm(v) or 1.0)).tolist())
        return out
