"""Llama 4's attention temperature: queries scaled by 1 + beta log(floor((p + 1) / F) + 1)
(Meta's Llama 4, 2025, its NoPE layers; transformers' ``modeling_llama4.py``; the temperature
tuning of Nakanishi, 2025, arXiv 2501.19399)."""

from __future__ import annotations

import torch

from poscli.errors import PoscliError
from poscli.extension.methods import register
from poscli.extension.methods.protocol import MethodOption, QueryScalingMethod


@register("llama4-temperature")
class Llama4Temperature(QueryScalingMethod):
    """The query at 0-based position p times log(floor((p + 1) / F) + 1) * beta + 1, F the floor
    scale (Llama 4: 8192, beta 0.1; here F defaults to the run's train length L, the same ratio
    as Llama 4's 8192 to its 8k chunks). The factor is a staircase: 1 for p + 1 < F, then
    1 + beta ln 2, 1 + beta ln 3, ... each F tokens. Llama 4 scales only the queries of its NoPE
    layers; here every layer of a model is scaled, except the rotary layers of ``--pe hybrid``."""

    summary = "Llama 4's attention temperature: queries times 1 + beta log(floor((p + 1) / F) + 1) (any encoding)"
    citation = "Meta, Llama 4 (2025), transformers' modeling_llama4; Nakanishi, 2025"
    options = {
        "beta": MethodOption(0.1, "the coefficient of the log in the attention temperature"),
        "floor_scale": MethodOption(0.0, "tokens per step of the temperature (0: the train length; Llama 4: 8192)"),
    }

    @classmethod
    def search_space(cls, original_length, target):
        return {"beta": [0.05, 0.1, 0.2, 0.4], "floor_scale": [original_length / 2, float(original_length)]}

    @classmethod
    def check_options(cls, options):
        checked = super().check_options(options)
        if checked["floor_scale"] < 0 or checked["beta"] < 0:
            raise PoscliError("--floor-scale and --beta must be positive (or 0 for --floor-scale: the train length)")
        return checked

    @classmethod
    def query_scale(cls, positions, original_length, factor=1.0, beta=0.1, floor_scale=0.0):
        """positions (T,) -> (T,) float32, in float32 as transformers computes it."""
        floor_scale = floor_scale or original_length
        return torch.log1p(torch.floor((positions.float() + 1.0) / floor_scale)) * beta + 1.0

    @classmethod
    def scales_layer(cls, encoding, layer):
        """Llama 4 scales its NoPE layers only: in a hybrid schedule, the layers with ``none``."""
        if hasattr(encoding, "schedule"):
            return encoding.layer(layer)[0].name == "none"
        return True
