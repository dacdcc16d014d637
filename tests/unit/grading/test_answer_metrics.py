"""Tests for eval_pipeline.grading.answer_metrics: every expected value is worked out by hand
next to its case, on frames of a few rows."""

from __future__ import annotations

import copy
import json
import math

import numpy as np
import pandas as pd
import pytest

from eval_pipeline.grading.answer_metrics import (
    ANSWER_COLUMNS,
    GRADE_COLUMNS,
    SUMMARY_COLUMNS,
    answer_metrics,
    answer_summary_row,
    check_prices,
)

V = "bm25"
PRICES = {
    "m-a": {"prompt_per_1k": 0.5, "completion_per_1k": 1.5},
    "m-b": {"prompt_per_1k": 1.0, "completion_per_1k": 2.0},
}


def answer(pid: str, **kw) -> dict:
    row = {
        "variant": V, "prompt_id": pid, "form": "MATCH", "tags": [], "gold": ["d1"],
        "context_doc_ids": ["d1"], "retrieved_gold": True, "provider": "local",
        "model_sent": "m-a", "model_reported": "m-a", "prompt_tokens": 0, "completion_tokens": 0,
        "retrieval_ms": None, "generation_ms": None, "cached": False, "error": None,
    }
    row.update(kw)
    return row


def grade(pid: str, grader: str = "deterministic", status: str = "graded", **kw) -> dict:
    row = {
        "variant": V, "prompt_id": pid, "grader": grader, "status": status, "passed": None,
        "score": None, "assertion_types": [], "assertion_held": [], "faithfulness": None,
        "relevance": None, "citations": None,
    }
    row.update(kw)
    return row


def frames(answers: list[dict], grades: list[dict]) -> tuple[pd.DataFrame, pd.DataFrame]:
    a = pd.DataFrame(answers, columns=[*ANSWER_COLUMNS, "tags", "gold", "context_doc_ids", "provider"])
    g = pd.DataFrame(grades, columns=list(GRADE_COLUMNS))
    return a, g


def run(answers: list[dict], grades: list[dict], **kw) -> dict:
    return answer_metrics(*frames(answers, grades), **kw)


def nan(x) -> bool:
    return isinstance(x, float) and math.isnan(x)


def det(pid, passed, score, types=(), held=(), status="graded"):
    return grade(pid, "deterministic", status, passed=passed, score=score,
                 assertion_types=list(types), assertion_held=list(held))


# ---------------------------------------------------------------------------
# scored rows, pass rate, mean score
# ---------------------------------------------------------------------------


def test_scored_rows_no_answer_and_not_applicable():
    # p1 passed 1.0, p2 failed 0.5, p3 no_answer (-> False, 0.0), p4 not_applicable (out).
    # pass rate 1/3, mean score (1 + 0.5 + 0) / 3 = 0.5.
    a = [answer("p1"), answer("p2"), answer("p3", error="timeout"), answer("p4")]
    g = [det("p1", True, 1.0), det("p2", False, 0.5), det("p3", None, None, status="no_answer"),
         det("p4", None, None, status="not_applicable")]
    m = run(a, g)["graders"]["deterministic"]
    assert (m["n_scored"], m["n_graded"], m["n_no_answer"], m["n_not_applicable"], m["n_grader_failed"],
            m["n_missing"]) == (3, 2, 1, 1, 0, 0)
    assert m["pass_rate"] == pytest.approx(1 / 3)
    assert m["mean_score"] == pytest.approx(0.5)
    low, high = m["pass_rate_ci"]
    assert 0.0 <= low <= 1 / 3 <= high <= 1.0
    low, high = m["mean_score_ci"]
    assert 0.0 <= low <= 0.5 <= high <= 1.0


def test_no_answer_counts_as_failed_with_score_zero():
    # one passed with 1.0, one generation failure: pass rate 1/2, mean score 1/2 (not 1.0).
    a = [answer("p1"), answer("p2", error="boom")]
    g = [grade("p1", "decision", passed=True, score=1.0), grade("p2", "decision", "no_answer", passed=False, score=0.0)]
    m = run(a, g)["graders"]["decision"]
    assert m["n_scored"] == 2 and m["pass_rate"] == 0.5 and m["mean_score"] == 0.5


def test_grader_with_only_no_answer_rows_scores_zero():
    a = [answer("p1", error="x"), answer("p2", error="y")]
    g = [grade("p1", "static", "no_answer"), grade("p2", "static", "no_answer")]
    m = run(a, g)["graders"]["static"]
    assert m["pass_rate"] == 0.0 and m["mean_score"] == 0.0
    assert m["pass_rate_ci"] == [0.0, 0.0] and m["mean_score_ci"] == [0.0, 0.0]


def test_failed_and_unparseable_are_excluded_and_counted():
    # judge: p1 graded 0.75, p2 failed, p3 unparseable -> n_scored 1, mean 0.75.
    a = [answer("p1"), answer("p2"), answer("p3")]
    g = [grade("p1", "judge", score=0.75, faithfulness=1.0, relevance=0.75, citations=0.5),
         grade("p2", "judge", "failed"), grade("p3", "judge", "unparseable")]
    m = run(a, g)["graders"]["judge"]
    assert (m["n_scored"], m["n_grader_failed"]) == (1, 2)
    assert m["mean_score"] == 0.75 and m["mean_score_ci"] == [0.75, 0.75]


def test_all_not_applicable_gives_nan_and_n_zero():
    a = [answer("p1"), answer("p2")]
    g = [det("p1", None, None, status="not_applicable"), det("p2", None, None, status="not_applicable")]
    m = run(a, g)["graders"]["deterministic"]
    assert m["n_scored"] == 0 and m["n_not_applicable"] == 2
    assert nan(m["pass_rate"]) and nan(m["mean_score"])
    assert all(nan(x) for x in m["pass_rate_ci"] + m["mean_score_ci"])
    assert m["by_form"] == {}
    assert all(m["by_retrieval"][k]["n"] == 0 and nan(m["by_retrieval"][k]["pass_rate"])
               for k in ("hit", "miss", "no_gold"))
    assert all(v["n"] == 0 and nan(v["held_rate"]) for v in m["by_assertion_type"].values())


def test_interval_is_the_mean_when_all_values_are_equal():
    a = [answer(f"p{i}") for i in range(4)]
    g = [grade(f"p{i}", "static", passed=True, score=0.5) for i in range(4)]
    m = run(a, g)["graders"]["static"]
    assert m["pass_rate_ci"] == [1.0, 1.0]
    assert m["mean_score_ci"] == [0.5, 0.5]


def test_interval_is_seeded_and_independent_of_row_order():
    pids = [f"p{i}" for i in range(6)]
    a = [answer(p) for p in pids]
    g = [grade(p, "decision", passed=i % 2 == 0, score=i / 5) for i, p in enumerate(pids)]
    first = run(a, g, n_resamples=500, seed=3)["graders"]["decision"]
    again = run(a, g, n_resamples=500, seed=3)["graders"]["decision"]
    shuffled = run(a[::-1], g[::-1], n_resamples=500, seed=3)["graders"]["decision"]
    assert first["pass_rate_ci"] == again["pass_rate_ci"] == shuffled["pass_rate_ci"]
    assert first["mean_score_ci"] == shuffled["mean_score_ci"]
    assert first["pass_rate"] == 0.5  # p0, p2, p4 pass
    assert first["mean_score"] == pytest.approx((0 + 1 + 2 + 3 + 4 + 5) / 5 / 6)  # 0.5


def test_a_grader_without_pass_fail_has_nan_pass_rates_but_keeps_scores():
    # judge rows carry no `passed`: pass rates NaN; score 0.5 and a no_answer 0 -> mean 0.25.
    a = [answer("p1"), answer("p2", error="x")]
    g = [grade("p1", "judge", score=0.5, faithfulness=0.5, relevance=0.5, citations=0.5),
         grade("p2", "judge", "no_answer")]
    m = run(a, g)["graders"]["judge"]
    assert nan(m["pass_rate"]) and all(nan(x) for x in m["pass_rate_ci"])
    assert m["mean_score"] == 0.25
    assert nan(m["by_retrieval"]["hit"]["pass_rate"]) and m["by_retrieval"]["hit"]["mean_score"] == 0.25


def test_passed_set_on_some_graded_rows_only_is_an_error():
    a = [answer("p1"), answer("p2")]
    g = [grade("p1", "decision", passed=True, score=1.0), grade("p2", "decision", passed=None, score=0.25)]
    with pytest.raises(ValueError, match=r"'decision' sets passed.*'p2'"):
        run(a, g)


def test_a_prompt_without_a_row_for_a_grader_is_counted_missing():
    a = [answer("p1"), answer("p2"), answer("p3")]
    g = [det("p1", True, 1.0), grade("p2", "static", passed=False, score=0.0)]
    out = run(a, g)["graders"]
    assert list(out) == ["deterministic", "static"]  # GRADERS order; judge/decision did not run
    assert out["deterministic"]["n_missing"] == 2 and out["static"]["n_missing"] == 2


# ---------------------------------------------------------------------------
# breakdowns
# ---------------------------------------------------------------------------


def test_by_assertion_type_counts_no_answer_assertions_as_not_held():
    # p1: exact held, contains not; p2: contains held, regex held;
    # p3 no_answer: exact, json_schema -- its held=True is ignored (not held).
    # p4 not_applicable: its lists are ignored.
    # exact 1/2, contains 1/2, regex 1/1, json_schema 0/1.
    a = [answer("p1"), answer("p2"), answer("p3", error="x"), answer("p4")]
    g = [det("p1", False, 0.5, ["exact", "contains"], [True, False]),
         det("p2", True, 1.0, ["contains", "regex"], [True, True]),
         det("p3", None, None, ["exact", "json_schema"], [True, True], status="no_answer"),
         det("p4", None, None, ["regex"], [True], status="not_applicable")]
    by = run(a, g)["graders"]["deterministic"]["by_assertion_type"]
    assert by == {
        "exact": {"n": 2, "held_rate": 0.5},
        "contains": {"n": 2, "held_rate": 0.5},
        "regex": {"n": 1, "held_rate": 1.0},
        "json_schema": {"n": 1, "held_rate": 0.0},
    }


def test_by_assertion_type_only_for_deterministic_and_dimensions_only_for_judge():
    a = [answer("p1")]
    g = [det("p1", True, 1.0, ["exact"], [True]), grade("p1", "static", passed=True, score=1.0),
         grade("p1", "judge", score=1.0, faithfulness=1.0, relevance=1.0, citations=1.0),
         grade("p1", "decision", passed=True, score=1.0)]
    out = run(a, g)["graders"]
    assert list(out) == ["deterministic", "static", "judge", "decision"]
    assert [k for k in out if "by_assertion_type" in out[k]] == ["deterministic"]
    assert [k for k in out if "dimensions" in out[k]] == ["judge"]


def test_by_form_with_unknown_for_a_missing_form():
    # MATCH: p1 pass, p2 fail -> 1/2; GAP: p3 pass -> 1; None: p4 fail -> "unknown" 0.
    a = [answer("p1", form="MATCH"), answer("p2", form="MATCH"), answer("p3", form="GAP"), answer("p4", form=None)]
    g = [grade("p1", "static", passed=True, score=1.0), grade("p2", "static", passed=False, score=0.5),
         grade("p3", "static", passed=True, score=1.0), grade("p4", "static", passed=False, score=0.0)]
    by = run(a, g)["graders"]["static"]["by_form"]
    assert by == {
        "GAP": {"n": 1, "pass_rate": 1.0, "mean_score": 1.0},
        "MATCH": {"n": 2, "pass_rate": 0.5, "mean_score": 0.75},
        "unknown": {"n": 1, "pass_rate": 0.0, "mean_score": 0.0},
    }


def test_by_retrieval_hit_miss_and_no_gold():
    # hit: p1 pass, p2 fail -> 1/2; miss: p3 fail, p4 no_answer (fail) -> 0/2; no gold: p5 pass.
    a = [answer("p1", retrieved_gold=True), answer("p2", retrieved_gold=True),
         answer("p3", retrieved_gold=False), answer("p4", retrieved_gold=False, error="x"),
         answer("p5", retrieved_gold=None, gold=[])]
    g = [grade("p1", "decision", passed=True, score=1.0), grade("p2", "decision", passed=False, score=0.5),
         grade("p3", "decision", passed=False, score=0.25), grade("p4", "decision", "no_answer"),
         grade("p5", "decision", passed=True, score=0.75)]
    by = run(a, g)["graders"]["decision"]["by_retrieval"]
    assert by == {
        "hit": {"n": 2, "pass_rate": 0.5, "mean_score": 0.75},
        "miss": {"n": 2, "pass_rate": 0.0, "mean_score": 0.125},
        "no_gold": {"n": 1, "pass_rate": 1.0, "mean_score": 0.75},
    }


def test_judge_dimensions_over_graded_rows():
    # p1 (1, .5, 0), p2 (.5, .5, 1); p3 no_answer is not in the dimensions.
    # faithfulness .75, relevance .5, citations .5; overall mean(.5, 2/3) = 7/12.
    a = [answer("p1"), answer("p2"), answer("p3", error="x")]
    g = [grade("p1", "judge", score=0.5, faithfulness=1.0, relevance=0.5, citations=0.0),
         grade("p2", "judge", score=2 / 3, faithfulness=0.5, relevance=0.5, citations=1.0),
         grade("p3", "judge", "no_answer")]
    dims = run(a, g)["graders"]["judge"]["dimensions"]
    assert dims["n"] == 2
    assert dims["faithfulness"] == 0.75 and dims["relevance"] == 0.5 and dims["citations"] == 0.5
    assert dims["overall"] == pytest.approx(7 / 12)


def test_judge_dimensions_empty_are_nan():
    a = [answer("p1")]
    dims = run(a, [grade("p1", "judge", "failed")])["graders"]["judge"]["dimensions"]
    assert dims["n"] == 0 and all(nan(dims[k]) for k in ("faithfulness", "relevance", "citations", "overall"))


def test_a_graded_judge_row_needs_every_dimension():
    with pytest.raises(ValueError, match="needs citations"):
        run([answer("p1")], [grade("p1", "judge", score=0.5, faithfulness=0.5, relevance=0.5)])


# ---------------------------------------------------------------------------
# latency
# ---------------------------------------------------------------------------


def test_latency_percentiles_linear():
    # totals 10, 20, 30, 40: p50 = 25; p95 at rank 0.95 * 3 = 2.85 -> 30 + 0.85 * 10 = 38.5.
    # retrieval 1..4: p50 2.5, p95 3.85. p5 has no generation time: only in retrieval.
    a = [answer(f"p{i}", retrieval_ms=float(i), generation_ms=9.0 * i) for i in (1, 2, 3, 4)]
    a.append(answer("p5", retrieval_ms=100.0, generation_ms=None, error="x"))
    lat = run(a, [])["latency_ms"]
    assert lat["total"] == {"n": 4, "p50": 25.0, "p95": pytest.approx(38.5), "max": 40.0, "mean": 25.0}
    assert lat["retrieval"]["n"] == 5 and lat["retrieval"]["max"] == 100.0
    assert lat["generation"] == {"n": 4, "p50": 22.5, "p95": pytest.approx(34.65), "max": 36.0, "mean": 22.5}


def test_latency_retrieval_alone_percentiles():
    a = [answer(f"p{i}", retrieval_ms=float(i)) for i in (1, 2, 3, 4)]
    lat = run(a, [])["latency_ms"]
    assert lat["retrieval"]["p50"] == 2.5 and lat["retrieval"]["p95"] == pytest.approx(3.85)
    assert lat["total"]["n"] == 0 and nan(lat["total"]["p50"]) and nan(lat["total"]["mean"])


def test_negative_latency_is_an_error():
    with pytest.raises(ValueError, match=r"'p1'.*generation_ms"):
        run([answer("p1", retrieval_ms=1.0, generation_ms=-1.0)], [])


# ---------------------------------------------------------------------------
# tokens and cost
# ---------------------------------------------------------------------------


def test_tokens_and_cost_total_and_spent():
    # p1: reported m-a, 1000 prompt + 200 completion: 0.5 + 0.3 = 0.8 (sent alias is not used).
    # p2: reported None -> sent m-b, cached: 500 * 1.0/1k + 500 * 2.0/1k = 1.5.
    # p3: zero tokens, unknown model: 0.0 and not unpriced.
    a = [answer("p1", model_sent="alias", model_reported="m-a", prompt_tokens=1000, completion_tokens=200),
         answer("p2", model_sent="m-b", model_reported=None, prompt_tokens=500, completion_tokens=500, cached=True),
         answer("p3", model_sent="nobody", model_reported=None)]
    out = run(a, [], prices=PRICES)
    assert out["tokens"] == {
        "prompt_total": 1500, "completion_total": 700, "tokens_total": 2200,
        "prompt_spent": 1000, "completion_spent": 200, "tokens_spent": 1200,
    }
    assert out["cost"]["cost_total"] == pytest.approx(2.3)
    assert out["cost"]["cost_spent"] == pytest.approx(0.8)
    assert out["cost"]["unpriced_models"] == []
    assert out["counts"] == {"n_prompts": 3, "n_errored": 0, "n_cached": 1}


def test_unknown_price_makes_the_total_unknown_not_partial():
    # p2's reported model m-x has no price; its sent m-a does, but the reported model is the key.
    a = [answer("p1", prompt_tokens=1000, completion_tokens=0),
         answer("p2", model_sent="m-a", model_reported="m-x", prompt_tokens=10, completion_tokens=10),
         answer("p3", model_sent=None, model_reported=None, completion_tokens=5)]
    cost = run(a, [], prices=PRICES)["cost"]
    assert cost["cost_total"] is None and cost["cost_spent"] is None
    assert cost["unpriced_models"] == [None, "m-x"]


def test_unpriced_cached_row_leaves_spent_known():
    # p2 is cached and unpriced: the total is unknown, this run spent 1000 * 0.5/1k = 0.5.
    a = [answer("p1", prompt_tokens=1000), answer("p2", model_reported="old", prompt_tokens=7, cached=True)]
    cost = run(a, [], prices=PRICES)["cost"]
    assert cost["cost_total"] is None and cost["cost_spent"] == 0.5 and cost["unpriced_models"] == ["old"]


def test_no_price_table_means_every_row_with_tokens_is_unpriced():
    a = [answer("p1", prompt_tokens=3), answer("p2")]
    cost = run(a, [])["cost"]
    assert cost == {"cost_total": None, "cost_spent": None, "unpriced_models": ["m-a"]}
    cost = run([answer("p2")], [])["cost"]
    assert cost == {"cost_total": 0.0, "cost_spent": 0.0, "unpriced_models": []}


def test_check_prices_returns_a_checked_copy():
    raw = {"m": {"prompt_per_1k": 1, "completion_per_1k": 0}}
    before = copy.deepcopy(raw)
    out = check_prices(raw)
    assert out == {"m": {"prompt_per_1k": 1.0, "completion_per_1k": 0.0}}
    assert isinstance(out["m"]["prompt_per_1k"], float)
    assert raw == before and out is not raw and out["m"] is not raw["m"]
    assert check_prices({}) == {}


@pytest.mark.parametrize("prices, message", [
    ([("m", 1)], "must be a mapping"),
    ({"": {"prompt_per_1k": 1, "completion_per_1k": 1}}, "non-empty str"),
    ({"m": 1.0}, r"prices\['m'\] must be a mapping"),
    ({"m": {"prompt_per_1k": 1}}, r"prices\['m'\] is missing key 'completion_per_1k'"),
    ({"m": {"prompt_per_1k": 1, "completion_per_1k": 1, "cached_per_1k": 0}}, r"'m'.*unknown key.*cached_per_1k"),
    ({"m": {"prompt_per_1K": 1, "completion_per_1k": 1}}, r"'m'.*unknown key.*prompt_per_1K"),
    ({"m": {"prompt_per_1k": -0.1, "completion_per_1k": 1}}, r"prices\['m'\]\['prompt_per_1k'\]"),
    ({"m": {"prompt_per_1k": 1, "completion_per_1k": math.nan}}, r"prices\['m'\]\['completion_per_1k'\]"),
    ({"m": {"prompt_per_1k": math.inf, "completion_per_1k": 1}}, r"prices\['m'\]\['prompt_per_1k'\]"),
    ({"m": {"prompt_per_1k": True, "completion_per_1k": 1}}, r"prices\['m'\]\['prompt_per_1k'\]"),
    ({"m": {"prompt_per_1k": "0.5", "completion_per_1k": 1}}, r"prices\['m'\]\['prompt_per_1k'\]"),
])
def test_check_prices_rejects(prices, message):
    with pytest.raises(ValueError, match=message):
        check_prices(prices)


def test_answer_metrics_checks_the_price_table():
    with pytest.raises(ValueError, match=r"prices\['m-a'\]"):
        run([answer("p1")], [], prices={"m-a": {"prompt_per_1k": -1, "completion_per_1k": 0}})


# ---------------------------------------------------------------------------
# empty inputs, output shape, summary rows
# ---------------------------------------------------------------------------


def test_empty_frames():
    out = run([], [])
    assert out["variant"] is None and out["graders"] == {}
    assert out["counts"] == {"n_prompts": 0, "n_errored": 0, "n_cached": 0}
    for part in ("total", "retrieval", "generation"):
        assert out["latency_ms"][part]["n"] == 0 and nan(out["latency_ms"][part]["p95"])
    assert out["tokens"]["tokens_total"] == 0 and out["tokens"]["tokens_spent"] == 0
    assert out["cost"] == {"cost_total": 0.0, "cost_spent": 0.0, "unpriced_models": []}
    assert answer_summary_row(out) == {}


def test_answers_without_grades():
    out = run([answer("p1", error="x", cached=True)], [])
    assert out["variant"] == V and out["graders"] == {}
    assert out["counts"] == {"n_prompts": 1, "n_errored": 1, "n_cached": 1}


def test_output_is_json_serializable_with_plain_types():
    a = [answer("p1", retrieval_ms=1.0, generation_ms=2.0, prompt_tokens=10), answer("p2", error="x")]
    g = [det("p1", True, 1.0, ["exact"], [True]), det("p2", None, None, ["exact"], [False], status="no_answer"),
         grade("p1", "judge", score=1.0, faithfulness=1.0, relevance=1.0, citations=1.0),
         grade("p2", "judge", "failed")]
    out = run(a, g, prices=PRICES)
    back = json.loads(json.dumps(out))
    assert back["graders"]["deterministic"]["pass_rate"] == 0.5
    assert back["cost"]["cost_total"] == pytest.approx(0.005)

    def walk(node):
        if isinstance(node, dict):
            assert all(isinstance(k, str) for k in node)
            for v in node.values():
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)
        else:
            assert node is None or type(node) in (str, int, float, bool), (node, type(node))

    walk(out)
    assert set(out) == {"variant", "counts", "graders", "latency_ms", "tokens", "cost"}
    assert set(out["graders"]["deterministic"]) == {
        "n_scored", "n_graded", "n_no_answer", "n_not_applicable", "n_grader_failed", "n_missing",
        "pass_rate", "pass_rate_ci", "mean_score", "mean_score_ci", "by_form", "by_retrieval",
        "by_assertion_type",
    }


def test_answer_summary_row_flattens_one_row_per_grader():
    # decision: p1 pass 1.0 (hit), p2 fail 0.5 (miss): pass .5, mean .75, hit 1, miss 0.
    a = [answer("p1", retrieval_ms=10.0, generation_ms=10.0, prompt_tokens=1000),
         answer("p2", retrieved_gold=False, retrieval_ms=20.0, generation_ms=20.0)]
    g = [grade("p1", "decision", passed=True, score=1.0), grade("p2", "decision", passed=False, score=0.5),
         grade("p1", "static", passed=True, score=1.0), grade("p2", "static", "not_applicable")]
    m = run(a, g, prices=PRICES)
    rows = answer_summary_row(m)
    assert list(rows) == ["static", "decision"]
    row = rows["decision"]
    assert tuple(row) == SUMMARY_COLUMNS
    ci, mci = m["graders"]["decision"]["pass_rate_ci"], m["graders"]["decision"]["mean_score_ci"]
    grounding = {k: row.pop(k) for k in ("grounded_rate", "corpus_rate", "citations_per_answer")}
    assert all(nan(v) for v in grounding.values())  # only the grounding grader's row has them
    assert row == {
        "variant": V, "grader": "decision", "n": 2, "pass_rate": 0.5, "pass_rate_low": ci[0],
        "pass_rate_high": ci[1], "mean_score": 0.75, "mean_low": mci[0], "mean_high": mci[1],
        "pass_rate_hit": 1.0, "pass_rate_miss": 0.0, "p50_ms": 30.0, "p95_ms": pytest.approx(39.0),
        "cost_total": 0.5,
    }
    assert rows["static"]["n"] == 1 and nan(rows["static"]["pass_rate_miss"])
    assert pd.DataFrame(list(rows.values())).shape == (2, len(SUMMARY_COLUMNS))


def test_answer_summary_row_names_a_missing_key():
    m = run([answer("p1")], [grade("p1", "static", passed=True, score=1.0)])
    del m["graders"]["static"]["by_retrieval"]
    with pytest.raises(ValueError, match="graders.static.by_retrieval"):
        answer_summary_row(m)
    with pytest.raises(ValueError, match="'variant'"):
        answer_summary_row({})


# ---------------------------------------------------------------------------
# input checks
# ---------------------------------------------------------------------------


def test_unicode_prompt_ids():
    pids = ["frage-ü", "質問-1", "🚀", "cafe\u0301"]
    a = [answer(p, form="LÜCKE" if i % 2 else "MATCH") for i, p in enumerate(pids)]
    g = [grade(p, "static", passed=i < 3, score=1.0 if i < 3 else 0.0) for i, p in enumerate(pids)]
    m = run(a, g)["graders"]["static"]
    assert m["pass_rate"] == 0.75 and m["n_scored"] == 4
    assert m["by_form"]["LÜCKE"] == {"n": 2, "pass_rate": 0.5, "mean_score": 0.5}
    with pytest.raises(ValueError, match="'🛸'"):
        run(a, g + [grade("🛸", "static", passed=True, score=1.0)])


def test_inputs_are_not_mutated():
    a_rows = [answer("p1", form=None, retrieved_gold=None, retrieval_ms=1.0, generation_ms=2.0, prompt_tokens=5),
              answer("p2", error="x", cached=True)]
    g_rows = [det("p1", True, 1.0, ["exact"], [True]), det("p2", None, None, ["regex"], [True], status="no_answer")]
    a, g = frames(a_rows, g_rows)
    a_before, g_before = a.copy(deep=True), g.copy(deep=True)
    cells = copy.deepcopy(g["assertion_held"].tolist())
    prices = copy.deepcopy(PRICES)
    answer_metrics(a, g, prices=prices)
    pd.testing.assert_frame_equal(a, a_before)
    pd.testing.assert_frame_equal(g, g_before)
    assert g["assertion_held"].tolist() == cells and prices == PRICES


def test_nan_is_missing_and_numpy_list_cells_are_accepted():
    # a parquet round trip gives numpy arrays in list cells and NaN for missing numbers.
    a, g = frames([answer("p1", retrieval_ms=5.0, generation_ms=5.0), answer("p2", retrieval_ms=7.0)],
                  [det("p1", False, 0.5, ["exact", "regex"], [True, False])])
    g["assertion_types"] = [np.array(["exact", "regex"])]
    g["assertion_held"] = [np.array([True, False])]
    assert math.isnan(a.loc[1, "generation_ms"])
    out = answer_metrics(a, g)
    assert out["latency_ms"]["total"]["n"] == 1 and out["latency_ms"]["retrieval"]["n"] == 2
    assert out["graders"]["deterministic"]["by_assertion_type"]["regex"] == {"n": 1, "held_rate": 0.0}


@pytest.mark.parametrize("frame, column", [("answers", "retrieved_gold"), ("answers", "cached"),
                                           ("grades", "assertion_held"), ("grades", "citations")])
def test_a_missing_column_is_named(frame, column):
    a, g = frames([answer("p1")], [])
    if frame == "answers":
        a = a.drop(columns=[column])
    else:
        g = g.drop(columns=[column])
    with pytest.raises(ValueError, match=rf"{frame} is missing column\(s\) \['{column}'\]"):
        answer_metrics(a, g)


def test_an_empty_frame_without_columns_is_refused():
    a, _ = frames([], [])
    with pytest.raises(ValueError, match="grades is missing column"):
        answer_metrics(a, pd.DataFrame())


def test_not_a_dataframe():
    _, g = frames([], [])
    with pytest.raises(ValueError, match="answers must be a DataFrame"):
        answer_metrics([answer("p1")], g)


def test_one_variant_per_frame_and_the_same_in_both():
    with pytest.raises(ValueError, match=r"answers must hold one variant, got \['bm25', 'dense'\]"):
        run([answer("p1"), answer("p2", variant="dense")], [])
    with pytest.raises(ValueError, match="grades are for variant 'dense', answers for 'bm25'"):
        run([answer("p1")], [grade("p1", "static", passed=True, score=1.0, variant="dense")])


@pytest.mark.parametrize("answers, grades, message", [
    ([answer("p1")], [grade("p2", "static", passed=True, score=1.0)], "'p2' is not in the answers"),
    ([answer("p1"), answer("p1")], [], "answers has prompt 'p1' twice"),
    ([answer("p1")], [grade("p1", "static", passed=True, score=1.0)] * 2, "'p1' twice for grader 'static'"),
    ([answer("p1")], [grade("p1", "vibes", passed=True, score=1.0)], "unknown grader 'vibes'"),
    ([answer("p1")], [grade("p1", "static", "skipped")], "unknown status 'skipped'"),
    ([answer("p1")], [grade("p1", "static", "no_answer")], "'no_answer' on an answer that has no error"),
    ([answer("p1", error="x")], [grade("p1", "static", passed=True, score=1.0)],
     "'graded' on an answer that has an error"),
    ([answer("p1", error="x")], [grade("p1", "static", "no_answer", passed=True)], "cannot have passed=True"),
    ([answer("p1", error="x")], [grade("p1", "static", "no_answer", score=0.5)], "score 0 or missing"),
    ([answer("p1")], [grade("p1", "static", passed=True, score=1.5)], "score must be a number in"),
    ([answer("p1")], [grade("p1", "static", passed="yes", score=1.0)], "passed must be a bool"),
    ([answer("p1")], [det("p1", True, 1.0, ["exact", "regex"], [True])],
     "assertion_types has 2 entries, assertion_held 1"),
    ([answer("p1")], [det("p1", True, 1.0, ["fuzzy"], [True])], "unknown assertion type 'fuzzy'"),
    ([answer("p1")], [det("p1", True, 1.0, ["exact"], [1])], "assertion_held must hold bools"),
    ([answer("p1")], [grade("p1", passed=True, score=1.0, assertion_types="exact", assertion_held=[True])],
     "assertion_types must be a list"),
    ([answer("p1", prompt_tokens=-1)], [], "'p1'.*prompt_tokens must be an integer >= 0"),
    ([answer("p1", completion_tokens=2.5)], [], "completion_tokens must be an integer"),
    ([answer("p1", cached=None)], [], "cached must be a bool"),
    ([answer("p1", retrieved_gold="yes")], [], "retrieved_gold must be a bool"),
    ([answer("")], [], "prompt_id must be a non-empty str"),
])
def test_bad_rows_are_refused_naming_the_value(answers, grades, message):
    with pytest.raises(ValueError, match=message):
        run(answers, grades)


@pytest.mark.parametrize("kw, message", [
    ({"n_resamples": 0}, "n_resamples"),
    ({"seed": -1}, "seed"),
    ({"confidence": 1.0}, "confidence"),
    ({"confidence": True}, "confidence"),
])
def test_bad_parameters(kw, message):
    with pytest.raises(ValueError, match=message):
        run([], [], **kw)
