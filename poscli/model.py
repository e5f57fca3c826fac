"""A small decoder-only GPT whose positional encoding is a plugin.

Pre-norm, causal, tied input/output embeddings, GELU MLP, no dropout (nanoGPT's layout).
The model calls the encoding's three hooks (see ``poscli.encodings.base``) and never asks
which encoding it holds.

Shape legend: B batch, T sequence length, C width (d_model), H heads, hd head dimension,
V vocabulary, Bq query rows in one attention block.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from poscli import encodings
from poscli.config import ModelConfig
from poscli.encodings.base import PositionalEncoding

# Upper bound on the elements of one materialised score-bias block (B * H * Bq * Tk):
# 2^25 float32 values = 128 MiB, so memory stays bounded however long the sequence is.
BIAS_BLOCK_ELEMENTS = 2**25


def biased_causal_attention(
    q: Tensor, k: Tensor, v: Tensor, encoding: PositionalEncoding, positions: Tensor, layer: int, max_block: int
) -> Tensor:
    """Causal attention with the encoding's score bias, computed one block of queries at a time.

    A dense T x T bias per head would need 1 GiB per head at 16k tokens; here each block of Bq
    queries builds its bias only against the keys it can see (0 .. end of the block), so the
    part the causal mask removes is never built. q, k, v: (B, H, T, hd) -> (B, H, T, hd).
    """
    B, H, T, hd = q.shape
    block = max(16, min(max_block, BIAS_BLOCK_ELEMENTS // (B * H * T)))
    outputs = []
    for start in range(0, T, block):
        end = min(start + block, T)
        q_block = q[:, :, start:end]  # (B, H, Bq, hd)
        bias = encoding.score_bias(q_block, positions[start:end], positions[:end], layer)  # (H, Bq, end) or (B, H, Bq, end)
        if bias.dim() == 3:
            bias = bias.unsqueeze(0)  # (1, H, Bq, end): a 3-D mask sends SDPA down a path ~8x slower on CPU
        hidden = torch.ones(end - start, end, dtype=torch.bool, device=q.device).triu(diagonal=start + 1)  # (Bq, end)
        mask = bias.masked_fill(hidden, float("-inf"))  # (B or 1, H, Bq, end)
        outputs.append(F.scaled_dot_product_attention(q_block, k[:, :, :end], v[:, :, :end], attn_mask=mask))
    return torch.cat(outputs, dim=2)  # (B, H, T, hd)


class CausalSelfAttention(nn.Module):
    def __init__(self, config: ModelConfig, layer: int, encoding: PositionalEncoding):
        super().__init__()
        self.config, self.layer = config, layer
        self.encoding = [encoding]  # a list, so the shared module is not registered once per layer
        self.qkv = nn.Linear(config.d_model, 3 * config.d_model, bias=False)
        self.proj = nn.Linear(config.d_model, config.d_model, bias=False)

    def forward(self, x: Tensor, positions: Tensor) -> Tensor:
        B, T, C = x.shape
        H, hd = self.config.n_head, self.config.head_dim
        q, k, v = self.qkv(x).split(C, dim=2)  # (B, T, C) each
        q, k, v = (t.view(B, T, H, hd).transpose(1, 2) for t in (q, k, v))  # (B, H, T, hd) each
        encoding = self.encoding[0]
        q, k = encoding.rotate(q, k, positions, self.layer)
        if encoding.has_score_bias:
            y = biased_causal_attention(q, k, v, encoding, positions, self.layer, self.config.attention_block)
        else:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # (B, H, T, hd), fused kernel
        y = y.transpose(1, 2).contiguous().view(B, T, C)  # (B, T, C)
        return self.proj(y)


class Block(nn.Module):
    def __init__(self, config: ModelConfig, layer: int, encoding: PositionalEncoding):
        super().__init__()
        self.norm_attn = nn.LayerNorm(config.d_model)
        self.attn = CausalSelfAttention(config, layer, encoding)
        self.norm_mlp = nn.LayerNorm(config.d_model)
        hidden = config.mlp_ratio * config.d_model
        self.mlp = nn.Sequential(nn.Linear(config.d_model, hidden), nn.GELU(), nn.Linear(hidden, config.d_model))

    def forward(self, x: Tensor, positions: Tensor) -> Tensor:
        x = x + self.attn(self.norm_attn(x), positions)
        return x + self.mlp(self.norm_mlp(x))


class GPT(nn.Module):
    def __init__(self, config: ModelConfig):
        super().__init__()
        self.config = config
        self.token_embedding = nn.Embedding(config.vocab_size, config.d_model)
        self.encoding = encodings.build(config)
        self.blocks = nn.ModuleList(Block(config, layer, self.encoding) for layer in range(config.n_layer))
        self.norm_out = nn.LayerNorm(config.d_model)
        # GPT-2 initialisation for the transformer; each encoding initialises its own parameters.
        nn.init.normal_(self.token_embedding.weight, std=0.02)
        for module in self.blocks.modules():
            if isinstance(module, nn.Linear):
                nn.init.normal_(module.weight, std=0.02)
                if module.bias is not None:
                    nn.init.zeros_(module.bias)
        for block in self.blocks:  # residual projections scaled by 1/sqrt(2 * n_layer)
            nn.init.normal_(block.attn.proj.weight, std=0.02 / math.sqrt(2 * config.n_layer))
            nn.init.normal_(block.mlp[2].weight, std=0.02 / math.sqrt(2 * config.n_layer))

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def forward(self, tokens: Tensor, positions: Tensor | None = None) -> Tensor:
        """tokens: (B, T) byte ids -> logits (B, T, V). ``positions`` defaults to 0..T-1."""
        B, T = tokens.shape
        if positions is None:
            positions = torch.arange(T, device=tokens.device)  # (T,)
        x = self.token_embedding(tokens)  # (B, T, C)
        x = self.encoding.embed(x, positions)  # (B, T, C)
        for block in self.blocks:
            x = block(x, positions)
        x = self.norm_out(x)
        return x @ self.token_embedding.weight.T  # (B, T, V), tied output embedding

    def loss(self, tokens: Tensor, targets: Tensor, positions: Tensor | None = None) -> Tensor:
        """Mean next-token cross-entropy in nats. tokens, targets: (B, T)."""
        logits = self(tokens, positions)  # (B, T, V)
        return F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten())
