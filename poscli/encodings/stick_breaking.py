"""Stick-breaking attention (Tan et al., ICLR 2025)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from poscli.attention.data_dependent import reverse_cumsum, scanned_causal_attention, trains_at_once, visible
from poscli.attention.nearest_first import stick_breaking_attention
from poscli.encodings import register
from poscli.encodings.base import PositionalEncoding


@dataclass(frozen=True)
class StickBreakingOptions:
    """Args:
    attend_current: let query i attend to its own key (the paper's A_ij runs over j < i; the
        reference kernels offer both). Off, the first token reads nothing and passes its residual on.
    """

    attend_current: bool = False


@register("stick-breaking")
class StickBreaking(PositionalEncoding):
    """No softmax and no position encoding ("Scaling Stick-Breaking Attention: An Efficient
    Implementation and In-depth Study", Tan et al., ICLR 2025, eq. 1-2): each key j before query i
    takes the fraction beta_ij = sigmoid(q_i . k_j / sqrt(hd)) of what the nearer keys left,

        A_ij = beta_ij * prod over j < t < i of (1 - beta_it),

    so the nearest key is served first and order is all the position the model gets. The weights
    of a row sum to at most 1 (the remainder reads nothing). Computed in log space,
    log A_ij = log sigmoid(z_ij) - sum over t of softplus(z_it): in training, up to ``SCAN_KEYS``
    tokens, all keys at once with a hand-written backward (``stick_breaking_attention``); otherwise
    keys in chunks from the nearest back (``scanned_causal_attention``) with the sum over the nearer
    chunks carried.
    """

    citation = "Tan et al., 2025"
    summary = "each earlier key takes a sigmoid fraction of the stick its nearer keys left; no softmax"
    Options = StickBreakingOptions
    replaces_attention = True
    reads_positions = False  # the order of keys, never their positions
    separable_positions = False

    def attend(self, x: Tensor, q: Tensor, k: Tensor, v: Tensor, positions: Tensor, layer: int) -> Tensor:
        if trains_at_once(q, k, v):
            return stick_breaking_attention(q, k, v, strict=not self.options.attend_current)  # (B, H, T, hd)
        return scanned_causal_attention(q, k, v, self.chunk_weights, normalize=False, vanished=stick_taken)

    def chunk_weights(
        self, q_block: Tensor, scores: Tensor, rows: Tensor, keys: Tensor, rest: Tensor
    ) -> tuple[Tensor, Tensor]:
        """log A_ij over one chunk of keys: scores (B, H, Bq, Kc), rows (Bq,), keys (Kc,), rest
        (B, H, Bq): the sum of log(1 - beta_it) over the nearer chunks' keys. -> (log A, the
        sum with this chunk's keys added)."""
        seen = visible(rows, keys, strict=not self.options.attend_current)  # (Bq, Kc)
        log_beta = F.logsigmoid(scores).masked_fill(~seen, float("-inf"))  # (B, H, Bq, Kc)
        log_rest = (-F.softplus(scores)).masked_fill(~seen, 0.0)  # log(1 - beta), 0 where not read
        later = reverse_cumsum(log_rest) - log_rest + rest[..., None]  # sum over t > j of log(1 - beta_it)
        return log_beta + later, rest + log_rest.sum(dim=-1)


def stick_taken(rest: Tensor) -> bool:
    """Whether every row's remaining stick, exp(rest) with ``rest`` (B, H, Bq) the sum of log(1 - beta)
    over the keys read so far, is below half the smallest positive number of its dtype, so that every
    farther key's weight beta * exp(rest + ...) is exactly 0 there (exp rounds it to 0)."""
    info = torch.finfo(rest.dtype)
    return bool(rest.max() < math.log(info.tiny) + math.log(info.eps) - 1.0)
