"""Log-n attention scaling: queries beyond the train length scaled by log_L of their position
(Qwen's ``use_logn_attn``, Bai et al., 2023; Chiang and Cholak, 2022; Su, 2021)."""

from __future__ import annotations

import math

import torch

from poscli.extension.methods import register
from poscli.extension.methods.protocol import QueryScalingMethod


@register("logn")
class LogN(QueryScalingMethod):
    """The query at 0-based position p is multiplied by log(p + 1) / log(L) when p + 1 > L, and by
    1 otherwise, L the train length: the logits grow with log n so the attention's entropy stays
    near what it was in training as the number of keys grows. Qwen applies it at inference only
    (``logn_list = [math.log(i, seq_length) if i > seq_length else 1 for i in range(1, ...)]``), so
    it takes no training here; it applies to every encoding, since every score is a dot product."""

    summary = "log-n attention scaling: queries past the train length L scaled by log_L(position) (no training)"
    citation = "Bai et al., 2023 (Qwen's use_logn_attn); Chiang and Cholak, 2022"
    training = "never"

    @classmethod
    def recorded_scaling(cls, config, factor, options):
        return {"method": cls.name, "original_length": config.train_length}

    @classmethod
    def label(cls, parent_label, factor, steps, finetune_length, changes):
        return f"{parent_label} +log-n attention scaling, no training"

    @classmethod
    def query_scale(cls, positions, original_length, factor=1.0):
        """positions (T,) -> (T,) float32: max(1, log(p + 1) / log(L))."""
        scale = torch.log(positions.to(torch.float64) + 1) / math.log(original_length)  # (T,)
        return scale.clamp(min=1.0).to(torch.float32)
