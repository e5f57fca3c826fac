"""STRING: the rarely trained largest distances replaced by shifted well-trained ones, with a small
local window kept apart (An et al., 2025, "Why Does the Effective Context Length of LLMs Fall
Short?", arXiv 2410.18745)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from poscli.errors import PoscliError
from poscli.extension.methods import register
from poscli.extension.methods.protocol import MethodOption, RemapMethod
from poscli.extension.remap import Remap, whole


@dataclass(frozen=True)
class StringPlan(Remap):
    """Shift S (``window``) and local window W (``local``): a distance d < S is kept, a distance
    d >= S becomes d - S + W, so the S largest distances are never used and the nearest W keep
    positions no shifted key takes. Query at i - S + W, key at j."""

    local: int = 0

    def far_positions(self, positions):
        i = positions.to(torch.float64)  # (T,)
        return i - self.window + self.local, i

    def describe(self) -> str:
        return f"STRING S={self.window}, W={self.local}"


@register("string")
class String(RemapMethod):
    summary = "STRING: distances d >= S shifted to d - S + W, reusing well-trained positions (no training)"
    citation = "An et al., 2025 (arXiv 2410.18745)"
    options = {
        "shift": MethodOption(
            0.0, "distances from S on are shifted back by S - W (0: 0.33 x the train length)", kind=int
        ),
        "local": MethodOption(0.0, "the local window W kept apart (0: the train length / 32)", kind=int),
    }
    Plan = StringPlan

    @classmethod
    def search_space(cls, original_length, target):
        L = original_length
        local = sorted({float(max(1, L // 64)), float(max(1, L // 32)), float(max(1, L // 16))})
        return {
            "shift": sorted({float(int(f * L)) for f in (0.2, 0.33, 0.5) if int(f * L) > local[-1]}),
            "local": local,
        }

    @classmethod
    def plan(cls, original_length: int, target: int, shift: float = 0.0, local: float = 0.0) -> Remap:
        """Defaults: W = L / 32 (the paper's 128 is for L = 128k) and S = 0.33 L, the paper's, or
        target - L + W if larger, so the farthest distance at the target, target - 1 - S + W, is one
        training saw (while S < L allows: beyond a target of about 2L it is not)."""
        L = original_length
        W = whole(local, "--local") if local else max(1, L // 32)
        if shift:
            S = whole(shift, "--shift")
        else:
            S = min(L - 1, max(int(0.33 * L), target - L + W))
        if not W < S <= L:
            raise PoscliError(
                f"--shift {S} must be more than --local {W} and at most the train length {L} (defaults: "
                f"--shift {int(0.33 * L)}, --local {max(1, L // 32)})"
            )
        return StringPlan("string", S, local=W)
