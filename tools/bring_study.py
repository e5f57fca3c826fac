"""Bring a study that runs in a worktree into this checkout's results folder (CONTRIBUTING.md).

    python tools/bring_study.py recipes/scale-ladder.toml /work/ladder/results/reference results/reference

Copies what the recipe has written so far in SOURCE: each [[eval]] table's files (TABLE.csv, .md,
.png, _by_position.csv and .png, _spans.csv), [select]'s table (.csv, .md), the logs of the steps
that are done there (a run finished, its rows in the tables; never the log of a step in progress),
and the lines of SOURCE/history.jsonl this folder does not hold yet, in their order. Run folders,
lock files and other recipes' files stay where they are. A run trained again in SOURCE whose name
another recipe's table in DESTINATION holds is refused, nothing copied (rename the recipe's runs).
Then rewrite the summaries, published files and report with this checkout's code:
``poscli run RECIPE --summaries --results DEST``.
"""

from __future__ import annotations

import re
import shutil
import sys
from pathlib import Path

from poscli.evaluation.inspection.tables import FIGURES, PART_SUFFIXES  # noqa: E402
from poscli.study.recipes import load_recipe
from poscli.study.state import check_selection, check_state

TABLE_FILES = (
    ".csv", ".md", ".png", "_by_position.csv", "_by_position.png", "_spans.csv",
    *(f"{suffix}.csv" for suffix in PART_SUFFIXES), *(f"-{figure}.png" for figure in FIGURES),
)  # fmt: skip


def table_files(recipe, source: Path) -> list[Path]:
    """The files the recipe's tables and [select] have in SOURCE."""
    tables = list(dict.fromkeys(step.name for step in recipe.evals))
    found = [source / f"{table}{suffix}" for table in tables for suffix in TABLE_FILES]
    if recipe.selection is not None:
        found += [source / f"{recipe.selection.table}{suffix}" for suffix in (".csv", ".md")]
    return [path for path in found if path.is_file()]


def finished_logs(recipe, source: Path) -> dict[Path, str]:
    """The logs (SOURCE/logs) of the recipe's steps that are done in SOURCE, each with its run."""
    check_selection(recipe, source)
    check_state(recipe, source, each=True)
    done = {step.name for step in [*recipe.select, *recipe.train, *recipe.extend] if step.status == "done"}
    unevaluated = {
        run for step in recipe.evals if step.status != "done" for run in step.runs
    }  # narrowed by check_state
    tables = sorted({step.name for step in recipe.evals}, key=len, reverse=True)
    prefixes = ["select-", "train-", "extend-", f"each-{recipe.name}-", *(f"eval-{table}-" for table in tables)]
    logs = {}
    for log in sorted((source / "logs").glob("*.log")):
        prefix = next((p for p in prefixes if log.stem.startswith(p)), None)
        if prefix is None:
            continue
        named = log.stem[len(prefix) :]
        # an evaluation's log may end in -N (two [[eval]] of one table); a run's name may end in digits too
        run = named if named in done or not prefix.startswith("eval-") else re.sub(r"-\d+$", "", named)
        evaluating = prefix.startswith(("eval-", "each-")) and run in unevaluated  # its evaluation may be running
        if run in done and not evaluating:
            logs[log] = run
    return logs


def runs_of_other_tables(recipe, destination: Path) -> set[str]:
    """The runs that DESTINATION's tables other than the recipe's own (and [select]'s) hold rows of."""
    import pandas as pd

    ours = {f"{step.name}{suffix}" for step in recipe.evals for suffix in TABLE_FILES if suffix.endswith(".csv")}
    if recipe.selection is not None:
        ours.add(f"{recipe.selection.table}.csv")
    named = set()
    for table in sorted(destination.glob("*.csv")):
        if table.name not in ours:
            named |= set(pd.read_csv(table, usecols=lambda column: column == "run").get("run", []))
    return named


def clashing_runs(recipe, logs: dict[Path, str], destination: Path) -> list[str]:
    """The runs whose log would replace a different one in DESTINATION while another recipe's table
    there holds rows of that name: one name trained twice, once for each recipe, so the tables would
    mix two models under it."""
    held = {log: destination / "logs" / log.name for log in logs}
    replaced = {run for log, run in logs.items() if held[log].is_file() and held[log].read_bytes() != log.read_bytes()}
    return sorted(replaced & runs_of_other_tables(recipe, destination)) if replaced else []


def new_history(source: Path, destination: Path) -> list[str]:
    """SOURCE/history.jsonl's lines that DESTINATION/history.jsonl lacks, in their order."""
    path = source / "history.jsonl"
    if not path.exists():
        return []
    have = destination / "history.jsonl"
    held = set(have.read_text(encoding="utf-8").splitlines()) if have.exists() else set()
    return [line for line in path.read_text(encoding="utf-8").splitlines() if line.strip() and line not in held]


def merge_sweep(source: Path, destination: Path) -> None:
    """[select]'s table: each group (scope) SOURCE has measured takes SOURCE's rows; every other group
    keeps DESTINATION's (a worktree run in parts, --runs, writes only its own groups' rows)."""
    import pandas as pd

    theirs = pd.read_csv(source)
    if destination.exists():
        ours = pd.read_csv(destination)
        measured = set(theirs.loc[theirs["heldout_loss"].notna(), "scope"])
        fresh = theirs["scope"].isin(measured) | ~theirs["scope"].isin(set(ours["scope"]))
        theirs = pd.concat([ours[~ours["scope"].isin(measured)], theirs[fresh]], ignore_index=True)
    theirs.to_csv(destination, index=False)


def bring(recipe_path: str, source: Path, destination: Path) -> list[Path]:
    recipe = load_recipe(recipe_path)
    logs = finished_logs(recipe, source)
    clashes = clashing_runs(recipe, logs, destination)
    if clashes:
        raise SystemExit(
            f"{recipe_path} trained {', '.join(clashes)} again, and another recipe's table in {destination} "
            f"holds rows of that name; nothing copied: give the recipe's runs names of their own"
        )
    copied = []
    (destination / "logs").mkdir(parents=True, exist_ok=True)
    sweep = f"{recipe.selection.table}.csv" if recipe.selection is not None else None
    for path in table_files(recipe, source):
        if path.name == sweep:
            merge_sweep(path, destination / path.name)  # its .md follows with --summaries
        else:
            shutil.copyfile(path, destination / path.name)
        copied.append(destination / path.name)
    for log in logs:
        shutil.copyfile(log, destination / "logs" / log.name)
        copied.append(destination / "logs" / log.name)
    lines = new_history(source, destination)
    if lines:
        with open(destination / "history.jsonl", "a", encoding="utf-8") as handle:
            handle.write("\n".join(lines) + "\n")
        copied.append(destination / "history.jsonl")
    return copied


if __name__ == "__main__":
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    written = bring(sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3]))
    print(
        f"copied {len(written)} files into {sys.argv[3]}; now: poscli run {sys.argv[1]} --summaries --results "
        f"{sys.argv[3]}"
    )
