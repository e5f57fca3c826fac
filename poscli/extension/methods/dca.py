"""Dual chunk attention (DCA, ChunkLlama): intra-chunk, successive-chunk and inter-chunk position
indices that keep every relative position inside the pretraining window (An et al., ICML 2024,
"Training-Free Long-Context Scaling of Large Language Models", arXiv 2402.17463)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from poscli.attention.remapped import dual_chunk_attention
from poscli.errors import PoscliError
from poscli.extension.methods import register
from poscli.extension.methods.protocol import MethodOption, RemapMethod
from poscli.extension.remap import Remap, whole


@dataclass(frozen=True)
class DCAPlan(Remap):
    """Chunks of s tokens (``window``) in a model trained at c (``limit``). Every key sits at j mod s;
    a query i sits at i mod s for keys in its own chunk (the true distance), at min(s + i mod s, c - 1)
    for the previous chunk, and at c - 1 for every chunk before: no distance reaches c."""

    limit: int = 0
    custom_attention = True

    def far_positions(self, positions):
        raise PoscliError("dual chunk attention scores by chunks, not beyond a window")

    def query_positions(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(intra, successive, inter) positions of each query, and the keys at ``key_positions``. (T,) each."""
        s, c = self.window, self.limit
        inner = positions.to(torch.float64) % s  # (T,)
        return inner, (inner + s).clamp(max=c - 1), torch.full_like(inner, c - 1.0)

    def key_positions(self, positions: torch.Tensor) -> torch.Tensor:
        return positions.to(torch.float64) % self.window

    def attend(self, rotate_q, rotate_k, v, positions, consecutive: bool, max_block: int):
        """rotate_q(positions) / rotate_k(positions): the encoding's rotation of this layer's queries
        / keys at per-token positions (T,). -> (B, H, T, hd)."""
        if not consecutive or (len(positions) and int(positions[0]) % self.window):
            raise PoscliError("--method dca needs the positions 0, 1, 2, ... of a plain forward pass")
        intra, successive, inter = (rotate_q(p) for p in self.query_positions(positions))
        return dual_chunk_attention(intra, successive, inter, rotate_k(self.key_positions(positions)), v,
                                    self.window, max_block)  # fmt: skip

    def describe(self) -> str:
        return f"DCA chunks of {self.window} (trained at {self.limit})"


@register("dca")
class DCA(RemapMethod):
    summary = "dual chunk attention: intra-, successive- and inter-chunk positions, all within the train length"
    citation = "An et al., 2024 (arXiv 2402.17463)"
    options = {"chunk": MethodOption(0.0, "the chunk size s (0: 3/4 of the train length)", kind=int)}
    Plan = DCAPlan

    @classmethod
    def search_space(cls, original_length, target):
        return {"chunk": sorted({float(max(1, int(f * original_length))) for f in (0.5, 0.625, 0.75, 0.875)})}

    @classmethod
    def plan(cls, original_length: int, target: int, chunk: float = 0.0) -> Remap:
        """Default chunk s = 3/4 of the train length, ChunkLlama's; the local window c - s is the rest."""
        s = whole(chunk, "--chunk") if chunk else max(1, 3 * original_length // 4)
        if s >= original_length:
            raise PoscliError(f"--chunk {s} must be shorter than the run's train length {original_length}")
        return DCAPlan("dca", s, limit=original_length)
