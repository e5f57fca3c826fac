"""CREAM, continuity-relativity indexing with a Gaussian middle (Wu et al., NeurIPS 2024, arXiv
2406.07138): fine-tuning windows of the original length whose head keeps positions 0.., whose tail
sits at the end of the target, and whose middle is placed by a truncated Gaussian that favours the
middle of the target (``poscli extend RUN --method M --target N --cream``)."""

from __future__ import annotations

import math

import torch

from poscli.extension.positions import register
from poscli.extension.positions.pose import PoSE

SIGMA = 3.0  # the authors' default spread of the middle's scale


@register("cream")
class CREAM(PoSE):
    """Fine-tunes at the original length, like PoSE (its checks and default length are PoSE's)."""

    summary = (
        "fine-tuning windows: head at 0, tail at the target's end, middle placed by a truncated Gaussian (--cream)"
    )
    citation = "Wu et al., 2024, An Efficient Recipe for Long Context Extension via Middle-Focused Positional Encoding"
    field = "cream"
    flag = "--cream"

    def draw(self, batch_size, length, generator, device) -> torch.Tensor:
        return cream_positions(length, self.limit, generator, device)  # (T,)


def cream_positions(length: int, target: int, generator: torch.Generator, device: torch.device) -> torch.Tensor:
    """One window of ``length`` (N) positions for a ``target`` of f N (the authors' ``CREAM``): a head
    and a tail of N // 3 tokens each ("relativity") or 4 f ("continuity"), half the steps each; the
    head at 0.., the tail ending at f N - 1; the middle's N - 2 k consecutive positions end at a
    whole number drawn uniformly from [k + (N - 2k - 1) r / 2, r N / 2 - k - 1], r from a Gaussian
    of mean 1 + f and spread 3 truncated to [2, 2f] (by the inverse of its cumulative distribution,
    as the authors interpolate it, then cast to a whole number as they do). The middle's centre is
    then concentrated away from both ends (its median near a third of the target at f = 8,
    tests/extension/test_positions.py), where PoSE spreads it uniformly. -> (T,) int64."""
    factor = max(1, target // length)
    relativity = bool(torch.randint(0, 2, (1,), generator=generator))
    k = length // 3 if relativity else min(4 * factor, (length - 1) // 2)
    middle = length - 2 * k
    head = torch.arange(k)
    tail = torch.arange(factor * length - k, factor * length)
    u = float(torch.rand((), generator=generator, dtype=torch.float64))
    r = int(_truncated_gaussian(u, 1 + factor, 2, 2 * factor))  # a whole scale in [2, 2f], as the authors cast it
    low = int(k + (middle - 1) * r / 2)
    high = max(low, int(r / 2 * length) - k - 1)
    end = int(torch.randint(low, high + 1, (1,), generator=generator))
    end = min(max(end, k + middle - 1), factor * length - k - 1)  # the middle stays between head and tail
    return torch.cat([head, torch.arange(end - middle + 1, end + 1), tail]).to(device)  # (T,)


def _truncated_gaussian(u: float, mean: float, low: float, high: float, sigma: float = SIGMA) -> float:
    """The value whose cumulative probability under N(mean, sigma) truncated to [low, high] is u."""
    if high <= low:
        return low
    cdf = lambda x: 0.5 * (1 + math.erf((x - mean) / (sigma * math.sqrt(2))))  # noqa: E731
    a, b = cdf(low), cdf(high)
    target = a + u * (b - a)
    lo, hi = low, high
    for _ in range(60):  # bisection: the cumulative distribution increases
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if cdf(mid) < target else (lo, mid)
    return (lo + hi) / 2
