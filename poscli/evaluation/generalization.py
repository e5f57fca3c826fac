"""Length generalization over seeds: an algorithmic table (``poscli.evaluation.algorithmic``)
summarised per group of runs that differ only in seed, and paired decisions between the groups.

Mastery comes first. A seed is *mastered* when its exact match pooled over its training sizes is
at least ``MASTERY`` (0.95); the figures beyond the training sizes are over mastered seeds only,
so a seed that never learned the task cannot make an encoding look worse (or better) at length.

- Accuracy at each size: the mean exact match over mastered seeds, with a 95% interval from
  resampling the seeds and drawing each seed's accuracy from its Jeffreys posterior
  (``retrieval.bootstrap_accuracy``).
- Decisions, at ``FACTORS`` (2x and 4x) the largest training size N: every pair of groups with at
  least two seeds mastered in both, seed s against seed s (the instances of a size are the same
  for every run), the per-seed difference in exact match tested with a paired t-test
  (``stats.paired_t``), Holm's (1979) correction over every pair at that task and size. A
  difference is claimed only where the adjusted p is under 0.05 and the difference is at least
  ``MIN_DIFFERENCE``.

Shapes: R seeds. The summary's ``seed_accuracy`` column keeps each seed's accuracy (JSON, seed ->
exact match, null where that seed is not mastered), so the decisions can be taken from the
summary alone (``decisions``), as a ``[[compare]]`` does.
"""

from __future__ import annotations

import json
import math
import re
from itertools import combinations
from pathlib import Path

import numpy as np

MASTERY = 0.95  # exact match at the training sizes under which a run is "not mastered"
FACTORS = (2, 4)  # the sizes, as multiples of the largest training size, that the decisions compare at
MIN_DIFFERENCE = 0.05  # a difference in exact match under 5 points is "tied", whatever the test says


def mastery(rows):
    """Per run and task it was trained on: its seed, largest training size and pooled exact match at
    its training sizes, and whether it mastered the task. -> DataFrame (one row per run and task)."""
    import pandas as pd

    inside = rows[rows["in_distribution"].astype(str).str.lower() == "true"]
    records = []
    for (run, task), part in inside.groupby(["run", "task"], sort=False):
        accuracy = part["exact"].sum() / part["trials"].sum()
        seed = part["seed"].iloc[0] if "seed" in part else math.nan  # tables written before the column: none
        records.append(
            {
                "run": run,
                "task": task,
                "seed": run if pd.isna(seed) else str(int(seed)),
                "largest": largest_size(part["trained_sizes"].iloc[0]),
                "in_distribution": float(accuracy),
                "mastered": bool(accuracy >= MASTERY),
            }
        )
    return pd.DataFrame(records, columns=["run", "task", "seed", "largest", "in_distribution", "mastered"])


def largest_size(sizes) -> int:
    """The largest of a run's training sizes as the table records them ("1-8", "1,2,4,8")."""
    return max(int(number) for number in re.findall(r"\d+", str(sizes)))


def seed_summary(rows, groups: dict[str, str], min_runs: int = 2):
    """One row per group, task and size: seeds, seeds mastered, the in-distribution exact match (mean
    over every seed), and at the size the mean exact match over mastered seeds with its 95% interval
    and each seed's accuracy. Only runs scored on the task they were trained on count. None when no
    group has ``min_runs`` runs."""
    import pandas as pd

    from poscli.evaluation.retrieval import bootstrap_accuracy
    from poscli.evaluation.stats import interval

    rows = rows[rows["run"].isin(list(groups)) & rows["accuracy"].notna()].copy()
    learned = mastery(rows)
    rows = rows.drop(columns="seed", errors="ignore").merge(
        learned[["run", "task", "seed", "largest", "mastered"]], on=["run", "task"]
    )  # its own task only
    if rows.empty:
        return None
    rows["group"] = rows["run"].map(groups)
    if rows.groupby(["group", "task"])["run"].nunique().max() < min_runs:
        return None
    learned["group"] = learned["run"].map(groups)
    in_distribution = learned.groupby(["group", "task"])["in_distribution"].mean()
    records = []
    for (group, task, size), cell in rows.groupby(["group", "task", "size"], sort=False):
        good = cell[cell["mastered"]]
        correct, trials = good["exact"].to_numpy(float), good["trials"].to_numpy(float)
        accuracy = float((correct / trials).mean()) if len(good) else math.nan
        low, high = interval(bootstrap_accuracy(correct, trials)) if len(good) else (math.nan, math.nan)
        by_seed = {r.seed: (round(r.exact / r.trials, 4) if r.mastered else None) for r in cell.itertuples()}
        largest = int(cell["largest"].iloc[0])
        records.append(
            {
                "group": group,
                "pe": cell["pe"].iloc[0],
                "task": task,
                "trained_sizes": cell["trained_sizes"].iloc[0],
                "largest": largest,
                "size": int(size),
                "factor": round(size / largest, 3),
                "seeds": len(cell),
                "mastered": len(good),
                "in_distribution": float(in_distribution[(group, task)]),
                "trials": int(cell["trials"].iloc[0]),
                "accuracy": accuracy,
                "ci_low": low,
                "ci_high": high,
                "token_accuracy": float(good["token_accuracy"].mean()) if len(good) else math.nan,
                "seed_accuracy": json.dumps(by_seed, sort_keys=True),
            }
        )
    return pd.DataFrame(records).sort_values(["task", "group", "size"], kind="stable").reset_index(drop=True)


def decisions(summary, factors=FACTORS):
    """Paired decisions between every two groups at each task and each factor x its largest training
    size (where it was evaluated): columns task, factor, size, a, b, pairs (seeds mastered in both),
    difference (mean of a - b), low, high, p, adjusted (Holm over the pairs of that task and size)
    and verdict (">": a higher, "<": a lower, "≈": not claimed)."""
    import pandas as pd

    from poscli.evaluation.stats import holm, paired_t

    records = []
    for task, part in summary.groupby("task", sort=True):
        for factor in factors:
            at = part[part["size"] == part["largest"] * factor]
            if at.empty:
                continue
            family = []
            seeds = {row.group: _mastered_seeds(row.seed_accuracy) for row in at.itertuples()}
            for a, b in combinations(sorted(seeds), 2):
                shared = sorted(set(seeds[a]) & set(seeds[b]))
                if len(shared) < 2:
                    continue
                difference, low, high, p = paired_t(np.array([seeds[a][s] - seeds[b][s] for s in shared]))
                family.append(
                    {
                        "task": task,
                        "factor": factor,
                        "size": int(at["size"].iloc[0]),
                        "a": a,
                        "b": b,
                        "pairs": len(shared),
                        "difference": difference,
                        "low": low,
                        "high": high,
                        "p": p,
                    }
                )
            for record, adjusted in zip(family, holm([r["p"] for r in family])):
                record["adjusted"] = adjusted
                record["verdict"] = verdict(record["difference"], adjusted)
            records += family
    columns = ["task", "factor", "size", "a", "b", "pairs", "difference", "low", "high", "p", "adjusted", "verdict"]
    return pd.DataFrame(records, columns=columns)


def verdict(difference: float, adjusted_p: float) -> str:
    """ ">" (A higher), "<" (A lower) or "≈": claimed only where Holm's adjusted p is under ALPHA and
    the difference is at least MIN_DIFFERENCE."""
    from poscli.evaluation.stats import ALPHA

    if math.isnan(adjusted_p) or adjusted_p >= ALPHA or abs(difference) < MIN_DIFFERENCE:
        return "≈"
    return ">" if difference > 0 else "<"


def _mastered_seeds(seed_accuracy: str) -> dict[str, float]:
    return {seed: value for seed, value in json.loads(seed_accuracy).items() if value is not None}


def best_at(summary, task: str, factor: int):
    """The group with the highest mean exact match at ``factor`` x the largest training size of
    ``task`` (mastered seeds only), as its summary row; None where no group has a mastered seed."""
    at = summary[(summary["task"] == task) & (summary["size"] == summary["largest"] * factor)]
    at = at[at["accuracy"].notna()]
    return None if at.empty else at.sort_values(["accuracy", "group"], ascending=[False, True]).iloc[0]


def seed_markdown(summary) -> str:
    """Per task: each group's seeds mastered, in-distribution exact match and exact match at 2x and
    4x with their intervals; then the best group at each factor and every difference the paired
    tests support."""
    found = decisions(summary)
    lines = [
        f"Exact match over seeds (`--task`): in distribution, the mean over every seed at its training sizes; "
        f"beyond them, the mean over the seeds that mastered the task (>= {MASTERY} at its training sizes), with "
        "a 95% interval (seeds resampled, each seed's accuracy drawn from its Jeffreys posterior). Decisions: "
        f"paired t-tests over seeds, Holm's correction over the pairs of a task and size, a difference claimed "
        f"where the adjusted p < 0.05 and it is at least {MIN_DIFFERENCE:.2f}.",
        "",
    ]
    for task, part in summary.groupby("task", sort=True):
        largest = int(part["largest"].iloc[0])
        lines += [
            f"### {task} (trained on sizes {part['trained_sizes'].iloc[0]})",
            "",
            "| runs | seeds mastered | in distribution | "
            + " | ".join(f"{f}x (size {largest * f})" for f in FACTORS)
            + " |",
            "|---|---|---|" + "---|" * len(FACTORS),
        ]
        for group, rows in part.groupby("group", sort=True):
            first = rows.iloc[0]
            cells = [_interval_cell(rows[rows["size"] == largest * f]) for f in FACTORS]
            lines.append(
                f"| {group} | {first['mastered']} of {first['seeds']} | {first['in_distribution']:.2f} | "
                + " | ".join(cells)
                + " |"
            )
        lines.append("")
        for factor in FACTORS:
            best = best_at(summary, task, factor)
            if best is None:
                continue
            mine = found[(found["task"] == task) & (found["factor"] == factor) & (found["verdict"] != "≈")]
            claims = [_claim(row) for row in mine.itertuples()]
            lines.append(
                f"- At {factor}x (size {largest * factor}): highest {best['group']}, "
                f"{best['accuracy']:.2f} [{best['ci_low']:.2f}, {best['ci_high']:.2f}]; "
                + (
                    f"differences supported: {'; '.join(claims)}."
                    if claims
                    else "no difference between encodings is supported by the paired tests."
                )
            )
        lines.append("")
    return "\n".join(lines)


def _interval_cell(rows) -> str:
    if rows.empty:
        return ""
    row = rows.iloc[0]
    if math.isnan(row["accuracy"]):
        return "no seed mastered" if not row["mastered"] else "n/a"
    return f"{row['accuracy']:.2f} [{row['ci_low']:.2f}, {row['ci_high']:.2f}]"


def _claim(row) -> str:
    higher, lower = (row.a, row.b) if row.verdict == ">" else (row.b, row.a)
    return f"{higher} > {lower} by {abs(row.difference):.2f} (adjusted p {row.adjusted:.3g}, {row.pairs} seeds)"


def heatmaps(summary, folder: Path, table: str) -> list[Path]:
    """One heatmap per task: groups x instance size, the mean exact match over mastered seeds, the
    training sizes marked. -> TABLE-seeds-TASK.png for each task."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from poscli.evaluation.seeds import SEEDS_SUFFIX

    written = []
    for task, part in summary.groupby("task", sort=True):
        grid = part.pivot_table(index="group", columns="size", values="accuracy", aggfunc="first")  # (groups, sizes)
        figure, axis = plt.subplots(figsize=(1.2 + 0.28 * grid.shape[1], 0.9 + 0.35 * grid.shape[0]))
        image = axis.imshow(grid.to_numpy(float), vmin=0, vmax=1, cmap="viridis", aspect="auto")
        axis.set_xticks(range(grid.shape[1]), [str(s) for s in grid.columns], fontsize=6)
        axis.set_yticks(range(grid.shape[0]), list(grid.index), fontsize=7)
        largest = int(part["largest"].iloc[0])
        edge = list(grid.columns).index(largest) + 0.5 if largest in grid.columns else None
        if edge is not None:
            axis.axvline(edge, color="white", linestyle="--", linewidth=1)
        axis.set(xlabel="instance size (dashed: the largest trained)", title=f"{task}: exact match, mastered seeds")
        figure.colorbar(image, ax=axis, fraction=0.03)
        path = Path(folder) / f"{table}{SEEDS_SUFFIX}-{task}.png"
        figure.savefig(path, dpi=120, bbox_inches="tight")
        plt.close(figure)
        written.append(path)
    return written
