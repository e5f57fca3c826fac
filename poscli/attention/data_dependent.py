"""Attention for encodings whose scores depend on the data, not only on positions.

Two forms, one function each, and the helpers they share:

- ``key_column_attention``: softmax(q.k / sqrt(hd) + c_j) where c depends on the key alone. The
  Forgetting Transformer's bias F_i - F_j (F a running sum of log forget gates) is such a term once
  the row constant F_i is dropped (softmax ignores it), so it rides the fused kernel as one more
  head dimension, as ALiBi's slopes do (``poscli.attention.blockwise``): q' = [q, 1],
  k' = [k, c_j sqrt(hd)], v' = [v, 0], with the kernel's scale kept at 1 / sqrt(hd). Memory linear
  in T on every device that has a fused kernel.
- ``scanned_causal_attention``: any attention whose weights for a query row depend on the row's
  scores against the keys between key and query (CoPE's gated positions, stick-breaking's
  products), computed for one block of query rows at a time over fixed-size chunks of keys, from
  the nearest back, with what the nearer chunks summed carried along: the same allocations at
  every step, so the peak memory does not grow with T.

Shape legend: B batch, H heads, T sequence length, hd head dimension, Bq query rows in a block,
Kc keys in a chunk.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor

from poscli.attention.fallback import RowBlocks

# The query rows of a block and the keys of a chunk in ``scanned_causal_attention``: each step's
# scores are (B, H, SCAN_ROWS, SCAN_KEYS), 4 MiB of float32 per head at batch 1, at any length.
SCAN_ROWS = 256
SCAN_KEYS = 1024


def key_column_attention(q: Tensor, k: Tensor, v: Tensor, column: Tensor) -> Tensor:
    """Causal softmax(q k^T / sqrt(hd) + column[..., None, :]) v through the fused kernel.

    q, k, v: (B, H, T, hd); column: (B, H, T), the key-side bias c_j. Computed in float32 whatever
    the dtype (a column that grows with T, as a running sum of log gates does, would lose its
    small differences in bfloat16), then cast back. Gradients reach ``column``. -> (B, H, T, hd).
    """
    dtype, hd = q.dtype, q.shape[-1]
    work = working_dtype(q)
    q32, k32, v32 = q.to(work), k.to(work), v.to(work)
    q_ext = F.pad(q32, (0, 1), value=1.0)  # (B, H, T, hd + 1)
    k_ext = torch.cat((k32, column.to(work)[..., None] * math.sqrt(hd)), dim=-1)  # (B, H, T, hd + 1)
    v_ext = F.pad(v32, (0, 1))  # (B, H, T, hd + 1): the extra column of the output is 0
    out = F.scaled_dot_product_attention(q_ext, k_ext, v_ext, is_causal=True, scale=1.0 / math.sqrt(hd))
    return out[..., :hd].to(dtype)  # (B, H, T, hd)


def scanned_causal_attention(q: Tensor, k: Tensor, v: Tensor, chunk_logits: Callable, normalize: bool) -> Tensor:
    """Causal attention whose weights for a query depend on its scores against the keys between
    (CoPE's gates summed from key to query, stick-breaking's product of what the nearer keys
    left), computed for one block of query rows at a time over the keys in fixed-size chunks,
    from the nearest back to the first, so that every step allocates the same (B, H, Bq, chunk)
    temporaries whatever T is (a block against all of its keys at once grows them with T, and
    glibc's heap with them).

    ``chunk_logits(q_block, scores, rows, keys, carry)`` gets a chunk's scores q k^T / sqrt(hd)
    (B, H, Bq, Kc) in float32 (float64 for float64 inputs), the indices of its query ``rows``
    (Bq,) and ``keys`` (Kc,) (``visible`` makes the causal mask from them), and ``carry``
    (B, H, Bq): what the nearer chunks summed for each row, zeros at the first; it returns the
    chunk's log weights (B, H, Bq, Kc), -inf where a key is not read, and the carry for the next
    (farther) chunk. ``normalize``: softmax the log weights over
    all of a row's keys (CoPE; an online log-sum-exp across chunks, as FlashAttention merges
    blocks), or use them as they are (stick-breaking's weights sum to at most 1). A block whose keys
    all fit in one chunk (every block at training lengths up to ``SCAN_KEYS``) is one step, its
    weights a plain softmax (1.14x the training speed of the online merge for CoPE at 128 tokens).
    q, k, v: (B, H, T, hd) -> (B, H, T, hd).
    """
    B, H, T, hd = q.shape
    rows_per_block, keys_per_chunk = SCAN_ROWS, max(SCAN_KEYS, SCAN_ROWS)  # a chunk covers a block's diagonal
    work = working_dtype(q)
    k32, v32 = k.to(work), v.to(work)
    outputs = RowBlocks((B, H, T, v.shape[-1]), v32)
    for start in range(0, T, rows_per_block):
        end = min(start + rows_per_block, T)
        q_block = q[:, :, start:end].to(work)  # (B, H, Bq, hd)
        rows = torch.arange(start, end, device=q.device)  # (Bq,)
        carry = q_block.new_zeros(B, H, end - start)
        if end <= keys_per_chunk:  # one chunk holds every key the block sees (training lengths): no carry to merge
            keys = torch.arange(end, device=q.device)  # (end,)
            log_weights, _ = chunk_logits(q_block, scaled_scores(q_block, k32, 0, end), rows, keys, carry)
            weights = log_weights.softmax(dim=-1) if normalize else log_weights.exp()
            outputs.add(start, end, weights @ v32[:, :, :end])  # (B, H, Bq, hd)
            continue
        total = q_block.new_zeros(B, H, end - start, v.shape[-1])  # sum of weights x values
        top = q_block.new_full((B, H, end - start), float("-inf"))  # running max of the log weights
        mass = q_block.new_zeros(B, H, end - start)  # sum of exp(log weight - top)
        for high in range(end, 0, -keys_per_chunk):  # chunks [high - Kc, high), the nearest first
            low = max(0, high - keys_per_chunk)
            keys = torch.arange(low, high, device=q.device)  # (Kc,)
            log_weights, carry = chunk_logits(q_block, scaled_scores(q_block, k32, low, high), rows, keys, carry)
            if not normalize:
                total = total + log_weights.exp() @ v32[:, :, low:high]
                continue
            new_top = torch.maximum(top, log_weights.amax(dim=-1))  # finite: the first chunk holds each row's own key
            shrink = (top - new_top).exp()  # (B, H, Bq); 0 at the first chunk
            share = (log_weights - new_top[..., None]).exp()  # (B, H, Bq, Kc)
            mass = mass * shrink + share.sum(dim=-1)
            total = total * shrink[..., None] + share @ v32[:, :, low:high]
            top = new_top
        outputs.add(start, end, total / mass[..., None] if normalize else total)  # (B, H, Bq, hd)
    return outputs.result().to(q.dtype)  # (B, H, T, hd)


def scaled_scores(q_block: Tensor, k: Tensor, low: int, high: int) -> Tensor:
    """q k^T / sqrt(hd) of a block of queries against keys [low, high) of k.
    q_block: (B, H, Bq, hd), k: (B, H, T, hd) -> (B, H, Bq, high - low)."""
    return q_block @ k[:, :, low:high].transpose(-1, -2) * (1.0 / math.sqrt(q_block.shape[-1]))


def working_dtype(x: Tensor) -> torch.dtype:
    """float32, or float64 for float64 inputs (the formula tests)."""
    return torch.float64 if x.dtype == torch.float64 else torch.float32


def visible(rows: Tensor, keys: Tensor, strict: bool = False) -> Tensor:
    """The causal mask of query ``rows`` (Bq,) over ``keys`` (Kc,), both token indices: True where
    j <= i (j < i when ``strict``). -> (Bq, Kc) bool."""
    return keys[None, :] < rows[:, None] if strict else keys[None, :] <= rows[:, None]


def reverse_cumsum(x: Tensor) -> Tensor:
    """Sum over the last dimension from each element to the end: y_j = sum_{t >= j} x_t."""
    return x.flip(-1).cumsum(-1).flip(-1)
