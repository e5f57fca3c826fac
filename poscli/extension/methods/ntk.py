"""NTK-aware scaling: the base raised once for the factor (bloc97, 2023)."""

from __future__ import annotations

from poscli.extension.methods import register
from poscli.extension.methods.protocol import FrequencyMethod


def ntk_base(base: float, factor: float, head_dim: int) -> float:
    """b' = b * s^(d/(d-2)): the lowest frequency interpolated by s, the highest kept."""
    return base * factor ** (head_dim / (head_dim - 2))


@register("ntk")
class NTKAware(FrequencyMethod):
    summary = "NTK-aware: base raised to b * s^(d/(d-2)) once, for the factor"
    citation = "bloc97, 2023 (reddit r/LocalLLaMA)"

    @classmethod
    def frequencies(cls, head_dim, base, factor, original_length, seq_len):
        from poscli.extension.scaling import default_inv_freq

        return default_inv_freq(head_dim, ntk_base(base, factor, head_dim)), 1.0

    @classmethod
    def transformers_rope(cls, rotary_dim, base, factor, original_length, options):
        """Plain RoPE at the raised base."""
        return ntk_base(base, factor, rotary_dim), None
