"""What each query's attention looks like, computed block of query rows by block, never T x T at once.

For a query i and its weights a_ij over the keys j <= i (the softmax of q.k / sqrt(hd) plus the
encoding's score bias, as the model attends):

- entropy: H_i = -sum_j a_ij log a_ij, in nats; log(i + 1) for uniform attention over the i + 1 keys it
  sees, 0 for a one-hot (Peng et al., 2023, section 3.4, tie YaRN's temperature to it);
- mass within distance d: sum of a_ij over i - j <= d;
- span_q: the smallest distance d whose mass within is at least q (the distance holding 50% or 90% of
  the attention; a one-hot at distance d has span d);
- sink share: the mass on the first ``SINK_TOKENS`` keys (Xiao et al., 2023, keep 4 such "attention
  sinks").

``attention_statistics`` takes one sequence's q and k (after the encoding's rotation and any query
scaling) and its bias function; its blocks of Bq query rows hold (H, Bq, Tk) scores, with
H Bq T at most ``BLOCK_ELEMENTS``, so memory stays bounded at any length. Shape legend: H heads,
T length, hd head dimension, Bq query rows in a block, Tk keys a block sees, G distances.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

SINK_TOKENS = 4
QUANTILES = (0.5, 0.9)
BLOCK_ELEMENTS = 1 << 21  # scores of one block: 8 MiB of float32 at any length (3x faster than 32 MiB: cache)


def distance_grid(length: int) -> list[int]:
    """The distances mass is measured within: 0 and the powers of two below ``length``."""
    return [0] + [2**k for k in range(int(math.log2(max(length - 1, 1))) + 1) if 2**k < length]


@dataclass
class QueryStatistics:
    """Per head and query position: entropy (H, T) nats; spans (len(QUANTILES), H, T) distances;
    sink (H, T) the share on the first keys; within (H, T, G) the mass within each distance of
    ``distances``."""

    entropy: Tensor
    spans: Tensor
    sink: Tensor
    within: Tensor
    distances: list[int]


def attention_statistics(
    q: Tensor,
    k: Tensor,
    add_bias: Callable[[Tensor, int, int], None] | None = None,
    block_elements: int = BLOCK_ELEMENTS,
    first_row: int = 0,
) -> QueryStatistics:
    """The statistics of the causal softmax attention of one sequence. q, k: (H, T, hd) at consecutive
    positions; ``add_bias(scores (H, Bq, Tk), start, end)`` adds the encoding's score bias of query rows
    [start, end) in place (``poscli.evaluation.inspection.biases``), or None. Computed in q's dtype (float32, or
    float64 for a reference). ``first_row``: spans, mass and sink share only from the block holding this
    row on (earlier rows' are left unset: ``poscli inspect`` reads them for a window's later half), entropy
    for every row."""
    H, T, hd = q.shape
    distances = distance_grid(T)
    grid = torch.tensor(distances, device=q.device)  # (G,)
    # a mass within rounding of a level reaches it: a cumulative sum of T weights is off by about eps sqrt(T)
    rounding = 8 * torch.finfo(q.dtype).eps * math.sqrt(T)
    levels = torch.tensor([1 - quantile + rounding for quantile in QUANTILES], dtype=q.dtype, device=q.device)  # (Q,)
    entropy, sink = q.new_empty(H, T), q.new_full((H, T), float("nan"))  # NaN, -1: rows left unset (first_row)
    spans = torch.full((len(QUANTILES), H, T), -1, dtype=torch.long, device=q.device)
    within = q.new_full((H, T, len(distances)), float("nan"))
    block = max(1, min(T, block_elements // (H * T)))
    q = q / math.sqrt(hd)  # scaled once, not once per block
    for start in range(0, T, block):
        end = min(T, start + block)
        rows = torch.arange(start, end, device=q.device)  # (Bq,)
        scores = _block_scores(q, k, add_bias, start, end)  # (H, Bq, Tk), Tk = end
        weights = torch.softmax(scores, dim=-1)
        # -sum a log a = log Z - sum a s: no log per key (future keys: a = 0 against a finite score); log Z
        # read at each row's largest score, log Z = s_max - log a_max, the largest weight being the largest
        # score's (torch.logsumexp is 15x slower on CPU where most weights underflow, as ALiBi's far keys do;
        # a max with its index 3x slower than two without)
        log_z = scores.amax(dim=-1) - weights.amax(dim=-1).log()  # (H, Bq)
        entropy[:, start:end] = log_z - torch.linalg.vecdot(weights, scores)
        if end <= first_row:
            continue  # rows before ``first_row``: their entropy only
        cumulative = weights.cumsum(-1)  # (H, Bq, Tk): the mass on keys 0..j
        # mass within d of query i: the keys i - d .. i, i.e. 1 - cumulative[i - d - 1] (nothing before key 0)
        before = rows[:, None] - grid[None, :] - 1  # (Bq, G)
        gathered = cumulative.gather(-1, before.clamp(min=0).expand(H, -1, -1))  # (H, Bq, G)
        total = cumulative[..., -1:]  # (H, Bq, 1): 1 up to rounding
        within[:, start:end] = torch.where(before[None] < 0, total, total - gathered)
        # span_q: keys 0 .. c - 1 hold at most 1 - q of the mass, so the span reaches back to key c: d = i - c
        counts = torch.searchsorted(cumulative, levels.expand(H, end - start, -1).contiguous(), right=True)
        spans[:, :, start:end] = (rows[None, :, None] - counts).clamp(min=0).permute(2, 0, 1)  # (Q, H, Bq)
        sink[:, start:end] = cumulative[..., min(SINK_TOKENS, end) - 1]
    return QueryStatistics(entropy, spans, sink, within, distances)


def _block_scores(q: Tensor, k: Tensor, add_bias, start: int, end: int) -> Tensor:
    """The scores of query rows [start, end) (q already divided by sqrt(hd)) over keys [0, end), plus the
    bias: (H, Bq, end). Future keys get the dtype's lowest finite value, so their weight is exactly 0 and
    weight x score is 0, not NaN. Only the block's diagonal tile has future keys."""
    scores = q[:, start:end] @ k[:, :end].transpose(-1, -2)  # (H, Bq, Tk)
    if add_bias is not None:
        add_bias(scores, start, end)
    future = torch.ones(end - start, end - start, dtype=torch.bool, device=q.device).triu(diagonal=1)  # (Bq, Bq)
    scores[..., start:end].masked_fill_(future, torch.finfo(scores.dtype).min)
    return scores
