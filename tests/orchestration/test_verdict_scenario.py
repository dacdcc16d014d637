"""The gate as a hostile user meets it: the real job, run several times on the demo corpus.

One state dir and one history through the whole sequence, each step a `dagster job execute`
(or `dagster asset materialize`) as CI runs it, without golden prompts (`golden_prompts: source:
none`), so the retrieval gate alone decides each exit code:

1. base run                                  exit 0, every variant `first_run`
2. a stamped 50-question subset (another benchmark) exit 0, `paired` with run 1's configurations
3. a regression on the full set               exit 1, `comparable` against run 1, not run 2
4. the LLM reranker's endpoint fails          exit 1, its questions errored, nothing cached
5. the endpoint is back                       exit 0, ranked again (no replayed errors),
                                              judged against run 1 (3 and 4 are not eligible)
6. other weights copied over the model path   a new vector table, the new revision recorded,
                                              judged as a treatment change
7. a partition ranked under one variants file and reported under another: the history
   records the configuration that produced the partition.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import psycopg
import pytest
import yaml

from eval_pipeline.corpus.sources import load_corpus
from eval_pipeline.questions.sets import load_question_set, write_question_set
from tests.integration.cli import REPO, start_dagster, start_job
from tests.openai_stub import Fault, OpenAIStub

pytestmark = pytest.mark.integration

# one line per variant, or per group of variants judged alike: "- 3 variants, `a`, `b`, `c`: **passed** (first_run)."
GATE_LINE = re.compile(r"^- (?:\d+ variants, )?(?P<variants>`[^`]+`(?:, `[^`]+`)*): \*\*(?P<verdict>passed|FAILED)\*\* "
                       r"\((?P<state>\w+)\)", re.M)
DEMO_QUESTIONS = REPO / "eval_pipeline" / "demo_data" / "questions.jsonl"


def _first_ids_in_order(body: dict) -> str:
    """An LLM that keeps the candidates' order: answers with their ids as given."""
    user = body["messages"][-1]["content"]
    ids = re.findall(r'"id": "([^"]+)"', user)
    return json.dumps(ids)


def _variants(tmp_path: Path, name: str, *, dense: dict | None = None) -> str:
    data = {
        "baseline": "dense",
        "variants": [{"engine": "pg-dense", "name": "dense", **(dense or {})}, {"engine": "bm25"},
                     {"engine": "bm25", "name": "bm25+llm", "reranker": {"kind": "llm", "max_candidates": 5}}],
        "gate": {"tolerances": {"hit@1": 0.05, "mrr": 0.05, "ndcg@10": 0.05}},
    }
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


def _gates(report: str) -> dict[str, tuple[str, str]]:
    return {v.strip("`"): (m["verdict"], m["state"]) for m in GATE_LINE.finditer(report)
            for v in m["variants"].split(", ")}


def _history(uri: str) -> list[dict]:
    with psycopg.connect(uri) as conn:
        rows = conn.execute("SELECT run_id, eligible, provenance FROM eval_runs ORDER BY seq").fetchall()
    return [{"run_id": r[0], "eligible": r[1], "provenance": r[2]} for r in rows]


@pytest.fixture
def scenario(tmp_path, job_env, local_embedder):
    model = tmp_path / "model"
    shutil.copytree(local_embedder.model, model)
    stub = OpenAIStub(chat=_first_ids_in_order)
    stub.__enter__()
    variants = _variants(tmp_path, "good")
    env = job_env("state", EVAL_PIPELINE_VARIANTS=variants, EVAL_PIPELINE_EMBEDDER_MODEL=str(model),
                  OPENAI_BASE_URL=stub.base_url, EVAL_PIPELINE_LLM_MODEL="stub-model", OPENAI_API_KEY="sk-test")

    def run(name, questions=None, rank_again=False, **env_overrides):
        # no golden prompts: answering them again (the first run, the weights swap) took 4.6 s a run
        config = {"ops": {"report": {"config": {"results_dir": str(tmp_path / name)}},
                          "golden_prompts": {"config": {"source": "none"}}}}
        if rank_again:  # a clean checkout replays unchanged results from the cache; ask the endpoint again
            config["ops"]["ranked_results"] = {"config": {"reuse": False}}
        if questions:
            config["ops"]["question_set"] = {"config": {"path": str(questions)}}
        job = start_job(tmp_path, name, {**env, **env_overrides}, config)
        code = job.wait(timeout=600)
        report = tmp_path / name / "results.md"
        log = (tmp_path / f"{name}.log").read_text()
        return code, report.read_text() if report.exists() else "", log

    run.stub, run.model, run.env, run.tmp = stub, model, env, tmp_path
    yield run
    stub.__exit__(None, None, None)


def test_the_gate_is_not_fooled(scenario, tmp_path):
    run = scenario
    uri = run.env["EVAL_PIPELINE_STATE_DIR"]

    # 1. base
    code, report, log = run("base")
    assert code == 0, log[-3000:]
    assert _gates(report) == {v: ("passed", "first_run") for v in ("dense", "bm25", "bm25+llm")}

    # 2. a 50-question subset, stamped for the same corpus: other labels
    snapshot = load_corpus("demo")
    full = load_question_set(DEMO_QUESTIONS, corpus_signature=snapshot.signature,
                             doc_ids=[d.doc_id for d in snapshot.documents])
    subset = tmp_path / "subset.jsonl"
    write_question_set(subset, full.questions[:50], corpus_signature=snapshot.signature)
    code, report, log = run("subset", questions=subset)
    assert code == 0, log[-3000:]
    # another benchmark: each variant's configuration of run 1 is its own, so today's results are
    # its results on these questions (paired, nothing to rank again)
    assert {s for _, s in _gates(report).values()} == {"paired"}

    # 3. a regression on the full set: judged against run 1 despite run 2 in between
    code, report, log = run("regressed",
                            EVAL_PIPELINE_VARIANTS=_variants(tmp_path, "bad", dense={"abstain_below": 5.0}))
    assert code == 1
    gates = _gates(report)
    assert gates["dense"] == ("FAILED", "comparable") and gates["bm25"] == ("passed", "comparable")

    # 4. the reranker's endpoint fails every call (a 400 is not retried): errored, not first-stage order
    run.stub.chat = lambda body: Fault("400")
    code, report, log = run("fault", rank_again=True)
    assert code == 1
    assert "errored and were scored as misses" in report
    assert "no_errored_questions" in log

    # 5. the endpoint is back: the errored results of run 4 were not cached, so this run gets
    # bm25+llm's clean results (ranked again, or run 1's from the cache), compared with run 1
    run.stub.chat = _first_ids_in_order
    code, report, log = run("recovered")
    assert code == 0, log[-3000:]
    assert "errored" not in report.split("## Variants")[0]
    assert _gates(report) == {v: ("passed", "comparable") for v in ("dense", "bm25", "bm25+llm")}
    from eval_pipeline.store.database import EmbeddedPostgres

    history_uri = EmbeddedPostgres(uri).uri("eval")
    runs = _history(history_uri)
    assert [r["eligible"] for r in runs] == [True, True, False, False, True]
    assert {g["previous_run_id"] for g in runs[-1]["provenance"]["gate"].values()} == {runs[0]["run_id"]}

    # 6. other weights at the same path: a new table, the new revision, judged as a treatment change
    import importlib.resources

    other = Path(str(importlib.resources.files("sre_embedding_model") / "model_weights"))
    shutil.rmtree(run.model)
    shutil.copytree(other, run.model)
    code, report, log = run("swapped")
    revisions = [r["provenance"]["embedder_revision"] for r in _history(history_uri)]
    assert revisions[-1] != revisions[-2]
    assert "embedder_revision" in report and "Treatment changed" in report
    assert "reusing complete table" not in log
    states = {s for _, s in _gates(report).values()}
    assert states == {"comparable"}
    assert code == (0 if "Gate FAILED" not in report else 1)


def test_a_partition_records_the_config_that_produced_it(tmp_path, job_env):
    """Rank `dense` with depth 5 under one variants file: the report under another file where
    `dense` has depth 20 is refused (the partition was ranked for another configuration); under
    the first file the history records depth 5 (what produced the numbers)."""
    first = tmp_path / "first.yaml"
    first.write_text("variants:\n  - {engine: pg-dense, name: dense, depth: 5}\n")
    second = tmp_path / "second.yaml"
    second.write_text("variants:\n  - {engine: pg-dense, name: dense, depth: 20}\n")
    env = job_env("state", EVAL_PIPELINE_VARIANTS=str(first))

    def materialize(select, variants, *extra, code=0):
        config = tmp_path / "run.yaml"
        config.write_text(yaml.safe_dump({"ops": {"report": {"config": {"results_dir": str(tmp_path / "out")}}}}))
        args = ["asset", "materialize", "-m", "definitions", "--select", select, *extra, "-c", str(config)]
        proc = start_dagster(tmp_path, "materialize", {**env, "EVAL_PIPELINE_VARIANTS": variants}, args)
        returncode = proc.wait(timeout=600)
        output = (tmp_path / "materialize.log").read_text(errors="replace")
        assert (returncode == 0) == (code == 0), output[-3000:]
        return output

    # the unpartitioned inputs and the `dense` partition in one run (they need no run of their own)
    materialize("corpus_snapshot,pgvector_store,question_set,ranked_results,variant_metrics", str(first),
                "--partition", "dense")
    # under a file that gives `dense` another configuration, the old partition is not judged (it
    # would be recorded as the new configuration's measurement): refused, naming what differs
    refused = materialize("verdict,findings,report", str(second), code=1)
    assert "partition 'dense' was ranked for another configuration" in refused and "depth: 5 -> 20" in refused
    materialize("verdict,findings,report", str(first))
    from eval_pipeline.store.database import EmbeddedPostgres

    runs = _history(EmbeddedPostgres(env["EVAL_PIPELINE_STATE_DIR"]).uri("eval"))
    assert runs[-1]["provenance"]["variants"]["dense"]["depth"] == 5
