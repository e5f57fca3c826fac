"""Contextual position encoding, CoPE (Golovneva et al., 2024)."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from poscli.attention.data_dependent import reverse_cumsum, scanned_causal_attention, trains_at_once, visible
from poscli.attention.nearest_first import cope_attention
from poscli.encodings import register
from poscli.encodings.base import PositionalEncoding
from poscli.errors import PoscliError

MAX_POSITIONS = 2**20  # an embedding row per contextual position: 1M rows is already past any length scored


@dataclass(frozen=True)
class CopeOptions:
    """Args:
    max_positions: the contextual positions with an embedding, 0 .. max_positions-1; a larger
        position is clamped to the last (the paper's p_max).
    """

    max_positions: int = 64

    def __post_init__(self) -> None:
        if not 2 <= self.max_positions <= MAX_POSITIONS:
            raise PoscliError(
                f"--pe-option max_positions must be from 2 to {MAX_POSITIONS} (a contextual position never exceeds the "
                f"sequence length; the default is 64), got {self.max_positions}"
            )


@register("cope")
class CoPE(PositionalEncoding):
    """Positions counted by the context ("Contextual Position Encoding: Learning to Count What's
    Important", Golovneva et al., 2024, eq. 3-5 and appendix B): query i gates every key it sees,
    g_ij = sigmoid(z_ij) with z_ij = q_i . k_j / sqrt(hd), and key j's position is the sum of the
    gates from j to i, p_ij = sum over t in [j, i] of g_it, a fraction. The score gains q_i . e[p_ij],
    interpolated between the learned embeddings of floor(p) and ceil(p):

        z'_ij = z_ij + (p - floor p) q_i . e[ceil p] + (ceil p - p) q_i . e[floor p].

    As in the paper's code (and x-transformers' ``CoPE``), the gates read the scaled scores and the
    position term is the unscaled q . e. Each layer has its own embeddings, initialised to zero, so
    training starts as NoPE. In training, up to ``SCAN_KEYS`` tokens, all keys at once with a
    hand-written backward (``cope_attention``); otherwise keys go in chunks from the nearest back
    (``scanned_causal_attention``), the gates of the nearer chunks carried, under one softmax across
    chunks.
    """

    citation = "Golovneva et al., 2024"
    summary = "fractional positions counted by sigmoid gates on q.k, indexing interpolated embeddings"
    Options = CopeOptions
    replaces_attention = True
    reads_positions = False  # the positions come from the gates, not from token positions
    separable_positions = False

    def __init__(self, config):
        super().__init__(config)
        shape = (self.options.max_positions, config.head_dim)
        self.embeddings = nn.ParameterList(nn.Parameter(torch.zeros(shape)) for _ in range(config.n_layer))

    def attend(self, x: Tensor, q: Tensor, k: Tensor, v: Tensor, positions: Tensor, layer: int) -> Tensor:
        embeddings = self.embeddings[layer]
        if trains_at_once(q, k, v, embeddings):
            return cope_attention(q, k, v, embeddings)  # (B, H, T, hd)

        def chunk_logits(q_block: Tensor, scores: Tensor, rows: Tensor, keys: Tensor, gates_nearer: Tensor):
            seen = visible(rows, keys)  # (Bq, Kc)
            gates = scores.sigmoid().masked_fill(~seen, 0.0)  # g_ij, (B, H, Bq, Kc)
            position = reverse_cumsum(gates) + gates_nearer[..., None]  # p_ij: the gates from j to i
            logits = scores + self.position_logits(q_block, position, embeddings)  # (B, H, Bq, Kc)
            return logits.masked_fill(~seen, float("-inf")), gates_nearer + gates.sum(dim=-1)

        def clamped_beyond(q_block: Tensor, gates_nearer: Tensor) -> Tensor | None:
            """Once every row's gates summed over the nearer keys reach the last position, each farther
            key's position is clamped there: its logit is its score plus q_i . e[P - 1]. -> (B, H, Bq)."""
            if gates_nearer.min() < self.options.max_positions - 1:
                return None
            return q_block @ embeddings[-1].to(q_block.dtype)

        return scanned_causal_attention(
            q, k, v, chunk_logits, normalize=True, row_constant=clamped_beyond
        )  # (B, H, T, hd)

    def position_logits(self, q_block: Tensor, position: Tensor, embeddings: Tensor) -> Tensor:
        """q_i . e[p_ij], interpolated between the whole positions around p_ij (clamped at the last
        embedding): q_block (B, H, Bq, hd), position (B, H, Bq, Kc) -> (B, H, Bq, Kc)."""
        position = position.clamp(max=self.options.max_positions - 1)
        at_position = q_block @ embeddings.to(q_block.dtype).T  # (B, H, Bq, P): q_i . e[p] for every whole p
        low = position.floor()
        fraction = position - low
        low = low.long()
        high = position.ceil().long()
        return at_position.gather(-1, high) * fraction + at_position.gather(-1, low) * (1 - fraction)
