"""The grader of the holes calibrated on people's relevance grades (#27): the shipped SciFact
file, the agreement and PPI through the real client against the test server, the report line,
and the findings' preflight (bad input refused before any model call)."""

from __future__ import annotations

import json
from collections import Counter
from types import SimpleNamespace

import pytest

from eval_pipeline.common.llm import LLMClient
from eval_pipeline.common.state import PROJECT_ROOT
from eval_pipeline.grading.agreement import check_relevance_rows, judge_rate_with_ppi, load_calibration
from eval_pipeline.validity.holes import calibrate_relevance
from tests.openai_stub import OpenAIStub

SHIPPED = PROJECT_ROOT / "eval_pipeline" / "calibration_data" / "scifact_relevance.jsonl"


def test_the_shipped_scifact_file_is_people_s_grades_one_relevant_and_one_hard_negative_per_claim():
    rows = check_relevance_rows(load_calibration(SHIPPED), SHIPPED)
    assert len(rows) == 120
    by_claim = Counter(r["claim_id"] for r in rows)
    assert set(by_claim.values()) == {2} and len(by_claim) == 60
    for claim in by_claim:
        pair = [r for r in rows if r["claim_id"] == claim]
        assert sorted(r["human"] for r in pair) == [False, True]
        assert pair[0]["question"] == pair[1]["question"] and pair[0]["doc_id"] != pair[1]["doc_id"]
    assert all("SciFact" in r["source"] for r in rows)
    assert (SHIPPED.parent / "README.md").read_text().count("hard negative") >= 1  # what `false` means, said


def _rows():
    # 6 relevant and 6 not, by people; the scripted grader errs on r2 (calls it irrelevant) and on n1
    # (calls it relevant): 10 of 12 agree
    relevant = [{"id": f"r{i}", "question": "How do I reset a password?", "text": f"tag-r{i} Reset it in Settings.",
                 "human": True} for i in range(6)]
    not_relevant = [{"id": f"n{i}", "question": "How do I reset a password?", "text": f"tag-n{i} The canteen opens.",
                     "human": False} for i in range(6)]
    return relevant + not_relevant


def _grader(body):
    text = json.dumps(body)
    wrong = {"tag-r2": 0, "tag-n1": 3}
    for tag, grade in wrong.items():
        if tag in text:
            return json.dumps({"grade": grade, "reason": "scripted"})
    return json.dumps({"grade": 3 if "tag-r" in text else 0, "reason": "scripted"})


def test_the_grader_s_agreement_with_people_and_the_ppi_share_of_relevant_holes(tmp_path):
    with OpenAIStub(chat=_grader) as stub:
        llm = LLMClient(base_url=stub.base_url, api_key="sk-test", model="grader-model")
        result = calibrate_relevance(_rows(), llm=llm, cache_dir=tmp_path, source="people.jsonl")
        again = calibrate_relevance(_rows(), llm=llm, cache_dir=tmp_path, source="people.jsonl")
    assert len(stub.requests) == 12  # the second calibration came from the holes' cache
    assert again["agreement"] == result["agreement"]
    assert result["grader"] == "relevance" and result["n"] == 12 and result["n_not_graded"] == 0
    a = result["agreement"]
    assert a["accuracy"] == pytest.approx(10 / 12)
    # kappa: p_o 10/12, p_e (6/12 * 6/12) * 2 = 0.5 -> (0.8333 - 0.5) / 0.5
    assert a["kappa"] == pytest.approx((10 / 12 - 0.5) / 0.5)
    assert a["confusion"] == {False: {False: 5, True: 1}, True: {False: 1, True: 5}}
    # the run's holes: the grader calls 3 of 10 relevant; its errors cancel here (one each way), so
    # the corrected share is the grader's
    ppi = judge_rate_with_ppi([True] * 3 + [False] * 7, result)
    assert ppi["judge_rate"] == pytest.approx(0.3) and ppi["estimate"] == pytest.approx(0.3)
    assert 0.0 <= ppi["low"] < 0.3 < ppi["high"] <= 1.0


def test_a_relevance_row_needs_a_yes_or_no_from_people(tmp_path):
    path = tmp_path / "levels.jsonl"
    path.write_text(json.dumps({"id": "a", "question": "q?", "text": "t", "human": 3}) + "\n")
    with pytest.raises(ValueError, match=r"levels.jsonl: row 'a': a relevance row's human grade must be true or false"):
        check_relevance_rows(load_calibration(path), path)


def test_the_findings_preflight_refuses_bad_calibration_settings_before_any_model_call(tmp_path):
    from assets import FindingsConfig, preflight_findings

    class NoModel:
        def get(self):
            raise AssertionError("no model may be asked for")

    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(b'{"id": "a", "question": "q?", "text": "caf\xe9", "human": true}\n')
    with pytest.raises(ValueError, match=r"bad.jsonl:1: invalid UTF-8"):
        preflight_findings(FindingsConfig(grade_holes=True, relevance_calibration=str(bad)), NoModel())
    with pytest.raises(ValueError, match=r"calibration file .*missing.jsonl: cannot be read"):
        preflight_findings(FindingsConfig(grade_holes=True, relevance_calibration=str(tmp_path / "missing.jsonl")),
                           NoModel())
    with pytest.raises(ValueError, match=r"relevance_calibration calibrates the grader of the holes: set "
                                         r"ops.findings.config.grade_holes"):
        preflight_findings(FindingsConfig(relevance_calibration=str(SHIPPED)), NoModel())
    asked = SimpleNamespace(get=lambda: "model")
    preflight_findings(FindingsConfig(grade_holes=True, relevance_calibration=str(SHIPPED)), asked)  # accepted


def test_the_report_says_how_far_the_grader_agrees_with_people():
    from eval_pipeline.reporting.validity import _calibration_lines

    line = "\n".join(_calibration_lines({"source": "/x/scifact_relevance.jsonl", "n_calibration": 118, "n_not_graded": 2,
                                         "accuracy": 0.85, "kappa": 0.7, "judge_rate": 0.4, "estimate": 0.35,
                                         "low": 0.2, "high": 0.5, "confidence": 0.95}))
    assert "`scifact_relevance.jsonl`, 118 passages graded, 2 not" in line
    assert "accuracy 0.850, Cohen's kappa 0.700" in line
    assert "people would say 0.350 [0.200, 0.500] (prediction-powered 95% interval" in line
    short = "\n".join(_calibration_lines({"source": "c.jsonl", "n_calibration": 1, "n_not_graded": 0, "accuracy": 1.0,
                                          "kappa": float("nan"), "error": "PPI needs at least 2 labelled"}))
    assert "No interval for the holes: PPI needs at least 2 labelled" in short
