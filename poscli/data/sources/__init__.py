"""Corpus sources, the ``--data`` axis: one file per source in this package (see
``poscli.data.sources.base.Source`` for the protocol, ``poscli.core.registry`` for the pattern).

A ``--data`` value is offered to each source in the order of its ``priority`` (names first, then
dataset files, text files and folders, globs, the hub); the first that ``matches`` reads it. A source
of your own is ``--data package.module:Class`` (its ``documents`` take no argument beyond the
options) or ``--data package.module:Class=ARGUMENT`` (the part after ``=`` is its spec), or a name an
installed package declares in the entry-point group ``poscli.data.sources``.
"""

from __future__ import annotations

import os
import re

from poscli.core.registry import USER_SPEC, Registry
from poscli.errors import PoscliError


def _base() -> type:
    from poscli.data.sources.base import Source

    return Source


REGISTRY: Registry = Registry("corpus source", __name__, "--data", "stdlib", _base)
register = REGISTRY.register
USER_SOURCE = re.compile(r"^(?P<cls>[A-Za-z_][\w.]*:[A-Za-z_]\w*)(=(?P<argument>.*))?$")


def members() -> list[type]:
    """Every source class, in the order a ``--data`` value is offered to them."""
    return sorted((REGISTRY.get(name) for name in REGISTRY.names()), key=lambda cls: (cls.priority, cls.name))


def resolve(spec: str, rows=None):
    """The source that reads ``--data spec``, with its row options (``RowOptions``; None: defaults);
    the one-line error listing every accepted form when none does."""
    user = USER_SOURCE.match(spec)
    if user and USER_SPEC.match(user["cls"]) and not os.path.exists(os.path.expanduser(spec)):
        return REGISTRY.load_user_class(spec, user["cls"])(user["argument"] or "", rows)
    for cls in members():
        if cls.matches(spec):
            return cls(spec, rows)
    forms = [cls.form for cls in members() if cls.form]
    raise PoscliError(f"--data {spec!r} is not {', '.join(forms[:-1])}, or {forms[-1]}")


def is_named(spec: str) -> bool:
    """A built-in name or the hub, never a path: recorded as it is. Reads no file."""
    return any(cls.named and cls.matches(spec) for cls in members())


def recorded_spec(spec: str) -> str:
    """A corpus spec as a run records it: a path or glob made absolute, so the run can be evaluated
    and resumed from any folder; names (and sources of your own) as they are."""
    if is_named(spec) or USER_SOURCE.match(spec):
        return spec
    return os.path.abspath(os.path.expanduser(spec))
