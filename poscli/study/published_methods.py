"""The claims of issue 34's extension methods beside what poscli measures, as orderings.

Each paper states its method's advantage over a rival in words, at its own scale; each is checked
here on an extension table as an ordering against that rival at the method's target, by the same
paired tests as the rest of the study (the per-seed log perplexity ratio on the same spans, Holm's
correction over this file), and said to hold, not to hold, or to be undecided:

- Wang et al. (2024), Resonance RoPE: Resonance YaRN has a lower perplexity than YaRN out of
  distribution (the same fine-tuning, or none, for both).
- Wang et al. (2024), Resonance RoPE alone: a lower perplexity than RoPE out of distribution after
  the same fine-tuning (its rival: the continued-training control at the target).
- Wu et al. (2024), CREAM: a lower perplexity than PoSE at the target after the same fine-tuning
  at the original window.
- Shang et al. (2025), LongRoPE2: factors searched by needle-driven perplexity extend better than
  factors searched by perplexity (LongRoPE's search), and mixed context windows in the fine-tuning
  keep the perplexity at the original length that fine-tuning at the target alone loses.
- Gelberg et al. (2025), DroPE: zero-shot extension better than RoPE scaling (YaRN without
  training); and, a control the paper does not run, better than the same recalibration steps with
  RoPE kept (``continue`` at the train length), so the gain is the dropping, not the extra training.
- poscli's own: a method tuned by ``poscli tune`` on the training split beats its defaults on the
  held-out text (the evaluation's spans, which the tuning never saw).

STRING's claim (a longer effective context within the train length) and Ms-PoE's (retrieval from
the middle) are about other measurements; the flat-perplexity claims of DCA and LM-Infinite are in
``published.CLAIMS`` with the other training-free methods. Rerunning the recipe rewrites all of it.
"""

from __future__ import annotations

from dataclasses import dataclass

from poscli.study.paired import Decisions, cell_at, extension_steps, format_cell, method_kind, seed_log_ratios


@dataclass(frozen=True)
class Ordering:
    method: str  # the group's method as claims name it (``paired.method_kind``: "yarn + CREAM", "longrope2")
    rival: str  # the rival's, likewise
    citation: str
    claim: str
    rival_steps: int | None = None  # the rival's fine-tuning steps (None: the method's own)
    rival_at_train_length: bool = False  # a continue rival fine-tuned at the base's own length, not the target's
    at_train_length: bool = False  # compared at the table's shortest length, the base's train length, not the target


ORDERINGS = (
    Ordering(
        "resonance-yarn",
        "yarn",
        "Wang et al., 2024",
        "Resonance YaRN has a lower perplexity than YaRN past the train length",
    ),
    Ordering(
        "resonance",
        "continue",
        "Wang et al., 2024",
        "Resonance RoPE has a lower perplexity than RoPE past the train length after the same fine-tuning",
    ),
    Ordering("yarn + CREAM", "yarn + PoSE", "Wu et al., 2024", "CREAM has a lower perplexity than PoSE at the target"),
    Ordering(
        "longrope2",
        "longrope",
        "Shang et al., 2025",
        "factors searched by needle-driven perplexity extend better than factors searched by perplexity",
    ),
    Ordering(
        "longrope2 + mixed",
        "longrope2",
        "Shang et al., 2025",
        "mixed context windows keep the perplexity at the original length that fine-tuning at the target loses",
        at_train_length=True,
    ),
    Ordering("drope", "yarn", "Gelberg et al., 2025", "DroPE extends better than RoPE scaling (YaRN)", rival_steps=0),
    Ordering(
        "drope",
        "continue",
        "a control the paper does not run",
        "DroPE beats the same recalibration steps with RoPE kept",
        rival_at_train_length=True,
    ),
)
HOLDS = {"<": "in the claimed direction", ">": "against the claimed direction", "≈": "not separated"}  # screen words


def _extensions(summary, meta: dict) -> list[tuple[str, dict]]:
    present = set(summary["group"])
    return [(group, options) for group, options in meta.items() if "method" in options and group in present]


def _plain(options: dict) -> bool:
    """An extension at its defaults with plain fine-tuning positions (not tuned, PoSE or CREAM)."""
    return not (options.get("options_from") or options.get("pose") or options.get("cream"))


def _rival(extensions, ordering: Ordering, options: dict) -> str | None:
    """The rival group at the same target, untuned: the same steps (or the ordering's), fine-tuned
    at the target (a continue rival at the train length where the ordering says so)."""
    steps = extension_steps(options) if ordering.rival_steps is None else ordering.rival_steps
    for group, theirs in extensions:
        same_target = theirs.get("target") == options.get("target")
        if method_kind(theirs) != ordering.rival or not same_target or theirs.get("options_from"):
            continue
        at_target = str(theirs.get("finetune_length", theirs.get("target"))) == str(options.get("target"))
        if extension_steps(theirs) == steps and ordering.rival_at_train_length != at_target:
            return group
    return None


def _defaults_of(extensions, options: dict) -> str | None:
    """The same method at the same target and steps, at its defaults: what a tuned group is compared with."""
    for group, theirs in extensions:
        same = theirs["method"] == options["method"] and theirs.get("target") == options.get("target")
        if same and _plain(theirs) and extension_steps(theirs) == extension_steps(options):
            return group
    return None


def _cells(summary, group: str, rival: str, target: int) -> str:
    mine, theirs = cell_at(summary, group, target), cell_at(summary, rival, target)
    return f"At {target}: {group} {format_cell(mine)}, {rival} {format_cell(theirs)}"


def method_orderings(summary, meta: dict) -> str:
    """Every issue-34 ordering claim on a perplexity table of extensions, and every tuned method
    against its defaults: the two groups' perplexity at the target (mean over seeds, 95% interval)
    and their per-seed ratio with its paired test, Holm-corrected over this file."""
    extensions = _extensions(summary, meta)
    decisions = Decisions()
    rows = []  # (text before the decision, decision index)
    for ordering in ORDERINGS:
        for group, options in extensions:
            if method_kind(options) != ordering.method or options.get("options_from"):
                continue
            rival = _rival(extensions, ordering, options)
            if rival is None:
                continue
            lengths = summary[summary["group"] == group]["length"]  # from the base's train length to the target
            target = int(lengths.min() if ordering.at_train_length else lengths.max())
            index = decisions.add(seed_log_ratios(summary, group, summary, rival, target))
            cells = _cells(summary, group, rival, target)
            rows.append((f"- **{ordering.method}** ({ordering.citation}): {ordering.claim}. {cells}", index))
    for group, options in extensions:
        defaults = _defaults_of(extensions, options) if options.get("options_from") else None
        if defaults is None:
            continue
        target = int(summary[summary["group"] == group]["length"].max())
        index = decisions.add(seed_log_ratios(summary, group, summary, defaults, target))
        cells = _cells(summary, group, defaults, target)
        rows.append(
            (f"- **{options['method']} tuned** (poscli tune, training split): beats its defaults. {cells}", index)
        )
    decisions.finish()
    lines = [
        "### Issue 34's methods against their rivals\n",
        "Each claim is an ordering at the method's target: perplexity (mean over seeds, 95% interval) of both, and "
        "the ratio of the two (geometric mean over seeds) with its paired test. It holds where the test supports the "
        "lower perplexity.\n",
    ]
    lines += [f"{text}; ratio {decisions.describe(index)}: {HOLDS[decisions.symbol(index)]}." for text, index in rows]
    if not rows:
        lines.append("No issue-34 method and its rival are both in this table.")
    return "\n".join([*lines, "", decisions.footer()]) + "\n"
