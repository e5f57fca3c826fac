"""The ``poscli`` command line: thin commands over the library.

Every known failure is a :class:`~poscli.errors.PoscliError` and is reported by ``main`` as one
line with exit code 2 (1 for environment failures). ``POSCLI_DEBUG=1`` shows tracebacks.
torch is imported only inside the commands that need it, so ``--help`` answers quickly.
"""

from __future__ import annotations

import os
import sys
from typing import Annotated, Optional

import typer

from poscli.errors import PoscliError

app = typer.Typer(
    name="poscli",
    help="Train tiny GPTs with pluggable positional encodings and measure how they extrapolate.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)

# --------------------------------------------------------------------------- shared options

Results = Annotated[
    Optional[str],
    typer.Option("--results", envvar="POSCLI_RESULTS", help="Results folder (runs go in RESULTS/runs). Default: results"),
]
Device = Annotated[str, typer.Option("--device", help="auto (cuda, then mps, then cpu), cpu, cuda, cuda:N or mps.")]
Quiet = Annotated[bool, typer.Option("--quiet", "-q", help="No progress bars.")]


def _console():
    from rich.console import Console

    return Console(stderr=True, soft_wrap=True)


def _progress(console, quiet: bool):
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

    return Progress(
        TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), TimeRemainingColumn(),
        console=console, disable=quiet,
    )


# --------------------------------------------------------------------------- commands


# poscli train option -> config field, for checking the options given with --resume.
TRAIN_FIELDS = {
    "pe": "pe", "layers": "n_layer", "heads": "n_head", "width": "d_model", "train_length": "train_length",
    "rope_base": "rope_base", "rope_layout": "rope_layout", "shaw_clip": "shaw_clip", "xpos_gamma": "xpos_gamma", "rotary_fraction": "rotary_fraction", "rope_keep": "rope_keep", "data": "data", "mix": "mix",
    "batch_size": "batch_size", "steps": "steps", "minutes": "minutes", "lr": "lr", "warmup": "warmup_steps",
    "seed": "seed", "dtype": "dtype", "device": "device", "checkpoint_every": "checkpoint_every",
    "random_positions": "random_positions",
}
LENGTH_OPTIONS = {"train_length": "--train-length", "random_positions": "--random-positions"}


@app.command()
def train(
    ctx: typer.Context,
    pe: Annotated[str, typer.Option("--pe", help="Positional encoding: alibi, fire, kerple, learned, none, rope, shaw, sinusoidal, t5, xpos (poscli encodings describes each).")] = "rope",
    layers: Annotated[int, typer.Option(help="Transformer layers.")] = 4,
    heads: Annotated[int, typer.Option(help="Attention heads.")] = 4,
    width: Annotated[int, typer.Option(help="Model width (d_model).")] = 128,
    train_length: Annotated[str, typer.Option("--train-length", help="Tokens per training sequence, e.g. 256 or 1k.")] = "256",
    rope_base: Annotated[float, typer.Option("--rope-base", help="RoPE base (theta_i = base^(-2i/d)).")] = 10000.0,
    rope_layout: Annotated[str, typer.Option("--rope-layout", help="RoPE pairing: halves (GPT-NeoX) or interleaved (RoFormer).")] = "halves",
    shaw_clip: Annotated[int, typer.Option("--shaw-clip", help="Shaw et al.: clip relative distance at k.")] = 16,
    xpos_gamma: Annotated[float, typer.Option("--xpos-gamma", help="xPos: decay zeta^((m-n)/gamma).")] = 512.0,
    rotary_fraction: Annotated[float, typer.Option("--rotary-fraction", help="rope/xpos: rotate this fraction of each head's dimensions (GPT-NeoX).")] = 1.0,
    rope_keep: Annotated[float, typer.Option("--rope-keep", help="p-RoPE: keep the highest fraction of frequencies, zero the rest.")] = 1.0,
    data: Annotated[str, typer.Option(help="stdlib, passkey, a text file / folder / glob, or hf:NAME[:CONFIG].")] = "stdlib",
    mix: Annotated[Optional[str], typer.Option(help="Mix whole passkey examples into training, e.g. passkey:0.2.")] = None,
    batch_size: Annotated[int, typer.Option("--batch-size", help="Sequences per step.")] = 16,
    steps: Annotated[int, typer.Option(help="Optimizer steps (training stops at steps or --minutes, whichever first).")] = 1000,
    minutes: Annotated[Optional[float], typer.Option(help="Time budget in minutes.")] = None,
    lr: Annotated[float, typer.Option(help="Peak learning rate.")] = 1e-3,
    warmup: Annotated[int, typer.Option(help="Warmup steps (linear), then cosine decay to lr/10.")] = 100,
    seed: Annotated[int, typer.Option(help="Random seed for initialisation and batches.")] = 0,
    dtype: Annotated[str, typer.Option(help="fp32, or bf16 (autocast: matmuls in bfloat16, softmax statistics and RoPE angles in float32).")] = "fp32",
    random_positions: Annotated[str, typer.Option("--random-positions", help="Train each sequence at a sorted random subset of positions in [0, MAX), e.g. 4k (Ruoss et al., 2023); 0: off.")] = "0",
    device: Device = "auto",
    name: Annotated[Optional[str], typer.Option(help="Run name (default: the encoding, with -2, -3... if taken).")] = None,
    checkpoint_every: Annotated[int, typer.Option("--checkpoint-every", help="Steps between checkpoints (also written at the start, on Ctrl-C/SIGTERM and at the end).")] = 200,
    resume: Annotated[Optional[str], typer.Option(help="Continue run NAME (trained or extended) from its last checkpoint; other options must match its config.")] = None,
    nproc: Annotated[int, typer.Option("--nproc", help="Data-parallel processes on this machine (launches torchrun; the global batch stays --batch-size).")] = 1,
    seeds: Annotated[Optional[str], typer.Option(help="A sweep over seeds, e.g. 0,1,2 (with --pe a,b,c: every combination).")] = None,
    jobs: Annotated[int, typer.Option(help="Sweep runs at once (each gets cores / jobs threads, or its own GPU).")] = 1,
    results: Results = None,
    quiet: Quiet = False,
):
    """Train a tiny GPT with the chosen positional encoding and write results/runs/NAME."""
    from poscli import encodings
    from poscli.config import ModelConfig, TrainConfig, check_random_positions
    from poscli.lengths import parse_length

    if resume is not None:
        _resume(ctx, resume, results, quiet)
        return
    encodings_swept = pe.split(",")
    for each in encodings_swept:
        encodings.check_name(each)
    pe = encodings_swept[0]  # every name was checked above, before torch is even imported
    model_config = ModelConfig(
        n_layer=layers, n_head=heads, d_model=width, train_length=parse_length(train_length, "--train-length"),
        pe=pe, rope_base=rope_base, rope_layout=rope_layout, shaw_clip=shaw_clip, xpos_gamma=xpos_gamma,
        rotary_fraction=rotary_fraction, rope_keep=rope_keep,
    )
    train_config = TrainConfig(
        data=data, mix=mix, batch_size=batch_size, steps=steps, minutes=minutes, lr=lr, warmup_steps=warmup, seed=seed, device=device,
        dtype=dtype, checkpoint_every=checkpoint_every,
        random_positions=parse_length(random_positions, "--random-positions") if random_positions != "0" else 0,
    )
    train_config.validate()
    check_random_positions(model_config, train_config)
    if mix is not None:
        from poscli.passkey import parse_mix

        parse_mix(mix)
    if len(encodings_swept) > 1 or seeds is not None or jobs != 1:
        _sweep(encodings_swept, _parse_seeds(seeds) if seeds is not None else [seed], jobs, nproc, name, results)
        return
    if nproc != 1:  # everything is checked here first, so a bad option fails once, not once per process
        if nproc > 1 and batch_size % nproc:
            raise PoscliError(f"--batch-size {batch_size} does not split evenly over {nproc} processes; use a multiple of {nproc}")
        _launch_torchrun(nproc)

    from poscli.train import train as run_training

    console = _console()
    result = run_training(model_config, train_config, name=name, results=results, console=console, show_progress=not quiet)
    if result is None:  # a data-parallel process other than rank 0: rank 0 reports
        return
    console.print(
        f"finished {result.steps} steps in {result.seconds / 60:.1f} min; held-out loss at length "
        f"{model_config.train_length}: {result.heldout_loss:.4f} nats/token (perplexity {result.heldout_perplexity:.3f}, "
        f"{result.heldout_loss / 0.6931471805599453:.3f} bits/byte)"
    )
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


def _without_options(args: list[str], options: set[str]) -> list[str]:
    """The command line without these options (and their values)."""
    kept, skip = [], False
    for arg in args:
        if skip:
            skip = False
        elif arg in options:
            skip = True
        elif not any(arg.startswith(option + "=") for option in options):
            kept.append(arg)
    return kept


def _sweep(pes: list[str], seeds: list[int], jobs: int, nproc: int, name: str | None, results) -> None:
    """Every (encoding, seed) as its own ``poscli train`` process, ``jobs`` at a time."""
    import torch

    from poscli import runs
    from poscli.encodings import run_name_base
    from poscli.errors import EnvironmentFailure
    from poscli.sweep import Job, job_environments, run_jobs

    if jobs < 1:
        raise PoscliError(f"--jobs must be at least 1, got {jobs}")
    if nproc != 1:
        raise PoscliError("a sweep runs whole runs side by side; drop --nproc (or run one run with --nproc)")
    base = _without_options(sys.argv[1:], {"--pe", "--seeds", "--seed", "--jobs", "--name", "--quiet", "-q"})
    combos = [(pe, seed) for pe in pes for seed in seeds]
    names = [f"{name + '-' if name else ''}{run_name_base(pe)}{f'-s{seed}' if len(seeds) > 1 else ''}" for pe, seed in combos]
    for run_name in names:
        runs.check_name(run_name)
        if (runs.runs_dir(results) / run_name).exists():
            raise PoscliError(f"a run named {run_name!r} already exists in {runs.runs_dir(results)}; pass another --name prefix")
    envs = job_environments(len(combos), jobs, torch.cuda.device_count())
    sweep = [Job(run_name, [sys.executable, "-m", "poscli", *base, "--pe", pe, "--seed", str(seed), "--name", run_name, "--quiet"], env)
             for (pe, seed), run_name, env in zip(combos, names, envs)]
    console = _console()
    console.print(f"sweep: {len(sweep)} runs, {min(jobs, len(sweep))} at a time; logs in {runs.results_dir(results) / 'logs'}")
    outcomes = run_jobs(sweep, jobs, runs.results_dir(results) / "logs", report=console.print)
    failed = [o.job.name for o in outcomes if not o.ok]
    _record(results)
    if failed:
        raise EnvironmentFailure(f"{len(failed)} of {len(outcomes)} runs failed: {', '.join(failed)}; the others finished (see their logs)")
    for outcome in outcomes:
        print(runs.runs_dir(results) / outcome.job.name)


def _launch_torchrun(nproc: int) -> None:
    """Re-run this very command under torchrun with ``nproc`` processes on this machine."""
    import subprocess

    if nproc < 1:
        raise PoscliError(f"--nproc must be at least 1, got {nproc}")
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        raise PoscliError("--nproc cannot be used inside torchrun; torchrun already started the processes")
    args = _without_options(sys.argv[1:], {"--nproc"})
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(nproc), "-m", "poscli", *args]
    sys.exit(subprocess.run(command).returncode)


def _resume(ctx: typer.Context, name: str, results, quiet: bool, fields: dict | None = None) -> None:
    from poscli.lengths import parse_length
    from poscli.runs import find_run

    if ctx.get_parameter_source("name").name == "COMMANDLINE":
        raise PoscliError("--name cannot be combined with --resume: the run keeps its name (poscli train --resume NAME)")
    given = {field: ctx.params[option] for option, field in (fields or TRAIN_FIELDS).items()
             if ctx.get_parameter_source(option).name in ("COMMANDLINE", "ENVIRONMENT")}
    for field, flag in LENGTH_OPTIONS.items():
        if field in given:
            given[field] = parse_length(given[field], flag) if given[field] != "0" else 0
    find_run(name, results)  # a missing run fails before torch is imported
    from poscli.train import resume as resume_training

    console = _console()
    result = resume_training(name, results, console=console, show_progress=not quiet, given=given)
    if result is None:
        return
    console.print(
        f"finished {result.steps} steps in {result.seconds / 60:.1f} min; held-out loss at its train length: "
        f"{result.heldout_loss:.4f} nats/token (perplexity {result.heldout_perplexity:.3f})"
    )
    _record(results)
    print(result.run)


@app.command()
def extend(
    ctx: typer.Context,
    run: Annotated[str, typer.Argument(metavar="RUN", help="A run trained with --pe rope (or learned, sinusoidal); with --resume, the interrupted extension.")],
    method: Annotated[Optional[str], typer.Option(help="rope: pi, ntk, dynamic-ntk, yarn, llama3, base (default: no change); learned: interpolate; sinusoidal: pi.")] = None,
    target: Annotated[Optional[str], typer.Option(help="Length to extend to, e.g. 4k or 32768.")] = None,
    factor: Annotated[Optional[float], typer.Option(help="Scale factor s (default: target / the run's train length).")] = None,
    steps: Annotated[int, typer.Option(help="Fine-tuning steps; 0 extends without training.")] = 400,
    finetune_length: Annotated[Optional[str], typer.Option("--finetune-length", help="Fine-tuning sequence length (default: min(target, 4 x train length)).")] = None,
    lr: Annotated[float, typer.Option(help="Fine-tuning peak learning rate.")] = 3e-4,
    batch_size: Annotated[Optional[int], typer.Option("--batch-size", help="Sequences per step (default: the parent's tokens per step).")] = None,
    beta_fast: Annotated[Optional[float], typer.Option("--beta-fast", help="yarn: rotations above which dimensions extrapolate (default 32).")] = None,
    beta_slow: Annotated[Optional[float], typer.Option("--beta-slow", help="yarn: rotations below which dimensions interpolate (default 1).")] = None,
    low_freq_factor: Annotated[Optional[float], typer.Option("--low-freq-factor", help="llama3: default 1.")] = None,
    high_freq_factor: Annotated[Optional[float], typer.Option("--high-freq-factor", help="llama3: default 4.")] = None,
    rope_base: Annotated[Optional[float], typer.Option("--rope-base", help="base: the new RoPE base, e.g. 500000.")] = None,
    seed: Annotated[int, typer.Option(help="Random seed for the fine-tuning batches.")] = 0,
    device: Device = "auto",
    name: Annotated[Optional[str], typer.Option(help="Name of the new run (default: RUN+METHOD-xFACTOR).")] = None,
    resume: Annotated[bool, typer.Option("--resume", help="Continue the interrupted extension RUN from its last checkpoint.")] = False,
    results: Results = None,
    quiet: Quiet = False,
):
    """Extend a run's context: rescale RoPE's frequencies (or stretch a learned table, or interpolate
    sinusoidal positions) and fine-tune briefly, as a new run. `poscli extend RUN --resume`
    continues an interrupted extension (the same as `poscli train --resume RUN`)."""
    from poscli.lengths import parse_length

    if resume:
        extra = [k for k in ctx.params if k not in ("run", "resume", "results", "quiet", "device") and ctx.get_parameter_source(k).name == "COMMANDLINE"]
        if extra:
            raise PoscliError(f"--resume continues {run!r} as it was configured; drop {', '.join('--' + k.replace('_', '-') for k in extra)}")
        _resume(ctx, run, results, quiet, fields={"device": "device"})
        return
    if method is None or target is None:
        raise PoscliError(f"--method and --target are required, e.g. poscli extend {run} --method yarn --target 32k")

    given = {"beta_fast": beta_fast, "beta_slow": beta_slow, "low_freq_factor": low_freq_factor,
             "high_freq_factor": high_freq_factor, "rope_base": rope_base}
    options = {key: value for key, value in given.items() if value is not None}
    target_length = parse_length(target, "--target")
    finetune = parse_length(finetune_length, "--finetune-length") if finetune_length is not None else None
    from poscli.runs import find_run

    find_run(run, results)  # a missing run fails before torch is imported
    from poscli.extend import extend as run_extend

    console = _console()
    result = run_extend(
        run, method, target_length, factor=factor, steps=steps, finetune_length=finetune, options=options, name=name,
        results=results, lr=lr, batch_size=batch_size, seed=seed, device=device, console=console, show_progress=not quiet,
    )
    if result is None:
        return
    console.print(
        f"extended in {result.seconds / 60:.1f} min; held-out perplexity at its train length: {result.heldout_perplexity:.3f}. "
        f"Evaluate with: poscli eval {result.run.name}"
    )
    _record(results)
    print(result.run)


@app.command("eval")
def evaluate(
    run_names: Annotated[list[str], typer.Argument(metavar="RUN...", help="Run names (in results/runs) or run folders.")],
    lengths: Annotated[Optional[str], typer.Option(help="Comma-separated lengths, e.g. 256,1k,4k (default: each run's train length x1, x4, x16).")] = None,
    max_tokens: Annotated[str, typer.Option("--max-tokens", help="About how many tokens every length scores (the same tokens at every length).")] = "128k",
    stride: Annotated[Optional[str], typer.Option(help="Sliding windows: score only the last S tokens of each window (default: non-overlapping windows).")] = None,
    protocol: Annotated[str, typer.Option(help="stream: held-out documents joined and cut into spans (Press et al.); documents: only documents as long as the longest length (Peng et al.).")] = "stream",
    data: Annotated[Optional[str], typer.Option(help="Evaluate on this corpus instead of each run's own held-out text (stdlib, a file or folder, hf:NAME); a corpus a run did not train on is used whole.")] = None,
    reference: Annotated[bool, typer.Option("--reference/--no-reference", help="Add a context-free 3-gram row scored on the same spans.")] = True,
    allow_split_mismatch: Annotated[bool, typer.Option("--allow-split-mismatch", help="Evaluate even when a run's recorded held-out documents differ from the corpus' split now.")] = False,
    table: Annotated[Optional[str], typer.Option(help="Table name: writes RESULTS/TABLE.csv, .md and .png (default: ppl, or passkey for --task passkey).")] = None,
    task: Annotated[str, typer.Option(help="perplexity or passkey.")] = "perplexity",
    depths: Annotated[str, typer.Option(help="passkey: key depths in percent of the filler.")] = "0,25,50,75,100",
    trials: Annotated[int, typer.Option(help="passkey: prompts per (length, depth) cell.")] = 20,
    device: Device = "auto",
    results: Results = None,
    quiet: Quiet = False,
):
    """Perplexity (the same tokens at every length, non-overlapping or sliding windows, with 95%
    intervals and loss by position) or passkey accuracy of each run at each length."""
    from poscli.evalset import PROTOCOLS
    from poscli.lengths import parse_length, parse_lengths
    from poscli.runs import RUN_NAME, find_run

    if task not in ("perplexity", "passkey"):
        raise PoscliError(f"--task {task!r} is not a task; choose perplexity or passkey")
    if protocol not in PROTOCOLS:
        raise PoscliError(f"--protocol {protocol!r} is not a protocol; choose {' or '.join(PROTOCOLS)}")
    table = table or ("ppl" if task == "perplexity" else "passkey")
    parsed_lengths = parse_lengths(lengths) if lengths is not None else None
    budget = parse_length(max_tokens, "--max-tokens")
    stride = parse_length(stride, "--stride") if stride is not None else None
    if not RUN_NAME.match(table):
        raise PoscliError(f"--table {table!r} may use only letters, digits and . _ + -")
    for run_name in run_names:  # a missing run fails before torch is imported
        find_run(run_name, results)
    if task == "passkey":
        _evaluate_passkey(run_names, parsed_lengths, _parse_depths(depths), trials, table, device, results, quiet)
        return

    from rich.table import Table

    from poscli.evaluate import evaluate_runs, format_interval, format_ppl, write_tables

    console = _console()
    with _progress(console, quiet) as progress:
        result = evaluate_runs(run_names, parsed_lengths, results, budget, device, progress, stride, protocol, data, reference,
                               allow_split_mismatch)
    written = write_tables(result, results, table)

    rows = result["rows"]
    first = next((row for row in rows if row["tokens"]), None)
    windows = "non-overlapping windows" if stride is None else f"sliding windows, stride {stride}"
    sample = f"; every length scores the same {first['tokens']:,} tokens: {first['spans']} spans from {first['documents']} documents" if first else ""
    shown = Table(title=f"perplexity ({protocol} protocol, {windows}{sample})")
    for column in ("run", "pe", "train len", "length", "ppl", "95% interval", "bits/byte", "windows", "note"):
        shown.add_column(column, justify="left" if column in ("run", "pe", "note") else "right")
    for row in rows:
        na = row["note"].startswith("n/a")
        shown.add_row(
            row["label"], row["pe"], "-" if row["pe"] == "reference" else str(row["train_length"]), str(row["length"]),
            format_ppl(row["ppl"]), format_interval(row["ci_low"], row["ci_high"]),
            "n/a" if na else f"{row['bpb']:.3f}", str(row["windows"]), row["note"],
        )
    _print_table(shown)
    console.print("wrote " + ", ".join(str(p) for p in written))
    _record(results, table)


def _parse_depths(text: str) -> list[float]:
    try:
        values = [float(part) for part in text.split(",")]
    except ValueError:
        raise PoscliError(f"--depths {text!r}: use percentages from 0 to 100, e.g. --depths 0,25,50,75,100") from None
    if any(not 0 <= v <= 100 for v in values):
        raise PoscliError(f"--depths {text!r}: every depth must be between 0 and 100, e.g. --depths 0,25,50,75,100")
    return values


def _evaluate_passkey(run_names, lengths, depths, trials, table, device, results, quiet):
    from rich.table import Table

    from poscli.passkey import evaluate_passkey, write_passkey_tables

    console = _console()
    with _progress(console, quiet) as progress:
        rows = evaluate_passkey(run_names, lengths, depths, trials, results, device, progress)
    written = write_passkey_tables(rows, results, table)
    shown = Table(title=f"passkey retrieval ({trials} trials per cell, 95% Wilson interval)")
    for column in ("run", "length", "depth %", "accuracy", "95% interval"):
        shown.add_column(column, justify="left" if column == "run" else "right")
    for row in rows:
        na = bool(row["note"])
        shown.add_row(row["label"], str(row["length"]), f"{row['depth']:g}", "n/a" if na else f"{row['accuracy']:.2f}",
                      "" if na else f"[{row['ci_low']:.2f}, {row['ci_high']:.2f}]")
    _print_table(shown)
    console.print("wrote " + ", ".join(str(p) for p in written))
    _record(results, table)


def _print_table(table) -> None:
    from rich.console import Console

    out = Console()
    if not out.is_terminal:
        out.width = 160  # piped or redirected: keep whole labels instead of 80-column ellipses
    out.print(table)


def _record(results, *tables: str) -> None:
    """Note the command line in RESULTS/history.jsonl, for the report."""
    from poscli.report import record_command

    record_command(results, sys.argv, tables)


plot_app = typer.Typer(help="Figures that need no trained model.", no_args_is_help=True)
app.add_typer(plot_app, name="plot")


@plot_app.command("decay")
def plot_decay_command(
    dim: Annotated[int, typer.Option(help="Vector dimension d (even).")] = 128,
    base: Annotated[float, typer.Option(help="Sinusoid / RoPE base.")] = 10000.0,
    max_distance: Annotated[int, typer.Option("--max-distance", help="Largest relative distance.")] = 1024,
    pairs: Annotated[int, typer.Option(help="Random (q, k) pairs averaged.")] = 80,
    seed: Annotated[int, typer.Option(help="Seed for the random pairs.")] = 0,
    results: Results = None,
):
    """Mean q.k against relative distance for sinusoidal and RoPE (chapter section 4.5): RESULTS/decay.png and .csv."""
    if dim < 2 or dim % 2:
        raise PoscliError(f"--dim must be an even number of at least 2, got {dim}")
    if base <= 1:
        raise PoscliError(f"--base must be greater than 1, got {base:g}")
    if max_distance < 1:
        raise PoscliError(f"--max-distance must be at least 1, got {max_distance}")
    if pairs < 1:
        raise PoscliError(f"--pairs must be at least 1, got {pairs}")
    from poscli.decay import attention_decay
    from poscli.io import atomic_write
    from poscli.plots import plot_decay
    from poscli.runs import results_dir

    folder = results_dir(results)
    folder.mkdir(parents=True, exist_ok=True)
    result = attention_decay(dim, base, max_distance, pairs, seed)
    with atomic_write(folder / "decay.csv") as handle:
        handle.write("distance,sinusoidal,rope\n")
        for d, s, r in zip(result["distance"].tolist(), result["sinusoidal"].tolist(), result["rope"].tolist()):
            handle.write(f"{d},{s:.6f},{r:.6f}\n")
    path = plot_decay(result, folder / "decay.png", dim, base, pairs)
    print(f"wrote {folder / 'decay.csv'} and {path}")
    _record(results, "decay")


@app.command("run")
def run_recipe(
    recipe: Annotated[str, typer.Argument(metavar="RECIPE", help="A recipe file, e.g. recipes/train-short-test-long.toml (format: recipes/README.md).")],
    jobs: Annotated[int, typer.Option(help="Runs to train or extend at once (each gets cores / jobs threads, or its own GPU).")] = 1,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="List every step and whether it is done, to do or to resume; run nothing.")] = False,
    results: Results = None,
):
    """Run a whole study: train, extend, evaluate, summarise over seeds, compare with the papers, report.
    Steps already done are skipped and interrupted runs resumed, so running it again continues."""
    from poscli.recipes import run_recipe as run

    run(recipe, results, jobs=jobs, dry_run=dry_run, console=_console())


@app.command()
def report(results: Results = None):
    """Write RESULTS/REPORT.md: every table and plot in the results folder, the commands that made them, the machine."""
    from poscli.report import write_report

    print(f"wrote {write_report(results)}")


@app.command("runs")
def list_runs(results: Results = None):
    """List the runs in the results folder."""
    from poscli import runs as run_io

    names = run_io.existing_runs(results)
    if not names:
        print(f"no runs in {run_io.runs_dir(results)}; train one with: poscli train --pe rope")
        return
    for name in names:
        config = run_io.read_config(run_io.runs_dir(results) / name)
        held = config.get("heldout", {})
        ppl = f"ppl {held['ppl']:.3f} @ {held['length']}" if held else ""
        print(f"{name}\t{config['model']['pe']}\t{config.get('status', '?')}\t{config.get('steps_done', 0)} steps\t{ppl}")


@app.command("encodings")
def list_encodings():
    """List the positional encodings, with a line and a citation each."""
    from poscli import encodings

    for name in encodings.names():
        cls = encodings.get(name)
        print(f"{name:<11} {cls.summary} ({cls.citation})")


# --------------------------------------------------------------------------- entry point


def main(argv: list[str] | None = None) -> None:
    """Run the CLI; every known failure becomes one line on stderr and an exit code."""
    debug = os.environ.get("POSCLI_DEBUG") == "1"
    command = typer.main.get_command(app)
    try:
        code = command.main(args=argv, prog_name="poscli", standalone_mode=False)
    except PoscliError as error:
        if debug:
            raise
        if str(error):  # data-parallel processes other than rank 0 stop silently
            print(f"{error.prefix}{error}", file=sys.stderr)
        sys.exit(error.exit_code)
    except typer.Abort:
        print("aborted", file=sys.stderr)
        sys.exit(130)
    except typer.TyperException as error:  # usage errors: bad option, missing argument, bad number
        if debug:
            raise
        context = getattr(error, "ctx", None)
        where = f"poscli {context.info_name} --help" if context is not None and context.parent else "poscli --help"
        message = " ".join(error.format_message().split())
        print(f"error: {message} (see {where})", file=sys.stderr)
        sys.exit(getattr(error, "exit_code", 2))
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        sys.exit(130)
    except OSError as error:
        if debug:
            raise
        print(f"error: {error.strerror or error}{': ' + str(error.filename) if error.filename else ''}", file=sys.stderr)
        sys.exit(1)
    finally:
        if "poscli.distributed" in sys.modules:
            sys.modules["poscli.distributed"].stop()
    sys.exit(code if isinstance(code, int) else 0)


if __name__ == "__main__":
    main()
