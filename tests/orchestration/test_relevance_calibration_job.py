"""The shipped SciFact relevance calibration through the whole job, the way the README tells a
user to set it: the holes' grader (the OpenAI-compatible test server) grades the run's holes and
the calibration file; the report and the findings carry its agreement with people (#27)."""

import json

import pytest

from eval_pipeline.common.state import PROJECT_ROOT
from tests.integration.cli import start_job, tiny_job_config
from tests.openai_stub import OpenAIStub

pytestmark = pytest.mark.integration

SHIPPED = PROJECT_ROOT / "eval_pipeline" / "calibration_data" / "scifact_relevance.jsonl"


def grader(body: dict) -> str:
    """A grader that calls a passage relevant when it shares a word of 7+ letters with the
    question: right on most of SciFact's judged pairs, wrong on some hard negatives."""
    content = body["messages"][-1]["content"].lower()
    question, _, document = content.partition("<document>")
    long_words = {w.strip(".,;:()\"'") for w in question.split() if len(w) >= 7}
    shared = sum(1 for w in long_words if w and w in document)
    return json.dumps({"grade": 3 if shared >= 2 else 0, "reason": "scripted"})


def test_the_shipped_calibration_shows_the_grader_s_agreement_with_people(tmp_path, job_env):
    with OpenAIStub(chat=grader) as stub:
        env = job_env("state", OPENAI_API_KEY="sk-test", OPENAI_BASE_URL=stub.base_url,
                      EVAL_PIPELINE_LLM_MODEL="grader-model")
        config = tiny_job_config(tmp_path / "results")
        config["ops"]["findings"] = {"config": {"grade_holes": True, "relevance_calibration": str(SHIPPED)}}
        job = start_job(tmp_path, "job", env, config)
        assert job.wait(timeout=900) == 0, (tmp_path / "job.log").read_text()[-3000:]
        bodies = [json.dumps(r["body"]) for r in stub.requests]
    assert sum("0-dimensional biomaterials" in b for b in bodies) == 2  # a SciFact claim, with its two passages
    report = (tmp_path / "results" / "results.md").read_text()
    assert "**The grader against people** (`scifact_relevance.jsonl`, 120 passages graded, 0 not)" in report
    assert "people would say" in report or "No interval for the holes" in report
