"""NTK-by-parts: YaRN's ramp without its temperature (Peng et al., 2023, section 3.2)."""

from __future__ import annotations

from poscli.extension.methods import register
from poscli.extension.methods.protocol import FrequencyMethod, MethodOption


@register("ntk-by-parts")
class NTKByParts(FrequencyMethod):
    summary = "NTK-by-parts: YaRN's ramp between interpolation and extrapolation, without its temperature"
    citation = "Peng et al., 2023 (section 3.2)"
    # the ramp's ends in rotations over the original length: the paper's, fitted for LLaMA at 4096 (YaRN's too)
    options = {
        "beta_fast": MethodOption(32.0, "rotations above which dimensions extrapolate"),
        "beta_slow": MethodOption(1.0, "rotations below which dimensions interpolate"),
    }
    transformers_type = "yarn"

    @classmethod
    def search_space(cls, original_length, target):
        """Each end of the ramp at a quarter to twice (fast) and half to twice (slow) the paper's."""
        fast, slow = NTKByParts.options["beta_fast"].default, NTKByParts.options["beta_slow"].default
        return {"beta_fast": [fast / 4, fast / 2, fast, fast * 2], "beta_slow": [slow / 2, slow, slow * 2]}

    @classmethod
    def frequencies(cls, head_dim, base, factor, original_length, seq_len, *, beta_fast, beta_slow):
        from poscli.extension.scaling import ntk_by_parts_inv_freq

        return ntk_by_parts_inv_freq(head_dim, base, factor, original_length, beta_fast, beta_slow), 1.0

    @classmethod
    def transformers_rope(cls, rotary_dim, base, factor, original_length, options):
        """transformers' yarn with attention_factor 1."""
        theta, scaling = super().transformers_rope(rotary_dim, base, factor, original_length, options)
        scaling.update(beta_fast=options["beta_fast"], beta_slow=options["beta_slow"], attention_factor=1.0)
        return theta, scaling
