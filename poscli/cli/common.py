"""What the command modules share: the ``poscli`` Typer app, the flags built from the typed
requests (``poscli.training.requests``), the parsers and completions of option values, and the
console, table and history helpers."""

from __future__ import annotations

import functools
import inspect
import os
import sys
from enum import Enum
from typing import Annotated, Any

import typer
from typer.core import TyperCommand

from poscli.errors import PoscliError
from poscli.training.requests import Option, declared_options
from poscli.training.requests.evaluate import EvalRequest
from poscli.training.requests.extend import ExtendRequest
from poscli.training.requests.train import TrainRequest

app = typer.Typer(
    name="poscli",
    help="Train tiny GPTs with pluggable positional encodings and measure how they extrapolate.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)

# --------------------------------------------------------------------------- shared types and options


def read_length(value) -> int:
    """A number of tokens: 256, 1k (1024), 1m; every length option takes this form."""
    from poscli.core.lengths import parse_length

    if isinstance(value, int):
        return value
    try:
        return parse_length(str(value))
    except PoscliError:
        raise typer.BadParameter(
            f"{value!r} is not a length; use a whole number of tokens, optionally with k (x1024) or m (x1048576), e.g. "
            "4k"
        ) from None


def read_bytes(value) -> int:
    """A size in bytes: 1000000, 200M, 2G (powers of 1024: K, M, G)."""
    from poscli.core.lengths import parse_size

    if isinstance(value, int):
        return value
    try:
        return parse_size(value)
    except ValueError:
        raise typer.BadParameter(
            f"{value!r} is not a size; use a number of bytes, optionally with K, M or G, e.g. 200M"
        ) from None


def _length_or_zero(value) -> int:
    return 0 if str(value).strip() == "0" else read_length(value)


def _lengths(value) -> list[int]:
    from poscli.core.lengths import parse_lengths

    if isinstance(value, list):
        return value
    try:
        return parse_lengths(str(value))
    except PoscliError:
        raise typer.BadParameter(f"{value!r} is not a list of lengths; use e.g. 256,1k,4k") from None


def _complete_encodings(incomplete: str) -> list[str]:
    from poscli.encodings import names

    return [name for name in names() if name.startswith(incomplete)]


def _complete_devices(incomplete: str) -> list[str]:
    return [d for d in ("auto", "cpu", "cuda", "cuda:0", "mps") if d.startswith(incomplete)]


def _complete_tasks(incomplete: str) -> list[str]:
    from poscli.evaluation import tasks

    return [name for name in tasks.names() if name.startswith(incomplete)]


def _complete_methods(incomplete: str) -> list[str]:
    from poscli.extension import methods

    return [name for name in methods.names() if name.startswith(incomplete)]


def complete_runs(incomplete: str) -> list[str]:
    from poscli.model.runs import existing_runs

    return [name for name in existing_runs(os.environ.get("POSCLI_RESULTS")) if name.startswith(incomplete)]


PARSERS = {"length": read_length, "length-or-zero": _length_or_zero, "bytes": read_bytes, "lengths": _lengths}
COMPLETIONS = {
    "encodings": _complete_encodings,
    "runs": complete_runs,
    "devices": _complete_devices,
    "tasks": _complete_tasks,
    "methods": _complete_methods,
}


def _registry_names(which: str) -> str:
    """What a help line's {encodings}, {methods}, {tasks} or {sources} stands for: the registry's names
    (a corpus source by the form a value takes, e.g. hf:NAME[:CONFIG])."""
    if which == "sources":
        from poscli.data.sources import members

        sources: list[Any] = members()  # Source classes
        return ", ".join((source.form or source.name.replace("-", " ")).strip("'") for source in sources)
    if which == "encodings":
        from poscli.encodings import names
    elif which == "methods":
        from poscli.extension.methods import names
    else:
        from poscli.evaluation.tasks import names
    return ", ".join(names())


def typer_annotation(option: Option) -> Any:
    """An option declared in poscli.training.requests as the Annotated type Typer reads."""
    kind: Any = list[str] if option.kind is list else option.kind
    if option.choices:  # Typer offers choices as an Enum; declared() hands the command plain strings
        kind = _choice_type(option)
    if option.default is None or option.optional:
        kind = kind | None
    return Annotated[kind, typer_option(option)]


def _choice_type(option: Option) -> Any:
    """An Enum of the option's choices, as Typer offers them (its name is made at run time)."""
    members = {value: value for value in option.choices}
    return Enum(option.name.title().replace("_", ""), members, type=str)  # type: ignore[misc]


class GroupedHelp(TyperCommand):
    """A command whose --help lists its options under their groups (a request's PANELS, e.g. train's
    Model, Data, Optimisation), in plain text as the rest of poscli's help is."""

    def format_options(self, ctx, formatter) -> None:
        groups: dict[str, list[tuple[str, str]]] = {}
        for parameter in self.get_params(ctx):
            record = parameter.get_help_record(ctx)
            if record is not None:
                groups.setdefault(getattr(parameter, "rich_help_panel", None) or "Other options", []).append(record)
        for name, records in groups.items():
            with formatter.section(name):
                formatter.write_dl(records)


def typer_option(option: Option) -> Any:
    """The typer.Option (flags, help, parser, completion) of an option declared in poscli.training.requests."""
    flag = "--" + option.name.replace("_", "-")
    flags = option.flags or ((f"{flag}/--no-{flag[2:]}",) if option.kind is bool else (flag,))
    help_text = option.help
    for which in ("encodings", "methods", "tasks", "sources"):
        if "{" + which + "}" in help_text:
            help_text = help_text.replace("{" + which + "}", _registry_names(which))
    return typer.Option(
        *flags,
        help=help_text,
        metavar=option.metavar,
        parser=PARSERS.get(option.parse or ""),
        autocompletion=COMPLETIONS.get(option.complete or ""),
        envvar=option.envvar,
        rich_help_panel=option.panel,
    )


def declared(request_type: type, *leading: inspect.Parameter):
    """Decorator: the command's signature, which Typer reads, built from ``leading`` (context,
    arguments) and the fields of ``request_type`` (``poscli.training.requests``); the command takes
    the leading arguments by name and the options as one typed ``request``."""
    keyword = inspect.Parameter.KEYWORD_ONLY
    options = declared_options(request_type)
    parameters = [
        inspect.Parameter(o.name, keyword, default=o.default, annotation=typer_annotation(o)) for o in options.values()
    ]
    names = {parameter.name for parameter in leading}

    def decorate(command):
        @functools.wraps(command)
        def call(**values):
            given = {key: _plain(value) for key, value in values.items() if key not in names}
            return command(**{key: values[key] for key in names}, request=request_type(**given))

        call.__signature__ = inspect.Signature([*leading, *parameters])
        return call

    return decorate


def _plain(value: Any) -> Any:
    """A choice as its string (Typer hands an Enum member)."""
    return value.value if isinstance(value, Enum) else value


_POSITIONAL = inspect.Parameter.POSITIONAL_OR_KEYWORD
CONTEXT = inspect.Parameter("ctx", _POSITIONAL, annotation=typer.Context)
RUN = inspect.Parameter(
    "run",
    _POSITIONAL,
    annotation=Annotated[
        str,
        typer.Argument(
            metavar="RUN",
            autocompletion=complete_runs,
            help="A trained run (with --resume: the interrupted extension).",
        ),
    ],
)
TRAINED_RUN = inspect.Parameter(
    "run",
    _POSITIONAL,
    annotation=Annotated[
        str, typer.Argument(metavar="RUN", autocompletion=complete_runs, help="A trained run (not extended).")
    ],
)
RUN_NAMES = inspect.Parameter(
    "run_names",
    _POSITIONAL,
    annotation=Annotated[
        list[str],
        typer.Argument(
            metavar="RUN...", autocompletion=complete_runs, help="Run names (in results/runs) or run folders."
        ),
    ],
)
_EVAL_OPTIONS = declared_options(EvalRequest)
# The shared options of the commands that are not requests yet, typed for the checker, their flags from the requests.
Results = Annotated[str | None, typer_option(_EVAL_OPTIONS["results"])]
Device = Annotated[str, typer_option(_EVAL_OPTIONS["device"])]
Quiet = Annotated[bool, typer_option(_EVAL_OPTIONS["quiet"])]
Replace = Annotated[bool, typer_option(declared_options(ExtendRequest)["replace"])]
TRAIN_OPTIONS = declared_options(TrainRequest)  # data prepare reads the dataset as train does, with train's flags


def given_on_command_line(ctx: typer.Context, name: str, *sources: str) -> bool:
    """Whether option ``name`` came from one of ``sources`` (COMMANDLINE, ENVIRONMENT), not its default."""
    source = ctx.get_parameter_source(name)
    return source is not None and source.name in (sources or ("COMMANDLINE",))


def new_console():
    from poscli.study.steps import make_console

    return make_console()


def print_table(table) -> None:
    from rich.console import Console

    out = Console()
    if not out.is_terminal:
        out.width = 160  # piped or redirected: keep whole labels instead of 80-column ellipses
    out.print(table)


def record_history(results, *tables: str) -> None:
    """Note the command line in RESULTS/history.jsonl, for the report."""
    from poscli.study.report import record_command

    record_command(results, sys.argv, tables)
