"""Resonance RoPE: every rotary wavelength rounded to a whole number of tokens, so each dimension
repeats exactly and positions past the train length meet only the angles training saw (Wang et
al., 2024, arXiv 2403.00071)."""

from __future__ import annotations

import math

import torch

from poscli.extension.methods import register
from poscli.extension.methods.protocol import FrequencyMethod
from poscli.extension.scaling import default_inv_freq


def resonant(inv_freq: torch.Tensor) -> torch.Tensor:
    """theta_i -> 2 pi / round(2 pi / theta_i), (d/2,) float32. The paper rounds the pre-critical
    wavelengths (those shorter than the train length, whose full period training saw); the
    authors' code rounds every one, as here: a wavelength of lambda moves by at most 1/2, a
    relative change under 1 / (2 lambda), nothing for the long ones."""
    wavelengths = torch.round(2 * math.pi / inv_freq.double())  # (d/2,)
    return (2 * math.pi / wavelengths.clamp(min=1)).float()


@register("resonance")
class Resonance(FrequencyMethod):
    """RoPE's own frequencies, rounded (no interpolation: the factor is not used). Applied to a run
    trained with plain RoPE it changes every angle slightly, so it is fine-tuned by default."""

    summary = "Resonance RoPE: every rotary wavelength rounded to a whole number of tokens"
    citation = "Wang et al., 2024 (arXiv 2403.00071)"

    @classmethod
    def frequencies(cls, head_dim, base, factor, original_length, seq_len):
        return resonant(default_inv_freq(head_dim, base)), 1.0
