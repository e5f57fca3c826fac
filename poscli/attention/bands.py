"""The index work of banded scores: query tiles, the key windows each tile sees, a band laid out as
(tile, row, distance) and skewed to (tile, row, key) and back, and the shape a gradient is summed
back to."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

# Upper bound on the elements of one materialised score-bias block (B * H * Bq * Tk) in the
# fallback path: 2^25 float32 values = 128 MiB, however long the sequence is.


def spans(length: int, block: int) -> list[tuple[int, int]]:
    return [(start, min(start + block, length)) for start in range(0, length, block)]


def tiles(x: Tensor, tile: int) -> Tensor:
    """(B, H, T, hd) -> (B, H, ceil(T / tile), tile, hd), zero-padded at the end."""
    x = F.pad(x, (0, 0, 0, (-x.shape[2]) % tile))
    return x.unflatten(2, (-1, tile))


def windows(keys: Tensor, tile: int, width: int) -> Tensor:
    """Overlapping windows of tile + W - 1 keys, one per query tile. (B, H, W - 1 + n tile, hd) -> (B, H, n, N, hd)."""
    return keys.unfold(2, tile + width - 1, tile).transpose(-1, -2)


def fold_windows(windows: Tensor, width: int) -> Tensor:
    """Sum per-window gradients back onto the keys: the adjoint of ``windows``. -> (B, H, W - 1 + n tile, hd)."""
    B, H, n, near, hd = windows.shape
    tile = near - width + 1
    keys = torch.zeros(B, H, width - 1 + n * tile, hd, dtype=windows.dtype, device=windows.device)
    keys[:, :, width - 1 :] = windows[:, :, :, width - 1 :].flatten(2, 3)  # each window's own tile
    if width > 1:  # each window's first W - 1 rows are the end of the previous tile (or the padding)
        keys[:, :, : n * tile].unflatten(2, (n, tile))[:, :, :, : width - 1] += windows[:, :, :, : width - 1]
    return keys


def band_view(tiles: Tensor, width: int) -> Tensor:
    """The band of a tile as a strided view: (..., tile, N) -> (..., tile, W), row r's columns r .. r + W - 1.

    In a row-major (tile, N) block, entry (r, r + c) sits at r (N + 1) + c, so the band is the
    view with row stride N + 1 (the "skewing" of Huang et al., 2018, without the copies).
    """
    *lead, rows, near = tiles.shape
    assert tiles.stride(-1) == 1 and tiles.stride(-2) == near, "the band view needs row-major tiles"
    return tiles.as_strided((*lead, rows, width), (*tiles.stride()[:-2], near + 1, 1), tiles.storage_offset())


def skew(band_rows: Tensor, near: int) -> Tensor:
    """Lay per-query band values onto a tile of keys: (..., tile, W) -> (..., tile, N), zero off the band."""
    tiles = band_rows.new_zeros(*band_rows.shape[:-1], near)  # (..., tile, N)
    band_view(tiles, band_rows.shape[-1]).copy_(band_rows)
    return tiles


def unskew(tiles: Tensor, width: int) -> Tensor:
    """The inverse of ``skew``: (..., tile, N) -> (..., tile, W)."""
    return band_view(tiles.contiguous(), width)


def skew_rows(rows: Tensor, tile: int) -> Tensor:
    """(B, H, Tq, W) per-query values by reversed distance -> (B, H, n, tile, N) tiles, zero outside the band."""
    width = rows.shape[-1]
    return skew(tiles(rows, tile), tile + width - 1)


def ceil_to(n: int, multiple: int) -> int:
    return -(-n // multiple) * multiple


def sum_to(grad: Tensor, shape: torch.Size) -> Tensor:
    """Sum a gradient over the dimensions its input was broadcast along."""
    dims = [dim for dim, size in enumerate(shape) if size == 1 and grad.shape[dim] != 1]
    return grad.sum(dims, keepdim=True) if dims else grad
