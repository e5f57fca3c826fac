"""``poscli train``, ``extend``, ``search-factors`` and ``tune``: making runs."""

from __future__ import annotations

import dataclasses
import os
import sys

import typer

from poscli.cli.common import (
    CONTEXT,
    RUN,
    TRAINED_RUN,
    GroupedHelp,
    app,
    declared,
    given_on_command_line,
    new_console,
    record_history,
)
from poscli.errors import PoscliError
from poscli.training.requests.extend import ExtendRequest
from poscli.training.requests.search import SearchRequest, TuneRequest
from poscli.training.requests.train import TrainRequest

# --------------------------------------------------------------------------- commands


@app.command(
    cls=GroupedHelp,
    epilog="Examples: poscli train --pe alibi | poscli train --pe rope --pe-option base=500000 --train-length 512 "
    "| poscli train --pe alibi,rope --seeds 0,1,2 --jobs 2 | poscli train --resume rope",
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

    console = new_console()
    result = train_run(request, console, plan=(encodings_swept, model_config, train_config))
    if result is None:  # a data-parallel process other than rank 0: rank 0 reports
        return
    console.print(result.summary())
    record_history(results)
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
    console = new_console()
    try:
        folders = train_sweep(pes, seeds, jobs, name, base, results, report=console.print)
    finally:
        record_history(results)
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
        if given_on_command_line(ctx, flag):
            raise PoscliError(
                f"--{flag} cannot be combined with --resume: the run keeps its name and its steps (poscli train "
                "--resume NAME)"
            )
    given = {
        option: getattr(request, option)
        for option in (options or TRAIN_OPTIONS)
        if given_on_command_line(ctx, option, "COMMANDLINE", "ENVIRONMENT")
    }
    from poscli.study.steps import resume_run

    console = new_console()
    result = resume_run(name, results, console, quiet, given)
    if result is None:
        return
    console.print(result.summary())
    record_history(results)
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
    from poscli.study.step_checks import method_flags

    request = dataclasses.replace(request, method_option=[*(request.method_option or []), *method_flags(ctx.args)])
    if request.resume:
        _resume_extension(ctx, run, request)
        return
    from poscli.model.pretrained import is_pretrained
    from poscli.study.steps import extend_pretrained_model, extend_run

    console = new_console()
    if is_pretrained(run):
        folder = extend_pretrained_model(run, request)
        console.print(f"wrote {folder}, checked against poscli's frequencies. Evaluate with: poscli eval hf:{folder}")
        print(folder)
        return
    result = extend_run(run, request, console)
    if result is None:
        return
    console.print(f"{result.summary()}. Evaluate with: poscli eval {result.run.name}")
    record_history(request.results)
    print(result.run)


def _resume_extension(ctx: typer.Context, run: str, request: ExtendRequest) -> None:
    """``poscli extend RUN --resume``: only --device may change."""
    kept = ("run", "resume", "results", "quiet", "device")
    extra = [k for k in ctx.params if k not in kept and given_on_command_line(ctx, k)]
    if extra:
        flags = ", ".join("--" + k.replace("_", "-") for k in extra)
        raise PoscliError(f"--resume continues {run!r} as it was configured; drop {flags}")
    _resume(ctx, request, run, options={"device"})


@app.command(
    "search-factors",
    epilog="Example: poscli search-factors rope --target 2k --out factors.json && "
    "poscli extend rope --method longrope --target 2k --factors factors.json",
)
@declared(SearchRequest, TRAINED_RUN)
def search_factors_command(run: str, request: SearchRequest):
    """LongRoPE's evolutionary search for per-frequency RoPE rescale factors (Ding et al., 2024):
    minimises the loss at the target length; resumes where it stopped."""
    from poscli.study.steps import search

    written = search(
        run,
        request.target,
        request.results,
        request.device,
        new_console(),
        request.quiet,
        request.out,
        population=request.population,
        generations=request.generations,
        parents=request.parents,
        windows=request.windows,
        seed=request.seed,
        score=request.score,
    )
    print(written)


@app.command(
    "tune",
    epilog="Example: poscli tune rope --method self-extend --target 2k && poscli extend rope --target 2k "
    "--options-from results/tuning/rope-self-extend-2048.json",
)
@declared(TuneRequest, TRAINED_RUN)
def tune_command(run: str, request: TuneRequest):
    """Choose an extension method's options for a run at a target length: a grid over the options it
    declares, each candidate applied without fine-tuning and scored on the training split; resumable."""
    from poscli.study.steps import tune_run

    written = tune_run(
        run, request.method, request.target, request.results, request.device, new_console(), request.quiet,
        request.out, request.grid, budget=request.budget, score=request.score, windows=request.windows,
        seed=request.seed,
    )  # fmt: skip
    print(written)
