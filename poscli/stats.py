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


def bootstrap_perplexity(span_loss: np.ndarray, span_tokens: np.ndarray, units: np.ndarray, resamples: int = RESAMPLES,
                         seed: int = SEED, resample_runs: bool = True) -> np.ndarray:
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
