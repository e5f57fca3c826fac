"""Dynamic NTK: the base recomputed from the length run when it exceeds the original (emozilla, 2023)."""

from __future__ import annotations

from poscli.extension.methods import register
from poscli.extension.methods.protocol import FrequencyMethod


@register("dynamic-ntk")
class DynamicNTK(FrequencyMethod):
    summary = "dynamic NTK: base recomputed from the actual length when it exceeds the original"
    citation = "emozilla, 2023 (reddit r/LocalLLaMA); transformers' 'dynamic'"
    per_length = True
    transformers_type = "dynamic"

    @classmethod
    def frequencies(cls, head_dim, base, factor, original_length, seq_len):
        """b' = b ((s T / L) - (s - 1))^(d/(d-2)) at a length T > L; the trained frequencies up to L."""
        from poscli.extension.scaling import default_inv_freq

        if seq_len is None or seq_len <= original_length:
            return default_inv_freq(head_dim, base), 1.0
        new_base = base * ((factor * seq_len / original_length) - (factor - 1)) ** (head_dim / (head_dim - 2))
        return default_inv_freq(head_dim, new_base), 1.0
