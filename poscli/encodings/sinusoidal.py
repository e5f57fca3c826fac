"""Fixed sinusoidal absolute positions (Vaswani et al., 2017)."""

import math

import torch
from torch import Tensor

from poscli.encodings import register
from poscli.encodings.base import PositionalEncoding, sinusoid_table


@register("sinusoidal")
class Sinusoidal(PositionalEncoding):
    """Adds PE(pos) to the input embeddings once, before the first layer.

    "Attention Is All You Need", section 3.5: PE(pos, 2i) = sin(pos / 10000^(2i/d)),
    PE(pos, 2i+1) = cos(pos / 10000^(2i/d)). As in section 3.4 (and fairseq, which the ALiBi
    paper used), token embeddings are multiplied by sqrt(d) first so neither term drowns
    the other. Defined for every position, but unseen positions are out of distribution.
    ``config.position_scale`` (set by ``poscli extend --method pi``) divides the positions first,
    the position interpolation of Chen et al. (2023) applied to an absolute encoding.
    """

    citation = "Vaswani et al., 2017"
    summary = "fixed sin/cos of the absolute position added to the input embeddings"
    interpolable_positions = True  # poscli extend --method pi divides them

    def embed(self, x: Tensor, positions: Tensor) -> Tensor:
        scaled = positions.to(torch.float32) / self.config.position_scale  # (T,)
        table = sinusoid_table(scaled, self.config.d_model)  # (T, C)
        return x * math.sqrt(self.config.d_model) + table.to(x.dtype)  # (B, T, C)
