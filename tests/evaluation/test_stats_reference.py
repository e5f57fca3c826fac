"""The hand-written statistics against scipy and statsmodels (issue 62, item 5): the t distribution at
whole and fractional degrees of freedom, paired and Welch t-tests with their intervals, Holm and
Benjamini-Hochberg, the Wilson interval, and the Jeffreys interval the passkey cells start from."""

import numpy as np
import pytest

scipy_stats = pytest.importorskip("scipy.stats")
multitest = pytest.importorskip("statsmodels.stats.multitest")
proportion = pytest.importorskip("statsmodels.stats.proportion")

from poscli.evaluation import stats  # noqa: E402
from poscli.evaluation.passkey_tables import bootstrap_accuracy  # noqa: E402


@pytest.mark.parametrize("df", [1, 2, 3, 4, 5, 9, 30, 2.5, 3.7, 11.2, 150.0])
def test_the_t_tail_and_quantile_match_scipy_at_whole_and_fractional_degrees_of_freedom(df):
    for t in (0.0, 0.3, 1.0, 2.2, 4.0, 12.0, -1.7):
        assert stats.t_sf(t, df) == pytest.approx(scipy_stats.t.sf(t, df), rel=1e-9, abs=1e-14)
    assert stats.t_quantile(df) == pytest.approx(scipy_stats.t.ppf(0.975, df), rel=1e-9)
    if float(df).is_integer():
        assert stats.t_two_sided_p(2.2, int(df)) == pytest.approx(2 * scipy_stats.t.sf(2.2, df), rel=1e-9)


def samples(seed: int, n: int, shift: float = 0.0, scale: float = 1.0) -> np.ndarray:
    return np.random.default_rng(seed).normal(shift, scale, n)


@pytest.mark.parametrize("seed, n", [(0, 3), (1, 5), (2, 8)])
def test_the_paired_t_test_and_its_interval_match_scipy(seed, n):
    differences = samples(seed, n, shift=0.4)
    mean, low, high, p = stats.paired_t(differences)
    reference = scipy_stats.ttest_1samp(differences, 0.0)
    interval = reference.confidence_interval(0.95)
    assert p == pytest.approx(reference.pvalue, rel=1e-9)
    assert (low, high) == pytest.approx((interval.low, interval.high), rel=1e-9)
    assert mean == pytest.approx(differences.mean())


@pytest.mark.parametrize(
    "seed, sizes, scales", [(0, (3, 5), (1.0, 3.0)), (1, (5, 5), (1.0, 1.0)), (2, (4, 3), (2, 0.5))]
)
def test_welch_and_its_interval_match_scipy(seed, sizes, scales):
    a, b = samples(seed, sizes[0], 0.5, scales[0]), samples(seed + 10, sizes[1], 0.0, scales[1])
    difference, low, high, p, _ = stats.welch_t(a, b)
    reference = scipy_stats.ttest_ind(a, b, equal_var=False)
    interval = reference.confidence_interval(0.95)
    assert p == pytest.approx(reference.pvalue, rel=1e-8)
    assert (low, high) == pytest.approx((interval.low, interval.high), rel=1e-8)
    assert difference == pytest.approx(a.mean() - b.mean())


P_VALUES = [0.001, 0.04, 0.03, 0.5, 0.012, 0.2, 0.049, 0.8]


@pytest.mark.parametrize("method, ours", [("holm", stats.holm), ("fdr_bh", stats.benjamini_hochberg)])
def test_holm_and_benjamini_hochberg_match_statsmodels(method, ours):
    expected = multitest.multipletests(P_VALUES, method=method)[1]
    assert ours(P_VALUES) == pytest.approx(list(expected), rel=1e-12)
    with_untested = ours([*P_VALUES[:3], float("nan")])
    assert np.isnan(with_untested[3])
    assert with_untested[:3] == pytest.approx(list(multitest.multipletests(P_VALUES[:3], method=method)[1]))


@pytest.mark.parametrize("correct, trials", [(0, 50), (3, 50), (25, 50), (50, 50), (7, 9)])
def test_the_wilson_interval_matches_statsmodels(correct, trials):
    low, high = stats.wilson_interval(correct, trials)
    expected = proportion.proportion_confint(correct, trials, alpha=0.05, method="wilson")
    assert (low, high) == pytest.approx(expected, abs=1e-4)  # z = 1.96 here, 1.959964 there


@pytest.mark.parametrize("correct, trials", [(3, 50), (25, 50), (40, 50)])
def test_one_runs_passkey_draws_are_its_jeffreys_posterior(correct, trials):
    drawn = bootstrap_accuracy(np.array([correct]), np.array([trials]), resamples=20000)
    expected = proportion.proportion_confint(correct, trials, alpha=0.05, method="jeffreys")
    assert np.percentile(drawn, [2.5, 97.5]) == pytest.approx(expected, abs=0.01)


def test_welchs_seed_test_is_the_ratio_of_geometric_means_with_scipys_welch():
    a, b = samples(3, 5, 1.6, 0.05), samples(4, 3, 1.5, 0.08)  # per-seed mean losses (nats per token)
    ratio, low, high, p = stats.welch_seed_test(a, b)
    reference = scipy_stats.ttest_ind(a, b, equal_var=False)
    interval = reference.confidence_interval(0.95)
    assert ratio == pytest.approx(np.exp(a.mean() - b.mean())) and p == pytest.approx(reference.pvalue, rel=1e-8)
    assert (low, high) == pytest.approx((np.exp(interval.low), np.exp(interval.high)), rel=1e-8)
