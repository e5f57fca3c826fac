"""LM-Infinite: a Lambda-shaped mask (the first tokens and the last L) and every farther distance
capped at L (Han et al., NAACL 2024, arXiv 2308.16137)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from poscli.errors import PoscliError
from poscli.extension.methods import register
from poscli.extension.methods.protocol import MethodOption, RemapMethod
from poscli.extension.remap import Remap, whole


@dataclass(frozen=True)
class LMInfinitePlan(Remap):
    """A query sees the keys fewer than ``window`` (the local branch) back at their distance and the
    first ``sinks`` keys (the global branch) beyond it at the distance ``limit``: the authors' code
    rotates those queries by the limit and leaves those keys unrotated. Everything else is masked."""

    limit: int = 0

    @property
    def far_keys(self) -> int:
        return self.sinks

    def far_positions(self, positions):
        i = positions.to(torch.float64)  # (T,)
        return torch.full_like(i, float(self.limit)), torch.zeros_like(i)

    def describe(self) -> str:
        return f"LM-Infinite {self.sinks} global + {self.window} local, distance cap {self.limit}"


@register("lm-infinite")
class LMInfinite(RemapMethod):
    summary = "LM-Infinite: the first tokens and the last L, farther distances capped at L (no training)"
    citation = "Han et al., 2024 (arXiv 2308.16137)"
    options = {
        "sinks": MethodOption(10.0, "the global branch: the first tokens, always attended", kind=int),
        "window": MethodOption(0.0, "the local branch (0: the train length)", kind=int),
        "limit": MethodOption(0.0, "the distance cap (0: the train length)", kind=int),
    }
    Plan = LMInfinitePlan

    @classmethod
    def search_space(cls, original_length, target):
        return {"sinks": [4.0, 10.0, 32.0], "limit": sorted({float(original_length // 2), float(original_length)})}

    @classmethod
    def plan(cls, original_length: int, target: int, sinks: float = 10.0, window: float = 0.0, limit: float = 0.0):
        """Defaults, the authors' drop-in ``convert_llama_model(model, L, 10)``: 10 global tokens, a
        local branch of L and a distance limit of L."""
        L = original_length
        n_global = whole(sinks, "--sinks", low=0)
        local = whole(window, "--window") if window else L
        cap = whole(limit, "--limit") if limit else L
        if local > L or cap > L:
            raise PoscliError(f"--window {local} and --limit {cap} must be at most the train length {L}")
        return LMInfinitePlan("lm-infinite", local, sinks=n_global, limit=cap)
