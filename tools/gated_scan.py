"""How far CoPE's and stick-breaking's scans go on a trained run, and what their early ends save.

    python tools/gated_scan.py RUN [RUN...] [--length 8k] [--results DIR] [--out FILE]

For each run (``--pe cope`` or ``stick-breaking``), one forward pass over the first ``--length``
held-out tokens of its corpus, twice: as poscli evaluates (a block of query rows stops scanning once
every row's gates over the nearer keys reach CoPE's last position, handing the farther keys to one
flash-attention call, or have taken all of stick-breaking's stick) and with both early ends switched
off (every chunk of keys scanned). Prints, and writes to ``--out`` as markdown, the median seconds
of each over ``--repeats`` passes,
the share of (query block, key chunk) pairs scanned with the early ends, and the largest difference
between the two passes' losses (0 for stick-breaking: the weights it skips are exactly 0).
``make bench`` times models at initialisation, whose gates near 1/2 end every scan within the first
chunk; this measures what a trained model's gates do.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import time
from pathlib import Path

import torch

from poscli.attention import data_dependent
from poscli.core.lengths import parse_length
from poscli.data.corpus import load_corpus
from poscli.encodings import stick_breaking
from poscli.model.runs import find_run, load_model


@contextlib.contextmanager
def counting_chunks():
    """Count the key chunks scored (``scaled_scores`` calls) while the block is open. -> {"chunks": N}."""
    count, original = {"chunks": 0}, data_dependent.scaled_scores

    def counted(*args):
        count["chunks"] += 1
        return original(*args)

    data_dependent.scaled_scores = counted
    try:
        yield count
    finally:
        data_dependent.scaled_scores = original


@contextlib.contextmanager
def without_early_ends():
    """Every chunk of keys scanned: no stick taken, no flash call for clamped positions."""
    taken, fast = stick_breaking.stick_taken, data_dependent.fast_path_available
    stick_breaking.stick_taken = lambda rest: False
    data_dependent.fast_path_available = lambda q: False
    try:
        yield
    finally:
        stick_breaking.stick_taken, data_dependent.fast_path_available = taken, fast


def heldout_window(config: dict, length: int) -> torch.Tensor:
    """The first span of ``length`` scored tokens of the run's held-out text, as ``poscli eval`` cuts
    them (byte-level runs). -> (1, length + 1)."""
    from poscli.data.tokenizer import ByteTokenizer
    from poscli.evaluation.evalset import build_eval_set

    train = config["train"]
    if train.get("tokenizer", "bytes") != "bytes":
        raise SystemExit(f"error: {config['name']} uses {train['tokenizer']}; this measures byte-level runs")
    corpus = load_corpus(train["data"]).tokenized(ByteTokenizer())
    span = build_eval_set(corpus, length, length).spans[0]
    return torch.as_tensor(span[: length + 1], dtype=torch.long)[None]


def timed_loss(model, inputs: torch.Tensor, targets: torch.Tensor, repeats: int) -> tuple[float, float]:
    """The loss of one forward pass and the median seconds over ``repeats`` passes."""
    seconds = []
    for _ in range(repeats):
        start = time.perf_counter()
        loss = float(model.loss(inputs, targets))
        seconds.append(time.perf_counter() - start)
    return loss, statistics.median(seconds)


def measure(run: str, length: int, results: str | None, repeats: int) -> dict:
    """One run's row: seconds with and without the early ends, chunks scanned, loss difference."""
    model, config = load_model(find_run(run, results), "cpu")
    if config["model"]["pe"] not in ("cope", "stick-breaking"):
        raise SystemExit(f"error: {run} uses --pe {config['model']['pe']}; this measures cope and stick-breaking runs")
    window = heldout_window(config, length)
    inputs, targets = window[:, :-1], window[:, 1:]
    with torch.no_grad():
        with counting_chunks() as early:
            loss_early, seconds_early = timed_loss(model, inputs, targets, repeats)
        with without_early_ends(), counting_chunks() as full:
            loss_full, seconds_full = timed_loss(model, inputs, targets, repeats)
        early["chunks"], full["chunks"] = early["chunks"] // repeats, full["chunks"] // repeats
    return {
        "run": run,
        "pe": config["model"]["pe"],
        "trained": f"{config['train']['steps']} steps at {config['model']['train_length']}, {config['train']['data']}",
        "length": length,
        "seconds": round(seconds_early, 2),
        "seconds, every chunk": round(seconds_full, 2),
        "speed-up": round(seconds_full / seconds_early, 2),
        "chunks scanned": f"{early['chunks']} of {full['chunks']} ({early['chunks'] / full['chunks']:.0%})",
        "loss": round(loss_early, 6),
        "loss difference": f"{abs(loss_early - loss_full):.1e}",
    }


def markdown(rows: list[dict]) -> str:
    columns = list(rows[0])
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(str(row[c]) for c in columns) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python tools/gated_scan.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", help="trained cope or stick-breaking runs")
    parser.add_argument("--length", default="8k", help="tokens in the window (default 8k)")
    parser.add_argument("--results", default=None, help="the results folder the runs are in")
    parser.add_argument("--out", type=Path, default=None, help="write the table here as markdown")
    parser.add_argument("--repeats", type=int, default=3, help="forward passes timed each way (the median; default 3)")
    args = parser.parse_args(argv)
    torch.manual_seed(0)
    rows = [measure(run, parse_length(args.length, "--length"), args.results, args.repeats) for run in args.runs]
    text = markdown(rows)
    print(text, end="")
    if args.out is not None:
        command = f"python tools/gated_scan.py {' '.join(args.runs)} --length {args.length}"
        args.out.write_text(
            f"Produced by `{command}` (the median of {args.repeats} forward passes each way, each run).\n\n{text}"
        )


if __name__ == "__main__":
    main()
