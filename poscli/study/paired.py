"""What every published comparison reads from a summary over seeds: one group's cell at a length,
formatted with its interval, and the exploratory screen's tests over seeds, corrected together
over the file by Benjamini and Hochberg (1995). A declared claim is decided elsewhere, in its own
family (``poscli.study.claims``); nothing here is a verdict.
``poscli.study.published`` (Press et al., Peng et al., YaRN's passkey table) and
``poscli.study.published_recent`` (issue 33's claims) both build on these."""

from __future__ import annotations

import contextvars
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from poscli.evaluation.tables import format_estimate


def cell_at(summary, group: str, length: int):
    row = summary[(summary["group"] == group) & (summary["length"] == length)]
    return None if row.empty or row["seeds"].iloc[0] == 0 else row.iloc[0]


def format_cell(row) -> str:
    if row is None:
        return "n/a"
    return format_estimate(row["mean"], row.get("ci_low", math.nan), row.get("ci_high", math.nan))


class Decisions:
    """The screen's tests of one published comparison, corrected together.

    Each test compares two groups evaluated on the same spans: a model against itself or two
    extensions of one base by the paired t-test of the per-seed log perplexity ratio
    (``stats.paired_seed_test``), two different models by Welch's t-test on their per-seed mean
    losses (``seed_log_ratios(..., paired=False)``). ``add`` collects a test and returns its
    index; ``finish`` adjusts every p-value at once (Holm alone; inside ``corrected_together``,
    Benjamini-Hochberg over the whole file's screen); only then are ``symbol`` and ``describe``
    read, so the first test knows how many there were."""

    def __init__(self) -> None:
        self.tests: list[tuple[float, float, float, float]] = []
        self.adjusted: list[float] = []
        self.family: str = "this comparison"
        self.family_size = 0

    def add(self, log_ratios) -> int | None:
        """A test of paired per-seed log ratios (an array), or of two models' unpaired per-seed mean
        losses (an ``Unpaired``)."""
        from poscli.evaluation.stats import paired_seed_test, welch_seed_test

        if isinstance(log_ratios, Unpaired):
            if min(len(log_ratios.a), len(log_ratios.b)) < 2:
                return None
            self.tests.append(welch_seed_test(log_ratios.a, log_ratios.b))
            return len(self.tests) - 1
        if log_ratios is None or len(log_ratios) < 2:
            return None
        self.tests.append(paired_seed_test(log_ratios))
        return len(self.tests) - 1

    def finish(self) -> None:
        from poscli.evaluation.stats import holm

        p_values = [test[3] for test in self.tests]
        pool = _FILE_POOL.get()
        if pool is None:
            self.adjusted, self.family_size = holm(p_values), len(p_values)
        else:
            self.adjusted, self.family_size = pool.adjust(p_values)
            self.family = "this file"

    def symbol(self, index: int | None) -> str:
        from poscli.evaluation.stats import decide

        return "≈" if index is None else decide(self.tests[index][0], self.adjusted[index])

    def no_worse(self, index: int | None) -> bool:
        """Whether the test shows A no worse than B: the upper end of the ratio's 95% interval under
        1 + the minimum effect (a non-inferiority reading; an untested pair shows nothing)."""
        from poscli.evaluation.stats import MIN_EFFECT

        return index is not None and self.tests[index][2] < 1 + MIN_EFFECT

    def describe(self, index: int | None) -> str:
        if index is None:
            return "not tested (fewer than 2 seeds scored alike)"
        ratio, low, high, _ = self.tests[index]
        word = "q" if self.family == "this file" else "Holm p"
        return f"{ratio:.3f} [{low:.3f}, {high:.3f}], {word} {self.adjusted[index]:.3g}"

    def footer(self) -> str:
        from poscli.evaluation.stats import ALPHA, MIN_EFFECT

        here = f"; {len(self.tests)} of them here" if self.family_size != len(self.tests) else ""
        correction = (
            f"Benjamini-Hochberg over the {self.family_size} tests of {self.family}'s screen (false discovery rate "
            f"{ALPHA:.0%}{here}; q: the adjusted p)"
            if self.family == "this file"
            else f"Holm's correction across these {self.family_size} tests (family-wise {ALPHA:.0%})"
        )
        return (
            "Screen (`<`, `>`, `≈`, keeps / uses; exploratory, not verdicts): a model against itself or two extensions "
            "of one base by the paired t-test over seeds of the log perplexity ratio (the same spans), two different "
            f"models by Welch's t-test on their per-seed mean losses; {correction}; minimum effect {MIN_EFFECT:.0%} of "
            "perplexity (`≈`: not separated, or too few seeds). Ratios are geometric means over seeds with their 95% "
            "t interval."
        )


class _FilePool:
    """Every p-value of one published file: gathered on a first writing of its comparisons, then
    adjusted over all of them and handed back, comparison by comparison in the same order, on the
    second."""

    def __init__(self) -> None:
        self.gathered: list[float] = []
        self.adjusted: list[float] | None = None
        self.handed = 0

    def adjust(self, p_values: list[float]) -> tuple[list[float], int]:
        from poscli.evaluation.stats import benjamini_hochberg

        if self.adjusted is None:
            self.gathered += p_values
            return benjamini_hochberg(p_values), len(p_values)  # provisional: this writing is thrown away
        chunk = self.adjusted[self.handed : self.handed + len(p_values)]
        if len(chunk) != len(p_values):
            raise RuntimeError("a published comparison made other tests on its second writing")
        self.handed += len(p_values)
        return chunk, len(self.adjusted)

    def settle(self) -> None:
        from poscli.evaluation.stats import benjamini_hochberg

        self.adjusted = benjamini_hochberg(self.gathered)


_FILE_POOL: contextvars.ContextVar[_FilePool | None] = contextvars.ContextVar("file_pool", default=None)


def corrected_together(writers: list[Callable[[], str]]) -> list[str]:
    """The texts of one published file's comparisons, the exploratory screen, with Benjamini and
    Hochberg's correction across every test in it: each writer runs once to gather its tests, then
    again with its p-values adjusted over the file's. Writers must be deterministic (they are:
    functions of a summary)."""
    pool = _FilePool()
    token = _FILE_POOL.set(pool)
    try:
        for write in writers:
            write()
        pool.settle()
        texts = [write() for write in writers]
    finally:
        _FILE_POOL.reset(token)
    if pool.handed != len(pool.gathered):
        raise RuntimeError("a published comparison made fewer tests on its second writing")
    return texts


@dataclass(frozen=True)
class Unpaired:
    """Two different models' per-seed mean losses on the same spans: nothing pairs their seeds."""

    a: np.ndarray
    b: np.ndarray


def seed_log_ratios(summary_a, group_a: str, summary_b, group_b: str, length: int, paired: bool = True):
    """Per-seed log perplexity ratio of group a over group b at ``length``, over the seeds both
    groups have (runs paired by ``seeds.seed_keys``: an extension's seed 0 against its base's or
    another extension's of the same base), or None where the two were not scored on the same spans
    or share no seed. Groups whose runs no wildcard names pair in run-name order when they hold as
    many runs. ``paired=False`` (two different models, whose seeds pair nothing): their per-seed
    mean losses, ``Unpaired``, for Welch's test."""
    a = summary_a.attrs.get("run_losses", {}).get((group_a, length))
    b = summary_b.attrs.get("run_losses", {}).get((group_b, length))
    if a is None or b is None or a[0] != b[0]:
        return None
    if not paired:
        return Unpaired(np.array(a[1], dtype=float), np.array(b[1], dtype=float))
    losses_a, losses_b = dict(zip(a[2], a[1])), dict(zip(b[2], b[1]))
    shared = [key for key in losses_a if key in losses_b]
    if shared:
        return np.array([losses_a[key] - losses_b[key] for key in shared])
    return np.array(a[1]) - np.array(b[1]) if len(a[1]) == len(b[1]) else None


def accuracy_text(row) -> str:
    return "n/a" if row is None else f"{row['accuracy']:.2f} [{row['ci_low']:.2f}, {row['ci_high']:.2f}]"


def pooled_cell(summary, group: str, length: int):
    from poscli.evaluation.passkey_tables import ALL_DEPTHS

    row = summary[(summary["group"] == group) & (summary["length"] == length) & (summary["depth"] == ALL_DEPTHS)]
    return None if row.empty else row.iloc[0]


def extension_steps(options: dict) -> int:
    """Fine-tuning steps of an extension as the recipe asked (a method that never trains: 0)."""
    from poscli.extension import methods

    return 0 if methods.get(options["method"]).training == "never" else int(options.get("steps", 400))


CONTINUE = "continue"  # the continued-training control of poscli.training.extend: no rescaling, the same fine-tuning


def method_label(options: dict) -> str:
    """An extension's method as tables name it: yarn, "yarn + PoSE" (or "+ CREAM") when fine-tuned
    with those positions, "yarn tuned" with options chosen by ``poscli tune`` (``options_from``), so
    a tuned group never stands in for the same method at its defaults, and a continued-training
    control by where it trained, continue@1k (the target) or continue@128, so neither stands in for
    the other. LongRoPE with factors searched by the needle is "longrope2", and "+ mixed" when its
    fine-tuning mixes in windows of the train length (``mixed_short``; Shang et al., 2025)."""
    control = f"@{options.get('finetune_length', 'target')}" if options["method"] == CONTINUE else ""
    return method_kind(options) + (" tuned" if options.get("options_from") else "") + control


def method_kind(options: dict) -> str:
    """``method_label`` without "tuned" and without a control's "@LENGTH": what a claim names."""
    method = options["method"]
    if method == "longrope" and options.get("search_score") == "needle":
        method = "longrope2"
    positions = " + PoSE" if options.get("pose") else " + CREAM" if options.get("cream") else ""
    return method + positions + (" + mixed" if options.get("mixed_short") else "")


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
