"""What every published comparison reads from a summary over seeds: one group's cell at a length,
formatted with its interval, and the paired decisions over seeds corrected together (Holm, 1979).
``poscli.study.published`` (Press et al., Peng et al., YaRN's passkey table) and
``poscli.study.published_recent`` (issue 33's claims) both build on these."""

from __future__ import annotations

import contextvars
import math
from collections.abc import Callable

from poscli.evaluation.tables import format_estimate


def cell_at(summary, group: str, length: int):
    row = summary[(summary["group"] == group) & (summary["length"] == length)]
    return None if row.empty or row["seeds"].iloc[0] == 0 else row.iloc[0]


def format_cell(row) -> str:
    if row is None:
        return "n/a"
    return format_estimate(row["mean"], row.get("ci_low", math.nan), row.get("ci_high", math.nan))


class Decisions:
    """The paired decisions of one published comparison, corrected together (Holm, 1979).

    Each decision compares two groups evaluated on the same spans, run against run in seed order:
    the per-seed log perplexity ratio is tested with a paired t-test (``stats.paired_seed_test``).
    ``add`` collects a test and returns its index; ``finish`` adjusts every p-value at once; only
    then are ``symbol`` and ``describe`` read, so the first decision knows how many there were.
    Inside ``corrected_together`` the family is the whole published file: every comparison in it."""

    def __init__(self):
        self.tests: list[tuple[float, float, float, float]] = []
        self.adjusted: list[float] | None = None
        self.family: str = "this comparison"
        self.family_size = 0

    def add(self, log_ratios) -> int | None:
        from poscli.evaluation.stats import paired_seed_test

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
        return f"{ratio:.3f} [{low:.3f}, {high:.3f}], Holm p {self.adjusted[index]:.3g}"

    def footer(self) -> str:
        from poscli.evaluation.stats import ALPHA, MIN_EFFECT

        here = f"; {len(self.tests)} of them here" if self.family_size != len(self.tests) else ""
        return (
            "Decisions (`<`, `>`, `≈`, keeps / uses): paired t-test over seeds of the log perplexity ratio (the same "
            f"spans, seed against seed), Holm's correction across the {self.family_size} decisions of {self.family} "
            f"(family-wise {ALPHA:.0%}{here}), minimum effect {MIN_EFFECT:.0%} of "
            "perplexity: a smaller or uncorrected-only difference is "
            "not claimed (`≈`: tied, or too few seeds to decide). "
            "Ratios are geometric means over seeds with their 95% t interval."
        )


class _FilePool:
    """Every p-value of one published file: gathered on a first writing of its comparisons, then
    adjusted over all of them and handed back, comparison by comparison in the same order, on the
    second."""

    def __init__(self):
        self.gathered: list[float] = []
        self.adjusted: list[float] | None = None
        self.handed = 0

    def adjust(self, p_values: list[float]) -> tuple[list[float], int]:
        from poscli.evaluation.stats import holm

        if self.adjusted is None:
            self.gathered += p_values
            return holm(p_values), len(p_values)  # provisional: this writing is thrown away
        chunk = self.adjusted[self.handed : self.handed + len(p_values)]
        if len(chunk) != len(p_values):
            raise RuntimeError("a published comparison made other tests on its second writing")
        self.handed += len(p_values)
        return chunk, len(self.adjusted)

    def settle(self) -> None:
        from poscli.evaluation.stats import holm

        self.adjusted = holm(self.gathered)


_FILE_POOL: contextvars.ContextVar[_FilePool | None] = contextvars.ContextVar("file_pool", default=None)


def corrected_together(writers: list[Callable[[], str]]) -> list[str]:
    """The texts of one published file's comparisons, with Holm's correction across every decision
    in the file (not each comparison's own): each writer runs once to gather its tests, then again
    with its p-values adjusted over the file's. Writers must be deterministic (they are: functions
    of a summary)."""
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


def seed_log_ratios(summary_a, group_a: str, summary_b, group_b: str, length: int):
    """Per-seed log perplexity ratio of group a over group b at ``length``, over the seeds both
    groups have (runs paired by ``seeds.seed_keys``: FoX's seeds 0-1 against RoPE's 0-1 when RoPE
    has 0-4), or None where the two were not scored on the same spans or share no seed. Groups whose
    runs no wildcard names pair in run-name order when they hold as many runs."""
    import numpy as np

    a = summary_a.attrs.get("run_losses", {}).get((group_a, length))
    b = summary_b.attrs.get("run_losses", {}).get((group_b, length))
    if a is None or b is None or a[0] != b[0]:
        return None
    losses_a, losses_b = dict(zip(a[2], a[1])), dict(zip(b[2], b[1]))
    shared = [key for key in losses_a if key in losses_b]
    if shared:
        return np.array([losses_a[key] - losses_b[key] for key in shared])
    return np.array(a[1]) - np.array(b[1]) if len(a[1]) == len(b[1]) else None


def accuracy_text(row) -> str:
    return "n/a" if row is None else f"{row['accuracy']:.2f} [{row['ci_low']:.2f}, {row['ci_high']:.2f}]"


def pooled_cell(summary, group: str, length: int):
    from poscli.evaluation.retrieval import ALL_DEPTHS

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
