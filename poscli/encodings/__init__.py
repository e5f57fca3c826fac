"""Registry of positional encodings.

Adding an encoding means writing one file in this package that defines a subclass of
:class:`~poscli.encodings.base.PositionalEncoding` decorated with ``@register("name")``;
the module's file name is the encoding's name with ``-`` written ``_`` (``kerple_power.py``
registers ``kerple-power``), so the list of names is known without importing anything
(argument errors answer before torch loads), and a module is imported the first time its
encoding is asked for. The class declares its options, the extension methods that apply
and how it grows (see the base class), so no other file changes. The registry-wide
tests in ``tests/test_encodings.py`` then hold the new encoding to causality, save/load and
length-generalisation properties without new test code.
"""

from __future__ import annotations

import importlib
import pkgutil
import re
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

from poscli.errors import PoscliError

if TYPE_CHECKING:
    from poscli.config import ModelConfig, TrainConfig

_REGISTRY: dict[str, type] = {}

E = TypeVar("E")


def register(name: str) -> Callable[[type[E]], type[E]]:
    def decorator(cls: type[E]) -> type[E]:
        if name in _REGISTRY and _REGISTRY[name] is not cls:
            raise ValueError(f"positional encoding {name!r} is registered twice")
        cls.name = name  # type: ignore[attr-defined]
        _REGISTRY[name] = cls
        return cls

    return decorator


# User-defined encodings: ``--pe package.module:ClassName``, or a name that an installed package
# declares in this entry-point group (pyproject: [project.entry-points."poscli.encodings"]).
ENTRY_POINT_GROUP = "poscli.encodings"
USER_SPEC = re.compile(r"^[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)*:[A-Za-z_][\w]*$")


def module_for(name: str) -> str:
    """The module file (without .py) of a built-in encoding name: hyphens become underscores."""
    return name.replace("-", "_")


def builtin_names() -> list[str]:
    """poscli's own encodings: one module per encoding, named after it (``_`` read as ``-``)."""
    return sorted(
        m.name.replace("_", "-")
        for m in pkgutil.iter_modules(__path__)
        if m.name != "base" and not m.name.startswith("_")
    )


def plugin_names() -> dict[str, str]:
    """Encodings installed packages declare as entry points: name -> "package.module:Class"."""
    from importlib.metadata import entry_points

    return {point.name: point.value for point in entry_points(group=ENTRY_POINT_GROUP)}


def names() -> list[str]:
    """Every encoding ``--pe`` accepts by name, in a stable (alphabetical) order."""
    return sorted({*builtin_names(), *plugin_names()})


def check_name(name: str) -> str:
    """The name, if an encoding has it (or it has the form package.module:Class); otherwise the
    one-line error. Imports nothing."""
    if name not in names() and not USER_SPEC.match(name):
        raise PoscliError(
            f"unknown encoding {name!r}; choose one of: {', '.join(names())} (e.g. --pe alibi), "
            f"or give your own as --pe package.module:ClassName"
        )
    return name


def get(name: str) -> type:
    check_name(name)
    if name in builtin_names():
        importlib.import_module(f"{__name__}.{module_for(name)}")
        if name not in _REGISTRY:
            raise ValueError(
                f"module poscli.encodings.{module_for(name)} must register its encoding as @register({name!r})"
            )
        return _REGISTRY[name]
    return _load_user_encoding(name, plugin_names().get(name, name))


def run_name_base(name: str) -> str:
    """A run-name-safe stem for an encoding: ``pkg.mod:LogPenalty`` -> ``logpenalty``."""
    return name.rsplit(":", 1)[-1].lower()


def _load_user_encoding(name: str, spec: str) -> type:
    """Import ``package.module:Class`` and check it implements the interface."""
    from poscli.encodings.base import PositionalEncoding

    module_name, _, class_name = spec.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        raise PoscliError(
            f"--pe {name}: cannot import {module_name!r} ({error}); put its folder on PYTHONPATH or install its package"
        ) from error
    cls = getattr(module, class_name, None)
    if not (isinstance(cls, type) and issubclass(cls, PositionalEncoding)):
        raise PoscliError(
            f"--pe {name}: {spec} is not a subclass of poscli.encodings.base.PositionalEncoding; "
            f"see the README's 'Your own encoding'"
        )
    return cls


def build(config):
    """The encoding module named by ``config.pe``, built for ``config``."""
    return get(config.pe)(config)


def resolve_options(config):
    """``config`` with its encoding's options checked and written out in full (defaults
    included, legacy keys renamed), as config.json records them."""
    import dataclasses

    options = get(config.pe).parse_options(config.pe_options)
    return dataclasses.replace(config, pe_options=dataclasses.asdict(options))


def parse_option_pairs(pairs: list[str]) -> dict[str, str]:
    """``["base=500000", "layout=interleaved"]`` -> a dict of strings (converted by the encoding)."""
    options = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise PoscliError(
                f"--pe-option {pair!r}: write KEY=VALUE, e.g. --pe-option base=500000 (poscli encodings lists each "
                "encoding's options)"
            )
        options[key.strip().replace("-", "_")] = value.strip()
    return options


def describe(name: str) -> dict:
    """What ``poscli encodings`` shows for one encoding: summary, citation, options, extension methods."""
    import dataclasses

    cls = get(name)
    methods = cls.extension_methods()
    return {
        "name": name,
        "summary": cls.summary,
        "citation": cls.citation,
        "options": {f.name: f.default for f in dataclasses.fields(cls.Options)},
        "extension": "needs no rescaling" if methods is None else ", ".join(methods) or "none",
    }


def check_random_positions(model_config: ModelConfig, train_config: TrainConfig) -> None:
    """--random-positions MAX needs MAX >= the train length and an encoding that reads positions."""
    maximum = train_config.random_positions
    if not maximum:
        return
    if not get(model_config.pe).reads_positions:
        raise PoscliError(
            f"--pe {model_config.pe} reads no positions, so --random-positions changes nothing; drop it or choose "
            "another --pe"
        )
    if maximum < model_config.train_length:
        raise PoscliError(
            f"--random-positions {maximum} is shorter than --train-length {model_config.train_length}; "
            f"positions are drawn from [0, MAX), so use at least {model_config.train_length} (e.g. 16x: "
            f"{16 * model_config.train_length})"
        )
