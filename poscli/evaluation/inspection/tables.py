"""``poscli inspect``'s files: RESULTS/TABLE.csv (the summary), TABLE_entropy.csv, TABLE_mass.csv,
TABLE_angles.csv and TABLE_frequencies.csv, merged run by run as ``poscli eval`` merges its tables;
TABLE.md; and the figures TABLE-entropy.png, -span.png, -mass.png, -angles.png, -frequencies.png."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from poscli.core.io import atomic_write, locked
from poscli.evaluation.inspection import figures
from poscli.evaluation.inspection.attention_maps import SINK_TOKENS
from poscli.evaluation.inspection.runs import SPAN_COLUMNS, SUMMARY_NOTE
from poscli.evaluation.stats import MIN_EFFECT
from poscli.evaluation.tables import format_estimate, merge_rows, read_table
from poscli.model.runs import results_dir

KEYS = {
    "summary": ["run", "length", "layer"],
    "entropy": ["run", "length", "layer", "head", "position_start"],
    "mass": ["run", "length", "layer", "head", "distance"],
    "angles": ["run", "length", "pair"],
    "frequencies": ["run", "length", "layer", "pair"],
}


PART_SUFFIXES = tuple(f"_{part}" for part in KEYS if part != "summary")  # TABLE_entropy.csv, ...
FIGURES = ("entropy", "span", "mass", "angles", "frequencies")  # TABLE-entropy.png, ...


def figure_paths(folder: Path, table: str) -> list[Path]:
    """The inspect figures of ``table`` that exist, in reading order."""
    return [path for name in FIGURES if (path := folder / f"{table}-{name}.png").exists()]


def table_path(results, table: str, part: str) -> Path:
    return results_dir(results) / (f"{table}.csv" if part == "summary" else f"{table}_{part}.csv")


def write_inspection(tables: dict[str, list[dict]], results, table: str) -> tuple[list[Path], object]:
    """Merge every part's rows into its CSV (a run's rows replace its earlier rows), write the markdown
    summary and draw the figures from the merged tables. -> (files written, the summary table)."""
    written, merged = [], {}
    for part, rows in tables.items():
        path = table_path(results, table, part)
        if not rows and not path.exists():
            continue
        with locked(path):
            if rows:
                columns = list(dict.fromkeys(key for row in rows for key in row))
                merged[part] = merge_rows(path, rows, columns, KEYS[part], replace=["run"])
                written.append(path)
            else:
                merged[part] = read_table(path)
    summary = merged.get("summary")
    if summary is not None:
        written.append(_write_markdown(summary, results_dir(results) / f"{table}.md", table, merged.get("angles")))
    written += _draw(merged, results_dir(results), table)
    return written, summary


def _draw(merged: dict, folder: Path, table: str) -> list[Path]:
    paths = []
    summary = merged.get("summary")
    if summary is not None and len(summary):
        paths.append(figures.plot_by_length(summary, "entropy", "attention entropy (nats)",
                                            f"{table}: attention entropy of a window's later half of queries",
                                            folder / f"{table}-entropy.png", figures.uniform_entropy))  # fmt: skip
        paths.append(figures.plot_by_length(summary, "span90", "distance holding 90% of attention",
                                            f"{table}: attention span (90%)", folder / f"{table}-span.png",
                                            figures.whole_window, marks="effective_context"))  # fmt: skip
    if merged.get("mass") is not None and len(merged["mass"]):
        paths.append(figures.plot_mass(merged["mass"], folder / f"{table}-mass.png", f"{table}: attention by distance"))
    if merged.get("angles") is not None and len(merged["angles"]):
        paths.append(figures.plot_angles(merged["angles"], folder / f"{table}-angles.png", f"{table}: RoPE angles"))
    if merged.get("frequencies") is not None and len(merged["frequencies"]):
        paths.append(figures.plot_frequencies(merged["frequencies"], folder / f"{table}-frequencies.png",
                                              f"{table}: frequency use (Barbero et al., 2024)"))  # fmt: skip
    return paths


def draw_tables(folder: Path, table: str) -> list[Path]:
    """The figures of an inspect table from its CSV files in ``folder`` (``poscli report`` redraws them)."""
    merged = {part: read_table(path) for part in KEYS if (path := table_path(folder, table, part)).exists()}
    return _draw(merged, folder, table)


def summary_lines(summary) -> list[str]:
    """The summary over all layers as markdown: a row per run and length."""
    rows = summary[summary["layer"].astype(str) == "all"].sort_values(["run", "length"])
    lines = [
        "| run | length | entropy (nats) | uniform | x train length's | "
        + " | ".join(SPAN_COLUMNS)
        + " | sink share | effective context |",
        "|---|---|---|---|---|" + "---|" * len(SPAN_COLUMNS) + "---|---|",
    ]
    for _, row in rows.iterrows():
        spans = [format_estimate(row[c], row[f"{c}_low"], row[f"{c}_high"], digits=0) for c in SPAN_COLUMNS]
        ratio = format_estimate(row["entropy_ratio"], row["entropy_ratio_low"], row["entropy_ratio_high"])
        context = f"{int(row['effective_context'])}{'+' if bool(row['context_open_ended']) else ''}"
        lines.append(
            f"| {row['run']} | {int(row['length'])} | "
            f"{format_estimate(row['entropy'], row['entropy_low'], row['entropy_high'], digits=2)} | "
            f"{row['uniform_entropy']:.2f} | {ratio} | {' | '.join(spans)} | "
            f"{format_estimate(row['sink'], row['sink_low'], row['sink_high'])} | {context} |"
        )
    return lines


def _against(low: float, high: float, value: float, above: str, below: str, level: str, ratio: bool = False) -> str:
    """Words for an interval against a value, decided by the interval alone (95% over spans); a ``ratio``
    against 1 also needs the project's minimum effect (``MIN_EFFECT``, 1%) at both ends of its interval, as
    every claim does, else it is "within 1% of" the value."""
    if low > value:
        return above if not ratio or low >= value * (1 + MIN_EFFECT) else f"within {MIN_EFFECT:.0%} of {level}"
    if high < value:
        return below if not ratio or high <= value * (1 - MIN_EFFECT) else f"within {MIN_EFFECT:.0%} of {level}"
    return f"not separated from {level}"


def why_sentences(summary, angles=None) -> list[str]:
    """One sentence per run and length past its train length, over all layers, each comparison decided by
    its 95% interval over spans: the entropy against the run's own at its train length (and an
    extension's against its base's there), the 90% span against the train length, the sink share, the
    effective context, and the rotary pairs that meet angles never seen in training."""
    rows = summary[(summary["layer"].astype(str) == "all") & (summary["length"] > summary["train_length"])]
    return [_why(row, angles) for _, row in rows.sort_values(["run", "length"]).iterrows()]


def _estimate(row, column: str, digits: int = 3) -> str:
    return format_estimate(row[column], row[f"{column}_low"], row[f"{column}_high"], digits=digits)


def _why(row, angles) -> str:
    n, L = int(row["length"]), int(row["train_length"])
    own = _against(row["entropy_ratio_low"], row["entropy_ratio_high"], 1.0, "higher", "lower", "it", ratio=True)
    uniform = _against(row["entropy_low"], row["entropy_high"], row["uniform_entropy"], "above", "below", "it")
    parts = [
        f"- {row['run']} at {n}: attention entropy {_estimate(row, 'entropy_ratio')} x its own at {L} ({own}; "
        f"{row['entropy']:.2f} nats, {uniform} uniform attention's {row['uniform_entropy']:.2f})"
    ]
    if not np.isnan(row.get("base_entropy_ratio", np.nan)):
        low, high = row["base_entropy_ratio_low"], row["base_entropy_ratio_high"]
        versus = _against(low, high, 1.0, "above", "below", "it", ratio=True)
        parts.append(f"{_estimate(row, 'base_entropy_ratio')} x its base's entropy at {L} ({versus})")
    limit = f"the train length {L}"
    span = _against(row["span90_low"], row["span90_high"], L, f"beyond {limit}", f"within {limit}", limit)
    text = f"90% of its attention within {_estimate(row, 'span90', 0)} tokens ({span}"
    if not np.isnan(row.get("span90_growth", np.nan)):
        grew = _against(row["span90_growth_low"], row["span90_growth_high"], 1.0, "longer", "shorter", "it", ratio=True)
        text += f"; {_estimate(row, 'span90_growth')} x its span at {int(row['span90_from'])}: {grew}"
    parts.append(text + ")")
    parts.append(f"{row['sink']:.1%} on the first {SINK_TOKENS} keys")
    tokens = int(row["effective_context"])
    context = f"{tokens}{'+' if bool(row['context_open_ended']) else ''} token{'' if tokens == 1 else 's'}"
    parts.append(f"the loss by position stops falling after {context}")
    if angles is not None and len(part := angles[(angles["run"] == row["run"]) & (angles["length"] == n)]):
        parts.append(f"{int(part['unseen'].astype(bool).sum())} of {len(part)} rotary pairs meet unseen angles")
    return "; ".join(parts) + "."


def _write_markdown(summary, path: Path, table: str, angles=None) -> Path:
    text = "\n".join(
        [
            f"# {table}: attention entropy, span and sinks",
            "",
            f"Written by `poscli inspect`. {SUMMARY_NOTE}. Per layer and head: {table}.csv, {table}_entropy.csv, "
            f"{table}_mass.csv; rotary runs: {table}_angles.csv, {table}_frequencies.csv.",
            "",
            *summary_lines(summary),
            "",
            'Each comparison below is decided by its 95% interval over spans ("not separated": the interval holds '
            "the value it is compared with; an order of a ratio also needs its whole interval 1% or more from 1).",
            "",
            *why_sentences(summary, angles),
            "",
        ]
    )
    with atomic_write(path) as handle:
        handle.write(text)
    return path
