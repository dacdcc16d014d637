"""The answer-quality wiring without Dagster runs, a database or a model: the variants file's
`answers:` section, the preflight in the first step, a limited golden run, mixed generator
identities through the gate, and which grades can become a yardstick.

Answers here come from `ScriptedGenerator` (an LLM-shaped generator with a scripted reply and
a scripted reported model), through the real `answer_variants`, `grade_variants`,
`answer_metric_frames` and `judge_answer_run`, wired as assets/answer_quality.py wires them.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest

from eval_pipeline.answering.cache import AnswerCache
from eval_pipeline.answering.llm import GeneratedAnswer
from eval_pipeline.answering.prompts import CheckedGoldenSet, resolve_golden
from eval_pipeline.answering.run import answer_variants
from eval_pipeline.answering.served import ServedBy
from eval_pipeline.config.sweep import load_sweep, parse_sweep
from eval_pipeline.gates.answers import DEFAULT_ANSWER_TOLERANCES
from eval_pipeline.grading.run import (
    DEFAULT_GRADERS,
    grade_variants,
    grading_code,
)
from eval_pipeline.grading.summary import (
    answer_metric_frames,
)
from eval_pipeline.questions.golden import (
    Assertion,
    GoldenPrompt,
    GoldenPromptError,
    GoldenPromptSet,
)
from eval_pipeline.ranking.variants import VariantConfigError
from eval_pipeline.reporting.answers import (
    answer_gate_checks,
    answer_gate_output,
    answer_section,
)
from eval_pipeline.verdict.answers import judge_answer_run

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
TINY_GOLDEN = FIXTURES / "tiny_golden.jsonl"


# --------------------------------------------------------------------------------------------
# helpers (also used by tests/orchestration/test_answer_quality_job.py)
# --------------------------------------------------------------------------------------------


class ScriptedGenerator:
    """Answers like `LLMGenerator` (one `answer` per prompt, a `ServedBy` per answer) from a
    script: `reply(prompt, context) -> text`, `reported(prompt) -> model the response names`."""

    llm = None  # no client: answer_variants calls `answer` one by one

    def __init__(self, reply, *, reported=lambda prompt: "fake-1-0613", model="fake-1",
                 provider="api.example.com"):
        self.reply, self.reported, self.model, self.provider = reply, reported, model, provider

    def identity(self) -> dict:
        return {"kind": "scripted", "provider": self.provider, "model": self.model}

    def answer(self, question, context) -> GeneratedAnswer:
        return GeneratedAnswer(text=self.reply(question, context),
                               served=ServedBy(self.provider, self.model, self.reported(question)),
                               prompt_tokens=10, completion_tokens=5, seconds=0.01)


def ranked_frame(golden: CheckedGoldenSet, texts: dict[str, str]) -> pd.DataFrame:
    """A variant's ranked results of the golden prompts: each prompt's gold document first
    (chunk `<doc>:0`), then the other documents."""
    docs = sorted({c.split(":")[0] for c in texts})
    rows = []
    for p in golden.prompts:
        order = [*p.gold, *[d for d in docs if d not in p.gold]]
        rows.append({"qid": p.id, "chunk_ids": [f"{d}:0" for d in order], "doc_ids": order, "error": None,
                     "latency_ms": 2.0})
    return pd.DataFrame(rows)


def answer_chain(golden: CheckedGoldenSet, generator, cache_dir: Path, *, texts: dict[str, str],
                 variants=("dense",), keep_text=False, graders=DEFAULT_GRADERS, k=3):
    """answers -> graded_answers -> answer_metrics, as the assets call them (the yardstick
    column added as graded_answers adds it)."""
    cache = AnswerCache(cache_dir)
    frames = {v: ranked_frame(golden, texts) for v in variants}
    answers = answer_variants(frames, golden, texts=texts, generator=generator, cache=cache, k=k,
                              keep_text=keep_text)
    graded, yardsticks = grade_variants(answers, golden, graders=list(graders), cache=cache)
    graded = {v: f.assign(yardstick=f["grader"].map(yardsticks[v])) for v, f in graded.items()}
    metrics, metadata = answer_metric_frames(answers, graded, golden)
    return answers, graded, metrics, metadata


def tiny_texts(snapshot) -> dict[str, str]:
    return {f"{d.doc_id}:0": d.content for d in snapshot.documents}


def tiny_golden(snapshot, limit=None) -> CheckedGoldenSet:
    return resolve_golden("file", str(TINY_GOLDEN), corpus_signature=snapshot.signature,
                          doc_ids=[d.doc_id for d in snapshot.documents], limit=limit)


def quoting(prompt, context) -> str:
    """The first sentence of the first context entry, cited."""
    return context[0].text.split(". ")[0] + ". [1]" if context else ""


def judge(metrics, *, strict=False, run_id="run-1", corpus_signature="corpus-1", connection_string=None,
          tolerances=None):
    return judge_answer_run(metrics, order=list(metrics), corpus_signature=corpus_signature,
                            tolerances=dict(tolerances or DEFAULT_ANSWER_TOLERANCES), strict=strict,
                            connection_string=connection_string, run_id=run_id)


# --------------------------------------------------------------------------------------------
# 6. the variants file's answers section
# --------------------------------------------------------------------------------------------


def _variants_file(tmp_path, gate: str, name="variants.yaml") -> Path:
    path = tmp_path / name
    path.write_text(f"variants: [bm25]\nanswers:\n  gate:\n{gate}", encoding="utf-8")
    return path


@pytest.mark.parametrize("setting, value, line", [
    ("max_pass_rate_drop", '"abc"', "'abc'"),
    ("max_pass_rate_drop", "abc", "'abc'"),
    ("max_pass_rate_drop", "1.5", "1.5"),
    ("max_mean_score_drop", "-0.1", "-0.1"),
    ("max_pass_rate_drop", ".nan", "nan"),
    ("max_mean_score_drop", ".inf", "inf"),
    ("max_pass_rate_drop", '"0x1"', "'0x1'"),  # unquoted, YAML 1.1 reads 0x1 as the integer 1
    ("max_pass_rate_drop", "true", "True"),
    ("max_pass_rate_drop", "", "None"),
])
def test_a_bad_answer_tolerance_is_refused_naming_the_file_and_setting(tmp_path, setting, value, line):
    path = _variants_file(tmp_path, f"    {setting}: {value}\n")
    with pytest.raises(VariantConfigError) as caught:
        load_sweep(path)
    message = str(caught.value)
    assert message.startswith(f"{path}:")  # the file (and the line of the answers section)
    assert f"answers.gate: {setting} must be a finite number in [0, 1]" in message
    assert message.endswith(f"got {line}")


def test_an_unknown_answer_tolerance_names_the_valid_ones(tmp_path):
    path = _variants_file(tmp_path, "    max_pass_rate: 0.1\n")
    with pytest.raises(VariantConfigError, match=r"unknown answer gate tolerance\(s\) 'max_pass_rate'; valid "
                                                 r"settings: max_pass_rate_drop, max_mean_score_drop"):
        load_sweep(path)


@pytest.mark.parametrize("value, expected", [("1e-2", 0.01), ("-0.0", 0.0), ("0", 0.0), ("1", 1.0),
                                             ("5E-1", 0.5), ('" 0.05 "', 0.05), (".5", 0.5)])
def test_edge_tolerances_load(tmp_path, value, expected):
    sweep = load_sweep(_variants_file(tmp_path, f"    max_pass_rate_drop: {value}\n    max_mean_score_drop: {value}\n"))
    for name in ("max_pass_rate_drop", "max_mean_score_drop"):
        got = sweep.answer_tolerances[name]
        assert type(got) is float and got == expected
        assert math.copysign(1.0, got) == 1.0  # -0.0 comes back as 0.0


def test_pyyaml_reads_1e_2_as_a_string_and_it_still_loads(tmp_path):
    import yaml

    assert yaml.safe_load("x: 1e-2")["x"] == "1e-2"  # the reason strings are accepted at all
    sweep = parse_sweep({"variants": ["bm25"], "answers": {"gate": {"max_pass_rate_drop": "1e-2"}}})
    assert sweep.answer_tolerances == {"max_pass_rate_drop": 0.01, "max_mean_score_drop": 0.1}


def test_answer_gate_defaults_and_strictness(tmp_path):
    plain = parse_sweep({"variants": ["bm25"]})
    assert plain.answer_tolerances == DEFAULT_ANSWER_TOLERANCES and plain.answer_strict is False
    follows = parse_sweep({"variants": ["bm25"], "gate": {"strict": True}})
    assert follows.answer_strict is True  # the retrieval gate's strictness by default
    own = parse_sweep({"variants": ["bm25"], "gate": {"strict": True}, "answers": {"gate": {"strict": False}}})
    assert own.answer_strict is False
    with pytest.raises(VariantConfigError, match=r"answers.gate.strict must be true or false, got 'yes'"):
        parse_sweep({"variants": ["bm25"], "answers": {"gate": {"strict": "yes"}}})
    with pytest.raises(VariantConfigError, match="answers must be a mapping with 'gate' and/or 'prices'"):
        parse_sweep({"variants": ["bm25"], "answers": {"gates": {}}})


# --------------------------------------------------------------------------------------------
# 3, 4, 5. the preflight in the first step
# --------------------------------------------------------------------------------------------


class ForbiddenLLM:
    """An LLM resource that must not be asked for a client."""

    def __init__(self):
        self.asked = 0

    def get(self):
        self.asked += 1
        raise AssertionError("the LLM resource was asked for a client, but nothing chose a model")


class CountingLLM(ForbiddenLLM):
    def get(self):
        self.asked += 1
        return object()


def _context(ops: dict, selection=None):
    """A stand-in for the first step's context: the run's config and selection, and a job of
    every answer asset (what a whole-job run materializes)."""
    from dagster import AssetKey

    everything = {AssetKey(k) for k in ("golden_prompts", "answers", "graded_answers")}
    return SimpleNamespace(run=SimpleNamespace(run_config={"ops": ops}, asset_selection=selection),
                           job_def=SimpleNamespace(asset_layer=SimpleNamespace(selected_asset_keys=everything)))


def test_preflight_refuses_a_grader_listed_twice(tiny_snapshot):
    from assets.answer_quality import preflight_answers

    ops = {"graded_answers": {"config": {"graders": ["deterministic", "static", "deterministic"]}}}
    with pytest.raises(ValueError, match=r"graded_answers.graders: grader 'deterministic' is listed twice"):
        preflight_answers(_context(ops), tiny_snapshot, ForbiddenLLM())


def test_an_unknown_grader_is_not_a_valid_setting():
    from assets.answer_quality import GradedAnswersConfig

    with pytest.raises(Exception, match="judgee"):
        GradedAnswersConfig(graders=["deterministic", "judgee"])


def test_the_default_answer_settings_never_ask_for_a_model(tiny_snapshot):
    from assets.answer_quality import preflight_answers

    llm = ForbiddenLLM()
    preflight_answers(_context({}), tiny_snapshot, llm)
    ops = {"golden_prompts": {"config": {"source": "file", "path": str(TINY_GOLDEN)}},
           "answers": {"config": {"context_k": 2, "keep_text": True}},
           "graded_answers": {"config": {"graders": ["static", "deterministic"]}}}
    preflight_answers(_context(ops), tiny_snapshot, llm)
    assert llm.asked == 0


@pytest.mark.parametrize("ops", [
    {"answers": {"config": {"generator": "llm"}}},
    {"graded_answers": {"config": {"graders": ["deterministic", "judge"]}}},
    {"graded_answers": {"config": {"graders": ["decision"]}}},
])
def test_a_chosen_model_is_checked_in_the_preflight(tiny_snapshot, ops):
    from assets.answer_quality import preflight_answers
    from resources import LLMResource

    llm = CountingLLM()
    preflight_answers(_context(ops), tiny_snapshot, llm)
    assert llm.asked == 1
    with pytest.raises(ValueError, match=r"llm.model is not set \(EVAL_PIPELINE_LLM_MODEL\)"):
        preflight_answers(_context(ops), tiny_snapshot, LLMResource())


def bad_golden_file(folder: Path) -> Path:
    """The tiny golden set with line 3 (its second prompt) given a form that does not exist."""
    lines = TINY_GOLDEN.read_text(encoding="utf-8").splitlines()
    prompt = json.loads(lines[2])
    prompt["form"] = "SOMETIMES"
    lines[2] = json.dumps(prompt)
    path = folder / "bad_golden.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_preflight_names_the_bad_golden_file_line_and_field(tmp_path, tiny_snapshot):
    from assets.answer_quality import preflight_answers

    path = bad_golden_file(tmp_path)
    ops = {"golden_prompts": {"config": {"source": "file", "path": str(path)}}}
    with pytest.raises(GoldenPromptError, match=rf"^{path}:3: field 'form': is 'SOMETIMES'; valid: MATCH, GAP"):
        preflight_answers(_context(ops), tiny_snapshot, ForbiddenLLM())


def test_the_tiny_golden_fixture_fits_the_tiny_corpus(tiny_snapshot):
    golden = tiny_golden(tiny_snapshot)
    assert golden.golden.set_id == "test.tiny" and not golden.limited
    assert golden.golden.header["corpus_signature"] == tiny_snapshot.signature
    assert len(golden.prompts) == 7


# --------------------------------------------------------------------------------------------
# 7. mixed generator identity
# --------------------------------------------------------------------------------------------


def test_answers_from_two_reported_models_leave_the_generator_unknown(tmp_path, tiny_snapshot):
    golden = tiny_golden(tiny_snapshot)
    odd = golden.prompts[2].prompt
    generator = ScriptedGenerator(quoting, reported=lambda prompt: "fake-1-0614" if prompt == odd else "fake-1-0613")
    answers, _, metrics, metadata = answer_chain(golden, generator, tmp_path, texts=tiny_texts(tiny_snapshot))
    assert answers["dense"]["model_reported"].value_counts().to_dict() == {"fake-1-0613": 6, "fake-1-0614": 1}
    assert metrics["dense"]["generator"].isna().all()
    assert metadata["dense"]["generator"] == "unknown"

    lenient = judge(metrics, strict=False)
    assert {g.state for g in lenient.gates["dense"].values()} == {"not_comparable"}
    assert lenient.variant_passed("dense")
    assert all("generator is unknown" in g.message and g.message.startswith("WARNING")
               for g in lenient.gates["dense"].values())
    assert not any(r["eligible"] for r in lenient.records)
    assert all(r["generator"] is None for r in lenient.records)
    passed, metadata = answer_gate_checks({"answers": answer_gate_output(lenient)}, ["dense"])["dense"]
    assert passed and metadata["generator"] == "unknown" and metadata["deterministic state"] == "not_comparable"
    assert "unknown (mixed, missing or invalid identity)" in "\n".join(answer_section(lenient))

    strict = judge(metrics, strict=True)
    assert {g.state for g in strict.gates["dense"].values()} == {"not_comparable"}
    assert not strict.variant_passed("dense")
    assert all(g.message.startswith("FAILED (strict)") for g in strict.gates["dense"].values())
    passed, _ = answer_gate_checks({"answers": answer_gate_output(strict)}, ["dense"])["dense"]
    assert not passed


def test_one_reported_model_is_a_known_generator(tmp_path, tiny_snapshot):
    golden = tiny_golden(tiny_snapshot)
    _, _, metrics, _ = answer_chain(golden, ScriptedGenerator(quoting), tmp_path, texts=tiny_texts(tiny_snapshot))
    assert set(metrics["dense"]["generator"]) == {"api.example.com:fake-1->fake-1-0613"}
    verdict = judge(metrics, strict=False)
    assert {g.state for g in verdict.gates["dense"].values()} == {"first_run"} and verdict.variant_passed("dense")
    assert not judge(metrics, strict=True).variant_passed("dense")  # strict: a first run is judged once accepted


# --------------------------------------------------------------------------------------------
# 8. a limited golden run
# --------------------------------------------------------------------------------------------


def test_a_limited_golden_run_is_suffixed_and_never_eligible(tmp_path, tiny_snapshot):
    golden = tiny_golden(tiny_snapshot, limit=2)
    assert golden.limited and golden.limited_from == 7
    assert [p.id for p in golden.prompts] == ["g1", "g2"]
    assert golden.set_name == "test.tiny[limited: 2 prompts]"
    assert not tiny_golden(tiny_snapshot, limit=7).limited  # the whole set is not a part of it

    _, _, metrics, _ = answer_chain(golden, ScriptedGenerator(quoting), tmp_path, texts=tiny_texts(tiny_snapshot))
    assert metrics["dense"]["limited"].all() and set(metrics["dense"]["set_name"]) == {golden.set_name}
    verdict = judge(metrics, strict=False)
    assert {g.state for g in verdict.gates["dense"].values()} == {"not_comparable"}
    assert all(r["limited"] is True and r["eligible"] is False for r in verdict.records)
    assert {r["provenance"]["set_name"] for r in verdict.records} == {"test.tiny[limited: 2 prompts]"}
    assert "Golden set `test.tiny[limited: 2 prompts]`" in "\n".join(answer_section(verdict))


# --------------------------------------------------------------------------------------------
# 9. answer text only when asked
# --------------------------------------------------------------------------------------------


def test_answer_text_only_when_asked(tmp_path, tiny_snapshot):
    golden = tiny_golden(tiny_snapshot)
    texts = tiny_texts(tiny_snapshot)
    hidden, graded, _, _ = answer_chain(golden, ScriptedGenerator(quoting), tmp_path / "a", texts=texts)
    assert hidden["dense"]["answer"].isna().all()
    cache = AnswerCache(tmp_path / "a")
    said = {row.prompt_id: cache.get(row.answer_key)["text"] for row in hidden["dense"].itertuples()}
    reasons = graded["dense"].set_index(["prompt_id", "grader"])["reason"]
    assert reasons[("g7", "deterministic")] == "the trimmed answer is not exactly the expected value"
    assert not [(k, r) for k, r in reasons.items() if said[k[0]] and said[k[0]] in r]

    shown, graded, _, _ = answer_chain(golden, ScriptedGenerator(quoting), tmp_path / "b", texts=texts,
                                       keep_text=True)
    assert list(shown["dense"]["answer"]) == [said[p] for p in shown["dense"]["prompt_id"]]
    reason = graded["dense"].set_index(["prompt_id", "grader"])["reason"][("g7", "deterministic")]
    assert reason.startswith("trimmed answer ") and said["g7"][:20] in reason


# --------------------------------------------------------------------------------------------
# which rows may become a yardstick
# --------------------------------------------------------------------------------------------


def _contains_only_set() -> CheckedGoldenSet:
    prompts = tuple(GoldenPrompt(id=f"p{i}", prompt=f"What does document {d} say?", assertions=(Assertion.contains("the"),),
                                 gold=(d,)) for i, d in enumerate(["kettle-care", "bike-storage", "vpn-setup"]))
    return CheckedGoldenSet(GoldenPromptSet("test.nostatic", prompts, "inline"), "corpus-1", "inline")


def test_a_grader_that_scored_nothing_is_never_eligible(tmp_path, tiny_snapshot):
    """The default static grader on a set without code prompts scores nothing: its gate passes
    (first run) but the row is recorded ineligible (record_answer_run refuses eligible=True on
    it, which used to fail the report step of every such run)."""
    _, _, metrics, _ = answer_chain(_contains_only_set(), ScriptedGenerator(quoting), tmp_path,
                                         texts=tiny_texts(tiny_snapshot))
    static = metrics["dense"].set_index("grader").loc["static"]
    assert static["n_scored"] == 0 and pd.isna(static["pass_rate"])
    verdict = judge(metrics)
    assert verdict.variant_passed("dense")  # nothing to judge is no failure...
    records = {r["grader"]: r for r in verdict.records}
    assert records["deterministic"]["eligible"] is True
    assert records["static"]["eligible"] is False  # ...but no yardstick either


# --------------------------------------------------------------------------------------------
# failed answers, shared answers, no golden set
# --------------------------------------------------------------------------------------------


class CountingGenerator(ScriptedGenerator):
    def __init__(self, reply, fail=()):
        super().__init__(reply)
        self.asked, self.fail = [], set(fail)

    def answer(self, question, context):
        self.asked.append(question)
        if question in self.fail:
            raise RuntimeError("503 from the endpoint (injected)")
        return super().answer(question, context)


def test_variants_with_the_same_context_share_one_answer(tmp_path, tiny_snapshot):
    golden = tiny_golden(tiny_snapshot)
    generator = CountingGenerator(quoting)
    answers, _, _, _ = answer_chain(golden, generator, tmp_path, texts=tiny_texts(tiny_snapshot),
                                    variants=("dense", "bm25"))
    assert len(generator.asked) == len(golden.prompts)  # one call per distinct (prompt, context)
    assert list(answers["dense"]["answer_key"]) == list(answers["bm25"]["answer_key"])
    again = CountingGenerator(quoting)
    answer_chain(golden, again, tmp_path, texts=tiny_texts(tiny_snapshot), variants=("dense", "bm25"))
    assert again.asked == []  # all cached


# pandas 3 stores a missing `error` as NaN (not None) in a column that also holds a string, and
# Parquet keeps it: the tests below failed while a cell was read with `is None`.


def test_a_failed_answer_is_counted_never_cached_and_fails_the_gate(tmp_path, tiny_snapshot):
    golden = tiny_golden(tiny_snapshot)
    texts = tiny_texts(tiny_snapshot)
    flaky = CountingGenerator(quoting, fail={golden.prompts[1].prompt})
    answers, graded, metrics, _ = answer_chain(golden, flaky, tmp_path, texts=texts)
    frame = answers["dense"]
    assert frame["error"].notna().sum() == 1 and "503 from the endpoint" in frame["error"].dropna().iloc[0]
    failed = graded["dense"][graded["dense"]["prompt_id"] == golden.prompts[1].id]
    assert set(failed["status"]) == {"no_answer", "not_applicable"}  # deterministic no_answer; static n/a
    assert (metrics["dense"]["n_errored"] == 1).all()
    verdict = judge(metrics)
    assert not verdict.variant_passed("dense")
    assert all("could not be generated" in g.message for g in verdict.gates["dense"].values())
    assert not any(r["eligible"] for r in verdict.records)

    retry = CountingGenerator(quoting)
    answers, _, metrics, _ = answer_chain(golden, retry, tmp_path, texts=texts)
    assert retry.asked == [golden.prompts[1].prompt]  # only the failed one is asked again
    assert answers["dense"]["error"].isna().all() and judge(metrics).variant_passed("dense")


def test_no_golden_set_is_reported_not_evaluated_and_passes(tmp_path, tiny_snapshot):
    from eval_pipeline.answering.run import ANSWER_COLUMNS

    golden = resolve_golden("none", None, corpus_signature=tiny_snapshot.signature, doc_ids=[])
    answers = {"dense": pd.DataFrame(columns=ANSWER_COLUMNS)}
    graded, yardsticks = grade_variants(answers, golden, graders=list(DEFAULT_GRADERS), cache=AnswerCache(tmp_path))
    graded = {v: f.assign(yardstick=f["grader"].map(yardsticks[v])) for v, f in graded.items()}
    metrics, metadata = answer_metric_frames(answers, graded, golden)
    assert metadata["dense"] == {"evaluated": False, "reason": "golden_prompts.source is 'none'"}
    verdict = judge(metrics)
    assert not verdict.evaluated and verdict.records == []
    assert "Not evaluated: no variant has answer metrics" in "\n".join(answer_section(verdict))
    passed, check = answer_gate_checks({"answers": answer_gate_output(verdict)}, ["dense"])["dense"]
    assert passed and check["evaluated"] is False


def test_a_failed_retrieval_fails_only_its_prompt(tmp_path, tiny_snapshot):
    golden = tiny_golden(tiny_snapshot)
    texts = tiny_texts(tiny_snapshot)
    rows = ranked_frame(golden, texts).to_dict(orient="records")
    rows[1]["error"] = "connection lost"
    ranked = pd.DataFrame(rows)  # as the sweep builds its results: the missing errors are NaN
    answers = answer_variants({"dense": ranked}, golden, texts=texts, generator=ScriptedGenerator(quoting),
                              cache=AnswerCache(tmp_path), k=3)
    errors = answers["dense"]["error"]
    assert errors.iloc[1] == "retrieval failed: connection lost"
    assert errors.drop(index=1).isna().all(), errors.tolist()


def test_a_changed_context_size_or_generator_setting_is_named_not_hidden():
    """A run is compared across a treatment change (that is what a team tunes), and the
    report names it: what changed since the previous run that the comparison key does not hold."""
    from eval_pipeline.verdict.answers import treatment_changes

    before = {"provenance": {"treatment": {"context_k": 5, "generator": {"kind": "llm", "max_tokens": None}}}}
    now = {"context_k": 3, "generator": {"kind": "llm", "max_tokens": 200}}
    # one format with the retrieval history's setting changes (history.runs.setting_changes)
    assert treatment_changes(now, before) == ["context_k: 5 -> 3", "generator.max_tokens: None -> 200"]
    assert treatment_changes(before["provenance"]["treatment"], before) == []
    assert treatment_changes(now, None) == [] and treatment_changes(now, {"provenance": {}}) == []


# --------------------------------------------------------------------------------------------
# found by an attack review of the verdict
# --------------------------------------------------------------------------------------------


def test_a_shared_answer_is_spent_once(tmp_path, tiny_snapshot):
    """Two variants with the same context share one generated answer: it is 'not cached' (this
    run paid for it) for the first only, so the run's spend is not counted twice."""
    golden = tiny_golden(tiny_snapshot)
    answers, _, _, _ = answer_chain(golden, ScriptedGenerator(quoting), tmp_path, texts=tiny_texts(tiny_snapshot),
                                    variants=("dense", "bm25"))
    assert not answers["dense"]["cached"].any() and answers["bm25"]["cached"].all()


def test_a_prompt_asking_for_code_fails_the_static_grader_when_the_answer_has_none(tmp_path, tiny_snapshot):
    """Dropping the code must not move the prompt out of the denominator (a pass rate that
    rises when answers get worse)."""
    golden = tiny_golden(tiny_snapshot)
    _, graded, _, _ = answer_chain(golden, ScriptedGenerator(lambda p, c: "I cannot write that code."), tmp_path,
                                   texts=tiny_texts(tiny_snapshot), graders=("static",))
    static = graded["dense"]
    with_options = {p.id for p in golden.prompts if p.static is not None}
    rows = static[static["prompt_id"].isin(with_options)]
    assert len(rows) and (rows["status"] == "graded").all() and not rows["passed"].any()
    assert set(static["yardstick"]) == {f"static:v2+{grading_code()}"}  # the version and the grading code


def test_a_grader_that_failed_on_an_answer_fails_the_gate():
    from eval_pipeline.gates.answers import evaluate_answer_gate

    current = {"run_id": "r2", "variant": "v", "grader": "judge", "set_id": "a.b", "set_fingerprint": "f",
               "corpus_signature": "c", "generator": "h:m->m", "yardstick": "judge:h:m:v1@t0", "limited": False,
               "errored": 0, "n_scored": 5, "pass_rate": 1.0, "mean_score": 1.0}
    assert evaluate_answer_gate(current, None, None, {"max_pass_rate_drop": 0.1, "max_mean_score_drop": 0.1},
                                strict=False).passed
    failed = evaluate_answer_gate({**current, "grader_failed": 1}, None, None,
                                  {"max_pass_rate_drop": 0.1, "max_mean_score_drop": 0.1}, strict=False)
    assert not failed.passed and "no grade" in failed.message


def test_nothing_measured_is_not_a_first_run_that_passes_forever():
    from eval_pipeline.gates.answers import evaluate_answer_gate

    current = {"run_id": "r1", "variant": "v", "grader": "deterministic", "set_id": "a.b", "set_fingerprint": "f",
               "corpus_signature": "c", "generator": "h:m->m", "yardstick": "deterministic:v1", "limited": False,
               "errored": 0, "n_scored": 0, "pass_rate": float("nan"), "mean_score": float("nan")}
    tolerances = {"max_pass_rate_drop": 0.1, "max_mean_score_drop": 0.1}
    lenient = evaluate_answer_gate(current, None, None, tolerances, strict=False)
    assert lenient.passed and lenient.state == "not_comparable" and "nothing was measured" in lenient.message
    assert not evaluate_answer_gate(current, None, None, tolerances, strict=True).passed


def test_the_grading_models_sampling_is_part_of_its_yardstick():
    """With the code that routes its grades into rows and numbers (`grading_code`)."""
    from eval_pipeline.grading.run import _with_sampling, grading_code

    assert _with_sampling("judge:host:model:v1+abcd1234", "t0") == f"judge:host:model:v1+abcd1234@t0+{grading_code()}"
    assert _with_sampling("judge:host:model:v1+abcd1234", "t0.7") != _with_sampling("judge:host:model:v1+abcd1234",
                                                                                    "t0")
    assert _with_sampling("judge", "t0") == "judge" and _with_sampling("judge:failed", "t0") == "judge:failed"
    from eval_pipeline.history.answers import answer_comparable

    row = {"variant": "v", "grader": "judge", "set_id": "a.b", "set_fingerprint": "f", "corpus_signature": "c",
           "generator": "h:m->m", "yardstick": _with_sampling("judge:host:model:v1+abcd1234", "t0"), "limited": False}
    assert answer_comparable(row)[0]


def test_endpoints_are_stored_without_credentials():
    from eval_pipeline.answering.served import safe_identity, safe_url

    assert safe_url("https://user:s3cret@api.example.com:8443/v1?key=sk-XYZ#f") == "https://api.example.com:8443/v1"
    identity = {"kind": "llm", "llm": {"base_url": "https://u:p@h/v1?api_key=sk-1", "model": "m"}}
    assert "sk-1" not in str(safe_identity(identity)) and "u:p" not in str(safe_identity(identity))


def test_answer_metrics_from_another_corpus_or_configuration_are_refused():
    import json

    from eval_pipeline.ranking.inputs import InconsistentInputs
    from eval_pipeline.verdict.answers import check_answers_belong

    frame = pd.DataFrame([{"corpus_signature": "old", "store_table": "t1", "variant_config": json.dumps({"k": 1})}])
    with pytest.raises(InconsistentInputs, match="corpus 'old'"):
        check_answers_belong({"hybrid": frame}, corpus_signature="new", tables={"hybrid": "t1"}, variant_configs={})
    same_corpus = frame.assign(corpus_signature="new")
    with pytest.raises(InconsistentInputs, match="another configuration"):
        check_answers_belong({"hybrid": same_corpus}, corpus_signature="new", tables={"hybrid": "t1"},
                             variant_configs={"hybrid": {"k": 2}})
    check_answers_belong({"hybrid": same_corpus}, corpus_signature="new", tables={"hybrid": "t1"}, variant_configs={"hybrid": {"k": 1}})
