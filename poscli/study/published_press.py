"""Press et al. (ICLR 2022), Train Short, Test Long: the paper's WikiText-103 perplexities beside this
study's, extrapolation classes, the truncation null, and the order of the encodings."""

from __future__ import annotations

import math
from typing import Any

from poscli.evaluation.stats import MIN_EFFECT
from poscli.study.paired import (
    BLOWS_UP,
    KEEPS,
    NULL_WORDS,
    Decisions,
    cell_at,
    class_verdict,
    extrapolation_class,
    interval_class,
    null_summary,
    null_verdict,
    ranked,
    seed_log_ratios,
)

# Press, Smith and Lewis (ICLR 2022), WikiText-103 validation perplexity, 16-layer d=1024 model
# trained at L = 512 (T5 bias ran out of memory at 15512).


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
