"""Causal attention kernels: fused, banded-bias (fast, memory bounded) and blocked dense-bias.

Every relative encoding in poscli adds a bias to the attention scores. A dense T x T bias per
head is what made the T5-bias model of Press et al. (2022) run out of memory past 13k tokens
and train at half the speed of sinusoidal. Two facts make it unnecessary here:

1. Softmax ignores a constant added to a whole row of scores. So a bias that is the same for
   every key farther than W tokens away (T5: every distance past ``t5_max_distance`` shares the
   last bucket; Shaw: every distance past the clip k uses the same vector) is, for the softmax,
   zero there: what is left is a *band* of width W next to the diagonal.
2. ALiBi's -m (i - j) is -m i (constant in the row, so dropped) plus m j, a term linear in the
   key position, which one extra head dimension carries through a fused kernel:
   q' = [q, 1], k' = [k, m (j - a) / scale]. Measuring j from the block start a keeps the extra
   column small where it matters, so float32 loses nothing. In bfloat16 / float16 the column
   is split in two, a rounded high part and the remainder (q' = [q, 1, 1]), so the bias keeps
   about 16 bits instead of 8 and stays within plain low-precision attention's own error.

``banded_causal_attention`` therefore splits each block of Bq queries [a, b) into the keys far
behind it, [0, a - W + 1), which carry no bias and are all visible (one fused flash-attention
call), and the near keys [a - W + 1, b), where the band and the causal mask live (a small
explicit Bq x (Bq + W - 1) tile). The two halves are merged through their log-sum-exp, as in
FlashAttention (Dao et al., 2022), and the backward pass recomputes the same split. Memory is
linear in T; the work above the diagonal is never done.

The far half uses PyTorch's CPU flash-attention operator, which returns the log-sum-exp the
merge needs. Where it is missing (CUDA, or a torch without it), ``blocked_biased_attention``
materialises the bias one block of queries at a time instead: still memory bounded, slower.

Shape legend: B batch, H heads, T sequence length, hd head dimension, Bq query rows in a
block, W band width (distances 0 .. W-1 carry a bias), N near keys of a block (Bq + W - 1).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from poscli.attention.bands import band_view, ceil_to, fold_windows, skew_rows, spans, sum_to, tiles, unskew, windows

# Upper bound on the elements of one materialised score-bias block (B * H * Bq * Tk) in the
# fallback path: 2^25 float32 values = 128 MiB, however long the sequence is.
BIAS_BLOCK_ELEMENTS = 2**25


@dataclass
class RelativeBias:
    """A score bias that depends only on the distance d = i - j, in the form the fast path uses.

    slopes: (H,) or None. Adds -slopes[h] * d (ALiBi); fixed, never trained.
    band: (B or 1, H, T or 1, W) or None. Adds band[b, h, i, d] for d < W and nothing beyond
        (the encoding has already subtracted its far-distance value, which softmax ignores).
        May require grad: the backward pass returns its gradient.
    """

    slopes: Tensor | None = None
    band: Tensor | None = None

    @property
    def width(self) -> int:
        return 0 if self.band is None else self.band.shape[-1]


def fast_path_available(q: Tensor) -> bool:
    """Whether ``relative_causal_attention`` can run on this tensor's device: it needs PyTorch's
    CPU flash-attention operators, which return the log-sum-exp."""
    return _flash_forward is not None and _flash_backward is not None and q.device.type == "cpu"


def fused_causal_attention(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
    """q, k, v: (B, H, T, hd) -> (B, H, T, hd), PyTorch's fused causal kernel. q and k may be wider
    than v (PoPE's 2 hd): v is padded with zeros to their width, since the fused kernels take one
    head dimension for all three and otherwise fall back to writing out T x T scores."""
    width = v.shape[-1]
    if q.shape[-1] != width:
        padded = F.pad(v, (0, q.shape[-1] - width))  # (B, H, T, 2 hd): the extra outputs are 0
        return F.scaled_dot_product_attention(q, k, padded, is_causal=True)[..., :width]
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)


# --- the fast paths -------------------------------------------------------------------------

_flash_forward = getattr(torch.ops.aten, "_scaled_dot_product_flash_attention_for_cpu", None)
_flash_backward = getattr(torch.ops.aten, "_scaled_dot_product_flash_attention_for_cpu_backward", None)


def flash(
    q: Tensor, k: Tensor, v: Tensor, causal: bool, scale: float, mask: Tensor | None = None
) -> tuple[Tensor, Tensor]:
    """Fused attention that also returns each row's log-sum-exp. -> (B, H, Tq, hd), (B, H, Tq) float32.
    ``mask`` (additive, broadcastable to (B, H, Tq, Tk)) is a constant to the kernel: no gradient."""
    out, lse = _flash_forward(q, k, v, 0.0, causal, attn_mask=_mask_like(q, mask), scale=scale)[:2]
    return out, lse


def _mask_like(q: Tensor, mask: Tensor | None) -> Tensor | None:
    """The mask in float64 for float64 queries: torch 2.13's CPU flash kernel reads a float32 mask of a
    float64 call wrongly (T5 and Shaw's band masks: outputs off by O(1) at 80 tokens; float32 and
    bfloat16 queries read a float32 mask correctly)."""
    return mask.double() if mask is not None and q.dtype == torch.float64 and mask.dtype != torch.float64 else mask


def _flash_grads(d_out, q, k, v, out, lse, causal: bool, scale: float, mask: Tensor | None = None):
    """dq, dk, dv of rows whose softmax may span more keys than these: ``out`` and ``lse`` are the
    rows' final values, so P = exp(S - lse) and D = rowsum(dO * O) are the global ones
    (FlashAttention-2, Alg. 2). -> (dq, dk, dv)."""
    return _flash_backward(d_out, q, k, v, out, lse, 0.0, causal, attn_mask=_mask_like(q, mask), scale=scale)[:3]


def merge_partial(out_a: Tensor, lse_a: Tensor, out_b: Tensor, lse_b: Tensor) -> tuple[Tensor, Tensor]:
    """Combine attention over two disjoint key sets from their outputs and log-sum-exps."""
    lse = torch.logaddexp(lse_a, lse_b)  # (B, H, Tq)
    out = out_a.float() * (lse_a - lse).exp()[..., None] + out_b.float() * (lse_b - lse).exp()[..., None]
    return out, lse


class _LinearBiasAttention(torch.autograd.Function):
    """Causal attention with score bias -m_h (i - j) (ALiBi), every part through the fused kernel.

    For a block of queries [a, b), m (j - a) equals -m (i - j) up to the row constant m (i - a),
    and rides in one extra head dimension: q' = [q, 1], k' = [k, m (j - a) / scale], v' = [v, 0].
    The keys before the block are all visible (one call, no mask); the block's own keys are a
    square causal tile (one call with is_causal). The two merge through their log-sum-exps.
    """

    @staticmethod
    def forward(ctx, q: Tensor, k: Tensor, v: Tensor, slopes: Tensor, block: int) -> Tensor:
        with torch.autocast(q.device.type, enabled=False):
            B, H, T, hd = q.shape
            scale = 1.0 / math.sqrt(hd)
            q_ext, k_ext, v_ext = _extended(q, k, v)  # (B, H, T, hd + E) each, E extra columns
            out = torch.empty_like(q)  # (B, H, T, hd)
            lse = torch.empty(B, H, T, dtype=torch.float32, device=q.device)
            for start, end in spans(T, block):
                _write_key_offsets(k_ext, slopes, start, end, scale)
                rows = slice(start, end)
                out_blk, lse_blk = flash(q_ext[:, :, rows], k_ext[:, :, rows], v_ext[:, :, rows], True, scale)
                if start > 0:  # keys before the block: all visible
                    out_far, lse_far = flash(q_ext[:, :, rows], k_ext[:, :, :start], v_ext[:, :, :start], False, scale)
                    out_blk, lse_blk = merge_partial(out_far, lse_far, out_blk, lse_blk)
                out[:, :, rows], lse[:, :, rows] = out_blk[..., :hd].to(q.dtype), lse_blk
            ctx.save_for_backward(q, k, v, slopes, out, lse)
            ctx.block = block
            return out

    @staticmethod
    def backward(ctx, d_out: Tensor):
        with torch.autocast(d_out.device.type, enabled=False):
            q, k, v, slopes, out, lse = ctx.saved_tensors
            B, H, T, hd = q.shape
            scale = 1.0 / math.sqrt(hd)
            q_ext, k_ext, v_ext = _extended(q, k, v)
            extra = q_ext.shape[-1] - hd
            out_ext, d_out_ext = F.pad(out, (0, extra)), F.pad(d_out.to(q.dtype), (0, extra))  # (B, H, T, hd + E)
            dq, dk, dv = (
                torch.zeros(x.shape[:-1] + (hd + extra,), dtype=torch.float32, device=x.device) for x in (q, k, v)
            )
            for start, end in spans(T, ctx.block):
                _write_key_offsets(k_ext, slopes, start, end, scale)
                rows = slice(start, end)
                args = (d_out_ext[:, :, rows], q_ext[:, :, rows])
                tail = (out_ext[:, :, rows], lse[:, :, rows])
                grads = _flash_grads(*args, k_ext[:, :, rows], v_ext[:, :, rows], *tail, True, scale)
                dq[:, :, rows] += grads[0]
                dk[:, :, rows] += grads[1]
                dv[:, :, rows] += grads[2]
                if start > 0:
                    grads = _flash_grads(*args, k_ext[:, :, :start], v_ext[:, :, :start], *tail, False, scale)
                    dq[:, :, rows] += grads[0]
                    dk[:, :, :start] += grads[1]
                    dv[:, :, :start] += grads[2]
            return dq[..., :hd].to(q.dtype), dk[..., :hd].to(k.dtype), dv[..., :hd].to(v.dtype), None, None


def _extended(q: Tensor, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """q, k, v with E more head dimensions: 1 for q, slots for the key offsets in k, 0 for v.
    E = 1 in float32; 2 in a low-precision dtype (the offsets' high and low parts)."""
    extra = 1 if q.dtype in (torch.float32, torch.float64) else 2
    return F.pad(q, (0, extra), value=1.0), F.pad(k, (0, extra)), F.pad(v, (0, extra))  # (B, H, T, hd + E) each


def _write_key_offsets(k_ext: Tensor, slopes: Tensor, start: int, end: int, scale: float) -> None:
    """Set the key-offset columns to m_h (j - start) / scale for the keys 0 .. end that the block
    starting at ``start`` sees: one column in float32; in a low-precision dtype, the value rounded
    to that dtype in one column and what the rounding lost in the next, which the kernel's float32
    accumulation adds back."""
    offsets = torch.arange(end, device=k_ext.device, dtype=torch.float32) - start  # (end,)
    value = slopes.float()[:, None] * offsets[None, :] / scale  # (H, end)
    if k_ext.dtype in (torch.float32, torch.float64):
        k_ext[:, :, :end, -1] = value.to(k_ext.dtype)
        return
    high = value.to(k_ext.dtype)
    k_ext[:, :, :end, -2] = high
    k_ext[:, :, :end, -1] = (value - high.float()).to(k_ext.dtype)


def _band_scores(q: Tensor, k_pad: Tensor, band: Tensor, start: int, end: int, tile: int, scale: float) -> Tensor:
    """Scores of queries [start, end) against the W keys at distances W-1 .. 0 behind each, in float32.

    k_pad: (B, H, W - 1 + T', hd), the keys with W - 1 zero rows in front (T' a multiple of ``tile``);
    band: (B|1, H, T|1, W). Returns (B, H, end - start, W), column c = distance W - 1 - c, with
    -inf where that key would lie before position 0. The dot products come from tiles of
    ``tile`` queries against their tile + W - 1 keys (one batched matmul), read off by ``unskew``.
    """
    width = band.shape[-1]
    q_tiles = tiles(q[:, :, start:end].float(), tile)  # (B, H, n, tile, hd)
    k_windows = windows(
        k_pad[:, :, start : end + width - 1 + (-(end - start)) % tile].float(), tile, width
    )  # (B, H, n, N, hd)
    scores = unskew(q_tiles @ k_windows.transpose(-1, -2), width) * scale  # (B, H, n, tile, W)
    scores = scores.flatten(2, 3)[:, :, : end - start]  # (B, H, Tq, W)
    rows = band[:, :, start:end] if band.shape[2] > 1 else band  # (B|1, H, Tq|1, W)
    scores = scores + rows.float().flip(-1)
    if start < width - 1:  # the first W - 1 queries have fewer than W keys behind them
        position = (
            torch.arange(start, end, device=q.device)[:, None] - (width - 1) + torch.arange(width, device=q.device)
        )
        scores = scores.masked_fill(position < 0, float("-inf"))
    return scores


class _BandBiasAttention(torch.autograd.Function):
    """Causal attention with a score bias on distances 0 .. W-1 and none beyond (T5, Shaw).

    Keys at distance >= W carry no bias: for all queries at once they are one fused causal call
    on the shifted sequences (queries W.., keys ..T-W). The W nearest keys of each query carry
    the band: an explicit (B, H, T, W) computation, done in chunks of queries so memory stays
    bounded. The two merge through their log-sum-exps; the band's gradient is the softmax
    gradient dS = P (dP - D) read on the band.
    """

    @staticmethod
    def forward(ctx, q: Tensor, k: Tensor, v: Tensor, band: Tensor, tile: int, chunk: int) -> Tensor:
        with torch.autocast(q.device.type, enabled=False):
            B, H, T, hd = q.shape
            scale = 1.0 / math.sqrt(hd)
            dense = max(B, band.shape[0]) * H * T * T <= BIAS_BLOCK_ELEMENTS
            if dense:  # short sequences (training): the whole bias as the fused kernel's mask
                mask = _dense_bias(band, T)  # (B|1, H, T, T)
                out, lse = flash(q, k, v, False, scale, mask)
            else:
                out, lse = band_then_far(q, k, v, band, tile, chunk, scale)
                mask = None
            ctx.save_for_backward(q, k, v, band, out, lse, mask)
            ctx.tile, ctx.chunk = tile, chunk
            return out

    @staticmethod
    def backward(ctx, d_out: Tensor):
        with torch.autocast(d_out.device.type, enabled=False):
            q, k, v, band, out, lse, mask = ctx.saved_tensors
            B, H, T, hd = q.shape
            width, tile = band.shape[-1], ctx.tile
            scale = 1.0 / math.sqrt(hd)
            d_out = d_out.to(q.dtype).contiguous()
            k_pad, v_pad = (F.pad(x, (0, 0, width - 1, (-T) % tile)) for x in (k, v))
            if mask is not None:
                dq, dk, dv = (g.float() for g in _flash_grads(d_out, q, k, v, out, lse, False, scale, mask))
                dk_pad = dv_pad = None
            else:
                dq = torch.zeros(B, H, T, hd, dtype=torch.float32, device=q.device)
                dk_pad, dv_pad = (torch.zeros(x.shape, dtype=torch.float32, device=x.device) for x in (k_pad, v_pad))
            d_band = torch.zeros(band.shape, dtype=torch.float32, device=band.device)
            # D_i = sum_c dO_ic O_ic, the row term of the softmax gradient.
            row_term = (d_out.float() * out.float()).sum(-1)  # (B, H, T)
            for start, end in spans(T, ctx.chunk):
                rows = slice(start, end)
                scores = _band_scores(q, k_pad, band, start, end, tile, scale)  # (B, H, Tq, W)
                probs = (scores - lse[:, :, rows, None]).exp()  # (B, H, Tq, W): the global softmax on the band
                keys = slice(start, start + ceil_to(end - start, tile) + width - 1)
                d_tiles = tiles(d_out[:, :, rows].float(), tile)  # (B, H, n, tile, hd)
                v_windows = windows(v_pad[:, :, keys].float(), tile, width)  # (B, H, n, N, hd)
                d_probs = unskew(d_tiles @ v_windows.transpose(-1, -2), width).flatten(2, 3)[:, :, : end - start]
                d_scores = probs * (d_probs - row_term[:, :, rows, None])  # (B, H, Tq, W): dS on the band
                target = d_band[:, :, rows] if band.shape[2] > 1 else d_band
                target += sum_to(d_scores.flip(-1), target.shape)  # by distance 0 .. W-1
                if mask is not None:  # the fused backward already gave dq, dk, dv
                    continue
                d_tile_scores = skew_rows(d_scores, tile) * scale  # (B, H, n, tile, N)
                k_windows = windows(k_pad[:, :, keys].float(), tile, width)  # (B, H, n, N, hd)
                dq[:, :, rows] += (d_tile_scores @ k_windows).flatten(2, 3)[:, :, : end - start]
                q_tiles = tiles(q[:, :, rows].float(), tile)  # (B, H, n, tile, hd)
                dk_pad[:, :, keys] += fold_windows(d_tile_scores.transpose(-1, -2) @ q_tiles, width)
                dv_pad[:, :, keys] += fold_windows(skew_rows(probs, tile).transpose(-1, -2) @ d_tiles, width)
            if mask is None:
                dk, dv = dk_pad[:, :, width - 1 : width - 1 + T], dv_pad[:, :, width - 1 : width - 1 + T]
                if width < T:
                    grads = _flash_grads(
                        d_out[:, :, width:],
                        q[:, :, width:],
                        k[:, :, : T - width],
                        v[:, :, : T - width],
                        out[:, :, width:],
                        lse[:, :, width:],
                        True,
                        scale,
                    )
                    dq[:, :, width:] += grads[0]
                    dk[:, :, : T - width] += grads[1]
                    dv[:, :, : T - width] += grads[2]
            return dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype), d_band.to(band.dtype), None, None


def _written_out_forward(q: Tensor, k: Tensor, v: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
    """S = q k^T / sqrt(hd) + mask, P = softmax(S), O = P v, in float32, with the mask (B|1, H, T, T)
    broadcast over the batch, never copied. -> P (B, H, T, T), O (B, H, T, hd)."""
    scores = torch.matmul(q.float() * (1.0 / math.sqrt(q.shape[-1])), k.float().transpose(-1, -2))  # (B, H, T, T)
    probs = torch.softmax(scores.add_(mask), -1)
    return probs, torch.matmul(probs, v.float())


def _written_out_backward(
    d_out: Tensor, q: Tensor, k: Tensor, v: Tensor, probs: Tensor, out: Tensor
) -> tuple[Tensor, ...]:
    """dq, dk, dv and dS (B, H, T, T), the scores' gradient (the bias's gradient before any reduction):
    dS = P (dP - D) with D = rowsum(P dP) = rowsum(dO O)."""
    scale = 1.0 / math.sqrt(q.shape[-1])
    d_out = d_out.float()
    dv = torch.matmul(probs.transpose(-1, -2), d_out)
    d_scores = torch.matmul(d_out, v.float().transpose(-1, -2))  # dP, (B, H, T, T)
    d_scores.sub_((d_out * out).sum(-1, keepdim=True)).mul_(probs)  # dS
    dq = torch.matmul(d_scores, k.float()).mul_(scale)
    dk = torch.matmul(d_scores.transpose(-1, -2), q.float()).mul_(scale)
    return dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype), d_scores


class _WideBandAttention(torch.autograd.Function):
    """Training-length attention with a band as wide as a quarter of the sequence or more (T5's
    128 at 256), written out: S = q k^T / sqrt(hd) + bias, P = softmax(S), O = P v, with P saved.
    The band's gradient needs the softmax gradient dS = P (dP - D) on most of the matrix anyway,
    so the backward takes dq, dk, dv from that same dS (four matmuls) instead of running the fused
    backward and then recomputing P and dP for the band (seven): T5 trains about 10% faster.
    Memory is the B H T T of P per layer, which the caller bounds (BIAS_BLOCK_ELEMENTS)."""

    @staticmethod
    def forward(ctx, q: Tensor, k: Tensor, v: Tensor, band: Tensor) -> Tensor:
        with torch.autocast(q.device.type, enabled=False):
            probs, out = _written_out_forward(q, k, v, _dense_bias(band.float(), q.shape[2]))
            ctx.save_for_backward(q, k, v, probs, out)
            ctx.band_shape, ctx.band_dtype = band.shape, band.dtype
            return out.to(q.dtype)

    @staticmethod
    def backward(ctx, d_out: Tensor):
        with torch.autocast(d_out.device.type, enabled=False):
            dq, dk, dv, d_scores = _written_out_backward(d_out, *ctx.saved_tensors)
            width = ctx.band_shape[-1]
            grid = d_scores.sum(0, keepdim=True) if ctx.band_shape[0] == 1 else d_scores  # (B|1, H, T, T)
            d_band = sum_to(unskew(F.pad(grid, (width - 1, 0)), width).flip(-1), ctx.band_shape)  # by distance 0 .. W-1
            return dq, dk, dv, d_band.to(ctx.band_dtype)


class _DenseBiasAttention(torch.autograd.Function):
    """The same written-out attention with any dense bias (1, H, T, T) (-inf on future keys); its
    gradient is dS summed over the batch, for autograd to carry into whatever built the bias."""

    @staticmethod
    def forward(ctx, q: Tensor, k: Tensor, v: Tensor, bias: Tensor) -> Tensor:
        with torch.autocast(q.device.type, enabled=False):
            probs, out = _written_out_forward(q, k, v, bias.float())
            ctx.save_for_backward(q, k, v, probs, out)
            ctx.bias_dtype = bias.dtype
            return out.to(q.dtype)

    @staticmethod
    def backward(ctx, d_out: Tensor):
        with torch.autocast(d_out.device.type, enabled=False):
            dq, dk, dv, d_scores = _written_out_backward(d_out, *ctx.saved_tensors)
            return dq, dk, dv, d_scores.sum(0, keepdim=True).to(ctx.bias_dtype)


def dense_fits(batch: int, heads: int, length: int) -> bool:
    """Whether a (B, H, T, T) score matrix per layer is within BIAS_BLOCK_ELEMENTS."""
    return batch * heads * length * length <= BIAS_BLOCK_ELEMENTS


def written_out_attention(q: Tensor, k: Tensor, v: Tensor, bias: Tensor) -> Tensor:
    """softmax(q k^T / sqrt(hd) + bias) v with P saved for the backward pass, for training lengths
    where ``dense_fits``. bias: (1, H, T, T), -inf on future keys; gradients reach it.
    q, k, v: (B, H, T, hd) -> (B, H, T, hd)."""
    return _DenseBiasAttention.apply(q, k, v, bias)


def band_attention(q: Tensor, k: Tensor, v: Tensor, band: Tensor) -> Tensor:
    """``written_out_attention`` with the bias given as a band (1, H, 1, W) over distances 0 .. W-1."""
    return _WideBandAttention.apply(q, k, v, band)


def _dense_bias(band: Tensor, length: int) -> Tensor:
    """The whole causal bias of a band, as an additive mask. band: (B|1, H, T|1, W) -> (B|1, H, T, T)."""
    width = band.shape[-1]
    # Columns 0 .. W-2 stand for keys before position 0 and are cut off at the end.
    future = torch.ones(length, length + width - 1, dtype=torch.bool, device=band.device).triu(width)  # (T, T + W - 1)
    causal = torch.zeros(future.shape, device=band.device).masked_fill_(future, float("-inf"))
    bias = causal.expand(*band.shape[:2], *future.shape).clone()  # (B|1, H, T, T + W - 1)
    band_view(bias, width).copy_(band.flip(-1))  # distance W-1-c at column i + c
    return bias[..., width - 1 :]  # (B|1, H, T, T): column j is key j


def band_then_far(
    q, k, v, band, tile: int, chunk: int, scale: float, far: tuple[Tensor, Tensor] | None = None
) -> tuple[Tensor, Tensor]:
    """Forward of band attention at any length: the band in chunks of queries, then the far keys
    in one fused causal call on the shifted sequences, merged. ``far`` = (q_far, k_far): other
    queries and keys for the far part (remapped positions), default q and k.
    -> out (B, H, T, hd), lse (B, H, T)."""
    B, H, T, hd = q.shape
    width = band.shape[-1]
    k_pad, v_pad = (F.pad(x, (0, 0, width - 1, (-T) % tile)) for x in (k, v))  # (B, H, W - 1 + T', hd)
    out = torch.empty(B, H, T, hd, dtype=torch.float32, device=q.device)
    lse = torch.empty(B, H, T, dtype=torch.float32, device=q.device)
    for start, end in spans(T, chunk):
        scores = _band_scores(q, k_pad, band, start, end, tile, scale)  # (B, H, Tq, W)
        lse[:, :, start:end] = scores.logsumexp(-1)
        probs = skew_rows(torch.softmax(scores, -1), tile)  # (B, H, n, tile, N)
        v_windows = windows(v_pad[:, :, start : start + probs.shape[2] * tile + width - 1].float(), tile, width)
        out[:, :, start:end] = (probs @ v_windows).flatten(2, 3)[:, :, : end - start]  # (B, H, Tq, hd)
    if width < T:  # keys at distance >= W: query i sees keys 0 .. i - W, a square causal call
        q_far, k_far = far if far is not None else (q, k)
        far_out, far_lse = flash(q_far[:, :, width:], k_far[:, :, : T - width], v[:, :, : T - width], True, scale)
        out[:, :, width:], lse[:, :, width:] = merge_partial(far_out, far_lse, out[:, :, width:], lse[:, :, width:])
    return out.to(q.dtype), lse


# Query rows per band tile and per chunk of the band computation: a chunk's temporaries hold
# about B * H * chunk * (tile + W) floats, so memory stays bounded at any length.
BAND_TILE = 64
BAND_CHUNK = 4096


def relative_causal_attention(q: Tensor, k: Tensor, v: Tensor, bias: RelativeBias, block: int) -> Tensor:
    """Causal attention with a distance bias, memory linear in T. q, k, v: (B, H, T, hd) -> (B, H, T, hd).

    Equal to softmax(q k^T / sqrt(hd) + bias, causal) v to float tolerance, forward and backward
    (tests/attention/test_attention.py). CPU only; see ``fast_path_available``.
    """
    if bias.slopes is not None:
        return _LinearBiasAttention.apply(q, k, v, bias.slopes, block)
    B, H, T, _ = q.shape
    wide = 4 * bias.width >= T and dense_fits(max(B, bias.band.shape[0]), H, T)
    if wide and torch.is_grad_enabled() and (q.requires_grad or bias.band.requires_grad):
        return _WideBandAttention.apply(q, k, v, bias.band)  # training T5: one dS for every gradient
    tile = max(BAND_TILE, bias.width - 1)  # a window's overlap must fit in one tile
    return _BandBiasAttention.apply(q, k, v, bias.band, tile, ceil_to(BAND_CHUNK, tile))


# --- the portable fallback ----------------------------------------------------------------------


# --- remapped positions beyond a window (poscli.extension.remap) ----------------------------------------


# --- dual chunk attention (poscli.extension.methods.dca) -------------------------------------------------
