"""A base change: RoPE at a new base (Rozière et al., 2023; Xiong et al., 2023)."""

from __future__ import annotations

from poscli.errors import PoscliError
from poscli.extension.methods import register
from poscli.extension.methods.protocol import FrequencyMethod, MethodOption


@register("base")
class BaseChange(FrequencyMethod):
    summary = "base change: new base given by --rope-base (Llama 3 trains at 500000; Code Llama moved 10000 to 1e6)"
    citation = "Rozière et al., 2023 (Code Llama); Xiong et al., 2023"
    options = {"rope_base": MethodOption(0.0, "the new RoPE base, e.g. 500000 (required)")}

    @classmethod
    def frequencies(cls, head_dim, base, factor, original_length, seq_len, rope_base=0.0):
        from poscli.extension.scaling import default_inv_freq

        if rope_base <= 1:
            raise PoscliError("--method base needs the new base: add e.g. --rope-base 500000")
        return default_inv_freq(head_dim, rope_base), 1.0

    @classmethod
    def transformers_rope(cls, rotary_dim, base, factor, original_length, options):
        """Plain RoPE at the new base."""
        return options["rope_base"], None
