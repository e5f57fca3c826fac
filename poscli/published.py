"""Published numbers (from ../shared/reference/PAPERS.md) set beside a recipe's results.

Each comparison takes a recipe's summary over seeds (``poscli.recipes.seed_summary``: one row per
group of runs and length, with mean/sd/min/max perplexity) and ``meta`` (group -> the options
that made it) and returns Markdown: the paper's table, poscli's numbers in the same shape, and
sentences, computed from the numbers, saying where the orderings agree and where they do not.
Nothing here is written by hand about a particular result: rerunning the recipe rewrites it.
"""

from __future__ import annotations

import math

# Press, Smith and Lewis (ICLR 2022), WikiText-103 validation perplexity, 16-layer d=1024 model
# trained at L = 512 (PAPERS.md; T5 bias ran out of memory at 15512).
PRESS_TRAIN_LENGTH = 512
PRESS_2022 = {  # L_valid -> {pe: ppl}
    512: {"sinusoidal": 20.05, "rope": 20.07, "t5": 19.65, "alibi": 19.73},
    1012: {"sinusoidal": 43.54, "rope": 21.37, "t5": 18.79, "alibi": 18.73},
    1512: {"sinusoidal": 76.23, "rope": 25.99, "t5": 18.91, "alibi": 18.52},
    2512: {"sinusoidal": 132.41, "rope": 31.58, "t5": 20.41, "alibi": 18.41},
    3512: {"sinusoidal": 178.97, "rope": 35.54, "t5": 22.91, "alibi": 18.40},
    15512: {"sinusoidal": 406.01, "rope": 79.25, "alibi": 18.31},
}
PAPER_NAMES = {"sinusoidal": "Sinusoidal", "rope": "Rotary", "t5": "T5 bias", "alibi": "ALiBi"}

# Peng et al. (2023), YaRN's s = 2 ablation on Llama-2-7B, Proof-pile perplexity (target 8k).
PENG_2023_S2 = {  # method -> {length: ppl}
    "pi": {2048: 3.92, 4096: 3.51, 6144: 3.51, 8192: 3.34, 10240: 8.07},
    "ntk": {2048: 4.20, 4096: 3.75, 6144: 3.74, 8192: 3.59, 10240: 6.24},
    "yarn": {2048: 3.92, 4096: 3.51, 6144: 3.51, 8192: 3.36, 10240: 6.05},
}
PENG_NAMES = {"pi": "PI (fine-tuned)", "ntk": "NTK (base 20k)", "yarn": "YaRN"}

# Extrapolation classes, by perplexity at a length over perplexity at the train length: the
# words of the brief ("keeps", "degrades gracefully", "blows up") made measurable.
KEEPS, BLOWS_UP = 1.10, 2.0


def extrapolation_class(ratio: float) -> str:
    if math.isnan(ratio):
        return "n/a"
    if ratio <= KEEPS:
        return "keeps"
    return "degrades gracefully" if ratio < BLOWS_UP else "blows up"


def _cell(summary, group: str, length: int):
    row = summary[(summary["group"] == group) & (summary["length"] == length)]
    return None if row.empty or row["seeds"].iloc[0] == 0 else row.iloc[0]


def _fmt(row) -> str:
    if row is None:
        return "n/a"
    if row["seeds"] < 2:
        return f"{row['mean']:.3f}"
    return f"{row['mean']:.3f} ± {row['sd']:.3f}"


def _order(items: list[tuple[str, float]]) -> list[str]:
    return [name for name, value in sorted(items, key=lambda item: item[1]) if not math.isnan(value)]


def press2022(summary, meta: dict) -> str:
    """Train short, test long: the paper's perplexity and extrapolation classes beside poscli's."""
    groups = list(dict.fromkeys(summary["group"]))
    train_length = int(summary["train_length"].iloc[0])
    lengths = sorted(summary["length"].unique())
    longer = [length for length in lengths if length > train_length]
    lines = [
        "### Beside Press et al. (2022), \"Train Short, Test Long\"\n",
        f"Published: WikiText-103 validation perplexity of a 16-layer, d = 1024 word-level model trained at "
        f"L = {PRESS_TRAIN_LENGTH} (PAPERS.md; T5 bias ran out of memory at 15512). Ratio = perplexity at the length "
        "over perplexity at the train length.\n",
        "| L_valid (x train) | " + " | ".join(PAPER_NAMES.values()) + " |",
        "|---|" + "---|" * len(PAPER_NAMES),
    ]
    for length, values in PRESS_2022.items():
        cells = [f"{values[pe]:.2f} ({values[pe] / PRESS_2022[PRESS_TRAIN_LENGTH][pe]:.2f}x)" if pe in values else "out of memory" for pe in PAPER_NAMES]
        lines.append(f"| {length} ({length / PRESS_TRAIN_LENGTH:.1f}x) | " + " | ".join(cells) + " |")

    lines += [
        "",
        f"poscli: byte-level models trained at {train_length} (mean ± sd over seeds; ratio of means to the train length).\n",
        "| runs | " + " | ".join(f"{length} ({length // train_length}x)" for length in lengths) + " | class at the longest |",
        "|---|" + "---|" * (len(lengths) + 1),
    ]
    ratio_at = {}
    for group in groups:
        base = _cell(summary, group, train_length)
        cells, ratios = [], {}
        for length in lengths:
            row = _cell(summary, group, length)
            ratio = row["mean"] / base["mean"] if row is not None and base is not None else float("nan")
            ratios[length] = ratio
            cells.append(_fmt(row) + ("" if math.isnan(ratio) or length == train_length else f" ({ratio:.2f}x)"))
        ratio_at[group] = ratios
        lines.append(f"| {group} | " + " | ".join(cells) + f" | {extrapolation_class(ratios[lengths[-1]])} |")

    by_pe = {}
    for group in groups:
        pe = summary[summary["group"] == group]["pe"].iloc[0]
        by_pe.setdefault(pe, group)
    lines += ["", f"Classes: ratio ≤ {KEEPS} keeps its perplexity, {KEEPS}–{BLOWS_UP} degrades gracefully, ≥ {BLOWS_UP} blows up.\n"]
    for pe, name in PAPER_NAMES.items():
        paper_length = max(length for length, values in PRESS_2022.items() if pe in values)
        paper_ratio = PRESS_2022[paper_length][pe] / PRESS_2022[PRESS_TRAIN_LENGTH][pe]
        paper_class = extrapolation_class(paper_ratio)
        if pe not in by_pe:
            lines.append(f"- {name}: paper {paper_class} ({paper_ratio:.2f}x at {paper_length / PRESS_TRAIN_LENGTH:.0f}x); not in this study.")
            continue
        ours = ratio_at[by_pe[pe]]
        verdict = "agrees" if extrapolation_class(ours[lengths[-1]]) == paper_class else "differs"
        ours_text = ", ".join(f"{ours[length]:.2f}x at {length // train_length}x" for length in longer)
        lines.append(f"- {name}: paper {paper_class} ({paper_ratio:.2f}x at {paper_length / PRESS_TRAIN_LENGTH:.0f}x); "
                     f"poscli {extrapolation_class(ours[lengths[-1]])} ({ours_text}): **{verdict}**.")

    paper_order = _order([(pe, PRESS_2022[3512][pe]) for pe in PAPER_NAMES])
    lines += ["", f"- Paper at 3512 (6.9x, the longest length where it has all four): "
                  f"{' < '.join(PAPER_NAMES[pe] for pe in paper_order)}."]
    for length in longer:
        rows = {pe: _cell(summary, by_pe[pe], length) for pe in PAPER_NAMES if pe in by_pe}
        ours = _order([(pe, row["mean"] if row is not None else float("nan")) for pe, row in rows.items()])
        same = [pe for pe in paper_order if pe in ours] == ours
        overlaps = [f"{PAPER_NAMES[a]} and {PAPER_NAMES[b]}" for a, b in zip(ours, ours[1:])
                    if rows[a]["seeds"] > 1 and rows[a]["max"] >= rows[b]["min"]]
        text = f"- poscli at {length} ({length // train_length}x): {' < '.join(PAPER_NAMES[pe] for pe in ours)}: **{'same order' if same else 'a different order'}**"
        if overlaps:
            text += f"; the seeds' ranges overlap for {', '.join(overlaps)}"
        lines.append(text + ".")
    return "\n".join(lines) + "\n"


def peng2023(summary, meta: dict) -> str:
    """Context extension: YaRN's ablation beside poscli's methods at each target length."""
    lines = [
        "### Beside Peng et al. (2023), YaRN\n",
        "Published: YaRN's s = 2 ablation, Llama-2-7B extended from 4k to 8k, Proof-pile perplexity "
        "(PAPERS.md). Past the target (10k) YaRN degrades least.\n",
        "| method | " + " | ".join(str(length) for length in PENG_2023_S2["yarn"]) + " |",
        "|---|" + "---|" * len(PENG_2023_S2["yarn"]),
    ]
    for method, values in PENG_2023_S2.items():
        lines.append(f"| {PENG_NAMES[method]} | " + " | ".join(f"{v:.2f}" for v in values.values()) + " |")
    lines += ["", "Published long runs: PI fine-tuned to 32k: 3.51 (8k), 2.64 (32k), 187.7 (64k); "
                  "YaRN s = 32 (128k): 3.56 (8k), 2.70 (32k), 2.45 (64k), 2.37 (128k).", ""]

    extensions = {group: options for group, options in meta.items() if "method" in options and group in set(summary["group"])}
    settings = sorted({(str(o["target"]), int(o.get("steps", 400))) for o in extensions.values()}, key=lambda s: (s[1], s[0]))
    for target_text, steps in settings:
        members = {g: o for g, o in extensions.items() if str(o["target"]) == target_text and int(o.get("steps", 400)) == steps}
        target = int(summary[summary["group"].isin(list(members))]["length"].max())
        rows = {o["method"]: _cell(summary, g, target) for g, o in members.items()}
        ranked = _order([(m, row["mean"] if row is not None else float("nan")) for m, row in rows.items()])
        if not ranked:
            continue
        best = ranked[0]
        tuning = "no fine-tuning" if steps == 0 else f"{steps} fine-tuning steps"
        line = f"- poscli, target {target_text}, {tuning}, at {target}: " + " < ".join(f"{m} {_fmt(rows[m])}" for m in ranked)
        if "yarn" in rows and rows["yarn"] is not None:
            yarn = rows["yarn"]
            runner_up = rows[ranked[1]] if len(ranked) > 1 else None
            if best == "yarn" and runner_up is not None and yarn["seeds"] > 1 and runner_up["min"] <= yarn["max"]:
                verdict = f"YaRN is lowest, as in the paper, but within the seeds' range of {ranked[1]}"
            elif best == "yarn":
                verdict = "YaRN is best, as in the paper"
            elif yarn["seeds"] > 1 and yarn["min"] <= rows[best]["max"]:
                verdict = f"{best} is best but YaRN's range over seeds overlaps it"
            else:
                verdict = f"{best} is best, YaRN ranks {ranked.index('yarn') + 1} of {len(ranked)}: **differs from the paper**"
            line += f". {verdict}."
        lines.append(line)
    unextended = [g for g, o in meta.items() if "method" not in o and g in set(summary["group"])]
    for group in unextended:
        cells = [f"{length}: {_fmt(_cell(summary, group, length))}" for length in sorted(summary["length"].unique())]
        lines.append(f"- unextended base {group}: " + ", ".join(cells) + ".")
    return "\n".join(lines) + "\n"


PUBLISHED = {"press2022": press2022, "peng2023": peng2023}
