"""Published numbers (Press et al., 2022; Peng et al., 2023) set beside a recipe's results.

Each comparison takes a recipe's summary over seeds (``poscli.evaluation.seeds.seed_summary``: one row per
group of runs and length, with mean/sd/min/max perplexity) and ``meta`` (group -> the options
that made it) and returns Markdown: the paper's table, poscli's numbers in the same shape, and
sentences, computed from the numbers, saying where the orderings agree and where they do not.
Nothing here is written by hand about a particular result: rerunning the recipe rewrites it.
"""

from __future__ import annotations

import math

from poscli.study.paired import (
    CONTINUE,
    KEEPS,
    Decisions,
    cell_at,
    class_verdict,
    extension_steps,
    format_cell,
    interval_class,
    method_kind,
    method_label,
    seed_log_ratios,
)
from poscli.study.published_methods import method_orderings
from poscli.study.published_press import press2022
from poscli.study.published_recent import recent_perplexity, recent_retrieval, recent_tasks
from poscli.study.published_retrieval import retrieval_vs_perplexity, yarn2023_passkey
from poscli.study.published_tasks import kazemnejad2023

# Peng et al. (2023), YaRN's s = 2 ablation on Llama-2-7B, Proof-pile perplexity (target 8k).
PENG_2023_S2 = {  # method -> {length: ppl}
    "pi": {2048: 3.92, 4096: 3.51, 6144: 3.51, 8192: 3.34, 10240: 8.07},
    "ntk": {2048: 4.20, 4096: 3.75, 6144: 3.74, 8192: 3.59, 10240: 6.24},
    "yarn": {2048: 3.92, 4096: 3.51, 6144: 3.51, 8192: 3.36, 10240: 6.05},
}
PENG_NAMES = {"pi": "PI (fine-tuned)", "ntk": "NTK (base 20k)", "yarn": "YaRN"}


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


# The published comparisons a recipe's [[compare]] names (published = "NAME"), each a writer of text.
PUBLISHED = {
    "press2022": press2022,  # poscli.study.published_press
    "peng2023": peng2023,
    "beyond-yarn": beyond_yarn,
    "yarn2023-passkey": yarn2023_passkey,  # poscli.study.published_retrieval
    "retrieval-vs-perplexity": retrieval_vs_perplexity,
    "kazemnejad2023": kazemnejad2023,  # poscli.study.published_tasks
    "recent-perplexity": recent_perplexity,  # poscli.study.published_recent: the claims of issue 33's encodings
    "recent-tasks": recent_tasks,
    "recent-retrieval": recent_retrieval,
    "method-orderings": method_orderings,  # poscli.study.published_methods: issue 34's methods vs their rivals
}
