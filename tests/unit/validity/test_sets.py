"""Tests for eval_pipeline.validity.sets: Kendall's τ-b between two question sets' rankings of the
same variants, its bootstrap interval over questions, and the flipped pairs. Expected values are
worked out by hand in the comments."""

from __future__ import annotations

import math
import pickle

import numpy as np
import pandas as pd
import pytest

from eval_pipeline.validity.sets import (
    bootstrap_tau,
    compare_sets,
    flipped_pairs,
    kendall_tau,
    question_matrix,
    rank_variants,
)


def frames(values: dict[str, list[float]], metric: str = "ndcg@10", abstentions: int = 0) -> dict[str, pd.DataFrame]:
    """Per-question frames: one row per value (answerable), plus `abstentions` rows with NaN."""
    out = {}
    for variant, vals in values.items():
        rows = [{"qid": f"q{i}", "answerable": True, metric: v} for i, v in enumerate(vals)]
        rows += [{"qid": f"a{i}", "answerable": False, metric: math.nan} for i in range(abstentions)]
        out[variant] = pd.DataFrame(rows)
    return out


def test_two_variants_same_order_is_one_reversed_is_minus_one():
    assert kendall_tau({"a": 0.9, "b": 0.1}, {"a": 0.6, "b": 0.5}) == 1.0
    assert kendall_tau({"a": 0.9, "b": 0.1}, {"a": 0.4, "b": 0.5}) == -1.0
    assert flipped_pairs({"a": 0.9, "b": 0.1}, {"a": 0.4, "b": 0.5}) == [("a", "b")]


def test_identical_rankings_give_one_and_no_flip():
    means = {"p": 0.4, "q": 0.3, "r": 0.2, "s": 0.1}
    assert kendall_tau(means, dict(means)) == 1.0
    assert flipped_pairs(means, dict(means)) == []


def test_one_swapped_pair_of_four():
    # 6 pairs, (q, r) discordant: C = 5, D = 1, no ties -> (5 - 1) / 6
    a = {"p": 4, "q": 3, "r": 2, "s": 1}
    b = {"p": 4, "q": 2, "r": 3, "s": 1}
    assert kendall_tau(a, b) == pytest.approx(4 / 6)
    assert flipped_pairs(a, b) == [("q", "r")]


def test_ties_use_tau_b():
    # pairs (x,y): A +, B - (discordant); (x,z): A +, B - (discordant); (y,z): tied in A.
    # C - D = -2; P = 3, T_A = 1, T_B = 0 -> -2 / sqrt((3 - 1) * 3) = -0.8165
    a = {"x": 3.0, "y": 2.0, "z": 2.0}
    b = {"x": 1.0, "y": 2.0, "z": 3.0}
    assert kendall_tau(a, b) == pytest.approx(-2 / math.sqrt(6))
    assert flipped_pairs(a, b) == [("x", "y"), ("x", "z")]  # A's order: x, then y and z tied (by name)
    # means within 1e-12 are a tie
    assert kendall_tau({"x": 0.5, "y": 0.5 + 1e-13, "z": 0.1}, {"x": 0.2, "y": 0.3, "z": 0.1}) == pytest.approx(
        2 / math.sqrt(2 * 3))


def test_undefined_cases_are_nan():
    assert math.isnan(kendall_tau({"a": 1.0}, {"a": 2.0}))  # one variant
    assert math.isnan(kendall_tau({"a": 0.5, "b": 0.5}, {"a": 0.1, "b": 0.2}))  # every pair tied in A
    with pytest.raises(ValueError, match="only in A"):
        kendall_tau({"a": 1.0, "b": 0.0}, {"a": 1.0, "c": 0.0})


def test_rank_variants_average_ranks_for_ties():
    assert rank_variants({"a": 0.5, "b": 0.7, "c": 0.5}) == {"b": 1.0, "a": 2.5, "c": 2.5}
    with pytest.raises(ValueError, match="finite"):
        rank_variants({"a": math.nan})


def test_bootstrap_of_constant_questions_is_the_point():
    # every question has its variant's mean: each resample gives the same means, so the interval is tau itself
    a = np.array([[0.9] * 5, [0.5] * 5, [0.1] * 5])
    b = np.array([[0.1] * 7, [0.5] * 7, [0.9] * 7])
    assert bootstrap_tau(a, b, n_resamples=50, seed=1) == (-1.0, -1.0, 0)
    assert bootstrap_tau(a, a, n_resamples=50, seed=1) == (1.0, 1.0, 0)


def test_bootstrap_is_seeded_and_bounded():
    rng = np.random.default_rng(0)
    a, b = rng.random((4, 30)), rng.random((4, 40))
    first = bootstrap_tau(a, b, n_resamples=200, seed=7)
    assert first == bootstrap_tau(a, b, n_resamples=200, seed=7)
    assert -1.0 <= first[0] <= first[1] <= 1.0
    with pytest.raises(ValueError, match="seed"):
        bootstrap_tau(a, b, seed=-1)
    with pytest.raises(ValueError, match="confidence"):
        bootstrap_tau(a, b, confidence=1.0)


def test_question_matrix_leaves_out_abstentions_and_refuses_gaps():
    variants, qids, values = question_matrix(frames({"v1": [1, 0], "v2": [0, 1]}, abstentions=2), "ndcg@10")
    assert variants == ["v1", "v2"] and qids == ["q0", "q1"]
    assert values.tolist() == [[1, 0], [0, 1]]
    uneven = {"v1": frames({"v1": [1, 0]})["v1"], "v2": frames({"v2": [1, 0, 1]})["v2"]}
    with pytest.raises(ValueError, match="other questions.*extra \\['q2'\\]"):
        question_matrix(uneven, "ndcg@10")
    with pytest.raises(ValueError, match="no finite ndcg@10.*q1"):
        question_matrix(frames({"v1": [1, math.nan]}), "ndcg@10")
    with pytest.raises(ValueError, match="no 'mrr'"):
        question_matrix(frames({"v1": [1]}), "mrr")


def test_compare_sets_end_to_end_reversed():
    # set A means: v1 1.0, v2 0.5, v3 0.0; set B means: v1 0.0, v2 2/3, v3 1.0 -> reversed, tau -1, 3 flips
    a = frames({"v1": [1, 1], "v2": [1, 0], "v3": [0, 0]}, abstentions=1)
    b = frames({"v1": [0, 0, 0], "v2": [1, 1, 0], "v3": [1, 1, 1]})
    result = compare_sets(a, b, metrics=["ndcg@10"], n_resamples=100, seed=3)
    m = result.get("ndcg@10")
    assert m is not None
    assert m.tau == -1.0
    assert m.means_b["v2"] == pytest.approx(2 / 3)
    assert m.ranks_a == {"v1": 1.0, "v2": 2.0, "v3": 3.0} and m.ranks_b == {"v1": 3.0, "v2": 2.0, "v3": 1.0}
    assert m.flips == (("v1", "v2"), ("v1", "v3"), ("v2", "v3"))
    assert (m.questions_a, m.questions_b) == (2, 3)
    assert m.table()["shift"].tolist() == [2.0, 0.0, -2.0]
    assert -1.0 <= m.low <= m.high <= 1.0
    assert result.to_json()["metrics"]["ndcg@10"]["tau"] == -1.0


def test_compare_sets_default_metrics_and_variant_mismatch():
    a = {v: f.assign(mrr=f["ndcg@10"]) for v, f in frames({"v1": [1, 0], "v2": [0, 0]}).items()}
    b = {v: f.assign(mrr=f["ndcg@10"]) for v, f in frames({"v1": [1, 1], "v2": [0, 1]}).items()}
    result = compare_sets(a, b, n_resamples=20)
    assert [m.metric for m in result.metrics] == ["mrr", "ndcg@10"]  # the headline metrics both carry
    assert result.notes == ("2 variant(s): τ says little with fewer than 3",)
    with pytest.raises(ValueError, match="only on B \\['v3'\\]"):
        compare_sets(a, {**b, "v3": b["v1"]})


# --- the report section --------------------------------------------------------------------------


def test_report_section_tables_metadata_and_weak_label(tmp_path):
    from types import SimpleNamespace

    from eval_pipeline.reporting.report import SECTIONS
    from eval_pipeline.reporting.set_validity import ComparedSet, measure_set_validity, render_set_validity

    human = SimpleNamespace(header={"source": "hand-written"})
    ict_set = SimpleNamespace(header={"source": "generated", "generator": "ict", "generator_strength": "weak"})
    a = frames({"v1": [1, 1], "v2": [1, 0], "v3": [0, 0]})
    b = frames({"v1": [1, 1, 1], "v2": [0, 1, 1], "v3": [0, 0, 1]})  # same order: tau 1
    inputs = SimpleNamespace(per_variant=a, question_set=human,
                             compared_sets=[ComparedSet("ict", ict_set, b)])
    measured = measure_set_validity(inputs, n_resamples=50)
    assert measured is not None
    part = render_set_validity(pickle.loads(pickle.dumps(measured)))  # the findings asset stores it
    files = part.write(tmp_path, "") if part.write else {}
    lines = "\n".join(part.lines(files) if callable(part.lines) else part.lines)
    assert "## Do the question sets agree?" in lines
    assert "A: hand-written" in lines and "B: ict (generated (ict, weak))" in lines
    assert "B is a weak generated set" in lines
    assert "| ndcg@10 | 2 | 3 | 1.000 |" in lines
    assert "set_validity.json" in lines
    assert part.metadata["set tau ndcg@10"] == 1.0
    assert -1.0 <= part.metadata["set tau ndcg@10 low"] <= 1.0
    assert part.output["set_validity"][0]["metrics"]["ndcg@10"]["flips"] == []
    # nothing to compare: no section
    assert measure_set_validity(SimpleNamespace(per_variant=a, question_set=human)) is None
    assert "set_validity" in SECTIONS
