"""YaRN: NTK-by-parts frequencies and an attention temperature (Peng et al., 2023)."""

from __future__ import annotations

from poscli.extension.methods import register
from poscli.extension.methods.ntk_by_parts import NTKByParts
from poscli.extension.methods.protocol import FrequencyMethod, MethodOption


@register("yarn")
class YaRN(FrequencyMethod):
    summary = "YaRN: NTK-by-parts ramp between interpolation and extrapolation, plus attention temperature"
    citation = "Peng et al., 2023"
    options = {
        **NTKByParts.options,
        "attention_factor": MethodOption(0.0, "the scale on q and k (0: the paper's temperature, 0.1 ln s + 1)"),
    }
    transformers_type = "yarn"

    @classmethod
    def search_space(cls, original_length, target):
        """NTK-by-parts' ramp ends (fitted for LLaMA at 4096) and the temperature (0: YaRN's
        0.1 ln s + 1; 1: none), the knobs YaRN's issue tracker asks about."""
        return {**NTKByParts.search_space(original_length, target), "attention_factor": [0.0, 1.0]}

    @classmethod
    def frequencies(cls, head_dim, base, factor, original_length, seq_len, *, beta_fast, beta_slow, attention_factor):
        """NTK-by-parts frequencies and the temperature sqrt(1/t) = 0.1 ln s + 1 on q and k (eq. 22);
        ``attention_factor`` > 0 replaces the temperature (transformers' ``attention_factor``): the
        paper's constants were fitted on LLaMA with a 4096-token original length."""
        from poscli.extension.scaling import chosen_attention_scale, ntk_by_parts_inv_freq, yarn_attention_scale

        scale = chosen_attention_scale(attention_factor, yarn_attention_scale(factor))
        return ntk_by_parts_inv_freq(head_dim, base, factor, original_length, beta_fast, beta_slow), scale

    @classmethod
    def transformers_rope(cls, rotary_dim, base, factor, original_length, options):
        theta, scaling = super().transformers_rope(rotary_dim, base, factor, original_length, options)
        scaling.update(beta_fast=options["beta_fast"], beta_slow=options["beta_slow"])
        if options["attention_factor"] > 0:
            scaling["attention_factor"] = options["attention_factor"]
        return theta, scaling
