"""A user-defined encoding outside poscli: a learned power-law distance penalty per head.

b_h(i, j) = -a_h (i - j)^p, with a_h > 0 learned and p an option (default 0.5). It implements one
hook, ``bias_of_distance``, and so gets poscli's memory-bounded fast path (a table over distances,
``poscli.attention.distance_attention``) and the blocked reference path without writing either. ``make bench``
measures it as the user-defined row; train it with

    poscli train --pe examples.power_penalty:PowerPenalty -O power=0.5
"""

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from poscli.encodings.base import PositionalEncoding
from poscli.errors import PoscliError


@dataclass(frozen=True)
class PowerOptions:
    power: float = 0.5  # p in -a d^p: -O power=0.5

    def __post_init__(self):
        if not 0 < self.power <= 2:
            raise PoscliError(f"--pe-option power must be in (0, 2], got {self.power}")


class PowerPenalty(PositionalEncoding):
    """score(i, j) += -a_h (i - j)^p, a_h = softplus(raw_h) learned per head."""

    citation = "a user-defined example (poscli examples/)"
    summary = "a learned per-head power-law distance penalty -a d^p"
    has_score_bias = True
    Options = PowerOptions

    def __init__(self, config):
        super().__init__(config)
        self.raw_strength = nn.Parameter(torch.zeros(config.n_head))  # (H,), a = softplus(0) = 0.69

    def bias_of_distance(self, distance: Tensor, layer: int) -> Tensor:
        return -F.softplus(self.raw_strength)[:, None] * distance.pow(self.options.power)  # (H, N)
