"""The ``poscli`` command line: thin commands over the library.

Each command parses its options, calls one library function and prints. Every known failure is a
:class:`~poscli.errors.PoscliError` and is reported by ``main`` as one line with exit code 2 (1
for environment failures); click's own usage errors are shown as click shows them.
``POSCLI_DEBUG=1`` shows tracebacks. torch is imported only inside the commands that need it,
so ``--help`` answers quickly.
"""

from __future__ import annotations

import os
import sys
from typing import Annotated, Any

import typer

from poscli import __version__
from poscli.cli.common import app

# isort: off
# Each registers its commands on the app, in the order --help lists them.
from poscli.cli import train  # noqa: F401, E402
from poscli.cli import measure  # noqa: F401, E402
from poscli.cli import studies  # noqa: F401, E402

# isort: on
from poscli.errors import PoscliError


def _version(value: bool) -> None:
    if value:
        print(f"poscli {__version__}")
        raise typer.Exit()


@app.callback()
def root(
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Show the version and exit.")
    ] = False,
    trust_code: Annotated[
        bool,
        typer.Option(
            "--trust-code",
            help="Import user code (package.module:Class) a run or recipe names from the current folder too; by "
            "default only from PYTHONPATH and installed packages.",
        ),
    ] = False,
):
    """Train tiny GPTs with pluggable positional encodings and measure how they extrapolate."""
    if trust_code:  # the environment, so a recipe's steps and torchrun's processes inherit it
        from poscli.core.registry import TRUST_VARIABLE

        os.environ[TRUST_VARIABLE] = "1"


# --------------------------------------------------------------------------- entry point


# Typer checks a value's type with pydantic, whose words would reach the user as they are
_PYDANTIC_WORDS = (
    ("Value error, ", ""),
    ("Input should be a valid integer, unable to parse string as an integer", "give a whole number, e.g. 100"),
    ("Input should be a valid number, unable to parse string as a number", "give a number, e.g. 3e-4"),
)


def _plain_words(message: str) -> str:
    """A usage error's message in poscli's words: "Invalid value for '--steps': give a whole number"."""
    for said, meant in _PYDANTIC_WORDS:
        message = message.replace(said, meant)
    return message


def main(argv: list[str] | None = None) -> None:
    """Run the CLI; every known failure becomes one line on stderr and an exit code."""
    debug = os.environ.get("POSCLI_DEBUG") == "1"
    command = typer.main.get_command(app)
    finished = False
    try:
        code = command.main(args=argv, prog_name="poscli", standalone_mode=False)
        finished = True
    except PoscliError as error:
        if debug:
            raise
        if str(error):  # data-parallel processes other than rank 0 stop silently
            print(f"{error.prefix}{error}", file=sys.stderr)
        sys.exit(error.exit_code)
    except typer.Abort:
        print("aborted", file=sys.stderr)
        sys.exit(130)
    except typer.Exit as done:
        sys.exit(done.exit_code)
    except typer.TyperException as error:  # usage errors (bad option, missing argument), as click words them
        if debug:
            raise
        usage: Any = error  # click's exception as Typer raises it (Typer carries its own click)
        if type(error).__name__ == "NoArgsIsHelpError":  # `poscli plot`: its help, as --help shows it
            print(usage.ctx.get_help())
            sys.exit(0)
        if isinstance(getattr(usage, "message", None), str):
            usage.message = _plain_words(usage.message)
        usage.show()
        sys.exit(getattr(error, "exit_code", 2))
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        sys.exit(130)
    except OSError as error:
        if debug:
            raise
        print(
            f"error: {error.strerror or error}{': ' + str(error.filename) if error.filename else ''}", file=sys.stderr
        )
        sys.exit(1)
    finally:
        if "poscli.training.distributed" in sys.modules:  # data-parallel processes leave together when all went well
            sys.modules["poscli.training.distributed"].stop(wait=finished)
    sys.exit(code if isinstance(code, int) else 0)


if __name__ == "__main__":
    main()
