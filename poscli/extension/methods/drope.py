"""DroPE: drop a trained model's rotary embedding, recalibrate briefly at the original length, and
scale the logits by 1 + c ln s at s times that length (Gelberg et al., 2025, arXiv 2512.12167)."""

from __future__ import annotations

import math

import torch

from poscli.core.lengths import format_length
from poscli.extension.methods import register
from poscli.extension.methods.beta_scaling import checked_beta
from poscli.extension.methods.protocol import MethodOption, QueryScalingMethod


@register("drope")
class DroPE(QueryScalingMethod):
    """The run's rotary embedding is removed (``--pe none``, every other weight kept; PoPE's phase
    bias goes with it), the NoPE model is fine-tuned ("recalibrated") at the original length L for ``--steps``
    (default 400; 0 drops the encoding with no recalibration, the paper's ablation), and a sequence
    of T > L tokens has every query scaled by 1 + c ln(T / L), the paper's softmax temperature for
    a context s = T / L times the training one (1 at T <= L, so the recalibration is unscaled).
    The factor depends on the length run, as dynamic NTK's frequencies do: a token's logits change
    with the length of the sequence around it. ``--beta`` is c (default 0.1, YaRN's coefficient:
    the paper fits c on held-out data, which ``poscli tune`` can do)."""

    summary = "DroPE: drop RoPE, recalibrate at the train length, queries times 1 + c ln(T / L) at T > L"
    citation = "Gelberg et al., 2025 (arXiv 2512.12167)"
    options = {"beta": MethodOption(0.1, "the coefficient of the log in the attention temperature, 1 + c ln s")}

    @classmethod
    def search_space(cls, original_length, target):
        """c, which the paper fits on held-out data (tuned here without the recalibration steps)."""
        return {"beta": [0.0, 0.1, 0.2, 0.4, 0.8]}

    @classmethod
    def applies_to(cls, encoding):
        if getattr(encoding, "rotary_frequencies", False) and not hasattr(encoding, "schedule"):
            return None
        return "drops a rotary embedding (rope, xpos)"

    @classmethod
    def check_options(cls, options):
        return checked_beta(super().check_options(options))

    @classmethod
    def extended_config(cls, encoding, config, factor, target, options, weights):
        for key in [key for key in weights if key.startswith("encoding.")]:
            del weights[key]  # the encoding's own weights (PoPE's phase bias) go with it
        scaling = {"method": cls.name, "original_length": config.train_length, "beta": options["beta"]}
        return {"pe": "none", "pe_options": {}, "query_scaling": scaling}

    @classmethod
    def default_finetune_length(cls, target, original_length):
        """The recalibration runs at the original length."""
        return original_length

    @classmethod
    def label(cls, parent_label, factor, steps, finetune_length, changes):
        tuning = f"recalibrated {steps} steps at {format_length(finetune_length)}" if steps else "not recalibrated"
        return f"{parent_label} +DroPE (RoPE dropped), {tuning}"

    @classmethod
    def query_scale(cls, positions, original_length, beta=0.1):
        """positions (T,) -> (T,) float32, all equal: 1 + c ln(max(1, T / L)), T = last position + 1."""
        length = int(positions.max()) + 1 if positions.numel() else 1
        scale = 1 + beta * math.log(max(1.0, length / original_length))
        return torch.full(positions.shape, scale, dtype=torch.float32, device=positions.device)
