"""Rotary position embedding (Su et al., RoFormer, 2021)."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from poscli.encodings import register
from poscli.encodings.base import PositionalEncoding
from poscli.errors import PoscliError
from poscli.extension import methods
from poscli.extension.methods import rope_parameters

LAYOUTS = ("halves", "interleaved")


@dataclass(frozen=True)
class RopeOptions:
    """Args:
    base: theta_i = base^(-2i/d) (10000 as in RoFormer; Llama 3 trains at 500000).
    layout: which dimensions form a pair: "halves" (GPT-NeoX, transformers) or "interleaved"
        (RoFormer, Meta's Llama). A checkpoint only works with the layout it was trained with.
    rotary_fraction: rotate only this fraction of each head's dimensions (GPT-NeoX's rotary_pct).
    keep: p-RoPE: keep this highest fraction of frequencies, zero the rest (Barbero et al., 2025).
    """

    base: float = 10000.0
    layout: str = "halves"
    rotary_fraction: float = 1.0
    keep: float = 1.0

    def __post_init__(self) -> None:
        if self.base <= 1:
            raise PoscliError(f"--pe-option base must be greater than 1, got {self.base:g}")
        if self.layout not in LAYOUTS:
            raise PoscliError(f"--pe-option layout must be {' or '.join(LAYOUTS)}, got {self.layout!r}")
        if not 0 < self.rotary_fraction <= 1:
            raise PoscliError(f"--pe-option rotary_fraction must be in (0, 1], got {self.rotary_fraction:g}")
        if not 0 <= self.keep <= 1:
            raise PoscliError(f"--pe-option keep must be between 0 and 1, got {self.keep:g}")

    def rotary_dim(self, head_dim: int) -> int:
        """Dimensions of each head that are rotated: ``rotary_fraction`` of them, rounded down to even."""
        return int(head_dim * self.rotary_fraction) // 2 * 2


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
    rotary_frequencies = True
    batched_positions = True
    summary = "rotates query/key pairs by position-proportional angles in every layer"
    Options = RopeOptions
    legacy_options = {
        "rope_base": "base",
        "rope_layout": "layout",
        "rotary_fraction": "rotary_fraction",
        "rope_keep": "keep",
    }

    def __init__(self, config):
        super().__init__(config)
        self.rotary_dim = self.options.rotary_dim(config.head_dim)
        if self.rotary_dim < 2:
            raise PoscliError(
                f"--pe-option rotary_fraction {self.options.rotary_fraction:g} leaves no pair of the {config.head_dim} "
                "head dimensions to rotate"
            )
        self.method, self._scaling = methods.recorded_frequencies(config)
        inv_freq, self.attention_scale = self._frequencies_for(seq_len=None)
        self.register_buffer("inv_freq", inv_freq, persistent=False)  # (hd/2,)
        # cos/sin for the positions tensor of the current forward pass, which every layer shares.
        # Held by identity (the tensor is kept alive, so a new one can never match by accident).
        self._table: tuple[Tensor, Tensor, Tensor] | None = None

    @property
    def scaling(self) -> dict:
        """What ``config.rope_scaling`` records for the frequency method: factor, original_length and the
        method's own options (``methods.recorded_frequencies``)."""
        return dict(self._scaling)

    def _frequencies_for(self, seq_len: int | None) -> tuple[Tensor, float]:
        """Frequencies of the rotated dimensions (any extension method applies to them), then p-RoPE:
        keep the highest ``rope_keep`` fraction, set the lowest to 0 so those pairs never turn."""
        inv_freq, attention_scale = rope_parameters(
            self.method.name, self.rotary_dim, self.options.base, seq_len=seq_len, **self._scaling
        )  # (rotary_dim/2,), highest frequency first
        kept = round(self.options.keep * len(inv_freq))
        if kept < len(inv_freq):
            inv_freq = torch.cat((inv_freq[:kept], torch.zeros(len(inv_freq) - kept, dtype=inv_freq.dtype)))
        return inv_freq, attention_scale

    def frequencies_at(self, positions: Tensor) -> tuple[Tensor, float]:
        """The inverse frequencies and attention scale for a forward pass at ``positions`` (T,): static
        methods computed them once, a method that depends on the length (dynamic NTK) recomputes
        them for every length. The length is read from ``positions``
        only for a method that needs it, so a static one stays free of a data-dependent scalar
        (a graph break under torch.compile)."""
        if self.method.per_length:
            return self._frequencies_for(int(positions.max()) + 1)
        return self.inv_freq, self.attention_scale

    def cos_sin(self, positions: Tensor) -> tuple[Tensor, Tensor]:
        """cos and sin of every angle, times the attention scale, per element. positions (T,) -> (T, hd)
        each, or (B, T) -> (B, 1, T, hd) each (one row per sequence, broadcast over the heads)."""
        compiling = torch.compiler.is_compiling()  # under torch.compile: no cache, no data-dependent length
        if (
            not compiling
            and self._table is not None
            and self._table[0] is positions
            and self._table[1].device == positions.device
        ):
            return self._table[1], self._table[2]
        inv_freq, attention_scale = self.frequencies_at(positions)
        angles = positions.to(torch.float32)[..., None] * inv_freq.to(positions.device)  # (T, hd/2) or (B, T, hd/2)
        layout = self.options.layout
        cos = _per_element(angles.cos() * attention_scale, layout)  # (T, hd) or (B, T, hd)
        sin = _per_element(angles.sin() * attention_scale, layout)  # (T, hd) or (B, T, hd)
        if positions.dim() == 2:
            cos, sin = cos[:, None], sin[:, None]  # (B, 1, T, hd)
        if not compiling:
            self._table = (positions, cos, sin)
        return cos, sin

    def rotate(self, q: Tensor, k: Tensor, positions: Tensor, layer: int) -> tuple[Tensor, Tensor]:
        cos, sin = self.cos_sin(positions)  # (T, rd) each, float32; rd = rotary_dim
        layout, rotary = self.options.layout, self.rotary_dim
        if rotary == self.config.head_dim:
            q_rot = _Rotation.apply(q.to(torch.float32), cos, sin, layout).to(q.dtype)  # (B, H, T, hd)
            k_rot = _Rotation.apply(k.to(torch.float32), cos, sin, layout).to(k.dtype)  # (B, H, T, hd)
            return q_rot, k_rot
        # --rotary-fraction: rotate the first rd dimensions; the rest pass through, scaled like the
        # rotated ones so an extension's attention scale still multiplies the whole score.
        scale = self.frequencies_at(positions)[1]

        def partly(x: Tensor) -> Tensor:
            turned = _Rotation.apply(x[..., :rotary].to(torch.float32), cos, sin, layout)  # (B, H, T, rd)
            return torch.cat((turned, x[..., rotary:].to(torch.float32) * scale), dim=-1).to(x.dtype)  # (B, H, T, hd)

        return partly(q), partly(k)

    def transformers_layout(self) -> dict:
        """GPT-NeoX's rotary embedding (transformers' ``GPTNeoXForCausalLM``): the halves layout,
        ``partial_rotary_factor`` for --pe-option rotary_fraction, the extension as a rope type
        (``methods.transformers_rope``). An interleaved model exports as the halves layout with its
        query and key dimensions reordered (``pair_order``), which changes no dot product."""
        options, head_dim = self.options, self.config.head_dim
        if options.keep < 1:
            raise PoscliError("p-RoPE (--pe-option keep < 1) zeroes frequencies, which no transformers rope type does")
        if int(head_dim * options.rotary_fraction) != self.rotary_dim:
            raise PoscliError(
                f"rotary_fraction {options.rotary_fraction:g} rotates {self.rotary_dim} of {head_dim} dimensions, "
                f"but transformers would rotate int({head_dim} x {options.rotary_fraction:g}); use a fraction that "
                "gives an even count"
            )
        if self.rotary_dim < head_dim and self.attention_scale != 1:
            raise PoscliError(
                "transformers scales only the rotated dimensions by an extension's attention factor; "
                "this run (partial rotary with an attention scale) would not give the same logits"
            )
        method = self.method.name
        original_length = int(self._scaling["original_length"])
        factor = float(self._scaling["factor"])
        own = {key: value for key, value in self._scaling.items() if key not in ("factor", "original_length")}
        theta, rope_scaling = methods.transformers_rope(
            method, self.rotary_dim, options.base, factor, original_length, **own
        )
        pair_order = None
        if options.layout == "interleaved":  # pairs (2i, 2i+1) -> (i, i + rd/2)
            rotated = list(range(0, self.rotary_dim, 2)) + list(range(1, self.rotary_dim, 2))
            pair_order = rotated + list(range(self.rotary_dim, head_dim))
        per_length = rope_scaling is not None and rope_scaling["rope_type"] == "dynamic"
        return {
            "architecture": "gpt_neox",
            "rope_theta": float(theta),
            "partial_rotary_factor": self.rotary_dim / head_dim,
            "rope_scaling": rope_scaling,
            "pair_order": pair_order,
            "max_position_embeddings": original_length
            if per_length
            else max(original_length, round(factor * original_length)),
        }
