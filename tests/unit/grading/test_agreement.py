"""Judge agreement with people: accuracy, Cohen's kappa and the confusion matrix, hand-computed;
the PPI interval hand-computed, and its coverage over seeds with a scripted judge of known error
rates (no network)."""

import json
import math

import numpy as np
import pytest

from eval_pipeline.answering.served import provider_of
from eval_pipeline.grading.agreement import agreement, cohen_kappa, load_calibration, ppi_mean_interval

T, F = True, False
HUMAN = [T, T, T, T, F, F, F, F, T, F]
JUDGE = [T, T, T, F, F, F, T, F, T, T]


def test_accuracy_kappa_and_confusion_by_hand():
    # agree on 7 of 10: p_o 0.7. Human passes 5/10, judge 6/10: p_e = .5*.6 + .5*.4 = 0.5.
    # kappa = (0.7 - 0.5) / (1 - 0.5) = 0.4.
    got = agreement(HUMAN, JUDGE)
    assert got["n"] == 10 and got["accuracy"] == pytest.approx(0.7) and got["kappa"] == pytest.approx(0.4)
    assert got["labels"] == [F, T]
    assert got["confusion"] == {T: {T: 4, F: 1}, F: {T: 2, F: 3}}


def test_kappa_of_levels_and_its_edges():
    # three levels, 6 items: agree on 5 (p_o 5/6); human marginals 1:2,2:2,3:2, judge 1:1,2:3,3:2:
    # p_e = (2*1 + 2*3 + 2*2)/36 = 1/3; kappa = (5/6 - 1/3)/(2/3) = 0.75
    assert cohen_kappa([1, 1, 2, 2, 3, 3], [1, 2, 2, 2, 3, 3]) == pytest.approx(0.75)
    assert cohen_kappa([T, F], [F, T]) == pytest.approx(-1.0)  # p_o 0, p_e 0.5
    assert math.isnan(cohen_kappa([T, T, T], [T, T, T]))  # p_e = 1: undefined, not 1
    empty = agreement([], [])
    assert empty["n"] == 0 and math.isnan(empty["accuracy"]) and math.isnan(empty["kappa"])
    assert agreement([], [], labels=[F, T])["confusion"] == {F: {F: 0, T: 0}, T: {F: 0, T: 0}}
    with pytest.raises(ValueError, match="differ in length: 2 and 1"):
        agreement([T, F], [T])
    with pytest.raises(ValueError, match="not among the given labels"):
        agreement([T, F], [T, T], labels=[T])


def test_the_ppi_interval_by_hand():
    # unlabelled f = 1,1,0,1: mean .75, var .25. Labelled f - y = 0,1,0: mean 1/3, var 1/3.
    # estimate .75 - 1/3 = 5/12; half = z * sqrt(.25/4 + (1/3)/3) = 1.959964 * 0.416667
    got = ppi_mean_interval([1, 1, 0, 1], [1, 1, 0], [1, 0, 0])
    assert got["estimate"] == pytest.approx(5 / 12) and got["rectifier"] == pytest.approx(1 / 3)
    assert got["half_width"] == pytest.approx(1.959964 * 5 / 12, rel=1e-6)
    assert (got["low"], got["high"], got["clipped"]) == (0.0, 1.0, True)
    assert got["judge_rate"] == 0.75 and got["classical"]["estimate"] == pytest.approx(1 / 3)


@pytest.mark.parametrize("args, message", [
    (([1, 0], [1], [1]), "at least 2 labelled"),
    (([1, 0], [1, 0], [1]), "differ in length"),
    (([1, 2], [1, 0], [1, 0]), r"judge_unlabelled\[1\] must be a number in \[0, 1\]"),
    (([1, float("nan")], [1, 0], [1, 0]), "must be a number"),
])
def test_ppi_refuses_bad_inputs(args, message):
    with pytest.raises(ValueError, match=message):
        ppi_mean_interval(*args)
    with pytest.raises(ValueError, match="confidence"):
        ppi_mean_interval([1, 0], [1, 0], [1, 0], confidence=1.0)


def scripted_judge(truth, rng, *, miss=0.05, lenient=0.30):
    """A judge of known error rates: fails a true pass with probability `miss`, passes a true
    failure with probability `lenient` (a lenient judge: its raw pass rate is biased up)."""
    u = rng.random(len(truth))
    return np.where(truth == 1, u >= miss, u < lenient).astype(float)


def coverage(seeds, *, rate=0.6, n=100, big_n=2000, confidence=0.95):
    ppi = naive = 0
    for seed in range(seeds):
        rng = np.random.default_rng(seed)
        truth_l, truth_u = (rng.random(n) < rate).astype(float), (rng.random(big_n) < rate).astype(float)
        judged_l, judged_u = scripted_judge(truth_l, rng), scripted_judge(truth_u, rng)
        got = ppi_mean_interval(judged_u.tolist(), judged_l.tolist(), truth_l.tolist(), confidence=confidence)
        ppi += got["low"] <= rate <= got["high"]
        half = 1.959964 * math.sqrt(judged_u.var(ddof=1) / big_n)
        naive += abs(judged_u.mean() - rate) <= half
    return ppi / seeds, naive / seeds


def test_the_ppi_interval_covers_the_true_rate_at_its_nominal_level_over_seeds():
    # true pass rate 0.6; the judge's own rate is 0.6*0.95 + 0.4*0.30 = 0.69: biased by 0.09
    ppi, naive = coverage(400)
    assert 0.92 <= ppi <= 0.98  # nominal 0.95; 400 seeds: standard error about 0.011
    assert naive < 0.05  # the judge alone is confidently wrong


def test_load_calibration_names_file_and_line(tmp_path):
    path = tmp_path / "cal.jsonl"
    rows = [{"id": "a", "question": "q", "text": "t", "human": True, "source": "hand"},
            {"id": "b", "question": "q", "text": "t", "human": 3}]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n\n", encoding="utf-8")
    assert load_calibration(path) == rows
    path.write_text(json.dumps(rows[0]) + "\n" + json.dumps({**rows[1], "human": "yes"}) + "\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"cal.jsonl:2: human must be"):
        load_calibration(path)
    path.write_text(json.dumps(rows[0]) + "\n" + json.dumps(rows[0]) + "\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"cal.jsonl:2: id 'a' appears twice"):
        load_calibration(path)


# --- a judge calibrated through the real openai client against the test server ---------------------


def calibration_rows():
    """20 answers graded by people: 12 pass (GOOD), 8 fail (BAD)."""
    rows = []
    for i in range(20):
        good = i < 12
        rows.append({"id": f"c{i}", "question": f"Task {i}?", "reference": "The reference.",
                     "text": f"answer {i} {'GOOD' if good else 'BAD'}", "human": good if i % 2 else (5 if good else 2)})
    return rows


def scripted_decision(body):
    """Level 5 for GOOD and 2 for BAD, except three known errors: lenient on answers 12 and 13
    (bad, judged 5), harsh on answer 0 (good, judged 2); garbage on answer 19 (not graded)."""
    import re

    answer = re.search(r"<answer>\n(.*?)\n</answer>", body["messages"][-1]["content"], re.S).group(1)
    number = int(answer.split()[1])
    if number == 19:
        return "I cannot grade this."
    good = "GOOD" in answer
    if number in (12, 13):
        good = True
    if number == 0:
        good = False
    return json.dumps({"level": 5 if good else 2, "reason": "scripted"})


def test_a_scripted_judge_of_known_errors_is_calibrated_through_the_test_server(tmp_path):
    from eval_pipeline.common.llm import LLMClient
    from eval_pipeline.grading.agreement import calibrate_judge, judge_rate_with_ppi
    from tests.openai_stub import OpenAIStub

    with OpenAIStub(chat=scripted_decision) as stub:
        llm = LLMClient(model="judge-model", base_url=stub.base_url, api_key="sk-test", max_retries=0)
        got = calibrate_judge(calibration_rows(), grader="decision", llm=llm, cache_dir=tmp_path)
        calls = len(stub.chat_requests())
        again = calibrate_judge(calibration_rows(), grader="decision", llm=llm, cache_dir=tmp_path)
        assert len(stub.chat_requests()) == calls + 1  # cached, but the unparseable one is asked again
    # 19 graded (answer 19 unparseable): people pass 12 of 19, the judge 11 + 2 = 13.
    # agree on 11 + 5 = 16: accuracy 16/19. p_e = (12/19)(13/19) + (7/19)(6/19) = 198/361;
    # kappa = (16/19 - 198/361) / (1 - 198/361) = (304 - 198) / (361 - 198) = 106/163
    assert (got["n"], got["n_not_graded"]) == (19, 1) and again["human"] == got["human"]
    a = got["agreement"]
    assert a["accuracy"] == pytest.approx(16 / 19) and a["kappa"] == pytest.approx(106 / 163)
    assert a["confusion"] == {True: {True: 11, False: 1}, False: {True: 2, False: 5}}
    assert got["graded_by"] == [f"{provider_of(stub.base_url)}:judge-model->judge-model"]
    # the run's 40 judge passes (30 pass) with the PPI interval from the calibration
    run = [True] * 30 + [False] * 10
    ppi = judge_rate_with_ppi(run, got)
    # rectifier: mean(judge - human) over 19 = (2 - 1)/19; estimate 0.75 - 1/19
    assert ppi["estimate"] == pytest.approx(0.75 - 1 / 19) and ppi["judge_rate"] == 0.75
    assert ppi["kappa"] == pytest.approx(106 / 163) and ppi["n_calibration"] == 19
    assert ppi["low"] < ppi["estimate"] < ppi["high"]


def test_calibration_refuses_rows_the_grader_cannot_read(tmp_path):
    from eval_pipeline.grading.agreement import calibrate_judge

    with pytest.raises(ValueError, match="'c0': the decision grader needs a reference"):
        calibrate_judge([{"id": "c0", "question": "q", "text": "t", "human": True}], grader="decision",
                        llm=None, cache_dir=tmp_path)
    with pytest.raises(ValueError, match="'c0': the judge needs a context"):
        calibrate_judge([{"id": "c0", "question": "q", "text": "t", "human": True}], grader="judge",
                        llm=None, cache_dir=tmp_path)
    with pytest.raises(ValueError, match="must be 'decision' or 'judge'"):
        calibrate_judge([], grader="static", llm=None, cache_dir=tmp_path)
