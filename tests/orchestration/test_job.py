"""The Dagster layer: materialize in a test instance, and `dagster job execute` as CI runs it."""

import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml
from dagster import DagsterInstance, materialize

from resources import DatabaseResource, EmbedderResource, StateResource

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures"


def _defs_assets():
    import definitions

    return [*definitions.ALL_ASSETS, definitions.assets.no_errored_questions, definitions.GRAPH.checks["regression_gate"]]


def _whole_sweep_tags():
    from definitions import SWEEP

    return {"dagster/asset_partition_range_start": SWEEP.keys[0], "dagster/asset_partition_range_end": SWEEP.keys[-1]}


def _tiny_config(results_dir):
    config = {
        "corpus_snapshot": {"config": {"source": "jsonl", "path": str(FIXTURES / "tiny_corpus.jsonl")}},
        "question_set": {"config": {"path": str(FIXTURES / "tiny_questions.jsonl")}},
        "pgvector_store": {"config": {"split_length": 30, "split_overlap": 5}},
        "report": {"config": {"results_dir": str(results_dir)}},
    }
    return {"ops": config}


@pytest.fixture
def own_state(tmp_path_factory):
    """A state dir of this test's own: its own vector server and run history. The session's
    server holds history other tests wrote under the same variant names; a job run against it
    would be judged against their runs (and, the verdict failing closed, fail)."""
    from eval_pipeline.store.database import EmbeddedPostgres

    state = tmp_path_factory.mktemp("state")  # beside tmp_path, which the tests publish results into
    yield state
    EmbeddedPostgres(state).stop()


def _resources(state, folder) -> dict:
    from resources import LLMResource, RerankerResource
    from resources.io import RunScopedPickleIOManager, VariantParquetIOManager

    return {
        "io_manager": RunScopedPickleIOManager(base_dir=str(folder / "assets")),
        "state": StateResource(path=str(state)),
        "database": DatabaseResource(kind="embedded", state=StateResource(path=str(state))),
        "embedder": EmbedderResource(),
        "llm": LLMResource(),
        "judge_llm": LLMResource(),
        "rerankers": RerankerResource(llm=LLMResource()),
        "variant_io_manager": VariantParquetIOManager(base_dir=str(folder / "variants")),
    }


@pytest.fixture
def resources(own_state, tmp_path):
    return _resources(own_state, tmp_path)


CODE_VERSION = "v0-1-gtest"  # a known, clean code version: a dirty checkout's caches nothing


def _known_code_version(monkeypatch) -> None:
    import assets.answer_quality
    import assets.ranking

    monkeypatch.setattr(assets.ranking, "code_version", lambda: CODE_VERSION)
    monkeypatch.setattr(assets.answer_quality, "code_version", lambda: CODE_VERSION)  # the golden prompts' ranking


@pytest.fixture(scope="module")
def first_sweep(tmp_path_factory):
    """The tiny default sweep's first run: in-process, in a fresh state of its own, the state dir
    the environment names being another folder (`elsewhere`), under a known, clean code version
    (CODE_VERSION: its results are cached, as a clean checkout's are). Read by the whole-sweep
    test; the reuse test runs the same run again in its state and instance, with its resources.
    Its report files are also copied (`first_results`) as the run wrote them, for a test that
    reads them after another run of this state wrote the report again."""
    from eval_pipeline.common.state import STATE_DIR_ENV
    from eval_pipeline.store.database import EmbeddedPostgres

    state = tmp_path_factory.mktemp("state")
    folder = tmp_path_factory.mktemp("first_sweep")
    sweep = SimpleNamespace(state=state, folder=folder, elsewhere=folder / "elsewhere",
                            resources=_resources(state, folder), instance=DagsterInstance.ephemeral(),
                            config=_tiny_config(folder / "results"), first_results=folder / "first_results")
    try:
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv(STATE_DIR_ENV, str(sweep.elsewhere))
            _known_code_version(mp)
            sweep.result = materialize(_defs_assets(), resources=sweep.resources, run_config=sweep.config,
                                       instance=sweep.instance, tags=_whole_sweep_tags())
        if (folder / "results").is_dir():
            shutil.copytree(folder / "results", sweep.first_results)
        yield sweep
    finally:
        EmbeddedPostgres(state).stop()


def test_whole_sweep_in_one_run_then_one_partition(first_sweep, monkeypatch):
    """The whole sweep in one in-process run (the module's first run, `first_sweep`); then one
    variant re-materialized on its own, under the same code version. The scores and intervals are
    kept in the state resource's folder, not in one the environment names."""
    from definitions import SWEEP
    from eval_pipeline.common.state import STATE_DIR_ENV

    monkeypatch.setenv(STATE_DIR_ENV, str(first_sweep.elsewhere))
    _known_code_version(monkeypatch)
    results, resources, instance = first_sweep.first_results, first_sweep.resources, first_sweep.instance
    result = first_sweep.result
    assert result.success
    summary = result.output_for_node("report")["summary"].set_index("variant")
    assert list(summary.index) == SWEEP.keys
    assert summary.loc["pg-dense", "hit@1"] == 1.0
    assert (summary["n_answerable"] == 5).all() and (summary["n_abstention"] == 1).all()
    report = (results / "results.md").read_text()
    assert "Best variant" in report and "| pg-dense |" in report and "Latency by stage" in report
    lines = (results / "per_query.jsonl").read_text().splitlines()
    assert len(lines) == len(SWEEP.keys) * 6  # every variant x every question, abstention included
    checks = result.get_asset_check_evaluations()
    from definitions import GATE_CHECKS

    expected = [("no_errored_questions", True), *((name, True) for name in GATE_CHECKS.values())]
    assert sorted((c.check_name, c.passed) for c in checks) == sorted(expected)  # one gate check per variant
    per_query = __import__("pandas").read_json(results / "per_query.jsonl", lines=True)
    _assert_trec_parity(results / "trec", per_query)
    stored = first_sweep.folder / "variants" / "ranked_results"
    assert {p.parent.name for p in stored.glob("*/*.parquet")} == set(SWEEP.keys)
    assert len(list((first_sweep.state / "scored_partitions").glob("scored_*.pkl"))) == len(SWEEP.keys)
    assert not any((first_sweep.elsewhere / cache).exists() for cache in ("scored_partitions", "statistics_cache"))

    # One variant alone: only its partition gets a new file.
    before = {str(p.relative_to(stored)) for p in stored.glob("*/*.parquet")}
    single = materialize(_defs_assets(), selection="ranked_results", resources=resources,
                         instance=instance, partition_key="pg-dense")
    assert single.success
    after = {str(p.relative_to(stored)) for p in stored.glob("*/*.parquet")}
    assert [n.split("/")[0] for n in after - before] == ["pg-dense"]


def _assert_trec_parity(trec_dir, per_query):
    """The TREC files we wrote, scored by pytrec_eval, give our per-question numbers."""
    pytrec_eval = pytest.importorskip("pytrec_eval")
    from eval_pipeline.reporting.trec import read_run

    qrels = {}
    for line in (trec_dir / "qrels.txt").read_text().splitlines():
        qid, _, doc, grade = line.split()
        qrels.setdefault(qid, {})[doc] = int(grade)
    measures = {"ndcg_cut_10": "ndcg@10", "recip_rank": "mrr", "map": "map", "recall_10": "recall@10"}
    for engine, group in per_query[per_query["answerable"]].groupby("variant"):
        run = {q: {d: float(100 - i) for i, d in enumerate(ids)} for q, ids in read_run(trec_dir / f"{engine}.run").items()}
        theirs = pytrec_eval.RelevanceEvaluator(qrels, set(measures)).evaluate(run)
        for _, row in group.iterrows():
            for measure, column in measures.items():
                expected = theirs.get(row["qid"], {}).get(measure, 0.0)  # no run line: a miss
                assert row[column] == pytest.approx(expected, abs=1e-9), (engine, row["qid"], measure)


def test_demo_job_body_only_questions(tmp_path, resources):
    """On the demo corpus, engines that read the body must beat the metadata-only scorer on
    questions whose answer lives only in the body; if not, the harness has a bug. Retrieval only
    (`golden_prompts: source: none`): nothing here reads an answer, and answering the demo's 90 golden
    prompts for every variant took about 11 s of the test's 36."""
    import pandas as pd

    config = {"ops": {"report": {"config": {"results_dir": str(tmp_path)}},
                      "golden_prompts": {"config": {"source": "none"}}}}
    result = materialize(_defs_assets(), resources=resources, run_config=config, instance=DagsterInstance.ephemeral(),
                         tags=_whole_sweep_tags())
    assert result.success
    per_query = pd.concat(result.output_for_node("variant_metrics").values())
    body_only = per_query[per_query["hard_class"] == "body-only"]
    assert body_only["qid"].nunique() >= 30
    by_variant = body_only.groupby("variant")[["hit@5", "mrr"]].mean()
    for variant in ("hybrid", "pg-dense"):
        assert by_variant.loc[variant, "hit@5"] > by_variant.loc["metadata", "hit@5"] + 0.2, by_variant
        assert by_variant.loc[variant, "mrr"] > by_variant.loc["metadata", "mrr"], by_variant
    summary = result.output_for_node("report")["summary"]
    assert (summary["n_questions"] >= 200).all()
    assert (summary["n_errored"] == 0).all()


def test_dagster_job_execute_cli(tmp_path, job_env, clean_run):
    """The command CI and the README use, with run storage in the embedded Postgres (the
    project's dagster.yaml): the session's clean run is that command in a new process, on the
    tiny fixture (shared_runs.make_clean_run); then the same command with a variants file that
    names an engine there is not."""
    clean = clean_run.get()
    assert clean.code == 0, clean.log[-3000:]
    report = (clean.results / "results.md").read_text()
    from definitions import SWEEP

    assert all(f"| {key} |" in report for key in SWEEP.keys)  # every partition in one run

    config_file = tmp_path / "run.yaml"
    config_file.write_text(yaml.safe_dump(_tiny_config(tmp_path / "results")))
    env = job_env("state", DAGSTER_HOME=str(REPO))
    cmd = [str(Path(sys.executable).parent / "dagster"), "job", "execute", "-m", "definitions", "-j", "retrieval_eval"]
    bad_variants = tmp_path / "variants.yaml"
    bad_variants.write_text("variants:\n  - engine: elastic\n")
    failed = subprocess.run([*cmd, "-c", str(config_file)], cwd=REPO, env={**env, "EVAL_PIPELINE_VARIANTS": str(bad_variants)},
                            capture_output=True, text=True, timeout=600)
    assert failed.returncode != 0
    assert "engine 'elastic' is not valid; valid engines: pg-keyword, pg-dense, hybrid, bm25, metadata" in failed.stdout + failed.stderr


def test_generated_question_set_end_to_end(tmp_path, resources):
    """The job with a question set generated through the real openai client against the
    local OpenAI-compatible server; a second run is answered from the cache (no calls)."""
    from resources import LLMResource
    from tests.fake_llm import backtranslation_chat
    from tests.openai_stub import OpenAIStub

    with OpenAIStub(chat=backtranslation_chat) as stub:
        stub.faults = ["429", "500", "garbage"]  # retried; nothing lost
        resources = {**resources, "llm": LLMResource(base_url=stub.base_url, model="fake-model", api_key="sk-test-1",
                                                     timeout=5.0)}
        config = _tiny_config(tmp_path / "results")
        config["ops"]["question_set"] = {"config": {"source": "generate", "path": str(tmp_path / "generated.jsonl"),
                                                    "k": 2}}
        assets = [a for a in _defs_assets()]
        first = materialize(assets, resources=resources, run_config=config, instance=DagsterInstance.ephemeral(),
                            tags=_whole_sweep_tags())
        assert first.success
        calls_first = len(stub.chat_requests())
        qs = first.output_for_node("question_set")
        assert qs.header["generator_model"].startswith("fake-model@")
        assert {q.form for q in qs.questions if q.gold} == {"MATCH", "GAP"}
        assert sum(1 for q in qs.questions if not q.gold) >= 1  # abstention slice
        assert {g for q in qs.questions for g in q.gold} == {
            "kettle-care", "bike-storage", "notes-q3", "vpn-setup", "parental-leave"}
        summary = first.output_for_node("report")["summary"]
        assert (summary["n_errored"] == 0).all() and (summary["n_answerable"] == len([q for q in qs.questions if q.gold])).all()

        only = {"ops": {k: v for k, v in config["ops"].items() if k in ("corpus_snapshot", "question_set")}}
        second = materialize(assets, resources=resources, run_config=only, instance=DagsterInstance.ephemeral(),
                             selection=["corpus_snapshot", "question_set"])
        assert second.success
        assert len(stub.chat_requests()) == calls_first  # every unit came from the cache
        assert second.output_for_node("question_set").fingerprint == qs.fingerprint


def test_llm_outage_fails_the_step_and_loses_nothing(tmp_path, resources):
    """The endpoint fails for some documents: the question set step fails with a message naming
    them, the documents that succeeded stay cached, and the next run asks only for the rest."""
    from resources import LLMResource
    from tests.fake_llm import backtranslation_chat
    from tests.openai_stub import Fault, OpenAIStub

    down = {"value": True}

    def flaky(body):
        prompt = body["messages"][-1]["content"]
        if down["value"] and ("twenty weeks" in prompt or "hackathon" in prompt):
            return Fault("500")
        return backtranslation_chat(body)

    with OpenAIStub(chat=flaky) as stub:
        llm = LLMResource(base_url=stub.base_url, model="fake-model", api_key="sk-test-2", timeout=5.0, max_retries=1)
        resources = {**resources, "llm": llm}
        config = {"ops": {k: v for k, v in _tiny_config(tmp_path / "results")["ops"].items()
                          if k in ("corpus_snapshot", "question_set")}}
        config["ops"]["question_set"] = {"config": {"source": "generate", "path": str(tmp_path / "q.jsonl"), "k": 2}}
        run = lambda: materialize(_defs_assets(), resources=resources, run_config=config, raise_on_error=False,
                                  instance=DagsterInstance.ephemeral(), selection=["corpus_snapshot", "question_set"])
        failed = run()
        assert not failed.success
        error = failed.get_step_failure_events()[0].event_specific_data.error.to_string()
        assert "generation incomplete: 2 failed unit(s)" in error and "notes-q3" in error and "parental-leave" in error
        assert not (tmp_path / "q.jsonl").exists()
        asked_first = len(stub.chat_requests())

        down["value"] = False
        ok = run()
        assert ok.success
        retried = stub.chat_requests()[asked_first:]
        assert len(retried) == 2  # only the two failed documents (the abstention batch was cached)
        assert len({q.gold for q in ok.output_for_node("question_set").questions if q.gold}) == 5


def test_bad_settings_fail_in_the_first_step(tmp_path, resources):
    """A setting out of range anywhere in the run config stops the run in corpus_snapshot,
    before any embedding, with the setting named."""
    for section, settings, name in [
        ("ranked_results", {"miss_k": -1}, "miss_k"),
        ("ranked_results", {"workers": 0}, "workers"),
        ("pgvector_store", {"split_length": 10, "split_overlap": 10}, "split_overlap"),
        ("question_set", {"source": "generate", "abstention_frac": 1.0}, "abstention_frac"),
    ]:
        config = _tiny_config(tmp_path)
        config["ops"].setdefault(section, {}).setdefault("config", {}).update(settings)
        result = materialize(_defs_assets(), resources=resources, run_config=config, raise_on_error=False,
                             instance=DagsterInstance.ephemeral(), tags=_whole_sweep_tags())
        assert not result.success
        failure = result.get_step_failure_events()[0]
        assert failure.step_key == "corpus_snapshot"
        assert name in failure.event_specific_data.error.to_string()


def test_unchanged_variants_are_reused(first_sweep, monkeypatch):
    """A second run with nothing changed re-queries nothing (with a known, clean code version): the
    module's first run (`first_sweep`), then the same run again, in its state and instance, with
    its resources, configuration, code version and environment."""
    from eval_pipeline.common.state import STATE_DIR_ENV
    from eval_pipeline.ranking import sweep as sweep_module

    _known_code_version(monkeypatch)
    monkeypatch.setenv(STATE_DIR_ENV, str(first_sweep.elsewhere))
    resources, instance, config = first_sweep.resources, first_sweep.instance, first_sweep.config
    first = first_sweep.result
    assert first.success

    def no_queries(*args, **kwargs):
        raise AssertionError("the sweep ran although nothing changed")

    monkeypatch.setattr(sweep_module.Sweep, "run", no_queries)
    second = materialize(_defs_assets(), resources=resources, run_config=config, instance=instance,
                         tags=_whole_sweep_tags())
    assert second.success
    a = first.output_for_node("report")["summary"].drop(columns=["latency_p50_ms", "latency_p95_ms"])
    b = second.output_for_node("report")["summary"].drop(columns=["latency_p50_ms", "latency_p95_ms"])
    assert a.equals(b)
