"""KERPLE: kernelized relative positional embedding, logarithmic variant (Chi et al., 2022)."""

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from poscli.encodings import register
from poscli.encodings.base import PositionalEncoding


@register("kerple")
class Kerple(PositionalEncoding):
    """b(i, j) = -r1_h log(1 + r2_h |i - j|) added to the scores in every layer, with r1, r2 > 0
    learned per head (Chi et al., 2022, the "log" kernel).

    Positivity comes from a softplus of unconstrained parameters. poscli starts r1 at 1 and
    spreads r2 over heads geometrically from 1 down to 2^-7, so heads start with different
    reaches (the paper only requires r1, r2 > 0). The bias grows without bound, like ALiBi's,
    but logarithmically, so no constant far value exists: the fast path takes it as a table over
    distances (``bias_of_distance``, ``poscli.attention.distance_attention``) rather than a band.
    """

    citation = "Chi et al., 2022"
    summary = "a learned per-head logarithmic distance penalty -r1 log(1 + r2 d) on scores"
    has_score_bias = True

    def __init__(self, config):
        super().__init__(config)
        heads = config.n_head
        r2 = torch.tensor([2.0 ** (-7 * h / max(1, heads - 1)) for h in range(heads)])
        self.raw_r1 = nn.Parameter(_softplus_inverse(torch.ones(heads)))  # (H,)
        self.raw_r2 = nn.Parameter(_softplus_inverse(r2))  # (H,)

    def strengths(self) -> tuple[Tensor, Tensor]:
        """r1, r2: (H,) each, both positive."""
        return F.softplus(self.raw_r1), F.softplus(self.raw_r2)

    def bias_of_distance(self, distance: Tensor, layer: int) -> Tensor:
        """distance (N,) -> (H, N); ``score_bias`` and the fast path's table come from it."""
        r1, r2 = self.strengths()
        return -r1[:, None] * torch.log1p(r2[:, None] * distance)  # (H, N)

    def score_mod(self, q: Tensor, positions: Tensor, layer: int):
        """The same bias per (query, key) pair, for FlexAttention."""
        r1, r2 = self.strengths()  # (H,) each
        where = positions.to(torch.float32)  # (T,)

        def kerple(score, b, h, q_idx, kv_idx):
            distance = (where[q_idx] - where[kv_idx]).clamp(min=0)
            return score - r1[h] * torch.log1p(r2[h] * distance)

        return kerple


def _softplus_inverse(x: Tensor) -> Tensor:
    return x + torch.log(-torch.expm1(-x))  # softplus(y) = x  <=>  y = x + log(1 - e^-x)
