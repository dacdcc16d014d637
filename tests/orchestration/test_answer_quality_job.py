"""The answer-quality chain end to end: golden_prompts -> answers -> graded_answers ->
answer_metrics -> report and the answer_gate checks, through `dagster job execute` as CI runs
it, on the tiny corpus with the tiny golden set (tests/fixtures/tiny_golden.jsonl) and two
variants (`dense`, `bm25`).

Two module-scoped chains of runs, each in a state dir (and embedded database) of its own:

- `chain`: the default settings (the local embedder, extractive answers graded
  deterministically), with an OpenAI-compatible endpoint and a model configured that nothing
  may call: a limited run (2 prompts), then the full run.
- `llm_chain`: the `llm` generator against the test server (also the embedder, so no model is
  loaded): a run killed half-way through its answers, the run again (`keep_text`), then a run
  in which `dense` abstains on every prompt, so the model has nothing to answer from.

The database-level gate tests judge and record hand-made runs in the session database.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from unittest import mock

import pandas as pd
import psycopg
import pytest

from eval_pipeline.history.answers import read_answer_runs
from eval_pipeline.store.database import EmbeddedPostgres
from tests.integration.cli import (
    FIXTURES,
    job_environment,
    start_job,
    tiny_job_config,
)
from tests.openai_stub import OpenAIStub

pytestmark = pytest.mark.integration

TINY_GOLDEN = FIXTURES / "tiny_golden.jsonl"
VARIANTS = ("dense", "bm25")
GOOD_VARIANTS = "baseline: dense\nvariants:\n  - {engine: pg-dense, name: dense}\n  - bm25\n"
# dense refuses every prompt (a threshold no score reaches): empty contexts, empty answers
REGRESSED_VARIANTS = "baseline: dense\nvariants:\n  - {engine: pg-dense, name: dense, abstain_below: 5.0}\n  - bm25\n"
RUN_ID = re.compile(r"retrieval_eval - ([0-9a-f]{8}-(?:[0-9a-f]{4}-){3}[0-9a-f]{12}) - ")
STEP_START = re.compile(r' - STEP_START - Started execution of step "([^"]+)"')
INSTANCE_ENV = ("EVAL_PIPELINE_DAGSTER_PG_URL", "EVAL_PIPELINE_ARTIFACTS_DIR", "EVAL_PIPELINE_COMPUTE_LOGS_DIR")


# --------------------------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------------------------


@dataclass
class JobRun:
    name: str
    code: int
    log: str
    env: dict
    results: Path
    chat_requests: int = 0  # the chain's test server, counted when the run ended
    requests: int = 0

    @property
    def state(self) -> Path:
        return Path(self.env["EVAL_PIPELINE_STATE_DIR"])

    @property
    def run_id(self) -> str:
        match = RUN_ID.search(self.log)
        assert match, self.log[-3000:]
        return match.group(1)

    @property
    def steps_started(self) -> list[str]:
        return STEP_START.findall(self.log)

    def report(self) -> str:
        return (self.results / "results.md").read_text(encoding="utf-8")

    def answer_section(self) -> str:
        text = self.report()
        start = text.index("## Answer quality")
        return text[start:text.index("\n## ", start + 1)]

    def frames(self, asset: str) -> dict[str, pd.DataFrame]:
        """{variant: the asset's partition as this run wrote it}."""
        folder = self.state / "variants" / asset
        return {p.parent.name: pd.read_parquet(p) for p in sorted(folder.glob(f"*/{self.run_id}.parquet"))}

    def checks(self) -> dict:
        """{check name: AssetCheckEvaluation} from the run's event log."""
        from dagster import DagsterEventType, DagsterInstance

        with mock.patch.dict(os.environ, {k: self.env[k] for k in INSTANCE_ENV}):
            instance = DagsterInstance.from_config(self.env["DAGSTER_HOME"])  # the run's instance
            try:
                records = instance.get_records_for_run(
                    self.run_id, of_type=DagsterEventType.ASSET_CHECK_EVALUATION, limit=1000).records
            finally:
                instance.dispose()
        evaluations = [r.event_log_entry.dagster_event.event_specific_data for r in records]
        return {e.check_name: e for e in evaluations}

    def history(self) -> list[dict]:
        """This run's rows of the answer history, in the job's own database."""
        return read_answer_runs(EmbeddedPostgres(self.state).uri("eval"), run_id=self.run_id)


def run_job(root: Path, name: str, env: dict, config: dict, stub: OpenAIStub | None = None) -> JobRun:
    job = start_job(root, name, env, config)
    code = job.wait(timeout=600)
    log = (root / f"{name}.log").read_text(errors="replace")
    run = JobRun(name, code, log, env, Path(config["ops"]["report"]["config"]["results_dir"]))
    if stub is not None:
        run.chat_requests, run.requests = len(stub.chat_requests()), len(stub.requests)
    return run


def golden_config(results_dir: Path, *, answers: dict | None = None, **golden) -> dict:
    config = tiny_job_config(results_dir)
    config["ops"]["golden_prompts"] = {"config": {"source": "file", "path": str(TINY_GOLDEN), **golden}}
    if answers:
        config["ops"]["answers"] = {"config": answers}
    return config


def metadata_value(evaluation, key):
    return evaluation.metadata[key].value


def cached_texts(state: Path, answers: dict[str, pd.DataFrame]) -> dict[str, str]:
    """answer key -> the answer text, from the state dir's answer cache."""
    from eval_pipeline.answering.cache import AnswerCache

    cache = AnswerCache(state / "answers")
    return {k: cache.get(k)["text"] for frame in answers.values() for k in frame["answer_key"]}


def cache_files(state: Path) -> list[Path]:
    return [p for p in (state / "answers").rglob("*.json") if re.fullmatch(r"[0-9a-f]{64}\.json", p.name)]


@dataclass
class Chain:
    root: Path
    stub: OpenAIStub
    env: dict
    runs: dict[str, JobRun] = field(default_factory=dict)


@pytest.fixture(scope="module")
def chain(tmp_path_factory, embedded_pg):
    """A limited run (golden limit 2), then the full default run, in one state dir, with an
    endpoint and a model configured that nothing should call."""
    root = tmp_path_factory.mktemp("answer_chain")
    (root / "variants.yaml").write_text(GOOD_VARIANTS)
    state = root / "state"
    with OpenAIStub() as stub:
        env = job_environment(state, embedded_pg.uri("dagster", driver="psycopg2"),
                              EVAL_PIPELINE_VARIANTS=str(root / "variants.yaml"), OPENAI_BASE_URL=stub.base_url,
                              EVAL_PIPELINE_LLM_MODEL="stub-model", OPENAI_API_KEY="sk-test-never-spent")
        chain = Chain(root, stub, env)
        chain.runs["limited"] = run_job(root, "limited", env, golden_config(root / "limited", limit=2), stub)
        chain.runs["full"] = run_job(root, "full", env, golden_config(root / "full"), stub)
        try:
            yield chain
        finally:
            EmbeddedPostgres(state).stop()


# --------------------------------------------------------------------------------------------
# 1. the whole chain in one run; 4. no tokens unless chosen; 9. no answer text unless asked
# --------------------------------------------------------------------------------------------


def test_the_whole_chain_in_one_job(chain):
    full = chain.runs["full"]
    assert full.code == 0, full.log[-3000:]
    for step in ("golden_prompts", "answers", "graded_answers", "answer_metrics", "report", "answer_gate"):
        assert step in full.steps_started

    section = full.answer_section()
    assert "Golden set `test.tiny` (7 prompts" in section
    assert "`local:extractive->extractive-v1+" in section
    table = section.split("\n### ")[0]  # the main table, before the breakdowns
    rows = [line for line in table.splitlines() if line.startswith("| ") and " | deterministic | " in line]
    assert [line.split("|")[1].strip() for line in rows] == list(VARIANTS)  # one row per variant
    assert all(line.rstrip().endswith("| first run |") for line in rows)

    checks = full.checks()
    for variant in VARIANTS:
        evaluation = checks[f"answer_gate__{variant}"]
        assert evaluation.passed, evaluation.metadata
        assert metadata_value(evaluation, "evaluated") is True
        assert metadata_value(evaluation, "deterministic yardstick").startswith("deterministic:v1+")
    assert all(c.passed for c in checks.values()), {n: c.passed for n, c in checks.items()}

    metrics = full.frames("answer_metrics")
    assert sorted(metrics) == sorted(VARIANTS)
    # what ranked each variant's context is recorded with its answers (the verdict refuses answers of another
    # engine): this run's, the engine that ranked its retrieval partitions
    ranked = full.frames("ranked_results")
    for variant in VARIANTS:
        assert set(metrics[variant]["engine_identity"]) == set(ranked[variant]["engine_identity"]), variant
    assert len({e for frame in ranked.values() for e in frame["engine_identity"]}) == 1
    history = full.history()
    assert sorted((r["variant"], r["grader"]) for r in history) == sorted(
        (v, g) for v in VARIANTS for g in ("deterministic", "static"))
    for r in history:
        assert r["set_id"] == "test.tiny" and r["limited"] is False and r["errored"] == 0 and r["eligible"] is True
        assert r["generator"].startswith("local:extractive->extractive-v1+")
        assert r["n_scored"] == {"deterministic": 7, "static": 1}[r["grader"]]
        recorded = metrics[r["variant"]].set_index("grader").loc[r["grader"]]
        assert r["pass_rate"] == pytest.approx(recorded["pass_rate"])
        assert r["provenance"]["set_name"] == "test.tiny"
    assert all(metrics[v].set_index("grader").loc["deterministic", "n_errored"] == 0 for v in VARIANTS)


def test_nothing_spends_tokens_unless_chosen(chain):
    """Default settings with an endpoint and a model configured: not one request."""
    for name in ("limited", "full"):
        run = chain.runs[name]
        assert run.code == 0, run.log[-3000:]
        assert (run.chat_requests, run.requests) == (0, 0), name
    answers = chain.runs["full"].frames("answers")
    for frame in answers.values():
        assert (frame["provider"] == "local").all() and (frame["prompt_tokens"] == 0).all()
        assert (frame["completion_tokens"] == 0).all()
    assert "| 0 | 0.0000 | 0 |" in chain.runs["full"].answer_section()  # tokens, cost, errored


def test_answer_text_is_kept_only_when_asked(chain):
    """Default run: no answer text in the answers partitions nor in any grade's reason (the
    text stays in the state dir's answer cache). keep_text: test_keep_text_puts_the_answer_text_in_the_answers."""
    full = chain.runs["full"]
    answers = full.frames("answers")
    texts = cached_texts(full.state, answers)
    for variant, frame in answers.items():
        assert frame["answer"].isna().all(), variant
        assert frame["answer_chars"].gt(0).all()  # there was text to keep
    for variant, grades in full.frames("graded_answers").items():
        said = dict(zip(answers[variant]["prompt_id"], answers[variant]["answer_key"].map(texts)))
        leaks = [(r.prompt_id, r.grader) for r in grades.itertuples() if r.reason and said[r.prompt_id] in r.reason]
        assert leaks == [], variant
        exact = grades.set_index(["prompt_id", "grader"]).loc[("g7", "deterministic")]
        assert exact["reason"] == "the trimmed answer is not exactly the expected value"


# --------------------------------------------------------------------------------------------
# 8. a limited golden run is never a yardstick
# --------------------------------------------------------------------------------------------


def test_a_limited_golden_run_is_recorded_but_never_a_yardstick(chain):
    limited, full = chain.runs["limited"], chain.runs["full"]
    assert limited.code == 0, limited.log[-3000:]
    assert "Golden set `test.tiny[limited: 2 prompts]` (2 prompts" in limited.answer_section()
    history = limited.history()
    assert len(history) == 2 * len(VARIANTS)
    for r in history:
        assert r["limited"] is True and r["eligible"] is False
        assert r["provenance"]["set_name"] == "test.tiny[limited: 2 prompts]"
    for variant in VARIANTS:
        evaluation = limited.checks()[f"answer_gate__{variant}"]
        assert evaluation.passed and metadata_value(evaluation, "deterministic state") == "not_comparable"
        assert "limited" in metadata_value(evaluation, "deterministic message")
        after = full.checks()[f"answer_gate__{variant}"]
        assert metadata_value(after, "deterministic state") == "first_run"
        assert metadata_value(after, "static state") == "first_run"
    # the same generator in another process: one identity, and the limited run's answers reused
    assert len({r["generator"] for r in [*history, *full.history()]}) == 1
    reused = {v: set(f.loc[f["cached"], "prompt_id"]) for v, f in full.frames("answers").items()}
    assert reused == {v: {"g1", "g2"} for v in VARIANTS}


# --------------------------------------------------------------------------------------------
# 10. the answer gate against recorded runs, in the database (the job-level regression: llm_chain)
# --------------------------------------------------------------------------------------------


def _run_metrics(tmp_path: Path, *, hits: int, set_id: str, n: int = 10):
    """Answer metrics of one variant on `n` prompts, `hits` of them answered right."""
    from eval_pipeline.answering.prompts import CheckedGoldenSet
    from eval_pipeline.questions.golden import Assertion, GoldenPrompt, GoldenPromptSet
    from tests.orchestration.test_answer_wiring import ScriptedGenerator, answer_chain

    prompts = tuple(GoldenPrompt(id=f"p{i:02d}", prompt=f"question number {i}", assertions=(Assertion.contains("right"),),
                                 gold=("doc-a",)) for i in range(n))
    golden = CheckedGoldenSet(GoldenPromptSet(set_id, prompts, "inline"), "unused", "inline")
    generator = ScriptedGenerator(lambda prompt, context: "right [1]" if int(prompt.split()[-1]) < hits else "wrong [1]")
    cache = tmp_path / f"cache-{uuid.uuid4().hex[:8]}"  # a fresh cache: the same generator answers anew
    _, _, metrics, _ = answer_chain(golden, generator, cache, texts={"doc-a:0": "Some text."}, graders=("deterministic",))
    return metrics


@pytest.fixture
def answer_runs(pg_uri, tmp_path):
    """Judge and record answer runs in the session database as the report does, under a key
    (set id, corpus) of their own; their rows are deleted afterwards."""
    from eval_pipeline.reporting.answers import answer_gate_checks, answer_gate_output
    from eval_pipeline.verdict.answers import record_answers
    from tests.orchestration.test_answer_wiring import judge

    recorded = []
    key = uuid.uuid4().hex[:10]

    def run(hits: int, tolerance: float = 0.1):
        run_id = f"answer-gate-{key}-{len(recorded)}"
        verdict = judge(_run_metrics(tmp_path, hits=hits, set_id=f"test.gate-{key}"), run_id=run_id,
                        corpus_signature=f"corpus-{key}", connection_string=pg_uri,
                        tolerances={"max_pass_rate_drop": tolerance, "max_mean_score_drop": tolerance})
        record_answers(verdict, pg_uri, run_id, run_eligible=verdict.passed)
        recorded.append(run_id)
        passed, _ = answer_gate_checks({"answers": answer_gate_output(verdict)}, ["dense"])["dense"]
        return verdict.gates["dense"]["deterministic"], passed, verdict.records[0]

    yield run
    with psycopg.connect(pg_uri, autocommit=True) as conn:
        conn.execute("DELETE FROM eval_measurements WHERE run_id = ANY(%s)", (recorded,))


@pytest.mark.parametrize("tolerance, before, after", [(0.1, 8, 7), (0.3, 10, 7), (0.0, 6, 6)])
def test_a_drop_equal_to_the_tolerance_passes(answer_runs, tolerance, before, after):
    first, passed, _ = answer_runs(before, tolerance)
    assert first.state == "first_run" and passed
    gate, passed, record = answer_runs(after, tolerance)
    assert gate.state == "comparable" and passed, gate.message
    assert {r["against"] for r in gate.rows} == {"previous", "reference"}
    assert record["eligible"] is True


def test_a_drop_past_the_tolerance_fails_against_the_recorded_runs(answer_runs):
    answer_runs(8)  # 0.8: the first run, the reference
    _, passed, _ = answer_runs(7)  # 0.7: within 0.1
    assert passed
    gate, passed, record = answer_runs(6)  # 0.6: 0.1 below the previous run, 0.2 below the reference
    assert not passed and gate.state == "comparable"
    failures = {(r["metric"], r["against"]) for r in gate.failures}
    assert failures == {("pass_rate", "reference"), ("mean_score", "reference")}
    assert record["eligible"] is False
    again, passed, _ = answer_runs(6)  # the failed run is no yardstick: still 0.2 below the reference
    assert not passed and {r["yardstick"] for r in again.rows if r["against"] == "previous"} == {0.7}


# --------------------------------------------------------------------------------------------
# 2. resume after SIGKILL; 9. keep_text; 10. a regression, with the llm generator
# --------------------------------------------------------------------------------------------

ANSWER = "Descale it with vinegar; bikes go in the basement cage; the hackathon is in Lisbon [1]."
NO_CONTEXT = "I cannot answer that from the documents."
EMPTY_CONTEXT = "<documents>\n\n</documents>"


class GatedChat:
    """Answers the first `free` chat requests at once; later ones wait until `open` is set
    (the run is killed while they wait: asked, never answered). No documents: NO_CONTEXT."""

    def __init__(self, free: int):
        self.free, self.calls, self.answered = free, 0, []
        self.lock, self.open = threading.Lock(), threading.Event()

    def __call__(self, body) -> str:
        content = body["messages"][-1]["content"]
        with self.lock:
            self.calls += 1
            first = self.calls <= self.free
            if first:
                self.answered.append(content)
        if not first:
            self.open.wait(30)
        return NO_CONTEXT if EMPTY_CONTEXT in content else ANSWER


def _asked(requests) -> list[str]:
    return [r["body"]["messages"][-1]["content"] for r in requests]


@dataclass
class LLMChain:
    gate: GatedChat
    state: Path
    asked_first: list[str]  # every chat request of the killed run
    cache_after_kill: int
    killed_report: bool
    rerun: JobRun
    asked_second: list[str]
    regressed: JobRun
    asked_third: list[str]


@pytest.fixture(scope="module")
def llm_chain(tmp_path_factory, embedded_pg):
    """killed (SIGKILL once some answers arrived and others are being asked) -> rerun
    (keep_text) -> regressed (dense abstains: empty contexts)."""
    root = tmp_path_factory.mktemp("answer_llm_chain")
    (root / "variants.yaml").write_text(GOOD_VARIANTS)
    (root / "variants-regressed.yaml").write_text(REGRESSED_VARIANTS)
    state = root / "state"
    gate = GatedChat(free=3)
    llm = {"generator": "llm"}
    try:
        with OpenAIStub(chat=gate) as stub:
            env = job_environment(state, embedded_pg.uri("dagster", driver="psycopg2"),
                                  EVAL_PIPELINE_VARIANTS=str(root / "variants.yaml"), OPENAI_BASE_URL=stub.base_url,
                                  EVAL_PIPELINE_LLM_MODEL="stub-model", OPENAI_API_KEY="sk-test-resume",
                                  EVAL_PIPELINE_EMBEDDER="openai", EVAL_PIPELINE_EMBEDDER_MODEL="stub-embedder")
            try:
                killed = start_job(root, "killed", env, golden_config(root / "killed", answers=llm))
                deadline = time.monotonic() + 300
                while not (len(cache_files(state)) >= gate.free and len(stub.chat_requests()) > gate.free):
                    assert killed.poll() is None, (root / "killed.log").read_text()[-3000:]
                    assert time.monotonic() < deadline, "the answers step never got that far"
                    time.sleep(0.05)
                os.killpg(killed.pid, signal.SIGKILL)
                killed.wait(timeout=60)
            finally:
                gate.open.set()
            asked_first = _asked(stub.chat_requests())
            cache_after_kill = len(cache_files(state))
            killed_report = (root / "killed" / "results.md").exists()

            rerun = run_job(root, "rerun", env, golden_config(root / "rerun", answers={**llm, "keep_text": True}))
            asked_second = _asked(stub.chat_requests()[len(asked_first):])
            regressed = run_job(root, "regressed", {**env, "EVAL_PIPELINE_VARIANTS": str(root / "variants-regressed.yaml")},
                                golden_config(root / "regressed", answers=llm))
            asked_third = _asked(stub.chat_requests()[len(asked_first) + len(asked_second):])
        yield LLMChain(gate, state, asked_first, cache_after_kill, killed_report, rerun, asked_second, regressed,
                       asked_third)
    finally:
        EmbeddedPostgres(state).stop()


def test_a_killed_llm_run_resumes_without_asking_twice(llm_chain):
    """Killed while some answers have arrived and others are being asked: the rerun asks only
    for the answers not cached, each once (only chat requests are counted: the test server
    is also the embedder)."""
    c, gate = llm_chain, llm_chain.gate
    assert c.cache_after_kill == gate.free  # the answers that arrived, and only those
    assert not c.killed_report
    in_flight = [a for a in c.asked_first if a not in gate.answered]
    assert in_flight  # asked, never answered: the kill came mid-step
    assert c.rerun.code == 0, c.rerun.log[-3000:]

    answers = c.rerun.frames("answers")
    distinct = {k for frame in answers.values() for k in frame["answer_key"]}
    assert len(c.asked_second) == len(set(c.asked_second))  # none asked twice
    assert not set(c.asked_second) & set(gate.answered)  # nothing cached is asked again
    assert set(in_flight) <= set(c.asked_second)
    assert len(gate.answered) + len(c.asked_second) == len(distinct)
    cached = {k for frame in answers.values() for k, hit in zip(frame["answer_key"], frame["cached"]) if hit}
    assert len(cached) == gate.free

    for variant, frame in answers.items():  # complete
        assert frame["error"].isna().all() and len(frame) == 7, variant
        assert set(frame["model_reported"]) == {"stub-model"}
    for variant, frame in c.rerun.frames("answer_metrics").items():
        assert (frame["n_errored"] == 0).all() and (frame["n_prompts"] == 7).all()
        (generator,) = set(frame["generator"])  # one: the stub's host and port, the model sent and reported
        assert re.fullmatch(r"127\.0\.0\.1:\d+(/\S*)?:stub-model->stub-model", generator), generator
        assert frame.set_index("grader").loc["deterministic", "pass_rate"] == pytest.approx(3 / 7)
    history = c.rerun.history()
    assert len(history) == 2 * len(VARIANTS)
    assert all(r["errored"] == 0 and r["eligible"] is True for r in history)
    checks = c.rerun.checks()
    assert all(checks[f"answer_gate__{v}"].passed for v in VARIANTS)


def test_keep_text_puts_the_answer_text_in_the_answers(llm_chain):
    for variant, frame in llm_chain.rerun.frames("answers").items():
        assert (frame["answer"] == ANSWER).all(), variant
    for variant, frame in llm_chain.regressed.frames("answers").items():  # not kept by default
        assert frame["answer"].isna().all(), variant


def test_an_answer_regression_fails_that_variants_answer_gate(llm_chain):
    """dense abstains on every prompt: the model gets no documents and cannot answer; the same
    golden set, generator and yardstick, so it is compared with the rerun and fails."""
    c = llm_chain
    rerun, regressed = c.rerun, c.regressed
    assert regressed.code == 1  # the blocking checks fail the run, after the report is written
    assert len(c.asked_third) == 7 and all(EMPTY_CONTEXT in a for a in c.asked_third)  # dense only: bm25 cached
    checks = regressed.checks()
    dense, bm25 = checks["answer_gate__dense"], checks["answer_gate__bm25"]
    assert not dense.passed
    assert metadata_value(dense, "deterministic state") == "comparable"
    assert metadata_value(dense, "deterministic pass_rate") == 0.0
    message = metadata_value(dense, "deterministic message")
    assert f"pass_rate vs previous run {rerun.run_id}: 0.4286 -> 0.0000 (delta -0.4286, tolerance 0.1)" in message
    assert bm25.passed and metadata_value(bm25, "deterministic state") == "comparable"

    section = regressed.answer_section().split("\n### ")[0]
    assert re.search(r"^\| dense \| deterministic \|.*\| \*\*fails\*\* \|$", section, re.MULTILINE), section
    assert re.search(r"^\| bm25 \| deterministic \|.*\| passes \|$", section, re.MULTILINE), section
    rows = {(r["variant"], r["grader"]): r for r in regressed.history()}
    assert rows[("dense", "deterministic")]["eligible"] is False  # a failed gate is never a yardstick
    # nor is any row of a run whose verdict failed: the run's one eligibility
    assert rows[("bm25", "deterministic")]["eligible"] is False
    before = {(r["variant"], r["grader"]): r for r in rerun.history()}
    for grader in ("deterministic", "static"):  # unchanged retrieval, cached answers: the same grades
        assert rows[("bm25", grader)]["pass_rate"] == before[("bm25", grader)]["pass_rate"]
    assert regressed.frames("answers")["bm25"]["cached"].all()



def test_the_failed_answer_gate_says_how_to_accept_and_the_command_takes_it(llm_chain):
    """The regressed run's failed answer gate carries `accept`: the accept_reference job's config and
    the command, naming the run and the variant, for its answers alone; the passed one carries
    none. The command, run as printed, accepts dense's answer rows (nothing refused) and leaves its
    retrieval reference where it was. Last of the llm_chain tests: it changes the history they read."""
    regressed = llm_chain.regressed
    checks = regressed.checks()
    advice = metadata_value(checks["answer_gate__dense"], "accept")
    command = f"python -m eval_pipeline.history accept {regressed.run_id} --variant dense --answers-only"
    assert (f'accept_reference with {{run_id: "{regressed.run_id}", variants: ["dense"], answers_only: true}}'
            in advice)
    assert advice.endswith(f"; or: {command}")
    assert "accept" not in checks["answer_gate__bm25"].metadata
    accepted = subprocess.run([sys.executable, *command.split()[1:3], "--state-dir", str(llm_chain.state),
                               *command.split()[3:]], capture_output=True, text=True, cwd=llm_chain.state.parent)
    assert accepted.returncode == 0, accepted.stdout + accepted.stderr
    assert "answers not accepted" not in accepted.stdout, accepted.stdout
    assert "pinned reference of: no retrieval variant (answers alone)" in accepted.stdout, accepted.stdout
    rows = {(r["variant"], r["grader"]): r for r in regressed.history()}
    assert rows[("dense", "deterministic")]["accepted"] and rows[("dense", "static")]["accepted"]
    assert not rows[("bm25", "deterministic")]["accepted"]

def test_one_failed_llm_answer_is_reported_and_fails_the_answer_gate(tmp_path, job_env):
    """The endpoint refuses one prompt (a 400 is not retried): that answer is an error in both
    variants, the report is written with it counted, and the answer gate fails."""
    from tests.openai_stub import Fault

    refused = "My remote tunnel keeps disconnecting"
    (tmp_path / "variants.yaml").write_text(GOOD_VARIANTS)
    with OpenAIStub(chat=lambda body: Fault("400") if refused in body["messages"][-1]["content"] else ANSWER) as stub:
        env = job_env("state", EVAL_PIPELINE_VARIANTS=str(tmp_path / "variants.yaml"), OPENAI_BASE_URL=stub.base_url,
                      EVAL_PIPELINE_LLM_MODEL="stub-model", OPENAI_API_KEY="sk-test-400",
                      EVAL_PIPELINE_EMBEDDER="openai", EVAL_PIPELINE_EMBEDDER_MODEL="stub-embedder")
        run = run_job(tmp_path, "failed", env, golden_config(tmp_path / "out", answers={"generator": "llm"}))
    assert run.code == 1
    assert (run.results / "results.md").exists(), run.log[-3000:]
    for variant in VARIANTS:
        check = run.checks()[f"answer_gate__{variant}"]
        assert not check.passed
        assert "1 answer(s) could not be generated" in metadata_value(check, "deterministic message")
    for variant, frame in run.frames("answer_metrics").items():
        row = frame.set_index("grader").loc["deterministic"]
        assert row["n_errored"] == 1 and row["n_scored"] == 7  # the failed answer counts as a failure
        assert row["pass_rate"] == pytest.approx(3 / 7)


# --------------------------------------------------------------------------------------------
# 3, 5, 6. refused before anything runs, or in the first step
# --------------------------------------------------------------------------------------------


def test_an_unknown_grader_is_refused_at_launch(tmp_path, job_env):
    env = job_env("state")
    config = golden_config(tmp_path / "out")
    config["ops"]["graded_answers"] = {"config": {"graders": ["deterministic", "judgee"]}}
    run = run_job(tmp_path, "launch", env, config)
    assert run.code != 0
    assert "graded_answers:config:graders[1] not in enum type GraderName got judgee" in run.log, run.log[-3000:]
    assert run.steps_started == [] and "STEP_START" not in run.log
    assert not (run.state / "answers").exists() and not (run.state / "variants").exists()


def test_a_bad_answer_tolerance_fails_the_code_location_load(tmp_path, job_env):
    variants = tmp_path / "variants.yaml"
    variants.write_text('variants: [bm25]\nanswers:\n  gate: {max_pass_rate_drop: "abc"}\n')
    run = run_job(tmp_path, "load", job_env("state", EVAL_PIPELINE_VARIANTS=str(variants)),
                  golden_config(tmp_path / "out"))
    assert run.code != 0
    assert (f"Error: bad variants file: {variants}:3: answers.gate: max_pass_rate_drop must be a finite number in "
            "[0, 1]") in run.log, run.log[-3000:]
    assert "got 'abc'" in run.log
    assert "STEP_START" not in run.log and not run.state.exists()


def test_a_bad_golden_file_fails_in_the_first_step_naming_file_line_and_field(tmp_path, job_env):
    from tests.orchestration.test_answer_wiring import bad_golden_file

    path = bad_golden_file(tmp_path)
    run = run_job(tmp_path, "golden", job_env("state"), golden_config(tmp_path / "out", path=str(path)))
    assert run.code != 0
    assert run.steps_started == ["corpus_snapshot"], run.log[-3000:]  # pgvector_store never started
    # The run's failure line, not the step's: a step's own lines reach the console through Dagster's
    # compute-log mirror (`tail -F` of the step's captured output), stopped as the step ends, so under
    # load its last lines (the STEP_FAILURE) can miss the console (dagster-io/dagster#23336); the
    # run's lines are written after the capture, and the RUN_FAILURE repeats the step's error.
    assert re.search(r""" - RUN_FAILURE - Execution of run for "retrieval_eval" failed\. Steps failed: """
                     r"""\['corpus_snapshot'\]\.""", run.log), run.log[-3000:]
    assert f"GoldenPromptError: {path}:3: field 'form': is 'SOMETIMES'; valid: MATCH, GAP or null" in run.log
    assert not (run.state / "answers").exists()


@pytest.fixture
def in_process(tmp_path, pg_state_dir, embedded_pg):
    """materialize() of the graph (or part of it) in a test instance, as test_job does."""
    from dagster import DagsterInstance, materialize

    import definitions
    from definitions import SWEEP
    from resources import (
        DatabaseResource,
        EmbedderResource,
        LLMResource,
        RerankerResource,
        StateResource,
    )
    from resources.io import RunScopedPickleIOManager, VariantParquetIOManager

    state = StateResource(path=str(pg_state_dir))
    resources = {
        "io_manager": RunScopedPickleIOManager(base_dir=str(tmp_path / "assets")),
        "variant_io_manager": VariantParquetIOManager(base_dir=str(tmp_path / "variants")),
        "state": state, "database": DatabaseResource(kind="embedded", state=state), "embedder": EmbedderResource(),
        "llm": LLMResource(), "judge_llm": LLMResource(), "rerankers": RerankerResource(llm=LLMResource()),
    }
    tags = {"dagster/asset_partition_range_start": SWEEP.keys[0], "dagster/asset_partition_range_end": SWEEP.keys[-1]}

    def run(config, selection=None):
        return materialize(definitions.ALL_ASSETS, resources=resources, run_config=config, raise_on_error=False,
                           instance=DagsterInstance.ephemeral(), tags=tags, selection=selection)

    return run


def _first_step_failure(result) -> str:
    assert not result.success
    started = [e.step_key for e in result.all_events if e.event_type_value == "STEP_START"]
    assert started == ["corpus_snapshot"]  # nothing after it ran: nothing embedded
    (failure,) = result.get_step_failure_events()
    assert failure.step_key == "corpus_snapshot"
    return failure.event_specific_data.error.to_string()


def test_a_grader_listed_twice_fails_in_the_first_step(tmp_path, in_process):
    config = golden_config(tmp_path / "out")
    config["ops"]["graded_answers"] = {"config": {"graders": ["deterministic", "static", "deterministic"]}}
    error = _first_step_failure(in_process(config))
    assert "graded_answers.graders: grader 'deterministic' is listed twice" in error


def test_in_process_a_bad_golden_file_fails_in_the_first_step(tmp_path, in_process):
    from tests.orchestration.test_answer_wiring import bad_golden_file

    path = bad_golden_file(tmp_path)
    config = {"ops": {k: v for k, v in golden_config(tmp_path / "out", path=str(path))["ops"].items()
                      if k in ("corpus_snapshot", "question_set", "golden_prompts")}}
    error = _first_step_failure(in_process(config, selection=["corpus_snapshot", "question_set", "golden_prompts"]))
    assert f"{path}:3: field 'form'" in error
