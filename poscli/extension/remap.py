"""Attention that places far keys at other positions, applied at inference without training:
Self-Extend, ReRoPE, Leaky ReRoPE and StreamingLLM's attention sinks.

Each method keeps the true positions for a query i and the keys inside a window behind it
(0 <= i - j < W) and scores every farther key at remapped positions instead: the query at
p_q(i), the key at p_k(j), so a relative encoding sees the distance p_q(i) - p_k(j).

===============  ======  ========================  ===========  =========================
method           window  p_q(i)                    p_k(j)       far keys visible
===============  ======  ========================  ===========  =========================
self-extend      W       i // G + W - W // G       j // G       all (Jin et al., 2024)
rerope           w       w                         0            all (Su, 2023)
leaky-rerope     w       w + (i - w) / k           j / k        all (Su, 2023)
sinks            R       min(i, S + R - 1)         j            the first S (Xiao et al., 2024)
===============  ======  ========================  ===========  =========================

Self-Extend's far distance is i // G - j // G + W - W // G (grouped positions, shifted so they
continue the window); a model trained at L then reaches about (L - W) * G + W tokens. ReRoPE
clips every distance at w; Leaky ReRoPE continues it with slope 1 / k, w + (d - w) / k.
StreamingLLM keeps S sink tokens and the R most recent in a cache of S + R slots and numbers the
positions within the cache: the query sits in the last slot, a recent key at its true distance,
sink s at distance min(i, S + R - 1) - s, everything else is evicted. Encodings that add
positions at the input (learned, sinusoidal) embed token i at its cache slot, min(i, S + R - 1),
which is what a key-value cache that re-numbers slots computes token by token.

The methods are a registry of functions with one signature, ``plan(original_length, target,
**options) -> Remap``, that fill in the defaults; ``poscli extend RUN --method self-extend``
stores the result in the run's ``model.remap`` and :func:`poscli.attention.blockwise.remapped_attention`
computes it, memory bounded at any length.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass

import torch
from torch import Tensor

from poscli.errors import PoscliError


@dataclass(frozen=True)
class Remap:
    """A resolved remapping. method: its registry name; window: W (w, R); group: G (self-extend);
    leak: k (leaky-rerope; inf for ReRoPE's clip); sinks: S (sinks; 0 otherwise)."""

    method: str
    window: int
    group: int = 1
    leak: float = math.inf
    sinks: int = 0

    def to_dict(self) -> dict:
        return {k: (None if v == math.inf else v) for k, v in asdict(self).items()}

    @classmethod
    def from_dict(cls, values: dict) -> Remap:
        values = dict(values)
        if values.get("leak") is None:
            values["leak"] = math.inf
        return cls(**values)

    @property
    def far_keys(self) -> int | None:
        """How many keys from position 0 may be seen beyond the window (None: all of them)."""
        return self.sinks if self.method == "sinks" else None

    @property
    def cache_slots(self) -> int:
        return self.sinks + self.window

    def far_positions(self, positions: Tensor) -> tuple[Tensor, Tensor]:
        """Positions at which queries and keys meet beyond the window. positions: (T,) -> (T,), (T,)."""
        i = positions.to(torch.float64)
        if self.method == "self-extend":
            G, W = self.group, self.window
            return torch.div(positions, G, rounding_mode="floor").double() + (W - W // G), torch.div(
                positions, G, rounding_mode="floor"
            ).double()
        if self.method in ("rerope", "leaky-rerope"):
            if self.leak == math.inf:
                return torch.full_like(i, float(self.window)), torch.zeros_like(i)
            return self.window + (i - self.window) / self.leak, i / self.leak
        if self.method == "sinks":
            return i.clamp(max=self.cache_slots - 1), i
        raise PoscliError(f"unknown attention remapping {self.method!r}")

    def embed_positions(self, positions: Tensor) -> Tensor:
        """The positions an absolute encoding embeds each token at: its cache slot for sinks. (T,)"""
        return positions.clamp(max=self.cache_slots - 1) if self.method == "sinks" else positions

    def describe(self) -> str:
        if self.method == "self-extend":
            return f"Self-Extend W={self.window}, G={self.group}"
        if self.method == "sinks":
            return f"{self.sinks} sinks + {self.window} recent"
        if self.leak == math.inf:
            return f"ReRoPE w={self.window}"
        return f"Leaky ReRoPE w={self.window}, k={self.leak:g}"


@dataclass(frozen=True)
class Method:
    name: str
    plan: Callable[..., Remap]
    options: dict[str, float]  # option name -> default (0: chosen from the lengths)
    description: str
    citation: str
    any_encoding: bool  # True: applies to every encoding (sinks); False: rotary only


METHODS: dict[str, Method] = {}


def register(name: str, description: str, citation: str, any_encoding: bool = False, **options: float):
    def decorator(plan: Callable[..., Remap]) -> Callable[..., Remap]:
        METHODS[name] = Method(name, plan, dict(options), description, citation, any_encoding)
        return plan

    return decorator


def _whole(value: float, flag: str, low: int = 1) -> int:
    if value != int(value) or value < low:
        raise PoscliError(f"{flag} must be a whole number of at least {low}, got {value:g}")
    return int(value)


def _window(window: float, original_length: int, default: int) -> int:
    window = _whole(window, "--window") if window else default
    if window >= original_length:
        raise PoscliError(f"--window {window} must be shorter than the run's train length {original_length}")
    return window


@register(
    "self-extend",
    "Self-Extend: exact attention in a neighbour window, grouped positions beyond it (no training)",
    "Jin et al., 2024",
    window=0.0,
    group=0.0,
)
def _self_extend(original_length: int, target: int, window: float = 0.0, group: float = 0.0) -> Remap:
    """Defaults: W = L / 4 and the smallest G whose farthest distance at the target,
    (target - 1) // G + W - W // G, is one the model was trained on (< L): the paper's reach
    (L - W) G + W made exact."""
    W = _window(window, original_length, max(1, original_length // 4))
    if group:
        return Remap("self-extend", W, group=_whole(group, "--group"))
    G = max(1, math.ceil((target - W) / (original_length - W)))
    while (target - 1) // G + W - W // G > original_length - 1:
        G += 1
    return Remap("self-extend", W, group=G)


@register("rerope", "ReRoPE: distances clipped at a window w (no training)", "Su, 2023", window=0.0)
def _rerope(original_length: int, target: int, window: float = 0.0) -> Remap:
    """Default w = L / 4, as Su's w = 1024 for LLaMA-2's 4096."""
    return Remap("rerope", _window(window, original_length, max(1, original_length // 4)))


@register(
    "leaky-rerope",
    "Leaky ReRoPE: distances beyond a window w grow with slope 1/k (no training)",
    "Su, 2023",
    window=0.0,
    leak=0.0,
)
def _leaky_rerope(original_length: int, target: int, window: float = 0.0, leak: float = 0.0) -> Remap:
    """Defaults: w = L / 4 and k such that the target's longest distance maps to L - 1:
    w + (target - 1 - w) / k = L - 1."""
    w = _window(window, original_length, max(1, original_length // 4))
    if leak and leak < 1:
        raise PoscliError(f"--leak must be at least 1, got {leak:g}")
    k = leak or max(1.0, (target - 1 - w) / (original_length - 1 - w))
    return Remap("leaky-rerope", w, leak=float(k))


@register(
    "sinks",
    "StreamingLLM: the first S tokens (attention sinks) and the R most recent, positions within the cache (no "
    "training)",
    "Xiao et al., 2024",
    any_encoding=True,
    sinks=4.0,
    window=0.0,
)
def _sinks(original_length: int, target: int, sinks: float = 4.0, window: float = 0.0) -> Remap:
    """Defaults: 4 sinks (the paper's) and R = L - S recent keys, a cache of the train length."""
    S = _whole(sinks, "--sinks", low=0)
    if original_length <= S:
        raise PoscliError(
            f"--sinks {S} leaves no room for recent tokens in a cache of the train length {original_length}"
        )
    R = _whole(window, "--window") if window else original_length - S
    if original_length < S + R:
        raise PoscliError(
            f"--sinks {S} + --window {R} is more than the train length {original_length}: "
            f"the cache would hold positions the model never saw; use --window {original_length - S} or less"
        )
    return Remap("sinks", R, sinks=S)


def method_names() -> list[str]:
    return list(METHODS)


def get_method(name: str) -> Method:
    if name not in METHODS:
        raise PoscliError(f"unknown attention remapping {name!r}; choose one of: {', '.join(METHODS)}")
    return METHODS[name]


def check_options(method: str, options: dict[str, float]) -> dict[str, float]:
    from poscli.extension.scaling import with_defaults

    return with_defaults(method, get_method(method).options, options)


def plan(method: str, original_length: int, target: int, **options: float) -> Remap:
    """The resolved remapping of ``method`` for a model trained at ``original_length`` run up to ``target``."""
    return get_method(method).plan(original_length, target, **check_options(method, options))


def build(config) -> Remap | None:
    """The remapping a model config holds (``model.remap``), or None."""
    return Remap.from_dict(config.remap) if config.remap else None
