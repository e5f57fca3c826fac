"""What every published comparison reads from a summary over seeds: one group's cell at a length,
formatted with its interval, and the paired decisions over seeds corrected together (Holm, 1979).
``poscli.study.published`` (Press et al., Peng et al., YaRN's passkey table) and
``poscli.study.published_recent`` (issue 33's claims) both build on these."""

from __future__ import annotations

import math


def cell_at(summary, group: str, length: int):
    row = summary[(summary["group"] == group) & (summary["length"] == length)]
    return None if row.empty or row["seeds"].iloc[0] == 0 else row.iloc[0]


def format_cell(row) -> str:
    if row is None:
        return "n/a"
    if math.isnan(row.get("ci_low", float("nan"))):
        return f"{row['mean']:.3f}"
    return f"{row['mean']:.3f} [{row['ci_low']:.3f}, {row['ci_high']:.3f}]"


class Decisions:
    """The paired decisions of one published file, corrected together (Holm, 1979).

    Each decision compares two groups evaluated on the same spans, run against run in seed order:
    the per-seed log perplexity ratio is tested with a paired t-test (``stats.paired_seed_test``).
    ``add`` collects a test and returns its index; ``finish`` adjusts every p-value at once; only
    then are ``symbol`` and ``describe`` read, so the first decision knows how many there were."""

    def __init__(self):
        self.tests: list[tuple[float, float, float, float]] = []
        self.adjusted: list[float] | None = None

    def add(self, log_ratios) -> int | None:
        from poscli.evaluation.stats import paired_seed_test

        if log_ratios is None or len(log_ratios) < 2:
            return None
        self.tests.append(paired_seed_test(log_ratios))
        return len(self.tests) - 1

    def finish(self) -> None:
        from poscli.evaluation.stats import holm

        self.adjusted = holm([test[3] for test in self.tests])

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

        return (
            "Decisions (`<`, `>`, `≈`, keeps / uses): paired t-test over seeds of the log perplexity ratio (the same "
            "spans, "
            f"seed against seed), Holm's correction across the {len(self.tests)} decisions of this file (family-wise "
            f"{ALPHA:.0%}), minimum effect {MIN_EFFECT:.0%} of perplexity: a smaller or uncorrected-only difference is "
            "not claimed (`≈`: tied, or too few seeds to decide). "
            "Ratios are geometric means over seeds with their 95% t interval."
        )


def seed_log_ratios(summary_a, group_a: str, summary_b, group_b: str, length: int):
    """Per-seed log perplexity ratio of group a over group b at ``length`` (runs paired in name
    order, i.e. by seed), or None where the two were not scored on the same spans with as many runs."""
    import numpy as np

    a = summary_a.attrs.get("run_losses", {}).get((group_a, length))
    b = summary_b.attrs.get("run_losses", {}).get((group_b, length))
    if a is None or b is None or a[0] != b[0] or len(a[1]) != len(b[1]):
        return None
    return np.array(a[1]) - np.array(b[1])


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
