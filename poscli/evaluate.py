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
from poscli.errors import NotApplicable, PoscliError
from poscli.io import atomic_write

TABLE_COLUMNS = [
    "run", "label", "pe", "train_length", "length", "mode", "ppl", "bpb", "loss", "windows", "tokens", "note", "evaluated",
]
# Tokens per forward pass when evaluating; long windows go one at a time.
EVAL_BATCH_TOKENS = 16384


@torch.inference_mode()
def perplexity(
    model,
    corpus: Corpus,
    length: int,
    max_tokens: int,
    device,
    on_window: Callable[[int], None] | None = None,
) -> dict:
    """Token-weighted perplexity over non-overlapping held-out windows of ``length`` inputs.

    Returns loss (nats/token), ppl, bpb (bits per byte), windows and tokens scored.
    """
    windows = eval_windows(corpus, length, max_tokens)
    batch_size = max(1, EVAL_BATCH_TOKENS // length)
    total_loss, total_tokens = 0.0, 0
    for first in range(0, len(windows), batch_size):
        batch = torch.from_numpy(np.stack(windows[first : first + batch_size])).to(device=device, dtype=torch.long)  # (B, T + 1)
        logits = model(batch[:, :-1])  # (B, T, V)
        losses = F.cross_entropy(logits.flatten(0, 1).float(), batch[:, 1:].flatten(), reduction="sum")
        total_loss += losses.item()
        total_tokens += batch[:, 1:].numel()
        if on_window:
            on_window(len(batch))
    loss = total_loss / total_tokens
    return {
        "loss": loss,
        "ppl": math.exp(loss),
        "bpb": loss / math.log(2),
        "windows": len(windows),
        "tokens": total_tokens,
    }


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
) -> list[dict]:
    """Evaluate each run at each length. ``lengths`` None means ``default_lengths`` of each run.

    Every run and every length is checked (runs exist, lengths fit the held-out documents)
    before any model is evaluated, so a bad request fails fast and writes nothing.
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
            eval_windows(corpora[key], length, max_tokens=1)  # fails now, not after an hour of evaluation
        plans.append((folder, config, corpora[key], run_lengths))

    rows = []
    for folder, config, corpus, run_lengths in plans:
        model, config = runs.load_model(folder, str(device))
        for length in run_lengths:
            row = {
                "run": config["name"],
                "label": runs.run_label(config),
                "pe": config["model"]["pe"],
                "train_length": config["model"]["train_length"],
                "length": length,
                "mode": "nonoverlapping",
                "note": "",
                "evaluated": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            }
            windows = len(eval_windows(corpus, length, max_tokens))
            task = progress.add_task(f"{row['label']} @ {length}", total=windows) if progress else None
            advance = (lambda n, task=task: progress.advance(task, n)) if progress else None
            try:
                row.update(perplexity(model, corpus, length, max_tokens, device, on_window=advance))
            except NotApplicable as reason:
                row.update(ppl=float("nan"), bpb=float("nan"), loss=float("nan"), windows=0, tokens=0, note=f"n/a: {reason}")
                if progress:
                    progress.update(task, completed=windows)
            rows.append(row)
    return rows


def write_tables(rows: list[dict], results: str | Path | None = None, table: str = "ppl") -> tuple[Path, Path]:
    """Merge ``rows`` into RESULTS/TABLE.csv (long form) and rewrite RESULTS/TABLE.md (a pivot).

    A row replaces an earlier one for the same run, length and mode; other rows are kept.
    """
    import pandas as pd

    folder = runs.results_dir(results)
    folder.mkdir(parents=True, exist_ok=True)
    csv_path, md_path = folder / f"{table}.csv", folder / f"{table}.md"
    new = pd.DataFrame(rows, columns=TABLE_COLUMNS)
    if csv_path.exists():
        old = pd.read_csv(csv_path, keep_default_na=False, na_values=["nan", "NaN", ""])
        old = old[TABLE_COLUMNS] if set(TABLE_COLUMNS) <= set(old.columns) else old
        key = ["run", "length", "mode"]
        replaced = old.set_index(key).index.isin(new.set_index(key).index)
        combined = pd.concat([old[~replaced], new], ignore_index=True)
    else:
        combined = new
    combined = combined.sort_values(["run", "mode", "length"], kind="stable").reset_index(drop=True)
    with atomic_write(csv_path) as handle:
        combined.to_csv(handle, index=False)
    with atomic_write(md_path) as handle:
        handle.write(markdown_pivot(combined))
    return csv_path, md_path


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
