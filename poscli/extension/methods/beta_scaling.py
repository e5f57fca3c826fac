"""Ministral 3's attention temperature: queries scaled by 1 + beta log(1 + floor(p / L))
(Mistral AI, 2025; transformers' ``modeling_ministral3.get_llama_4_attn_scale``)."""

from __future__ import annotations

import torch

from poscli.errors import PoscliError
from poscli.extension.methods import register
from poscli.extension.methods.protocol import MethodOption, QueryScalingMethod


def beta_scale(positions, original_length: int, beta: float):
    """1 + beta log(1 + floor(p / L)), positions (T,) -> (T,) float32: 1 inside the train length,
    then a step every L tokens (Ministral 3's ``llama_4_scaling_beta``, L its
    ``original_max_position_embeddings``)."""
    return 1 + beta * torch.log(1 + torch.floor(positions.float() / original_length))


def checked_beta(options: dict) -> dict:
    if options["beta"] < 0:
        raise PoscliError(f"--beta must be 0 or more, got {options['beta']:g}")
    return options


@register("beta-scaling")
class BetaScaling(QueryScalingMethod):
    """Ministral 3 multiplies every query (after RoPE) by 1 + beta log(1 + floor(p / L)), beta =
    0.1, L the original length, together with YaRN frequencies (``--method yarn-beta``); here alone,
    on any encoding."""

    summary = "Ministral 3's attention temperature alone: queries times 1 + beta log(1 + floor(p / L)) (any encoding)"
    citation = "Mistral AI, Ministral 3 (2025), transformers' modeling_ministral3"
    options = {"beta": MethodOption(0.1, "the coefficient of the log in the attention temperature")}

    @classmethod
    def search_space(cls, original_length, target):
        return {"beta": [0.05, 0.1, 0.2, 0.4]}

    @classmethod
    def check_options(cls, options):
        return checked_beta(super().check_options(options))

    @classmethod
    def query_scale(cls, positions, original_length, factor=1.0, beta=0.1):
        return beta_scale(positions, original_length, beta)
