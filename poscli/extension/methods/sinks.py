"""StreamingLLM's attention sinks: the first S tokens and the R most recent (Xiao et al., 2024)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from poscli.errors import PoscliError
from poscli.extension.methods import register
from poscli.extension.methods.protocol import MethodOption, RemapMethod
from poscli.extension.remap import Remap, whole


@dataclass(frozen=True)
class SinksPlan(Remap):
    """A cache of S + R slots numbered by position within it: the query in the last slot, recent keys at
    their true distance, sink s at min(i, S + R - 1) - s, everything else evicted. An absolute
    encoding embeds token i at its slot, min(i, S + R - 1)."""

    @property
    def far_keys(self) -> int:
        return self.sinks

    def far_positions(self, positions):
        i = positions.to(torch.float64)  # (T,)
        return i.clamp(max=self.cache_slots - 1), i

    def embed_positions(self, positions):
        return positions.clamp(max=self.cache_slots - 1)

    def describe(self) -> str:
        return f"{self.sinks} sinks + {self.window} recent"


@register("sinks")
class Sinks(RemapMethod):
    summary = "StreamingLLM: the first S tokens (attention sinks) and the R most recent, positions within the cache"
    citation = "Xiao et al., 2024"
    options = {
        "sinks": MethodOption(4.0, "the first tokens, always kept", kind=int),
        "window": MethodOption(0.0, "recent keys kept (0: the train length - sinks)", kind=int),
    }
    any_encoding = True
    Plan = SinksPlan

    @classmethod
    def plan(cls, original_length: int, target: int, sinks: float = 4.0, window: float = 0.0) -> Remap:
        """Defaults: 4 sinks (the paper's) and R = L - S recent keys, a cache of the train length."""
        S = whole(sinks, "--sinks", low=0)
        if original_length <= S:
            raise PoscliError(
                f"--sinks {S} leaves no room for recent tokens in a cache of the train length {original_length}"
            )
        R = whole(window, "--window") if window else original_length - S
        if original_length < S + R:
            raise PoscliError(
                f"--sinks {S} + --window {R} is more than the train length {original_length}: "
                f"the cache would hold positions the model never saw; use --window {original_length - S} or less"
            )
        return SinksPlan("sinks", R, sinks=S)
