"""Intervals for perplexity: bootstrap over the evaluation sample, and over seeds as well.

A perplexity cell is exp(sum of losses / sum of tokens) over the spans of an ``EvalSet``. Its
uncertainty has two sources: which text was scored (the sample of spans or documents) and which
training seed made the model. ``bootstrap_perplexity`` resamples the evaluation units (spans or
documents, with replacement) and, given several runs that differ only in seed, the runs too
(a two-level bootstrap), and returns the resampled statistic so that callers can take a
percentile interval of it or of a ratio of two lengths. Lengths and encodings evaluated on the
same spans share the same resampled units (one seeded generator per call with the same seed), so
ratios between them are paired.

Shapes: R runs (seeds), S spans, U units, N resamples.
"""

from __future__ import annotations

import math

import numpy as np

RESAMPLES = 2000
CONFIDENCE = 0.95
SEED = 0


def unit_sums(span_loss: np.ndarray, span_tokens: np.ndarray, units: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sum spans into their units. span_loss: (R, S); span_tokens: (S,); units: (S,) -> (R, U), (U,)."""
    _, index = np.unique(units, return_inverse=True)
    count = index.max() + 1
    loss = np.stack([np.bincount(index, weights=row, minlength=count) for row in np.atleast_2d(span_loss)])  # (R, U)
    tokens = np.bincount(index, weights=span_tokens, minlength=count)  # (U,)
    return loss, tokens


def bootstrap_perplexity(
    span_loss: np.ndarray,
    span_tokens: np.ndarray,
    units: np.ndarray,
    resamples: int = RESAMPLES,
    seed: int = SEED,
    resample_runs: bool = True,
) -> np.ndarray:
    """Resampled mean-over-runs perplexity. -> (N,).

    span_loss: (R, S) summed loss (nats) of each run on each span; span_tokens: (S,) targets
    scored in each span; units: (S,) the bootstrap unit of each span. Each resample draws U
    units with replacement (the same draws for every call with the same seed and shape) and,
    when ``resample_runs`` and R > 1, R runs with replacement; its value is the mean over the
    drawn runs of exp(drawn loss / drawn tokens).
    """
    loss, tokens = unit_sums(span_loss, span_tokens, units)  # (R, U), (U,)
    runs, count = loss.shape
    generator = np.random.default_rng(seed)
    unit_draws = generator.multinomial(count, np.full(count, 1 / count), size=resamples)  # (N, U) counts
    ppl = np.exp((unit_draws @ loss.T) / (unit_draws @ tokens)[:, None])  # (N, R)
    if runs > 1 and resample_runs:
        run_draws = generator.multinomial(runs, np.full(runs, 1 / runs), size=resamples)  # (N, R) counts
        return (ppl * run_draws).sum(1) / runs
    return ppl.mean(1)


def interval(samples: np.ndarray, confidence: float = CONFIDENCE) -> tuple[float, float]:
    """Percentile interval of bootstrap samples."""
    tail = (1 - confidence) / 2 * 100
    low, high = np.percentile(samples, [tail, 100 - tail])
    return float(low), float(high)


def separated(a: tuple[float, float], b: tuple[float, float]) -> bool:
    """Whether two intervals do not overlap."""
    return a[1] < b[0] or b[1] < a[0]


def wilson_interval(correct: int, trials: int, z: float = 1.96) -> tuple[float, float]:
    """95% Wilson score interval for a binomial proportion (sound at 0 and at 1, unlike +-SE)."""
    if trials == 0:
        return (float("nan"), float("nan"))
    p = correct / trials
    denominator = 1 + z * z / trials
    centre = (p + z * z / (2 * trials)) / denominator
    half = z * math.sqrt(p * (1 - p) / trials + z * z / (4 * trials * trials)) / denominator
    return (max(0.0, centre - half), min(1.0, centre + half))


# --------------------------------------------------------------------------- paired decisions over seeds

ALPHA = 0.05  # family-wise error rate of one published file's decisions (Holm, 1979)
MIN_EFFECT = 0.01  # a perplexity ratio within 1% of 1 is "tied", whatever the test says


def t_two_sided_p(t: float, df: int) -> float:
    """Two-sided p-value of Student's t with ``df`` (whole) degrees of freedom, in closed form
    (Abramowitz and Stegun, 1964, 26.7.3-4): A(t|df) = P(|T| < |t|) as a finite sum in cos(theta),
    theta = atan(|t| / sqrt(df)); p = 1 - A."""
    if df < 1:
        return float("nan")
    if math.isinf(t):
        return 0.0
    theta = math.atan(abs(t) / math.sqrt(df))
    c2, s = math.cos(theta) ** 2, math.sin(theta)
    if df % 2:  # odd: 2/pi [theta + sin cos (1 + 2/3 c^2 + 2*4/(3*5) c^4 + ...)], df - 3 over 2 terms after 1
        term, total = 1.0, 1.0
        for k in range(1, (df - 1) // 2):
            term *= c2 * (2 * k) / (2 * k + 1)
            total += term
        a = 2 / math.pi * (theta + (s * math.cos(theta) * total if df > 1 else 0.0))
    else:  # even: sin (1 + 1/2 c^2 + 1*3/(2*4) c^4 + ...), df/2 terms
        term, total = 1.0, 1.0
        for k in range(1, df // 2):
            term *= c2 * (2 * k - 1) / (2 * k)
            total += term
        a = s * total
    return max(0.0, min(1.0, 1 - a))


def regularized_beta(x: float, a: float, b: float) -> float:
    """The regularized incomplete beta function I_x(a, b), by its continued fraction (modified
    Lentz; Press et al., Numerical Recipes, 3rd ed., 6.4), on the side where it converges fast."""
    if x <= 0:
        return 0.0
    if x >= 1:
        return 1.0
    if x > (a + 1) / (a + b + 2):
        return 1.0 - regularized_beta(1 - x, b, a)
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)) / a
    tiny = 1e-300
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    total = d
    for m in range(1, 500):
        for numerator in (
            m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
            -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1)),
        ):
            d = 1.0 + numerator * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + numerator / c
            c = c if abs(c) > tiny else tiny
            total *= c * d
        if abs(c * d - 1.0) < 1e-15:
            break
    return front * total


def t_sf(t: float, df: float) -> float:
    """P(T > t) for Student's t with ``df`` degrees of freedom, whole or not (Welch's are not):
    P(|T| > |t|) = I_{df / (df + t^2)}(df / 2, 1 / 2), halved, on the side of t."""
    if math.isnan(t) or not df > 0:
        return float("nan")
    if math.isinf(t):
        return 0.0 if t > 0 else 1.0
    tail = 0.5 * regularized_beta(df / (df + t * t), df / 2, 0.5)
    return tail if t >= 0 else 1.0 - tail


def t_ppf(probability: float, df: float) -> float:
    """The ``probability`` quantile of Student's t (bisection on ``t_sf``)."""
    low, high = -1e4, 1e4
    for _ in range(200):
        middle = (low + high) / 2
        low, high = (middle, high) if 1 - t_sf(middle, df) < probability else (low, middle)
    return (low + high) / 2


def welch_t(a: np.ndarray, b: np.ndarray, confidence: float = CONFIDENCE) -> tuple[float, float, float, float, float]:
    """Welch's (1947) unpaired t-test of mean(a) - mean(b): for two different models, whose seeds
    share nothing (seed 0 of ALiBi and seed 0 of T5 bias are not a pair). a: (Ra,), b: (Rb,) ->
    (difference, low, high, p, df): the difference with its ``confidence`` interval on the
    Welch-Satterthwaite degrees of freedom, and the two-sided p of "no difference". Fewer than 2
    values on a side: no test (nan)."""
    return welch_contrast([a, b], [1.0, -1.0], confidence)


def welch_contrast(
    groups: list[np.ndarray], weights: list[float], confidence: float = CONFIDENCE
) -> tuple[float, float, float, float, float]:
    """A contrast of independent groups' means, sum of weight x mean (for an interaction, how a
    difference between two models changes from one size to another: (A_l - B_l) - (A_s - B_s)),
    each group with its own variance: (estimate, low, high, p, df), the interval and two-sided p
    on Satterthwaite's (1946) degrees of freedom, sum(w^2 s^2 / n)^2 / sum((w^2 s^2 / n)^2 / (n - 1)),
    which for two groups and weights (1, -1) is Welch's test. A group of fewer than 2: no test (nan)."""
    groups = [np.asarray(group, dtype=float) for group in groups]
    nan = float("nan")
    estimate = float(sum(w * g.mean() for w, g in zip(weights, groups))) if all(len(g) for g in groups) else nan
    if any(len(g) < 2 for g in groups):
        return estimate, nan, nan, nan, nan
    parts = [w * w * float(g.var(ddof=1)) / len(g) for w, g in zip(weights, groups)]
    se = math.sqrt(sum(parts))
    if se == 0:
        return estimate, estimate, estimate, 0.0 if estimate else 1.0, float("inf")
    df = sum(parts) ** 2 / sum(part * part / (len(g) - 1) for part, g in zip(parts, groups))
    half = t_ppf(1 - (1 - confidence) / 2, df) * se
    p = min(1.0, 2 * t_sf(abs(estimate) / se, df))
    return estimate, estimate - half, estimate + half, p, df


def one_sided_p(estimate: float, low: float, high: float, margin: float, df: float, confidence: float = CONFIDENCE):
    """The one-sided p of "the effect is at least ``margin``" (H0: effect >= margin) from a t
    estimate and its two-sided ``confidence`` interval on ``df`` degrees of freedom: the
    non-inferiority test whose rejection at (1 - confidence) / 2 is the interval's upper end under
    the margin (Schuirmann, 1987)."""
    if math.isnan(low) or math.isnan(high):
        return float("nan")
    if high == low:
        return 0.0 if estimate < margin else 1.0
    se = (high - low) / (2 * t_ppf(1 - (1 - confidence) / 2, df))
    return 1.0 - t_sf((estimate - margin) / se, df)


def benjamini_hochberg(p_values: list[float]) -> list[float]:
    """Benjamini and Hochberg's (1995) step-up adjusted p-values (q-values): reject where adjusted
    p < ALPHA and the expected share of false discoveries among the rejections stays under ALPHA.
    For an exploratory screen, not for a verdict. NaN stays NaN (not tested)."""
    tested = sorted(((p, i) for i, p in enumerate(p_values) if not math.isnan(p)), reverse=True)
    adjusted = [float("nan")] * len(p_values)
    running, m = 1.0, len(tested)
    for rank, (p, i) in enumerate(tested):
        running = min(running, m / (m - rank) * p)
        adjusted[i] = running
    return adjusted


def paired_t(differences: np.ndarray) -> tuple[float, float, float, float]:
    """The paired t-test of per-seed differences (seed s of A minus seed s of B, on the same
    sample). differences: (R,) -> (mean, low, high, p): the mean difference with its 95% t interval
    and the two-sided p-value of "no difference". R < 2: no test (interval and p nan); every
    difference equal: a zero-width interval, p 0 (or 1 where they are all 0)."""
    values = np.asarray(differences, dtype=float)
    mean = float(values.mean())
    if len(values) < 2:
        return mean, float("nan"), float("nan"), float("nan")
    sd = float(values.std(ddof=1))
    if sd == 0:
        return mean, mean, mean, 0.0 if mean else 1.0
    df = len(values) - 1
    half = t_quantile(df) * sd / math.sqrt(len(values))
    return mean, mean - half, mean + half, t_two_sided_p(mean / (sd / math.sqrt(len(values))), df)


def paired_seed_test(log_ratios: np.ndarray) -> tuple[float, float, float, float]:
    """The paired t-test over seeds of a log perplexity ratio (seed s of A against seed s of B, on
    the same spans). log_ratios: (R,) -> (ratio, low, high, p): the geometric-mean ratio with its
    95% t interval and the two-sided p-value of "no difference". R < 2: no test (p nan)."""
    mean, low, high, p = paired_t(log_ratios)
    return math.exp(mean), math.exp(low), math.exp(high), p


def welch_seed_test(losses_a: np.ndarray, losses_b: np.ndarray) -> tuple[float, float, float, float]:
    """Welch's test over seeds of two different models' mean losses on the same spans: the twin of
    ``paired_seed_test`` where nothing pairs the seeds. losses_a: (Ra,), losses_b: (Rb,) -> (ratio,
    low, high, p): the ratio of geometric-mean perplexities with its 95% interval and the two-sided p."""
    difference, low, high, p, _ = welch_t(losses_a, losses_b)
    return math.exp(difference), math.exp(low), math.exp(high), p


def t_quantile(df: float, confidence: float = CONFIDENCE) -> float:
    """The two-sided ``confidence`` quantile of Student's t."""
    return t_ppf(1 - (1 - confidence) / 2, df)


def holm(p_values: list[float]) -> list[float]:
    """Holm's (1979) step-down adjusted p-values: reject where adjusted p < ALPHA, and the chance
    of any false rejection among all of them stays under ALPHA. NaN stays NaN (not tested)."""
    tested = sorted((p, i) for i, p in enumerate(p_values) if not math.isnan(p))
    adjusted = [float("nan")] * len(p_values)
    running, m = 0.0, len(tested)
    for rank, (p, i) in enumerate(tested):
        running = max(running, min(1.0, (m - rank) * p))
        adjusted[i] = running
    return adjusted


def decide(ratio: float, adjusted_p: float, alpha: float = ALPHA, min_effect: float = MIN_EFFECT) -> str:
    """ "<" (A lower), ">" (A higher) or "≈" (tied): a difference is claimed only where Holm's
    adjusted p is under ``alpha`` and the ratio is at least ``min_effect`` away from 1."""
    if math.isnan(adjusted_p) or adjusted_p >= alpha or abs(ratio - 1) < min_effect:
        return "≈"
    return "<" if ratio < 1 else ">"
