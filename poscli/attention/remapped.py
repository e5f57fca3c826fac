"""Attention with far keys at other positions (Self-Extend, ReRoPE, sinks: ``poscli.extension.remap``)
and dual chunk attention's three position sets (``poscli.extension.methods.dca``), on the fused
kernels."""

from __future__ import annotations

import math

import torch
from torch import Tensor

from poscli.attention import blockwise  # its block sizes are read at call time (tests shrink them)
from poscli.attention.blockwise import (
    band_then_far,
    ceil_to,
    fast_path_available,
    flash,
    merge_partial,
)
from poscli.attention.fallback import RowBlocks

# Upper bound on the elements of one materialised score-bias block (B * H * Bq * Tk) in the
# fallback path: 2^25 float32 values = 128 MiB, however long the sequence is.


def remapped_attention(
    q_near: Tensor,
    k_near: Tensor,
    q_far: Tensor,
    k_far: Tensor,
    v: Tensor,
    window: int,
    far_keys: int | None = None,
    positions: Tensor | None = None,
    bias=None,
    max_block: int = 1024,
) -> Tensor:
    """Causal attention whose score for query i and key j is q_near_i . k_near_j / sqrt(hd) when
    0 <= i - j < ``window`` and q_far_i . k_far_j / sqrt(hd) beyond it (Self-Extend, ReRoPE), where
    only the first ``far_keys`` keys are visible if given (attention sinks). All (B, H, T, hd).

    ``bias(part, q_block, rows, keys)``, if given, adds a score bias for ``part`` "near" or "far"
    between query rows and key indices (slices). ``positions`` (T,) are the true positions, 0..T-1
    by default; the window is measured in them.

    Memory is bounded at any length. On CPU with consecutive positions and no bias, the window is a
    band (``_band_scores``) and the far keys one fused causal call on the shifted sequences (as for
    T5's band), merged by log-sum-exp; otherwise blocks of queries build their scores explicitly,
    against the far keys and the window's keys only.
    """
    B, H, T, hd = q_near.shape
    consecutive = positions is None or T < 2 or bool((positions.diff() == 1).all())
    if (
        far_keys is None
        and bias is None
        and consecutive
        and fast_path_available(q_near)
        and not torch.is_grad_enabled()
    ):
        with torch.autocast(q_near.device.type, enabled=False):
            band = torch.zeros(1, H, 1, min(window, T), dtype=torch.float32, device=q_near.device)
            tile = max(blockwise.BAND_TILE, band.shape[-1] - 1)
            out, _ = band_then_far(
                q_near,
                k_near,
                v,
                band,
                tile,
                ceil_to(blockwise.BAND_CHUNK, tile),
                1.0 / math.sqrt(hd),
                far=(q_far, k_far),
            )
            return out
    return _blocked_remapped(q_near, k_near, q_far, k_far, v, window, far_keys, positions, bias, max_block)


def _blocked_remapped(
    q_near, k_near, q_far, k_far, v, window: int, far_keys: int | None, positions, bias, max_block: int
) -> Tensor:
    """The portable form of ``remapped_attention``: per block of queries [a, b), the window's keys
    [a - W + 1, b) scored near and the far keys ([0, b), or the first ``far_keys``) scored far,
    each masked to its side of the window, in one softmax. Differentiable."""
    B, H, T, hd = q_near.shape
    scale = 1.0 / math.sqrt(hd)
    positions = torch.arange(T, device=q_near.device) if positions is None else positions
    far_span = T if far_keys is None else min(far_keys, T)
    block = max(16, min(max_block, blockwise.BIAS_BLOCK_ELEMENTS // max(1, B * H * (far_span + window + max_block))))
    out = RowBlocks((B, H, T, v.shape[-1]), v)
    for start in range(0, T, block):
        end = min(start + block, T)
        rows = slice(start, end)
        near = slice(max(0, start - window + 1), end)
        far = slice(0, min(end, far_span))
        near_scores = q_near[:, :, rows] @ k_near[:, :, near].transpose(-1, -2) * scale  # (B, H, Bq, Nn)
        far_scores = q_far[:, :, rows] @ k_far[:, :, far].transpose(-1, -2) * scale  # (B, H, Bq, Nf)
        if bias is not None:
            near_scores = near_scores + bias("near", q_near[:, :, rows], rows, near)
            far_scores = far_scores + bias("far", q_far[:, :, rows], rows, far)
        near_distance = positions[rows, None] - positions[None, near]  # (Bq, Nn)
        far_distance = positions[rows, None] - positions[None, far]  # (Bq, Nf)
        near_scores = near_scores.masked_fill((near_distance < 0) | (near_distance >= window), float("-inf"))
        far_scores = far_scores.masked_fill(far_distance < window, float("-inf"))
        weights = torch.softmax(torch.cat((far_scores, near_scores), dim=-1).float(), dim=-1).to(
            v.dtype
        )  # (B, H, Bq, Nf + Nn)
        out.add(start, end, weights @ torch.cat((v[:, :, far], v[:, :, near]), dim=2))  # (B, H, Bq, hd)
    return out.result()  # (B, H, T, hd)


def dual_chunk_attention(
    q_intra: Tensor, q_successive: Tensor, q_inter: Tensor, k: Tensor, v: Tensor, chunk: int, max_block: int = 1024
) -> Tensor:
    """Causal attention over consecutive tokens cut into chunks of ``chunk``, each query taking one
    of three rotations by where the key is (An et al., 2024): ``q_intra`` for keys in its own chunk,
    ``q_successive`` for the previous chunk, ``q_inter`` for every chunk before that; ``k`` is the
    one rotation of the keys. All (B, H, T, hd) -> (B, H, T, hd).

    Each block of queries lies inside one chunk, so its three key sets are three slices: work T^2/2
    as plain attention. On CPU without autograd each chunk is three fused flash-attention calls
    (causal within the chunk, all visible in the two others) merged by their log-sum-exps; otherwise
    explicit scores, one block (Bq x T) at a time. Memory is bounded at any length either way.
    """
    B, H, T, hd = q_intra.shape
    if fast_path_available(q_intra) and not torch.is_grad_enabled() and q_intra.shape[-1] == v.shape[-1]:
        return _fused_dual_chunk(q_intra, q_successive, q_inter, k, v, chunk)
    scale = 1.0 / math.sqrt(hd)
    block = max(1, min(chunk, max_block, blockwise.BIAS_BLOCK_ELEMENTS // max(1, B * H * T)))
    out = RowBlocks((B, H, T, v.shape[-1]), v)
    for chunk_start in range(0, T, chunk):
        previous = max(0, chunk_start - chunk)  # keys before it: the inter-chunk part
        for start in range(chunk_start, min(chunk_start + chunk, T), block):
            end = min(start + block, chunk_start + chunk, T)
            rows = slice(start, end)
            inter = q_inter[:, :, rows] @ k[:, :, :previous].transpose(-1, -2) if previous else None
            successive = q_successive[:, :, rows] @ k[:, :, previous:chunk_start].transpose(-1, -2)  # (B,H,Bq,<=s)
            intra = q_intra[:, :, rows] @ k[:, :, chunk_start:end].transpose(-1, -2)  # (B, H, Bq, end - cs)
            future = torch.arange(start, end, device=k.device)[:, None] < torch.arange(
                chunk_start, end, device=k.device
            )
            intra = intra.masked_fill(future, float("-inf"))
            parts = [part for part in (inter, successive, intra) if part is not None]
            weights = torch.softmax(torch.cat(parts, dim=-1).float() * scale, dim=-1).to(v.dtype)  # (B, H, Bq, end)
            out.add(start, end, weights @ v[:, :, :end])  # keys [0, previous) + [previous, cs) + [cs, end)
    return out.result()


def _fused_dual_chunk(q_intra, q_successive, q_inter, k, v, chunk: int) -> Tensor:
    """``dual_chunk_attention`` through the CPU flash kernel, one chunk of queries at a time."""
    B, H, T, hd = q_intra.shape
    scale = 1.0 / math.sqrt(hd)
    out = torch.empty_like(v)
    with torch.autocast(v.device.type, enabled=False):
        for start in range(0, T, chunk):
            end, previous = min(start + chunk, T), max(0, start - chunk)
            rows = slice(start, end)
            y, lse = flash(q_intra[:, :, rows], k[:, :, rows], v[:, :, rows], True, scale)
            if start:  # the previous chunk, then every chunk before it: all visible
                parts = [(q_successive, slice(previous, start)), (q_inter, slice(0, previous))]
                for q_part, keys in parts if previous else parts[:1]:
                    y_part, lse_part = flash(q_part[:, :, rows], k[:, :, keys], v[:, :, keys], False, scale)
                    y, lse = merge_partial(y, lse, y_part, lse_part)
            out[:, :, rows] = y.to(v.dtype)
    return out
