"""Tests for eval_pipeline.validity.power: hand-computed values, then simulations that check
the formulae mean what they say (an effect equal to the MDE is detected ~80 % of the time)."""

from __future__ import annotations

import math
import subprocess
import sys

import numpy as np
import pytest

from eval_pipeline.validity.power import (
    minimum_detectable_effect,
    probability_best,
    questions_needed,
    tolerance_below_mde,
)

# z_{0.975} + z_{0.8} = 1.959963984540054 + 0.8416212335729143
Z = 2.801585218112968
Z_975 = 1.959963984540054


# ---------------------------------------------------------------------------
# minimum_detectable_effect
# ---------------------------------------------------------------------------


def test_mde_by_hand():
    # d = [-1, 1]: sd (ddof=1) = sqrt(((-1)^2 + 1^2) / 1) = sqrt(2), n = 2
    #   MDE = Z * sqrt(2) / sqrt(2) = Z = 2.8016
    assert minimum_detectable_effect([-1.0, 1.0]) == pytest.approx(Z, abs=1e-12)
    # d = [1, -1, 1, -1]: sd = sqrt(4 / 3), n = 4 -> MDE = Z * sqrt(4/3) / 2 = Z / sqrt(3) = 1.6175
    assert minimum_detectable_effect([1, -1, 1, -1]) == pytest.approx(Z / math.sqrt(3), abs=1e-12)
    assert minimum_detectable_effect([1, -1, 1, -1]) == pytest.approx(1.617496, abs=1e-6)


def test_mde_does_not_depend_on_the_mean_difference():
    # shifting every difference by 0.3 keeps sd, so the MDE is unchanged
    assert minimum_detectable_effect([-0.7, 1.3]) == pytest.approx(Z, abs=1e-12)


def test_mde_shrinks_with_sqrt_n():
    d = np.array([0.0, 1.0, 0.0, -1.0, 1.0, 0.0, 0.0, -1.0])
    # tiling 4x keeps the spread (sd changes only through ddof: (32-1) vs (8-1))
    small, large = minimum_detectable_effect(d), minimum_detectable_effect(np.tile(d, 4))
    sd8, sd32 = d.std(ddof=1), np.tile(d, 4).std(ddof=1)
    assert large / small == pytest.approx((sd32 / math.sqrt(32)) / (sd8 / math.sqrt(8)), abs=1e-12)
    assert large < 0.55 * small


def test_mde_with_other_alpha_and_power():
    # alpha 0.01, power 0.9: z_{0.995} + z_{0.9} = 2.5758293 + 1.2815516 = 3.8573809
    assert minimum_detectable_effect([-1.0, 1.0], alpha=0.01, power=0.9) == pytest.approx(3.8573808690935, abs=1e-9)


@pytest.mark.parametrize("d", [[], [0.3], [0.0, 0.0, 0.0], [0.1] * 50])
def test_mde_is_nan_when_the_spread_is_undefined(d):
    # n < 2: no spread; all equal: sd 0 says nothing about a real change (documented: NaN, not 0)
    assert math.isnan(minimum_detectable_effect(d))
    assert questions_needed(d, effect=0.05) is None


@pytest.mark.parametrize(
    "kwargs, error, needle",
    [
        ({"differences": [1.0, float("nan")]}, ValueError, "position 1"),
        ({"differences": [1.0, float("inf")]}, ValueError, "position 1"),
        ({"differences": "0101"}, TypeError, "differences"),
        ({"differences": {"q1": 1.0}}, TypeError, "differences"),
        ({"differences": [[1.0, 2.0]]}, ValueError, "one-dimensional"),
        ({"differences": [1.0, 2.0], "alpha": 0.0}, ValueError, "alpha"),
        ({"differences": [1.0, 2.0], "alpha": 1.0}, ValueError, "alpha"),
        ({"differences": [1.0, 2.0], "alpha": True}, ValueError, "alpha"),
        ({"differences": [1.0, 2.0], "power": 1.0}, ValueError, "power"),
        ({"differences": [1.0, 2.0], "power": 0.02}, ValueError, "power must be greater"),
    ],
)
def test_mde_rejects_bad_input(kwargs, error, needle):
    with pytest.raises(error, match=needle):
        minimum_detectable_effect(**kwargs)


def test_mde_does_not_mutate_input():
    d = np.array([0.0, 1.0, -1.0, 0.5])
    before = d.copy()
    minimum_detectable_effect(d)
    questions_needed(d)
    np.testing.assert_array_equal(d, before)


def test_no_scipy_is_imported():
    code = ("import sys, eval_pipeline.validity.power; "
            "assert 'scipy' not in sys.modules, 'power imported scipy'")
    proc = subprocess.run([sys.executable, "-c", code], check=False, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr


# ---------------------------------------------------------------------------
# questions_needed
# ---------------------------------------------------------------------------


def test_questions_needed_by_hand():
    # d = [-1, 1]: sd^2 = 2; effect 0.5 -> (Z * sqrt(2) / 0.5)^2 = 8 Z^2 = 62.79 -> 63
    assert questions_needed([-1.0, 1.0], effect=0.5) == 63
    # effect 0.02 (the default): (Z * sqrt(2) / 0.02)^2 = 5000 Z^2 = 39244.4 -> 39245
    assert questions_needed([-1.0, 1.0]) == math.ceil(5000 * Z**2)
    assert questions_needed([-1.0, 1.0]) == 39245


def test_questions_needed_inverts_the_mde():
    # the effect that n questions detect needs exactly n questions (no float round-up to n + 1)
    rng = np.random.default_rng(5)
    for n in (2, 17, 300):
        d = rng.normal(0.0, 0.4, n)
        assert questions_needed(d, effect=minimum_detectable_effect(d)) == n


def test_questions_needed_is_at_least_two():
    # a huge effect gives (Z * sqrt(2) / 100)^2 < 1, but a spread needs two questions
    assert questions_needed([-1.0, 1.0], effect=100.0) == 2


@pytest.mark.parametrize("effect", [0.0, -0.02, float("nan"), float("inf"), True, "0.02"])
def test_questions_needed_rejects_bad_effect(effect):
    with pytest.raises(ValueError, match="effect"):
        questions_needed([-1.0, 1.0], effect=effect)


# ---------------------------------------------------------------------------
# simulations: the formulae mean what they say
# ---------------------------------------------------------------------------


def _detection_rate(rng: np.random.Generator, effect: float, sd: float, n: int, reps: int) -> float:
    """Share of `reps` simulated paired experiments (n normal differences with mean `effect`
    and sd `sd`) in which a two-sided z-test at alpha 0.05 (sample sd) rejects mean 0."""
    d = rng.normal(effect, sd, size=(reps, n))
    z = d.mean(axis=1) / (d.std(axis=1, ddof=1) / math.sqrt(n))
    return float(np.mean(np.abs(z) > Z_975))


def test_an_effect_equal_to_the_mde_is_detected_with_the_stated_power():
    rng = np.random.default_rng(20240611)
    pilot = rng.normal(0.0, 0.3, 300)  # the observed differences of a 300-question run
    mde = minimum_detectable_effect(pilot)
    sd = float(pilot.std(ddof=1))
    assert mde == pytest.approx(Z * sd / math.sqrt(300))
    # 4000 experiments: the rate's standard error is sqrt(0.8 * 0.2 / 4000) = 0.0063
    rate = _detection_rate(rng, mde, sd, 300, 4000)
    assert 0.77 <= rate <= 0.83, rate
    # and with no effect the test rejects at about alpha (se 0.0034)
    null_rate = _detection_rate(rng, 0.0, sd, 300, 4000)
    assert 0.035 <= null_rate <= 0.065, null_rate


def test_questions_needed_gives_the_stated_power():
    rng = np.random.default_rng(7)
    pilot = rng.normal(0.0, 0.25, 200)
    sd = float(pilot.std(ddof=1))
    n = questions_needed(pilot, effect=0.05)
    assert n == math.ceil((Z * sd / 0.05) ** 2)
    rate = _detection_rate(rng, 0.05, sd, n, 4000)
    assert 0.77 <= rate <= 0.85, (n, rate)  # ceil() rounds n up, so power is at least 0.8


def test_power_holds_for_paired_hit_metrics():
    # hit@k differences are -1, 0 or +1 (variant and baseline agree on most questions), far
    # from normal per question; the mean of 300 of them is close enough to normal.
    # A 300-question pilot where the variant wins 12 % and loses 8 % of the questions, then
    # 4000 experiments whose true mean difference is the pilot's MDE, with the pilot's share
    # of changed questions s: P(+1) = (s + mde) / 2, P(-1) = (s - mde) / 2.
    rng = np.random.default_rng(11)
    values = np.array([-1.0, 0.0, 1.0])
    pilot = rng.choice(values, size=300, p=[0.08, 0.80, 0.12])
    mde = minimum_detectable_effect(pilot)
    s = float(np.mean(pilot != 0))
    p_win, p_loss = (s + mde) / 2, (s - mde) / 2
    d = rng.choice(values, size=(4000, 300), p=[p_loss, 1 - p_win - p_loss, p_win])
    z = d.mean(axis=1) / (d.std(axis=1, ddof=1) / math.sqrt(300))
    rate = float(np.mean(np.abs(z) > Z_975))
    # the alternative's spread is s - mde^2 rather than the pilot's s - mean^2, a little
    # smaller, so the rate sits slightly above 0.8 (0.80-0.83 over 40 seeds)
    assert 0.76 <= rate <= 0.86, (mde, rate)


# ---------------------------------------------------------------------------
# tolerance_below_mde
# ---------------------------------------------------------------------------


def test_tolerance_below_mde_warns_with_both_numbers():
    text = tolerance_below_mde(0.05, 0.08, metric="hit@5")
    assert text is not None
    assert "0.050 on hit@5" in text and "0.080" in text and "noise" in text


def test_tolerance_at_or_above_mde_does_not_warn():
    assert tolerance_below_mde(0.08, 0.08) is None
    assert tolerance_below_mde(0.1, 0.08) is None
    assert tolerance_below_mde(0.0, 0.0) is None


def test_unknown_mde_does_not_warn():
    assert tolerance_below_mde(0.05, float("nan")) is None


@pytest.mark.parametrize(
    "args, kwargs, needle",
    [
        ((1.5, 0.1), {}, "tolerance"),
        ((-0.1, 0.1), {}, "tolerance"),
        ((float("nan"), 0.1), {}, "tolerance"),
        ((True, 0.1), {}, "tolerance"),
        ((0.05, -0.1), {}, "mde"),
        ((0.05, float("inf")), {}, "mde"),
        ((0.05, "0.1"), {}, "mde"),
        ((0.05, 0.1), {"metric": ""}, "metric"),
    ],
)
def test_tolerance_below_mde_rejects_bad_input(args, kwargs, needle):
    with pytest.raises(ValueError, match=needle):
        tolerance_below_mde(*args, **kwargs)


# ---------------------------------------------------------------------------
# probability_best
# ---------------------------------------------------------------------------


def test_single_variant_is_best_for_sure():
    assert probability_best({"only": [0.1, 0.9]}) == {"only": 1.0}


def test_identical_variants_split_every_resample():
    x = [1.0, 0.0, 1.0, 0.5, 0.25]
    assert probability_best({"a": x, "b": list(x)}) == {"a": 0.5, "b": 0.5}
    # three-way tie with a loser: one question, a and b score 1, c scores 0
    assert probability_best({"a": [1.0], "b": [1.0], "c": [0.0]}) == {"a": 0.5, "b": 0.5, "c": 0.0}


def test_ties_within_float_noise_are_ties():
    # 0.1 + 0.2 is 0.30000000000000004, not 0.3: equal on paper, so a tie in every resample
    assert 0.1 + 0.2 != 0.3
    assert probability_best({"a": [0.1 + 0.2, 0.5], "b": [0.3, 0.5]}, n_resamples=200) == {"a": 0.5, "b": 0.5}


def test_paired_resampling_keeps_a_uniform_improvement_on_top():
    # questions vary from 0 to 1 in difficulty; "better" is 0.01 above "base" on every one.
    # Resampling questions jointly, better wins every resample; resampling the variants
    # independently would give something near 0.5.
    x = np.linspace(0.0, 0.9, 50)
    out = probability_best({"base": x, "better": x + 0.01}, n_resamples=1000)
    assert out == {"base": 0.0, "better": 1.0}


def test_probability_best_by_hand():
    # a = [1, 1, 0], b = [0.5, 0.5, 0.5]. A resample of 3 questions gives a mean of
    # (number of picks from q1, q2) / 3, never 0.5, so there are no ties; a wins when at
    # least 2 of 3 picks come from {q1, q2}: C(3,2) (2/3)^2 (1/3) + (2/3)^3 = 12/27 + 8/27 = 20/27
    out = probability_best({"a": [1.0, 1.0, 0.0], "b": [0.5, 0.5, 0.5]}, n_resamples=20000, seed=3)
    # se = sqrt(0.74 * 0.26 / 20000) = 0.0031
    assert out["a"] == pytest.approx(20 / 27, abs=0.015)
    assert out["a"] + out["b"] == pytest.approx(1.0, abs=1e-12)


def test_probability_best_half_split_by_hand():
    # a = [1, 0], b = [0, 1]: picks (q1, q1) -> a (1/4), (q2, q2) -> b (1/4), mixed -> tie (1/2)
    # so each gets 1/4 + 1/2 * 1/2 = 1/2
    out = probability_best({"a": [1.0, 0.0], "b": [0.0, 1.0]}, n_resamples=20000, seed=1)
    assert out["a"] == pytest.approx(0.5, abs=0.015)
    assert out["a"] + out["b"] == pytest.approx(1.0, abs=1e-12)


def test_probability_best_is_reproducible_and_ordered_like_the_input():
    rng = np.random.default_rng(0)
    scores = {name: rng.integers(0, 2, 80).astype(float) for name in ("z", "a", "m")}
    first = probability_best(scores, n_resamples=3000, seed=9)
    assert list(first) == ["z", "a", "m"]
    assert probability_best(scores, n_resamples=3000, seed=9) == first
    assert sum(first.values()) == pytest.approx(1.0, abs=1e-9)
    assert all(0.0 <= p <= 1.0 for p in first.values())


def test_probability_best_batches_give_a_valid_distribution():
    # 5 variants x 400 questions x 2000 resamples = 4M cells: several batches
    rng = np.random.default_rng(2)
    scores = {f"v{i}": rng.random(400) + 0.002 * i for i in range(5)}
    out = probability_best(scores, n_resamples=2000, seed=0)
    assert sum(out.values()) == pytest.approx(1.0, abs=1e-9)


@pytest.mark.parametrize(
    "scores, kwargs, error, needle",
    [
        ({}, {}, ValueError, "empty"),
        ({"a": []}, {}, ValueError, "no questions"),
        ({"a": [1.0, 0.0], "b": [1.0]}, {}, ValueError, "paired"),
        ({"a": [1.0, float("nan")]}, {}, ValueError, r"per_question_scores\['a'\].*position 1"),
        ({"a": "10"}, {}, TypeError, r"per_question_scores\['a'\]"),
        ([[1.0]], {}, TypeError, "per_question_scores"),
        ({"a": [1.0]}, {"n_resamples": 0}, ValueError, "n_resamples"),
        ({"a": [1.0]}, {"seed": -1}, ValueError, "seed"),
        ({"a": [1.0]}, {"seed": 1.0}, ValueError, "seed"),
    ],
)
def test_probability_best_rejects_bad_input(scores, kwargs, error, needle):
    with pytest.raises(error, match=needle):
        probability_best(scores, **kwargs)


def test_probability_best_does_not_mutate():
    a, b = np.array([1.0, 0.0, 0.5]), [0.0, 1.0, 0.5]
    a_before, b_before = a.copy(), list(b)
    probability_best({"a": a, "b": b}, n_resamples=100)
    np.testing.assert_array_equal(a, a_before)
    assert b == b_before
