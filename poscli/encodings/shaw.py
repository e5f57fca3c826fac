"""Relative position representations (Shaw, Uszkoreit and Vaswani, 2018)."""

import math
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from poscli.attention.blockwise import RelativeBias
from poscli.encodings import register
from poscli.encodings.base import PositionalEncoding, causal_distance
from poscli.errors import PoscliError


@dataclass(frozen=True)
class ShawOptions:
    """Args:
    clip: relative distances are clipped to [-clip, clip] (the paper's k)."""

    clip: int = 16

    def __post_init__(self) -> None:
        if self.clip < 1:
            raise PoscliError(f"--pe-option clip must be at least 1, got {self.clip}")


@register("shaw")
class Shaw(PositionalEncoding):
    """e_ij = q_i . (k_j + a_K[clip(j - i, k)]) / sqrt(d) (Shaw et al., 2018, eq. 4-5).

    The content term q.k is the usual attention; this hook adds the position term
    q_i . a_K[clip(j - i, k)] / sqrt(d). Each layer has its own table, shared across heads as
    in the paper. A causal decoder only sees j - i in [-k, 0], so the table holds those k + 1
    vectors: row r is relative position -r, and every distance beyond k uses row k.
    Only the key-side representation a_K is used (no a_V), which the paper found sufficient.
    """

    citation = "Shaw et al., 2018"
    summary = "learned relative key vectors, distance clipped at k, in every layer"
    has_score_bias = True
    Options = ShawOptions
    legacy_options = {"shaw_clip": "clip"}

    def __init__(self, config):
        super().__init__(config)
        self.clip = self.options.clip
        self.relative_keys = nn.Parameter(torch.randn(config.n_layer, self.clip + 1, config.head_dim) * 0.02)

    def query_dot_relative(self, q: Tensor, layer: int) -> Tensor:
        """q_i . a_K[r] / sqrt(d) for r = 0 .. k. q: (B, H, Tq, hd) -> (B, H, Tq, k + 1)."""
        table = self.relative_keys[layer].to(q.dtype)  # (k + 1, hd)
        return q @ table.T / math.sqrt(self.config.head_dim)

    def score_bias(self, q: Tensor, q_positions: Tensor, k_positions: Tensor, layer: int) -> Tensor:
        clipped = causal_distance(q_positions, k_positions).clamp(max=self.clip)  # (Tq, Tk)
        q_dot_rel = self.query_dot_relative(q, layer)  # (B, H, Tq, k + 1)
        B, H, Tq, _ = q_dot_rel.shape
        # bias[b, h, i, j] = q_dot_rel[b, h, i, clipped[i, j]]; gather (not fancy indexing) keeps the backward fast.
        return q_dot_rel.gather(-1, clipped.expand(B, H, Tq, clipped.shape[-1]))  # (B, H, Tq, Tk)

    def relative_bias(self, q: Tensor, layer: int) -> RelativeBias:
        q_dot_rel = self.query_dot_relative(q, layer)  # (B, H, T, k + 1)
        return RelativeBias(band=q_dot_rel[..., :-1] - q_dot_rel[..., -1:])  # (B, H, T, k): minus the far value
