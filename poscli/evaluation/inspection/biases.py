"""An encoding's score bias added to a block of ``poscli inspect``'s scores, in the cheapest form it has.

``bias_adder(encoding, q, positions, layer)`` returns ``add(scores, start, end)``, which adds the bias of
query rows [start, end) over keys [0, end) to ``scores`` (H, Bq, end) in place, or None for an encoding
without one. The forms are the attention kernels' (``poscli.attention.blockwise``,
``poscli.attention.distance_attention``), in the same order:

- ALiBi's slopes: -m (i - j) is m (j - start) plus a constant of the row, -m (i - start), which changes no
  weight and no entropy (log Z and sum a s move together), so only the first term is added: one (H, 1, Tk)
  row, and small where the weights are (measured from the block's start, as the fast path does);
- a band (T5, Shaw): the bias less its far value on the W nearest keys, nothing beyond (again a constant
  of the row): only the block's last Bq + W - 1 keys are touched;
- a table over distances (KERPLE, user-defined distance biases): one gather;
- anything else: the encoding's own ``score_bias``.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from poscli.attention.distance_attention import DistanceTable

BiasAdder = Callable[[Tensor, int, int], None]


def bias_adder(encoding, q: Tensor, positions: Tensor, layer: int) -> BiasAdder | None:
    """q: (1, H, T, hd) as the layer's attention gets it (rotated, scaled); positions (T,) consecutive."""
    if not encoding.has_score_bias:
        return None
    relative = encoding.relative_bias(q, layer)
    if relative is not None:
        return lambda scores, start, end: _add_relative(relative, scores, start, end)
    form = encoding.distance_bias(positions, layer)
    if isinstance(form, DistanceTable):
        table = form.table  # (H, T)
        return lambda scores, start, end: scores.add_(table[:, _distances(start, 0, end, scores.device).clamp(min=0)])

    def own(scores: Tensor, start: int, end: int) -> None:
        bias = encoding.score_bias(q[:, :, start:end], positions[start:end], positions[:end], layer)
        scores.add_(bias.reshape(-1, *bias.shape[-3:])[0].to(scores.dtype))  # (H or 1, Bq, Tk)

    return own


def _distances(start: int, first: int, end: int, device) -> Tensor:
    """i - j for query rows [start, end) and keys [first, end): (Bq, end - first), negative for future keys."""
    rows = torch.arange(start, end, device=device)
    return rows[:, None] - torch.arange(first, end, device=device)[None, :]


def _add_relative(relative, scores: Tensor, start: int, end: int) -> None:
    if relative.slopes is not None:
        keys = torch.arange(end, device=scores.device, dtype=scores.dtype) - start  # (Tk,)
        scores.add_(relative.slopes.to(scores.dtype)[:, None, None] * keys)  # (H, 1, Tk)
    if relative.band is not None:
        band = relative.band[0]  # (H, T or 1, W)
        H, W = band.shape[0], band.shape[-1]
        first = max(0, start - W + 1)  # keys before it are W or more back from every row of the block
        distance = _distances(start, first, end, scores.device)  # (Bq, Tc)
        rows = band[:, start:end] if band.shape[1] > 1 else band.expand(H, end - start, W)  # (H, Bq, W)
        values = rows.gather(-1, distance.clamp(0, W - 1).expand(H, -1, -1))  # (H, Bq, Tc)
        scores[..., first:end] += values * ((distance >= 0) & (distance < W)).to(scores.dtype)
