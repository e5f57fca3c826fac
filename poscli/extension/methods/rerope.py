"""ReRoPE: distances clipped at a window w (Su, 2023)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from poscli.extension.methods import register
from poscli.extension.methods.protocol import MethodOption, RemapMethod
from poscli.extension.remap import Remap, neighbour_window, neighbour_windows


@dataclass(frozen=True)
class ReRoPEPlan(Remap):
    """Every query at w, every far key at 0: each distance beyond the window is w."""

    def far_positions(self, positions):
        i = positions.to(torch.float64)  # (T,)
        return torch.full_like(i, float(self.window)), torch.zeros_like(i)

    def describe(self) -> str:
        return f"ReRoPE w={self.window}"


@register("rerope")
class ReRoPE(RemapMethod):
    summary = "ReRoPE: distances clipped at a window w (no training)"
    citation = "Su, 2023"
    options = {"window": MethodOption(0.0, "the neighbour window (0: the train length / 4)", kind=int)}
    Plan = ReRoPEPlan

    @classmethod
    def search_space(cls, original_length, target):
        return {"window": neighbour_windows(original_length)}

    @classmethod
    def plan(cls, original_length: int, target: int, window: float = 0.0) -> Remap:
        """Default w = L / 4, as Su's w = 1024 for LLaMA-2's 4096."""
        return ReRoPEPlan("rerope", neighbour_window(window, original_length, max(1, original_length // 4)))
