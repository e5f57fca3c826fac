"""Position Interpolation: positions divided by the factor (Chen et al., 2023)."""

from __future__ import annotations

from poscli.extension.methods import register
from poscli.extension.methods.protocol import FrequencyMethod


@register("pi")
class PositionInterpolation(FrequencyMethod):
    """For RoPE every frequency divided by s (transformers' "linear"); for an encoding that adds
    positions at the input and can divide them (``interpolable_positions``: sinusoidal), the
    positions themselves divided by s (``model.position_scale``)."""

    summary = "Position Interpolation: every frequency (or position) divided by the factor"
    citation = "Chen et al., 2023"
    transformers_type = "linear"

    @classmethod
    def frequencies(cls, head_dim, base, factor, original_length, seq_len):
        from poscli.extension.scaling import default_inv_freq

        return default_inv_freq(head_dim, base) / factor, 1.0

    @classmethod
    def applies_to(cls, encoding):
        if getattr(encoding, "interpolable_positions", False) or getattr(encoding, "rotary_frequencies", False):
            return None
        return "divides rotary frequencies or positions added at the input"

    @classmethod
    def extended_config(cls, encoding, config, factor, target, options, weights):
        if getattr(encoding, "interpolable_positions", False):
            return {"position_scale": factor}
        return super().extended_config(encoding, config, factor, target, options, weights)
