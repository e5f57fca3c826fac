"""Llama 3.1's frequency rescaling (Meta, 2024)."""

from __future__ import annotations

import math

import torch

from poscli.extension.methods import register
from poscli.extension.methods.protocol import FrequencyMethod, MethodOption
from poscli.extension.scaling import default_inv_freq


@register("llama3")
class Llama3(FrequencyMethod):
    summary = "Llama 3.1: long wavelengths divided by the factor, short kept, a smooth blend between"
    citation = "Meta, Llama 3.1 (2024)"
    options = {
        "low_freq_factor": MethodOption(1.0, "wavelengths longer than L / this are interpolated"),
        "high_freq_factor": MethodOption(4.0, "wavelengths shorter than L / this are kept"),
    }

    @classmethod
    def search_space(cls, original_length, target):
        return {"low_freq_factor": [0.5, 1.0, 2.0], "high_freq_factor": [2.0, 4.0, 8.0]}

    transformers_type = "llama3"

    @classmethod
    def frequencies(cls, head_dim, base, factor, original_length, seq_len, low_freq_factor=1.0, high_freq_factor=4.0):
        inv_freq = default_inv_freq(head_dim, base)
        wavelength = 2 * math.pi / inv_freq  # (d/2,)
        low_freq_wavelength = original_length / low_freq_factor
        high_freq_wavelength = original_length / high_freq_factor
        scaled = torch.where(wavelength > low_freq_wavelength, inv_freq / factor, inv_freq)
        smooth = (original_length / wavelength - low_freq_factor) / (high_freq_factor - low_freq_factor)
        blended = (1 - smooth) * scaled / factor + smooth * scaled
        medium = (wavelength >= high_freq_wavelength) & (wavelength <= low_freq_wavelength)
        return torch.where(medium, blended, scaled), 1.0

    @classmethod
    def transformers_rope(cls, rotary_dim, base, factor, original_length, options):
        theta, scaling = super().transformers_rope(rotary_dim, base, factor, original_length, options)
        scaling.update(low_freq_factor=options["low_freq_factor"], high_freq_factor=options["high_freq_factor"])
        return theta, scaling
