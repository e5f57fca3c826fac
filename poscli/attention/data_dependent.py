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

from poscli.attention.blockwise import fast_path_available, flash
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


def scanned_causal_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    chunk_logits: Callable,
    normalize: bool,
    vanished: Callable[[Tensor], bool] | None = None,
    row_constant: Callable[[Tensor, Tensor], Tensor | None] | None = None,
) -> Tensor:
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

    Two hooks end a block's scan early, each exactly: ``vanished(carry)``, with ``normalize`` off,
    says every farther key's weight is 0 in the working dtype (stick-breaking, once the nearer keys
    have taken all of every row's stick); ``row_constant(q_block, carry)``, with ``normalize`` on,
    returns (B, H, Bq) where every farther key's logit is its scaled score plus that row's constant
    (CoPE, once every farther position is clamped at the last embedding), and the farther keys are
    then one fused flash-attention call merged through its log-sum-exp (CPU; elsewhere the scan goes
    on). q, k, v: (B, H, T, hd) -> (B, H, T, hd).
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
                if low > 0 and vanished is not None and vanished(carry):
                    break  # every farther weight is exactly 0
                continue
            top, mass, total = merge_chunk(top, mass, total, log_weights, v32[:, :, low:high])
            settled = low > 0 and row_constant is not None and fast_path_available(q_block)
            if settled and (constant := row_constant(q_block, carry)) is not None:  # farther: attention + a constant
                far_out, far_lse = flash(q_block, k32[:, :, :low], v32[:, :, :low], False, 1.0 / math.sqrt(hd))
                top, mass, total = merge_attention(top, mass, total, far_out.to(work), far_lse.to(work) + constant)
                break
        outputs.add(start, end, total / mass[..., None] if normalize else total)  # (B, H, Bq, hd)
    return outputs.result().to(q.dtype)  # (B, H, T, hd)


def trains_at_once(*tensors: Tensor) -> bool:
    """Whether a gradient is wanted through any of ``tensors`` at a length whose keys fit one chunk
    (training): CoPE and stick-breaking then attend over every key at once with a hand-written
    backward pass (``poscli.attention.nearest_first``). tensors[0]: q, (B, H, T, hd)."""
    wanted = torch.is_grad_enabled() and any(x.requires_grad for x in tensors)
    return wanted and tensors[0].shape[2] <= SCAN_KEYS


def merge_chunk(
    top: Tensor, mass: Tensor, total: Tensor, log_weights: Tensor, values: Tensor
) -> tuple[Tensor, Tensor, Tensor]:
    """Add a chunk of keys to a row's online softmax (FlashAttention's merge): ``top`` (B, H, Bq) the
    running max of the log weights, ``mass`` the sum of exp(log weight - top), ``total`` (B, H, Bq, hd)
    the sum of those times the values; the chunk's ``log_weights`` (B, H, Bq, Kc), -inf where a key is
    not read, and ``values`` (B, H, Kc, hd). -> the new (top, mass, total)."""
    new_top = torch.maximum(top, log_weights.amax(dim=-1))  # finite: the first chunk holds each row's own key
    shrink = (top - new_top).exp()  # (B, H, Bq); 0 at the first chunk
    share = (log_weights - new_top[..., None]).exp()  # (B, H, Bq, Kc)
    return new_top, mass * shrink + share.sum(dim=-1), total * shrink[..., None] + share @ values


def merge_attention(
    top: Tensor, mass: Tensor, total: Tensor, out: Tensor, lse: Tensor
) -> tuple[Tensor, Tensor, Tensor]:
    """``merge_chunk`` for keys given as their attention output ``out`` (B, H, Bq, hd) and the
    log-sum-exp of their log weights ``lse`` (B, H, Bq)."""
    new_top = torch.maximum(top, lse)
    shrink, share = (top - new_top).exp(), (lse - new_top).exp()  # (B, H, Bq) each
    return new_top, mass * shrink + share, total * shrink[..., None] + out * share[..., None]


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
