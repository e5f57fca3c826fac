"""Rotary position embedding (Su et al., RoFormer, 2021)."""

from __future__ import annotations

import torch
from torch import Tensor

from poscli.encodings import register
from poscli.encodings.base import PositionalEncoding
from poscli.scaling import rope_parameters


def rotate_pairs(x: Tensor, cos: Tensor, sin: Tensor, layout: str) -> Tensor:
    """Rotate each pair of x's last dimension by the angles whose cos/sin are given.

    x: (B, H, T, hd); cos, sin: (T, hd/2). ``layout`` says which dimensions form a pair:
    "halves" pairs (i, i + hd/2) (GPT-NeoX, transformers); "interleaved" pairs (2i, 2i+1)
    (RoFormer, Meta's Llama). A checkpoint only works with the layout it was trained with.
    """
    if layout == "halves":
        x1, x2 = x.chunk(2, dim=-1)  # (B, H, T, hd/2) each
        return torch.cat((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1)  # (B, H, T, hd)
    x1, x2 = x[..., 0::2], x[..., 1::2]  # (B, H, T, hd/2) each
    rotated = torch.stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1)  # (B, H, T, hd/2, 2)
    return rotated.flatten(-2)  # (B, H, T, hd)


@register("rope")
class RoPE(PositionalEncoding):
    """Rotates q and k in every layer so that <R(m) q, R(n) k> depends only on n - m.

    Pair i at position m turns by m * theta_i, theta_i = base^(-2i/d), base ``--rope-base``
    (10000 as in RoFormer; Llama 3 uses 500000). Angles are computed in float32 whatever the
    model dtype (low-precision cos/sin tables are badly wrong at long positions). V is not
    rotated. ``config.rope_scaling`` (written by ``poscli extend``) replaces the frequencies
    and sets an attention scale that multiplies both q and k.
    """

    citation = "Su et al., 2021"
    summary = "rotates query/key pairs by position-proportional angles in every layer"

    def __init__(self, config):
        super().__init__(config)
        scaling = dict(config.rope_scaling)
        self.method = scaling.pop("method", "default")
        self._scaling = {
            "factor": scaling.get("factor", 1.0),
            "original_length": scaling.get("original_length", config.train_length),
            **scaling.get("options", {}),
        }
        inv_freq, self.attention_scale = self._frequencies_for(seq_len=None)
        self.register_buffer("inv_freq", inv_freq, persistent=False)  # (hd/2,)

    def _frequencies_for(self, seq_len: int | None) -> tuple[Tensor, float]:
        return rope_parameters(self.method, self.config.head_dim, self.config.rope_base, seq_len=seq_len, **self._scaling)

    def frequencies(self, seq_len: int) -> tuple[Tensor, float]:
        """The inverse frequencies and attention scale used for a sequence of ``seq_len`` tokens.

        Static methods computed them once; dynamic NTK recomputes them for every length.
        """
        if self.method == "dynamic-ntk":
            return self._frequencies_for(seq_len)
        return self.inv_freq, self.attention_scale

    def rotate(self, q: Tensor, k: Tensor, positions: Tensor, layer: int) -> tuple[Tensor, Tensor]:
        inv_freq, attention_scale = self.frequencies(int(positions.max()) + 1)
        angles = positions.to(torch.float32)[:, None] * inv_freq.to(positions.device)[None, :]  # (T, hd/2)
        cos, sin = angles.cos() * attention_scale, angles.sin() * attention_scale  # (T, hd/2) each
        layout = self.config.rope_layout
        q_rot = rotate_pairs(q.to(torch.float32), cos, sin, layout).to(q.dtype)  # (B, H, T, hd)
        k_rot = rotate_pairs(k.to(torch.float32), cos, sin, layout).to(k.dtype)  # (B, H, T, hd)
        return q_rot, k_rot
