"""Self-Extend: exact attention in a neighbour window, grouped positions beyond it (Jin et al., 2024)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from poscli.extension.methods import register
from poscli.extension.methods.protocol import MethodOption, RemapMethod
from poscli.extension.remap import Remap, neighbour_window, neighbour_windows, whole


@dataclass(frozen=True)
class SelfExtendPlan(Remap):
    """Far distance i // G - j // G + W - W // G: grouped positions, shifted to continue the window."""

    def far_positions(self, positions):
        grouped = torch.div(positions, self.group, rounding_mode="floor").double()  # (T,)
        return grouped + (self.window - self.window // self.group), grouped

    def describe(self) -> str:
        return f"Self-Extend W={self.window}, G={self.group}"


@register("self-extend")
class SelfExtend(RemapMethod):
    summary = "Self-Extend: exact attention in a neighbour window, grouped positions beyond it (no training)"
    citation = "Jin et al., 2024"
    options = {
        "window": MethodOption(0.0, "the neighbour window (0: the train length / 4)", kind=int),
        "group": MethodOption(0.0, "the group size (0: the smallest that reaches the target)", kind=int),
    }
    Plan = SelfExtendPlan

    @classmethod
    def search_space(cls, original_length, target):
        """Windows of L/8 to L/2, and groups from the smallest that reaches the target up: LongLM's own
        advice is to try several (its issues 10 and 28)."""
        smallest = cls.plan(original_length, target).group
        return {
            "window": neighbour_windows(original_length),
            "group": sorted({float(smallest), float(smallest + 1), float(2 * smallest)}),
        }

    @classmethod
    def plan(cls, original_length: int, target: int, window: float = 0.0, group: float = 0.0) -> Remap:
        """Defaults: W = L / 4 and the smallest G whose farthest distance at the target,
        (target - 1) // G + W - W // G, is one the model was trained on (< L): the paper's reach
        (L - W) G + W made exact."""
        W = neighbour_window(window, original_length, max(1, original_length // 4))
        if group:
            return SelfExtendPlan("self-extend", W, group=whole(group, "--group"))
        G = max(1, math.ceil((target - W) / (original_length - W)))
        while (target - 1) // G + W - W // G > original_length - 1:
            G += 1
        return SelfExtendPlan("self-extend", W, group=G)
