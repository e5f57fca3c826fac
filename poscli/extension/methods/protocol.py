"""The interface every context-extension method implements (``poscli extend --method NAME``).

A method says which encodings it applies to (by what they can do, never by name), which options it
takes, how it changes a run's config (and, in place, its weights), and whether it needs training.
Three families share the protocol, each a base class here:

- :class:`FrequencyMethod`: RoPE's inverse frequencies replaced (PI, NTK, YaRN, ...), in
  transformers' ``modeling_rope_utils`` conventions; recorded as ``model.rope_scaling``.
- :class:`RemapMethod`: far keys scored at other positions, without training (Self-Extend, ReRoPE,
  attention sinks); recorded as ``model.remap``, computed by ``poscli.attention.blockwise``.
- :class:`QueryScalingMethod`: an attention temperature, every query multiplied by a factor of its
  position (log-n, Llama 4's floor-log, Ministral's beta scaling, DroPE's 1 + c ln s); recorded
  as ``model.query_scaling``.

Anything else (a stretched table, divided positions, continued training) overrides
``extended_config``. Shape legend: T sequence length.
"""

from __future__ import annotations

import difflib
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from poscli.core.lengths import format_length
from poscli.errors import PoscliError

if TYPE_CHECKING:
    from torch import Tensor

    from poscli.config import ModelConfig
    from poscli.extension.remap import Remap

TRAINING = ("never", "optional", "required")
FINETUNE_LENGTH_MULTIPLE = 4  # default fine-tuning length: min(target, 4 x original)


@dataclass(frozen=True)
class MethodOption:
    """One option of an extension method, declared once: its default, its help line (``poscli
    methods`` and ``poscli extend --help`` show it) and its type, the default's unless ``kind`` says
    (an int for a count of tokens). A default of ``()`` takes a list of numbers; ``choices``: the
    strings it takes. A default of 0 for a count means "worked out from the lengths"."""

    default: Any
    help: str = ""
    kind: type | None = None
    choices: tuple[str, ...] = ()

    def read(self, method: str, name: str, value: Any) -> Any:
        """``value`` (a number, a list, or a string as a flag or -M gives it) as this option's type; a
        value it cannot be, or a NaN or infinite number, is a one-line error."""
        flag = "--" + name.replace("_", "-")
        if self.choices:
            if str(value) not in self.choices:
                raise PoscliError(f"{flag} {value!r}: --method {method} takes one of {', '.join(self.choices)}")
            return str(value)
        if isinstance(self.default, tuple):
            parts = (
                value.split(",") if isinstance(value, str) else (value if isinstance(value, list | tuple) else [value])
            )
            return tuple(self._number(float, flag, part) for part in parts)
        return self._number(self.kind or type(self.default), flag, value)

    @staticmethod
    def _number(kind: type, flag: str, value: Any) -> Any:
        try:
            number = float(value)
        except (TypeError, ValueError):
            raise PoscliError(f"{flag} {value!r} is not a number") from None
        if not math.isfinite(number):
            raise PoscliError(f"{flag} {value!r}: give a finite number")
        if kind is int and not number.is_integer():
            raise PoscliError(f"{flag} must be a whole number, got {value!r}")
        return int(number) if kind is int else kind(number)


def declared_options(method: type) -> dict[str, MethodOption]:
    """A method's options as MethodOption records (a method of your own may declare plain defaults)."""
    return {
        name: option if isinstance(option, MethodOption) else MethodOption(option)
        for name, option in method.options.items()
    }


class ExtensionMethod:
    """Base class. Class attributes declare the method; class methods apply it.

    - ``options``: option name -> :class:`MethodOption` (``poscli extend --NAME VALUE``, ``-M
      NAME=VALUE`` or a recipe's [[extend]] key); a plain default stands for a MethodOption of it.
    - ``training``: ``"never"`` (applied as it is: ``--steps`` must be 0), ``"optional"`` (fine-tuned
      for ``--steps``, default 400, or none with ``--steps 0``) or ``"required"``.
    - ``rescales``: True when the method rescales positions or frequencies; an encoding to which
      no such method applies "needs no rescaling" and is evaluated at any length as it is.
    """

    name: ClassVar[str] = ""
    summary: ClassVar[str] = ""
    citation: ClassVar[str] = ""
    options: ClassVar[dict[str, Any]] = {}  # name -> MethodOption
    training: ClassVar[str] = "optional"
    rescales: ClassVar[bool] = True

    @classmethod
    def applies_to(cls, encoding: type) -> str | None:
        """None when the method applies to ``encoding`` (a PositionalEncoding class); otherwise why
        not, in a few words that follow "--method NAME" in an error."""
        return None

    @classmethod
    def defaults(cls) -> dict[str, Any]:
        """Each option's default, by name."""
        return {name: option.default for name, option in declared_options(cls).items()}

    @classmethod
    def read_options(cls, given: dict[str, Any]) -> dict[str, Any]:
        """``given`` read as each option's type; an option the method does not take is a one-line error."""
        declared = declared_options(cls)
        check_known(cls.name, declared, given)
        return {name: declared[name].read(cls.name, name, value) for name, value in given.items()}

    @classmethod
    def check_options(cls, options: dict[str, Any]) -> dict[str, Any]:
        """The options read and with defaults filled in; an option the method does not take is a one-line error."""
        return {**cls.defaults(), **cls.read_options(options)}

    @classmethod
    def extended_config(
        cls,
        encoding: type,
        config: ModelConfig,
        factor: float,
        target: int,
        options: dict[str, Any],
        weights: dict[str, Tensor],
    ) -> dict[str, Any]:
        """The ModelConfig fields that change (and, in place, ``weights``) to run ``config`` at
        ``target`` tokens. ``options`` went through ``check_options``."""
        raise NotImplementedError(f"--method {cls.name} must define extended_config")

    @classmethod
    def search_space(cls, original_length: int, target: int) -> dict[str, list[float]]:
        """The values ``poscli tune`` tries for each option (their product is the grid); {}: nothing to tune."""
        return {}

    @classmethod
    def recorded_options(cls, changes: dict[str, Any], options: dict[str, Any]) -> dict[str, Any]:
        """What config.json records as the extension's options (the resolved values)."""
        return options

    @classmethod
    def label(cls, parent_label: str, factor: float, steps: int, finetune_length: int, changes: dict) -> str:
        """e.g. ``rope +yarn x128, 400 steps at 1k`` or ``rope +pi x8, no fine-tuning``."""
        tuning = f"{steps} steps at {format_length(finetune_length)}" if steps else "no fine-tuning"
        return f"{parent_label} +{cls.name} x{factor:g}, {tuning}"

    # ------------------------------------------------------------------ model-time hooks

    @classmethod
    def query_scale(cls, positions: Tensor, **recorded: Any) -> Tensor:
        """For a method recorded in ``model.query_scaling``: the factor on each query. (T,) -> (T,)."""
        raise NotImplementedError(f"--method {cls.name} records no query scaling")

    @classmethod
    def scales_layer(cls, encoding: Any, layer: int) -> bool:
        """Whether ``query_scale`` acts on ``layer`` of a model with ``encoding`` (an instance)."""
        return True

    @classmethod
    def default_finetune_length(cls, target: int, original_length: int) -> int:
        """The fine-tuning length without ``--finetune-length``: min(target, 4 x the train length)."""
        return min(target, FINETUNE_LENGTH_MULTIPLE * original_length)


def check_known(method: str, known: dict, options: dict[str, Any]) -> None:
    """An option of ``options`` not in ``known`` (the method's options by name) is a one-line error
    naming the flags the method takes (and the one meant, where a name is close)."""
    unknown = sorted(set(options) - set(known))
    if unknown:
        flags = ", ".join("--" + name.replace("_", "-") for name in unknown)
        takes = ", ".join("--" + name.replace("_", "-") for name in known) or "no options"
        close = difflib.get_close_matches(unknown[0], list(known), n=1)
        meant = f" (did you mean --{close[0].replace('_', '-')}?)" if close else ""
        raise PoscliError(f"--method {method} does not take {flags}{meant}; it takes {takes}")


class FrequencyMethod(ExtensionMethod):
    """RoPE's inverse frequencies (and an attention scale on q and k) replaced.

    Notation (transformers' ``modeling_rope_utils.py``): d rotary dims, b base, s factor (= target
    length / original length), L the original (trained) length, inv_freq_i = b^(-2i/d). Applies to
    an encoding with ``rotary_frequencies`` (RoPE, xPos), whose options have ``base`` and
    ``rotary_dim(head_dim)``.
    """

    per_length: ClassVar[bool] = False  # True: the frequencies depend on the length run, recomputed per forward
    transformers_type: ClassVar[str | None] = None  # transformers' rope_type, for poscli export

    @classmethod
    def frequencies(
        cls, head_dim: int, base: float, factor: float, original_length: int, seq_len: int | None, **options: Any
    ) -> tuple[Tensor, float]:
        """Inverse frequencies (d/2,) float32 and the attention scale on q and k."""
        raise NotImplementedError(f"--method {cls.name} must define frequencies")

    @classmethod
    def applies_to(cls, encoding: type) -> str | None:
        if getattr(encoding, "rotary_frequencies", False):
            return None
        return "rescales rotary frequencies"

    @classmethod
    def extended_config(cls, encoding, config, factor, target, options, weights):
        """The weights stay; the frequencies change (computed once now, so a bad option fails here)."""
        own = encoding.parse_options(config.pe_options)
        cls.frequencies(own.rotary_dim(config.head_dim), own.base, factor, config.train_length, target, **options)
        return {
            "rope_scaling": {
                "method": cls.name,
                "factor": factor,
                "original_length": config.train_length,
                "options": options,
            }
        }

    @classmethod
    def transformers_rope(
        cls, rotary_dim: int, base: float, factor: float, original_length: int, options: dict[str, Any]
    ) -> tuple[float, dict | None]:
        """The same frequencies in transformers' terms: (rope_theta, rope_scaling or None)."""
        if cls.transformers_type is None:
            raise PoscliError(f"--method {cls.name} has no transformers rope type; poscli export cannot write it")
        scaling: dict[str, Any] = {"rope_type": cls.transformers_type, "factor": float(factor)}
        if cls.transformers_type not in ("linear", "dynamic"):  # dynamic reads max_position_embeddings
            scaling["original_max_position_embeddings"] = original_length
        return base, scaling


class DefaultFrequencies(FrequencyMethod):
    """Plain RoPE, the frequencies as trained: what a run without ``rope_scaling`` uses (not a --method)."""

    name = "default"

    @classmethod
    def frequencies(cls, head_dim, base, factor, original_length, seq_len):
        from poscli.extension.scaling import default_inv_freq

        return default_inv_freq(head_dim, base), 1.0

    @classmethod
    def transformers_rope(cls, rotary_dim, base, factor, original_length, options):
        return base, None


class RemapMethod(ExtensionMethod):
    """Far keys scored at remapped positions, applied without training (``poscli.extension.remap``).

    Applies to an encoding whose queries and keys can take separate positions
    (``separable_positions``) and, unless ``any_encoding``, that rotates them (``rotary_frequencies``).
    A subclass defines ``plan``, and its ``Plan``, a :class:`~poscli.extension.remap.Remap` subclass
    holding the far positions.
    """

    training = "never"
    rescales = False
    any_encoding: ClassVar[bool] = False
    Plan: ClassVar[type]

    @classmethod
    def plan(cls, original_length: int, target: int, **options: Any) -> Remap:
        """The resolved remapping for a model trained at ``original_length`` run up to ``target``."""
        raise NotImplementedError(f"--method {cls.name} must define plan")

    @classmethod
    def applies_to(cls, encoding: type) -> str | None:
        if not cls.any_encoding and not getattr(encoding, "rotary_frequencies", False):
            return "remaps rotary positions"
        if not encoding.separable_positions:
            return "needs queries and keys at separate positions, and this encoding measures them from the middle"
        return None

    @classmethod
    def extended_config(cls, encoding, config, factor, target, options, weights):
        return {"remap": cls.plan(config.train_length, target, **options).to_dict()}

    @classmethod
    def recorded_options(cls, changes, options):
        return changes["remap"]

    @classmethod
    def label(cls, parent_label, factor, steps, finetune_length, changes):
        return f"{parent_label} +{cls.Plan.from_dict(changes['remap']).describe()}, no training"


class QueryScalingMethod(ExtensionMethod):
    """An attention temperature: the query at position p multiplied by ``query_scale(p)``, after the
    encoding has rotated it (as transformers' Llama 4 and Ministral 3 do), so every logit of that
    query is scaled by the same factor. Applies to every encoding, since every score is a dot
    product; records ``model.query_scaling`` = {method, original_length, factor, options}.
    A subclass defines ``query_scale(positions, original_length, factor, **options)``.
    """

    rescales = False

    @classmethod
    def extended_config(cls, encoding, config, factor, target, options, weights):
        return {"query_scaling": cls.recorded_scaling(config, factor, options)}

    @classmethod
    def recorded_scaling(cls, config: ModelConfig, factor: float, options: dict[str, Any]) -> dict[str, Any]:
        return {"method": cls.name, "original_length": config.train_length, "factor": factor, **options}

    @classmethod
    def label(cls, parent_label, factor, steps, finetune_length, changes):
        tuning = f"{steps} steps at {format_length(finetune_length)}" if steps else "no fine-tuning"
        return f"{parent_label} +{cls.name}, {tuning}"
