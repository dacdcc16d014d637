"""The judge wired into the Dagster layer (#27): the `judge_llm` resource built from the
environment (definitions._judge_llm), the independence check of graded_answers (refused before
any paid call, or labelled self-judged when allowed), repair and a calibration file as run config,
the grounding grader probing each variant's keyword index, and no API key anywhere a run keeps.

The unit tests call the pieces directly; the integration test materializes the answer half of a
one-variant graph (bm25 on the tiny corpus) in a state dir of its own, with the OpenAI-compatible
test server as the embedder, the generator and the judge, the resources built by definitions.py
from the environment as a deployment builds them."""

from __future__ import annotations

import json
import re
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest
from dagster import AssetKey, EnvVar

from tests.openai_stub import OpenAIStub

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures"
GEN_KEY, JUDGE_KEY, EMBED_KEY = "sk-gen-c0ffee-secret", "sk-judge-f00d-secret", "sk-embed-beef-secret"
JUDGE_ENV = ("EVAL_PIPELINE_JUDGE_BASE_URL", "EVAL_PIPELINE_JUDGE_MODEL", "EVAL_PIPELINE_JUDGE_API_KEY",
             "EVAL_PIPELINE_JUDGE_TEMPERATURE")


@pytest.fixture
def clean_env(monkeypatch):
    for name in (*JUDGE_ENV, "OPENAI_BASE_URL", "OPENAI_API_KEY", "EVAL_PIPELINE_LLM_MODEL",
                 "EVAL_PIPELINE_LLM_SHARED_LIMIT"):
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


# --------------------------------------------------------------------------------------------
# the judge_llm resource from the environment
# --------------------------------------------------------------------------------------------


def test_without_judge_settings_the_judge_is_the_generators_resource(clean_env):
    import definitions

    clean_env.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
    clean_env.setenv("EVAL_PIPELINE_LLM_MODEL", "gen-model")
    clean_env.setenv("OPENAI_API_KEY", GEN_KEY)
    judge, llm = definitions._judge_llm(), definitions._llm()
    assert judge == llm
    assert isinstance(judge.api_key, EnvVar) and judge.api_key.env_var_name == "OPENAI_API_KEY"
    assert "judge_llm" in definitions.defs.resources


def test_a_judge_model_on_the_generators_endpoint_keeps_its_key(clean_env):
    import definitions

    clean_env.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
    clean_env.setenv("EVAL_PIPELINE_LLM_MODEL", "gen-model")
    clean_env.setenv("OPENAI_API_KEY", GEN_KEY)
    clean_env.setenv("EVAL_PIPELINE_JUDGE_MODEL", "judge-model")
    clean_env.setenv("EVAL_PIPELINE_JUDGE_TEMPERATURE", "0.3")
    judge = definitions._judge_llm()
    assert judge.model.env_var_name == "EVAL_PIPELINE_JUDGE_MODEL"  # an EnvVar: no value in a snapshot
    assert judge.base_url.env_var_name == "OPENAI_BASE_URL"
    assert judge.api_key.env_var_name == "OPENAI_API_KEY" and judge.inherit_openai_key
    assert judge.temperature == 0.3 and not judge.shared_limit
    clean_env.setenv("EVAL_PIPELINE_LLM_SHARED_LIMIT", "1")  # shared through the database, like the generator's
    shared = definitions._judge_llm()
    assert shared.shared_limit and shared.database is not None
    clean_env.setenv("EVAL_PIPELINE_JUDGE_API_KEY", JUDGE_KEY)
    assert definitions._judge_llm().api_key.env_var_name == "EVAL_PIPELINE_JUDGE_API_KEY"


def test_a_judge_on_another_endpoint_never_receives_the_generators_key(clean_env):
    import definitions
    from resources import LLMResource

    clean_env.setenv("OPENAI_API_KEY", GEN_KEY)
    clean_env.setenv("EVAL_PIPELINE_LLM_MODEL", "gen-model")
    clean_env.setenv("EVAL_PIPELINE_JUDGE_BASE_URL", "http://judge.example:8000/v1")
    judge = definitions._judge_llm()
    assert judge.api_key is None and judge.inherit_openai_key is False
    assert judge.model == "gen-model"  # unset: the generator's model, at the judge's endpoint
    client = LLMResource(base_url="http://judge.example:8000/v1", model="m", inherit_openai_key=False).get()
    assert client._api_key == "unused" and GEN_KEY not in repr(client)
    assert LLMResource(base_url="http://judge.example:8000/v1", model="m").get()._api_key == GEN_KEY


@pytest.mark.parametrize("value", ["hot", "3", "-1"])
def test_a_bad_judge_temperature_names_the_variable(clean_env, value):
    import definitions

    clean_env.setenv("EVAL_PIPELINE_JUDGE_TEMPERATURE", value)
    message = rf"EVAL_PIPELINE_JUDGE_TEMPERATURE must be a number in \[0, 2\], got '{value}'"
    with pytest.raises(ValueError, match=message):
        definitions._judge_llm()


# --------------------------------------------------------------------------------------------
# the independence check, repair as a setting
# --------------------------------------------------------------------------------------------


class Log:
    def __init__(self):
        self.warnings: list[str] = []

    def warning(self, message):
        self.warnings.append(message)

    info = warning


def _context(ops: dict | None = None):
    everything = {AssetKey(k) for k in ("golden_prompts", "answers", "graded_answers")}
    return SimpleNamespace(run=SimpleNamespace(run_config={"ops": ops or {}}, asset_selection=None), log=Log(),
                           job_def=SimpleNamespace(asset_layer=SimpleNamespace(selected_asset_keys=everything)))


def _llm(model, base_url="http://127.0.0.1:9/v1", **kwargs):
    from resources import LLMResource

    return LLMResource(base_url=base_url, model=model, **kwargs)


def test_self_judging_is_refused_naming_the_settings_never_the_key():
    from assets.answer_quality import GradedAnswersConfig, check_judge

    secret_url = f"http://user:{GEN_KEY}@127.0.0.1:9/v1"
    config = GradedAnswersConfig(graders=["deterministic", "judge"])
    with pytest.raises(ValueError) as refused:
        check_judge(_context(), config, _llm("gen-model", secret_url, api_key=JUDGE_KEY),
                    generator=_llm("gen-model", secret_url))
    message = str(refused.value)
    assert "ops.graded_answers.config.allow_self_judging: true" in message
    assert "EVAL_PIPELINE_JUDGE_MODEL" in message and "'gen-model'" in message
    assert GEN_KEY not in message and JUDGE_KEY not in message


def test_allowed_self_judging_is_labelled_and_warned():
    from assets.answer_quality import GradedAnswersConfig, check_judge

    context = _context()
    got = check_judge(context, GradedAnswersConfig(graders=["judge"], allow_self_judging=True), _llm("m"),
                      generator=_llm("m"))
    assert got.kind == "self" and got.label == "self-judged"
    assert "self-judged" in context.log.warnings[0]


def test_an_independent_judge_and_a_same_host_warning():
    from assets.answer_quality import GradedAnswersConfig, check_judge

    config = GradedAnswersConfig(graders=["decision"])
    context = _context()
    assert check_judge(context, config, _llm("judge-m"), generator=("https://api.other.example/v1", "m")).kind == \
        "independent"
    assert check_judge(context, config, _llm("judge-m"), generator=_llm("m")).kind == "same_family"
    assert "share the host '127.0.0.1'" in context.log.warnings[-1]
    assert check_judge(context, config, _llm("m"), generator=None).kind == "independent"  # extractive answers
    assert check_judge(context, GradedAnswersConfig(), _llm("m"), generator=_llm("m")) is None  # no LLM grader


def test_the_generator_is_read_from_the_answers_settings():
    from assets.answer_quality import generator_of, with_repair_setting

    llm = json.dumps({"kind": "llm", "llm": {"base_url": "http://127.0.0.1:9/v1", "model": "gen-model"}})
    extractive = json.dumps({"kind": "extractive", "version": 1})
    assert generator_of({"v": pd.DataFrame({"generator_settings": [extractive]})}) is None
    assert generator_of({"v": pd.DataFrame({"generator_settings": [extractive]}),
                         "w": pd.DataFrame({"generator_settings": [llm]})}) == ("http://127.0.0.1:9/v1", "gen-model")
    repaired = with_repair_setting(pd.DataFrame({"generator_settings": [llm, llm]}))
    assert {json.loads(s)["repair"] for s in repaired["generator_settings"]} == {True}


def test_the_preflight_refuses_self_judging_and_a_bad_calibration_file(tiny_snapshot, tmp_path):
    from assets.answer_quality import preflight_answers

    ops = {"answers": {"config": {"generator": "llm"}}, "graded_answers": {"config": {"graders": ["judge"]}}}
    with pytest.raises(ValueError, match="allow_self_judging"):
        preflight_answers(_context(ops), tiny_snapshot, _llm("m"), _llm("m"))
    preflight_answers(_context(ops), tiny_snapshot, _llm("m"), _llm("judge-m", "https://judge.example/v1"))
    bad = tmp_path / "cal.jsonl"
    bad.write_text('{"id": "a"}\n')
    ops["graded_answers"]["config"]["calibration"] = str(bad)
    with pytest.raises(ValueError, match=r"cal.jsonl:1: question must be a non-empty string"):
        preflight_answers(_context(ops), tiny_snapshot, _llm("m"), _llm("judge-m", "https://judge.example/v1"))


# --------------------------------------------------------------------------------------------
# through materialize
# --------------------------------------------------------------------------------------------

VPN = "Which VPN client do I install on my laptop?"


def chat(body):
    """The generator answers (the VPN prompt names the client only when repaired); the judge
    grades (a calibration answer marked BAD fails)."""
    system, user = body["messages"][0]["content"], body["messages"][-1]["content"]
    if system.startswith("You grade an answer"):
        if "BAD" in user:
            return '{"faithfulness": 1, "relevance": 1, "citations": 1, "reason": "Unsupported."}'
        return '{"faithfulness": 5, "relevance": 5, "citations": 4, "reason": "Supported."}'
    if VPN in user:
        return "Install the WireGuard client [1]." if "It failed these checks:" in user else "Use the client [1]."
    return "See the documents [1]; run `office.helper()` for 20 minutes."


def _calibration(path: Path) -> Path:
    rows = [{"id": f"c{i}", "question": "How do I descale the kettle?", "context": ["Boil vinegar in it."],
             "text": ("BAD " if i % 3 == 0 else "") + "Boil vinegar [1].", "human": i % 3 != 0} for i in range(1, 7)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.fixture(scope="module")
def judged(tmp_path_factory):
    """One state dir and graph (bm25 only); `run(name, env, graded)` materializes the whole
    graph with the resources definitions.py builds from `env`."""
    from dagster import DagsterInstance, materialize

    import assets
    import definitions
    from assets.partitions import read_sweep
    from eval_pipeline.store.database import EmbeddedPostgres
    from resources import DatabaseResource, EmbedderResource, RerankerResource, StateResource
    from resources.io import RunScopedPickleIOManager, VariantParquetIOManager

    root = tmp_path_factory.mktemp("judge_wiring")
    state_dir = tmp_path_factory.mktemp("state")
    (root / "variants.yaml").write_text("baseline: bm25\nvariants:\n  - bm25\n")
    graph = assets.build_assets(read_sweep(root / "variants.yaml"))
    calibration = _calibration(root / "calibration.jsonl")
    runs: dict = {}
    with OpenAIStub(chat=chat) as stub:
        def run(name: str, env: dict, graded: dict):
            mp = pytest.MonkeyPatch()
            try:
                for key in (*JUDGE_ENV, "OPENAI_BASE_URL", "OPENAI_API_KEY", "EVAL_PIPELINE_LLM_MODEL"):
                    mp.delenv(key, raising=False)
                for key, value in {"OPENAI_BASE_URL": stub.base_url, "EVAL_PIPELINE_LLM_MODEL": "gen-model",
                                   "OPENAI_API_KEY": GEN_KEY, "EMBED_KEY": EMBED_KEY, **env}.items():
                    mp.setenv(key, value)
                state = StateResource(path=str(state_dir))
                resources = {
                    "io_manager": RunScopedPickleIOManager(base_dir=str(root / name / "assets")),
                    "variant_io_manager": VariantParquetIOManager(base_dir=str(root / name / "variants")),
                    "state": state, "database": DatabaseResource(kind="embedded", state=state),
                    "embedder": EmbedderResource(kind="openai", model="stub-embedder", base_url=stub.base_url,
                                                 api_key=EnvVar("EMBED_KEY")),
                    "llm": definitions._llm(), "judge_llm": definitions._judge_llm(),
                    "rerankers": RerankerResource(llm=definitions._llm()),
                }
                config = {"ops": {
                    "corpus_snapshot": {"config": {"source": "jsonl", "path": str(FIXTURES / "tiny_corpus.jsonl")}},
                    "question_set": {"config": {"path": str(FIXTURES / "tiny_questions.jsonl")}},
                    "pgvector_store": {"config": {"split_length": 30, "split_overlap": 5}},
                    "golden_prompts": {"config": {"source": "file", "path": str(FIXTURES / "tiny_golden.jsonl")}},
                    "answers": {"config": {"generator": "llm", "repair": True}},
                    "graded_answers": {"config": {"graders": ["deterministic", "static", "grounding", "judge"],
                                                  "calibration": str(calibration), **graded}},
                    "report": {"config": {"results_dir": str(root / name / "results"), "record_history": False}},
                }}
                instance = DagsterInstance.ephemeral()
                asked = len(stub.chat_requests())
                result = materialize(list(graph.assets.values()), resources=resources, run_config=config,
                                     instance=instance, raise_on_error=False,
                                     tags={"dagster/asset_partition_range_start": "bm25",
                                           "dagster/asset_partition_range_end": "bm25"})
                runs[name] = SimpleNamespace(result=result, instance=instance, results=root / name / "results",
                                             requests=stub.chat_requests()[asked:],
                                             variants=root / name / "variants")
            finally:
                mp.undo()

        try:
            run("separate", {"EVAL_PIPELINE_JUDGE_MODEL": "judge-model", "EVAL_PIPELINE_JUDGE_API_KEY": JUDGE_KEY}, {})
            run("refused", {}, {})
            run("allowed", {}, {"allow_self_judging": True})
            yield runs
        finally:
            EmbeddedPostgres(state_dir).stop()


def _auth(request) -> str | None:
    return {k.lower(): v for k, v in request["headers"].items()}.get("authorization")


def _answer_section(run) -> str:
    text = (run.results / "results.md").read_text(encoding="utf-8")
    start = text.index("## Answer quality")
    end = text.find("\n## ", start + 1)
    return text[start:end if end >= 0 else None]


def _event_text(run) -> str:
    """Everything the run's event log and run record keep, as text."""
    from dagster._serdes import serialize_value

    records = run.instance.all_logs(run.result.run_id)
    dagster_run = run.instance.get_run_by_id(run.result.run_id)
    snapshot = run.instance.get_job_snapshot(dagster_run.job_snapshot_id)
    return "\n".join([*(serialize_value(r) for r in records), serialize_value(dagster_run), serialize_value(snapshot)])


@pytest.mark.integration
def test_a_separate_judge_grades_with_its_own_model_and_key(judged):
    run = judged["separate"]
    assert run.result.success, [e.event_specific_data for e in run.result.get_step_failure_events()]
    judging = [r for r in run.requests if r["body"]["messages"][0]["content"].startswith("You grade an answer")]
    writing = [r for r in run.requests if r not in judging]
    assert judging and writing
    assert {r["body"]["model"] for r in judging} == {"judge-model"}
    assert {r["body"]["model"] for r in writing} == {"gen-model"}
    assert {_auth(r) for r in judging} == {f"Bearer {JUDGE_KEY}"}
    assert {_auth(r) for r in writing} == {f"Bearer {GEN_KEY}"}
    assert any("It failed these checks:" in r["body"]["messages"][-1]["content"] for r in writing)  # one repair

    section = _answer_section(run)
    assert "| bm25 | judge |" in section and "self-judged" not in section
    assert "### Grounding" in section and "| variant | grounded rate | corpus rate | citations / answer |" in section
    assert "### Repair" in section and "| bm25 | 1 | 0.000 → 1.000 | 1 | 1 |" in section
    assert "### Judge agreement with people" in section and "calibration.jsonl" in section

    metrics = pd.read_parquet(next((run.variants / "answer_metrics").glob("*/*.parquet")))
    grounding = metrics.set_index("grader").loc["grounding"]
    assert not pd.isna(grounding["corpus_rate"])  # the corpus was probed through bm25's keyword index
    assert grounding["corpus_rate"] >= grounding["grounded_rate"]
    (materialization,) = [m for m in run.result.asset_materializations_for_node("answer_metrics")]
    values = {k: v.value for k, v in materialization.metadata.items()}
    assert values["grounded_rate"] == pytest.approx(grounding["grounded_rate"])
    assert values["corpus_rate"] == pytest.approx(grounding["corpus_rate"])
    assert values["citations_per_answer"] == pytest.approx(grounding["citations_per_answer"])
    assert values["repair pass_rate_after"] == 1.0 and "judge kappa" in values
    (graded,) = [m for m in run.result.asset_materializations_for_node("graded_answers")]
    assert graded.metadata["judge independence"].value == "same_family"  # one test server: one host
    assert graded.metadata["judge"].value.endswith(" judge-model") and graded.metadata["grading calls"].value > 0
    answers = pd.read_parquet(next((run.variants / "answers").glob("*/*.parquet")))
    assert {json.loads(s)["repair"] for s in answers["generator_settings"]} == {True}


@pytest.mark.integration
def test_the_verdict_knows_the_report_will_not_record_the_run(judged):
    """These runs set the report's `record_history: false`: the verdict asset reads it from the
    run's config, so no acceptance of the run (which `accept` would refuse: no recorded run) is
    offered, and the console's summary in the verdict's log says why (tests/unit/verdict/
    test_unrecorded_run.py: what that means for each gate and check)."""
    for name in ("separate", "allowed"):
        run = judged[name]
        verdict = run.result.output_for_node("verdict")
        assert verdict.unrecorded == "report.record_history: false"
        assert verdict.acceptance_refusals == dict.fromkeys(
            verdict.gates, "the report does not record it (report.record_history: false)")
        logged = [e.message for e in run.instance.all_logs(run.result.run_id) if e.step_key == "verdict"]
        assert any(f"run {verdict.run_id} (not recorded: report.record_history: false)" in m for m in logged)


@pytest.mark.integration
def test_a_judge_that_is_the_generator_is_refused_before_any_call(judged):
    run = judged["refused"]
    assert not run.result.success
    assert run.requests == []  # not one answer written, not one grade asked
    (failure,) = run.result.get_step_failure_events()
    assert failure.step_key in ("corpus_snapshot", "answers")  # the first step, once it is given the judge
    error = failure.event_specific_data.error.to_string()
    assert "would grade answers with the model that wrote them" in error
    assert "ops.graded_answers.config.allow_self_judging: true" in error and "EVAL_PIPELINE_JUDGE_MODEL" in error
    assert GEN_KEY not in error


@pytest.mark.integration
def test_allowed_self_judging_is_labelled_in_the_report_and_the_metadata(judged):
    run = judged["allowed"]
    assert run.result.success, [e.event_specific_data for e in run.result.get_step_failure_events()]
    section = _answer_section(run)
    assert re.search(r"^\| bm25 \| judge \(self-judged\) \|", section, re.MULTILINE), section
    assert "*(self-judged)*" in section
    metrics = pd.read_parquet(next((run.variants / "answer_metrics").glob("*/*.parquet")))
    assert metrics.set_index("grader").loc["judge", "yardstick"].endswith("+self-judged")
    (materialization,) = [m for m in run.result.asset_materializations_for_node("answer_metrics")]
    assert materialization.metadata["judge self-judged"].value is True
    (graded,) = [m for m in run.result.asset_materializations_for_node("graded_answers")]
    assert graded.metadata["judge independence"].value == "self"
    assert graded.metadata["judge"].value.endswith(" gen-model")
    warnings = [r.user_message for r in run.instance.all_logs(run.result.run_id) if "self-judged:" in r.user_message]
    assert warnings


@pytest.mark.integration
def test_no_api_key_in_the_event_log_or_the_run_record(judged):
    for name, run in judged.items():
        kept = _event_text(run)
        for key in (GEN_KEY, JUDGE_KEY, EMBED_KEY):
            assert key not in kept, (name, key)
        report = (run.results / "results.md").read_text() if (run.results / "results.md").exists() else ""
        assert GEN_KEY not in report and JUDGE_KEY not in report
