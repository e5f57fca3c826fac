"""Stick-breaking and CoPE attention at training lengths, with hand-written backward passes.

Both encodings weigh a key by what the keys between it and the query did: stick-breaking by the
product of (1 - beta) over them (Tan et al., 2025), CoPE by the sum of the gates from key to query
(Golovneva et al., 2024). Written for autograd, each row's sum from the key to the query is a
reversed cumulative sum (two flips of a T x T tensor and a scan), and autograd keeps every
intermediate for the backward pass. Here the keys are laid out nearest first once (k and v
flipped along the sequence, a T x hd copy), so a row's sum over the nearer keys is a plain
cumulative sum along the row, and the backward pass is written out (the gradient of a cumulative
sum is a cumulative sum the other way). Query rows go in blocks of ``ROW_BLOCK``, each against the
keys it can see only (rows [a, b) against keys 0 .. b - 1), so most of the work above the diagonal
is never done; each block keeps two to five of its (Bq x b) tensors for the backward pass:

- stick-breaking: log A_ij = log sigmoid(z_ij) + sum over nearer keys t of log(1 - sigmoid(z_it)),
  with log(1 - sigmoid(z)) = log sigmoid(z) - z; the gradient of log A with respect to z_ij is
  1 - sigmoid(z_ij) from the first term, and -sigmoid(z_ij) times the summed gradient of every
  farther key's log weight from the second.
- CoPE: p_ij = the gates summed from key j to query i, the position logit interpolated from the
  query's table q_i . e[0 .. P-1] (``CoPE.position_logits``); the gradient reaches the table by a
  scatter onto the two whole positions around p, and the gates through dp = dL (e[ceil p] -
  e[floor p]) . q summed over every farther key.

``tests/encodings/test_recent_encodings.py`` checks both against the paper's formula pair by pair
in float64 and the backward passes with ``torch.autograd.gradcheck``.

Shape legend: B batch, H heads, T sequence length, hd head dimension, P CoPE's positions.
Column c of a block's (Bq x b) tensor is key b - 1 - c.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor

from poscli.attention.data_dependent import scaled_scores, working_dtype

# Query rows per block. A block of rows [a, b) reads keys 0 .. b - 1 only, so blocks skip most of the
# T x T work above the diagonal (5/8 of it at T = 256): smaller blocks skip more, at one more round
# of small operations each.
ROW_BLOCK = 64


def row_blocks(length: int) -> list[tuple[int, int]]:
    """The blocks [a, b) of query rows, ``ROW_BLOCK`` at a time."""
    return [(start, min(start + ROW_BLOCK, length)) for start in range(0, length, ROW_BLOCK)]


def block_mask(start: int, end: int, strict: bool, device: torch.device) -> Tensor:
    """Whether query i in [start, end) reads the key at column c of its block's keys laid out nearest
    first (key end - 1 - c): c >= end - 1 - i (c > end - 1 - i when ``strict``). -> (end - start, end) bool."""
    rows = torch.arange(start, end, device=device)[:, None]
    columns = torch.arange(end, device=device)[None, :]
    return columns > end - 1 - rows if strict else columns >= end - 1 - rows


def flipped(x: Tensor) -> Tensor:
    """x with its sequence dimension reversed: (B, H, T, hd) -> (B, H, T, hd)."""
    return x.flip(2)


def suffix_sums(x: Tensor) -> Tensor:
    """y_r = sum over s >= r of x_s along the last dimension, from the row total (no flips, which
    copy): the row total minus the sum before r. Used for gradients only, where the rounding of the
    difference is relative to the row's total gradient."""
    return x.cumsum(-1).neg_().add_(x.sum(-1, keepdim=True)).add_(x)


class _StickBreaking(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q: Tensor, k: Tensor, v: Tensor, strict: bool) -> Tensor:
        with torch.autocast(q.device.type, enabled=False):
            work, length = working_dtype(q), q.shape[2]
            q, k_near, v_near = q.to(work), flipped(k.to(work)), flipped(v.to(work))
            out, ctx.blocks = [], []
            for start, end in row_blocks(length):
                keys = slice(length - end, length)  # keys end - 1 .. 0, nearest first
                seen = block_mask(start, end, strict, q.device)  # (Bq, end)
                scores = scaled_scores(q[:, :, start:end], k_near, length - end, length)  # z, (B, H, Bq, end)
                log_beta = F.logsigmoid(scores)  # (B, H, Bq, end)
                log_rest = (log_beta - scores).masked_fill_(~seen, 0.0)  # log(1 - beta), 0 where not read
                log_weights = log_beta.add_(log_rest.cumsum(-1)).sub_(log_rest)  # + the nearer keys' log(1 - beta)
                weights = log_weights.exp_().masked_fill_(~seen, 0.0)  # A
                out.append(weights @ v_near[:, :, keys])  # (B, H, Bq, hd)
                ctx.blocks.append((weights, scores.sigmoid_().masked_fill_(~seen, 0.0)))  # A, beta
            ctx.save_for_backward(q, k_near, v_near)
            ctx.dtype = v.dtype
            return torch.cat(out, dim=2).to(v.dtype)  # (B, H, T, hd)

    @staticmethod
    def backward(ctx, d_out: Tensor):
        with torch.autocast(d_out.device.type, enabled=False):
            q, k_near, v_near = ctx.saved_tensors
            d_out, length, scale = d_out.to(q.dtype), q.shape[2], 1.0 / math.sqrt(q.shape[-1])
            d_q, d_k, d_v = torch.zeros_like(q), torch.zeros_like(k_near), torch.zeros_like(v_near)
            for (start, end), (weights, beta) in zip(row_blocks(length), ctx.blocks, strict=True):
                keys, d_block = slice(length - end, length), d_out[:, :, start:end]
                d_log = (d_block @ v_near[:, :, keys].transpose(-1, -2)).mul_(weights)  # dL/d log A, (B, H, Bq, end)
                d_v[:, :, keys] += weights.transpose(-1, -2) @ d_block
                farther = suffix_sums(d_log).sub_(d_log)  # the gradient of every farther key's log weight
                d_scores = d_log.sub_(d_log * beta).sub_(farther.mul_(beta))  # (1 - beta) dlogA - beta sum
                d_q[:, :, start:end] = d_scores @ k_near[:, :, keys] * scale
                d_k[:, :, keys] += d_scores.transpose(-1, -2) @ q[:, :, start:end] * scale
            return d_q.to(ctx.dtype), flipped(d_k).to(ctx.dtype), flipped(d_v).to(ctx.dtype), None


def stick_breaking_attention(q: Tensor, k: Tensor, v: Tensor, strict: bool) -> Tensor:
    """Stick-breaking attention over all T keys at once: q, k, v (B, H, T, hd) -> (B, H, T, hd).
    ``strict``: query i reads keys j < i (the paper's), else j <= i."""
    return _StickBreaking.apply(q, k, v, strict)


class _CoPE(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q: Tensor, k: Tensor, v: Tensor, embeddings: Tensor) -> Tensor:
        with torch.autocast(q.device.type, enabled=False):
            work, length = working_dtype(q), q.shape[2]
            q, k_near, v_near = q.to(work), flipped(k.to(work)), flipped(v.to(work))
            table = q @ embeddings.to(work).T  # q_i . e[p] for every whole p, (B, H, T, P)
            tables = with_steps(table)  # t[p] + i (t[p + 1] - t[p]), (B, H, T, P) complex
            out, ctx.blocks = [], []
            for start, end in row_blocks(length):
                keys = slice(length - end, length)  # keys end - 1 .. 0, nearest first
                seen = block_mask(start, end, False, q.device)  # (Bq, end)
                scores = scaled_scores(q[:, :, start:end], k_near, length - end, length)  # z, (B, H, Bq, end)
                gates = scores.sigmoid().masked_fill_(~seen, 0.0)  # g, (B, H, Bq, end)
                position = gates.cumsum(-1).clamp_(max=table.shape[-1] - 1)  # p: the gates from key to query
                low = position.floor()
                fraction = position.sub_(low)  # p - floor p
                low = low.long()
                picked = tables[:, :, start:end].gather(-1, low)  # t[floor p] + i (t[floor p + 1] - t[floor p])
                logits = scores.add_(picked.real).addcmul_(fraction, picked.imag)
                weights = logits.masked_fill_(~seen, float("-inf")).softmax(-1)  # (B, H, Bq, end)
                out.append(weights @ v_near[:, :, keys])  # (B, H, Bq, hd)
                gate_slope = gates.mul_(1 - gates)  # dg/dz = g (1 - g), 0 where not read
                ctx.blocks.append((weights, gate_slope, low, fraction, picked.imag))
            out = torch.cat(out, dim=2)  # (B, H, T, hd)
            ctx.save_for_backward(q, k_near, v_near, embeddings, out)
            ctx.dtype = v.dtype
            return out.to(v.dtype)

    @staticmethod
    def backward(ctx, d_out: Tensor):
        with torch.autocast(d_out.device.type, enabled=False):
            q, k_near, v_near, embeddings, out = ctx.saved_tensors
            d_out, length, scale = d_out.to(q.dtype), q.shape[2], 1.0 / math.sqrt(q.shape[-1])
            row_term = (d_out * out).sum(-1, keepdim=True)  # D_i, (B, H, T, 1)
            d_scores_q, d_k, d_v = torch.zeros_like(q), torch.zeros_like(k_near), torch.zeros_like(v_near)
            d_table = torch.zeros(*q.shape[:3], embeddings.shape[0], dtype=q.dtype, device=q.device)  # (B, H, T, P)
            d_steps = torch.zeros_like(d_table)
            for (start, end), saved in zip(row_blocks(length), ctx.blocks, strict=True):
                weights, gate_slope, low, fraction, step = saved
                keys, rows, d_block = slice(length - end, length), slice(start, end), d_out[:, :, start:end]
                d_v[:, :, keys] += weights.transpose(-1, -2) @ d_block
                d_logits = (d_block @ v_near[:, :, keys].transpose(-1, -2)).sub_(row_term[:, :, rows]).mul_(weights)
                d_table[:, :, rows].scatter_add_(-1, low, d_logits)
                d_steps[:, :, rows].scatter_add_(-1, low, d_logits * fraction)
                d_gates = suffix_sums(step * d_logits)  # p_r sums the gates of keys r' <= r; 0 past the last step
                d_scores = d_logits.addcmul_(d_gates, gate_slope)
                d_scores_q[:, :, rows] = d_scores @ k_near[:, :, keys] * scale
                d_k[:, :, keys] += d_scores.transpose(-1, -2) @ q[:, :, rows] * scale
            d_table = from_steps(d_table, d_steps)  # (B, H, T, P)
            d_q = d_scores_q + d_table @ embeddings.to(q.dtype)
            d_embeddings = torch.einsum("bhtp,bhtd->pd", d_table, q)  # (P, hd)
            return d_q.to(ctx.dtype), flipped(d_k).to(ctx.dtype), flipped(d_v).to(ctx.dtype), d_embeddings


def with_steps(table: Tensor) -> Tensor:
    """A position table and its steps as one complex table, so one gather reads both: real part
    t[p], imaginary part t[p + 1] - t[p] (0 at the last position, where p is clamped).
    table: (B, H, T, P) real -> (B, H, T, P) complex."""
    steps = F.pad(table.diff(dim=-1), (0, 1))  # (B, H, T, P)
    return torch.view_as_complex(torch.stack((table, steps), dim=-1))


def from_steps(d_table: Tensor, d_steps: Tensor) -> Tensor:
    """The gradient of ``with_steps``'s real table from the gradients of its real and imaginary parts,
    each (B, H, T, P). Modifies and returns ``d_table``."""
    d_table[..., 1:] += d_steps[..., :-1]  # step p is t[p + 1] - t[p]
    d_table[..., :-1] -= d_steps[..., :-1]
    return d_table


def cope_attention(q: Tensor, k: Tensor, v: Tensor, embeddings: Tensor) -> Tensor:
    """CoPE attention over all T keys at once: q, k, v (B, H, T, hd), embeddings (P, hd) -> (B, H, T, hd)."""
    return _CoPE.apply(q, k, v, embeddings)
