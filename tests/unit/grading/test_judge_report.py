"""The judge, grounding, repair and calibration as the answer half wires them, without Dagster:
answers written and repaired through the real `openai` client against the OpenAI-compatible test
server, graded by a judge client of its own (static, grounding with a corpus probe, judge),
calibrated on a small labelled file, then `answer_metric_frames` -> `judge_answer_run` -> the
report's answer section and the files beside it."""

from __future__ import annotations

import json
import math

import pandas as pd
import pytest

from eval_pipeline.answering.cache import AnswerCache
from eval_pipeline.answering.llm import LLMGenerator
from eval_pipeline.answering.prompts import CheckedGoldenSet
from eval_pipeline.answering.repair import repair_answers
from eval_pipeline.answering.run import answer_variants
from eval_pipeline.common.llm import LLMClient
from eval_pipeline.gates.answers import DEFAULT_ANSWER_TOLERANCES
from eval_pipeline.grading.grounding import TextCorpusProbe
from eval_pipeline.grading.independence import judge_independence
from eval_pipeline.grading.run import (
    calibrate_graders,
    check_calibration,
    grade_variants,
    static_failures,
)
from eval_pipeline.grading.summary import (
    METRIC_COLUMNS,
    answer_metric_frames,
)
from eval_pipeline.questions.golden import GoldenPrompt, GoldenPromptSet, StaticOptions
from eval_pipeline.reporting.answers import answer_gate_checks, answer_gate_output, answer_section, write_answer_files
from eval_pipeline.reporting.publish import owned_by
from eval_pipeline.verdict.answers import judge_answer_run
from tests.openai_stub import OpenAIStub

STATIC = StaticOptions(allowed_imports=("numpy",), symbols=("numpy.array",))
GOOD = "Use `numpy.array` [1].\n```python\nimport numpy\n```"
PROMPTS = (
    GoldenPrompt("p1", "Make an array (fixable)", static=STATIC),
    GoldenPrompt("p2", "What is an array?"),
    GoldenPrompt("p3", "Make an array (fine)", static=STATIC),
)
GOLDEN = CheckedGoldenSet(GoldenPromptSet("t.judge", PROMPTS, "memory"), "corpus-1", "test")
TEXTS = {"doc:0": "An array is made from a list of numbers with numpy.array in numpy."}
CORPUS = [*TEXTS.values(), "The helper `arrays.stack` joins arrays."]
JUDGE_REPLY = '{"faithfulness": 5, "relevance": 4, "citations": 5, "reason": "Supported."}'
JUDGE_FAIL = '{"faithfulness": 1, "relevance": 1, "citations": 1, "reason": "Unsupported."}'


def chat(body):
    """The generator's answers (a repair fixes p1) and the judge's grades (a calibration row
    marked BAD fails)."""
    system, user = body["messages"][0]["content"], body["messages"][-1]["content"]
    if system.startswith("You grade an answer"):
        return JUDGE_FAIL if "BAD" in user else JUDGE_REPLY
    if "(fixable)" in user:
        return GOOD if "It failed these checks:" in user else "```python\nimport requests\n```"
    if "(fine)" in user:
        return GOOD
    return "An array is a list of numbers [1]; see `arrays.stack` and `magic.fix()`."


@pytest.fixture(scope="module")
def stub():
    with OpenAIStub(chat=chat) as server:
        yield server


def ranked(golden):
    return pd.DataFrame([{"qid": p.id, "chunk_ids": ["doc:0"], "doc_ids": ["doc"], "error": None, "latency_ms": 1.0}
                         for p in golden.prompts])


def calibration_file(tmp_path):
    path = tmp_path / "calibration.jsonl"
    rows = [{"id": f"c{i}", "question": "What is an array?", "text": ("BAD " if i % 3 == 0 else "") + "A list [1].",
             "context": ["An array is a list."], "human": i % 3 != 0 and i != 4} for i in range(1, 9)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.fixture(scope="module")
def graded(stub, tmp_path_factory):
    """answers (repaired) -> grades (self-judged, allowed) -> calibration -> metrics -> verdict."""
    root = tmp_path_factory.mktemp("judge_report")
    cache = AnswerCache(root / "answers")
    generator = LLMGenerator(llm=LLMClient(model="gen-model", base_url=stub.base_url, api_key="sk-gen-secret",
                                           max_retries=0))
    judge = LLMClient(model="gen-model", base_url=stub.base_url, api_key="sk-judge-secret", max_retries=0)
    answers = answer_variants({"v": ranked(GOLDEN)}, GOLDEN, texts=TEXTS, generator=generator, cache=cache, k=1)
    answers = repair_answers(answers, GOLDEN, generator=generator, cache=cache, check=static_failures)
    answers = {v: f.assign(store_table="chunks_t") for v, f in answers.items()}
    independence = judge_independence(stub.base_url, "gen-model", judge.base_url, judge.model,
                                      allow_self_judging=True, graders=("judge",))
    grades, yardsticks = grade_variants(answers, GOLDEN, graders=["static", "grounding", "judge"], cache=cache,
                                        llm=judge, grade_cache=root / "grades", corpus_probe=TextCorpusProbe(CORPUS),
                                        self_judged=independence.kind == "self")
    calibrations = calibrate_graders(calibration_file(root), ["static", "grounding", "judge"], llm=judge,
                                     grade_cache=root / "grades")
    grades = {v: f.assign(yardstick=f["grader"].map(yardsticks[v]),
                          calibration_json=f["grader"].map({g: json.dumps(c) for g, c in calibrations.items()})
                          .fillna("")) for v, f in grades.items()}
    metrics, metadata = answer_metric_frames(answers, grades, GOLDEN)
    verdict = judge_answer_run(metrics, order=["v"], corpus_signature="corpus-1",
                               tolerances=dict(DEFAULT_ANSWER_TOLERANCES), strict=False, connection_string=None,
                               run_id="run-1")
    return {"answers": answers, "grades": grades, "metrics": metrics, "metadata": metadata, "verdict": verdict,
            "calibrations": calibrations, "independence": independence}


def test_a_self_judged_number_is_labelled_everywhere(graded):
    assert graded["independence"].kind == "self"
    row = graded["metrics"]["v"].set_index("grader")
    assert list(graded["metrics"]["v"].columns) == METRIC_COLUMNS
    assert row.loc["judge", "yardstick"].endswith("+self-judged") and bool(row.loc["judge", "self_judged"])
    assert not bool(row.loc["static", "self_judged"]) and not bool(row.loc["grounding", "self_judged"])
    section = "\n".join(answer_section(graded["verdict"]))
    assert "| v | judge (self-judged) |" in section
    assert "*(self-judged)*: the grader's model wrote the answers" in section
    assert graded["metadata"]["v"]["judge self-judged"] is True
    output = answer_gate_output(graded["verdict"])
    assert output["variants"]["v"]["graders"]["judge"]["self_judged"] is True
    (_, checks), = answer_gate_checks({"answers": output}, ["v"]).items()
    assert checks[1]["judge self-judged"] is True and "static self-judged" not in checks[1]


def test_grounding_columns_with_the_corpus_probe(graded):
    row = graded["metrics"]["v"].set_index("grader").loc["grounding"]
    # p2's answer names `arrays.stack` (in the corpus, not its context) and magic.fix (nowhere)
    assert 0 < row["grounded_rate"] < 1 and row["grounded_rate"] < row["corpus_rate"] < 1
    metadata = graded["metadata"]["v"]
    assert metadata["grounded_rate"] == pytest.approx(row["grounded_rate"])
    assert metadata["corpus_rate"] == pytest.approx(row["corpus_rate"])
    assert metadata["citations_per_answer"] == pytest.approx(1.0)
    section = "\n".join(answer_section(graded["verdict"]))
    assert "### Grounding" in section
    assert "| variant | grounded rate | corpus rate | citations / answer |" in section
    assert f"| v | {row['grounded_rate']:.3f} | {row['corpus_rate']:.3f} | 1.00 |" in section


def test_the_repair_summary_before_and_after(graded):
    summary = json.loads(graded["metrics"]["v"]["repair_json"].iloc[0])
    assert (summary["n_checked"], summary["n_kept"]) == (2, 1)
    assert (summary["pass_rate_before"], summary["pass_rate_after"]) == (0.5, 1.0)
    assert graded["metadata"]["v"]["repair pass_rate_after"] == 1.0
    section = "\n".join(answer_section(graded["verdict"]))
    assert "### Repair" in section and "| v | 2 | 0.500 → 1.000 | 1 | 1 | 0 | 0 | 0 |" in section


def test_the_judge_agreement_and_ppi_interval(graded):
    calibration = graded["calibrations"]["judge"]
    assert calibration["n"] == 8 and calibration["n_not_graded"] == 0
    agreement = json.loads(graded["metrics"]["v"].set_index("grader").loc["judge", "agreement_json"])
    assert agreement["accuracy"] == pytest.approx(7 / 8)  # c4: the people fail it, the judge passes it
    assert agreement["low"] <= agreement["estimate"] <= agreement["high"]
    assert graded["metrics"]["v"].set_index("grader").loc["static", "agreement_json"] == ""
    assert graded["metadata"]["v"]["judge kappa"] == pytest.approx(agreement["kappa"])
    section = "\n".join(answer_section(graded["verdict"]))
    assert "### Judge agreement with people" in section and "calibration.jsonl" in section
    assert f"| {agreement['kappa']:.3f} | 0.875 | 8 (0 not graded) |" in section


def test_the_files_beside_the_report(graded, tmp_path):
    written = write_answer_files(graded["verdict"], tmp_path, "")
    lines = [json.loads(x) for x in (tmp_path / "answers.jsonl").read_text().splitlines()]
    assert len(lines) == 3 * 3  # 3 prompts x (static, grounding, judge)
    assert {(x["prompt_id"], x["grader"]) for x in lines} == {(p.id, g) for p in PROMPTS
                                                               for g in ("static", "grounding", "judge")}
    assert all(x["answer"] is None for x in lines)  # the text only under keep_text
    log = [json.loads(x) for x in (tmp_path / "hallucinations.jsonl").read_text().splitlines()]
    assert {(e["item"], e["in_corpus"]) for e in log} >= {("arrays.stack", True), ("magic.fix", False)}
    assert "# Hallucination log" in (tmp_path / "hallucinations.md").read_text()
    assert set(written) == {"answers", "hallucinations", "hallucinations_jsonl"}
    section = "\n".join(answer_section(graded["verdict"], written))
    assert "`hallucinations.md` / `hallucinations.jsonl`: 2 item(s) not in their answer's context, 1 of them " \
        "nowhere in the corpus" in section and "`answers.jsonl`" in section
    assert "answers.jsonl" not in "\n".join(answer_section(graded["verdict"]))  # named only once written
    for name in ("answers.jsonl", "hallucinations.md", "hallucinations.jsonl"):
        assert owned_by(name, "") and not owned_by(name, ".limited-5")
    assert owned_by("answers.limited-5.jsonl", ".limited-5") and not owned_by("answers.limited-5.jsonl", "")


def test_no_key_reaches_the_metrics_or_the_report(graded, tmp_path):
    write_answer_files(graded["verdict"], tmp_path, "")
    everything = (pd.concat(graded["metrics"].values()).to_json() + json.dumps(graded["metadata"], default=str)
                  + "\n".join(answer_section(graded["verdict"]))
                  + "".join(p.read_text() for p in tmp_path.iterdir()))
    assert "sk-gen-secret" not in everything and "sk-judge-secret" not in everything


def test_a_run_without_the_extras_shows_none_of_them(tmp_path):
    """Old rows (no extra columns) and a run without grounding, repair or calibration: the
    section has none of the new tables and writes no files."""
    from types import SimpleNamespace

    verdict = SimpleNamespace(rows=[{"variant": "v", "grader": "static", "yardstick": "static:v1+x"}])
    assert write_answer_files(verdict, tmp_path) == {}  # type: ignore[arg-type]
    assert list(tmp_path.iterdir()) == []


def test_a_calibration_file_that_fits_no_chosen_grader_is_refused(tmp_path):
    path = tmp_path / "cal.jsonl"
    path.write_text(json.dumps({"id": "a", "question": "q", "text": "t", "human": True, "reference": "r"}) + "\n")
    with pytest.raises(ValueError, match=r"cal.jsonl: no calibration row for the chosen LLM grader\(s\) judge"):
        check_calibration(path, ["judge"])
    assert list(check_calibration(path, ["decision"])) == ["decision"]
    path.write_text('{"id": "a", "question": "q"}\n')
    with pytest.raises(ValueError, match=r"cal.jsonl:1: text must be a non-empty string"):
        check_calibration(path, ["judge"])


def test_ppi_needs_two_graded_answers_else_the_agreement_alone():
    from eval_pipeline.grading.presentation import calibrated_rate

    calibration = {"grader": "judge", "n": 2, "n_not_graded": 0, "judge": [True, False], "human": [True, True],
                   "agreement": {"accuracy": 0.5, "kappa": math.nan, "confusion": {}}}
    grades = pd.DataFrame({"passed": [True], "status": ["graded"]})
    out = calibrated_rate(grades, calibration)
    assert out["accuracy"] == 0.5 and "estimate" not in out and "at least 2" in out["error"]


def test_the_refusal_names_the_settings_never_the_credentials():
    secret = "http://user:pw-secret@127.0.0.1:9/v1?api-key=sk-in-url"
    with pytest.raises(ValueError) as refused:
        judge_independence(secret, "m", secret, "m", graders=("judge",), allow_setting="ops.x.allow",
                           judge_settings="EVAL_PIPELINE_JUDGE_MODEL")
    message = str(refused.value)
    assert "ops.x.allow: true" in message and "Set EVAL_PIPELINE_JUDGE_MODEL to another model" in message
    assert "pw-secret" not in message and "sk-in-url" not in message
    with pytest.raises(ValueError, match="ops.x.allow must be true or false"):
        judge_independence(None, "m", None, "m", allow_self_judging="yes", allow_setting="ops.x.allow")  # type: ignore


def test_the_report_section_writes_the_files_and_names_them(graded, tmp_path):
    """The answers section of every report (reporting.sections: measure_answers, render_answers)
    writes answers.jsonl and the hallucination log into the staged results folder and names them."""
    from types import SimpleNamespace

    from eval_pipeline.reporting.sections import measure_answers, render_answers

    part = render_answers(measure_answers(SimpleNamespace(verdict=SimpleNamespace(answers=graded["verdict"]))))  # type: ignore[arg-type]
    written = part.write(tmp_path, "")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["answers.jsonl", "hallucinations.jsonl", "hallucinations.md"]
    section = "\n".join(part.lines(written))
    assert "`answers.jsonl`" in section and "`hallucinations.md`" in section


def test_an_answer_metrics_partition_carries_its_intervals_latency_cost_and_schema(graded):
    """Issue #28, item 10: each answer_metrics partition shows, beside its pass rates, their
    intervals, the latency, tokens and cost as numbers, and the frame's row count and schema."""
    metadata = next(iter(graded["metadata"].values()))
    assert {"static pass_rate low", "static pass_rate high", "static mean_score low", "latency p50 ms",
            "latency p95 ms", "tokens", "cost"} <= set(metadata)
    assert metadata["table"].row_count >= 1
    assert all(v is None or round(v, 4) == v for k, v in metadata.items()
               if k.endswith(("pass_rate low", "pass_rate high", "mean_score low", "mean_score high", " ms")))
