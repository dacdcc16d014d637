"""The report's validity section through the whole job: the question-set audit as a check, the
unjudged documents graded by an LLM (the OpenAI-compatible test server), and reviewed golds
imported so that the labels, and their fingerprint, change."""

import json
import re

import pytest

from tests.integration.cli import start_job, tiny_job_config
from tests.openai_stub import OpenAIStub

pytestmark = pytest.mark.integration


def grader(body: dict) -> str:
    """Grades every document 2 (answers in part), in a fence with prose around it; the
    kettle document 1 (on topic, no answer), whichever question asks."""
    grade = 1 if "kettle" in body["messages"][-1]["content"].lower() else 2
    return f'Sure.\n```json\n{{"grade": {grade}, "reason": "It covers part of the question."}}\n```'


def _provenance_fingerprint(results):
    text = (results / "results.md").read_text()
    return re.search(r"question set: `[^`]*\(fingerprint (\w+)", text).group(1)


def test_holes_are_graded_and_accepted_golds_change_the_labels(tmp_path, job_env):
    with OpenAIStub(chat=grader) as stub:
        env = job_env("state", OPENAI_API_KEY="sk-test", OPENAI_BASE_URL=stub.base_url,
                      EVAL_PIPELINE_LLM_MODEL="grader-model")
        config = tiny_job_config(tmp_path / "first")
        config["ops"]["findings"] = {"config": {"grade_holes": True}}
        job = start_job(tmp_path, "first", env, config)
        assert job.wait(timeout=600) == 0, (tmp_path / "first.log").read_text()[-3000:]
        graded_calls = len(stub.chat_requests())
        assert graded_calls > 0

        report = (tmp_path / "first" / "results.md").read_text()
        assert "## How far the numbers can be trusted" in report
        assert "**With the holes graded** by `grader-model@" in report and "hit@1 + LLM" in report
        rows = [json.loads(line) for line in (tmp_path / "first" / "hole_review.jsonl").read_text().splitlines()]
        assert rows and all(r["grade"] == 2 and r["accept"] is False for r in rows)
        assert all(r["doc_id"] != "kettle-care" for r in rows)  # graded 1: no candidate
        audit = [json.loads(line) for line in (tmp_path / "first" / "question_audit.jsonl").read_text().splitlines()]
        kettle_questions = {r["qid"] for r in audit if r["reasons"] == ["llm_gold_does_not_answer"]}
        assert kettle_questions == {"t1"}  # t1's gold is kettle-care (tests/fixtures/tiny_questions.jsonl)
        assert "are not answered by any of them" in report
        log = (tmp_path / "first.log").read_text()
        assert "Asset check 'question_set_audit' on 'question_set'" in log

        # A person accepts the first candidate in the file itself and points the next run at it.
        reviewed = tmp_path / "first" / "hole_review.jsonl"
        accepted = {**rows[0], "accept": True}
        reviewed.write_text(json.dumps(accepted) + "\n" + "".join(json.dumps(r) + "\n" for r in rows[1:]))
        before = _provenance_fingerprint(tmp_path / "first")
        config = tiny_job_config(tmp_path / "first")
        config["ops"]["findings"] = {"config": {"grade_holes": True}}
        config["ops"]["question_set"]["config"]["extra_golds"] = str(reviewed)
        job = start_job(tmp_path, "second", env, config)
        assert job.wait(timeout=600) == 0, (tmp_path / "second.log").read_text()[-3000:]
        assert len(stub.chat_requests()) == graded_calls  # every hole's grade came from the cache

    assert _provenance_fingerprint(tmp_path / "first") != before
    again = [json.loads(line) for line in reviewed.read_text().splitlines()]
    pair = (accepted["question_id"], accepted["doc_id"])
    kept = {(r["question_id"], r["doc_id"]): r["accept"] for r in again}
    # A gold now, no longer a hole; its accepted row stays, so the next run imports it again and its
    # labels do not silently revert.
    assert kept[pair] is True and len(again) == len(rows)


def test_grading_holes_without_a_model_fails_before_anything_is_embedded(tmp_path, job_env):
    env = job_env("state")
    env.pop("EVAL_PIPELINE_LLM_MODEL", None)
    config = tiny_job_config(tmp_path / "results")
    config["ops"]["findings"] = {"config": {"grade_holes": True}}
    job = start_job(tmp_path, "nomodel", env, config)
    assert job.wait(timeout=600) != 0
    log = (tmp_path / "nomodel.log").read_text()
    assert "llm.model is not set" in log
    assert "embedding the chunks" not in log


@pytest.mark.parametrize("blocking", [False, True])
def test_a_failed_audit_warns_or_blocks_as_the_variants_file_says(tmp_path, job_env, blocking):
    variants = tmp_path / "variants.yaml"
    variants.write_text("variants: [bm25]\naudit:\n  max_surface_share: 0.0\n"
                        f"  blocking: {'true' if blocking else 'false'}\n")
    env = job_env("state", EVAL_PIPELINE_VARIANTS=str(variants))
    job = start_job(tmp_path, "audit", env, tiny_job_config(tmp_path / "results"))
    code = job.wait(timeout=600)
    log = (tmp_path / "audit.log").read_text()
    assert "Asset check 'question_set_audit' on 'question_set' did not pass" in log, log[-3000:]
    assert "question set audit: " in log and "above audit.max_surface_share 0" in log  # said in the run's log
    if blocking:
        assert code != 0 and not (tmp_path / "results" / "results.md").exists()
    else:
        assert code == 0, log[-3000:]
        assert "above audit.max_surface_share 0" in (tmp_path / "results" / "results.md").read_text()
