"""The options of ``poscli train``, ``poscli extend`` and ``poscli eval`` as typed requests: a frozen
dataclass per command (``train.py``, ``extend.py``, ``evaluate.py`` here) whose fields are its
options, each with its type, default and help in one place. The CLI builds its flags from these
fields (``poscli.cli.app``), recipes build the same requests from TOML
(``poscli.training.options.request_from``), and the library takes a request.

A field's metadata says how the command line reads it (see :class:`Option`); its type says what
it holds: ``list[str]`` a repeatable flag, ``X | None`` a value that may be left out.
"""

from __future__ import annotations

import dataclasses
import typing
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Option:
    """One option of a command, as the CLI, recipes and ``--resume`` read it: its Python name (the
    recipe key; the flag is --name-with-dashes), default and help line, and how the command line
    reads it.

    kind: the value's type (str, int, float, bool, Path, or list: repeatable); optional: None is
    allowed although the default is not None; choices: the values it takes; metavar: the value's
    placeholder in --help; parse: a CLI parser ("length" reads 4k, "length-or-zero", "lengths",
    "bytes" reads 200M); complete: what the shell completes ("encodings", "runs", "devices",
    "tasks"; a help line's {encodings}, {methods} or {tasks} lists the registry's names); flags: the flags
    when they are not --name (and --name/--no-name for a bool); envvar: an environment variable
    that sets it; field: the config field it sets, when not its name; runner: set by the command
    runner (name, resume, results, ...), not a property of what is trained or measured.
    """

    name: str
    default: Any
    help: str
    kind: type = str
    optional: bool = False
    choices: tuple[str, ...] = ()
    metavar: str | None = None
    parse: str | None = None
    complete: str | None = None
    flags: tuple[str, ...] = ()
    envvar: str | None = None
    field: str | None = None
    runner: bool = False
    panel: str | None = None  # its group in --help (a request's PANELS)


def option(default: Any, help: str, **how: Any) -> Any:
    """A request field: its default, help line and how the command line reads it (Option's other fields)."""
    return field(default=default, metadata={"help": help, **how})


def _spec(default: Any, help: str, **how: Any) -> dict[str, Any]:
    return {"default": default, "help": help, **how}


# Options several commands share, written once.
SHARED: dict[str, dict[str, Any]] = {
    "device": _spec(
        "auto",
        "auto (cuda, then mps, then cpu), cpu, cuda, cuda:N or mps.",
        metavar="DEVICE",
        complete="devices",
    ),
    "replace": _spec(
        False,
        "If a run of this name exists, delete it and start over.",
        flags=("--replace",),
        runner=True,
    ),
    "results": _spec(
        None,
        "Results folder (runs go in DIR/runs). Default: results",
        metavar="DIR",
        envvar="POSCLI_RESULTS",
        runner=True,
    ),
    "quiet": _spec(
        False,
        "No progress bars.",
        flags=("--quiet", "-q"),
        runner=True,
    ),
    "eval_every": _spec(
        None,
        (
            "The validation curve: every N steps, the held-out loss at --eval-lengths (the same held-out sample each "
            "time) into metrics.jsonl and the logger. Default: about 20 points, at most a tenth of the training "
            "time; 0: none."
        ),
        metavar="N",
    ),
    "eval_lengths": _spec(
        None,
        "The validation curve's lengths, e.g. 128,1k (default: the train length and 4x).",
        metavar="LENGTH,...",
        parse="lengths",
    ),
}


def shared(name: str) -> Any:
    """A request field for the shared option ``name``."""
    spec = dict(SHARED[name])
    return option(spec.pop("default"), spec.pop("help"), **spec)


def declared_options(request: type) -> dict[str, Option]:
    """A request class's fields as Option records (name -> Option), in their order: the kind from
    the field's type (``list[str]``: a repeatable flag), optional where None is allowed although the
    default is not None."""
    hints = typing.get_type_hints(request)
    panel_of = {name: panel for panel, names in getattr(request, "PANELS", {}).items() for name in names}
    options = {}
    for each in dataclasses.fields(request):
        kinds = [kind for kind in typing.get_args(hints[each.name]) or (hints[each.name],) if kind is not type(None)]
        kind = typing.get_origin(kinds[0]) or kinds[0]
        kind = str if each.metadata.get("parse") == "lengths" else kind  # one flag, read into a list of ints
        allows_none = type(None) in typing.get_args(hints[each.name])
        how = {key: value for key, value in each.metadata.items() if key != "help"}
        options[each.name] = Option(
            each.name, each.default, each.metadata["help"], kind=kind,
            optional=allows_none and each.default is not None, panel=panel_of.get(each.name), **how,
        )  # fmt: skip
    return options
