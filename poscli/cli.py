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


@app.command()
def train(
    pe: Annotated[str, typer.Option("--pe", help="Positional encoding: alibi, learned, none, rope, shaw, sinusoidal, t5.")] = "rope",
    layers: Annotated[int, typer.Option(help="Transformer layers.")] = 4,
    heads: Annotated[int, typer.Option(help="Attention heads.")] = 4,
    width: Annotated[int, typer.Option(help="Model width (d_model).")] = 128,
    train_length: Annotated[str, typer.Option("--train-length", help="Tokens per training sequence, e.g. 256 or 1k.")] = "256",
    rope_base: Annotated[float, typer.Option("--rope-base", help="RoPE base (theta_i = base^(-2i/d)).")] = 10000.0,
    rope_layout: Annotated[str, typer.Option("--rope-layout", help="RoPE pairing: halves (GPT-NeoX) or interleaved (RoFormer).")] = "halves",
    shaw_clip: Annotated[int, typer.Option("--shaw-clip", help="Shaw et al.: clip relative distance at k.")] = 16,
    data: Annotated[str, typer.Option(help="stdlib, a text file / folder / glob, or hf:NAME[:CONFIG].")] = "stdlib",
    batch_size: Annotated[int, typer.Option("--batch-size", help="Sequences per step.")] = 16,
    steps: Annotated[int, typer.Option(help="Optimizer steps (training stops at steps or --minutes, whichever first).")] = 1000,
    minutes: Annotated[Optional[float], typer.Option(help="Time budget in minutes.")] = None,
    lr: Annotated[float, typer.Option(help="Peak learning rate.")] = 1e-3,
    warmup: Annotated[int, typer.Option(help="Warmup steps (linear), then cosine decay to lr/10.")] = 100,
    seed: Annotated[int, typer.Option(help="Random seed for initialisation and batches.")] = 0,
    device: Device = "auto",
    name: Annotated[Optional[str], typer.Option(help="Run name (default: the encoding, with -2, -3... if taken).")] = None,
    results: Results = None,
    quiet: Quiet = False,
):
    """Train a tiny GPT with the chosen positional encoding and write results/runs/NAME."""
    from poscli import encodings
    from poscli.config import ModelConfig, TrainConfig
    from poscli.lengths import parse_length

    encodings.get(pe)  # unknown names fail before anything is loaded
    model_config = ModelConfig(
        n_layer=layers, n_head=heads, d_model=width, train_length=parse_length(train_length, "--train-length"),
        pe=pe, rope_base=rope_base, rope_layout=rope_layout, shaw_clip=shaw_clip,
    )
    train_config = TrainConfig(
        data=data, batch_size=batch_size, steps=steps, minutes=minutes, lr=lr, warmup_steps=warmup, seed=seed, device=device,
    )
    train_config.validate()

    from poscli.train import train as run_training

    console = _console()
    result = run_training(model_config, train_config, name=name, results=results, console=console, show_progress=not quiet)
    console.print(
        f"finished {result.steps} steps in {result.seconds / 60:.1f} min; held-out loss at length "
        f"{model_config.train_length}: {result.heldout_loss:.4f} nats/token (perplexity {result.heldout_perplexity:.3f}, "
        f"{result.heldout_loss / 0.6931471805599453:.3f} bits/byte)"
    )
    print(result.run)


@app.command()
def extend(
    run: Annotated[str, typer.Argument(metavar="RUN", help="A run trained with --pe rope.")],
    method: Annotated[str, typer.Option(help="pi, ntk, dynamic-ntk, yarn, llama3, base (or default: no change).")],
    target: Annotated[str, typer.Option(help="Length to extend to, e.g. 4k or 32768.")],
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
    results: Results = None,
    quiet: Quiet = False,
):
    """Extend a RoPE run's context: rescale its frequencies and fine-tune briefly, as a new run."""
    from poscli import scaling
    from poscli.lengths import parse_length

    scaling.get_method(method)
    given = {"beta_fast": beta_fast, "beta_slow": beta_slow, "low_freq_factor": low_freq_factor,
             "high_freq_factor": high_freq_factor, "rope_base": rope_base}
    options = {key: value for key, value in given.items() if value is not None}
    target_length = parse_length(target, "--target")
    finetune = parse_length(finetune_length, "--finetune-length") if finetune_length is not None else None
    if name is not None:
        from poscli.runs import check_name

        check_name(name)

    from poscli.extend import extend as run_extend

    console = _console()
    result = run_extend(
        run, method, target_length, factor=factor, steps=steps, finetune_length=finetune, options=options, name=name,
        results=results, lr=lr, batch_size=batch_size, seed=seed, device=device, console=console, show_progress=not quiet,
    )
    console.print(
        f"extended in {result.seconds / 60:.1f} min; held-out perplexity at its train length: {result.heldout_perplexity:.3f}. "
        f"Evaluate with: poscli eval {result.run.name}"
    )
    print(result.run)


@app.command("eval")
def evaluate(
    run_names: Annotated[list[str], typer.Argument(metavar="RUN...", help="Run names (in results/runs) or run folders.")],
    lengths: Annotated[Optional[str], typer.Option(help="Comma-separated lengths, e.g. 256,1k,4k (default: each run's train length x1, x4, x16).")] = None,
    max_tokens: Annotated[str, typer.Option("--max-tokens", help="Held-out tokens scored per run and length, at most.")] = "128k",
    table: Annotated[str, typer.Option(help="Table name: writes RESULTS/TABLE.csv and RESULTS/TABLE.md.")] = "ppl",
    device: Device = "auto",
    results: Results = None,
    quiet: Quiet = False,
):
    """Perplexity of each run at each length over non-overlapping held-out windows."""
    from poscli.lengths import parse_length, parse_lengths
    from poscli.runs import RUN_NAME

    parsed_lengths = parse_lengths(lengths) if lengths is not None else None
    budget = parse_length(max_tokens, "--max-tokens")
    if not RUN_NAME.match(table):
        raise PoscliError(f"--table {table!r} may use only letters, digits and . _ + -")

    from rich.table import Table

    from poscli.evaluate import evaluate_runs, format_ppl, write_tables

    console = _console()
    with _progress(console, quiet) as progress:
        rows = evaluate_runs(run_names, parsed_lengths, results, budget, device, progress)
    csv_path, md_path = write_tables(rows, results, table)

    shown = Table(title="perplexity (non-overlapping windows)")
    for column in ("run", "pe", "train len", "length", "ppl", "bits/byte", "windows", "tokens"):
        shown.add_column(column, justify="left" if column in ("run", "pe") else "right")
    for row in rows:
        na = bool(row["note"])
        shown.add_row(
            row["label"], row["pe"], str(row["train_length"]), str(row["length"]), format_ppl(row["ppl"]),
            "n/a" if na else f"{row['bpb']:.3f}", str(row["windows"]), f"{row['tokens']:,}",
        )
    from rich.console import Console

    out = Console()
    if not out.is_terminal:
        out.width = 160  # piped or redirected: keep whole labels instead of 80-column ellipses
    out.print(shown)
    console.print(f"wrote {csv_path} and {md_path}")


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
        print(f"error: {error}", file=sys.stderr)
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
    sys.exit(code if isinstance(code, int) else 0)


if __name__ == "__main__":
    main()
