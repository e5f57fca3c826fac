"""Published numbers (Press et al., 2022; Peng et al., 2023) set beside a recipe's results.

Each comparison takes a recipe's summary over seeds (``poscli.evaluation.seeds.seed_summary``: one row per
group of runs and length, with mean/sd/min/max perplexity) and ``meta`` (group -> the options
that made it) and returns Markdown: the paper's table, poscli's numbers in the same shape, and
sentences, computed from the numbers, saying where the orderings agree and where they do not.
Nothing here is written by hand about a particular result: rerunning the recipe rewrites it.
"""

from __future__ import annotations

import math
from typing import Any

from poscli.evaluation.stats import MIN_EFFECT
from poscli.study.paired import (
    CONTINUE,
    Decisions,
    accuracy_text,
    cell_at,
    extension_steps,
    format_cell,
    method_kind,
    method_label,
    pooled_cell,
    seed_log_ratios,
)
from poscli.study.published_methods import method_orderings
from poscli.study.published_recent import recent_perplexity, recent_retrieval, recent_tasks
from poscli.study.published_tasks import kazemnejad2023

# Press, Smith and Lewis (ICLR 2022), WikiText-103 validation perplexity, 16-layer d=1024 model
# trained at L = 512 (T5 bias ran out of memory at 15512).
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

# Extrapolation classes, by perplexity at a length over perplexity at the train length: the words
# of the train-short-test-long story ("keeps", "degrades gracefully", "blows up") made measurable.
KEEPS, BLOWS_UP = 1.10, 2.0


def extrapolation_class(ratio: float) -> str:
    if math.isnan(ratio):
        return "n/a"
    if ratio <= KEEPS:
        return "keeps"
    return "degrades gracefully" if ratio < BLOWS_UP else "blows up"


def interval_class(low: float, high: float) -> str:
    """The class of a ratio's interval: one class when the whole interval lies in it, else
    "X or Y" (the interval crosses a threshold, so the data do not decide)."""
    if math.isnan(low) or math.isnan(high):
        return "n/a"
    a, b = extrapolation_class(low), extrapolation_class(high)
    return a if a == b else f"{a} or {b}"


def class_verdict(paper_class: str, low: float, high: float) -> str:
    """agrees: the whole interval in the paper's class; differs: none of it; tied: it crosses
    a threshold of the paper's class."""
    ours = interval_class(low, high)
    if ours == paper_class:
        return "agrees"
    if paper_class in ours.split(" or "):
        return "tied (the interval crosses a class threshold)"
    return "differs"


def _bounds(row) -> tuple[float, float]:
    return (row["ci_low"], row["ci_high"]) if not math.isnan(row["ci_low"]) else (row["mean"], row["mean"])


def ranked(rows: dict[str, Any], names: dict[str, str] | None = None, below=None) -> tuple[list[str], str]:
    """Items ranked by mean, and the ranking as text: "<" between neighbours where ``below(a, b)``
    (default: their 95% intervals separate), "≈" (tied) where not."""
    names = names or {}
    below = below or (lambda a, b: _bounds(rows[a])[1] < _bounds(rows[b])[0])
    order = [
        k
        for k, row in sorted(rows.items(), key=lambda item: item[1]["mean"])
        if row is not None and not math.isnan(row["mean"])
    ]
    text = names.get(order[0], order[0]) if order else ""
    for a, b in zip(order, order[1:]):
        text += (" < " if below(a, b) else " ≈ ") + names.get(b, b)
    return order, text


def separated_pairs(rows: dict[str, object]) -> set[tuple[str, str]]:
    """(a, b) for every pair whose intervals separate with a below b."""
    pairs = set()
    for a, row_a in rows.items():
        for b, row_b in rows.items():
            if a != b and row_a is not None and row_b is not None and _bounds(row_a)[1] < _bounds(row_b)[0]:
                pairs.add((a, b))
    return pairs


def null_summary(summary, group: str, length: int):
    """The truncation null's summary holding (group, length), if the table has one."""
    for part in summary.attrs.get("null", []):
        if (group, length) in part.attrs.get("run_losses", {}):
            return part
    return None


NULL_WORDS = {
    "<": "uses the longer context (better than its context cut to the train length)",
    "keeps": "keeps (no worse than its context cut to the train length: the interval under 1 + the minimum effect)",
    "?": "undecided (neither better nor no worse shown: more seeds decide)",
    ">": "loses to its own context cut to the train length (the unseen positions hurt)",
}


def null_verdict(decisions: Decisions, index: int | None) -> str:
    """A group against its truncation null: better (``<``) or worse (``>``) where the corrected test
    decides; otherwise "keeps" only where the interval shows it no worse, and undecided (``?``) where
    the seeds are too few or too spread to show either (Press et al.'s "keeps" is a claim of no harm)."""
    symbol = decisions.symbol(index)
    if symbol != "≈":
        return symbol
    return "keeps" if decisions.no_worse(index) else "?"


def _budget_groups(meta: dict, group: str, summary) -> list[str]:
    """A group's snapshots (GROUP@STEP, by step) then the group itself: its budgets, smallest first."""
    from poscli.model.runs import SNAPSHOT_MARK

    present = set(summary["group"])
    snapshots = sorted(
        (g for g in meta if g.startswith(group + SNAPSHOT_MARK) and g in present),
        key=lambda g: int(g.rsplit(SNAPSHOT_MARK, 1)[1]),
    )
    return [*snapshots, group]


def press2022(summary, meta: dict) -> str:
    """Train short, test long: the paper's perplexity and extrapolation classes beside poscli's.
    Classes come from the 95% interval of each ratio to the train length; orderings and "keeps" /
    "uses the longer context" (against the truncation null) from paired tests over seeds with
    Holm's correction and a minimum effect (``Decisions``); a class at several training budgets
    is "settled" only where the last two budgets agree."""
    from poscli.model.runs import SNAPSHOT_MARK

    groups = [g for g in dict.fromkeys(summary["group"]) if g in meta and SNAPSHOT_MARK not in g]
    train_length = int(summary[summary["group"].isin(groups)]["train_length"].iloc[0])
    lengths = sorted(summary["length"].unique())
    longer = [length for length in lengths if length > train_length]
    by_pe: dict[str, Any] = {}
    for group in groups:
        by_pe.setdefault(summary[summary["group"] == group]["pe"].iloc[0], group)
    press = {pe: by_pe[pe] for pe in PAPER_NAMES if pe in by_pe}
    decisions, null_tests, order_tests = _press_tests(summary, groups, press, longer)
    lines = _press_published_table()
    lines += _press_ratio_table(summary, groups, lengths, longer, train_length)
    lines += _press_class_lines(summary, by_pe, longer, train_length)
    lines += _press_null_lines(decisions, null_tests, groups, longer, train_length)
    lines += _press_order_lines(summary, decisions, order_tests, press, longer, train_length)
    lines += _budget_lines(summary, meta, groups, train_length)
    lines += ["", decisions.footer()]
    return "\n".join(lines) + "\n"


def _press_tests(summary, groups: list[str], press: dict, longer: list[int]):
    """Every test of the file first, so that one Holm correction covers them all: each group against
    its truncation null, and each pair of Press et al.'s encodings, at each longer length."""
    decisions = Decisions()
    null_tests = {}
    for group in groups:
        for length in longer:
            null = null_summary(summary, group, length)
            if null is not None:
                null_tests[(group, length)] = decisions.add(seed_log_ratios(summary, group, null, group, length))
    order_tests = {}
    for length in longer:
        for a in press:
            for b in press:
                if a < b:
                    order_tests[(a, b, length)] = decisions.add(
                        seed_log_ratios(summary, press[a], summary, press[b], length, paired=False)
                    )
    decisions.finish()
    return decisions, null_tests, order_tests


def _press_published_table() -> list[str]:
    lines = [
        '### Beside Press et al. (2022), "Train Short, Test Long"\n',
        f"Published: WikiText-103 validation perplexity of a 16-layer, d = 1024 word-level model trained at "
        f"L = {PRESS_TRAIN_LENGTH} (Press et al., 2022, Table 2; T5 bias ran out of memory at 15512). Ratio = "
        "perplexity at the length "
        "over perplexity at the train length.\n",
        "| L_valid (x train) | " + " | ".join(PAPER_NAMES.values()) + " |",
        "|---|" + "---|" * len(PAPER_NAMES),
    ]
    for length, values in PRESS_2022.items():
        cells = [
            f"{values[pe]:.2f} ({values[pe] / PRESS_2022[PRESS_TRAIN_LENGTH][pe]:.2f}x)"
            if pe in values
            else "out of memory"
            for pe in PAPER_NAMES
        ]
        lines.append(f"| {length} ({length / PRESS_TRAIN_LENGTH:.1f}x) | " + " | ".join(cells) + " |")
    return lines


def _press_ratio_table(summary, groups: list[str], lengths: list[int], longer: list[int], train_length: int):
    lines = [
        "",
        f"poscli: byte-level models trained at {train_length}, every length scoring the same tokens; the ratio to the "
        "train length with its 95% interval (two-level bootstrap: seeds, then evaluation spans, paired across "
        "lengths).\n",
        "| runs | "
        + " | ".join(f"{length // train_length}x ({length})" for length in longer)
        + " | class at the longest |",
        "|---|" + "---|" * (len(longer) + 1),
    ]
    for group in groups:
        cells = []
        for length in longer:
            row = cell_at(summary, group, length)
            if row is None or math.isnan(row.get("ratio", float("nan"))):
                cells.append("n/a")
            else:
                cells.append(f"{row['ratio']:.2f}x [{row['ratio_low']:.2f}, {row['ratio_high']:.2f}]")
        last = cell_at(summary, group, lengths[-1])
        klass = (
            interval_class(last["ratio_low"], last["ratio_high"])
            if last is not None and not math.isnan(last.get("ratio", float("nan")))
            else "n/a"
        )
        lines.append(f"| {group} | " + " | ".join(cells) + f" | {klass} |")
    return lines


def nearest_paper_length(pe: str, multiple: float) -> int:
    """Press et al.'s evaluation length whose ratio to their train length is nearest (in log ratio) to
    ``multiple``, among those where the paper has ``pe``: a paper's number is set beside ours only at
    the same ratio of lengths, or the nearest."""
    lengths = [length for length, values in PRESS_2022.items() if pe in values and length > PRESS_TRAIN_LENGTH]
    return min(lengths, key=lambda length: abs(math.log(length / PRESS_TRAIN_LENGTH / multiple)))


def _press_class_lines(summary, by_pe: dict, longer: list[int], train_length: int) -> list[str]:
    """Each of the paper's encodings at each longer length: its class here beside the paper's at the
    nearest ratio of lengths the paper has (said so), and whether they agree."""
    lines = [
        "",
        f"Classes: ratio ≤ {KEEPS} keeps its perplexity, {KEEPS}–{BLOWS_UP} degrades gracefully, ≥ {BLOWS_UP} blows "
        "up; an interval that crosses a threshold gets both classes and decides nothing. The paper's ratio is the one "
        "at the nearest ratio of lengths it has (its lengths are 2.0x-30x its train length).\n",
    ]
    for pe, name in PAPER_NAMES.items():
        if pe not in by_pe:
            lines.append(f"- {name}: not in this study.")
            continue
        cells = []
        for length in longer:
            row = cell_at(summary, by_pe[pe], length)
            if row is None or math.isnan(row.get("ratio", float("nan"))):
                continue
            multiple = length / train_length
            paper_length = nearest_paper_length(pe, multiple)
            paper_ratio = PRESS_2022[paper_length][pe] / PRESS_2022[PRESS_TRAIN_LENGTH][pe]
            paper_class = extrapolation_class(paper_ratio)
            same = "" if abs(paper_length / PRESS_TRAIN_LENGTH - multiple) < 0.05 * multiple else ", the nearest"
            verdict = class_verdict(paper_class, row["ratio_low"], row["ratio_high"])
            cells.append(
                f"at {multiple:g}x poscli {row['ratio']:.2f}x [{row['ratio_low']:.2f}, {row['ratio_high']:.2f}] "
                f"{interval_class(row['ratio_low'], row['ratio_high'])}, paper {paper_ratio:.2f}x {paper_class} (at "
                f"{paper_length / PRESS_TRAIN_LENGTH:.1f}x{same}): {verdict}"
            )
        lines.append(f"- {name}: " + ("; ".join(cells) if cells else "poscli has no ratio with an interval") + ".")
    return lines


def _press_null_lines(decisions, null_tests: dict, groups: list[str], longer: list[int], train_length: int):
    if not null_tests:
        return []
    lines = [
        "",
        "Against the truncation null (the same model, the same targets and cold starts, its context cut to the "
        "train length: "
        "perplexity at the length over the null's). Non-overlapping windows give a longer window fewer cold "
        "starts, so a "
        "model that merely does not degrade can look better at a longer length; only the null separates that from "
        "using the longer context. Uses: lower than the null by the corrected test; loses: higher; keeps: neither, "
        f"and the ratio's 95% interval ends below {1 + MIN_EFFECT:g} (no worse); undecided: neither, and the "
        "interval reaches above it (too few or too spread seeds to say).\n",
    ]
    for group in groups:
        cells = [
            f"{length // train_length}x: {decisions.describe(null_tests[(group, length)])}, "
            f"{NULL_WORDS[null_verdict(decisions, null_tests[(group, length)])].split(' (')[0]}"
            for length in longer
            if (group, length) in null_tests
        ]
        if cells:
            lines.append(f"- {group}: " + "; ".join(cells) + ".")
    return lines


def _press_order_lines(summary, decisions, order_tests: dict, press: dict, longer: list[int], train_length: int):
    """The paper's order at 3512 and poscli's at each longer length, decided by the paired tests."""
    paper_order = [pe for pe, _ in sorted(((pe, PRESS_2022[3512][pe]) for pe in PAPER_NAMES), key=lambda item: item[1])]
    lines = [
        "",
        f"- Paper at 3512 (6.9x, the longest length where it has all four): "
        f"{' < '.join(PAPER_NAMES[pe] for pe in paper_order)}.",
    ]
    for length in longer:
        rows = {pe: cell_at(summary, press[pe], length) for pe in press}
        rows = {pe: row for pe, row in rows.items() if row is not None and not math.isnan(row["mean"])}
        if len(rows) < 2:
            continue

        def below(a: str, b: str) -> bool:
            key = (a, b, length) if a < b else (b, a, length)  # noqa: B023
            symbol = decisions.symbol(order_tests.get(key))
            return symbol == ("<" if a < b else ">")

        _, text = ranked(rows, PAPER_NAMES, below=below)
        reversed_pairs = [
            (a, b) for a in rows for b in rows if a != b and below(a, b) and paper_order.index(a) > paper_order.index(b)
        ]
        if reversed_pairs:
            verdict = "**a reversal of the paper's order**: " + ", ".join(
                f"{PAPER_NAMES[a]} below {PAPER_NAMES[b]} "
                f"({decisions.describe(order_tests[(a, b, length) if a < b else (b, a, length)])})"
                for a, b in sorted(reversed_pairs)
            )
        elif "≈" in text:
            verdict = "**the paper's order wherever the paired tests decide**; ≈ marks a pair the tests do not separate"
        else:
            verdict = "**same order**, every step decided"
        lines.append(f"- poscli at {length} ({length // train_length}x): {text}: {verdict}.")
    return lines


def _budget_lines(summary, meta: dict, groups: list[str], train_length: int) -> list[str]:
    """Each group's class at 16x and 64x at every training budget it kept, and whether it is settled."""
    budgeted = {group: _budget_groups(meta, group, summary) for group in groups}
    budgeted = {group: chain for group, chain in budgeted.items() if len(chain) > 1}
    if not budgeted:
        return []
    lines = [
        "",
        "#### Verdicts against the training budget\n",
        "Each group at each budget it kept (snapshots of the same runs: at a quarter and a half of the steps the "
        "learning "
        "rate has not yet decayed, so a snapshot is a model part-way through its schedule, not one trained for that "
        "budget). "
        "A class is **settled** where the last two budgets give the same one, **still moving** where they do not.\n",
    ]
    for multiple in (16, 64):
        length = multiple * train_length
        if length not in set(summary["length"]):
            continue
        for group, chain in budgeted.items():
            cells, classes = [], []
            for member in chain:
                row = cell_at(summary, member, length)
                if row is None or math.isnan(row.get("ratio", float("nan"))):
                    cells.append("n/a")
                    classes.append("n/a")
                    continue
                klass = interval_class(row["ratio_low"], row["ratio_high"])
                classes.append(klass)
                seen = row.get("tokens_seen", float("nan"))
                budget = f"{seen / 1e6:.2f}M tokens" if not math.isnan(seen) else member
                cells.append(f"{budget}: {row['ratio']:.2f}x [{row['ratio_low']:.2f}, {row['ratio_high']:.2f}] {klass}")
            if set(classes) == {"n/a"}:  # e.g. a learned table: no representation at this length at any budget
                lines.append(f"- {group} at {multiple}x: n/a at every budget.")
                continue
            settled = (
                "settled"
                if len(classes) > 1
                and classes[-1] == classes[-2]
                and " or " not in classes[-1]
                and classes[-1] != "n/a"
                else "still moving"
            )
            lines.append(f"- {group} at {multiple}x: " + "; ".join(cells) + f": **{settled}**.")
    return lines


def peng2023(summary, meta: dict) -> str:
    """Context extension: YaRN's ablation beside poscli's methods at each target length; a method
    is called best only where a paired test over seeds, Holm-corrected, separates it from the
    runner-up (``Decisions``); fine-tuned methods are measured over continued training alone."""
    lines = [
        "### Beside Peng et al. (2023), YaRN\n",
        "Published: YaRN's s = 2 ablation, Llama-2-7B extended from 4k to 8k, Proof-pile perplexity "
        "(Peng et al., 2023). Past the target (10k) YaRN degrades least.\n",
        "| method | " + " | ".join(str(length) for length in PENG_2023_S2["yarn"]) + " |",
        "|---|" + "---|" * len(PENG_2023_S2["yarn"]),
    ]
    for method, values in PENG_2023_S2.items():
        lines.append(f"| {PENG_NAMES[method]} | " + " | ".join(f"{v:.2f}" for v in values.values()) + " |")
    lines += [
        "",
        "Published long runs: PI fine-tuned to 32k: 3.51 (8k), 2.64 (32k), 187.7 (64k); "
        "YaRN s = 32 (128k): 3.56 (8k), 2.70 (32k), 2.45 (64k), 2.37 (128k).",
        "",
        "poscli: mean over seeds with its 95% interval (two-level bootstrap); `<` where a paired test over seeds (the "
        "extensions of one base seed against each other, on the same spans) decides, `≈` (tied) where not.",
        "",
    ]
    decisions = Decisions()
    ranking = _rankings(summary, meta, decisions)
    claims = _claims(summary, meta)
    lines += ranking()
    if claims:
        lines += ["", *claims]
    lines += ["", decisions.footer()]
    return "\n".join(lines) + "\n"


# The methods of Peng et al. (2023)'s comparisons; YaRN's verdict is about these only.
PENG_METHODS = ("pi", "ntk", "dynamic-ntk", "ntk-by-parts", "yarn")


def _steps(options: dict) -> int:
    """Fine-tuning steps of an extension as the recipe asked (a method that never trains: 0)."""
    return extension_steps(options)


def _rankings(summary, meta: dict, decisions: Decisions):
    """One line per (target, fine-tuning) setting: the methods ranked at the target, "<" or "≈"
    decided by paired tests over seeds, YaRN's place named, and each fine-tuned method's gain over
    the continued-training control. The tests are added to ``decisions`` now; the returned
    function writes the lines once ``decisions`` is finished (one Holm correction for the file)."""
    extensions = {
        group: options for group, options in meta.items() if "method" in options and group in set(summary["group"])
    }
    settings = sorted({(str(o["target"]), _steps(o)) for o in extensions.values()}, key=lambda s: (s[1], s[0]))
    plans = []
    for target_text, steps in settings:
        members = {g: o for g, o in extensions.items() if str(o["target"]) == target_text and _steps(o) == steps}
        plan = _ranking_plan(summary, members, decisions)
        if plan is not None:
            plans.append({"target_text": target_text, "steps": steps, **plan})

    def write() -> list[str]:
        lines = [line for plan in plans for line in _ranking_lines(plan, decisions)]
        unextended = [g for g, o in meta.items() if "method" not in o and g in set(summary["group"])]
        for group in unextended:
            cells = [
                f"{length}: {format_cell(cell_at(summary, group, length))}"
                for length in sorted(summary["length"].unique())
            ]
            lines.append(f"- unextended base {group}: " + ", ".join(cells) + ".")
        return lines

    decisions_done = decisions.finish
    return lambda: (decisions_done(), write())[1]


def _ranking_plan(summary, members: dict, decisions: Decisions) -> dict | None:
    """The methods of one setting at its target, in order of perplexity, and the tests that decide
    their order, the best of Peng et al.'s methods against the others, and each method against
    each continued-training control; None when no method has a value there."""
    target = int(summary[summary["group"].isin(list(members))]["length"].max())
    groups = {method_label(o): g for g, o in members.items()}
    rows = {m: cell_at(summary, g, target) for m, g in groups.items()}
    rows = {m: row for m, row in rows.items() if row is not None and not math.isnan(row["mean"])}
    if not rows:
        return None
    order = [m for m, _ in sorted(rows.items(), key=lambda item: item[1]["mean"])]
    compared = [m for m in order if m in PENG_METHODS]
    best = compared[0] if compared else order[0]
    controls = [m for m in order if m.startswith(CONTINUE)]
    pairs = [*zip(order, order[1:]), *((best, other) for other in compared[1:])]
    pairs += [(m, c) for m in order for c in controls if not m.startswith(CONTINUE)]
    tests = {}
    for a, b in pairs:
        if (a, b) not in tests and a != b:
            tests[(a, b)] = decisions.add(seed_log_ratios(summary, groups[a], summary, groups[b], target))
    return {"target": target, "rows": rows, "order": order, "compared": compared, "best": best, "tests": tests,
            "controls": controls}  # fmt: skip


def _ranking_lines(plan: dict, decisions: Decisions) -> list[str]:
    order, compared, best, tests, rows = plan["order"], plan["compared"], plan["best"], plan["tests"], plan["rows"]
    target, steps = plan["target"], plan["steps"]

    def below(a: str, b: str) -> bool:
        return decisions.symbol(tests.get((a, b))) == "<"

    text = order[0]
    for a, b in zip(order, order[1:]):
        text += (" < " if below(a, b) else " ≈ ") + b
    tuning = "no fine-tuning" if steps == 0 else f"{steps} fine-tuning steps"
    cells = ", ".join(f"{m} {format_cell(rows[m])}" for m in order)
    line = f"- poscli, target {plan['target_text']}, {tuning}, at {target}: {text} ({cells})"
    tied_best = [m for m in compared[1:] if not below(best, m)]
    # YaRN is placed among Peng et al.'s other methods; alone among them, it is placed nowhere
    if "yarn" in rows and len(compared) > 1:
        if best == "yarn" and not tied_best:
            verdict = "YaRN is best, as in the paper"
        elif best == "yarn" or "yarn" in tied_best:
            rivals = ", ".join(m for m in [best, *tied_best] if m != "yarn")
            verdict = f"YaRN is tied for best with {rivals}: the data do not decide"
        else:
            tied = f" (tied with {', '.join(tied_best)})" if tied_best else ""
            verdict = f"{best}{tied} is best and YaRN lies above it: **differs from the paper**"
        if len(compared) < len(order):
            verdict = f"Among the methods Peng et al. compare ({', '.join(compared)}): {verdict}"
        line += f". {verdict}"
    lines = [line + "."]
    for control in plan["controls"]:
        gains = [
            f"{m} {decisions.describe(tests[(m, control)])} {decisions.symbol(tests[(m, control)])}"
            for m in order
            if (m, control) in tests
        ]
        if gains:
            lines.append(
                f"  - over the control ({control}: the base trained the same extra tokens with no rescaling), "
                f"perplexity ratio at {target}: " + "; ".join(gains) + "."
            )
    return lines


# What the papers of the newer methods claim, as an extrapolation class at the target length
# (perplexity at the target over the same model's at its train length).
CLAIMS = {
    "longrope": ("Ding et al., 2024", "searched per-frequency factors extend a model 8x without fine-tuning", KEEPS),
    "self-extend": ("Jin et al., 2024", "no training; perplexity stays flat up to the reach (L - W) G + W", KEEPS),
    "rerope": ("Su, 2023", "no training; the loss does not rise with length (LLaMA-2-13B, 4k to 16k)", KEEPS),
    "leaky-rerope": ("Su, 2023", "no training; the loss does not rise with length", KEEPS),
    "sinks": ("Xiao et al., 2024", "4 sink tokens and a recent window keep perplexity stable at any length", KEEPS),
    "yarn + PoSE": ("Zhu et al., 2024", "fine-tuning at the original window reaches the target", KEEPS),
    "yarn + CREAM": ("Wu et al., 2024", "fine-tuning at the original window reaches the target", KEEPS),
    "dca": ("An et al., 2024", "no training; perplexity stays flat far past the pretraining length", KEEPS),
    "lm-infinite": ("Han et al., 2024", "no training; perplexity stays flat at lengths far past training", KEEPS),
}


def _claims(summary, meta: dict) -> list[str]:
    """For each extension whose method makes a published claim: its perplexity ratio at the
    target with the interval, the class, and whether the claim holds (the whole interval in the
    claimed class), fails (none of it) or is undecided."""
    rows = []
    for group, options in meta.items():
        label = method_label(options) if "method" in options else None
        claimed = label and method_kind(options)  # a tuned method is held to its method's claim
        if claimed not in CLAIMS or group not in set(summary["group"]) or (claimed == "longrope" and _steps(options)):
            continue  # LongRoPE's claim is about no fine-tuning
        part = summary[summary["group"] == group]
        target = int(part["length"].max())
        cell = cell_at(summary, group, target)
        if cell is None or math.isnan(cell.get("ratio", float("nan"))):
            continue
        if claimed == "longrope" and target > 8 * int(cell["ratio_base"]):
            continue  # the claim is 8x; beyond it the ranking speaks
        citation, claim, _ = CLAIMS[claimed]
        verdict = class_verdict("keeps", cell["ratio_low"], cell["ratio_high"])
        verdict = {"agrees": "holds", "differs": "**does not hold**"}.get(
            verdict, "undecided (the interval crosses 1.10)"
        )
        tuning = "no training" if _steps(options) == 0 else f"{_steps(options)} fine-tuning steps"
        base = int(cell["ratio_base"])
        rows.append(
            f"- {label} ({tuning}), target {options['target']}: "
            f"{format_cell(cell_at(summary, group, base))} at {base}, "
            f"{format_cell(cell)} at {target}, "
            f"ratio {cell['ratio']:.2f} [{cell['ratio_low']:.2f}, {cell['ratio_high']:.2f}] "
            f"({interval_class(cell['ratio_low'], cell['ratio_high'])}). Published: {claim} ({citation}). Here: "
            f"{verdict}."
        )
    if not rows:
        return []
    return [
        "### The newer methods' claims\n",
        "Ratio: perplexity at the target over the same model's at its train length, mean over seeds with its paired "
        "95% interval; "
        f"a claim that perplexity stays flat holds where the whole interval is at most {KEEPS:.2f}, fails where all of "
        "it is above.\n",
        *rows,
    ]


def beyond_yarn(summary, meta: dict) -> str:
    """Every extension method at one target (64x, 256x): the ranking at the target, and the
    newer methods' published claims checked (LongRoPE, Self-Extend, ReRoPE, sinks, PoSE)."""
    decisions = Decisions()
    ranking = _rankings(summary, meta, decisions)
    lines = [
        "### Every method at the target\n",
        "poscli: mean over seeds with its 95% interval (two-level bootstrap); `<` where a paired test over seeds (the "
        "extensions of one base seed against each other, on the same spans) decides, `≈` (tied) where not.\n",
        *ranking(),
    ]
    claims = _claims(summary, meta)
    if claims:
        lines += ["", *claims]
    lines += ["", decisions.footer()]
    return "\n".join(lines) + "\n"


PUBLISHED = {"press2022": press2022, "peng2023": peng2023, "beyond-yarn": beyond_yarn}


# YaRN repository (Peng et al., 2023), data/passkey-32k.csv: Llama-2-7B extended from 4096 to 32k
# by each method and fine-tuned; passkey accuracy per context length (trial counts not published).
YARN_PASSKEY_ORIGINAL = 4096
YARN_PASSKEY = {  # method -> {length: accuracy}
    "pi": {2048: 0.54, 4096: 0.52, 8192: 0.44, 16384: 0.50, 32768: 0.76},
    "ntk": {2048: 0.84, 4096: 0.80, 8192: 0.90, 16384: 0.92, 32768: 0.00},
    "ntk-by-parts": {2048: 0.96, 4096: 0.90, 8192: 0.80, 16384: 0.66, 32768: 0.12},
    "yarn": {2048: 1.00, 4096: 1.00, 8192: 0.98, 16384: 1.00, 32768: 0.68},
}
YARN_PASSKEY_NAMES = {"pi": "PI", "ntk": "NTK", "ntk-by-parts": "NTK-by-parts", "yarn": "YaRN"}
MIN_ORDERED_SEEDS = 3  # retrieval compares methods only where every one has at least this many seeds (issue 30)


def _descending(rows: dict[str, Any]) -> str:
    """Items ranked by accuracy, highest first: ">" between neighbours whose intervals separate,
    "≈" where they overlap."""
    flipped = {k: {"mean": -r["accuracy"], "ci_low": -r["ci_high"], "ci_high": -r["ci_low"]} for k, r in rows.items()}
    return ranked(flipped)[1].replace(" < ", " > ")


def _yarn_passkey_verdict(rows: dict) -> str:
    """Where YaRN stands among the published table's own methods in one setting's rows (method ->
    pooled cell): best, tied for best, or below the best; empty where YaRN was not run, or ran
    without another of the table's methods to stand among."""
    published = {m: r for m, r in rows.items() if m in YARN_PASSKEY}
    if "yarn" not in published or len(published) < 2:
        return ""
    top = max(published, key=lambda m: published[m]["accuracy"])
    level = [m for m in published if m != top and not published[m]["ci_high"] < published[top]["ci_low"]]
    among = " among the published table's methods" if len(published) < len(rows) else ""
    if top == "yarn" and not level:
        return f". YaRN retrieves best{among}, as published"
    if top == "yarn" or "yarn" in level:
        rivals = ", ".join(m for m in [top, *level] if m != "yarn")
        return f". YaRN is tied for best{among} with {rivals}: the data do not decide"
    return f". {top} retrieves best{among} and YaRN's interval lies below it: **differs from the published table**"


def yarn2023_passkey(summary, meta: dict) -> str:
    """YaRN's published passkey table beside poscli's extended models, lengths as multiples of the
    original context; a method is called best only where its interval separates from the rest."""
    lines = [
        "### Passkey retrieval beside the YaRN repository\n",
        "Published: Llama-2-7B (original context 4096) extended to 32k by each method and fine-tuned; passkey "
        "accuracy by context length (the YaRN repository's passkey table; trials per cell not published).\n",
        "| method | "
        + " | ".join(f"{n // 1024}k ({n / YARN_PASSKEY_ORIGINAL:g}x)" for n in YARN_PASSKEY["yarn"])
        + " |",
        "|---|" + "---|" * len(YARN_PASSKEY["yarn"]),
    ]
    for method, values in YARN_PASSKEY.items():
        lines.append(f"| {YARN_PASSKEY_NAMES[method]} | " + " | ".join(f"{v:.2f}" for v in values.values()) + " |")
    published_order = lambda length: " > ".join(  # noqa: E731
        f"{YARN_PASSKEY_NAMES[m]} {YARN_PASSKEY[m][length]:.2f}"
        for m in sorted(YARN_PASSKEY, key=lambda m: -YARN_PASSKEY[m][length])
    )
    lines += [
        "",
        f"Published order at 4x (16k): {published_order(16384)}; at 8x, the target (32k): {published_order(32768)}.",
        "",
        "poscli: exact match over every depth, mean over seeds with its 95% interval; `>` where neighbouring intervals "
        f"separate, `≈` where they overlap (tied); not ordered where a method has under {MIN_ORDERED_SEEDS} seeds.",
        "",
    ]

    extensions = {
        group: options for group, options in meta.items() if "method" in options and group in set(summary["group"])
    }
    if "ntk-by-parts" not in {options["method"] for options in extensions.values()}:
        lines[-2] = lines[-2].replace("(tied).", "(tied). NTK-by-parts was not run here (`--method ntk-by-parts`).")
    bases = [g for g, o in meta.items() if "method" not in o and g in set(summary["group"])]
    base_rows = summary[summary["group"].isin(bases)]
    train_length = int(base_rows["train_length"].min()) if len(base_rows) else 0  # the base's, not a fine-tuning length
    settings = sorted({(str(o["target"]), _steps(o)) for o in extensions.values()}, key=lambda s: (s[1], s[0]))
    for target_text, steps in settings:
        members = {g: o for g, o in extensions.items() if str(o["target"]) == target_text and _steps(o) == steps}
        part = summary[summary["group"].isin(list(members))]
        tuning = "no fine-tuning" if steps == 0 else f"{steps} fine-tuning steps at the target"
        if steps and any(o.get("pose") for o in members.values()):
            tuning += " (+ PoSE: at the train length, positions skipping up to the target)"
        for length in sorted(part["length"].unique()):
            rows = {method_label(o): pooled_cell(summary, g, int(length)) for g, o in members.items()}
            rows = {m: r for m, r in rows.items() if r is not None and not math.isnan(r["accuracy"])}
            if not rows:
                continue
            order = sorted(rows, key=lambda m: -rows[m]["accuracy"])
            line = f"- target {target_text}, {tuning}, at {length}"
            line += f" ({int(length) / train_length:g}x the base's train length)" if train_length else ""
            cells = ", ".join(f"{m} {accuracy_text(rows[m])}" for m in order)
            if min(int(r["seeds"]) for r in rows.values()) < MIN_ORDERED_SEEDS:
                lines.append(f"{line}: {cells}; fewer than {MIN_ORDERED_SEEDS} seeds, so not ordered.")
                continue
            lines.append(f"{line}: {_descending(rows)} ({cells}){_yarn_passkey_verdict(rows)}.")
    for group in bases:
        base_cells = [
            f"{length}: {accuracy_text(pooled_cell(summary, group, int(length)))}"
            for length in sorted(summary[summary["group"] == group]["length"].unique())
        ]
        lines.append(f"- unextended base {group}: " + ", ".join(base_cells) + ".")
    return "\n".join(lines) + "\n"


def retrieval_vs_perplexity(summary, meta: dict, perplexity=None) -> str:
    """Perplexity is not retrieval: for each trained group in both tables, the perplexity class at
    each length (from the ratio's interval) beside the passkey accuracy there."""
    from poscli.evaluation.retrieval import EFFECTIVE_THRESHOLD

    lines = [
        "### Perplexity is not retrieval\n",
        "Each encoding trained with passkey examples, evaluated on the same perplexity protocol and the same passkey "
        "prompts at every length. Perplexity class from the ratio to the train length's perplexity (95% interval: "
        f"keeps <= {KEEPS}, blows up >= {BLOWS_UP}); retrieval class from the passkey interval against "
        f"{EFFECTIVE_THRESHOLD}: "
        "retrieves (the whole interval at or above), fails (the whole interval below), undecided.\n",
    ]
    if perplexity is None:
        return "\n".join(lines + ["(no perplexity table to set beside the passkey table)"]) + "\n"
    groups = [
        g for g, o in meta.items() if "method" not in o and g in set(summary["group"]) and g in set(perplexity["group"])
    ]
    for group in groups:
        train_length = int(summary[summary["group"] == group]["train_length"].iloc[0])
        cells = []
        for length in sorted(summary[summary["group"] == group]["length"].unique()):
            ppl = cell_at(perplexity, group, int(length))
            ratio = (
                "n/a"
                if ppl is None or math.isnan(ppl.get("ratio_low", float("nan")))
                else f"{ppl['ratio']:.2f}x [{ppl['ratio_low']:.2f}, {ppl['ratio_high']:.2f}], "
                f"{interval_class(ppl['ratio_low'], ppl['ratio_high'])}"
            )
            row = pooled_cell(summary, group, int(length))
            cells.append(
                f"{int(length) // train_length}x: perplexity {ratio}; passkey {accuracy_text(row)}, "
                f"{retrieval_class(row)}"
            )
        lines.append(f"- {group} ({summary[summary['group'] == group]['pe'].iloc[0]}): " + "; ".join(cells) + ".")
    contrast, unlearned = [], []
    for group in groups:
        lengths = sorted(int(n) for n in summary[summary["group"] == group]["length"].unique())
        train_length = int(summary[summary["group"] == group]["train_length"].iloc[0])
        if retrieval_class(pooled_cell(summary, group, train_length)) != "retrieves":
            unlearned.append(group)  # a model that cannot retrieve at its train length says nothing about length
            continue
        split = [n for n in lengths if n > train_length and _keeps_but_fails(perplexity, summary, group, n)]
        if split:
            at = " and ".join(", ".join(str(n) for n in split).rsplit(", ", 1))
            contrast.append(f"{group} keeps its perplexity at {at} but fails to retrieve there")
    lines += [
        "",
        ("Computed: " + "; ".join(contrast) + ": perplexity is not retrieval.")
        if contrast
        else "Computed: no encoding both keeps its perplexity and fails to retrieve beyond its train length.",
    ]
    if unlearned:
        lines.append(
            "Left out (they do not retrieve at their own train length, so their longer rows say nothing about "
            "length): " + ", ".join(unlearned) + "."
        )
    return "\n".join(lines) + "\n"


def retrieval_class(row) -> str:
    """A pooled passkey cell's class against the effective-retrieval line: the whole interval at or
    above it retrieves, the whole interval below it fails, anything else is undecided."""
    from poscli.evaluation.retrieval import EFFECTIVE_THRESHOLD

    if row is None or math.isnan(row["accuracy"]):
        return "n/a"
    if row["ci_low"] >= EFFECTIVE_THRESHOLD:
        return "retrieves"
    return "fails to retrieve" if row["ci_high"] < EFFECTIVE_THRESHOLD else "retrieval undecided"


def _keeps_but_fails(perplexity, summary, group: str, length: int) -> bool:
    """Whether a group's perplexity interval keeps at `length` while its passkey interval lies wholly
    below the effective-retrieval line there (both intervals must decide)."""
    ppl = cell_at(perplexity, group, length)
    if ppl is None or math.isnan(ppl.get("ratio_high", float("nan"))):
        return False
    keeps = interval_class(ppl["ratio_low"], ppl["ratio_high"]) == "keeps"
    return keeps and retrieval_class(pooled_cell(summary, group, length)) == "fails to retrieve"


PUBLISHED.update({"yarn2023-passkey": yarn2023_passkey, "retrieval-vs-perplexity": retrieval_vs_perplexity})
PUBLISHED["kazemnejad2023"] = kazemnejad2023  # poscli.study.published_tasks
PUBLISHED.update(  # poscli.study.published_recent: the claims of issue 33's encodings
    {"recent-perplexity": recent_perplexity, "recent-tasks": recent_tasks, "recent-retrieval": recent_retrieval}
)
PUBLISHED["method-orderings"] = method_orderings  # poscli.study.published_methods: issue 34's methods vs their rivals
