"""The portable fallback: any score bias, added to each block of query rows' scores in turn, so memory
stays bounded at any length (no fused kernel needed)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from poscli.attention import blockwise  # its block sizes are read at call time (tests shrink them)

# Upper bound on the elements of one materialised score-bias block (B * H * Bq * Tk) in the
# fallback path: 2^25 float32 values = 128 MiB, however long the sequence is.


class RowBlocks:
    """The output of an attention computed one block of query rows at a time, (B, H, T, hd).

    Without autograd the blocks are written into one tensor allocated up front. Kept as a list
    instead, each block's small output lands in the hole the previous block's large temporaries
    (scores, mask) left on glibc's heap, so the next block's temporaries no longer fit there and
    the heap grows by one hole per block: a peak that grows with T though every block is bounded
    (a hybrid schedule at 64k: 1.62 GiB, NoPE 0.59). With autograd the blocks are concatenated
    instead (writing into slices would copy the whole gradient once per block in the backward)."""

    def __init__(self, shape: tuple[int, ...], like: Tensor):
        self.blocks: list[Tensor] = []
        self.out = None if torch.is_grad_enabled() else like.new_empty(shape)

    def add(self, start: int, end: int, y: Tensor) -> None:
        """y (B, H, end - start, hd): the output of query rows [start, end)."""
        if self.out is None:
            self.blocks.append(y)
        else:
            self.out[:, :, start:end] = y

    def result(self) -> Tensor:
        return torch.cat(self.blocks, dim=2) if self.out is None else self.out


def blocked_biased_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    score_bias,
    q_positions: Tensor,
    max_block: int,
    sink: Tensor | None = None,
    window: int | None = None,
) -> Tensor:
    """Causal attention with any score bias, computed one block of queries at a time.

    ``score_bias(q_block, q_positions, k_positions)`` returns a bias broadcastable to
    (B, H, Bq, Tk), or is None for none. Each block of Bq queries builds its bias only against the
    keys it can see (0 .. end of the block), so the part the causal mask removes is never built and
    memory stays bounded by BIAS_BLOCK_ELEMENTS. ``sink`` (H,): a sink logit per head, a key every
    query sees with that score and a zero value (an off-by-one softmax); its gradient is returned.
    ``window`` W: a query sees only keys fewer than W positions back (sliding-window attention);
    where the positions increase, a block's keys are cut to the band [start - W + 1, end), so its
    work and memory are Bq x (Bq + W - 1) whatever T is.
    q, k, v: (B, H, T, hd) -> (B, H, T, hd).
    """
    B, H, T, hd = q.shape
    banded = window is not None and (T < 2 or bool((q_positions.diff() >= 1).all()))
    span = min(T, max_block + window - 1) if banded else T  # keys a block sees at most
    block = max(16, min(max_block, blockwise.BIAS_BLOCK_ELEMENTS // (B * H * span)))
    outputs = RowBlocks((B, H, T, v.shape[-1]), v)
    for start in range(0, T, block):
        end = min(start + block, T)
        first = max(0, start - window + 1) if banded else 0  # keys before it are all out of the window
        q_block = q[:, :, start:end]  # (B, H, Bq, hd)
        k_positions = q_positions[first:end]  # (Tk,), Tk = end - first
        if score_bias is None:
            bias = q.new_zeros(1, H, end - start, end - first)
        else:
            bias = score_bias(q_block, q_positions[start:end], k_positions)  # (H, Bq, Tk) or (B, H, Bq, Tk)
        if bias.dim() == 3:
            bias = bias.unsqueeze(0)  # (1, H, Bq, Tk): a 3-D mask sends SDPA down a path ~8x slower on CPU
        hidden = torch.ones(end - start, end - first, dtype=torch.bool, device=q.device).triu(
            diagonal=start - first + 1
        )  # (Bq, Tk): the keys after each query
        if window is not None:  # and the keys W or more positions back
            hidden = hidden | ((q_positions[start:end, None] - k_positions[None, :]) >= window)
        mask = bias.masked_fill(hidden, float("-inf"))  # (B or 1, H, Bq, Tk)
        keys, values = k[:, :, first:end], v[:, :, first:end]
        if sink is not None:  # a zero key in front (q . 0 = 0) whose mask entry is the sink logit, and a zero value
            mask = mask.expand(mask.shape[0], H, end - start, end - first)
            column = sink.to(mask.dtype)[None, :, None, None].expand(mask.shape[0], H, end - start, 1)
            mask = torch.cat((column, mask), dim=-1)  # (B or 1, H, Bq, 1 + Tk)
            keys, values = F.pad(keys, (0, 0, 1, 0)), F.pad(values, (0, 0, 1, 0))  # (B, H, 1 + Tk, hd)
        outputs.add(start, end, F.scaled_dot_product_attention(q_block, keys, values, attn_mask=mask))
    return outputs.result()  # (B, H, T, hd)
