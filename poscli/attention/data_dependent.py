"""Attention for encodings whose scores depend on the data, not only on positions.

Three forms, one function each:

- ``key_column_attention``: softmax(q.k / sqrt(hd) + c_j) where c depends on the key alone. The
  Forgetting Transformer's bias F_i - F_j (F a running sum of log forget gates) is such a term once
  the row constant F_i is dropped (softmax ignores it), so it rides the fused kernel as one more
  head dimension, as ALiBi's slopes do (``poscli.attention.blockwise``): q' = [q, 1],
  k' = [k, c_j sqrt(hd)], v' = [v, 0], with the kernel's scale kept at 1 / sqrt(hd). Memory linear
  in T on every device that has a fused kernel.
- ``rowwise_causal_attention``: any attention whose weights for a query row are a function of that
  row's scores (CoPE's gated positions, stick-breaking's products), computed one block of query
  rows at a time against the keys they can see, so memory stays bounded at any length.

Shape legend: B batch, H heads, T sequence length, hd head dimension, Bq query rows in a block,
Tk keys a block sees.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor

from poscli.attention.blockwise import RowBlocks

# Upper bound on the elements of one block of scores (B * H * Bq * Tk): 2^24 float32 values = 64 MiB.
ROW_BLOCK_ELEMENTS = 2**24


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


def rowwise_causal_attention(
    q: Tensor, k: Tensor, v: Tensor, weights: Callable[[Tensor, Tensor, Tensor], Tensor], block: int = 256
) -> Tensor:
    """Causal attention whose weights come from ``weights(q_block, scores, rows)``, one block of
    query rows at a time.

    For the block of queries [a, b): ``scores`` (B, H, Bq, b) is q k^T / sqrt(hd) in float32
    (float64 for float64 inputs) against the keys 0 .. b-1, and ``rows`` (Bq,) the queries'
    indices a .. b-1 (``visible`` gives the causal mask). ``weights`` returns the attention
    weights (B, H, Bq, b), zero on every key j > i; they are applied to v in the same dtype.
    q, k, v: (B, H, T, hd) -> (B, H, T, hd).
    """
    B, H, T, hd = q.shape
    block = max(16, min(block, ROW_BLOCK_ELEMENTS // max(1, B * H * T)))
    scale = 1.0 / math.sqrt(hd)
    work = working_dtype(q)
    k32, v32 = k.to(work), v.to(work)
    outputs = RowBlocks((B, H, T, v.shape[-1]), v32)  # written block by block (no_grad) or concatenated
    for start in range(0, T, block):
        end = min(start + block, T)
        q_block = q[:, :, start:end].to(work)  # (B, H, Bq, hd)
        scores = q_block @ k32[:, :, :end].transpose(-1, -2) * scale  # (B, H, Bq, end)
        rows = torch.arange(start, end, device=q.device)  # (Bq,)
        outputs.add(start, end, weights(q_block, scores, rows) @ v32[:, :, :end])  # (B, H, Bq, hd)
    return outputs.result().to(q.dtype)  # (B, H, T, hd)


def working_dtype(x: Tensor) -> torch.dtype:
    """float32, or float64 for float64 inputs (the formula tests)."""
    return torch.float64 if x.dtype == torch.float64 else torch.float32


def visible(rows: Tensor, keys: int, strict: bool = False) -> Tensor:
    """The causal mask of query ``rows`` (Bq,) over keys 0 .. keys-1: True where j <= i (j < i when
    ``strict``). -> (Bq, keys) bool."""
    j = torch.arange(keys, device=rows.device)[None, :]  # (1, keys)
    return j < rows[:, None] if strict else j <= rows[:, None]


def reverse_cumsum(x: Tensor) -> Tensor:
    """Sum over the last dimension from each element to the end: y_j = sum_{t >= j} x_t."""
    return x.flip(-1).cumsum(-1).flip(-1)
