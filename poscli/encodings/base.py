"""The interface every positional encoding implements.

An encoding acts through up to three hooks, and the model calls all three without asking
which encoding it holds:

- ``embed``: change the token embeddings once at the input (absolute encodings);
- ``rotate``: transform queries and keys in every layer (rotary encodings);
- ``score_bias``: add a bias to the attention scores in every layer (relative encodings).

An encoding that is not an additive bias on softmax scores (its bias is computed from the layer's
input, as the Forgetting Transformer's gates are; its positions from the scores, as CoPE's are; or
it replaces the softmax, as stick-breaking attention does) sets ``replaces_attention`` and computes
the attention itself in a fourth hook, ``attend``, after ``rotate``.

Shape legend: B batch, T sequence length, C model width, H heads, hd head dimension,
Tq query positions, Tk key positions. ``positions`` are integer token positions, usually
``0..T-1``; a block of queries passes its own slice.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

import torch
from torch import Tensor, nn

from poscli.attention.blockwise import RelativeBias
from poscli.attention.distance_attention import DistanceTable, ScaledDistanceBias
from poscli.config import LEGACY_OPTION_KEYS, ModelConfig
from poscli.errors import PoscliError
from poscli.extension import methods as extension_methods
from poscli.extension.scaling import default_inv_freq

if TYPE_CHECKING:
    from poscli.extension.remap import Remap


@dataclass(frozen=True)
class NoOptions:
    """The options of an encoding that has none."""


class PositionalEncoding(nn.Module):
    """Base class: every hook is the identity, so an encoding overrides only what it uses.

    An encoding also declares what the rest of poscli needs to know about it, so nothing outside
    ``poscli/encodings/`` asks for its name:

    - ``Options``: a frozen dataclass of its own options (``--pe-option key=value``, stored in
      config.json under ``model.pe_options``); ``__post_init__`` checks them and raises
      :class:`~poscli.errors.PoscliError`. The built instance is ``self.options``.
    - what ``poscli extend`` methods may do to it (``poscli.extension.methods`` read these, never the
      name): ``rotary_frequencies`` (RoPE's frequencies can be replaced: ``model.rope_scaling``),
      ``position_table`` (a learned table, ``encoding.table.weight``, that can be stretched),
      ``interpolable_positions`` (positions added at the input can be divided: ``model.position_scale``),
      ``separable_positions`` (queries and keys can take different positions: remappings). An
      encoding no rescaling method applies to "needs no rescaling".
    - ``reads_positions``: False for an encoding that ignores positions (random positions are
      then pointless); ``grown_for_positions`` says how its config grows to represent more positions;
      ``batched_positions``: its hooks take one row of positions per sequence at once.
    """

    name: ClassVar[str] = ""
    citation: ClassVar[str] = ""
    summary: ClassVar[str] = ""
    Options: ClassVar[type] = NoOptions
    # Old config.json keys (before options belonged to encodings) -> option name, so old runs load.
    legacy_options: ClassVar[dict[str, str]] = {}
    # True when score_bias returns a tensor; the model then uses blocked attention with an
    # explicit mask instead of the fused causal kernel.
    has_score_bias: ClassVar[bool] = False
    # True when the encoding computes the attention itself (``attend``): the model then calls it in
    # place of every attention path, after ``rotate``.
    replaces_attention: ClassVar[bool] = False
    reads_positions: ClassVar[bool] = True
    # True when embed and rotate also take positions (B, T), one row per sequence, and the encoding
    # has no score bias and its own attention: the model then runs a batch with per-sequence
    # positions (randomized positions, Ruoss et al., 2023) at once instead of one sequence at a time.
    batched_positions: ClassVar[bool] = False
    # True when rotate(q at p) and rotate(k at p') meet at p - p' and score_bias takes any positions,
    # so poscli.extension.remap can score far keys at other positions (Self-Extend, ReRoPE, sinks).
    separable_positions: ClassVar[bool] = True
    rotary_frequencies: ClassVar[bool] = False
    position_table: ClassVar[bool] = False
    interpolable_positions: ClassVar[bool] = False

    def __init__(self, config: ModelConfig):
        super().__init__()
        self.config = config
        self.options = self.parse_options(config.pe_options)

    # ------------------------------------------------------------------ declarations

    @classmethod
    def parse_options(cls, values: dict[str, Any]) -> Any:
        """``Options`` from a dict (config.json) or strings (``--pe-option key=value``); unknown keys
        are one-line errors naming the options this encoding has."""
        fields = {f.name: f for f in dataclasses.fields(cls.Options)}
        known = ", ".join(f"{f.name}={f.default}" for f in fields.values()) or "none"
        given = {}
        for key, value in values.items():
            key = cls.legacy_options.get(key, key)
            if key not in fields and key in LEGACY_OPTION_KEYS:  # an old config's field for another encoding
                continue
            if key not in fields:
                raise PoscliError(f"--pe {cls.name} has no option {key!r}; its options (with defaults): {known}")
            given[key] = _convert(value, fields[key], cls.name)
        return cls.Options(**given)

    @classmethod
    def grown_for_positions(cls, config: ModelConfig, positions: int) -> dict[str, Any]:
        """Config changes so the encoding represents positions 0..positions-1 (random positions,
        benchmarks at long lengths); none for an encoding without a table."""
        return {}

    @property
    def max_length(self) -> int | None:
        """The longest sequence this encoding can represent, or None if unbounded."""
        return None

    # ------------------------------------------------------------------ what poscli extend recorded
    #
    # An extension method records its change in the config (``model.remap``, ``model.query_scaling``);
    # the model asks its encoding for them, so it never imports an extension method itself.

    def remap(self) -> Remap | None:
        """The far positions a remapping extension (Self-Extend, ReRoPE, sinks, ...) records in
        ``config.remap``, or None."""
        return recorded_remap(self.config.remap)

    def query_scaler(self, layer: int) -> Callable[[Tensor], Tensor] | None:
        """``config.query_scaling``'s factor on each query of ``layer``, positions (T,) -> (T,), or None
        (no attention temperature, or none in this layer)."""
        if not self.config.query_scaling:
            return None
        if not extension_methods.get(self.config.query_scaling["method"]).scales_layer(self, layer):
            return None
        return recorded_query_scale(self.config.query_scaling)

    def score_mod(self, q: Tensor, positions: Tensor, layer: int) -> Callable | None:
        """The score bias as a FlexAttention ``score_mod`` (score, b, h, q_idx, kv_idx) -> score,
        where q_idx and kv_idx index ``positions`` (T,), so the bias runs fused on CUDA
        (``poscli.attention.flex``); None: the model derives one from ``relative_bias`` when that exists,
        else uses the blocked path. Tensors it reads (parameters included) are captured, and
        gradients reach them. q: (B, H, T, hd)."""
        return None

    def transformers_layout(self) -> dict[str, Any] | None:
        """How a transformers architecture expresses this encoding, for ``poscli export``: a dict with
        ``architecture`` (a key of ``poscli.export.hf.ARCHITECTURES``) and that architecture's encoding
        settings, or None when no transformers architecture has it. Raise
        :class:`~poscli.errors.PoscliError` for a setting of this encoding transformers cannot express."""
        return None

    def embed(self, x: Tensor, positions: Tensor) -> Tensor:
        """x: (B, T, C) token embeddings; positions: (T,), or (B, T) if ``batched_positions``. Returns (B, T, C)."""
        return x

    def rotate(self, q: Tensor, k: Tensor, positions: Tensor, layer: int) -> tuple[Tensor, Tensor]:
        """q, k: (B, H, T, hd); positions: (T,), or (B, T) if ``batched_positions``. Returns q, k of the same shapes."""
        return q, k

    def score_bias(self, q: Tensor, q_positions: Tensor, k_positions: Tensor, layer: int) -> Tensor | None:
        """q: (B, H, Tq, hd). Returns a bias broadcastable to (B, H, Tq, Tk), added to q.k / sqrt(hd).

        Only causal pairs (k_position <= q_position) are ever used; the model masks the rest.
        By default, ``bias_of_distance`` at each pair's distance (None when that gives none).
        """
        distance = causal_distance(q_positions, k_positions).to(torch.float32)  # (Tq, Tk)
        bias = self.bias_of_distance(distance.flatten(), layer)  # (H, Tq * Tk) or None
        return None if bias is None else bias.view(-1, *distance.shape).to(q.dtype)  # (H, Tq, Tk)

    def attend(self, x: Tensor, q: Tensor, k: Tensor, v: Tensor, positions: Tensor, layer: int) -> Tensor:
        """The causal attention of one layer, for an encoding with ``replaces_attention``.

        x: (B, T, C) the layer's normalised input (a data-dependent gate reads it); q, k, v:
        (B, H, T, hd) after ``rotate``; positions: (T,). Returns (B, H, T, hd). Query i may read
        keys j <= i only (tests/encodings/test_encodings.py holds every encoding to that).
        """
        raise NotImplementedError(f"{self.name} sets replaces_attention but has no attend()")

    def bias_of_distance(self, distance: Tensor, layer: int) -> Tensor | None:
        """The bias as a function of the distance d = i - j alone: distance (N,) float32 -> (H, N).

        The simplest way to write a bias encoding: implement this (and set ``has_score_bias``) and
        ``score_bias`` and the memory-bounded fast path (``distance_bias``) both come from it.
        """
        return None

    def distance_bias(self, positions: Tensor, layer: int) -> DistanceTable | ScaledDistanceBias | None:
        """The bias over consecutive ``positions`` (T,) in a form ``poscli.attention.distance_attention``
        applies block by block at any length, forward and backward: a table over distances 0..T-1
        (by default, from ``bias_of_distance``), or a piecewise-linear function of a distance
        feature scaled per query row (FIRE). None: the model uses the blocked ``score_bias`` path.
        Consulted after ``relative_bias``, whose banded and linear forms are faster still."""
        table = self.bias_of_distance(torch.arange(len(positions), dtype=torch.float32, device=positions.device), layer)
        return None if table is None else DistanceTable(table.float())  # (H, T)

    def relative_bias(self, q: Tensor, layer: int) -> RelativeBias | None:
        """The same bias in the form the fast attention path takes, or None to use ``score_bias``.

        Return it when the bias depends only on the distance i - j and is either linear in it
        (``slopes``) or the same for every distance from some W on (``band``, with that far value
        subtracted, since softmax ignores a constant added to a row). q: (B, H, T, hd).
        The model calls this only when positions are consecutive (0..T-1 or an offset of it).
        """
        return None


def _convert(value: Any, field: dataclasses.Field, encoding: str) -> Any:
    """An option value as its declared type (``--pe-option`` gives strings)."""
    kind = (
        field.type
        if isinstance(field.type, type)
        else {"int": int, "float": float, "str": str, "bool": bool}.get(str(field.type), str)
    )
    if not isinstance(value, str) or kind is str:
        converted = float(value) if kind is float and isinstance(value, int) and not isinstance(value, bool) else value
    else:
        try:
            if kind is bool:
                converted = {"true": True, "1": True, "yes": True, "false": False, "0": False, "no": False}[
                    value.lower()
                ]
            else:
                converted = kind(value)
        except (KeyError, ValueError):
            raise PoscliError(
                f"--pe-option {field.name}={value}: {encoding}'s {field.name} is {_a(kind.__name__)}, e.g. "
                f"{field.name}={field.default}"
            ) from None
    if isinstance(converted, float) and not math.isfinite(converted):  # float("nan") and float("inf") parse
        raise PoscliError(f"--pe-option {field.name}={value}: give a finite number, e.g. {field.name}={field.default}")
    return converted


def _a(noun: str) -> str:
    """The noun with its article: a float, an int."""
    return f"{'an' if noun[0] in 'aeiou' else 'a'} {noun}"


def recorded_remap(record: dict | None) -> Remap | None:
    """The remapping a config records (``model.remap``, or an hf: copy's ``poscli_remap``), or None."""
    return extension_methods.remap_from_dict(dict(record)) if record else None


def recorded_query_scale(record: dict | None) -> Callable[[Tensor], Tensor] | None:
    """The attention temperature a config records (``model.query_scaling``): positions (T,) -> the
    factor on each query (T,); None without one."""
    if not record:
        return None
    options = dict(record)
    method = extension_methods.get(options.pop("method"))
    return lambda positions: method.query_scale(positions, **options)


def rotary_inv_freq(rotary_dim: int, base: float) -> Tensor:
    """RoPE's inverse frequencies as trained, base^(-2i/d) (d/2,) float32 (Su et al., 2021)."""
    return default_inv_freq(rotary_dim, base)


def causal_distance(q_positions: Tensor, k_positions: Tensor) -> Tensor:
    """Distance i - j from each query i back to each key j, clamped at 0 for future keys. (Tq, Tk)."""
    return (q_positions[:, None] - k_positions[None, :]).clamp(min=0)


def sinusoid_table(positions: Tensor, dim: int, base: float = 10000.0) -> Tensor:
    """Vaswani et al. (2017) section 3.5: PE(pos, 2i) = sin(pos / base^(2i/d)), PE(pos, 2i+1) = cos(...).

    Computed in float32 whatever the model dtype. Returns (T, dim).
    """
    inv_freq = base ** (-torch.arange(0, dim, 2, dtype=torch.float32, device=positions.device) / dim)  # (dim/2,)
    angles = positions.to(torch.float32)[:, None] * inv_freq[None, :]  # (T, dim/2)
    table = torch.stack((angles.sin(), angles.cos()), dim=-1)  # (T, dim/2, 2)
    return table.flatten(-2)  # (T, dim): sin, cos interleaved
