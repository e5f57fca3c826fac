"""Retrieval beside the papers: YaRN's passkey accuracies (Peng et al., 2023), and whether a model
that keeps its perplexity also retrieves."""

from __future__ import annotations

import math
from typing import Any

from poscli.study.paired import (
    BLOWS_UP,
    KEEPS,
    accuracy_text,
    cell_at,
    extension_steps,
    interval_class,
    method_label,
    pooled_cell,
    ranked,
)

# Peng et al. (2023), YaRN's s = 2 ablation on Llama-2-7B, Proof-pile perplexity (target 8k).


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
    settings = sorted({(str(o["target"]), extension_steps(o)) for o in extensions.values()}, key=lambda s: (s[1], s[0]))
    for target_text, steps in settings:
        members = {
            g: o for g, o in extensions.items() if str(o["target"]) == target_text and extension_steps(o) == steps
        }
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
