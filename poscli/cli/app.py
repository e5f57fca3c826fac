"""The ``poscli`` command line: thin commands over the library.

Each command parses its options, calls one library function and prints. Every known failure is a
:class:`~poscli.errors.PoscliError` and is reported by ``main`` as one line with exit code 2 (1
for environment failures); click's own usage errors are shown as click shows them.
``POSCLI_DEBUG=1`` shows tracebacks. torch is imported only inside the commands that need it,
so ``--help`` answers quickly.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.util
import inspect
import os
import sys
from enum import Enum
from pathlib import Path
from typing import Annotated, Any

import typer

from poscli import __version__
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


def _length(value) -> int:
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


def _bytes(value) -> int:
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
    return 0 if str(value).strip() == "0" else _length(value)


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


def _complete_runs(incomplete: str) -> list[str]:
    from poscli.model.runs import existing_runs

    return [name for name in existing_runs(os.environ.get("POSCLI_RESULTS")) if name.startswith(incomplete)]


PARSERS = {"length": _length, "length-or-zero": _length_or_zero, "bytes": _bytes, "lengths": _lengths}
COMPLETIONS = {
    "encodings": _complete_encodings,
    "runs": _complete_runs,
    "devices": _complete_devices,
    "tasks": _complete_tasks,
}


def _registry_names(which: str) -> str:
    """The names a help line's {encodings}, {methods} or {tasks} stands for."""
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


def typer_option(option: Option) -> Any:
    """The typer.Option (flags, help, parser, completion) of an option declared in poscli.training.requests."""
    flag = "--" + option.name.replace("_", "-")
    flags = option.flags or ((f"{flag}/--no-{flag[2:]}",) if option.kind is bool else (flag,))
    help_text = option.help
    for which in ("encodings", "methods", "tasks"):
        if "{" + which + "}" in help_text:
            help_text = help_text.replace("{" + which + "}", _registry_names(which))
    return typer.Option(
        *flags,
        help=help_text,
        metavar=option.metavar,
        parser=PARSERS.get(option.parse or ""),
        autocompletion=COMPLETIONS.get(option.complete or ""),
        envvar=option.envvar,
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
            autocompletion=_complete_runs,
            help="A trained run (with --resume: the interrupted extension).",
        ),
    ],
)
RUN_NAMES = inspect.Parameter(
    "run_names",
    _POSITIONAL,
    annotation=Annotated[
        list[str],
        typer.Argument(
            metavar="RUN...", autocompletion=_complete_runs, help="Run names (in results/runs) or run folders."
        ),
    ],
)
_EVAL_OPTIONS = declared_options(EvalRequest)
# The shared options of the commands that are not requests yet, typed for the checker, their flags from the requests.
Results = Annotated[str | None, typer_option(_EVAL_OPTIONS["results"])]
Device = Annotated[str, typer_option(_EVAL_OPTIONS["device"])]
Quiet = Annotated[bool, typer_option(_EVAL_OPTIONS["quiet"])]
Replace = Annotated[bool, typer_option(declared_options(ExtendRequest)["replace"])]


def _given(ctx: typer.Context, name: str, *sources: str) -> bool:
    """Whether option ``name`` came from one of ``sources`` (COMMANDLINE, ENVIRONMENT), not its default."""
    source = ctx.get_parameter_source(name)
    return source is not None and source.name in (sources or ("COMMANDLINE",))


def _console():
    from poscli.study.steps import make_console

    return make_console()


def _print_table(table) -> None:
    from rich.console import Console

    out = Console()
    if not out.is_terminal:
        out.width = 160  # piped or redirected: keep whole labels instead of 80-column ellipses
    out.print(table)


def _record(results, *tables: str) -> None:
    """Note the command line in RESULTS/history.jsonl, for the report."""
    from poscli.study.report import record_command

    record_command(results, sys.argv, tables)


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


# --------------------------------------------------------------------------- commands


@app.command(
    epilog="Examples: poscli train --pe alibi | poscli train --pe rope --pe-option base=500000 --train-length 512 "
    "| poscli train --pe alibi,rope --seeds 0,1,2 --jobs 2 | poscli train --resume rope"
)
@declared(TrainRequest, CONTEXT)
def train(ctx: typer.Context, request: TrainRequest):
    """Train a tiny GPT with the chosen positional encoding and write results/runs/NAME.

    A run name that exists is never reused: resume it (--resume NAME), start it over (--replace)
    or pick another --name."""
    from poscli.training.options import train_plan

    name, results, seeds, nproc = request.name, request.results, request.seeds, request.nproc
    if request.resume is not None:
        _resume(ctx, request, request.resume)
        return
    encodings_swept, model_config, train_config = train_plan(request)
    if len(encodings_swept) > 1 or seeds is not None or request.jobs != 1:
        swept_seeds = _parse_seeds(seeds) if seeds is not None else [request.seed]
        _sweep(encodings_swept, swept_seeds, request.jobs, nproc, name, results)
        return
    if nproc != 1:  # everything is checked here first, so a bad option fails once, not once per process
        _launch_torchrun(nproc, train_config.batch_size)

    from poscli.study.steps import train_run

    console = _console()
    result = train_run(request, console, plan=(encodings_swept, model_config, train_config))
    if result is None:  # a data-parallel process other than rank 0: rank 0 reports
        return
    console.print(result.summary())
    _record(results)
    print(result.run)


def _parse_seeds(text: str) -> list[int]:
    try:
        values = [int(part) for part in text.split(",")]
    except ValueError:
        raise PoscliError(f"--seeds {text!r}: use whole numbers separated by commas, e.g. --seeds 0,1,2") from None
    if len(set(values)) != len(values):
        raise PoscliError(f"--seeds {text!r} repeats a seed")
    return values


def _sweep(pes: list[str], seeds: list[int], jobs: int, nproc: int, name: str | None, results) -> None:
    """Every (encoding, seed) as its own ``poscli train`` process, ``jobs`` at a time."""
    from poscli.study.sweep import train_sweep, without_options

    if nproc != 1:
        raise PoscliError("a sweep runs whole runs side by side; drop --nproc (or run one run with --nproc)")
    base = without_options(sys.argv[1:], {"--pe", "--seeds", "--seed", "--jobs", "--name", "--quiet", "-q"})
    console = _console()
    try:
        folders = train_sweep(pes, seeds, jobs, name, base, results, report=console.print)
    finally:
        _record(results)
    for folder in folders:
        print(folder)


def _launch_torchrun(nproc: int, batch_size: int) -> None:
    """Re-run this very command under torchrun with ``nproc`` processes on this machine."""
    import subprocess

    from poscli.study.sweep import without_options

    if nproc < 1:
        raise PoscliError(f"--nproc must be at least 1, got {nproc}")
    if batch_size % nproc:
        raise PoscliError(
            f"--batch-size {batch_size} does not split evenly over {nproc} processes; use a multiple of {nproc}"
        )
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        raise PoscliError("--nproc cannot be used inside torchrun; torchrun already started the processes")
    args = without_options(sys.argv[1:], {"--nproc"})
    # -P (here and in each worker): the current folder is not put on the import path (see poscli.study.sweep)
    worker = [sys.executable, "-P", "-m", "poscli"]
    command = [
        sys.executable,
        "-P",
        "-m",
        "torch.distributed.run",
        "--nproc-per-node",
        str(nproc),
        "--no-python",
        *worker,
    ]
    command += args
    sys.exit(subprocess.run(command).returncode)


def _resume(
    ctx: typer.Context, request: TrainRequest | ExtendRequest, name: str, options: set[str] | None = None
) -> None:
    """``--resume NAME``: the options given again (``options``, default every train option) are checked
    against the run's config by the library."""
    from poscli.training.options import TRAIN_OPTIONS

    results, quiet = request.results, request.quiet

    for flag in ("name", "replace"):
        if _given(ctx, flag):
            raise PoscliError(
                f"--{flag} cannot be combined with --resume: the run keeps its name and its steps (poscli train "
                "--resume NAME)"
            )
    given = {
        option: getattr(request, option)
        for option in (options or TRAIN_OPTIONS)
        if _given(ctx, option, "COMMANDLINE", "ENVIRONMENT")
    }
    from poscli.study.steps import resume_run

    console = _console()
    result = resume_run(name, results, console, quiet, given)
    if result is None:
        return
    console.print(result.summary())
    _record(results)
    print(result.run)


@app.command(
    epilog="Examples: poscli extend rope --method yarn --target 4k | poscli extend rope --method pi --target 32k "
    "--steps 0 "
    "| poscli extend rope --method base --rope-base 500000 --target 4k | poscli extend rope+yarn-x16 --resume",
    context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
)
@declared(ExtendRequest, CONTEXT, RUN)
def extend(ctx: typer.Context, run: str, request: ExtendRequest):
    """Extend a run's context as a new run: the encoding's own method (rescaled RoPE frequencies, a
    stretched learned table, interpolated sinusoidal positions), then brief fine-tuning.

    A method's own options are flags after RUN (--beta-fast 16, --window 64) or -M KEY=VALUE;
    poscli methods lists each method's options and defaults."""
    from poscli.study.steps import method_flags

    request = dataclasses.replace(request, method_option=[*(request.method_option or []), *method_flags(ctx.args)])
    if request.resume:
        _resume_extension(ctx, run, request)
        return
    from poscli.model.pretrained import is_pretrained
    from poscli.study.steps import extend_pretrained_model, extend_run

    console = _console()
    if is_pretrained(run):
        folder = extend_pretrained_model(run, request)
        console.print(f"wrote {folder}, checked against poscli's frequencies. Evaluate with: poscli eval hf:{folder}")
        print(folder)
        return
    result = extend_run(run, request, console)
    if result is None:
        return
    console.print(f"{result.summary()}. Evaluate with: poscli eval {result.run.name}")
    _record(request.results)
    print(result.run)


def _resume_extension(ctx: typer.Context, run: str, request: ExtendRequest) -> None:
    """``poscli extend RUN --resume``: only --device may change."""
    kept = ("run", "resume", "results", "quiet", "device")
    extra = [k for k in ctx.params if k not in kept and _given(ctx, k)]
    if extra:
        flags = ", ".join("--" + k.replace("_", "-") for k in extra)
        raise PoscliError(f"--resume continues {run!r} as it was configured; drop {flags}")
    _resume(ctx, request, run, options={"device"})


@app.command(
    "search-factors",
    epilog="Example: poscli search-factors rope --target 2k --out factors.json && "
    "poscli extend rope --method longrope --target 2k --factors factors.json",
)
def search_factors_command(
    run: Annotated[
        str, typer.Argument(metavar="RUN", autocompletion=_complete_runs, help="A trained RoPE run (not extended).")
    ],
    target: Annotated[
        int, typer.Option(parser=_length, metavar="LENGTH", help="The length the factors are for, e.g. 2k.")
    ],
    out: Annotated[
        Path | None,
        typer.Option(
            metavar="FILE",
            help="The factors JSON to write (default: RESULTS/searches/RUN-longrope-TARGET.json, with -needle before "
            ".json for --score needle); FILE.search.json "
            "keeps the state and trajectory.",
        ),
    ] = None,
    population: Annotated[int, typer.Option(metavar="N", help="Candidates per generation.")] = 16,
    generations: Annotated[int, typer.Option(metavar="N", help="Generations.")] = 10,
    parents: Annotated[int, typer.Option(metavar="N", help="Best candidates kept as parents each generation.")] = 4,
    windows: Annotated[
        int,
        typer.Option(metavar="N", help="Windows of the target length from the training split that score a candidate."),
    ] = 2,
    seed: Annotated[int, typer.Option(metavar="N", help="Seed of the windows and of the search.")] = 0,
    score: Annotated[
        str,
        typer.Option(
            metavar="perplexity|needle",
            help="perplexity: the loss on windows of the training split; needle: the loss on the answer tokens of "
            "passkey prompts of the target length (LongRoPE2's needle-driven fitness, Shang et al., 2025).",
        ),
    ] = "perplexity",
    device: Device = "auto",
    results: Results = None,
    quiet: Quiet = False,
):
    """LongRoPE's evolutionary search for per-frequency RoPE rescale factors (Ding et al., 2024):
    minimises the loss at the target length; resumes where it stopped."""
    from poscli.study.steps import search

    written = search(
        run,
        target,
        results,
        device,
        _console(),
        quiet,
        out,
        population=population,
        generations=generations,
        parents=parents,
        windows=windows,
        seed=seed,
        score=score,
    )
    print(written)


@app.command(
    "tune",
    epilog="Example: poscli tune rope --method self-extend --target 2k && poscli extend rope --target 2k "
    "--options-from results/tuning/rope-self-extend-2048.json",
)
def tune_command(
    run: Annotated[
        str, typer.Argument(metavar="RUN", autocompletion=_complete_runs, help="A trained run (not extended).")
    ],
    method: Annotated[str, typer.Option(metavar="METHOD", help="The extension method whose options to choose.")],
    target: Annotated[int, typer.Option(parser=_length, metavar="LENGTH", help="The length to tune for, e.g. 2k.")],
    budget: Annotated[int, typer.Option(metavar="N", help="Candidates to evaluate at most (the defaults first).")] = 12,
    score: Annotated[
        str,
        typer.Option(
            metavar="perplexity|needle",
            help="perplexity: the loss on windows of the training split; needle: the loss on the answer tokens of "
            "passkey prompts (LongRoPE2's needle-driven perplexity).",
        ),
    ] = "perplexity",
    windows: Annotated[int, typer.Option(metavar="N", help="Windows (or passkey prompts) that score a candidate.")] = 2,
    grid: Annotated[
        list[str] | None,
        typer.Option(
            metavar="KEY=V1,V2", help="The values to try for an option (repeatable), instead of the method's."
        ),
    ] = None,
    out: Annotated[
        Path | None,
        typer.Option(
            metavar="FILE",
            help="The options JSON to write (default: RESULTS/tuning/RUN-METHOD-TARGET.json); FILE.tune.json keeps "
            "the state and trajectory.",
        ),
    ] = None,
    seed: Annotated[int, typer.Option(metavar="N", help="Seed of the windows and of the candidates' order.")] = 0,
    device: Device = "auto",
    results: Results = None,
    quiet: Quiet = False,
):
    """Choose an extension method's options for a run at a target length: a grid over the options it
    declares, each candidate applied without fine-tuning and scored on the training split; resumable."""
    from poscli.study.steps import tune_run

    written = tune_run(
        run, method, target, results, device, _console(), quiet, out, grid, budget=budget, score=score,
        windows=windows, seed=seed,
    )  # fmt: skip
    print(written)


@app.command(
    "eval",
    epilog="Examples: poscli eval rope alibi --lengths 256,1k,4k | poscli eval rope --stride 256 "
    "| poscli eval rope --protocol documents --lengths 1k | poscli eval rope --task passkey --lengths 256,1k",
)
@declared(EvalRequest, RUN_NAMES)
def evaluate(run_names: list[str], request: EvalRequest):
    """Perplexity (the same tokens at every length, non-overlapping or sliding windows, with 95%
    intervals and loss by position), passkey accuracy, or another task of each run at each length."""
    from poscli.study.steps import evaluate_runs

    console = _console()
    written, shown, table = evaluate_runs(run_names, request, console)
    _print_table(shown)
    console.print("wrote " + ", ".join(str(p) for p in written))
    _record(request.results, table)


plot_app = typer.Typer(
    help="Figures: training curves of runs (loss); sinusoidal and RoPE decay (decay, no model needed).",
    no_args_is_help=True,
)
app.add_typer(plot_app, name="plot")


@plot_app.command("decay", epilog="Example: poscli plot decay --dim 64 --max-distance 4k")
def plot_decay_command(
    dim: Annotated[int, typer.Option(metavar="D", help="Vector dimension d (even).")] = 128,
    base: Annotated[float, typer.Option(metavar="B", help="Sinusoid / RoPE base.")] = 10000.0,
    max_distance: Annotated[
        int,
        typer.Option("--max-distance", parser=_length, metavar="LENGTH", help="Largest relative distance, e.g. 1k."),
    ] = 1024,
    pairs: Annotated[int, typer.Option(metavar="N", help="Random (q, k) pairs averaged.")] = 80,
    seed: Annotated[int, typer.Option(metavar="N", help="Seed for the random pairs.")] = 0,
    results: Results = None,
):
    """Mean q.k against relative distance for sinusoidal and RoPE: RESULTS/decay.png and .csv."""
    from poscli.evaluation.decay import write_decay

    csv_path, png_path = write_decay(results, dim, base, max_distance, pairs, seed)
    print(f"wrote {csv_path} and {png_path}")
    _record(results, "decay")


@plot_app.command("loss", epilog="Examples: poscli plot loss rope alibi | poscli plot loss results/runs/tstl-* --facet")
def plot_loss_command(
    run_names: Annotated[list[str], typer.Argument(metavar="RUN...", help="Runs: names or run folders.")],
    out: Annotated[
        Path | None, typer.Option("--out", metavar="FILE", help="The figure (default RESULTS/loss.png).")
    ] = None,
    facet: Annotated[bool, typer.Option("--facet", help="One panel per run instead of one axis for all.")] = False,
    results: Results = None,
):
    """Training curves: each run's training loss and its held-out loss at the train length against tokens seen;
    runs trained with --eval-every add their validation curve (also as FILE.csv) and where it stopped improving."""
    from poscli.model import runs

    folders = [runs.find_run(name, results) for name in run_names]  # a missing run fails before matplotlib
    from poscli.evaluation.curves import convergence_line, write_curves
    from poscli.evaluation.plots import plot_loss

    path = out or runs.results_dir(results) / "loss.png"
    path.parent.mkdir(parents=True, exist_ok=True)
    curves = {f.name: runs.training_curve(f) for f in folders}
    print(f"wrote {plot_loss(curves, path, facet)}")
    written = write_curves(curves, path.with_suffix(".csv"))
    if written:  # --eval-every curves: where each stopped improving
        print(f"wrote {' and '.join(str(p) for p in written)}")
        for name, curve in curves.items():
            print(convergence_line(name, curve["heldout_steps"], curve["heldout_curve"][1]))


@plot_app.command("table", epilog="Example: poscli plot table tstl --runs 'tstl-rope-*' 'tstl-alibi-*'")
def plot_table_command(
    table: Annotated[str, typer.Argument(metavar="TABLE", help="A results table, e.g. tstl (RESULTS/TABLE.csv).")],
    runs: Annotated[
        list[str], typer.Option("--runs", metavar="PATTERN", help="Runs to draw: names or shell patterns (repeat).")
    ],
    name: Annotated[
        str | None, typer.Option("--name", metavar="NAME", help="The figures' name (default TABLE-subset).")
    ] = None,
    results: Results = None,
):
    """Figures of some runs of a table (the 3-gram row kept): RESULTS/NAME.png and its companions."""
    from poscli.evaluation.plots import draw_subset
    from poscli.model.runs import check_table_name, results_dir

    written = draw_subset(results_dir(results), table, runs, check_table_name(name or f"{table}-subset"))
    print("wrote " + ", ".join(str(path) for path in written))


data_app = typer.Typer(help="Corpora: their sources; tokenize once into token files on disk.", no_args_is_help=True)
app.add_typer(data_app, name="data")


@data_app.command("sources", epilog="Example: poscli data sources")
def list_sources():
    """List the corpus sources --data accepts, in the order a value is offered to them."""
    from poscli.data.sources import members

    for source in members():
        print(f"{source.name:<14} {source.summary}")


@data_app.command(
    "prepare",
    epilog="Examples: poscli data prepare big.txt --out data/big | "
    "poscli data prepare hf:pg19 --streaming --max-data-bytes 2G --tokenizer bpe:8192 --out data/pg19",
)
def data_prepare(
    source: Annotated[
        str,
        typer.Argument(
            metavar="CORPUS", help="stdlib, text files (a file, folder or glob), dataset files, or hf:NAME[:CONFIG]."
        ),
    ],
    out: Annotated[
        Path, typer.Option("--out", metavar="DIR", help="The folder to write (train.bin, heldout.bin, meta.json, ...).")
    ],
    tokenizer: Annotated[
        str,
        typer.Option(
            metavar="bytes|bpe:N|PATH",
            help="bytes, bpe:N (trained on the first --tokenizer-sample bytes of training text) or a tokenizer.json.",
        ),
    ] = "bytes",
    tokenizer_sample: Annotated[
        int,
        typer.Option("--tokenizer-sample", parser=_bytes, metavar="BYTES", help="Text a BPE is trained on, e.g. 100M."),
    ] = 100 << 20,
    heldout_fraction: Annotated[
        float, typer.Option("--heldout-fraction", metavar="F", help="Share of documents held out (by their hash).")
    ] = 0.01,
    data_split: Annotated[
        str, typer.Option("--data-split", metavar="SPLIT", help="The dataset split(s) to read.")
    ] = "train",
    text_column: Annotated[
        str | None, typer.Option("--text-column", metavar="COLUMN", help="The dataset column holding the text.")
    ] = None,
    join_rows: Annotated[
        str, typer.Option("--join-rows", metavar="none|heading|N", help="Join dataset rows into documents.")
    ] = "none",
    streaming: Annotated[bool, typer.Option("--streaming/--no-streaming", help="Read the dataset row by row.")] = False,
    max_data_bytes: Annotated[
        int | None,
        typer.Option("--max-data-bytes", parser=_bytes, metavar="BYTES", help="Stop after this much text, e.g. 2G."),
    ] = None,
    quiet: Quiet = False,
):
    """Tokenize a corpus once into DIR, read window by window by train and eval (--data DIR): a
    corpus larger than memory works. Documents are held out by their hash; a big text file is cut
    into 1 MB documents at line ends."""
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from poscli.data import prepared
    from poscli.data.sources.base import RowOptions

    prepared.check_request(out, heldout_fraction)
    rows = RowOptions(
        split=data_split, text_column=text_column, join_rows=join_rows, streaming=streaming, max_bytes=max_data_bytes
    )
    rows.validate()
    chosen = prepared.choose_tokenizer(tokenizer, source, rows, heldout_fraction, tokenizer_sample)
    total = max_data_bytes
    with Progress(
        TextColumn("[bold]prepare"),
        BarColumn(),
        TextColumn("{task.fields[done]} documents, {task.fields[size]}"),
        TimeElapsedColumn(),
        console=_console(),
        disable=quiet,
    ) as progress:
        task = progress.add_task("prepare", total=total, done=0, size="0 MB")
        corpus = prepared.prepare(
            prepared.source_documents(source, rows),
            out,
            chosen,
            heldout_fraction,
            source,
            progress=lambda documents, read: progress.update(
                task, completed=read, done=documents, size=f"{read / 2**20:,.0f} MB"
            ),
        )
    summary = corpus.summary()
    print(
        f"wrote {out}: {summary['documents']} documents, {summary['train_tokens']:,} train / "
        f"{summary['heldout_tokens']:,} held-out tokens "
        f"({corpus.tokenizer}); train with --data {out}"
    )


@app.command(
    "run", epilog="Examples: poscli run recipes/train-short-test-long.toml | poscli run recipes/smoke.toml --dry-run"
)
def run_recipe(
    recipe: Annotated[
        str,
        typer.Argument(
            metavar="RECIPE", help="A recipe file, e.g. recipes/train-short-test-long.toml (format: recipes/README.md)."
        ),
    ],
    jobs: Annotated[
        int,
        typer.Option(
            metavar="N", help="Runs to train or extend at once (each gets cores / jobs threads, or its own GPU)."
        ),
    ] = 1,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="List every step and whether it is done, to do or to resume; run nothing.")
    ] = False,
    each: Annotated[
        bool,
        typer.Option(
            "--each",
            help="Evaluate every run (and its snapshots) as soon as it is trained: a study stopped anywhere keeps "
            "every finished run's rows, and needs no weights to go on. With --jobs N, N runs train at once, then "
            "each is evaluated.",
        ),
    ] = False,
    launcher: Annotated[
        str,
        typer.Option(
            metavar="local|slurm|submitit-local",
            help="local: this machine; slurm: each step a Slurm job through submitit (pip install 'poscli[slurm]'; "
            "POSCLI_SLURM_PARTITION, _GPUS, _CPUS, _TIMEOUT_MIN); submitit-local: the same jobs as local processes.",
        ),
    ] = "local",
    runs: Annotated[
        list[str] | None,
        typer.Option(
            "--runs",
            metavar="PATTERN",
            help="Only the runs to train whose names match (a glob, repeatable), what is extended from them and "
            "their evaluations: a long study in parts, e.g. --runs 'xt-*-s[01]' for two seeds a session. "
            "Summaries and comparisons are the whole study's.",
        ),
    ] = None,
    sizes: Annotated[
        str | None,
        typer.Option(
            "--sizes",
            metavar="SET",
            help="The recipe's [sizes] set its size rungs take their shapes from (default: its first), e.g. --sizes "
            "gpu for recipes/scale-ladder.toml's 10x ladder; give a --results folder of its own.",
        ),
    ] = None,
    summaries: Annotated[
        bool,
        typer.Option(
            "--summaries",
            help="Train and evaluate nothing: rewrite the summaries over seeds, the published files (declared claims, "
            "gates, screen) and the report from the tables as they are, e.g. after declaring a claim.",
        ),
    ] = False,
    results: Results = None,
):
    """Run a whole study: train, extend, evaluate, summarise over seeds, compare with the papers, report.
    Steps already done are skipped and interrupted runs resumed, so running it again continues."""
    from poscli.study.runner import run_recipe as run
    from poscli.study.summaries import summarise

    if summaries:
        ignored = [flag for flag, given in (("--jobs", jobs != 1), ("--dry-run", dry_run), ("--each", each),
                   ("--launcher", launcher != "local"), ("--runs", bool(runs))) if given]  # fmt: skip
        if ignored:
            raise PoscliError(f"--summaries runs nothing, so {', '.join(ignored)} would be ignored: leave them out")
        for path in summarise(recipe, results, sizes):
            _console().print(f"wrote {path}", highlight=False)
        return
    run(recipe, results, jobs=jobs, dry_run=dry_run, console=_console(), each=each, launcher=launcher, only=runs,
        sizes=sizes)  # fmt: skip


@app.command(
    epilog="Examples: poscli export rope exports/rope | poscli export rope+yarn-4k exports/rope-yarn --no-check"
)
def export(
    run: Annotated[
        str,
        typer.Argument(
            metavar="RUN", autocompletion=_complete_runs, help="A RoPE or learned-position run (trained or extended)."
        ),
    ],
    folder: Annotated[Path, typer.Argument(metavar="DIR", help="The transformers model folder to write.")],
    check: Annotated[
        bool,
        typer.Option(
            "--check/--no-check",
            help="Load DIR with transformers and compare its logits with poscli's (needs transformers).",
        ),
    ] = True,
    replace: Annotated[
        bool, typer.Option("--replace", help="Overwrite an earlier export in DIR (other files there are kept).")
    ] = False,
    results: Results = None,
):
    """Write RUN as a transformers model folder: AutoModelForCausalLM.from_pretrained(DIR) loads it."""
    from poscli.export.hf import check_export
    from poscli.export.hf import export as export_run
    from poscli.model.runs import find_run

    found = find_run(run, results)
    written = export_run(found, folder, replace)
    print(f"wrote {folder} ({written['architectures'][0]})")
    if check and importlib.util.find_spec("transformers") is None:
        print("not checked: transformers is not installed (pip install 'transformers>=4.57' to load and check it)")
    elif check:
        checked = check_export(found, folder)
        lengths = ", ".join(str(length) for length in checked["lengths"])
        print(
            f"checked with transformers {checked['transformers']}: max |logit difference| "
            f"{checked['max_abs_diff']:.2e} at lengths {lengths}"
        )


@app.command(epilog="Example: poscli report --results results/reference")
def report(results: Results = None):
    """Write RESULTS/REPORT.md: every table and plot in the results folder, the commands that made them, the machine."""
    from poscli.study.report import write_report

    print(f"wrote {write_report(results)}")


@app.command("runs", epilog="Example: poscli runs --results results/reference")
def list_runs(results: Results = None):
    """List the runs in the results folder: name, encoding, status, steps, held-out perplexity."""
    from poscli.model.runs import run_lines

    for line in run_lines(results):
        print(line)


@app.command("encodings", epilog="Example: poscli encodings")
def list_encodings():
    """List the positional encodings: a line, a citation, their options and extension methods."""
    from poscli.encodings import describe, names

    for name in names():
        info = describe(name)
        options = ", ".join(f"{key}={value}" for key, value in info["options"].items()) or "none"
        print(
            f"{name:<11} {info['summary']} ({info['citation']})\n{'':<11} options: {options}; extend: "
            f"{info['extension']}"
        )


@app.command("methods", epilog="Example: poscli methods")
def list_methods():
    """List the extension methods of poscli extend: a line, a citation, options, training, where they apply."""
    from poscli import encodings
    from poscli.extension.methods import describe, get, names

    for name in names():
        info = describe(name)
        info["encodings"] = [pe for pe in encodings.names() if get(name).applies_to(encodings.get(pe)) is None]
        print(
            f"{name:<13} {info['summary']} ({info['citation']})\n{'':<13} training: {info['training']}; applies to: "
            f"{', '.join(info['encodings']) or 'none'}"
        )
        for key, (default, help_line) in info["options"].items():
            print(f"{'':<13} --{key.replace('_', '-')} (default {default if default != () else 'none'}): {help_line}")


# --------------------------------------------------------------------------- entry point


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
