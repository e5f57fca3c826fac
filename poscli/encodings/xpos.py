"""xPos: RoPE with an exponential decay in distance (Sun et al., 2022, "A Length-Extrapolatable Transformer")."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from poscli.encodings import register
from poscli.encodings.rope import RoPE, RopeOptions, _per_element
from poscli.errors import PoscliError


@dataclass(frozen=True)
class XPosOptions(RopeOptions):
    """RoPE's options, and gamma: the decay zeta^((m - n)/gamma) (Sun et al., 2022)."""

    gamma: float = 512.0

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.gamma <= 0:
            raise PoscliError(f"--pe-option gamma must be positive, got {self.gamma:g}")
        if self.rotary_fraction != 1:
            raise PoscliError(
                "xpos decays every dimension it rotates; leave --pe-option rotary_fraction at 1 with --pe xpos"
            )


@register("xpos")
class XPos(RoPE):
    """RoPE, then q at position m scaled by zeta_i^(m/gamma) and k at position n by zeta_i^(-n/gamma),
    zeta_i = (2i/d + 0.4) / 1.4 for pair i, gamma ``--pe-option gamma=512``: their product scales the
    score of pair i by zeta_i^((m - n)/gamma), a decay with distance on top of the rotation.

    Only m - n matters, so the exponents are taken relative to the middle position of the
    sequence, which keeps every scale within zeta_min^(+-T/(2 gamma)): finite in float32 up to
    about 70k tokens at the default gamma, where the farthest pairs' factor is ~1e-35 anyway.
    Frequencies (and ``poscli extend`` methods) are RoPE's.
    """

    citation = "Sun et al., 2022"
    summary = "RoPE with a per-pair exponential decay in distance (zeta^((m-n)/gamma))"
    Options = XPosOptions
    legacy_options = {**RoPE.legacy_options, "xpos_gamma": "gamma"}
    separable_positions = False  # exponents are taken from the middle of each call's positions
    batched_positions = False  # the decay's scale takes one row of positions

    def __init__(self, config):
        super().__init__(config)
        pairs = torch.arange(config.head_dim // 2, dtype=torch.float32)
        zeta = (2 * pairs / config.head_dim + 0.4) / 1.4  # (hd/2,), in (0.29, 1)
        self.register_buffer(
            "log_zeta", _per_element(zeta.log()[None, :], self.options.layout)[0], persistent=False
        )  # (hd,)

    def transformers_layout(self) -> None:
        return None  # no transformers architecture has xPos's decay

    def rotate(self, q: Tensor, k: Tensor, positions: Tensor, layer: int) -> tuple[Tensor, Tensor]:
        q_rot, k_rot = super().rotate(q, k, positions, layer)  # (B, H, T, hd) each
        relative = positions.to(torch.float32) - positions.to(torch.float32).mean()  # (T,), offset from the middle
        scale = torch.exp(relative[:, None] * self.log_zeta[None, :] / self.options.gamma)  # (T, hd)
        return (q_rot.float() * scale).to(q.dtype), (k_rot.float() / scale).to(k.dtype)
