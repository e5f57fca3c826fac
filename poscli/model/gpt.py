"""A small decoder-only GPT whose positional encoding is a plugin.

Pre-norm, causal, tied input/output embeddings, GELU MLP, no dropout (nanoGPT's layout).
The model calls the encoding's three hooks (see ``poscli.encodings.base``) and never asks
which encoding it holds.

Shape legend: B batch, T sequence length, C width (d_model), H heads, hd head dimension,
V vocabulary, Bq query rows in one attention block.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from poscli import encodings
from poscli.attention.data_dependent import working_dtype
from poscli.attention.paths import causal_attention
from poscli.attention.remapped import remapped_attention
from poscli.config import AttentionOptions, ModelConfig
from poscli.encodings.base import PositionalEncoding
from poscli.errors import PoscliError

if TYPE_CHECKING:
    from poscli.encodings.base import Remap


class CausalSelfAttention(nn.Module):
    def __init__(self, config: ModelConfig, layer: int, encoding: PositionalEncoding):
        super().__init__()
        self.config, self.layer = config, layer
        self.encoding = [encoding]  # a list, so the shared module is not registered once per layer
        self.query_scale = encoding.query_scaler(layer)
        self.qkv = nn.Linear(config.d_model, 3 * config.d_model, bias=False)
        self.proj = nn.Linear(config.d_model, config.d_model, bias=False)
        # --attention-option switches (poscli.config.AttentionOptions), each with its own parameters
        options = AttentionOptions.parse(config.attention_options)
        H = config.n_head
        self.ssmax = (
            nn.Parameter(torch.full((H,), 1 / math.log(max(config.train_length, 2)))) if options.ssmax else None
        )
        self.sinks = nn.Parameter(torch.zeros(H)) if options.sinks else None
        self.gate = nn.Linear(config.d_model, H) if options.gate else None
        # probe(layer, q, k, positions): called with the scores' q and k, rotated and scaled, before the
        # attention (``poscli inspect`` reads them; ``poscli.evaluation.inspection.probe``). None: nothing is called.
        self.probe: Callable[[int, Tensor, Tensor, Tensor], None] | None = None
        if options.sinks and encoding.replaces_attention:
            raise PoscliError(
                f"--attention-option sinks does not apply to --pe {config.pe}, which computes its own attention; "
                "use ssmax or gate, or another encoding"
            )

    def forward(self, x: Tensor, positions: Tensor, consecutive: bool, remap: Remap | None = None) -> Tensor:
        B, T, C = x.shape
        H, hd = self.config.n_head, self.config.head_dim
        q, k, v = self.qkv(x).split(C, dim=2)  # (B, T, C) each
        q, k, v = (t.view(B, T, H, hd).transpose(1, 2) for t in (q, k, v))  # (B, H, T, hd) each
        encoding = self.encoding[0]
        if remap is not None:
            if self.sinks is not None or self.ssmax is not None:
                raise PoscliError("--attention-option sinks and ssmax do not combine with a remapping extension")
            y = self._remapped(q, k, v, positions, remap)  # (B, H, T, hd)
            return self.proj(self._gated(y, x).transpose(1, 2).contiguous().view(B, T, C))
        q, k = encoding.rotate(q, k, positions, self.layer)
        if self.query_scale is not None:  # an attention temperature (poscli extend --method logn, ...)
            q = q * self.query_scale(positions).to(q.dtype)[:, None]  # (B, H, T, hd) * (T, 1)
        if self.ssmax is not None:  # Scalable-Softmax: query i, seeing n = i + 1 keys, times s_h log n
            log_n = torch.arange(1, T + 1, device=q.device, dtype=working_dtype(q)).log()  # (T,)
            q = q * (self.ssmax[:, None] * log_n[None, :]).to(q.dtype)[None, :, :, None]  # (B, H, T, hd)
        if self.probe is not None:
            self.probe(self.layer, q, k, positions)
        y = causal_attention(
            q, k, v, encoding, positions, self.layer, consecutive, self.config.attention_block, x, sink=self.sinks
        )  # (B, H, T, hd)
        y = self._gated(y, x).transpose(1, 2).contiguous().view(B, T, C)  # (B, T, C)
        return self.proj(y)

    def _gated(self, y: Tensor, x: Tensor) -> Tensor:
        """The head-wise output gate, if on: y_h times sigmoid(w_h . x + b_h). y (B, H, T, hd), x (B, T, C)."""
        if self.gate is None:
            return y
        return y * torch.sigmoid(self.gate(x)).transpose(1, 2)[..., None].to(y.dtype)  # (B, H, T, hd)

    def _remapped(self, q: Tensor, k: Tensor, v: Tensor, positions: Tensor, remap: Remap) -> Tensor:
        """Attention with far keys at remapped positions (``poscli.extension.remap``): the encoding rotates
        q and k at the true positions for the window and at the far positions beyond it, and
        scores its bias at either. q, k, v: (B, H, T, hd) -> (B, H, T, hd)."""
        encoding, layer = self.encoding[0], self.layer
        if getattr(remap, "custom_attention", False):  # dual chunk attention: its own three position sets
            return remap.attend(
                lambda at: encoding.rotate(q, q, at, layer)[0],
                lambda at: encoding.rotate(k, k, at, layer)[1],
                v,
                positions,
                bool((positions.diff() == 1).all()) if len(positions) > 1 else True,
                self.config.attention_block,
            )
        q_near, k_near = encoding.rotate(q, k, positions, layer)
        far_q_positions, far_k_positions = remap.far_positions(positions)  # (T,) each, float64
        q_far = encoding.rotate(q, q, far_q_positions, layer)[0]
        k_far = encoding.rotate(k, k, far_k_positions, layer)[1]
        far_q_positions, far_k_positions = (
            far_q_positions.long(),
            far_k_positions.long(),
        )  # bias encodings: sinks only (whole positions)

        def score_bias(part: str, q_block: Tensor, rows: slice, keys: slice) -> Tensor:
            if part == "near":
                return encoding.score_bias(q_block, positions[rows], positions[keys], layer)
            return encoding.score_bias(q_block, far_q_positions[rows], far_k_positions[keys], layer)

        return remapped_attention(
            q_near,
            k_near,
            q_far,
            k_far,
            v,
            remap.window,
            remap.far_keys,
            positions,
            score_bias if encoding.has_score_bias else None,
            self.config.attention_block,
        )


class Block(nn.Module):
    def __init__(self, config: ModelConfig, layer: int, encoding: PositionalEncoding):
        super().__init__()
        self.norm_attn = nn.LayerNorm(config.d_model)
        self.attn = CausalSelfAttention(config, layer, encoding)
        self.norm_mlp = nn.LayerNorm(config.d_model)
        hidden = config.mlp_ratio * config.d_model
        self.mlp = nn.Sequential(nn.Linear(config.d_model, hidden), nn.GELU(), nn.Linear(hidden, config.d_model))

    def forward(self, x: Tensor, positions: Tensor, consecutive: bool, remap: Remap | None = None) -> Tensor:
        x = x + self.attn(self.norm_attn(x), positions, consecutive, remap)
        return x + self.mlp(self.norm_mlp(x))


class GPT(nn.Module):
    def __init__(self, config: ModelConfig):
        super().__init__()
        # Scores far below a row's maximum make exp() return subnormal floats, and CPU arithmetic
        # on subnormals is ~100x slower (ALiBi at 16k: 2x slower in all). Flushing them to zero
        # changes no result by more than 1e-38. A process-wide setting, made by every GPT.
        torch.set_flush_denormal(True)
        self.config = config
        self.token_embedding = nn.Embedding(config.vocab_size, config.d_model)
        self.encoding = encodings.build(config)
        self.remap = self.encoding.remap()  # Self-Extend, ReRoPE, sinks (poscli extend), or None
        self.blocks = nn.ModuleList(Block(config, layer, self.encoding) for layer in range(config.n_layer))
        self.norm_out = nn.LayerNorm(config.d_model)
        # GPT-2 initialisation for the transformer (std config.init_std, 0.02 by default); each
        # encoding initialises its own parameters.
        std = config.init_std
        nn.init.normal_(self.token_embedding.weight, std=std)
        for module in self.blocks.modules():
            if isinstance(module, nn.Linear):
                nn.init.normal_(module.weight, std=std)
                if module.bias is not None:
                    nn.init.zeros_(module.bias)
        for block in self.blocks:  # residual projections scaled by 1/sqrt(2 * n_layer)
            nn.init.normal_(block.attn.proj.weight, std=std / math.sqrt(2 * config.n_layer))
            nn.init.normal_(block.mlp[2].weight, std=std / math.sqrt(2 * config.n_layer))

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def forward(self, tokens: Tensor, positions: Tensor | None = None) -> Tensor:
        """tokens: (B, T) byte ids -> logits (B, T, V). ``positions``: (T,) for every sequence,
        defaulting to 0..T-1, or (B, T), one row per sequence (randomized positions, Ruoss et al.,
        2023): the whole batch at once where the encoding's hooks take rows of positions
        (``batched_positions``) and nothing else reads them, else each sequence on its own."""
        B, T = tokens.shape
        if positions is not None and positions.dim() == 2 and not self._batches_position_rows():
            return torch.cat([self(tokens[row : row + 1], positions[row]) for row in range(B)])  # (B, T, V)
        consecutive = positions is None or T < 2 or bool((positions.diff(dim=-1) == 1).all())  # fast paths need i - j
        if positions is None:
            positions = torch.arange(T, device=tokens.device)  # (T,)
        x = self.token_embedding(tokens)  # (B, T, C)
        x = self.encoding.embed(
            x, positions if self.remap is None else self.remap.embed_positions(positions)
        )  # (B, T, C)
        for block in self.blocks:
            x = block(x, positions, consecutive, self.remap)
        x = self.norm_out(x)
        return x @ self.token_embedding.weight.T  # (B, T, V), tied output embedding

    def _batches_position_rows(self) -> bool:
        """True when (B, T) positions reach only the encoding's embed and rotate, which take them:
        no remapping, query temperature or sink logits, which read one row of positions."""
        sinks = any(block.attn.sinks is not None for block in self.blocks)
        return self.encoding.batched_positions and self.remap is None and not self.config.query_scaling and not sinks

    def loss(
        self, tokens: Tensor, targets: Tensor, positions: Tensor | None = None, weights: Tensor | None = None
    ) -> Tensor:
        """Mean next-token cross-entropy in nats. tokens, targets: (B, T). ``weights`` (B, T), if
        given, weigh each target's loss (the mean is still over all B * T targets)."""
        logits = self(tokens, positions)  # (B, T, V)
        if weights is None:
            return F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten())
        losses = F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten(), reduction="none")  # (B * T,)
        return (losses * weights.flatten()).mean()
