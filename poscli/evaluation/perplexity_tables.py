"""The perplexity table: its columns, its CSV and markdown (the one pivot), the console table, and
the budget section that compares snapshots of one run."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from poscli.core.io import atomic_write, locked
from poscli.evaluation.by_position import CONTEXT_TOLERANCE, effective_context
from poscli.evaluation.evalset import NULL_PREFIX, null_stride
from poscli.evaluation.tables import format_interval, format_ppl, merge_rows, pivot_markdown
from poscli.model import runs

TABLE_COLUMNS = [
    "run",
    "label",
    "pe",
    "train_length",
    "corpus",
    "protocol",
    "length",
    "mode",
    "ppl",
    "ci_low",
    "ci_high",
    "bpb",
    "loss",
    "windows",
    "spans",
    "documents",
    "tokens",
    "eval_set",
    "note",
    "evaluated",
    "bpb_low",
    "bpb_high",
    "bytes",
    "parameters",
    "tokens_seen",
    "tokens_per_parameter",
    "train_flops",
]
TABLE_KEY = ["run", "corpus", "protocol", "mode", "length"]
SPAN_COLUMNS = [*TABLE_KEY, "span", "unit", "loss", "tokens"]
POSITION_COLUMNS = [
    "run",
    "label",
    "pe",
    "train_length",
    "corpus",
    "protocol",
    "length",
    "mode",
    "position_start",
    "position_end",
    "loss",
    "tokens",
]
# Tokens per forward pass when evaluating; long windows go one at a time.


def budget_markdown(table, positions) -> list[str]:
    """Each run's training budget and effective context at its train length, as Markdown lines."""
    from poscli.evaluation.reference import REFERENCE_RUN

    runs_rows = table[(table["pe"] != "reference") & (table["mode"] == "nonoverlapping")].drop_duplicates("run")
    if runs_rows.empty or "tokens_seen" not in runs_rows:
        return []
    rows, without_reference = [], 0
    for _, row in runs_rows.iterrows():
        seen = row.get("tokens_seen", float("nan"))
        if not np.isfinite(seen):
            continue
        context = "-"
        if positions is not None:
            at_length = positions[
                (positions["length"] == row["train_length"])
                & (positions["mode"] == "nonoverlapping")
                & (positions["corpus"] == row["corpus"])
                & (positions["protocol"] == row["protocol"])
            ]
            mine = at_length[at_length["run"] == row["run"]].to_dict("records")
            reference = at_length[at_length["run"] == REFERENCE_RUN].to_dict("records")
            if {b["position_start"] for b in mine} - {b["position_start"] for b in reference}:
                reference = None  # the table has no 3-gram curve on these windows
            if mine:
                without_reference += reference is None
                tokens, open_ended = effective_context(mine, reference)
                context = f"{tokens}{'+' if open_ended else ''} of {int(row['train_length'])}"
        rows.append(
            f"| {row['label']} | {seen / 1e6:.2f}M | {row['tokens_per_parameter']:.1f} | {row['train_flops']:.2e} | "
            f"{context} |"
        )
    if not rows:
        return []
    relative = (
        "its own loss (this table has no 3-gram curve by position)"
        if without_reference
        else "its loss less the 3-gram's on the same targets (which carries the text's difficulty, not positions)"
    )
    return [
        "Training budget of each run (tokens seen, with its base's for an extension; FLOPs 6 N D + 6 L T d D, Kaplan "
        "et al., 2020) and its effective context at its train length: the first octave of positions after which "
        f"{relative}, pooled by octave, falls by less than {CONTEXT_TOLERANCE} nats ('+': still falling in the "
        "last octave, so the model may use all of its length).\n",
        "| run | tokens seen | tokens per parameter | training FLOPs | effective context |",
        "|---|---|---|---|---|",
        *rows,
        "",
    ]


def write_tables(
    result: dict[str, list[dict]], results: str | Path | None = None, table: str = "ppl", draw: bool = True
) -> list[Path]:
    """Merge an ``evaluate_runs`` result into RESULTS/TABLE.csv (long form), TABLE_spans.csv (each
    span's loss, for summaries over seeds) and TABLE_by_position.csv; rewrite TABLE.md (a pivot
    with intervals and counts) and the plots (not with ``draw`` False: a run's rows saved as it
    finishes). Returns the files written.

    A row replaces an earlier one for the same run, corpus, protocol, mode and length; other
    rows are kept.
    """
    folder = runs.results_dir(results)
    folder.mkdir(parents=True, exist_ok=True)
    csv_path, md_path = folder / f"{table}.csv", folder / f"{table}.md"
    with locked(folder / table):  # concurrent evaluations take turns: read, merge and write as one step
        combined = merge_rows(csv_path, result["rows"], TABLE_COLUMNS, TABLE_KEY)
        written = [csv_path]
        if result.get("spans"):
            written.append(folder / f"{table}_spans.csv")
            merge_rows(written[-1], result["spans"], SPAN_COLUMNS, [*TABLE_KEY, "span"], replace=TABLE_KEY)
        if result.get("positions"):
            written.append(folder / f"{table}_by_position.csv")
            merge_rows(
                written[-1], result["positions"], POSITION_COLUMNS, [*TABLE_KEY, "position_start"], replace=TABLE_KEY
            )
        if not draw:
            return written
        import pandas as pd

        positions_path = folder / f"{table}_by_position.csv"
        positions = pd.read_csv(positions_path) if positions_path.exists() else None
        with atomic_write(md_path) as handle:
            handle.write(markdown_pivot(combined) + "\n" + "\n".join(budget_markdown(combined, positions)))
        return [*written, md_path]


def describe_set(first, protocol: str, mode: str) -> str:
    """One sentence naming what stands behind every cell of a block."""
    if mode.startswith(NULL_PREFIX):
        context = int(mode.removeprefix(NULL_PREFIX))
        windows = (
            f"the truncation null (each non-overlapping window scored with its context cut to {context} tokens: "
            f"sliding windows of {context}, stride {null_stride(context)})"
        )
    else:
        windows = (
            "non-overlapping windows"
            if mode == "nonoverlapping"
            else f"sliding windows, stride {mode.split('-', 1)[1]}"
        )
    how = (
        "held-out documents joined into one stream, cut into spans"
        if protocol == "stream"
        else "one or more spans from the start of each document long enough"
    )
    return (
        f"corpus {first['corpus']}, {protocol} protocol ({how}), {windows}: every length scores the same "
        f"{int(first['tokens']):,} tokens ({int(first['spans'])} spans from {int(first['documents'])} documents; "
        f"evaluation set {first['eval_set']})"
    )


def format_bpb(cell) -> str:
    """A bits-per-byte cell: the value and, when the row has one, its interval."""
    row = cell.iloc[0]
    if not np.isfinite(row["bpb"]):
        return "n/a"
    low, high = row.get("bpb_low", np.nan), row.get("bpb_high", np.nan)
    return f"{row['bpb']:.3f}" + (f" [{low:.3f}, {high:.3f}]" if np.isfinite(low) and np.isfinite(high) else "")


def markdown_pivot(table) -> str:
    """Runs by lengths: perplexity and its 95% interval in each cell; one block per corpus,
    protocol and mode, headed by the sample behind it."""
    lines = []
    for (corpus, protocol, mode), part in table.groupby(["corpus", "protocol", "mode"], sort=True):
        scored = part[part["tokens"] > 0]
        bytes_per_token = not np.allclose(
            scored["bpb"], np.log2(scored["ppl"]), rtol=1e-6, equal_nan=True
        )  # a tokenizer other than bytes
        measure = (
            "Perplexity per token (the tokens are not bytes: compare tokenizers in bits per byte, the second table)"
            if bytes_per_token
            else "Perplexity (bits per byte = log2 of perplexity)"
        )
        lines.append(
            f"{measure} with its 95% bootstrap interval over the evaluation sample; "
            + (describe_set(scored.iloc[0], protocol, mode) if len(scored) else f"corpus {corpus}")
            + ". "
            "`n/a`: the encoding has no representation at that length.\n"
        )
        if scored["eval_set"].nunique() > 1:
            lines.append(
                f"**These rows come from {scored['eval_set'].nunique()} different evaluation sets** (column eval_set "
                "of the CSV): "
                + (
                    "runs with different tokenizers cut the same held-out text into different tokens; compare their "
                    "perplexity "
                    "only within a set and across sets in bits per byte, over the bytes each scores.\n"
                    if bytes_per_token
                    else "compare only rows of the same set.\n"
                )
            )
        notes = sorted({n for n in part["note"] if n and not n.startswith("n/a")})
        for note in notes:
            lines.append(f"Note: {note}.\n")
        lines += pivot_markdown(
            part,
            "run",
            {
                "run": lambda first: first["label"],
                "pe": lambda first: first["pe"],
                "train length": lambda first: "-" if first["pe"] == "reference" else first["train_length"],
            },
            lambda cell: (
                f"{format_ppl(cell['ppl'].iloc[0])} "
                f"{format_interval(cell['ci_low'].iloc[0], cell['ci_high'].iloc[0])}".strip()
            ),
            sort=False,
        )
        if bytes_per_token:
            lines += [
                "",
                "Bits per byte with its 95% bootstrap interval: the summed loss over the UTF-8 bytes the scored tokens "
                "stand for, comparable across tokenizers; bytes: the text each run's cells score.\n",
            ]
            lines += pivot_markdown(
                part,
                "run",
                {
                    "run": lambda first: first["label"],
                    "pe": lambda first: first["pe"],
                    "bytes": lambda first: (
                        f"{int(first['bytes']):,}" if np.isfinite(first.get("bytes", np.nan)) else "-"
                    ),
                },
                format_bpb,
                sort=False,
            )
        lines.append("")
    return "\n".join(lines)


def console_table(rows: list[dict], protocol: str, stride: int | None):
    """An evaluation's rows as a rich table for the console, titled with the sample behind them;
    a truncation null's perplexity beside the cell it belongs to (column "context cut")."""
    from rich.table import Table

    nulls = {(row["run"], row["length"]): row for row in rows if str(row["mode"]).startswith(NULL_PREFIX)}
    rows = [row for row in rows if not str(row["mode"]).startswith(NULL_PREFIX)]
    first = next((row for row in rows if row["tokens"]), None)
    windows = "non-overlapping windows" if stride is None else f"sliding windows, stride {stride}"
    sample = (
        f"; every length scores the same {first['tokens']:,} tokens: {first['spans']} spans from {first['documents']} "
        "documents"
        if first
        else ""
    )
    shown = Table(title=f"perplexity ({protocol} protocol, {windows}{sample})")
    columns = [
        "run",
        "pe",
        "train len",
        "length",
        "ppl",
        "95% interval",
        *(["context cut"] if nulls else []),
        "bits/byte",
        "windows",
        "note",
    ]
    for column in columns:
        shown.add_column(column, justify="left" if column in ("run", "pe", "note") else "right")
    for row in rows:
        na = row["note"].startswith("n/a")
        null = nulls.get((row["run"], row["length"]))
        cut = (
            [f"{format_ppl(null['ppl'])} @ {null['mode'].removeprefix(NULL_PREFIX)}" if null is not None else "-"]
            if nulls
            else []
        )
        shown.add_row(
            row["label"],
            row["pe"],
            "-" if row["pe"] == "reference" else str(row["train_length"]),
            str(row["length"]),
            format_ppl(row["ppl"]),
            format_interval(row["ci_low"], row["ci_high"]),
            *cut,
            "n/a" if na else f"{row['bpb']:.3f}",
            str(row["windows"]),
            row["note"],
        )
    return shown
