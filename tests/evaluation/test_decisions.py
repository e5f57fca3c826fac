"""Paired decisions over seeds: Student's t in closed form, Holm's correction, the minimum effect."""

import math

import numpy as np
import pytest

from poscli.evaluation.stats import benjamini_hochberg, decide, holm, paired_seed_test, t_quantile, t_two_sided_p


@pytest.mark.parametrize(
    "df, t, p",
    [
        # two-sided 5% and 1% critical values of Student's t (any statistics table)
        (1, 12.706, 0.05),
        (2, 4.303, 0.05),
        (3, 3.182, 0.05),
        (4, 2.776, 0.05),
        (5, 2.571, 0.05),
        (10, 2.228, 0.05),
        (2, 9.925, 0.01),
        (4, 4.604, 0.01),
        (9, 3.250, 0.01),
    ],
)
def test_the_closed_form_t_matches_the_tables(df, t, p):
    assert t_two_sided_p(t, df) == pytest.approx(p, abs=2e-4)
    assert t_quantile(df) == pytest.approx(t, abs=2e-3) if p == 0.05 else True


def test_t_p_values_agree_with_a_simulation_of_the_t_statistic():
    """P(|T| > t) for T = mean / (sd / sqrt(n)) of n standard normals, counted, against the formula."""
    rng = np.random.default_rng(0)
    for n in (3, 6):
        draws = rng.standard_normal((200_000, n))
        t = draws.mean(1) / (draws.std(1, ddof=1) / math.sqrt(n))
        for threshold in (1.0, 2.0, 3.0):
            assert (np.abs(t) > threshold).mean() == pytest.approx(t_two_sided_p(threshold, n - 1), abs=4e-3)


def test_holm_is_the_step_down_of_its_definition_and_keeps_nan():
    p = [0.01, 0.04, 0.03, float("nan"), 0.005]
    adjusted = holm(p)
    # sorted 0.005, 0.01, 0.03, 0.04 times 4, 3, 2, 1, made monotone
    assert adjusted[4] == pytest.approx(0.02) and adjusted[0] == pytest.approx(0.03)
    assert adjusted[2] == pytest.approx(0.06) and adjusted[1] == pytest.approx(0.06)
    assert math.isnan(adjusted[3])
    assert all(a >= b for a, b in zip(adjusted, p) if not math.isnan(a))


def test_holm_controls_the_familywise_error_under_the_null():
    rng = np.random.default_rng(1)
    false = sum(any(a < 0.05 for a in holm(list(rng.uniform(size=20)))) for _ in range(4000))
    assert false / 4000 < 0.06


def test_a_decision_needs_both_the_corrected_test_and_the_minimum_effect():
    assert decide(0.95, 0.01) == "<" and decide(1.05, 0.01) == ">"
    assert decide(0.995, 1e-9) == "≈", "under 1% is tied however small p is"
    assert decide(0.90, 0.06) == "≈" and decide(0.90, float("nan")) == "≈"


def test_the_paired_test_reproduces_a_hand_computed_t_and_its_interval():
    ratios = np.array([0.947, 0.941, 0.984])  # YaRN / dynamic NTK per seed (docs: p = 0.09 with 3 seeds)
    logs = np.log(ratios)
    ratio, low, high, p = paired_seed_test(logs)
    t = logs.mean() / (logs.std(ddof=1) / math.sqrt(3))
    assert ratio == pytest.approx(math.exp(logs.mean()))
    assert p == pytest.approx(t_two_sided_p(t, 2)) and 0.08 < p < 0.10
    assert low < ratio < high and (low < 1 < high)


def test_a_published_files_screen_corrects_every_comparison_in_it_together_by_benjamini_hochberg():
    """Two comparisons written into one file (say press2022 and the recent encodings' claims):
    inside ``corrected_together`` each decision's Holm p is the one over the union of both
    comparisons' tests, not over its own comparison's, and each footer counts the file's tests."""
    from poscli.study.paired import Decisions, corrected_together

    rng = np.random.default_rng(0)
    draws = {"a": [rng.normal(0.05, 0.03, 5) for _ in range(3)], "b": [rng.normal(0.02, 0.03, 5) for _ in range(4)]}

    def writer(name):
        def write():
            decisions = Decisions()
            indices = [decisions.add(log_ratios) for log_ratios in draws[name]]
            decisions.finish()
            return [decisions.adjusted[i] for i in indices], decisions.footer()

        return write

    (adjusted_a, footer_a), (adjusted_b, footer_b) = corrected_together([writer("a"), writer("b")])
    raw = [paired_seed_test(log_ratios)[3] for log_ratios in draws["a"] + draws["b"]]
    assert adjusted_a + adjusted_b == pytest.approx(benjamini_hochberg(raw))  # the screen: one false discovery rate
    alone, _ = writer("a")()
    assert alone == pytest.approx(holm(raw[:3])) and alone != pytest.approx(adjusted_a)  # the file's screen is larger
    assert "7 tests of this file's screen" in footer_a and "3 of them here" in footer_a and "4 of them here" in footer_b
    assert "exploratory, not verdicts" in footer_a
