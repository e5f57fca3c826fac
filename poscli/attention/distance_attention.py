"""Causal attention with a bias that is a function of distance (and of the query position), memory bounded.

Two forms cover KERPLE, FIRE and any user-defined bias of this kind (``distance_bias`` hook,
``poscli.encodings.base``):

- :class:`DistanceTable`: b_h(i, j) = table[h, i - j], a vector per head over distances 0 .. T-1
  (KERPLE's -r1 log(1 + r2 d), or any function of d an encoding computes once per forward).
- :class:`ScaledDistanceBias`: b_h(i, j) = g_h(u[i - j] * s[i]) with u nondecreasing over
  distances, s > 0 per query row and g_h piecewise linear: intercept[m, h] + slope[m, h] x on
  segment m, between sorted breakpoints. FIRE is this form exactly: u = psi(d), s = 1 / psi(max(L, i)),
  and its MLP of one ReLU layer is a piecewise-linear function with a breakpoint per hidden unit
  (Li et al., 2023, section 3). Nothing is interpolated.

The fast path (CPU) runs PyTorch's flash-attention kernel on each block of queries [a, b) against
keys [0, b) with the bias as its additive mask, and never builds a dense T x T mask:

- The keys are reversed once per call, so in a block the distance i - j grows along both the row
  and the column of the mask: the table form's mask is then a strided *view* of the padded table
  (no copy at all, the kernel reads it in place), and the scaled form's feature u[i - j] is one too.
- The scaled form's mask is built into one (H, Bq, b) buffer region by region: where every row of
  the block is on the same segment of g (a run of columns between the rows' breakpoints), the bias
  is intercept + slope * s[i] * u[i - j], one pass over the run; only the columns where rows cross
  a breakpoint (about Bq per breakpoint) and the diagonal tile are evaluated pair by pair.

The backward pass recomputes each block's scores (FlashAttention-2's recomputation, Dao, 2023):
P = exp(S - lse), dS = P (dP - D), and the bias's own gradient is that of the pair-by-pair form
(``exact``) contracted with dS, so gradients reach the encoding's parameters. Memory is bounded by
``attention.BIAS_BLOCK_ELEMENTS`` per block at any length.

Shape legend: B batch, H heads, T sequence length, hd head dimension, Bq query rows in a block,
Tk keys a block sees (its end), K breakpoints, M = K + 1 segments.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from poscli.attention import blockwise as attention

# Query rows per block of the forward pass when the mask is a view (nothing is materialised).
VIEW_BLOCK = 1024


@dataclass
class DistanceTable:
    """b_h(i, j) = table[h, i - j] for 0 <= i - j < T. table: (H, T); may require grad."""

    table: Tensor

    def tensors(self) -> tuple[Tensor, ...]:
        return (self.table,)

    @staticmethod
    def exact(tensors: tuple[Tensor, ...], distance: Tensor, rows: slice) -> Tensor:
        """The bias for a (Bq, Tk) grid of distances (negative: a future key), differentiable. -> (H, Bq, Tk)."""
        (table,) = tensors
        return torch.where(distance >= 0, table[:, distance.clamp(min=0)], float("-inf"))

    @staticmethod
    def mask(tensors: tuple[Tensor, ...], start: int, end: int, pad: int) -> Tensor:
        """The bias of query rows [start, end) against the reversed keys end-1 .. 0, as a strided
        view of the table padded with ``pad`` >= Bq - 1 columns of -inf, and no bias of the key
        alone. -> (1, H, Bq, end), None."""
        (padded,) = tensors
        rows = end - start
        view = padded.as_strided(
            (1, padded.shape[0], rows, end),
            (0, padded.stride(0), 1, 1),
            padded.storage_offset() + pad + start - end + 1,
        )
        return view, None

    def padded(self, pad: int) -> tuple[Tensor, ...]:
        """The tensors ``mask`` reads: the table with ``pad`` columns of -inf for future keys."""
        table = self.table.detach().float()
        return (torch.cat((table.new_full((table.shape[0], pad), float("-inf")), table), dim=1).contiguous(),)


@dataclass
class ScaledDistanceBias:
    """b_h(i, j) = g_h(feature[i - j] * row_scale[i]), g_h(x) = intercept[m, h] + slope[m, h] * x on
    segment m = #{k : feature[i - j] >= breakpoints[k] / row_scale[i]}.

    feature: (T,) nondecreasing over distances 0 .. T-1; row_scale: (T,) > 0 per query row;
    breakpoints: (K,) sorted; intercept, slope: (K + 1, H). Every tensor but the breakpoints
    may require grad (the breakpoints only choose the segment, where the bias's gradient is 0).
    """

    feature: Tensor
    row_scale: Tensor
    breakpoints: Tensor
    intercept: Tensor
    slope: Tensor

    def tensors(self) -> tuple[Tensor, ...]:
        return (self.feature, self.row_scale, self.breakpoints, self.intercept, self.slope)

    @staticmethod
    def exact(tensors: tuple[Tensor, ...], distance: Tensor, rows: slice) -> Tensor:
        feature, row_scale, breakpoints, intercept, slope = tensors
        u = feature[distance.clamp(min=0)]  # (Bq, Tk)
        scale = row_scale[rows]  # (Bq,)
        thresholds = breakpoints.detach()[None, :] / scale.detach()[:, None]  # (Bq, K), sorted per row
        segment = torch.searchsorted(thresholds, u.detach().contiguous(), right=True)  # (Bq, Tk)
        x = u * scale[:, None]  # (Bq, Tk)
        bias = intercept.T[:, segment] + slope.T[:, segment] * x  # (H, Bq, Tk)
        return torch.where(distance >= 0, bias, float("-inf"))

    @staticmethod
    def mask(tensors: tuple[Tensor, ...], start: int, end: int, pad: int) -> tuple[Tensor, Tensor]:
        """The bias of query rows [start, end) against the reversed keys end-1 .. 0 as the sum of a
        mask (1, H, Bq, Tk) and a bias of the key alone (H, Tk): on a run of columns where every row
        is on segment m, slope[m] * s_i * u[i - j] and intercept[m] (one pass over the run)."""
        feature, row_scale, breakpoints, intercept, slope, workspace = tensors  # feature padded by ``pad`` zeros
        rows, heads = end - start, intercept.shape[1]
        first = pad + start - end + 1  # column c is distance start + a - end + 1 + c
        u = feature.as_strided((rows, end), (1, 1), feature.storage_offset() + first)  # (Bq, Tk)
        scale = row_scale[start:end]  # (Bq,)
        out = workspace[:, :, :rows, :end]  # (1, H, Bq, Tk), one buffer for every block: no fresh pages
        key_bias = torch.zeros(heads, end, dtype=torch.float32, device=feature.device)  # (H, Tk)
        # Column where row a reaches breakpoint k: the first distance whose feature reaches t_k / s_a.
        reach = torch.searchsorted(feature[pad:], breakpoints[None, :] / scale[:, None])  # (Bq, K)
        column = reach - (start + torch.arange(rows, device=feature.device) - end + 1)[:, None]  # (Bq, K)
        low, high = column.amin(0).tolist(), column.amax(0).tolist()
        exact = [(0, rows + 1)] + [(lo, hi + 1) for lo, hi in zip(low, high)]  # diagonal tile and crossings
        for c0, c1, segment in _runs(exact, high, end):
            if segment is None:
                distance = (
                    start
                    + torch.arange(rows, device=feature.device)[:, None]
                    - end
                    + 1
                    + torch.arange(c0, c1, device=feature.device)
                )
                out[0, :, :, c0:c1] = ScaledDistanceBias.exact(
                    (feature[pad:], row_scale, breakpoints, intercept, slope), distance, slice(start, end)
                )
            else:  # the intercept is the same for every row here: a bias of the key, carried by k
                torch.mul(slope[segment][:, None, None] * scale[None, :, None], u[:, c0:c1], out=out[0, :, :, c0:c1])
                key_bias[:, c0:c1] = intercept[segment][:, None]
        return out, key_bias

    def padded(self, pad: int) -> tuple[Tensor, ...]:
        """The tensors ``mask`` reads: the feature with ``pad`` zeros for future keys, and the buffer
        each block's mask is built in (1, H, pad, T)."""
        feature, *rest = (t.detach().float() for t in self.tensors())
        workspace = feature.new_empty(1, self.intercept.shape[1], pad, len(feature))
        return (torch.cat((feature.new_zeros(pad), feature)).contiguous(), *rest, workspace)


def _runs(exact: list[tuple[int, int]], high: list[int], end: int):
    """Split columns [0, end) into runs: (c0, c1, None) where some pair must be evaluated on its own
    (the ``exact`` intervals), else (c0, c1, m) where every row is on segment m = #{k : high[k] < c0}."""
    marks = sorted((max(0, lo), min(end, hi)) for lo, hi in exact if min(end, hi) > max(0, lo))
    merged: list[list[int]] = []
    for lo, hi in marks:
        if merged and lo <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], hi)
        else:
            merged.append([lo, hi])
    column = 0
    for lo, hi in [*merged, [end, end]]:
        if lo > column:
            yield column, lo, sum(h < column for h in high)
        if hi > lo:
            yield lo, hi, None
        column = max(column, hi)


Form = DistanceTable | ScaledDistanceBias


def _block_rows(form: Form, batch: int, heads: int, length: int, backward: bool) -> int:
    """Query rows per block: a view needs no memory in the forward pass; a built mask, and the
    backward pass's scores, hold B * H * Bq * T floats, kept under BIAS_BLOCK_ELEMENTS."""
    if isinstance(form, DistanceTable) and not backward:
        return VIEW_BLOCK
    per_row = (batch if backward else 1) * heads * length
    return max(16, min(VIEW_BLOCK, attention.BIAS_BLOCK_ELEMENTS // max(1, per_row)))


class _DistanceBiasAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q: Tensor, k: Tensor, v: Tensor, form: Form, *tensors: Tensor) -> Tensor:
        with torch.autocast(q.device.type, enabled=False):
            B, H, T, hd = q.shape
            scale = 1.0 / math.sqrt(hd)
            # Keys reversed (T-1 .. 0); a bias of the key alone rides in one more head dimension,
            # q' = [q, 1], k' = [k, bias / scale], v' = [v, 0], as ALiBi's does (poscli.attention.blockwise).
            extra = int(isinstance(form, ScaledDistanceBias))
            q32 = F.pad(q.float(), (0, extra), value=1.0)  # (B, H, T, hd + extra)
            k_rev, v_rev = (F.pad(x.float().flip(2), (0, extra)) for x in (k, v))  # (B, H, T, hd + extra)
            block = _block_rows(form, B, H, T, backward=False)
            padded = form.padded(block)
            out = torch.empty(B, H, T, hd, dtype=torch.float32, device=q.device)
            lse = torch.empty(B, H, T, dtype=torch.float32, device=q.device)
            for start in range(0, T, block):
                end = min(start + block, T)
                mask, key_bias = form.mask(padded, start, end, block)  # (1, H, Bq, end), (H, end) or None
                if key_bias is not None:
                    k_rev[:, :, T - end :, hd] = key_bias / scale  # both run over keys end-1 .. 0
                rows_out, lse[:, :, start:end] = attention.flash(
                    q32[:, :, start:end], k_rev[:, :, T - end :], v_rev[:, :, T - end :], False, scale, mask
                )
                out[:, :, start:end] = rows_out[..., :hd]
            ctx.form = form
            ctx.save_for_backward(q, k, v, out, lse, *tensors)
            return out.to(q.dtype)

    @staticmethod
    def backward(ctx, d_out: Tensor):
        with torch.autocast(d_out.device.type, enabled=False):
            q, k, v, out, lse, *tensors = ctx.saved_tensors
            form = ctx.form
            B, H, T, hd = q.shape
            scale = 1.0 / math.sqrt(hd)
            q32, k32, v32, d_out = q.float(), k.float(), v.float(), d_out.float()
            dq, dk, dv = torch.zeros_like(q32), torch.zeros_like(k32), torch.zeros_like(v32)
            wanted = [i for i, t in enumerate(tensors) if ctx.needs_input_grad[4 + i]]
            grads: list[Tensor | None] = [None] * len(tensors)
            d_rows = (d_out * out).sum(-1, keepdim=True)  # D = rowsum(dO O), (B, H, T, 1)
            block = _block_rows(form, B, H, T, backward=True)
            for start in range(0, T, block):
                end = min(start + block, T)
                rows = slice(start, end)
                distance = torch.arange(start, end, device=q.device)[:, None] - torch.arange(
                    end, device=q.device
                )  # (Bq, Tk)
                # The block's bias, built once: its values for the scores, its graph (when the bias's
                # tensors want gradients) for their gradient below.
                with torch.set_grad_enabled(bool(wanted)):
                    inputs = [t.detach().float().requires_grad_(i in wanted) for i, t in enumerate(tensors)]
                    block_bias = form.exact(tuple(inputs), distance, rows)  # (H, Bq, Tk)
                scores = torch.matmul(q32[:, :, rows] * scale, k32[:, :, :end].transpose(-1, -2)).add_(
                    block_bias.detach()
                )  # (B, H, Bq, Tk)
                probs = scores.sub_(lse[:, :, rows, None]).exp_()  # P
                dv[:, :, :end] += torch.matmul(probs.transpose(-1, -2), d_out[:, :, rows])
                d_scores = (
                    torch.matmul(d_out[:, :, rows], v32[:, :, :end].transpose(-1, -2))
                    .sub_(d_rows[:, :, rows])
                    .mul_(probs)
                )  # dS
                dq[:, :, rows] = torch.matmul(d_scores, k32[:, :, :end]).mul_(scale)
                dk[:, :, :end] += torch.matmul(d_scores.transpose(-1, -2), q32[:, :, rows]).mul_(scale)
                if wanted:
                    found = torch.autograd.grad(
                        block_bias, [inputs[i] for i in wanted], d_scores.sum(0), allow_unused=True
                    )
                    for i, grad in zip(wanted, found):
                        if grad is not None:
                            grads[i] = grad if grads[i] is None else grads[i] + grad
            return (
                dq.to(q.dtype),
                dk.to(k.dtype),
                dv.to(v.dtype),
                None,
                *(None if g is None else g.to(t.dtype) for g, t in zip(grads, tensors)),
            )


def distance_biased_attention(q: Tensor, k: Tensor, v: Tensor, form: Form) -> Tensor:
    """softmax(q k^T / sqrt(hd) + b, causal) v for a bias ``form`` over consecutive positions,
    memory bounded at any length; exact forward and backward (tests/attention/test_attention.py).
    q, k, v: (B, H, T, hd) -> (B, H, T, hd). CPU only: see ``attention.fast_path_available``."""
    B, H, T, _ = q.shape
    tensors = form.tensors()
    if torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v, *tensors)) and attention.dense_fits(B, H, T):
        # Training lengths: P saved, every gradient from one dS (``attention.written_out_attention``).
        if isinstance(form, DistanceTable):
            return attention.band_attention(q, k, v, form.table[None, :, None, :])  # a band as wide as T
        distance = torch.arange(T, device=q.device)[:, None] - torch.arange(T, device=q.device)  # (T, T)
        return attention.written_out_attention(q, k, v, form.exact(tensors, distance, slice(0, T))[None])
    return _DistanceBiasAttention.apply(q, k, v, form, *tensors)
