"""The Forgetting Transformer: data-dependent ALiBi (Lin et al., ICLR 2025)."""

from __future__ import annotations

from dataclasses import dataclass

import torch.nn.functional as F
from torch import Tensor, nn

from poscli.attention.data_dependent import key_column_attention, working_dtype
from poscli.encodings import register
from poscli.encodings.base import PositionalEncoding


@dataclass(frozen=True)
class FoxOptions:
    """Args:
    gate_bias: the forget gates' bias at initialisation; f = sigmoid(gate_bias) at a zero input
        (5: f ~ 0.993, the default of x-transformers' ``DataDependentAlibi``), so the model starts
        close to NoPE and learns how fast each head forgets.
    """

    gate_bias: float = 5.0


@register("fox")
class Fox(PositionalEncoding):
    """Forgetting attention ("Forgetting Transformer: Softmax Attention with a Forget Gate", Lin et al.,
    ICLR 2025, eq. 3-4): each head of each layer has a forget gate f_t = sigmoid(w . x_t + b) read from
    the layer's input, and the score of query i on key j gains D_ij = sum over l in (j, i] of log f_l.

    With F_i = sum over l <= i of log f_l, D_ij = F_i - F_j: F_i is constant along a row, which softmax
    ignores, so the bias is the key-side column -F_j and the attention runs through the fused kernel
    with one more head dimension (``key_column_attention``). No position enters anywhere: with every
    f = 1 it is NoPE; with a fixed f = exp(-m) it is ALiBi with slope m.
    """

    citation = "Lin et al., 2025"
    summary = "a data-dependent ALiBi: per-head forget gates read from the input, summed into the bias"
    Options = FoxOptions
    replaces_attention = True
    reads_positions = False  # the gates read the tokens; no position enters
    separable_positions = False

    def __init__(self, config):
        super().__init__(config)
        self.gates = nn.ModuleList(nn.Linear(config.d_model, config.n_head) for _ in range(config.n_layer))
        for gate in self.gates:
            nn.init.constant_(gate.bias, self.options.gate_bias)

    def log_forget(self, x: Tensor, layer: int) -> Tensor:
        """log f_t for every head: x (B, T, C) -> (B, H, T), float32 (or float64), each <= 0."""
        return F.logsigmoid(self.gates[layer](x).to(working_dtype(x))).transpose(1, 2)

    def attend(self, x: Tensor, q: Tensor, k: Tensor, v: Tensor, positions: Tensor, layer: int) -> Tensor:
        cumulative = self.log_forget(x, layer).cumsum(dim=-1)  # (B, H, T): F_i
        return key_column_attention(q, k, v, -cumulative)  # (B, H, T, hd)


def forget_bias(log_forget: Tensor) -> Tensor:
    """The bias D_ij = F_i - F_j written out, for tests and plots: (B, H, T) -> (B, H, T, T)."""
    cumulative = log_forget.cumsum(dim=-1)  # (B, H, T)
    return cumulative[..., :, None] - cumulative[..., None, :]
