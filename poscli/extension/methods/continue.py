"""Continued training: the control of a fine-tuned extension, the same training with nothing rescaled."""

from __future__ import annotations

from poscli.core.lengths import format_length
from poscli.extension.methods import register
from poscli.extension.methods.protocol import ExtensionMethod


@register("continue")
class Continue(ExtensionMethod):
    """Applies to every encoding: the fine-tuning of ``poscli extend`` (its steps, length and
    learning rate) with the config unchanged, so a method's gain over it is the method's own."""

    summary = "the control: the same fine-tuning with no rescaling"
    citation = "the continued-training control of Chen et al. (2023) and Peng et al. (2023)"
    training = "required"
    rescales = False

    @classmethod
    def extended_config(cls, encoding, config, factor, target, options, weights):
        return {}

    @classmethod
    def label(cls, parent_label, factor, steps, finetune_length, changes):
        at = format_length(finetune_length)
        return f"{parent_label} +continued training (no rescaling), {steps} steps at {at}"
