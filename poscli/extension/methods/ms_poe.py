"""Ms-PoE, multi-scale positional encoding: each head reads positions compressed by its own ratio,
against lost-in-the-middle (Zhang et al., 2024, "Found in the Middle", arXiv 2403.04797).

As the authors' code (github.com/VITA-Group/Ms-PoE, ``utils/modify_arch/llama.py``): H ratios
r_i = r_min + (r_max - r_min) i / H, i = 0..H-1 (so r_max itself is never reached), and head h rotates
its queries and keys at p / r_{order[h]}. ``order`` is, by default, measured on each input from the
un-rotated queries and keys: the last query's attention weights softmax(q k^T / sqrt(hd)) over every
key, each head's share of weights above 3x their mean, the heads sorted by that share, largest first
(the authors' ``argsort`` of the negated share, applied as ``cos[head_order]``). Their ``head_type
normal`` is ``--head-order reversed`` (head h takes r_{H-1-h}); ``index`` gives head h r_h.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from poscli.attention.blockwise import fused_causal_attention
from poscli.errors import PoscliError
from poscli.extension.methods import register
from poscli.extension.methods.protocol import MethodOption, RemapMethod
from poscli.extension.remap import Remap

HEAD_ORDERS = ("attention", "reversed", "index")
OUTLIER_MULTIPLE = 3.0  # a weight counts as an outlier above 3x the mean weight (the authors' code)


@dataclass(frozen=True)
class MsPoEPlan(Remap):
    """Head h of H rotates queries and keys at p / r_{order[h]}, r_i = r_min + (r_max - r_min) i / H."""

    ratio_min: float = 1.2
    ratio_max: float = 1.8
    head_order: str = "attention"
    custom_attention = True

    def far_positions(self, positions):
        raise PoscliError("Ms-PoE rescales every position per head, not beyond a window")

    def ratios(self, heads: int) -> torch.Tensor:
        """(H,) float64, the compression ratios r_0 < ... < r_{H-1}."""
        return self.ratio_min + (self.ratio_max - self.ratio_min) * torch.arange(heads, dtype=torch.float64) / heads

    def assignment(self, rotate_q, rotate_k, positions: torch.Tensor, heads: int) -> torch.Tensor:
        """Which ratio each head of each input takes -> (B, H) long, or (1, H) for a fixed order.
        Only the per-input order un-rotates queries and keys (rotated at position 0)."""
        device = positions.device
        if self.head_order == "index":
            return torch.arange(heads, device=device)[None]
        if self.head_order == "reversed":
            return torch.arange(heads - 1, -1, -1, device=device)[None]
        unrotated = torch.zeros(len(positions), dtype=torch.float64, device=device)
        q, k = rotate_q(unrotated), rotate_k(unrotated)  # (B, H, T, hd) each
        scores = torch.einsum("bhd,bhtd->bht", q[:, :, -1].float(), k.float()) / q.shape[-1] ** 0.5  # the last query
        weights = torch.softmax(scores, dim=-1)  # (B, H, T)
        share = (weights > OUTLIER_MULTIPLE * weights.mean(-1, keepdim=True)).float().mean(-1)  # (B, H)
        return torch.argsort(-share, dim=-1, stable=True)

    def attend(self, rotate_q, rotate_k, v, positions, consecutive: bool, max_block: int):
        """Each head's rotation at its own compressed positions, then plain causal attention (the
        fused kernel: memory bounded at any length). -> (B, H, T, hd)."""
        assigned = self.assignment(rotate_q, rotate_k, positions, v.shape[1])  # (B or 1, H)
        q = k = None
        for i, ratio in enumerate(self.ratios(v.shape[1]).tolist()):
            compressed = positions.to(torch.float64) / ratio  # (T,)
            takes = (assigned == i)[:, :, None, None]  # (B or 1, H, 1, 1)
            q_i, k_i = rotate_q(compressed), rotate_k(compressed)  # (B, H, T, hd) each
            q = q_i if q is None else torch.where(takes, q_i, q)
            k = k_i if k is None else torch.where(takes, k_i, k)
        # heads that take ratio 0 kept the first rotation; every other head was overwritten by its own
        return fused_causal_attention(q, k, v)

    def describe(self) -> str:
        return f"Ms-PoE ratios {self.ratio_min:g}-{self.ratio_max:g}, heads by {self.head_order}"


@register("ms-poe")
class MsPoE(RemapMethod):
    summary = "Ms-PoE: positions divided by a different ratio in each head, 1.2 up to 1.8 (no training)"
    citation = "Zhang et al., 2024 (arXiv 2403.04797)"
    options = {
        "ratio_min": MethodOption(1.2, "the smallest head's position ratio"),
        "ratio_max": MethodOption(1.8, "the ratios' upper end, r_min + (r_max - r_min) i / H"),
        "head_order": MethodOption(
            "attention",
            "which head takes which ratio: by each input's attention outliers (the authors' default), reversed "
            "(their 'normal'), or index",
            choices=("attention", "reversed", "index"),
        ),
    }
    Plan = MsPoEPlan

    @classmethod
    def search_space(cls, original_length, target):
        return {"ratio_min": [1.0, 1.2, 1.5], "ratio_max": [1.5, 1.8, 2.5]}

    @classmethod
    def plan(cls, original_length: int, target: int, ratio_min: float = 1.2, ratio_max: float = 1.8,
             head_order: str = "attention") -> Remap:  # fmt: skip
        if not 0 < ratio_min <= ratio_max:
            raise PoscliError(f"--ratio-min {ratio_min:g} must be positive and at most --ratio-max {ratio_max:g}")
        if head_order not in HEAD_ORDERS:
            raise PoscliError(f"--head-order {head_order!r}: choose one of {', '.join(HEAD_ORDERS)}")
        return MsPoEPlan("ms-poe", 0, ratio_min=float(ratio_min), ratio_max=float(ratio_max), head_order=head_order)
