"""Leaky ReRoPE: distances beyond a window w grow with slope 1/k (Su, 2023)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from poscli.errors import PoscliError
from poscli.extension.methods import register
from poscli.extension.methods.protocol import MethodOption, RemapMethod
from poscli.extension.remap import Remap, neighbour_window


@dataclass(frozen=True)
class LeakyReRoPEPlan(Remap):
    """Query at w + (i - w) / k, far key at j / k: a distance d beyond the window becomes w + (d - w) / k."""

    def far_positions(self, positions):
        i = positions.to(torch.float64)  # (T,)
        return self.window + (i - self.window) / self.leak, i / self.leak

    def describe(self) -> str:
        return f"Leaky ReRoPE w={self.window}, k={self.leak:g}"


@register("leaky-rerope")
class LeakyReRoPE(RemapMethod):
    summary = "Leaky ReRoPE: distances beyond a window w grow with slope 1/k (no training)"
    citation = "Su, 2023"
    options = {
        "window": MethodOption(0.0, "the neighbour window (0: the train length / 4)", kind=int),
        "leak": MethodOption(0.0, "slope 1/K beyond the window (0: the target maps to the train length)"),
    }
    Plan = LeakyReRoPEPlan

    @classmethod
    def plan(cls, original_length: int, target: int, window: float = 0.0, leak: float = 0.0) -> Remap:
        """Defaults: w = L / 4 and k such that the target's longest distance maps to L - 1:
        w + (target - 1 - w) / k = L - 1."""
        w = neighbour_window(window, original_length, max(1, original_length // 4))
        if leak and leak < 1:
            raise PoscliError(f"--leak must be at least 1, got {leak:g}")
        k = leak or max(1.0, (target - 1 - w) / (original_length - 1 - w))
        return LeakyReRoPEPlan("leaky-rerope", w, leak=float(k))
