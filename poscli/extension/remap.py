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

Each method is one file in ``poscli/extension/methods/`` (a ``RemapMethod``) with a ``plan(original_length,
target, **options)`` that fills in the defaults and returns its ``Remap`` subclass; ``poscli extend RUN
--method self-extend`` stores it in the run's ``model.remap`` and
:func:`poscli.attention.remapped.remapped_attention` computes it, memory bounded at any length.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from torch import Tensor

from poscli.errors import PoscliError


@dataclass(frozen=True)
class Remap:
    """A resolved remapping; each method's file subclasses it with its far positions. method: its
    registry name; window: W (w, R); group: G (self-extend); leak: k (leaky-rerope; inf for ReRoPE's
    clip); sinks: S (sinks; 0 otherwise)."""

    method: str
    window: int
    group: int = 1
    leak: float = math.inf
    sinks: int = 0

    def to_dict(self) -> dict:
        return {k: (None if v == math.inf else v) for k, v in asdict(self).items()}

    @classmethod
    def from_dict(cls, values: dict) -> Remap:
        """This class from config.json's ``model.remap`` (``poscli.extension.methods.remap_from_dict``
        picks the method's own subclass)."""
        return cls(**{**values, "leak": math.inf if values.get("leak") is None else values["leak"]})

    @property
    def far_keys(self) -> int | None:
        """How many keys from position 0 may be seen beyond the window (None: all of them)."""
        return None

    @property
    def cache_slots(self) -> int:
        return self.sinks + self.window

    def far_positions(self, positions: Tensor) -> tuple[Tensor, Tensor]:
        """Positions at which queries and keys meet beyond the window. positions: (T,) -> (T,), (T,) float64."""
        raise NotImplementedError(f"remapping {self.method!r} must define far_positions")

    def embed_positions(self, positions: Tensor) -> Tensor:
        """The positions an absolute encoding embeds each token at (its true one by default). (T,)"""
        return positions

    def describe(self) -> str:
        raise NotImplementedError(f"remapping {self.method!r} must define describe")


def whole(value: float, flag: str, low: int = 1) -> int:
    """``value`` as a whole number of at least ``low``, or the one-line error naming ``flag``."""
    if value != int(value) or value < low:
        raise PoscliError(f"{flag} must be a whole number of at least {low}, got {value:g}")
    return int(value)


def neighbour_window(window: float, original_length: int, default: int) -> int:
    """``--window`` (or ``default`` when 0), shorter than the train length."""
    window = whole(window, "--window") if window else default
    if window >= original_length:
        raise PoscliError(f"--window {window} must be shorter than the run's train length {original_length}")
    return window


def neighbour_windows(original_length: int) -> list[float]:
    """The windows ``poscli tune`` tries: L/8, L/4, 3L/8 and L/2 (whole, at least 1)."""
    return sorted({float(max(1, original_length * k // 8)) for k in (1, 2, 3, 4)})
