"""The claims of the 2024-2026 encodings' papers (issue 33) beside what poscli measures.

None of these papers publishes a number a model of poscli's size could be held to: each states
an ordering against RoPE in words, at its own scale. So each claim is checked as an ordering, by
the same paired tests as the rest of the study, and said to hold (the test supports the claimed
order), not to hold (it supports the opposite) or to be undecided (it supports neither):

- Lin et al. (2025), the Forgetting Transformer: better length extrapolation than a RoPE
  Transformer (its loss keeps falling, or stays flat, past the training length) -> lower perplexity
  than RoPE beyond the train length, ``recent_perplexity``.
- Tan et al. (2025), stick-breaking attention: better length extrapolation than softmax attention
  with RoPE -> the same test.
- Golovneva et al. (2024), CoPE: solves selective copy, counting and flip-flop where RoPE fails,
  out of distribution too -> higher exact match than RoPE beyond the training sizes on selective
  copy, counting (``--task counting``, a format of poscli's) and flip-flop, ``recent_tasks``.
- Yang et al. (2025), RNoPE-SWA (sliding-window RoPE layers interleaved with global NoPE layers,
  ``--pe hybrid``): retrieval beyond the training length where RoPE fails -> passkey accuracy above
  RoPE's beyond the train length, ``recent_retrieval``.

Nothing here is written by hand about a particular result: rerunning the recipe rewrites it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from poscli.study.paired import Decisions, accuracy_text, cell_at, format_cell, pooled_cell, seed_log_ratios


@dataclass(frozen=True)
class Claim:
    pe: str  # the encoding the paper proposes
    citation: str
    claim: str  # what the paper says, in its words' sense
    tasks: tuple[str, ...] = ()  # for a task claim: the tasks it names


BASELINE = "rope"  # every claim here is against RoPE

EXTRAPOLATION_CLAIMS = (
    Claim("fox", "Lin et al., 2025", "FoX extrapolates in length better than a RoPE Transformer"),
    Claim("stick-breaking", "Tan et al., 2025", "stick-breaking attention extrapolates better than softmax with RoPE"),
)
TASK_CLAIMS = (
    Claim(
        "cope",
        "Golovneva et al., 2024",
        "CoPE solves selective copy, counting and flip-flop where RoPE fails, out of distribution too",
        ("selective-copy", "counting", "flip-flop"),
    ),
)
RETRIEVAL_CLAIMS = (
    Claim(
        "hybrid",
        "Yang et al., 2025",
        "RNoPE-SWA (sliding-window RoPE layers with global NoPE layers) retrieves beyond the training length, "
        "where RoPE does not",
    ),
)

HOLDS = {">": "in the claimed direction", "<": "against the claimed direction", "≈": "not separated"}  # screen words


def _groups_by_pe(summary, meta: dict) -> dict[str, str]:
    """The first group of each encoding, leaving out extensions, snapshots and randomized positions
    (none of which a claim is about)."""
    from poscli.model.runs import SNAPSHOT_MARK

    found: dict[str, str] = {}
    for group, pe in zip(summary["group"], summary["pe"], strict=True):
        options = meta.get(group) or {}
        if SNAPSHOT_MARK in group or "method" in options or options.get("random_positions"):
            continue
        found.setdefault(pe, group)
    return found


def _missing(claims, present: dict[str, str]) -> list[str]:
    absent = [c.pe for c in claims if c.pe not in present] + ([BASELINE] if BASELINE not in present else [])
    return [f"Not compared here (no run in this table): {', '.join(dict.fromkeys(absent))}."] if absent else []


def recent_perplexity(summary, meta: dict) -> str:
    """FoX's and stick-breaking's extrapolation claims on a perplexity table: each against RoPE at
    every length beyond the train length, the per-seed log perplexity ratio on the same spans tested
    with Welch's t-test (two models), Benjamini-Hochberg over this file's screen (``paired.Decisions``)."""

    present = _groups_by_pe(summary, meta)
    claims = [c for c in EXTRAPOLATION_CLAIMS if c.pe in present and BASELINE in present]
    decisions = Decisions()
    tests, pairs = {}, {}
    for claim in claims:
        group, rope = present[claim.pe], present[BASELINE]
        train_length = int(summary[summary["group"] == group]["train_length"].iloc[0])
        for length in sorted(summary[summary["group"] == group]["length"].unique()):
            if length > train_length:
                losses = seed_log_ratios(summary, group, summary, rope, length, paired=False)  # two models
                tests[(claim.pe, int(length))] = decisions.add(losses)
                pairs[(claim.pe, int(length))] = (0, 0) if losses is None else (len(losses.a), len(losses.b))
    decisions.finish()
    lines = [
        "### The 2024-2026 encodings' extrapolation claims\n",
        "Each claim is an ordering against RoPE, checked at every length beyond the train length: perplexity "
        "(mean over seeds, 95% interval) of each, and the ratio of the two (geometric mean over seeds) with Welch's "
        "test over their seeds (two models: no seed pairs). Exploratory: the claim's verdict, if the recipe declares "
        "it, is under Declared claims.\n",
    ]
    for claim in claims:
        group, rope = present[claim.pe], present[BASELINE]
        lines.append(f"- **{claim.pe}** ({claim.citation}): published, {claim.claim}.")
        for (pe, length), index in tests.items():
            if pe != claim.pe:
                continue
            lines.append(
                f"  - {length}: {claim.pe} {format_cell(cell_at(summary, group, length))}, rope "
                f"{format_cell(cell_at(summary, rope, length))}; ratio ({_seeds_of(pairs[(pe, length)])}) "
                f"{decisions.describe(index)}: "
                f"{HOLDS[_lower_is_better(decisions.symbol(index))]}."
            )
    lines += _missing(EXTRAPOLATION_CLAIMS, present)
    return "\n".join([*lines, "", decisions.footer()]) + "\n"


def _seeds_of(counts: tuple[int, int]) -> str:
    return f"{counts[0]} and {counts[1]} seeds"


def _lower_is_better(symbol: str) -> str:
    """A perplexity decision ("<": a lower) as a claim's direction (">": a better)."""
    return {"<": ">", ">": "<"}.get(symbol, symbol)


def recent_tasks(summary, meta: dict) -> str:
    """CoPE's claim on a length-generalization table: for each task the claim names that the table
    holds, CoPE against RoPE beyond the training sizes up to 2x and from 2x to 4x, the paired,
    Holm-corrected decision of ``poscli.evaluation.generalization.decisions`` (seeds that mastered
    the task only)."""
    from poscli.evaluation.generalization import FACTORS, band_label, band_means, decisions
    from poscli.study.published_tasks import _pair_row

    present = _groups_by_pe(summary, meta)
    found = decisions(summary)
    lines = [
        "### CoPE's claim (Golovneva et al., 2024)\n",
        "Exact match beyond the largest training size N (each seed's mean over the band, then the mean over the "
        "seeds that mastered the task, 95% interval); the difference CoPE minus RoPE by Welch's test over their "
        "seeds, Benjamini-Hochberg with every other pair of the task and band (exploratory; the declared claim's "
        "verdict is under Declared claims).\n",
    ]
    for claim in TASK_CLAIMS:
        if claim.pe not in present or BASELINE not in present:
            continue
        lines.append(f"- **{claim.pe}**: published, {claim.claim}.")
        tasks = [t for t in claim.tasks if t in set(summary["task"])]
        for task in tasks:
            part = summary[summary["task"] == task]
            largest = int(part["largest"].iloc[0])
            here = _groups_by_pe(part, meta)  # this task's groups: each task's runs are groups of their own
            for factor in FACTORS:
                means = band_means(summary, task, factor)
                mine = found[(found["task"] == task) & (found["factor"] == factor)]
                row = _pair_row(mine, here.get(claim.pe), here.get(BASELINE))
                cells = ", ".join(
                    f"{pe} {_band_mean(means.get(here[pe]))}" for pe in (claim.pe, BASELINE) if pe in here
                )
                said = (
                    "not comparable (fewer than two seeds mastered the task in both)"
                    if row is None
                    else f"difference {row['difference']:+.2f} [{row['low']:+.2f}, {row['high']:+.2f}], "
                    f"q {row['adjusted']:.3g}: {HOLDS[row['verdict']]}"
                )
                lines.append(f"  - {task}, sizes {band_label(largest, factor)}: {cells}; {said}.")
        untested = [t for t in claim.tasks if t not in tasks]
        if untested:
            lines.append(f"  - not in this table: {', '.join(untested)}.")
    lines += _missing(TASK_CLAIMS, present)
    return "\n".join(lines) + "\n"


def _band_mean(mean) -> str:
    if mean is None or math.isnan(mean[0]):
        return "n/a (no seed mastered)"
    value, low, high, seeds = mean
    return f"{value:.2f}" if seeds < 2 else f"{value:.2f} [{low:.2f}, {high:.2f}]"


def recent_retrieval(summary, meta: dict, perplexity=None) -> str:
    """RNoPE-SWA's retrieval claim on a passkey table: the hybrid's passkey accuracy beside RoPE's at
    every length beyond the train length (the same prompts for both, every depth pooled, 95%
    intervals of ``passkey_tables.accuracy_interval``: seeds resampled, each seed's accuracy drawn from
    its Jeffreys posterior; with one seed about the Wilson interval). The claim holds at a length
    where the hybrid's interval lies wholly above RoPE's, does not hold where RoPE's lies wholly
    above, and is undecided where they overlap."""

    present = _groups_by_pe(summary, meta)
    lines = [
        "### RNoPE-SWA's retrieval claim (Yang et al., 2025)\n",
        "Passkey accuracy over every depth (the same prompts for each model; 95% intervals with seeds resampled and "
        "each seed's accuracy drawn from its Jeffreys posterior) at each length beyond the train length. The claim "
        "holds where the hybrid's interval lies wholly above RoPE's.\n",
    ]
    for claim in RETRIEVAL_CLAIMS:
        if claim.pe not in present or BASELINE not in present:
            continue
        group, rope = present[claim.pe], present[BASELINE]
        lines.append(f"- **{claim.pe}** ({group}): published, {claim.claim}.")
        train_length = int(summary[summary["group"] == group]["train_length"].iloc[0])
        for length in sorted(summary[summary["group"] == group]["length"].unique()):
            if length <= train_length:
                continue
            mine, theirs = pooled_cell(summary, group, int(length)), pooled_cell(summary, rope, int(length))
            if mine is None or theirs is None:
                continue
            symbol = ">" if mine["ci_low"] > theirs["ci_high"] else "<" if mine["ci_high"] < theirs["ci_low"] else "≈"
            lines.append(
                f"  - {int(length)} ({int(length) // train_length}x): {claim.pe} {accuracy_text(mine)}, rope "
                f"{accuracy_text(theirs)}: {HOLDS[symbol]}."
            )
    lines += _missing(RETRIEVAL_CLAIMS, present)
    return "\n".join(lines) + "\n"
