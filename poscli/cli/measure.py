"""``poscli eval``, ``plot`` and ``data``: measuring runs and preparing corpora."""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Annotated

import typer

from poscli.cli.common import (
    RUN_NAMES,
    TRAIN_OPTIONS,
    Quiet,
    Results,
    app,
    complete_runs,
    declared,
    new_console,
    print_table,
    read_bytes,
    read_length,
    record_history,
    typer_option,
)
from poscli.training.requests.evaluate import EvalRequest
from poscli.training.requests.inspect import InspectRequest


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

    console = new_console()
    written, shown, table = evaluate_runs(run_names, request, console)
    print_table(shown)
    console.print("wrote " + ", ".join(str(p) for p in written))
    record_history(request.results, table)


OPTIONAL_RUN_NAMES = inspect.Parameter(
    "run_names",
    inspect.Parameter.POSITIONAL_OR_KEYWORD,
    default=None,
    annotation=Annotated[
        list[str] | None,
        typer.Argument(metavar="[RUN...]", autocompletion=complete_runs, help="Runs (names or folders), or hf:NAME."),
    ],
)


@app.command(
    "inspect",
    epilog="Examples: poscli inspect rope alibi --lengths 256,1k,4k | poscli inspect rope rope+yarn-x8 rope+pi-x8 "
    "| poscli inspect --pe rope --train-length 128 --method pi --method yarn --lengths 1k",
)
@declared(InspectRequest, OPTIONAL_RUN_NAMES)
def inspect_command(run_names: list[str] | None, request: InspectRequest):
    """Why an encoding extrapolates or fails: attention entropy, attention span and mass by distance, the
    share on the first keys, RoPE angle coverage and frequency use, on the spans poscli eval scores; with
    --pe and no run, the angle coverage of an encoding and its extensions from their configuration."""
    from poscli.evaluation.inspection.tables import summary_lines
    from poscli.study.steps import inspect_runs

    console = new_console()
    written, summary, table = inspect_runs(run_names or [], request, console)
    if summary is not None:
        console.print("\n".join(summary_lines(summary)))
    console.print("wrote " + ", ".join(str(p) for p in written))
    record_history(request.results, table)


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
        typer.Option(
            "--max-distance", parser=read_length, metavar="LENGTH", help="Largest relative distance, e.g. 1k."
        ),
    ] = 1024,
    pairs: Annotated[int, typer.Option(metavar="N", help="Random (q, k) pairs averaged.")] = 80,
    seed: Annotated[int, typer.Option(metavar="N", help="Seed for the random pairs.")] = 0,
    results: Results = None,
):
    """Mean q.k against relative distance for sinusoidal and RoPE: RESULTS/decay.png and .csv."""
    from poscli.evaluation.decay import write_decay

    csv_path, png_path = write_decay(results, dim, base, max_distance, pairs, seed)
    print(f"wrote {csv_path} and {png_path}")
    record_history(results, "decay")


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
    from poscli.evaluation.tasks import draw_subset
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
        typer.Option(
            "--tokenizer-sample", parser=read_bytes, metavar="BYTES", help="Text a BPE is trained on, e.g. 100M."
        ),
    ] = 100 << 20,
    heldout_fraction: Annotated[
        float, typer.Option("--heldout-fraction", metavar="F", help="Share of documents held out (by their hash).")
    ] = 0.01,
    data_split: Annotated[str, typer_option(TRAIN_OPTIONS["data_split"])] = TRAIN_OPTIONS["data_split"].default,
    text_column: Annotated[str | None, typer_option(TRAIN_OPTIONS["text_column"])] = None,
    join_rows: Annotated[str, typer_option(TRAIN_OPTIONS["join_rows"])] = TRAIN_OPTIONS["join_rows"].default,
    streaming: Annotated[bool, typer_option(TRAIN_OPTIONS["streaming"])] = False,
    max_data_bytes: Annotated[int | None, typer_option(TRAIN_OPTIONS["max_data_bytes"])] = None,
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
        console=new_console(),
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
