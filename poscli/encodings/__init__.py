"""Registry of positional encodings.

Adding an encoding means writing one file in this package that defines a subclass of
:class:`~poscli.encodings.base.PositionalEncoding` decorated with ``@register("name")``;
every module here is imported on first use, so no other file changes. The registry-wide
tests in ``tests/test_encodings.py`` then hold the new encoding to causality, save/load and
length-generalisation properties without new test code.
"""

from __future__ import annotations

import importlib
import pkgutil
from typing import Callable, TypeVar

from poscli.errors import PoscliError

_REGISTRY: dict[str, type] = {}
_discovered = False

E = TypeVar("E")


def register(name: str) -> Callable[[type[E]], type[E]]:
    def decorator(cls: type[E]) -> type[E]:
        if name in _REGISTRY and _REGISTRY[name] is not cls:
            raise ValueError(f"positional encoding {name!r} is registered twice")
        cls.name = name  # type: ignore[attr-defined]
        _REGISTRY[name] = cls
        return cls

    return decorator


def _discover() -> None:
    global _discovered
    if _discovered:
        return
    for module in pkgutil.iter_modules(__path__):
        if module.name != "base" and not module.name.startswith("_"):
            importlib.import_module(f"{__name__}.{module.name}")
    _discovered = True


def names() -> list[str]:
    """Registered encoding names, in a stable (alphabetical) order."""
    _discover()
    return sorted(_REGISTRY)


def get(name: str) -> type:
    _discover()
    if name not in _REGISTRY:
        raise PoscliError(f"unknown encoding {name!r}; choose one of: {', '.join(names())} (e.g. --pe alibi)")
    return _REGISTRY[name]


def build(config):
    """The encoding module named by ``config.pe``, built for ``config``."""
    return get(config.pe)(config)
