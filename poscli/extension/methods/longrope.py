"""LongRoPE: a searched rescale factor per frequency (Ding et al., 2024)."""

from __future__ import annotations

import math

import torch

from poscli.errors import PoscliError
from poscli.extension.methods import register
from poscli.extension.methods.protocol import FrequencyMethod, MethodOption
from poscli.extension.scaling import chosen_attention_scale


def longrope_attention_scale(factor: float, original_length: int) -> float:
    """LongRoPE's attention factor sqrt(1 + ln s / ln L) for s > 1 (Ding et al., 2024), as
    transformers' ``_compute_longrope_parameters`` sets it."""
    return math.sqrt(1 + math.log(factor) / math.log(original_length)) if factor > 1 else 1.0


@register("longrope")
class LongRoPE(FrequencyMethod):
    summary = (
        "LongRoPE: a searched rescale factor per frequency, long and short sets, attention factor sqrt(1 + ln s / ln L)"
    )
    citation = "Ding et al., 2024"
    options = {
        "long_factor": MethodOption(
            (), "a factor per frequency past the train length (--factors FILE or search gives them)"
        ),
        "short_factor": MethodOption((), "a factor per frequency within the train length (default: 1 each)"),
        "attention_factor": MethodOption(0.0, "the scale on q and k (0: sqrt(1 + ln s / ln L))"),
    }
    per_length = True
    transformers_type = "longrope"

    @classmethod
    def frequencies(
        cls, head_dim, base, factor, original_length, seq_len, long_factor=(), short_factor=(), attention_factor=0.0
    ):
        """inv_freq_i = 1 / (lambda_i * b^(2i/d)) with lambda the long factors when the length run
        exceeds L and the short ones otherwise (all 1, the trained frequencies, when not given), as
        transformers' ``_compute_longrope_parameters``; ``attention_factor`` > 0 replaces the default."""
        half = head_dim // 2
        if len(long_factor) != half:
            raise PoscliError(
                f"--method longrope needs {half} long factors (one per frequency, d/2 = {half}), got "
                f'{len(long_factor)}: give --factors FILE, a JSON file {{"long_factor": [...], "short_factor": [...]}}'
            )
        if short_factor and len(short_factor) != half:
            raise PoscliError(f"--method longrope needs {half} short factors (or none), got {len(short_factor)}")
        chosen = long_factor if seq_len is not None and seq_len > original_length else (short_factor or (1.0,) * half)
        rescale = torch.tensor([float(value) for value in chosen], dtype=torch.float64)  # (d/2,)
        if not bool((rescale > 0).all()):
            raise PoscliError("--method longrope: every rescale factor must be positive")
        exponent = torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim  # (d/2,)
        inv_freq = (1.0 / (rescale * base**exponent)).to(torch.float32)
        scale = chosen_attention_scale(attention_factor, longrope_attention_scale(factor, original_length))
        return inv_freq, scale

    @classmethod
    def transformers_rope(cls, rotary_dim, base, factor, original_length, options):
        theta, scaling = super().transformers_rope(rotary_dim, base, factor, original_length, options)
        half = rotary_dim // 2
        scaling.update(
            long_factor=list(options["long_factor"]), short_factor=list(options["short_factor"] or (1.0,) * half)
        )
        if options["attention_factor"] > 0:
            scaling["attention_factor"] = options["attention_factor"]
        return theta, scaling
