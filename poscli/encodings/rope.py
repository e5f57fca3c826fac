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


def _rotate_half(x: Tensor, layout: str) -> Tensor:
    """The partner of each element with the sign of sin: (x1, x2) -> (-x2, x1) for every pair. (..., hd)."""
    if layout == "halves":
        x1, x2 = x.chunk(2, dim=-1)  # (..., hd/2) each
        return torch.cat((-x2, x1), dim=-1)
    pairs = x.unflatten(-1, (-1, 2))  # (..., hd/2, 2)
    return torch.stack((-pairs[..., 1], pairs[..., 0]), dim=-1).flatten(-2)


class _Rotation(torch.autograd.Function):
    """x cos + rotate_half(x) sin, with cos/sin laid out per element (T, hd). The same rotation as
    ``rotate_pairs`` in fewer passes, and a backward that is the inverse rotation (angle -theta),
    which is cheaper than differentiating the multiplications one by one."""

    @staticmethod
    def forward(ctx, x: Tensor, cos: Tensor, sin: Tensor, layout: str) -> Tensor:
        ctx.save_for_backward(cos, sin)
        ctx.layout = layout
        return torch.addcmul(x * cos, _rotate_half(x, layout), sin)

    @staticmethod
    def backward(ctx, grad: Tensor):
        cos, sin = ctx.saved_tensors
        return torch.addcmul(grad * cos, _rotate_half(grad, ctx.layout), -sin), None, None, None


def _per_element(table: Tensor, layout: str) -> Tensor:
    """(T, hd/2) per-pair values -> (T, hd), each value at both elements of its pair."""
    return torch.cat((table, table), dim=-1) if layout == "halves" else table.repeat_interleave(2, dim=-1)


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
        # cos/sin for the positions tensor of the current forward pass, which every layer shares.
        # Held by identity (the tensor is kept alive, so a new one can never match by accident).
        self._table: tuple[Tensor, Tensor, Tensor] | None = None

    def _frequencies_for(self, seq_len: int | None) -> tuple[Tensor, float]:
        """Frequencies of the rotated dimensions (any extension method applies to them), then p-RoPE:
        keep the highest ``rope_keep`` fraction, set the lowest to 0 so those pairs never turn."""
        inv_freq, attention_scale = rope_parameters(
            self.method, self.config.rotary_dim, self.config.rope_base, seq_len=seq_len, **self._scaling
        )  # (rotary_dim/2,), highest frequency first
        kept = round(self.config.rope_keep * len(inv_freq))
        if kept < len(inv_freq):
            inv_freq = torch.cat((inv_freq[:kept], torch.zeros(len(inv_freq) - kept, dtype=inv_freq.dtype)))
        return inv_freq, attention_scale

    def frequencies(self, seq_len: int) -> tuple[Tensor, float]:
        """The inverse frequencies and attention scale used for a sequence of ``seq_len`` tokens.

        Static methods computed them once; dynamic NTK recomputes them for every length.
        """
        if self.method == "dynamic-ntk":
            return self._frequencies_for(seq_len)
        return self.inv_freq, self.attention_scale

    def cos_sin(self, positions: Tensor) -> tuple[Tensor, Tensor]:
        """cos and sin of every angle, times the attention scale, per element. positions (T,) -> (T, hd) each."""
        if self._table is not None and self._table[0] is positions and self._table[1].device == positions.device:
            return self._table[1], self._table[2]
        inv_freq, attention_scale = self.frequencies(int(positions.max()) + 1)
        angles = positions.to(torch.float32)[:, None] * inv_freq.to(positions.device)[None, :]  # (T, hd/2)
        layout = self.config.rope_layout
        cos = _per_element(angles.cos() * attention_scale, layout)  # (T, hd)
        sin = _per_element(angles.sin() * attention_scale, layout)  # (T, hd)
        self._table = (positions, cos, sin)
        return cos, sin

    def rotate(self, q: Tensor, k: Tensor, positions: Tensor, layer: int) -> tuple[Tensor, Tensor]:
        cos, sin = self.cos_sin(positions)  # (T, rd) each, float32; rd = rotary_dim
        layout, rotary = self.config.rope_layout, self.config.rotary_dim
        if rotary == self.config.head_dim:
            q_rot = _Rotation.apply(q.to(torch.float32), cos, sin, layout).to(q.dtype)  # (B, H, T, hd)
            k_rot = _Rotation.apply(k.to(torch.float32), cos, sin, layout).to(k.dtype)  # (B, H, T, hd)
            return q_rot, k_rot
        # --rotary-fraction: rotate the first rd dimensions; the rest pass through, scaled like the
        # rotated ones so an extension's attention scale still multiplies the whole score.
        scale = self.frequencies(int(positions.max()) + 1)[1]

        def partly(x: Tensor) -> Tensor:
            turned = _Rotation.apply(x[..., :rotary].to(torch.float32), cos, sin, layout)  # (B, H, T, rd)
            return torch.cat((turned, x[..., rotary:].to(torch.float32) * scale), dim=-1).to(x.dtype)  # (B, H, T, hd)

        return partly(q), partly(k)
