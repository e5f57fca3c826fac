"""Length generalization over seeds: an algorithmic table (``poscli.evaluation.algorithmic``)
summarised per group of runs that differ only in seed, and paired decisions between the groups.

Mastery comes first. A seed is *mastered* when its exact match pooled over its training sizes is
at least ``MASTERY`` (0.95); the figures beyond the training sizes are over mastered seeds only,
so a seed that never learned the task cannot make an encoding look worse (or better) at length.

- Accuracy at each size: the mean exact match over mastered seeds, with a 95% interval from
  resampling the seeds and drawing each seed's accuracy from its Jeffreys posterior
  (``passkey_tables.accuracy_interval``).
- An exploratory screen, at ``FACTORS`` (2x and 4x) the largest training size N: every pair of
  groups with at least two mastered seeds each, the per-seed exact match of two different models
  compared by Welch's unpaired t-test (``stats.welch_t``: seed 0 of one encoding and seed 0 of
  another share nothing), Benjamini and Hochberg's (1995) correction over every pair at that task
  and size. A difference is shown only where the adjusted p is under 0.05 and the difference is at
  least ``MIN_DIFFERENCE``; a declared claim is decided on its own (``poscli.study.claims``).

Shapes: R seeds. The summary's ``seed_accuracy`` column keeps each seed's accuracy (JSON, seed ->
exact match, null where that seed is not mastered), so the decisions can be taken from the
summary alone (``decisions``), as a ``[[compare]]`` does.
"""

from __future__ import annotations

import json
import math
import os
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

    from poscli.evaluation.passkey_tables import accuracy_interval

    rows = rows[rows["run"].isin(list(groups))].copy()
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
        good = cell[cell["mastered"] & cell["accuracy"].notna()]
        correct, trials = good["exact"].to_numpy(float), good["trials"].to_numpy(float)
        accuracy = float((correct / trials).mean()) if len(good) else math.nan
        low, high = accuracy_interval(correct, trials) if len(good) else (math.nan, math.nan)
        by_seed = {r.seed: (round(r.exact / r.trials, 4) if r.mastered and r.accuracy == r.accuracy else None)
                   for r in cell.itertuples()}  # fmt: skip
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
                "mastered": int(cell["mastered"].sum()),  # n/a sizes aside: they have no accuracy
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


def band_values(part, factor: int) -> dict[str, dict[str, float]]:
    """Per group of ``part`` (one task's summary rows), each mastered seed's exact match over the
    band of sizes beyond the training sizes up to ``factor`` x the largest (N < size <= factor N
    for 2x; 2N < size <= 4N for 4x): the mean over the band's sizes (each the same number of
    instances), for seeds scored at every one of them. -> {group: {seed: value}}."""
    largest = int(part["largest"].iloc[0])
    low = largest * (factor // 2)
    band = part[(part["size"] > low) & (part["size"] <= largest * factor)]
    wanted = set(range(low + 1, largest * factor + 1))
    values = {}
    for group, rows in band.groupby("group", sort=True):
        if set(rows["size"]) != wanted:
            continue  # not evaluated at every size of the band
        by_seed: dict[str, list[float]] = {}
        for row in rows.itertuples():
            for seed, value in _mastered_seeds(row.seed_accuracy).items():
                by_seed.setdefault(seed, []).append(value)
        complete = {seed: float(np.mean(v)) for seed, v in by_seed.items() if len(v) == len(wanted)}
        if complete:  # none: no seed mastered, or no positions that far (n/a)
            values[group] = complete
    return values


def band_label(largest: int, factor: int) -> str:
    """The sizes of a band, e.g. "9-16" (beyond 8, up to 2x)."""
    return f"{largest * (factor // 2) + 1}-{largest * factor}"


def decisions(summary, factors=FACTORS):
    """Paired decisions between every two groups of each task, on the exact match over each band
    of sizes beyond the training sizes (up to 2x, then 2x to 4x; ``band_values``): columns task,
    factor, sizes, a, b, pairs (the fewer mastered seeds of the two), difference (mean of a - b), low,
    high, p (Welch), adjusted (Benjamini-Hochberg over the pairs of that task and band) and verdict
    (">": a higher, "<": a lower, "≈": not claimed)."""
    import pandas as pd

    from poscli.evaluation.stats import benjamini_hochberg, welch_t

    records = []
    for task, part in summary.groupby("task", sort=True):
        largest = int(part["largest"].iloc[0])
        for factor in factors:
            seeds = band_values(part, factor)
            family = []
            for a, b in combinations(sorted(seeds), 2):
                if min(len(seeds[a]), len(seeds[b])) < 2:
                    continue
                values_a, values_b = np.array(list(seeds[a].values())), np.array(list(seeds[b].values()))
                difference, low, high, p, _ = welch_t(values_a, values_b)  # two models: no seed pairs
                family.append({"task": task, "factor": factor, "sizes": band_label(largest, factor), "a": a,
                               "b": b, "pairs": min(len(values_a), len(values_b)), "difference": difference,
                               "low": low, "high": high, "p": p})  # fmt: skip
            for record, adjusted in zip(family, benjamini_hochberg([r["p"] for r in family])):
                record["adjusted"] = adjusted
                record["verdict"] = verdict(record["difference"], adjusted)
            records += family
    columns = ["task", "factor", "sizes", "a", "b", "pairs", "difference", "low", "high", "p", "adjusted", "verdict"]
    return pd.DataFrame(records, columns=columns)


def band_means(summary, task: str, factor: int) -> dict[str, tuple[float, float, float, int]]:
    """Per group: the mean over its mastered seeds of the band's exact match (``band_values``) with
    its 95% t interval over seeds (nan with one seed), and the seeds. -> {group: (mean, low, high, n)}."""
    from poscli.evaluation.stats import paired_t

    values = band_values(summary[summary["task"] == task], factor)
    means = {}
    for group, by_seed in values.items():
        if by_seed:
            mean, low, high, _ = paired_t(np.array(list(by_seed.values())))
            means[group] = (mean, max(low, 0.0), min(high, 1.0), len(by_seed))
    return means


def verdict(difference: float, adjusted_p: float) -> str:
    """ ">" (A higher), "<" (A lower) or "≈": shown only where the adjusted p is under ALPHA and
    the difference is at least MIN_DIFFERENCE."""
    from poscli.evaluation.stats import ALPHA

    if math.isnan(adjusted_p) or adjusted_p >= ALPHA or abs(difference) < MIN_DIFFERENCE:
        return "≈"
    return ">" if difference > 0 else "<"


def _mastered_seeds(seed_accuracy: str) -> dict[str, float]:
    return {seed: value for seed, value in json.loads(seed_accuracy).items() if value is not None}


def best_at(summary, task: str, factor: int):
    """The group with the highest mean exact match over the band up to ``factor`` x the largest
    training size of ``task`` (mastered seeds only): (group, mean, low, high, seeds), or None."""
    means = band_means(summary, task, factor)
    if not means:
        return None
    group = max(sorted(means), key=lambda g: means[g][0])
    return (group, *means[group])


def seed_markdown(summary) -> str:
    """Per task: each group's seeds mastered, in-distribution exact match, and beyond the training
    sizes the exact match over each band (up to 2x, 2x to 4x; mean over mastered seeds, t interval)
    and at exactly 2x and 4x (bootstrap interval); then the highest group in each band and every
    difference the paired tests support."""
    found = decisions(summary)
    lines = [
        f"Exact match over seeds (`--task`): in distribution, the mean over every seed at its training sizes; "
        f"beyond them, over the seeds that mastered the task (>= {MASTERY} at its training sizes). A band (e.g. "
        "9-16: beyond the largest training size 8, up to 2x) is each seed's mean over its sizes, then the mean "
        "over seeds with a 95% t interval; a single size (2x, 4x) has a 95% interval from resampling seeds, each "
        "seed's accuracy drawn from its Jeffreys posterior. Screen (exploratory), on the bands: Welch's t-tests "
        "over seeds, Benjamini-Hochberg over the pairs of a task and band, a difference shown where the adjusted "
        "p < 0.05 "
        f"and it is at least {MIN_DIFFERENCE:.2f}. n/a: the encoding has no positions there (a learned table).",
        "",
    ]
    for task, part in summary.groupby("task", sort=True):
        largest = int(part["largest"].iloc[0])
        bands = {factor: band_means(summary, task, factor) for factor in FACTORS}
        header = [f"{band_label(largest, f)} | {f}x ({largest * f})" for f in FACTORS]
        lines += [f"### {task} (trained on sizes {part['trained_sizes'].iloc[0]})", "",
                  "| runs | seeds mastered | in distribution | " + " | ".join(header) + " |",
                  "|---|---|---|" + "---|---|" * len(FACTORS)]  # fmt: skip
        for group, rows in part.groupby("group", sort=True):
            first = rows.iloc[0]
            cells = []
            for factor in FACTORS:
                cells += [
                    _band_cell(bands[factor].get(group), first),
                    _interval_cell(rows[rows["size"] == largest * factor]),
                ]
            lines.append(f"| {group} | {first['mastered']} of {first['seeds']} | {first['in_distribution']:.2f} | "
                         + " | ".join(cells) + " |")  # fmt: skip
        lines.append("")
        for factor in FACTORS:
            best = best_at(summary, task, factor)
            if best is None:
                continue
            group, mean, low, high, seeds = best
            mine = found[(found["task"] == task) & (found["factor"] == factor) & (found["verdict"] != "≈")]
            claims = [_claim(row) for row in mine.itertuples()]
            value = _band_cell((mean, low, high, seeds), None)
            said = (f"highest {group}, {value} ({seeds} seed{'s' if seeds > 1 else ', no interval'})" if mean > 0
                    else "no encoding solves any instance")  # fmt: skip
            lines.append(f"- Sizes {band_label(largest, factor)}: {said}; "
                         + (f"differences supported: {'; '.join(claims)}." if claims else
                            "no difference between encodings is supported by the paired tests."))  # fmt: skip
        lines.append("")
    return "\n".join(lines)


def _band_cell(mean, first) -> str:
    if mean is None:
        return "no seed mastered" if not first["mastered"] else "n/a"
    value, low, high, seeds = mean
    return f"{value:.2f}" if seeds < 2 else f"{value:.2f} [{low:.2f}, {high:.2f}]"


def _interval_cell(rows) -> str:
    if rows.empty:
        return "n/a"
    row = rows.iloc[0]
    if math.isnan(row["accuracy"]):
        return "no seed mastered" if not row["mastered"] else "n/a"
    return f"{row['accuracy']:.2f} [{row['ci_low']:.2f}, {row['ci_high']:.2f}]"


def _claim(row) -> str:
    higher, lower = (row.a, row.b) if row.verdict == ">" else (row.b, row.a)
    return f"{higher} > {lower} by {abs(row.difference):.2f} (adjusted p {row.adjusted:.3g}, {row.pairs} seeds)"


def short_labels(groups: list[str]) -> list[str]:
    """Group names without what they share: "lg-copy-alibi-s*", "lg-copy-rope-s*" -> "alibi", "rope"."""
    names = [group.removesuffix("-s*") for group in groups]
    shared = os.path.commonprefix(names) if len(names) > 1 else ""
    shared = shared[: shared.rfind("-") + 1]  # whole words only
    return [name[len(shared) :] or name for name in names]


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
        axis.set_xticks(range(grid.shape[1]), [str(s) for s in grid.columns], fontsize=8)
        axis.set_yticks(range(grid.shape[0]), short_labels(list(grid.index)), fontsize=8)
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
