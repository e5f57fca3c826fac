"""Context-extension methods, the ``--method`` axis of ``poscli extend``: one file per method in this
package (see ``poscli.extension.methods.protocol.ExtensionMethod`` for the protocol,
``poscli.core.registry`` for the pattern).

A method of your own is ``--method package.module:Class`` or a name an installed package declares
in the entry-point group ``poscli.extension.methods``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from poscli.core.registry import Registry
from poscli.errors import PoscliError

if TYPE_CHECKING:
    from torch import Tensor

    from poscli.extension.remap import Remap


def _base() -> type:
    from poscli.extension.methods.protocol import ExtensionMethod

    return ExtensionMethod


REGISTRY: Registry = Registry("extension method", __name__, "--method", "yarn", _base, protocol="protocol")
register = REGISTRY.register
names = REGISTRY.names
check_name = REGISTRY.check_name
get = REGISTRY.get


def applicable(encoding: type) -> list[str]:
    """The built-in methods that apply to ``encoding`` (a PositionalEncoding class), by name."""
    return [name for name in REGISTRY.builtin_names() if get(name).applies_to(encoding) is None]


def rescaling(encoding: type) -> list[str]:
    """The applicable methods that rescale positions; none: the encoding "needs no rescaling"."""
    return [name for name in applicable(encoding) if get(name).rescales]


def describe(name: str) -> dict:
    """What ``poscli methods`` shows for one method: summary, citation, options (name -> (default,
    help line)), training."""
    from poscli.extension.methods.protocol import declared_options

    method = get(name)
    return {
        "name": name,
        "summary": method.summary,
        "citation": method.citation,
        "options": {key: (option.default, option.help) for key, option in declared_options(method).items()},
        "training": method.training,
    }


# --------------------------------------------------------------------------- RoPE's frequencies


def frequency_method(name: str):
    """The FrequencyMethod ``name`` ("default": plain RoPE, a run never extended)."""
    from poscli.extension.methods.protocol import DefaultFrequencies, FrequencyMethod

    if name == "default":
        return DefaultFrequencies
    method = get(name)
    if not issubclass(method, FrequencyMethod):
        raise PoscliError(f"--method {name} does not rescale RoPE's frequencies")
    return method


def recorded_frequencies(config) -> tuple[type, dict]:
    """The FrequencyMethod that ``config.rope_scaling`` records (``poscli extend``; "default" for a run
    never extended) and the settings it takes: factor, original_length and its own options."""
    rescaled = dict(config.rope_scaling)
    method = frequency_method(rescaled.pop("method", "default"))
    return method, {
        "factor": rescaled.get("factor", 1.0),
        "original_length": rescaled.get("original_length", config.train_length),
        **rescaled.get("options", {}),
    }


def frequency_method_names() -> list[str]:
    """ "default" and every FrequencyMethod among the built-in methods."""
    from poscli.extension.methods.protocol import FrequencyMethod

    return ["default", *(n for n in REGISTRY.builtin_names() if issubclass(get(n), FrequencyMethod))]


def rope_parameters(
    method: str,
    head_dim: int,
    base: float,
    factor: float,
    original_length: int,
    seq_len: int | None = None,
    **options,
) -> tuple[Tensor, float]:
    """RoPE inverse frequencies (d/2,) float32 and the attention scale for ``method``.

    Args:
        method: "default" or a FrequencyMethod: pi, ntk, dynamic-ntk, yarn, ntk-by-parts, llama3, longrope, base.
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
    chosen = frequency_method(method)
    return chosen.frequencies(head_dim, base, factor, original_length, seq_len, **chosen.check_options(options))


def transformers_rope(
    method: str, rotary_dim: int, base: float, factor: float, original_length: int, **options
) -> tuple[float, dict | None]:
    """The same frequencies in transformers' terms: (rope_theta, rope_scaling or None).

    NTK-aware and a base change are plain RoPE at another base, b s^(d/(d-2)) and --rope-base;
    NTK-by-parts is YaRN with attention_factor 1; the others are transformers' own rope types,
    with ``original_max_position_embeddings`` the train length (dynamic NTK reads it from
    max_position_embeddings instead, which the exporter sets to the train length).
    """
    chosen = frequency_method(method)
    return chosen.transformers_rope(rotary_dim, base, factor, original_length, chosen.check_options(options))


# --------------------------------------------------------------------------- remappings


def remap_from_dict(values: dict) -> Remap:
    """The method's own Remap subclass, from config.json's ``model.remap``."""
    return get(values["method"]).Plan.from_dict(values)


def plan_remap(method: str, original_length: int, target: int, **options: float) -> Remap:
    """The resolved remapping of the remap ``method`` (e.g. "self-extend") for a model trained at
    ``original_length`` run up to ``target``."""
    chosen = get(method)
    return chosen.plan(original_length, target, **chosen.check_options(options))
