"""Ms-PoE, multi-scale positional encoding: each head reads positions compressed by its own ratio,
against lost-in-the-middle (Zhang et al., 2024, "Found in the Middle", arXiv 2403.04797)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from poscli.errors import PoscliError
from poscli.extension.methods import register
from poscli.extension.methods.protocol import RemapMethod
from poscli.extension.remap import Remap


@dataclass(frozen=True)
class MsPoEPlan(Remap):
    """Head h of H rotates queries and keys at p / r_h, r_h = r_min + (r_max - r_min) h / (H - 1)."""

    ratio_min: float = 1.2
    ratio_max: float = 1.8
    custom_attention = True

    def far_positions(self, positions):
        raise PoscliError("Ms-PoE rescales every position per head, not beyond a window")

    def ratios(self, heads: int) -> torch.Tensor:
        """(H,) float64, the compression ratio of each head."""
        steps = torch.arange(heads, dtype=torch.float64) / max(1, heads - 1)
        return self.ratio_min + (self.ratio_max - self.ratio_min) * steps

    def attend(self, rotate_q, rotate_k, v, positions, consecutive: bool, max_block: int):
        """Each head's rotation at its own compressed positions, then plain causal attention (the
        fused kernel: memory bounded at any length). -> (B, H, T, hd)."""
        from poscli.attention.blockwise import fused_causal_attention

        heads = v.shape[1]
        q_heads, k_heads = [], []
        for h, ratio in enumerate(self.ratios(heads).tolist()):
            compressed = positions.to(torch.float64) / ratio  # (T,)
            q_heads.append(rotate_q(compressed)[:, h])  # (B, T, hd)
            k_heads.append(rotate_k(compressed)[:, h])
        return fused_causal_attention(torch.stack(q_heads, 1), torch.stack(k_heads, 1), v)

    def describe(self) -> str:
        return f"Ms-PoE ratios {self.ratio_min:g}-{self.ratio_max:g}"


@register("ms-poe")
class MsPoE(RemapMethod):
    """The paper orders the heads by a position-awareness score measured on each input (heads that
    already attend by position get the smaller ratios); here the ratios go up in head order, a
    fixed assignment: the same spread of scales, not the paper's per-input choice."""

    summary = "Ms-PoE: positions divided by a different ratio in each head, 1.2 to 1.8 (no training)"
    citation = "Zhang et al., 2024 (arXiv 2403.04797)"
    options = {"ratio_min": 1.2, "ratio_max": 1.8}
    Plan = MsPoEPlan

    @classmethod
    def search_space(cls, original_length, target):
        return {"ratio_min": [1.0, 1.2, 1.5], "ratio_max": [1.5, 1.8, 2.5]}

    @classmethod
    def plan(cls, original_length: int, target: int, ratio_min: float = 1.2, ratio_max: float = 1.8) -> Remap:
        if not 0 < ratio_min <= ratio_max:
            raise PoscliError(f"--ratio-min {ratio_min:g} must be positive and at most --ratio-max {ratio_max:g}")
        return MsPoEPlan("ms-poe", 0, ratio_min=float(ratio_min), ratio_max=float(ratio_max))
