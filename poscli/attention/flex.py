"""Fused causal attention with a score bias through FlexAttention (Dong et al., 2024,
``torch.nn.attention.flex_attention``): the bias as a ``score_mod`` function of (score, batch,
head, query index, key index), the causal mask as a block mask, so a compiled kernel never
materialises the T x T scores, on CUDA and on CPU (inductor's C++ kernel).

Where the score_mod comes from:

- an encoding's ``relative_bias`` (ALiBi's slopes, T5's and Shaw's band): ``relative_score_mod``;
- otherwise its ``score_mod`` hook (KERPLE, FIRE, a user-defined encoding that gives one);
- otherwise its table over distances (``bias_of_distance``, a user-defined encoding): ``table_score_mod``.

``flex_mode`` says when the model takes this path: "auto" (the default) on CUDA, where poscli's
CPU fast paths do not run; "always" on every device (before the CPU fast paths); "never" (the
CPU fast paths, else the portable blocked dense-mask path). Set it with ``set_flex_mode`` or the
environment variable ``POSCLI_FLEX``. The dense ``score_bias`` stays the test oracle
(tests/attention/test_flex.py: forward and gradients against float64, across block boundaries).

Shape legend: B batch, H heads, T sequence length, hd head dimension, W band width.
"""

from __future__ import annotations

import functools
import os
import warnings
from collections.abc import Callable

import torch
from torch import Tensor

from poscli.attention.blockwise import RelativeBias
from poscli.attention.distance_attention import DistanceTable
from poscli.errors import PoscliError

MODES = ("auto", "always", "never")
ScoreMod = Callable[[Tensor, Tensor, Tensor, Tensor, Tensor], Tensor]

_mode = os.environ.get("POSCLI_FLEX", "auto")
_compile_failed = False  # set after the compiled kernel failed once: the eager form from then on


def set_flex_mode(mode: str) -> None:
    """When biased attention runs through FlexAttention: auto (on CUDA), always, never."""
    global _mode
    if mode not in MODES:
        raise PoscliError(f"flex mode {mode!r} is not one of {', '.join(MODES)} (POSCLI_FLEX)")
    _mode = mode


def flex_mode() -> str:
    if _mode not in MODES:
        raise PoscliError(f"POSCLI_FLEX={_mode!r} is not one of {', '.join(MODES)}; e.g. POSCLI_FLEX=always")
    return _mode


def _probe_flex() -> bool:
    import importlib

    try:
        importlib.import_module("torch.nn.attention.flex_attention")
    except ImportError:
        return False
    return True


_FLEX_AVAILABLE = _probe_flex()  # once, at import: the model asks on every forward, also under torch.compile


def flex_available() -> bool:
    """Whether this torch has FlexAttention (2.5 and later)."""
    return _FLEX_AVAILABLE


def wanted(q: Tensor) -> bool:
    """Whether the model should take the flex path for this tensor's device. On CPU only without
    gradients: torch's FlexAttention has no CPU backward."""
    mode = flex_mode()
    if mode == "never" or not flex_available():
        return False
    if q.device.type == "cuda":
        return True
    return mode == "always" and q.device.type == "cpu" and not (torch.is_grad_enabled() and q.requires_grad)


def relative_score_mod(bias: RelativeBias) -> ScoreMod:
    """A ``RelativeBias`` as a score_mod: -slopes[h] (i - j) (ALiBi), or band[b, h, i, i - j] for
    distances below the band's width W and nothing beyond (T5, Shaw). Consecutive positions."""
    if bias.slopes is not None:
        slopes = bias.slopes.float()  # (H,)

        def linear(score, b, h, q_idx, kv_idx):
            return score - slopes[h] * (q_idx - kv_idx)

        return linear
    band = bias.band  # (B|1, H, T|1, W)
    width, per_batch, per_query = band.shape[-1], band.shape[0] > 1, band.shape[2] > 1

    def banded(score, b, h, q_idx, kv_idx):
        distance = q_idx - kv_idx
        value = band[b if per_batch else 0, h, q_idx if per_query else 0, distance.clamp(0, width - 1)]
        return torch.where(distance < width, score + value, score)

    return banded


def score_mod_for(encoding, q: Tensor, positions: Tensor, layer: int, consecutive: bool = True) -> ScoreMod | None:
    """An encoding's bias as a score_mod: its own ``score_mod``, else its ``relative_bias``'s
    (which needs consecutive positions), else None."""
    score_mod = encoding.score_mod(q, positions, layer)
    if score_mod is None and consecutive and (relative := encoding.relative_bias(q, layer)) is not None:
        score_mod = relative_score_mod(relative)
    if (
        score_mod is None
        and consecutive
        and isinstance(form := encoding.distance_bias(positions, layer), DistanceTable)
    ):
        score_mod = table_score_mod(form.table)
    return score_mod


def table_score_mod(table: Tensor) -> ScoreMod:
    """A bias over distances (``bias_of_distance``: a user-defined encoding's table (H, T)) as a score_mod."""

    def distance_table(score, b, h, q_idx, kv_idx):
        return score + table[h, (q_idx - kv_idx).clamp(min=0)]

    return distance_table


def _causal(b, h, q_idx, kv_idx):
    return q_idx >= kv_idx


@functools.lru_cache(maxsize=16)
def causal_block_mask(length: int, device: str):
    """The causal block mask of a T x T attention (blocks above the diagonal skipped), cached per length."""
    from torch.nn.attention.flex_attention import create_block_mask

    return create_block_mask(_causal, B=None, H=None, Q_LEN=length, KV_LEN=length, device=device)


@functools.cache
def _compiled_flex():
    from torch.nn.attention.flex_attention import flex_attention

    return torch.compile(flex_attention, dynamic=False)


def flex_causal_attention(q: Tensor, k: Tensor, v: Tensor, score_mod: ScoreMod, compiled: bool | None = None) -> Tensor:
    """softmax(q k^T / sqrt(hd) + bias, causal) v with the bias given by ``score_mod``.
    q, k, v: (B, H, T, hd) -> (B, H, T, hd). ``compiled`` (default: unless already inside
    torch.compile) runs the fused kernel; eager FlexAttention is exact but materialises the scores."""
    from torch.nn.attention.flex_attention import flex_attention

    global _compile_failed
    T = q.shape[2]
    mask = causal_block_mask(T, str(q.device))
    if compiled is None:
        compiled = not torch.compiler.is_compiling() and not _compile_failed
    if not compiled:
        return flex_attention(q, k, v, score_mod=score_mod, block_mask=mask)
    try:
        return _compiled_flex()(q, k, v, score_mod=score_mod, block_mask=mask)
    except Exception as error:  # no Triton / C++ compiler: the eager form is exact, only slower
        _compile_failed = True
        reason = (str(error).strip().splitlines() or [type(error).__name__])[0][:160]
        warnings.warn(
            f"FlexAttention could not be compiled ({reason}); running it eagerly (exact, materialises the scores)",
            stacklevel=2,
        )
        return flex_attention(q, k, v, score_mod=score_mod, block_mask=mask)
