"""Context extension for RoPE: a registry of frequency recipes with one signature.

Each method maps (head_dim, base, factor, original_length, seq_len, options) to the RoPE
inverse frequencies and an attention scale, following the conventions of
``modeling_rope_utils.py`` in the transformers library: the attention scale multiplies both
cos and sin, i.e. both q and k, so the attention logits scale by its square.

Notation (the conventions of transformers' ``modeling_rope_utils.py``): d rotary dims, b base, s factor
(= target length / original length), L the original (trained) length,
inv_freq_i = b^(-2i/d) for i = 0 .. d/2 - 1.

Public entry point::

    inv_freq, attention_scale = rope_parameters("yarn", head_dim=32, base=10000, factor=16,
                                                original_length=256)
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from poscli.errors import PoscliError

RopeRecipe = Callable[..., tuple[Tensor, float]]


@dataclass(frozen=True)
class Method:
    name: str
    recipe: RopeRecipe
    options: dict[str, float | tuple]  # option name -> default (a tuple: one value per frequency)
    description: str
    citation: str
    per_length: bool = False  # True: the frequencies depend on the length being run, recomputed per forward


METHODS: dict[str, Method] = {}


def register(name: str, description: str, citation: str, per_length: bool = False, **options: float):
    def decorator(recipe: RopeRecipe) -> RopeRecipe:
        METHODS[name] = Method(name, recipe, dict(options), description, citation, per_length)
        return recipe

    return decorator


def default_inv_freq(head_dim: int, base: float) -> Tensor:
    """inv_freq_i = base^(-2i/d), computed in float64 then stored as float32. (d/2,)"""
    return (base ** (-torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)).to(torch.float32)


@register("default", "plain RoPE, the frequencies as trained", "Su et al., 2021")
def _default(head_dim, base, factor, original_length, seq_len):
    return default_inv_freq(head_dim, base), 1.0


@register("pi", "Position Interpolation: every frequency divided by the factor", "Chen et al., 2023")
def _linear(head_dim, base, factor, original_length, seq_len):
    return default_inv_freq(head_dim, base) / factor, 1.0


@register("ntk", "NTK-aware: base raised to b * s^(d/(d-2)) once, for the factor", "bloc97, 2023 (reddit r/LocalLLaMA)")
def _ntk(head_dim, base, factor, original_length, seq_len):
    return default_inv_freq(head_dim, base * factor ** (head_dim / (head_dim - 2))), 1.0


@register(
    "dynamic-ntk",
    "dynamic NTK: base recomputed from the actual length when it exceeds the original",
    "emozilla, 2023 (reddit r/LocalLLaMA); transformers' 'dynamic'",
    per_length=True,
)
def _dynamic_ntk(head_dim, base, factor, original_length, seq_len):
    if seq_len is None or seq_len <= original_length:
        return default_inv_freq(head_dim, base), 1.0
    new_base = base * ((factor * seq_len / original_length) - (factor - 1)) ** (head_dim / (head_dim - 2))
    return default_inv_freq(head_dim, new_base), 1.0


def yarn_attention_scale(factor: float) -> float:
    """YaRN's temperature: sqrt(1/t) = 0.1 ln(s) + 1 for s > 1 (Peng et al., 2023, eq. 22)."""
    return 0.1 * math.log(factor) + 1.0 if factor > 1 else 1.0


def ntk_by_parts_inv_freq(
    head_dim: int, base: float, factor: float, original_length: int, beta_fast: float, beta_slow: float
) -> Tensor:
    """The "NTK-by-parts" frequencies of Peng et al. (2023, section 3.2, eq. 17-18). (d/2,)

    r_i = L / lambda_i is the number of rotations dimension i makes over the original length L.
    Dimensions with r_i > beta_fast keep their trained frequency (extrapolate), those with
    r_i < beta_slow are divided by s (interpolate), and a linear ramp in i blends between them:
    the ramp's ends are the dimensions where r = beta_fast and r = beta_slow, floored and ceiled
    as transformers' ``_compute_yarn_parameters`` does.
    """

    def correction_dim(rotations: float) -> float:
        # the dimension whose wavelength makes `rotations` turns over the original length
        return head_dim * math.log(original_length / (rotations * 2 * math.pi)) / (2 * math.log(base))

    low = max(math.floor(correction_dim(beta_fast)), 0)
    high = min(math.ceil(correction_dim(beta_slow)), head_dim - 1)
    if low == high:
        high += 0.001  # avoid a division by zero in the ramp
    ramp = ((torch.arange(head_dim // 2, dtype=torch.float32) - low) / (high - low)).clamp(0, 1)  # (d/2,)
    extrapolation_weight = 1 - ramp  # 1: keep the trained frequency (high frequencies), 0: interpolate
    inv_freq = default_inv_freq(head_dim, base)
    return (inv_freq / factor) * (1 - extrapolation_weight) + inv_freq * extrapolation_weight


@register(
    "yarn",
    "YaRN: NTK-by-parts ramp between interpolation and extrapolation, plus attention temperature",
    "Peng et al., 2023",
    beta_fast=32.0,
    beta_slow=1.0,
    attention_factor=0.0,
)
def _yarn(head_dim, base, factor, original_length, seq_len, beta_fast=32.0, beta_slow=1.0, attention_factor=0.0):
    """NTK-by-parts frequencies and the temperature sqrt(1/t) = 0.1 ln s + 1 on q and k (eq. 22);
    ``attention_factor`` > 0 replaces the temperature (transformers' ``attention_factor``): the
    paper's constants were fitted on LLaMA with a 4096-token original length."""
    scale = chosen_attention_scale(attention_factor, yarn_attention_scale(factor))
    return ntk_by_parts_inv_freq(head_dim, base, factor, original_length, beta_fast, beta_slow), scale


@register(
    "ntk-by-parts",
    "NTK-by-parts: YaRN's ramp between interpolation and extrapolation, without its temperature",
    "Peng et al., 2023 (section 3.2)",
    beta_fast=32.0,
    beta_slow=1.0,
)
def _ntk_by_parts(head_dim, base, factor, original_length, seq_len, beta_fast=32.0, beta_slow=1.0):
    return ntk_by_parts_inv_freq(head_dim, base, factor, original_length, beta_fast, beta_slow), 1.0


@register(
    "llama3",
    "Llama 3.1: long wavelengths divided by the factor, short kept, a smooth blend between",
    "Meta, Llama 3.1 (2024)",
    low_freq_factor=1.0,
    high_freq_factor=4.0,
)
def _llama3(head_dim, base, factor, original_length, seq_len, low_freq_factor=1.0, high_freq_factor=4.0):
    inv_freq = default_inv_freq(head_dim, base)
    wavelength = 2 * math.pi / inv_freq  # (d/2,)
    low_freq_wavelength = original_length / low_freq_factor
    high_freq_wavelength = original_length / high_freq_factor
    scaled = torch.where(wavelength > low_freq_wavelength, inv_freq / factor, inv_freq)
    smooth = (original_length / wavelength - low_freq_factor) / (high_freq_factor - low_freq_factor)
    blended = (1 - smooth) * scaled / factor + smooth * scaled
    medium = (wavelength >= high_freq_wavelength) & (wavelength <= low_freq_wavelength)
    return torch.where(medium, blended, scaled), 1.0


def chosen_attention_scale(attention_factor: float, default: float) -> float:
    """``--attention-factor``: 0 (unset) keeps the method's own scale; a positive value replaces it."""
    if attention_factor < 0:
        raise PoscliError(f"--attention-factor {attention_factor:g}: give a positive scale, e.g. 1.0 (or leave it out)")
    return attention_factor if attention_factor > 0 else default


def longrope_attention_scale(factor: float, original_length: int) -> float:
    """LongRoPE's attention factor sqrt(1 + ln s / ln L) for s > 1 (Ding et al., 2024), as
    transformers' ``_compute_longrope_parameters`` sets it."""
    return math.sqrt(1 + math.log(factor) / math.log(original_length)) if factor > 1 else 1.0


@register(
    "longrope",
    "LongRoPE: a searched rescale factor per frequency, long and short sets, attention factor sqrt(1 + ln s / ln L)",
    "Ding et al., 2024",
    per_length=True,
    long_factor=(),
    short_factor=(),
    attention_factor=0.0,
)
def _longrope(head_dim, base, factor, original_length, seq_len, long_factor=(), short_factor=(), attention_factor=0.0):
    """inv_freq_i = 1 / (lambda_i * b^(2i/d)) with lambda the long factors when the length run
    exceeds L and the short ones otherwise (all 1, the trained frequencies, when not given), as
    transformers' ``_compute_longrope_parameters``; ``attention_factor`` > 0 replaces the default."""
    half = head_dim // 2
    if len(long_factor) != half:
        raise PoscliError(
            f"--method longrope needs {half} long factors (one per frequency, d/2 = {half}), got {len(long_factor)}: "
            'give --factors FILE, a JSON file {"long_factor": [...], "short_factor": [...]}'
        )
    if short_factor and len(short_factor) != half:
        raise PoscliError(f"--method longrope needs {half} short factors (or none), got {len(short_factor)}")
    chosen = long_factor if seq_len is not None and seq_len > original_length else (short_factor or (1.0,) * half)
    rescale = torch.tensor([float(value) for value in chosen], dtype=torch.float64)  # (d/2,)
    if not bool((rescale > 0).all()):
        raise PoscliError("--method longrope: every rescale factor must be positive")
    exponent = torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim  # (d/2,)
    inv_freq = (1.0 / (rescale * base**exponent)).to(torch.float32)
    scale = chosen_attention_scale(attention_factor, longrope_attention_scale(factor, original_length))
    return inv_freq, scale


@register(
    "base",
    "base change: new base given by --rope-base (Llama 3 trains at 500000; Code Llama moved 10000 to 1e6)",
    "Rozière et al., 2023 (Code Llama); Xiong et al., 2023",
    rope_base=0.0,
)
def _base(head_dim, base, factor, original_length, seq_len, rope_base=0.0):
    if rope_base <= 1:
        raise PoscliError("--method base needs the new base: add e.g. --rope-base 500000")
    return default_inv_freq(head_dim, rope_base), 1.0


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


def method_names() -> list[str]:
    return list(METHODS)


def get_method(name: str) -> Method:
    if name not in METHODS:
        raise PoscliError(
            f"unknown extension method {name!r}; choose one of: {', '.join(METHODS)} (e.g. --method yarn)"
        )
    return METHODS[name]


def check_options(method: str, options: dict[str, float]) -> dict[str, float]:
    """The method's options with defaults filled in; an option it does not take is an error."""
    return with_defaults(method, get_method(method).options, options)


def with_defaults(method: str, known: dict, options: dict[str, float]) -> dict[str, float]:
    """``known`` (option -> default) updated by ``options``; an option not in ``known`` is a one-line
    error naming the flags the method takes (extension methods here and in ``poscli.extension.remap``)."""
    unknown = sorted(set(options) - set(known))
    if unknown:
        flags = ", ".join("--" + name.replace("_", "-") for name in unknown)
        takes = ", ".join("--" + name.replace("_", "-") for name in known) or "no options"
        raise PoscliError(f"--method {method} does not take {flags}; it takes {takes}")
    return {**known, **options}


def rope_parameters(
    method: str,
    head_dim: int,
    base: float,
    factor: float,
    original_length: int,
    seq_len: int | None = None,
    **options: float,
) -> tuple[Tensor, float]:
    """RoPE inverse frequencies (d/2,) float32 and the attention scale for ``method``.

    Args:
        method: one of ``method_names()``: default, pi, ntk, dynamic-ntk, yarn, ntk-by-parts, llama3, longrope, base.
        head_dim: rotary dimensions d (even).
        base: the base the model was trained with.
        factor: scale factor s = target length / original length (>= 1).
        original_length: L, the length the model was trained at.
        seq_len: the length being run; ``dynamic-ntk`` and ``longrope`` use it.
        options: the method's own options (``beta_fast``/``beta_slow`` for yarn and ntk-by-parts,
            ``attention_factor`` for yarn and longrope, ``long_factor``/``short_factor`` for longrope,
            ``low_freq_factor``/``high_freq_factor`` for llama3, ``rope_base`` for base).
    """
    if head_dim < 4 or head_dim % 2:
        raise PoscliError(f"rotary dimension must be even and at least 4, got {head_dim}")
    if factor < 1:
        raise PoscliError(f"the scale factor must be at least 1, got {factor}")
    if original_length < 1:
        raise PoscliError(f"the original length must be positive, got {original_length}")
    return get_method(method).recipe(head_dim, base, factor, original_length, seq_len, **check_options(method, options))


# poscli method -> transformers' rope_type (``modeling_rope_utils.ROPE_INIT_FUNCTIONS``), for ``poscli export``.
TRANSFORMERS_ROPE_TYPES = {
    "pi": "linear",
    "dynamic-ntk": "dynamic",
    "yarn": "yarn",
    "ntk-by-parts": "yarn",
    "llama3": "llama3",
    "longrope": "longrope",
}


def transformers_rope(
    method: str, rotary_dim: int, base: float, factor: float, original_length: int, **options
) -> tuple[float, dict | None]:
    """The same frequencies in transformers' terms: (rope_theta, rope_scaling or None).

    NTK-aware and a base change are plain RoPE at another base, b s^(d/(d-2)) and --rope-base;
    NTK-by-parts is YaRN with attention_factor 1; the others are transformers' own rope types,
    with ``original_max_position_embeddings`` the train length (dynamic NTK reads it from
    max_position_embeddings instead, which the exporter sets to the train length).
    """
    options = check_options(method, options)
    if method == "default":
        return base, None
    if method == "ntk":
        return base * factor ** (rotary_dim / (rotary_dim - 2)), None
    if method == "base":
        return options["rope_base"], None
    rope_type = TRANSFORMERS_ROPE_TYPES[method]
    scaling: dict = {"rope_type": rope_type, "factor": float(factor)}
    if rope_type != "linear" and rope_type != "dynamic":
        scaling["original_max_position_embeddings"] = original_length
    if rope_type == "yarn":
        scaling.update(beta_fast=options["beta_fast"], beta_slow=options["beta_slow"])
        attention_factor = options.get("attention_factor", 1.0) if method == "yarn" else 1.0
        if attention_factor > 0:
            scaling["attention_factor"] = attention_factor
    if rope_type == "llama3":
        scaling.update(low_freq_factor=options["low_freq_factor"], high_freq_factor=options["high_freq_factor"])
    if rope_type == "longrope":
        half = rotary_dim // 2
        scaling.update(
            long_factor=list(options["long_factor"]), short_factor=list(options["short_factor"] or (1.0,) * half)
        )
        if options["attention_factor"] > 0:
            scaling["attention_factor"] = options["attention_factor"]
    return base, scaling
