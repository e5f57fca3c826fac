"""Registry of positional encodings.

Adding an encoding means writing one file in this package that defines a subclass of
:class:`~poscli.encodings.base.PositionalEncoding` decorated with ``@register("name")``;
the module's file name is the encoding's name, so the list of names is known without
importing anything (argument errors answer before torch loads), and a module is imported
the first time its encoding is asked for. The registry-wide
tests in ``tests/test_encodings.py`` then hold the new encoding to causality, save/load and
length-generalisation properties without new test code.
"""

from __future__ import annotations

import importlib
import pkgutil
from typing import Callable, TypeVar

from poscli.errors import PoscliError

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


def names() -> list[str]:
    """Encoding names, in a stable (alphabetical) order: one module per encoding, named after it."""
    return sorted(m.name for m in pkgutil.iter_modules(__path__) if m.name != "base" and not m.name.startswith("_"))


def check_name(name: str) -> str:
    """The name, if an encoding has it; otherwise the one-line error. Imports nothing."""
    if name not in names():
        raise PoscliError(f"unknown encoding {name!r}; choose one of: {', '.join(names())} (e.g. --pe alibi)")
    return name


def get(name: str) -> type:
    check_name(name)
    importlib.import_module(f"{__name__}.{name}")
    if name not in _REGISTRY:
        raise ValueError(f"module poscli.encodings.{name} must register its encoding as @register({name!r})")
    return _REGISTRY[name]


def build(config):
    """The encoding module named by ``config.pe``, built for ``config``."""
    return get(config.pe)(config)
