"""Polar coordinate position embeddings, PoPE (Gopalakrishnan et al., 2025)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from poscli.attention.data_dependent import working_dtype
from poscli.encodings import register
from poscli.encodings.base import PositionalEncoding
from poscli.errors import PoscliError
from poscli.extension import methods
from poscli.extension.methods import rope_parameters


@dataclass(frozen=True)
class PopeOptions:
    """Args:
    base: dimension c of a head turns at theta_c = base^(-c/hd), c = 0 .. hd-1 (10000, as RoPE's).
    """

    base: float = 10000.0

    def __post_init__(self) -> None:
        if self.base <= 1:
            raise PoscliError(f"--pe-option base must be greater than 1, got {self.base:g}")

    def rotary_dim(self, head_dim: int) -> int:
        """PoPE turns every one of the hd dimensions at its own frequency: the frequencies of RoPE over
        2 hd dimensions, base^(-2i / 2hd). So RoPE's extension methods apply to them unchanged."""
        return 2 * head_dim


@register("pope")
class PoPE(PositionalEncoding):
    """Magnitudes from content, phases from position ("Decoupling the 'What' and 'Where' With Polar
    Coordinate Positional Embeddings", Gopalakrishnan et al., 2025, arXiv 2509.10534): each query
    and key dimension c becomes a complex number with magnitude softplus(q_c) and phase
    i theta_c (the key's phase shifted by a learned delta_hc in [-2 pi, 0]), so

        score(i, j) = sum over c of softplus(q_ic) softplus(k_jc) cos((i - j) theta_c - delta_hc) / sqrt(hd).

    RoPE mixes content into the phase (q's direction in each pair); PoPE keeps them apart. Written
    as real vectors of 2 hd dimensions, [m cos, m sin], as x-transformers' ``PolarEmbedding``; q is
    multiplied by sqrt(2) so the attention kernel's 1 / sqrt(2 hd) scales the score by 1 / sqrt(hd).
    The phases are shared by all layers (x-transformers' layout). ``config.rope_scaling`` (poscli
    extend) replaces the frequencies as it does RoPE's.
    """

    citation = "Gopalakrishnan et al., 2025"
    summary = "softplus magnitudes from q and k, phases from position: RoPE with what and where decoupled"
    Options = PopeOptions
    rotary_frequencies = True
    # Its q and k are 2 hd wide, v hd: the remapped-position kernels (Self-Extend, ReRoPE) take one
    # head dimension for all three, so they do not apply (the frequency methods do).
    separable_positions = False

    def __init__(self, config):
        super().__init__(config)
        self.method, self._scaling = methods.recorded_frequencies(config)
        inv_freq, self.attention_scale = self._frequencies_for(seq_len=None)
        self.register_buffer("inv_freq", inv_freq, persistent=False)  # (hd,)
        self.phase_bias = nn.Parameter(torch.zeros(config.n_head, config.head_dim))  # delta, (H, hd)

    def _frequencies_for(self, seq_len: int | None) -> tuple[Tensor, float]:
        return rope_parameters(
            self.method.name,
            self.options.rotary_dim(self.config.head_dim),
            self.options.base,
            seq_len=seq_len,
            **self._scaling,
        )  # (hd,), highest frequency first

    def angles(self, positions: Tensor) -> tuple[Tensor, float]:
        """i theta_c for every position and dimension, float32, and the attention scale. -> (T, hd), float."""
        if self.method.per_length:
            inv_freq, scale = self._frequencies_for(int(positions.max()) + 1)
        else:
            inv_freq, scale = self.inv_freq, self.attention_scale
        return positions.to(torch.float32)[:, None] * inv_freq.to(positions.device)[None, :], scale

    def rotate(self, q: Tensor, k: Tensor, positions: Tensor, layer: int) -> tuple[Tensor, Tensor]:
        """q, k (B, H, T, hd) -> q', k' (B, H, T, 2 hd)."""
        angles, scale = self.angles(positions)  # (T, hd)
        work = working_dtype(q)
        angles = angles.to(work)
        delta = self.phase_bias.to(work).clamp(-2 * math.pi, 0)[None, :, None, :]  # (1, H, 1, hd)
        q_polar = polar(F.softplus(q.to(work)), angles) * (math.sqrt(2) * scale)
        k_polar = polar(F.softplus(k.to(work)), angles + delta) * scale
        return q_polar.to(q.dtype), k_polar.to(k.dtype)


def polar(magnitude: Tensor, phase: Tensor) -> Tensor:
    """[m cos(phase), m sin(phase)]: magnitude (..., hd), phase broadcastable to it -> (..., 2 hd)."""
    return torch.cat((magnitude * phase.cos(), magnitude * phase.sin()), dim=-1)
