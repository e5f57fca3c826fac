"""Passkey retrieval as an evaluation: greedy decoding of the key from prompts made by
:mod:`poscli.passkey`, accuracy per (length, depth) cell with Wilson intervals, and its tables."""

from __future__ import annotations

import random

import numpy as np

from poscli.tokens import encode
from poscli.errors import PoscliError
from poscli.passkey import ANSWER_BUDGET, MAX_KEY, is_correct, make_prompt
from poscli.stats import wilson_interval
from poscli.tables import merge_rows, pivot_markdown


PASSKEY_COLUMNS = ["run", "label", "pe", "train_length", "length", "depth", "trials", "correct", "accuracy", "ci_low", "ci_high", "note"]


def evaluate_passkey(
    run_names: list[str],
    lengths: list[int] | None,
    depths: list[float],
    trials: int = 20,
    results=None,
    device: str = "auto",
    progress=None,
) -> list[dict]:
    """Greedy-decoding passkey accuracy of each run for every (length, depth) cell.

    ``length`` is the whole context: a prompt of ``length - 6`` tokens and 6 generated ones.
    Every run sees the same prompts (keys and depths seeded by cell), so runs are comparable.
    """
    import torch

    from poscli import runs
    from poscli.device import select_device
    from poscli.errors import NotApplicable
    from poscli.evaluate import default_lengths

    device = select_device(device)
    if trials < 1:
        raise PoscliError(f"--trials must be at least 1, got {trials}")
    plans = []
    for name in run_names:
        folder = runs.find_run(name, results)
        config = runs.read_config(folder)
        run_lengths = lengths or default_lengths(config)
        for length in run_lengths:
            make_prompt(length - ANSWER_BUDGET, 0, MAX_KEY)  # too-short lengths fail before any work
        plans.append((folder, run_lengths))

    rows = []
    for folder, run_lengths in plans:
        model, config = runs.load_model(folder, str(device))
        for length in run_lengths:
            task = progress.add_task(f"passkey {runs.run_label(config)} @ {length}", total=len(depths) * trials) if progress else None
            for depth in depths:
                rng = random.Random(f"passkey-{length}-{depth}")
                keys = [rng.randint(1, MAX_KEY) for _ in range(trials)]
                prompts = np.stack([encode(make_prompt(length - ANSWER_BUDGET, depth, key)) for key in keys])
                row = {
                    "run": config["name"], "label": runs.run_label(config), "pe": config["model"]["pe"],
                    "train_length": config["model"]["train_length"], "length": length, "depth": depth, "trials": trials, "note": "",
                }
                try:
                    generated = greedy_generate(model, torch.from_numpy(prompts).to(device=device, dtype=torch.long), ANSWER_BUDGET)
                    correct = sum(is_correct(bytes(g).decode("utf-8", "replace"), key) for g, key in zip(generated.tolist(), keys))
                    low, high = wilson_interval(correct, trials)
                    row.update(correct=correct, accuracy=correct / trials, ci_low=low, ci_high=high)
                except NotApplicable as reason:
                    row.update(correct=0, accuracy=float("nan"), ci_low=float("nan"), ci_high=float("nan"), note=f"n/a: {reason}")
                rows.append(row)
                if progress:
                    progress.advance(task, trials)
    return rows


def greedy_generate(model, prompts, new_tokens: int):
    """Append ``new_tokens`` argmax tokens to each prompt. prompts: (B, T) -> generated (B, new_tokens)."""
    import torch

    tokens = prompts
    with torch.inference_mode():
        for _ in range(new_tokens):
            next_token = model(tokens)[:, -1].argmax(-1, keepdim=True)  # (B, 1)
            tokens = torch.cat([tokens, next_token], dim=1)  # (B, T + 1)
    return tokens[:, prompts.shape[1] :]


def write_passkey_tables(rows: list[dict], results=None, table: str = "passkey") -> list:
    """Merge into RESULTS/TABLE.csv, write the accuracy-versus-length table RESULTS/TABLE.md and
    one heatmap per run, RESULTS/TABLE-RUN.png."""
    from poscli import runs
    from poscli.io import atomic_write, locked
    from poscli.plots import draw_plots

    folder = runs.results_dir(results)
    folder.mkdir(parents=True, exist_ok=True)
    with locked(folder / table):  # concurrent evaluations take turns
        combined = merge_rows(folder / f"{table}.csv", rows, PASSKEY_COLUMNS, ["run", "length", "depth"])
        with atomic_write(folder / f"{table}.md") as handle:
            handle.write(passkey_markdown(combined))
        return [folder / f"{table}.csv", folder / f"{table}.md", *draw_plots(folder, table)]


def passkey_markdown(table) -> str:
    """Accuracy versus length per run (all depths pooled), with 95% Wilson intervals."""
    def pooled(cell) -> str:  # every depth of one length pooled
        if cell["accuracy"].isna().all():
            return "n/a"
        correct, trials = int(cell["correct"].sum()), int(cell["trials"].sum())
        low, high = wilson_interval(correct, trials)
        return f"{correct / trials:.2f} [{low:.2f}, {high:.2f}]"

    lines = [
        "Passkey retrieval: exact-match accuracy over all depths at each length, with its 95% Wilson interval. "
        "`n/a`: the encoding has no representation at that length.\n",
        *pivot_markdown(table, "run", {
            "run": lambda first: first["label"], "pe": lambda first: first["pe"], "train length": lambda first: first["train_length"],
        }, pooled),
    ]
    return "\n".join(lines) + "\n"


def parse_depths(text: str) -> list[float]:
    """``--depths 0,25,50`` -> [0.0, 25.0, 50.0], each a percentage of the filler."""
    try:
        values = [float(part) for part in text.split(",")]
    except ValueError:
        raise PoscliError(f"--depths {text!r}: use percentages from 0 to 100, e.g. --depths 0,25,50,75,100") from None
    if any(not 0 <= v <= 100 for v in values):
        raise PoscliError(f"--depths {text!r}: every depth must be between 0 and 100, e.g. --depths 0,25,50,75,100")
    return values


def console_table(rows: list[dict], trials: int):
    """The rows as a rich table for the console."""
    from rich.table import Table

    shown = Table(title=f"passkey retrieval ({trials} trials per cell, 95% Wilson interval)")
    for column in ("run", "length", "depth %", "accuracy", "95% interval"):
        shown.add_column(column, justify="left" if column == "run" else "right")
    for row in rows:
        na = bool(row["note"])
        shown.add_row(row["label"], str(row["length"]), f"{row['depth']:g}", "n/a" if na else f"{row['accuracy']:.2f}",
                      "" if na else f"[{row['ci_low']:.2f}, {row['ci_high']:.2f}]")
    return shown
