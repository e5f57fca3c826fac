"""Registry of positional encodings.

Adding an encoding means writing one file in this package that defines a subclass of
:class:`~poscli.encodings.base.PositionalEncoding` decorated with ``@register("name")``;
the module's file name is the encoding's name with ``-`` written ``_`` (``kerple_power.py``
registers ``kerple-power``), so the list of names is known without importing anything
(argument errors answer before torch loads), and a module is imported the first time its
encoding is asked for. The class declares its options, the extension methods that apply
and how it grows (see the base class), so no other file changes. The registry-wide
tests in ``tests/encodings/test_encodings.py`` then hold the new encoding to causality, save/load and
length-generalisation properties without new test code.
"""

from __future__ import annotations

from poscli.core.registry import Registry
from poscli.errors import PoscliError


def _base() -> type:
    from poscli.encodings.base import PositionalEncoding

    return PositionalEncoding


# User-defined encodings: ``--pe package.module:ClassName``, or a name that an installed package
# declares in the entry-point group ``poscli.encodings`` (pyproject: [project.entry-points."poscli.encodings"]).
REGISTRY: Registry = Registry("encoding", __name__, "--pe", "alibi", _base, guide="the README's 'Your own encoding'")
ENTRY_POINT_GROUP = REGISTRY.entry_point_group
register = REGISTRY.register
module_for = REGISTRY.module_for
builtin_names = REGISTRY.builtin_names
plugin_names = REGISTRY.plugin_names
names = REGISTRY.names
check_name = REGISTRY.check_name
get = REGISTRY.get


def run_name_base(name: str) -> str:
    """A run-name-safe stem for an encoding: ``pkg.mod:LogPenalty`` -> ``logpenalty``."""
    return name.rsplit(":", 1)[-1].lower()


def build(config):
    """The encoding module named by ``config.pe``, built for ``config``."""
    return get(config.pe)(config)


def resolve_options(config):
    """``config`` with its encoding's options checked and written out in full (defaults
    included, legacy keys renamed), as config.json records them."""
    import dataclasses

    options = get(config.pe).parse_options(config.pe_options)
    return dataclasses.replace(config, pe_options=dataclasses.asdict(options))


def parse_option_pairs(pairs: list[str], flag: str = "--pe-option") -> dict[str, str]:
    """``["base=500000", "layout=interleaved"]`` -> a dict of strings (converted by the encoding)."""
    options = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise PoscliError(
                f"{flag} {pair!r}: write KEY=VALUE, e.g. --pe-option base=500000 (poscli encodings lists each "
                "encoding's options)"
                if flag == "--pe-option"
                else f"{flag} {pair!r}: write KEY=VALUE, e.g. {flag} "
                + ("ssmax=true" if flag == "--attention-option" else "window=64")
            )
        options[key.strip().replace("-", "_")] = value.strip()
    return options


def describe(name: str) -> dict:
    """What ``poscli encodings`` shows for one encoding: summary, citation, options, extension methods."""
    import dataclasses

    from poscli.extension import methods as extension_methods

    cls = get(name)
    applicable = extension_methods.applicable(cls)
    return {
        "name": name,
        "summary": cls.summary,
        "citation": cls.citation,
        "options": {f.name: f.default for f in dataclasses.fields(cls.Options)},
        "extension": ", ".join(applicable)
        if any(extension_methods.get(name).rescales for name in applicable)
        else "needs no rescaling",
    }
