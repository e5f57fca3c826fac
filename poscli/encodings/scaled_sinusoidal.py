"""Sinusoidal positions with a learned scale (Hua et al., 2022; x-transformers)."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from poscli.encodings import register
from poscli.encodings.base import PositionalEncoding


@register("scaled-sinusoidal")
class ScaledSinusoidal(PositionalEncoding):
    """The fixed sinusoids of Vaswani et al. (2017) times one learned scalar, added to the token
    embeddings (used in FLASH, "Transformer Quality in Linear Time", Hua et al., 2022; x-transformers'
    ``ScaledSinusoidalEmbedding``): PE(pos) = s [sin(pos w_i), cos(pos w_i)], w_i = 10000^(-i/(C/2)),
    the sines in the first half of the dimensions and the cosines in the second (x-transformers'
    layout), s initialised to 1 / sqrt(C). Unlike ``sinusoidal`` the token embeddings are not
    multiplied by sqrt(C): the scale lets the model weigh position against content itself.
    ``config.position_scale`` (``poscli extend --method pi``) divides the positions first.
    """

    citation = "Hua et al., 2022"
    summary = "fixed sin/cos of the position times one learned scale, added to the input embeddings"
    interpolable_positions = True  # poscli extend --method pi divides them

    def __init__(self, config):
        super().__init__(config)
        half = config.d_model // 2
        self.register_buffer("inv_freq", 10000.0 ** (-torch.arange(half, dtype=torch.float32) / half), persistent=False)
        self.scale = nn.Parameter(torch.tensor(config.d_model**-0.5))

    def embed(self, x: Tensor, positions: Tensor) -> Tensor:
        angles = (positions.to(torch.float32) / self.config.position_scale)[:, None] * self.inv_freq[
            None, :
        ]  # (T, C/2)
        table = torch.cat((angles.sin(), angles.cos()), dim=-1) * self.scale  # (T, C)
        return x + table.to(x.dtype)  # (B, T, C)
