"""The formulas RoPE's frequency methods share (YaRN's ramp and temperature, the default frequencies).

Each frequency method is one file in ``poscli/extension/methods/`` (a ``FrequencyMethod``) that maps
(head_dim, base, factor, original_length, seq_len, options) to the RoPE inverse frequencies and an
attention scale, following the conventions of ``modeling_rope_utils.py`` in the transformers
library: the attention scale multiplies both cos and sin, i.e. both q and k, so the attention
logits scale by its square.

Notation (the conventions of transformers' ``modeling_rope_utils.py``): d rotary dims, b base, s factor
(= target length / original length), L the original (trained) length,
inv_freq_i = b^(-2i/d) for i = 0 .. d/2 - 1.

The entry point is ``poscli.extension.methods.rope_parameters``::

    inv_freq, attention_scale = rope_parameters("yarn", head_dim=32, base=10000, factor=16,
                                                original_length=256)
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from poscli.errors import PoscliError


def default_inv_freq(head_dim: int, base: float) -> Tensor:
    """inv_freq_i = base^(-2i/d), computed in float64 then stored as float32. (d/2,)"""
    return (base ** (-torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)).to(torch.float32)


def yarn_attention_scale(factor: float) -> float:
    """YaRN's temperature: sqrt(1/t) = 0.1 ln(s) + 1 for s > 1 (Peng et al., 2023, eq. 22)."""
    return 0.1 * math.log(factor) + 1.0 if factor > 1 else 1.0


def check_ramp(beta_fast: float, beta_slow: float) -> None:
    """NTK-by-parts' ramp runs from ``beta_fast`` rotations down to ``beta_slow``: both positive, fast above slow."""
    if not beta_fast > beta_slow > 0:
        raise PoscliError(
            f"--beta-fast {beta_fast:g} and --beta-slow {beta_slow:g}: both must be positive and --beta-fast the "
            "larger (defaults 32 and 1)"
        )


def ntk_by_parts_inv_freq(
    head_dim: int, base: float, factor: float, original_length: int, beta_fast: float, beta_slow: float
) -> Tensor:
    """The "NTK-by-parts" frequencies of Peng et al. (2023, section 3.2, eq. 17-18). (d/2,)

    r_i = L / lambda_i is the number of rotations dimension i makes over the original length L.
    Dimensions with r_i > beta_fast keep their trained frequency (extrapolate), those with
    r_i < beta_slow are divided by s (interpolate), and a linear ramp in i blends between them:
    the ramp's ends are the dimensions where r = beta_fast and r = beta_slow, floored and ceiled
    as transformers' ``_compute_yarn_parameters`` does. Betas out of range are a one-line error
    (``check_ramp``) for every method built on the ramp (ntk-by-parts, yarn and its variants).
    """
    low, high = ramp_bounds(head_dim, base, original_length, beta_fast, beta_slow)
    ramp = ((torch.arange(head_dim // 2, dtype=torch.float32) - low) / (high - low)).clamp(0, 1)  # (d/2,)
    extrapolation_weight = 1 - ramp  # 1: keep the trained frequency (high frequencies), 0: interpolate
    inv_freq = default_inv_freq(head_dim, base)
    return (inv_freq / factor) * (1 - extrapolation_weight) + inv_freq * extrapolation_weight


def ramp_bounds(
    head_dim: int, base: float, original_length: int, beta_fast: float, beta_slow: float, truncate: bool = True
) -> tuple[float, float]:
    """NTK-by-parts' ramp ends as pair indices (low, high): pairs up to ``low`` keep their trained
    frequency, pairs from ``high`` on are interpolated, those between are blended (Peng et al., 2023,
    eq. 17-18). A pair's end is where it makes ``beta_fast`` (low) or ``beta_slow`` (high) turns over
    the original length, floored and ceiled (``truncate``) as transformers' ``_compute_yarn_parameters``
    does; equal ends are pulled 0.001 apart, as there, so the ramp never divides by zero."""
    check_ramp(beta_fast, beta_slow)

    def correction_dim(rotations: float) -> float:
        # the dimension whose wavelength makes `rotations` turns over the original length
        return head_dim * math.log(original_length / (rotations * 2 * math.pi)) / (2 * math.log(base))

    low, high = correction_dim(beta_fast), correction_dim(beta_slow)
    if truncate:
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, head_dim - 1)
    if low == high:
        high += 0.001  # avoid a division by zero in the ramp
    return low, high


def chosen_attention_scale(attention_factor: float, default: float) -> float:
    """``--attention-factor``: 0 (unset) keeps the method's own scale; a positive value replaces it."""
    if attention_factor < 0:
        raise PoscliError(f"--attention-factor {attention_factor:g}: give a positive scale, e.g. 1.0 (or leave it out)")
    return attention_factor if attention_factor > 0 else default


def read_factors(path) -> dict[str, tuple[float, ...]]:
    """LongRoPE's rescale factors from a JSON file: {"long_factor": [...], "short_factor": [...]}
    (short optional), as transformers' ``rope_scaling`` holds them."""
    import json
    from pathlib import Path

    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise PoscliError(f"--factors {path}: cannot read it as JSON ({error})") from None
    if not isinstance(data, dict) or "long_factor" not in data or set(data) - {"long_factor", "short_factor"}:
        raise PoscliError(
            f'--factors {path}: expected {{"long_factor": [...], "short_factor": [...]}} (short optional)'
        )
    try:
        return {key: tuple(float(value) for value in values) for key, values in data.items()}
    except (TypeError, ValueError):
        raise PoscliError(f"--factors {path}: every factor must be a number") from None
