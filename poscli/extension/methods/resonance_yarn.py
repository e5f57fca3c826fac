"""Resonance YaRN: YaRN's frequencies with every wavelength then rounded to a whole number of
tokens, and YaRN's attention temperature (Wang et al., 2024, arXiv 2403.00071; Peng et al., 2023)."""

from __future__ import annotations

from poscli.extension.methods import register
from poscli.extension.methods.resonance import resonant
from poscli.extension.methods.yarn import YaRN


@register("resonance-yarn")
class ResonanceYaRN(YaRN):
    summary = "Resonance YaRN: YaRN's frequencies with each wavelength rounded to a whole number of tokens"
    citation = "Wang et al., 2024 (arXiv 2403.00071); Peng et al., 2023"
    transformers_type = None  # rounded frequencies are no transformers rope type

    @classmethod
    def frequencies(cls, head_dim, base, factor, original_length, seq_len, **yarn):
        inv_freq, scale = YaRN.frequencies(head_dim, base, factor, original_length, seq_len, **yarn)
        return resonant(inv_freq), scale
