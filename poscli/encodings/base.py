"""The interface every positional encoding implements.

An encoding acts through up to three hooks, and the model calls all three without asking
which encoding it holds:

- ``embed``: change the token embeddings once at the input (absolute encodings);
- ``rotate``: transform queries and keys in every layer (rotary encodings);
- ``score_bias``: add a bias to the attention scores in every layer (relative encodings).

Shape legend: B batch, T sequence length, C model width, H heads, hd head dimension,
Tq query positions, Tk key positions. ``positions`` are integer token positions, usually
``0..T-1``; a block of queries passes its own slice.
"""

from __future__ import annotations

from typing import ClassVar

import torch
from torch import Tensor, nn

from poscli.attention import RelativeBias
from poscli.config import ModelConfig


class PositionalEncoding(nn.Module):
    """Base class: every hook is the identity, so an encoding overrides only what it uses."""

    name: ClassVar[str] = ""
    citation: ClassVar[str] = ""
    summary: ClassVar[str] = ""
    # True when score_bias returns a tensor; the model then uses blocked attention with an
    # explicit mask instead of the fused causal kernel.
    has_score_bias: ClassVar[bool] = False

    def __init__(self, config: ModelConfig):
        super().__init__()
        self.config = config

    @property
    def max_length(self) -> int | None:
        """The longest sequence this encoding can represent, or None if unbounded."""
        return None

    def embed(self, x: Tensor, positions: Tensor) -> Tensor:
        """x: (B, T, C) token embeddings; positions: (T,). Returns (B, T, C)."""
        return x

    def rotate(self, q: Tensor, k: Tensor, positions: Tensor, layer: int) -> tuple[Tensor, Tensor]:
        """q, k: (B, H, T, hd); positions: (T,). Returns q, k of the same shapes."""
        return q, k

    def score_bias(self, q: Tensor, q_positions: Tensor, k_positions: Tensor, layer: int) -> Tensor | None:
        """q: (B, H, Tq, hd). Returns a bias broadcastable to (B, H, Tq, Tk), added to q.k / sqrt(hd).

        Only causal pairs (k_position <= q_position) are ever used; the model masks the rest.
        """
        return None

    def relative_bias(self, q: Tensor, layer: int) -> RelativeBias | None:
        """The same bias in the form the fast attention path takes, or None to use ``score_bias``.

        Return it when the bias depends only on the distance i - j and is either linear in it
        (``slopes``) or the same for every distance from some W on (``band``, with that far value
        subtracted, since softmax ignores a constant added to a row). q: (B, H, T, hd).
        The model calls this only when positions are consecutive (0..T-1 or an offset of it).
        """
        return None


def causal_distance(q_positions: Tensor, k_positions: Tensor) -> Tensor:
    """Distance i - j from each query i back to each key j, clamped at 0 for future keys. (Tq, Tk)."""
    return (q_positions[:, None] - k_positions[None, :]).clamp(min=0)


def sinusoid_table(positions: Tensor, dim: int, base: float = 10000.0) -> Tensor:
    """Vaswani et al. (2017) section 3.5: PE(pos, 2i) = sin(pos / base^(2i/d)), PE(pos, 2i+1) = cos(...).

    Computed in float32 whatever the model dtype. Returns (T, dim).
    """
    inv_freq = base ** (-torch.arange(0, dim, 2, dtype=torch.float32, device=positions.device) / dim)  # (dim/2,)
    angles = positions.to(torch.float32)[:, None] * inv_freq[None, :]  # (T, dim/2)
    table = torch.stack((angles.sin(), angles.cos()), dim=-1)  # (T, dim/2, 2)
    return table.flatten(-2)  # (T, dim): sin, cos interleaved
