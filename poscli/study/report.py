"""``poscli report``: RESULTS/REPORT.md, rebuilt at any time from what is in the results folder.

Every command that writes a table or figure appends its command line to RESULTS/history.jsonl;
the report pairs each table with those commands, embeds its Markdown and plots, lists the runs,
and states the machine, versions and date.
"""

from __future__ import annotations

import json
import os
import platform
import shlex
from datetime import UTC, datetime
from pathlib import Path

from poscli import __version__
from poscli.core.io import atomic_write
from poscli.evaluation.seeds import SEEDS_SUFFIX  # noqa: F401 (TABLE-seeds.md, re-exported)
from poscli.model import runs

HISTORY_FILE = "history.jsonl"
PUBLISHED_SUFFIX = "-published"  # TABLE-published.md: published numbers beside the table (poscli run)


def record_command(results, argv: list[str], tables) -> None:
    folder = runs.results_dir(results)
    folder.mkdir(parents=True, exist_ok=True)
    entry = {
        "time": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": "poscli " + " ".join(shlex.quote(a) for a in argv[1:]),
        "tables": list(tables),
    }
    # One short line in append mode: concurrent writers do not interleave within it.
    with open(folder / HISTORY_FILE, "a", encoding="utf-8") as handle:
        handle.write(json.dumps(entry) + "\n")


def _history(folder: Path) -> list[dict]:
    path = folder / HISTORY_FILE
    if not path.exists():
        return []
    entries = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            entries.append(json.loads(line))
        except ValueError:
            continue  # a line cut by a crash is skipped, not fatal
    return entries


def _machine() -> list[str]:
    import torch

    from poscli.core.provenance import git_commit

    return [
        f"- machine: {platform.platform()}, {platform.machine()}, {os.cpu_count()} CPU cores"
        + (f", GPU {torch.cuda.get_device_name(0)}" if torch.cuda.is_available() else ", no GPU"),
        f"- versions: poscli {__version__} (commit {git_commit() or 'unknown'}), torch {torch.__version__}, Python "
        f"{platform.python_version()}",
        f"- generated: {datetime.now(UTC).strftime('%Y-%m-%d %H:%M UTC')} by `poscli report`",
    ]


def _commands(history: list[dict], table: str) -> list[str]:
    seen = []
    for entry in history:
        if table in entry.get("tables", []) and entry["command"] not in seen:
            seen.append(entry["command"])
    return seen


def _runs_section(folder: Path) -> list[str]:
    names = runs.existing_runs(folder)
    if not names:
        return []
    lines = [
        "## Runs\n",
        "| run | pe | parent | steps | train minutes | tokens/s | held-out ppl @ length | device |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name in names:
        config, broken = runs.listed_config(runs.runs_dir(folder) / name)
        if config is None:
            lines.append(f"| {name} | broken: {broken} | | | | | | |")
            continue
        held = config.get("heldout") or {}
        held_text = f"{held['ppl']:.3f} @ {held['length']}" if held else ""
        lines.append(
            f"| {runs.run_label(config)} | {config['model']['pe']} | {config.get('parent') or ''} | "
            f"{config.get('steps_done', '')} | "
            f"{config.get('train_seconds', 0) / 60:.1f} | {config.get('tokens_per_s', '')} | "
            f"{held_text} | {config.get('environment', {}).get('device', '')} |"
        )
    return lines + [""]


def _heatmaps(folder: Path, table: str) -> list[Path]:
    """A passkey table's per-run heatmaps, TABLE-RUN.png (not another table's TABLE-x.png)."""
    from poscli.evaluation.plots import heatmap_parts
    from poscli.evaluation.tables import read_table

    data = read_table(folder / f"{table}.csv")
    if "accuracy" not in data.columns:
        return []
    return [folder / name for name, _ in heatmap_parts(data, table)]


def write_report(results=None) -> Path:
    folder = runs.results_dir(results)
    folder.mkdir(parents=True, exist_ok=True)
    history = _history(folder)
    lines = ["# poscli report\n", *_machine(), ""]
    from poscli.evaluation.inspection.tables import PART_SUFFIXES, figure_paths

    tables = sorted(
        p.stem
        for p in folder.glob("*.csv")
        if not p.stem.endswith(("_by_position", "_spans", SEEDS_SUFFIX, *PART_SUFFIXES)) and p.stem != "decay"
    )
    from poscli.evaluation.tasks import draw_plots

    for table in tables:
        draw_plots(folder, table)  # the figures always match the tables they are shown with
        lines.append(f"## {table}\n")
        commands = _commands(history, table)
        if commands:
            lines += ["Produced by:\n", "```", *commands, "```", ""]
        # the table, then (from `poscli run`) its summary over seeds and the published numbers beside it
        for markdown in (
            f"{table}.md",
            f"{table}{SEEDS_SUFFIX}.md",
            f"{table}{PUBLISHED_SUFFIX}.md",
            f"{table}-gates.md",
        ):
            if (folder / markdown).exists():
                lines += [(folder / markdown).read_text(encoding="utf-8").strip(), ""]
        for image in [
            folder / f"{table}{SEEDS_SUFFIX}.png",
            folder / f"{table}-budgets.png",
            folder / f"{table}.png",
            folder / f"{table}_by_position.png",
            *_heatmaps(folder, table),
            *figure_paths(folder, table),
        ]:
            if image.exists():
                lines += [f"![{image.stem}]({image.name})", ""]
    if (folder / "decay.png").exists():
        lines += ["## Attention decay: mean q.k against distance, sinusoidal and RoPE\n"]
        commands = _commands(history, "decay")
        if commands:
            lines += ["Produced by:\n", "```", *commands, "```", ""]
        lines += ["![decay](decay.png)", ""]
    lines += _runs_section(folder)
    path = folder / "REPORT.md"
    with atomic_write(path) as handle:
        handle.write("\n".join(lines))
    return path
