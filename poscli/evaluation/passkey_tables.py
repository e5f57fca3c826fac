"""The passkey tables: CSV and markdown (accuracy by length and depth, with intervals), the console
table, and the summary over seeds with effective lengths."""

from __future__ import annotations

import numpy as np

from poscli.config import DEFAULT_DEPTHS  # noqa: F401 (re-exported)
from poscli.evaluation.retrieval import EFFECTIVE_THRESHOLD, effective_length, pooled_accuracy, run_effective_lengths
from poscli.evaluation.stats import wilson_interval
from poscli.evaluation.tables import merge_rows, pivot_markdown

PASSKEY_COLUMNS = [
    "run",
    "label",
    "pe",
    "train_length",
    "parameters",
    "template",
    "keys",
    "length",
    "depth",
    "trials",
    "correct",
    "accuracy",
    "ci_low",
    "ci_high",
    "digit_accuracy",
    "answer_logprob",
    "note",
    "floor",
    "floor_window",
]


def save_rows(rows: list[dict], results=None, table: str = "passkey") -> None:
    """Merge rows into RESULTS/TABLE.csv only (the Markdown and plots come at the end)."""
    from poscli.core.io import locked
    from poscli.model import runs

    folder = runs.results_dir(results)
    folder.mkdir(parents=True, exist_ok=True)
    with locked(folder / table):
        merge_rows(folder / f"{table}.csv", rows, PASSKEY_COLUMNS, ["run", "keys", "length", "depth"])


def write_passkey_tables(rows: list[dict], results=None, table: str = "passkey") -> list:
    """Merge into RESULTS/TABLE.csv and write the accuracy-versus-length table RESULTS/TABLE.md (the
    task draws the heatmaps: ``poscli.evaluation.tasks.draw_plots``)."""
    from poscli.core.io import atomic_write, locked
    from poscli.model import runs

    folder = runs.results_dir(results)
    folder.mkdir(parents=True, exist_ok=True)
    with locked(folder / table):  # concurrent evaluations take turns
        combined = merge_rows(folder / f"{table}.csv", rows, PASSKEY_COLUMNS, ["run", "keys", "length", "depth"])
        with atomic_write(folder / f"{table}.md") as handle:
            handle.write(passkey_markdown(combined))
        return [folder / f"{table}.csv", folder / f"{table}.md"]


def passkey_markdown(table) -> str:
    """Per run and length, over all depths: exact-match accuracy with its 95% Wilson interval and
    the run's effective length; then per-digit accuracy and the answer's mean log-probability."""
    table = table.copy()
    if "keys" not in table.columns:  # a table written before formats were recorded
        table["keys"], table["template"] = 1, "compact"
    table["keys"] = table["keys"].fillna(1).astype(int)
    table["row"] = table["run"] + "/" + table["keys"].astype(str)

    def pooled(cell) -> str:
        correct, trials = pooled_accuracy(cell)
        if not trials:
            return "n/a"
        low, high = wilson_interval(correct, trials)
        return f"{correct / trials:.2f} [{low:.2f}, {high:.2f}]"

    def pooled_floor(cell) -> str:
        scored = cell[cell["accuracy"].notna()]
        if "floor" not in scored or scored["floor"].isna().all() or not scored["trials"].sum():
            return "-"
        return f"{(scored['floor'] * scored['trials']).sum() / scored['trials'].sum():.2f}"

    def mean_of(column: str, digits: int):
        def cell_text(cell) -> str:
            values = cell[column].dropna() if column in cell else []
            return "n/a" if len(values) == 0 else f"{values.mean():.{digits}f}"

        return cell_text

    effective = run_effective_lengths(table.assign(run=table["row"]))  # per run and number of keys
    lead = {
        "run": lambda first: first["label"],
        "pe": lambda first: first["pe"],
        "train length": lambda first: first["train_length"],
        "keys": lambda first: first["keys"],
        f"effective length (≥{EFFECTIVE_THRESHOLD})": lambda first: effective[first["row"]],
    }
    trials = ", ".join(str(t) for t in sorted(table["trials"].unique()))
    depths = ", ".join(f"{d:g}" for d in sorted(table["depth"].unique()))
    lines = [
        f"Passkey retrieval: exact match over all depths ({depths}%; {trials} prompts per depth) at each length, with "
        "its 95% "
        "Wilson interval. Effective length: the longest length up to which accuracy stays at or above "
        f"{EFFECTIVE_THRESHOLD} "
        "(RULER). keys: keys in each prompt (more than 1: distractors with other names). `n/a`: the encoding has no "
        "representation at that length.\n",
        *pivot_markdown(table, "row", lead, pooled),
        "",
        "The floor of each cell above: the accuracy a model attending only to the last W tokens before the answer (W: "
        "the "
        "train length, the base's for an extension) could reach by copying a key that happens to lie there, over the "
        "same "
        "prompts. Accuracy at or below its floor is no evidence of retrieval from far away.\n",
        *pivot_markdown(table, "row", {k: v for k, v in lead.items() if not k.startswith("effective")}, pooled_floor),
        "",
        *depth_markdown(table),
        "Per-digit accuracy (teacher forced: each digit given the true digits before it; chance about 0.1):\n",
        *pivot_markdown(
            table, "row", {k: v for k, v in lead.items() if not k.startswith("effective")}, mean_of("digit_accuracy", 2)
        ),
        "",
        "The answer's mean log-probability per digit, nats (teacher forced; a uniform guess among digits: -2.30):\n",
        *pivot_markdown(
            table, "row", {k: v for k, v in lead.items() if not k.startswith("effective")}, mean_of("answer_logprob", 2)
        ),
    ]
    return "\n".join(lines) + "\n"


def depth_markdown(table) -> list[str]:
    """Per run and length, exact match at each depth with the floor in parentheses."""
    if "floor" not in table.columns:
        return []
    lines = [
        "Exact match by depth (the key's depth in percent of the filler: 0 just after the introduction, 100 just "
        "before the question), the cell's floor in parentheses:\n"
    ]
    depths = sorted(table["depth"].unique())
    lines += [
        "| run | keys | length | " + " | ".join(f"{d:g}%" for d in depths) + " |",
        "|---|---|---|" + "---|" * len(depths),
    ]
    for (_row, length), part in table.groupby(["row", "length"], sort=False):
        by_depth = {d: part[part["depth"] == d] for d in depths}
        cells = []
        for depth in depths:
            cell = by_depth[depth]
            if cell.empty or cell["accuracy"].isna().all():
                cells.append("n/a")
            else:
                floor = cell["floor"].iloc[0]
                cells.append(f"{cell['accuracy'].iloc[0]:.2f}" + (f" ({floor:.2f})" if floor == floor else ""))
        first = part.iloc[0]
        lines.append(f"| {first['label']} | {int(first['keys'])} | {int(length)} | " + " | ".join(cells) + " |")
    return [*lines, ""]


def console_table(rows: list[dict], trials: int):
    """The rows as a rich table for the console."""
    from rich.table import Table

    shown = Table(title=f"passkey retrieval ({trials} prompts per cell, 95% Wilson interval)")
    for column in ("run", "keys", "length", "depth %", "exact match", "95% interval", "per digit", "log p / digit"):
        shown.add_column(column, justify="left" if column == "run" else "right")
    for row in rows:
        na = bool(row["note"])
        shown.add_row(
            row["label"],
            str(row["keys"]),
            str(row["length"]),
            f"{row['depth']:g}",
            "n/a" if na else f"{row['accuracy']:.2f}",
            "" if na else f"[{row['ci_low']:.2f}, {row['ci_high']:.2f}]",
            "" if na else f"{row['digit_accuracy']:.2f}",
            "" if na else f"{row['answer_logprob']:.2f}",
        )
    return shown


ALL_DEPTHS = -1.0  # the depth column's value for a summary row that pools every depth


def bootstrap_accuracy(correct: np.ndarray, trials: np.ndarray, resamples: int = 2000, seed: int = 0) -> np.ndarray:
    """Bootstrap samples of the mean accuracy over runs (seeds): runs resampled with replacement,
    then each run's accuracy drawn from its Jeffreys posterior Beta(c + 1/2, n - c + 1/2), so a
    run that got every trial right still has an interval below 1. correct, trials: (R,) -> (N,)."""
    generator = np.random.default_rng(seed)
    runs = len(correct)
    picked = generator.integers(0, runs, size=(resamples, runs))  # (N, R)
    drawn = generator.beta(correct[picked] + 0.5, trials[picked] - correct[picked] + 0.5)  # (N, R)
    return drawn.mean(1)


def accuracy_interval(correct: np.ndarray, trials: np.ndarray) -> tuple[float, float]:
    """95% interval of the mean accuracy over runs (``bootstrap_accuracy``), with Brown, Cai and
    DasGupta's (2001) convention for the Jeffreys interval at the boundary: when no run got a trial
    right the lower bound is 0, and when every run got every trial right the upper bound is 1 (the
    posterior draws alone would put both bounds strictly inside, excluding the estimate itself).
    correct, trials: (R,)."""
    from poscli.evaluation.stats import interval

    low, high = interval(bootstrap_accuracy(correct, trials))
    if not correct.any():
        low = 0.0
    if (correct == trials).all():
        high = 1.0
    return low, high


def passkey_seed_summary(rows, groups: dict[str, str], threshold: float = EFFECTIVE_THRESHOLD):
    """Per group of runs (runs that differ only in seed), number of keys, length and depth (and
    every depth pooled, depth = ALL_DEPTHS): the mean accuracy over seeds with its 95% interval
    (``accuracy_interval``), the mean per-digit accuracy and answer log-probability, and the
    group's effective length (from the seed-mean accuracy pooled over depths) beside each seed's.
    None when no run of the groups has been scored."""
    import pandas as pd

    rows = rows[rows["run"].isin(list(groups)) & rows["accuracy"].notna()].copy()
    if rows.empty:
        return None
    rows["group"] = rows["run"].map(groups)
    if "keys" not in rows.columns:
        rows["keys"] = 1
    records = []
    for (group, keys), part in rows.groupby(["group", "keys"], sort=False):
        per_seed = run_effective_lengths(part, threshold)
        pooled = part.groupby(["run", "length"], as_index=False).agg(
            correct=("correct", "sum"),
            trials=("trials", "sum"),
            digit_accuracy=("digit_accuracy", "mean"),
            answer_logprob=("answer_logprob", "mean"),
            pe=("pe", "first"),
            train_length=("train_length", "first"),
        )
        pooled["depth"] = ALL_DEPTHS
        cells = pd.concat([part[pooled.columns], pooled])
        mean_by_length = {}
        for (length, depth), cell in cells.groupby(["length", "depth"]):
            correct, trials = cell["correct"].to_numpy(float), cell["trials"].to_numpy(float)
            accuracy = float((correct / trials).mean())
            low, high = accuracy_interval(correct, trials)
            if depth == ALL_DEPTHS:
                mean_by_length[int(length)] = accuracy
            records.append(
                {
                    "group": group,
                    "pe": cell["pe"].iloc[0],
                    "train_length": int(cell["train_length"].iloc[0]),
                    "keys": int(keys),
                    "length": int(length),
                    "depth": float(depth),
                    "seeds": len(cell),
                    "trials": int(cell["trials"].iloc[0]),
                    "accuracy": accuracy,
                    "ci_low": low,
                    "ci_high": high,
                    "digit_accuracy": float(cell["digit_accuracy"].mean()),
                    "answer_logprob": float(cell["answer_logprob"].mean()),
                }
            )
        effective = effective_length(mean_by_length, threshold)
        seeds_text = ", ".join(str(per_seed[run]) for run in sorted(per_seed))
        for record in records:
            if record["group"] == group and record["keys"] == keys:
                record["effective_length"], record["effective_by_seed"] = effective, seeds_text
    return pd.DataFrame(records)


def passkey_seed_markdown(summary) -> str:
    """Accuracy pooled over depths per group and length (mean over seeds, 95% interval), the
    effective length, then accuracy by depth at each group's longest length."""
    pooled = summary[summary["depth"] == ALL_DEPTHS].copy()
    pooled["row"] = pooled["group"] + "/" + pooled["keys"].astype(str)

    def cell(rows) -> str:
        row = rows.iloc[0]
        return f"{row['accuracy']:.2f} [{row['ci_low']:.2f}, {row['ci_high']:.2f}]"

    first = summary.iloc[0]
    lines = [
        f"Passkey exact match over every depth, mean over seeds with its 95% interval (seeds resampled, each seed's "
        f"accuracy drawn from its Jeffreys posterior); {int(first['trials'])} prompts per depth and seed. Effective "
        "length: "
        f"the longest length up to which the seed-mean accuracy stays at or above {EFFECTIVE_THRESHOLD} (each seed's "
        "in brackets).\n",
        *pivot_markdown(
            pooled,
            "row",
            {
                "runs": lambda r: r["group"],
                "keys": lambda r: r["keys"],
                "seeds": lambda r: r["seeds"],
                "effective length": lambda r: f"{r['effective_length']} ({r['effective_by_seed']})",
            },
            cell,
            sort=False,
        ),
        "",
        "Per-digit accuracy (teacher forced), mean over seeds and depths:\n",
        *pivot_markdown(
            pooled,
            "row",
            {"runs": lambda r: r["group"], "keys": lambda r: r["keys"]},
            lambda rows: f"{rows['digit_accuracy'].iloc[0]:.2f}",
            sort=False,
        ),
    ]
    return "\n".join(lines) + "\n"
