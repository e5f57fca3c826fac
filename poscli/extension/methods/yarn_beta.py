"""YaRN with Ministral 3's attention temperature: YaRN's frequencies and scale on q and k, then
every query times 1 + beta log(1 + floor(p / L)) (Mistral AI, 2025; Peng et al., 2023)."""

from __future__ import annotations

from poscli.extension.methods import register
from poscli.extension.methods.beta_scaling import beta_scale, checked_beta
from poscli.extension.methods.protocol import MethodOption
from poscli.extension.methods.yarn import YaRN


@register("yarn-beta")
class YaRNBeta(YaRN):
    """Ministral 3's ``rope_parameters``: rope_type yarn with ``llama_4_scaling_beta`` (0.1) on top.
    Recorded as both ``model.rope_scaling`` (YaRN) and ``model.query_scaling`` (the temperature)."""

    summary = "YaRN plus Ministral 3's attention temperature 1 + beta log(1 + floor(p / L)) on the queries"
    citation = "Mistral AI, Ministral 3 (2025); Peng et al., 2023"
    options = {**YaRN.options, "beta": MethodOption(0.1, "the coefficient of the log in the attention temperature")}
    transformers_type = None  # the temperature is Ministral 3's own; GPT-NeoX has no place for it

    @classmethod
    def search_space(cls, original_length, target):
        return {**YaRN.search_space(original_length, target), "beta": [0.05, 0.1, 0.2]}

    @classmethod
    def check_options(cls, options):
        return checked_beta(super().check_options(options))

    @classmethod
    def frequencies(cls, head_dim, base, factor, original_length, seq_len, beta=0.1, **yarn):
        return YaRN.frequencies(head_dim, base, factor, original_length, seq_len, **yarn)

    @classmethod
    def extended_config(cls, encoding, config, factor, target, options, weights):
        changes = super().extended_config(encoding, config, factor, target, options, weights)
        scaling = {"method": cls.name, "original_length": config.train_length, "beta": options["beta"]}
        return {**changes, "query_scaling": scaling}

    @classmethod
    def query_scale(cls, positions, original_length, beta=0.1):
        return beta_scale(positions, original_length, beta)
