"""Perplexity versus length, and the results tables.

Convention (Press et al., 2022, "nonoverlapping" evaluation): held-out documents at least
``length + 1`` tokens long are cut into non-overlapping windows of ``length`` inputs; every
target in a window is scored, and perplexity is exp of the token-weighted mean loss over
all windows. Byte-level tokens make bits per byte = loss / ln 2.
"""

from __future__ import annotations

import math
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

import numpy as np
import torch
import torch.nn.functional as F

from poscli import runs
from poscli.data import Corpus, eval_windows, load_corpus
from poscli.errors import NotApplicable
from poscli.io import atomic_write, locked

TABLE_COLUMNS = [
    "run", "label", "pe", "train_length", "length", "mode", "ppl", "bpb", "loss", "windows", "tokens", "note", "evaluated",
]
POSITION_COLUMNS = ["run", "label", "pe", "train_length", "length", "mode", "position_start", "position_end", "loss", "tokens"]
# Tokens per forward pass when evaluating; long windows go one at a time.
EVAL_BATCH_TOKENS = 16384


def mode_name(stride: int | None) -> str:
    return "nonoverlapping" if stride is None else f"sliding-{stride}"


@torch.inference_mode()
def perplexity(
    model,
    corpus: Corpus,
    length: int,
    max_tokens: int,
    device,
    stride: int | None = None,
    on_window: Callable[[int], None] | None = None,
    windows: list | None = None,
) -> dict:
    """Token-weighted perplexity over held-out windows of ``length`` inputs (see ``eval_windows``
    for the non-overlapping and sliding-window conventions).

    ``windows``, if given, are the ``eval_windows`` already cut for these arguments.
    Returns loss (nats/token), ppl, bpb (bits per byte), windows and tokens scored, and
    ``position_loss`` / ``position_tokens``: (length,) sums of loss and counts at each position.
    """
    windows = windows if windows is not None else eval_windows(corpus, length, max_tokens, stride)
    batch_size = max(1, EVAL_BATCH_TOKENS // length)
    position_loss = torch.zeros(length, dtype=torch.float64)
    position_tokens = torch.zeros(length, dtype=torch.float64)
    positions = torch.arange(length)
    for first in range(0, len(windows), batch_size):
        chunk = windows[first : first + batch_size]
        batch = torch.from_numpy(np.stack([w for w, _ in chunk])).to(device=device, dtype=torch.long)  # (B, T + 1)
        scored_from = torch.tensor([s for _, s in chunk])  # (B,)
        logits = model(batch[:, :-1])  # (B, T, V)
        losses = F.cross_entropy(logits.transpose(1, 2).float(), batch[:, 1:], reduction="none").cpu().double()  # (B, T)
        scored = (positions[None, :] >= scored_from[:, None]).double()  # (B, T)
        position_loss += (losses * scored).sum(0)
        position_tokens += scored.sum(0)
        if on_window:
            on_window(len(chunk))
    tokens = int(position_tokens.sum())
    loss = float(position_loss.sum()) / tokens
    return {
        "loss": loss,
        "ppl": math.exp(loss),
        "bpb": loss / math.log(2),
        "windows": len(windows),
        "tokens": tokens,
        "position_loss": position_loss.numpy(),
        "position_tokens": position_tokens.numpy(),
    }


def position_buckets(length: int, per_octave: int = 4) -> list[tuple[int, int]]:
    """Log-spaced buckets [start, end) of 0-based positions covering 0..length-1:
    position p has p + 1 tokens of context, and bucket edges are 2^(k/per_octave) in p + 1."""
    edges = sorted({int(2 ** (k / per_octave)) for k in range(int(math.log2(length) * per_octave) + 1)} | {length + 1})
    edges = [e for e in edges if e <= length + 1]
    if len(edges) > 2 and edges[-1] - edges[-2] < (edges[-2] - edges[-3]) / 2:
        del edges[-2]  # fold a sliver of a last bucket into the one before it
    return [(a - 1, b - 1) for a, b in zip(edges[:-1], edges[1:])]


def loss_by_position(position_loss, position_tokens, length: int) -> list[dict]:
    """Mean loss per log-spaced position bucket (buckets with no scored token are left out)."""
    rows = []
    for start, end in position_buckets(length):
        tokens = float(position_tokens[start:end].sum())
        if tokens:
            rows.append({"position_start": start, "position_end": end, "loss": float(position_loss[start:end].sum()) / tokens, "tokens": int(tokens)})
    return rows


def default_lengths(config: dict) -> list[int]:
    """A trained run: its train length x1, x4, x16. An extended run: its original length, its
    fine-tuning length and its target."""
    extension = config.get("extension")
    if extension:
        finetune = extension["finetune"]["length"]
        return sorted({extension["original_length"], extension["target"], *([finetune] if finetune else [])})
    train_length = config["model"]["train_length"]
    return [train_length, 4 * train_length, 16 * train_length]


def evaluate_runs(
    run_names: list[str],
    lengths: list[int] | None,
    results: str | Path | None = None,
    max_tokens: int = 131072,
    device: str = "auto",
    progress=None,
    stride: int | None = None,
) -> tuple[list[dict], list[dict]]:
    """Evaluate each run at each length. ``lengths`` None means ``default_lengths`` of each run.

    Every run and every length is checked (runs exist, lengths fit the held-out documents)
    before any model is evaluated, so a bad request fails fast and writes nothing.
    Returns the perplexity rows and the loss-by-position rows.
    """
    from poscli.device import select_device

    device = select_device(device)
    run_folders = [runs.find_run(name, results) for name in run_names]
    plans = []
    corpora: dict[tuple, Corpus] = {}
    for folder in run_folders:
        config = runs.read_config(folder)
        data = config["train"]["data"]
        key = (data, config["train"]["heldout_fraction"])
        if key not in corpora:
            corpora[key] = load_corpus(*key)
        run_lengths = lengths or default_lengths(config)
        for length in run_lengths:
            eval_windows(corpora[key], length, max_tokens=1, stride=stride)  # fails now, not after an hour of evaluation
        plans.append((folder, config, corpora[key], run_lengths))

    rows, position_rows = [], []
    for folder, config, corpus, run_lengths in plans:
        model, config = runs.load_model(folder, str(device))
        for length in run_lengths:
            row = {
                "run": config["name"],
                "label": runs.run_label(config),
                "pe": config["model"]["pe"],
                "train_length": config["model"]["train_length"],
                "length": length,
                "mode": mode_name(stride),
                "note": "",
                "evaluated": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            }
            windows = eval_windows(corpus, length, max_tokens, stride)
            task = progress.add_task(f"{row['label']} @ {length}", total=len(windows)) if progress else None
            advance = (lambda n, task=task: progress.advance(task, n)) if progress else None
            try:
                result = perplexity(model, corpus, length, max_tokens, device, stride, on_window=advance, windows=windows)
                identity = {k: row[k] for k in ("run", "label", "pe", "train_length", "length", "mode")}
                for bucket in loss_by_position(result.pop("position_loss"), result.pop("position_tokens"), length):
                    position_rows.append({**identity, **bucket})
                row.update(result)
            except NotApplicable as reason:
                row.update(ppl=float("nan"), bpb=float("nan"), loss=float("nan"), windows=0, tokens=0, note=f"n/a: {reason}")
                if progress:
                    progress.update(task, completed=len(windows))
            rows.append(row)
    return rows, position_rows


def merge_rows(path: Path, rows: list[dict], columns: list[str], key: list[str]):
    """Merge ``rows`` into the CSV at ``path``: every earlier row whose ``key`` matches a new
    row's is replaced, all others are kept. Returns the merged table (a DataFrame).
    Callers hold ``poscli.io.locked`` on the table, so concurrent writers lose no rows."""
    import pandas as pd

    new = pd.DataFrame(rows, columns=columns)
    if path.exists():
        old = pd.read_csv(path, keep_default_na=False, na_values=["nan", "NaN", ""])
        old = old[[c for c in columns if c in old.columns]]
        replaced = old.set_index(key).index.isin(new.set_index(key).index.unique())
        combined = pd.concat([old[~replaced], new], ignore_index=True)
    else:
        combined = new
    combined = combined.sort_values(key, kind="stable").reset_index(drop=True)
    with atomic_write(path) as handle:
        combined.to_csv(handle, index=False)
    return combined


def write_tables(rows: list[dict], results: str | Path | None = None, table: str = "ppl", position_rows: list[dict] | None = None) -> list[Path]:
    """Merge ``rows`` into RESULTS/TABLE.csv (long form), rewrite RESULTS/TABLE.md (a pivot) and
    RESULTS/TABLE.png (perplexity versus length); with ``position_rows``, also
    RESULTS/TABLE_by_position.csv and its plot. Returns the files written.

    A row replaces an earlier one for the same run, length and mode; other rows are kept.
    """
    from poscli.plots import draw_plots

    folder = runs.results_dir(results)
    folder.mkdir(parents=True, exist_ok=True)
    csv_path, md_path = folder / f"{table}.csv", folder / f"{table}.md"
    with locked(folder / table):  # concurrent evaluations take turns: read, merge and write as one step
        combined = merge_rows(csv_path, rows, TABLE_COLUMNS, ["run", "mode", "length"])
        with atomic_write(md_path) as handle:
            handle.write(markdown_pivot(combined))
        written = [csv_path, md_path]
        if position_rows:
            written.append(folder / f"{table}_by_position.csv")
            merge_rows(written[-1], position_rows, POSITION_COLUMNS, ["run", "mode", "length", "position_start"])
        return written + draw_plots(folder, table)


def format_ppl(value: float) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    return f"{value:.3f}" if value < 100 else f"{value:.1f}" if value < 1e5 else f"{value:.3g}"


def markdown_pivot(table) -> str:
    """Runs by lengths, perplexity in each cell; one block per evaluation mode."""
    lines = []
    for mode, part in table.groupby("mode", sort=True):
        lengths = sorted(part["length"].unique())
        lines.append(f"Perplexity ({mode} windows; bits per byte = log2 of perplexity). `n/a`: the encoding has no representation at that length.\n")
        lines.append("| run | pe | train length | " + " | ".join(str(n) for n in lengths) + " |")
        lines.append("|---|---|---|" + "---|" * len(lengths))
        for run, rows in part.groupby("run", sort=False):
            by_length = dict(zip(rows["length"], rows["ppl"]))
            first = rows.iloc[0]
            cells = [format_ppl(by_length[n]) if n in by_length else "" for n in lengths]
            lines.append(f"| {first['label']} | {first['pe']} | {first['train_length']} | " + " | ".join(cells) + " |")
        lines.append("")
    return "\n".join(lines)
