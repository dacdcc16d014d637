"""Selective retrieval (issue #26): refusal rates, the risk-coverage curve and its area, and the
threshold `abstain: auto` chooses, each on hand-worked cases."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from eval_pipeline.metrics.retrieval import MEASURES, aggregate, measure
from eval_pipeline.metrics.selective import (
    aurc,
    choose_threshold,
    correct_refusal_rate,
    false_refusal_rate,
    rc_nauc,
    refusal_f1,
    risk_coverage,
    risk_coverage_points,
)


def _frame(rows):
    """rows: (answerable, returned, hit@10, confidence[, errored])"""
    return pd.DataFrame([{"qid": f"q{i}", "answerable": r[0], "errored": r[4] if len(r) > 4 else False,
                          "returned": r[1], "first_relevant_rank": None, "hit@10": r[2] if r[0] else math.nan,
                          "confidence": r[3]} for i, r in enumerate(rows)])


FRAME = _frame([
    (True, 5, 1.0, 0.9),    # answered, right
    (True, 5, 0.0, 0.8),    # answered, wrong
    (True, 0, 0.0, 0.2),    # refused: a false refusal
    (False, 0, None, 0.1),  # refused: a correct refusal
    (False, 5, None, 0.7),  # answered an abstention question
    (False, 0, None, math.nan, True),  # errored: neither
])


def test_the_refusal_rates_by_hand():
    assert correct_refusal_rate(FRAME) == 1 / 3   # 1 of the 3 abstention questions (the errored one counts)
    assert false_refusal_rate(FRAME) == 1 / 3     # 1 of 3 answerable
    assert refusal_f1(FRAME) == 2 * 1 / (2 + 3)   # 2 refusals, 3 abstention questions
    nothing = _frame([(True, 1, 1.0, 0.5)])
    assert math.isnan(correct_refusal_rate(nothing)) and math.isnan(refusal_f1(nothing))
    assert false_refusal_rate(nothing) == 0.0


def test_the_risk_coverage_curve_and_its_area_by_hand():
    # confidences 0.9, 0.8, 0.7, 0.2, 0.1, NaN; losses 0, 1, 1, 1, 1, 1 (the errored one is wrong)
    points = risk_coverage_points([0.9, 0.8, 0.7, 0.2, 0.1, math.nan], [0, 1, 1, 1, 1, 1])
    assert points == [(1 / 6, 0.0), (2 / 6, 0.5), (3 / 6, 2 / 3), (4 / 6, 0.75), (5 / 6, 0.8), (1.0, 5 / 6)]
    expected = (0.0 + 0.5 + 2 / 3 + 0.75 + 0.8 + 5 / 6) / 6
    assert aurc(FRAME) == pytest.approx(expected, abs=1e-15)
    # the one right question is the most confident: the best order there is
    assert rc_nauc(FRAME) == pytest.approx(1.0)


def test_ties_are_answered_together():
    # two tied at the top, one right and one wrong: the curve steps over both at once
    assert risk_coverage_points([0.5, 0.5, 0.1], [0, 1, 1]) == [(2 / 3, 0.5), (1.0, 2 / 3)]
    assert risk_coverage([0.5, 0.5, 0.1], [0, 1, 1]) == pytest.approx((2 / 3) * 0.5 + (1 / 3) * (2 / 3))
    assert math.isnan(risk_coverage([], []))


def test_nauc_is_one_for_a_perfect_confidence_and_about_zero_for_a_backwards_one():
    perfect = _frame([(True, 1, 1.0, 0.9), (True, 1, 1.0, 0.8), (False, 1, None, 0.2), (True, 1, 0.0, 0.1)])
    assert rc_nauc(perfect) == pytest.approx(1.0)
    backwards = _frame([(True, 1, 1.0, 0.1), (True, 1, 1.0, 0.2), (False, 1, None, 0.8), (True, 1, 0.0, 0.9)])
    assert rc_nauc(backwards) < 0
    same = _frame([(True, 1, 1.0, 0.1), (True, 1, 1.0, 0.2)])
    assert math.isnan(rc_nauc(same))  # every loss equal: nothing to rank


def test_the_run_measures_are_registered_and_in_the_summary():
    names = {m.name for m in MEASURES if m.scope == "run"}
    assert {"correct_refusal_rate", "false_refusal_rate", "refusal_f1", "aurc", "rc_nauc"} <= names
    assert measure("false_refusal_rate").higher_is_better is False and measure("aurc").higher_is_better is False
    out = aggregate(FRAME)
    assert out["correct_refusal_rate"] == 1 / 3 and out["false_refusal_rate"] == 1 / 3
    assert "confidence" not in out  # an input, not averaged


# --- the threshold ------------------------------------------------------------------------------

CONF = [0.9, 0.8, 0.6, 0.5, 0.4, 0.3, 0.55, 0.35, 0.2, 0.1]
ANS = [True, True, True, True, True, True, False, False, False, False]


def test_max_false_refusal_refuses_as_many_abstention_questions_as_the_limit_allows():
    # answerable 0.9 0.8 0.6 0.5 0.4 0.3; abstention 0.55 0.35 0.2 0.1
    # limit 0: no answerable refused: the highest threshold is 0.3 (refuse < 0.3): 2 correct refusals
    c = choose_threshold(CONF, ANS, max_false_refusal=0.0)
    assert (c.threshold, c.correct_refusals, c.false_refusals) == (0.3, 2, 0)
    # limit 1/6: one answerable may go: 0.4 refuses 0.3 and 0.35, 0.2, 0.1: 3 correct, 1 false
    c = choose_threshold(CONF, ANS, max_false_refusal=1 / 6)
    assert (c.threshold, c.correct_refusals, c.false_refusals) == (0.4, 3, 1)
    assert c.false_refusal_rate == 1 / 6 and c.correct_refusal_rate == 3 / 4


def test_f1_and_its_ties():
    # thresholds: 0.3 -> cr 2 fr 0 f1 4/6; 0.4 -> cr 3 fr 1 f1 6/8; 0.6 -> cr 4 fr 3 f1 8/11; 0.35 -> cr 2 fr 1
    c = choose_threshold(CONF, ANS, objective="f1")
    assert (c.threshold, c.correct_refusals, c.false_refusals) == (0.4, 3, 1)
    assert c.refusal_f1 == 6 / 8 and c.max_false_refusal is None
    # t=0.5 refuses {0.1 abst}: cr 1 fr 0, f1 2/3; t=0.9 refuses {0.1, 0.5 ans, 0.5 abst}: cr 2 fr 1, f1 4/5
    c = choose_threshold([0.9, 0.1, 0.5, 0.5], [True, False, True, False], objective="f1")
    assert c.threshold == 0.9 and c.refusal_f1 == 4 / 5


def test_a_tie_in_f1_goes_to_the_lower_threshold():
    # abstention 0.1 and 0.4, answerable 0.2, 0.3, 0.9 (2 abstention questions)
    # t=0.2: refuses {0.1}: cr 1 fr 0 -> 2/3; t=0.3: cr 1 fr 1 -> 2/4; t=0.4: cr 1 fr 2 -> 2/5;
    # t=0.9: refuses {0.1, 0.2, 0.3, 0.4}: cr 2 fr 2 -> 4/6 = 2/3: tied with 0.2, which refuses fewer
    c = choose_threshold([0.1, 0.2, 0.3, 0.4, 0.9], [False, True, True, False, True], objective="f1")
    assert c.threshold == 0.2 and c.refusal_f1 == 2 / 3 and (c.correct_refusals, c.false_refusals) == (1, 0)


def test_no_threshold_when_nothing_refuses_correctly_and_empty_lists_are_always_refused():
    # the abstention question is the most confident: any threshold refuses the answerable one first
    c = choose_threshold([0.1, 0.9], [True, False], objective="f1")
    assert c.threshold is None and c.refusal_f1 == 0.0 and c.correct_refusals == 0
    # the empty list (no confidence) is refused whatever the threshold: with no answerable one to spare,
    # every threshold refuses just it, and the lowest (none) is kept
    c = choose_threshold([math.nan, 0.9, 0.8], [False, True, True], max_false_refusal=0.0)
    assert c.correct_refusals == 1 and c.false_refusals == 0 and c.threshold is None


def test_a_tuning_set_without_abstention_questions_is_refused_with_a_clear_error():
    with pytest.raises(ValueError, match=r"^variant 'v': the 3 tuning questions hold no abstention question "
                                         r"\(3 answerable\)"):
        choose_threshold([0.1, 0.2, 0.3], [True, True, True], where="variant 'v': the 3 tuning questions")
    with pytest.raises(ValueError, match="hold no answerable question"):
        choose_threshold([0.1], [False])
    with pytest.raises(ValueError, match="objective 'best' is not valid"):
        choose_threshold(CONF, ANS, objective="best")
    with pytest.raises(ValueError, match="max_false_refusal must be a number in"):
        choose_threshold(CONF, ANS, max_false_refusal=1.5)


def test_rc_nauc_is_at_its_best_undefined_only_when_nothing_was_lost():
    """rc_nauc is NaN whenever every loss is equal: after a run that lost nothing (every question right, aurc 0:
    no confidence could do better) and after one that lost everything (aurc 1). Only the first is "at its best";
    the measure says which from the run's own row, so a gate can tell a perfect run from a ruined one."""
    from eval_pipeline.metrics.retrieval import at_best

    right = aggregate(_frame([(True, 1, 1.0, 0.1), (True, 1, 1.0, 0.2)]))
    wrong = aggregate(_frame([(True, 1, 0.0, 0.1), (True, 1, 0.0, 0.2)]))
    measured = aggregate(FRAME)
    assert math.isnan(right["rc_nauc"]) and math.isnan(wrong["rc_nauc"])
    assert right["aurc"] == 0.0 and wrong["aurc"] == 1.0
    assert at_best(right) == {"rc_nauc"}
    assert at_best(wrong) == set() and at_best(measured) == set()
    assert at_best(pd.Series(right)) == {"rc_nauc"}  # a summary row as the verdict holds it
    assert at_best({"rc_nauc": math.nan}) == set()  # no aurc to say which: not at its best
