"""ALiBi: attention with linear biases (Press, Smith and Lewis, ICLR 2022)."""

import math

import torch
from torch import Tensor

from poscli.attention.blockwise import RelativeBias
from poscli.encodings import register
from poscli.encodings.base import PositionalEncoding, causal_distance
from poscli.errors import PoscliError


def alibi_slopes(n_head: int) -> list[float]:
    """Head slopes exactly as the paper (and its reference code) define them.

    For H a power of two: a geometric sequence starting at 2^(-8/H) with that same ratio
    (8 heads: 1/2, 1/4, ..., 1/256). Otherwise take the slopes for the largest power of two
    P < H, then every other slope of the 2P set until there are H.
    """

    def power_of_two_slopes(n: int) -> list[float]:
        start = 2 ** (-8 / n)
        return [start ** (i + 1) for i in range(n)]

    if math.log2(n_head).is_integer():
        return power_of_two_slopes(n_head)
    closest = 2 ** math.floor(math.log2(n_head))
    return power_of_two_slopes(closest) + power_of_two_slopes(2 * closest)[0::2][: n_head - closest]


@register("alibi")
class ALiBi(PositionalEncoding):
    """score(i, j) = q_i . k_j / sqrt(d) - m_h (i - j), in every layer, no other position signal
    ("Train Short, Test Long", eq. 1). The slopes m_h are fixed, not learned."""

    citation = "Press et al., 2022"
    summary = "a fixed per-head penalty linear in distance added to attention scores"
    has_score_bias = True

    def __init__(self, config):
        super().__init__(config)
        self.register_buffer("slopes", torch.tensor(alibi_slopes(config.n_head)), persistent=False)  # (H,)

    def score_bias(self, q: Tensor, q_positions: Tensor, k_positions: Tensor, layer: int) -> Tensor:
        distance = causal_distance(q_positions.to(torch.float32), k_positions.to(torch.float32))  # (Tq, Tk)
        return (distance * -self.slopes[:, None, None]).to(q.dtype)  # (H, Tq, Tk)

    def relative_bias(self, q: Tensor, layer: int) -> RelativeBias:
        return RelativeBias(slopes=self.slopes)  # -m_h (i - j), linear in the distance

    def transformers_layout(self):
        raise PoscliError(
            "transformers' ALiBi models are other networks: MPT has no biases in its MLP and LayerNorms (poscli's "
            "GPT has), Falcon divides the bias by sqrt(head dim) in bfloat16, BLOOM normalizes the embeddings"
        )
