"""One plugin pattern for every axis a researcher extends (encodings, corpus sources, and the axes
that follow them): a package whose modules are its members, one member per file.

A member is a class in ``PACKAGE/NAME.py`` (a ``-`` in the name is written ``_`` in the file name)
decorated ``@registry.register("NAME")``. The names are read from the package's file names without
importing anything, so a bad name is answered before torch loads, and a member's module is imported
the first time it is asked for. Outside the package, a member is given as ``package.module:Class``
(a file on ``PYTHONPATH`` or an installed package), or declared by an installed package as an entry
point in the axis' group (``[project.entry-points."poscli.encodings"]`` in its pyproject).
"""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import os
import pkgutil
import re
import sys
from collections.abc import Callable
from typing import Generic, TypeVar

from poscli.errors import PoscliError

T = TypeVar("T")

USER_SPEC = re.compile(r"^[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)*:[A-Za-z_][\w]*$")  # package.module:Class


TRUST_VARIABLE = "POSCLI_TRUST_CODE"  # "1": import user code from the current folder too (poscli --trust-code)


def implicit_current_folder() -> str | None:
    """The entry ``python -m`` or ``-c`` puts first on sys.path, the current folder, unless the user
    named that folder on PYTHONPATH (or Python runs with -P); None where there is none (the
    ``poscli`` script itself does not put the current folder on the path)."""
    if sys.flags.safe_path or not sys.path or sys.path[0] not in ("", os.getcwd()):
        return None
    named = {os.path.abspath(entry) for entry in os.environ.get("PYTHONPATH", "").split(os.pathsep) if entry}
    return None if os.path.abspath(sys.path[0] or ".") in named else sys.path[0]


def import_user_module(module_name: str, asked_by: str):
    """``module_name`` imported from the user's path (PYTHONPATH, installed packages), never from the
    current folder that ``python -m`` puts first: a run's config.json or a recipe received from
    someone else names code, and a file beside it must not run by being there. ``poscli
    --trust-code`` (POSCLI_TRUST_CODE=1) imports from the current folder too."""
    trusted, implicit, saved = os.environ.get(TRUST_VARIABLE) == "1", implicit_current_folder(), list(sys.path)
    if trusted:
        sys.path.append(os.getcwd())
    elif implicit is not None:  # that entry only: a folder a program put on the path itself stays on it
        del sys.path[len(sys.path) - 1 - sys.path[::-1].index(implicit)]
    try:
        return importlib.import_module(module_name)
    except ImportError:
        here = importlib.machinery.PathFinder.find_spec(module_name.split(".")[0], [os.getcwd()])
        if not trusted and here is not None:
            raise PoscliError(
                f"{asked_by}: {module_name!r} is in the current folder, which poscli does not import code from; "
                "put its folder on PYTHONPATH, or give poscli --trust-code if you trust it"
            ) from None
        raise
    finally:
        sys.path[:] = saved


def did_you_mean(word: str, known: list[str]) -> str:
    """`` (did you mean NAME?)`` for the closest of ``known`` to a misspelt ``word``, else ""."""
    import difflib

    close = difflib.get_close_matches(word, known, n=1, cutoff=0.6)
    return f" (did you mean {close[0]}?)" if close else ""


class Registry(Generic[T]):
    """The members of one axis.

    Args:
        axis: what a member is, for messages ("encoding", "corpus source").
        package: the package whose modules are the built-in members (``poscli.encodings``).
        flag: the option that names a member, for messages (``--pe``).
        example: a built-in name for the messages' example (``alibi``).
        base: a callable returning the class every member subclasses (imported only when needed).
        guide: where a user reads how to write a member, for messages.
        protocol: the package's module that holds the protocol, not a member ("base"; extension
            methods say "protocol", since "base" is a method there: a new RoPE base).
    """

    def __init__(
        self,
        axis: str,
        package: str,
        flag: str,
        example: str,
        base: Callable[[], type],
        guide: str = "CONTRIBUTING.md",
        protocol: str = "base",
    ):
        self.axis, self.package, self.flag, self.example, self.guide = axis, package, flag, example, guide
        self.protocol = protocol
        self.entry_point_group = package
        self._base = base
        self._members: dict[str, type[T]] = {}
        self._resolved: dict[str, type[T]] = {}

    def register(self, name: str) -> Callable[[type[T]], type[T]]:
        """Class decorator: the class is the member ``name`` (and gets ``cls.name = name``)."""

        def decorator(cls: type[T]) -> type[T]:
            if name in self._members and self._members[name] is not cls:
                raise ValueError(f"{self.axis} {name!r} is registered twice")
            cls.name = name  # type: ignore[attr-defined]
            self._members[name] = cls
            return cls

        return decorator

    @staticmethod
    def module_for(name: str) -> str:
        """The module file (without .py) of a built-in name: hyphens become underscores."""
        return name.replace("-", "_")

    def builtin_names(self) -> list[str]:
        """The package's own members: one module each, named after it (``_`` read as ``-``)."""
        spec = importlib.util.find_spec(self.package)
        found = pkgutil.iter_modules(spec.submodule_search_locations)
        return sorted(m.name.replace("_", "-") for m in found if m.name != self.protocol and not m.name.startswith("_"))

    def plugin_names(self) -> dict[str, str]:
        """Members installed packages declare as entry points: name -> "package.module:Class"."""
        from importlib.metadata import entry_points

        return {point.name: point.value for point in entry_points(group=self.entry_point_group)}

    def names(self) -> list[str]:
        """Every name the axis accepts, in a stable (alphabetical) order."""
        return sorted({*self.builtin_names(), *self.plugin_names()})

    def is_member(self, name: str) -> bool:
        """A known name or the form package.module:Class. Imports nothing; reads the installed
        packages' entry points (milliseconds each time) only for a name that is neither."""
        return name in self.builtin_names() or bool(USER_SPEC.match(name)) or name in self.plugin_names()

    def check_name(self, name: str) -> str:
        """The name, if the axis has it (or it has the form package.module:Class); otherwise the
        one-line error. Imports nothing."""
        if not self.is_member(name):
            raise PoscliError(
                f"unknown {self.axis} {name!r}{did_you_mean(name, self.names())}; choose one of: "
                f"{', '.join(self.names())} (e.g. {self.flag} {self.example}), or give your own as {self.flag} "
                "package.module:ClassName"
            )
        return name

    def get(self, name: str) -> type[T]:
        """The member's class, its module imported on first use (then remembered: a model asks on every forward)."""
        if name in self._resolved:
            return self._resolved[name]
        self._resolved[name] = self._find(name)
        return self._resolved[name]

    def _find(self, name: str) -> type[T]:
        self.check_name(name)
        if name in self.builtin_names():
            module = f"{self.package}.{self.module_for(name)}"
            importlib.import_module(module)
            if name not in self._members:
                raise ValueError(f"module {module} must register its {self.axis} as @register({name!r})")
            return self._members[name]
        return self.load_user_class(name, self.plugin_names().get(name, name))

    def load_user_class(self, name: str, spec: str) -> type[T]:
        """Import ``package.module:Class`` and check it subclasses the axis' base class. Its ``name``
        becomes what the user gave (the spec, or the entry point's name): what a run records, and
        what loads it again."""
        module_name, _, class_name = spec.partition(":")
        try:
            module = import_user_module(module_name, f"{self.flag} {name}")
        except ImportError as error:
            raise PoscliError(
                f"{self.flag} {name}: cannot import {module_name!r} ({error}); put its folder on PYTHONPATH or "
                "install its package"
            ) from error
        cls = getattr(module, class_name, None)
        base = self._base()
        if not (isinstance(cls, type) and issubclass(cls, base)):
            raise PoscliError(
                f"{self.flag} {name}: {spec} is not a subclass of {base.__module__}.{base.__qualname__}; "
                f"see {self.guide}"
            )
        cls.name = name  # type: ignore[attr-defined]
        return cls
