"""``poscli extend``'s request: one field per option (a method's own options travel in ``method_option``)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from poscli.training.requests import option, shared


@dataclass(frozen=True)
class ExtendRequest:
    """``poscli extend``'s options (a method's own options travel in ``method_option``)."""

    method: str | None = option(
        None,
        (
            "An extension method that applies to RUN's encoding (poscli methods describes each): {methods}; "
            "continue is the control, the same fine-tuning with no rescaling; or your own, "
            "package.module:Class."
        ),
        metavar="METHOD",
        complete="methods",
    )
    target: int | None = option(
        None,
        "Length to extend to, e.g. 4k or 32768.",
        metavar="LENGTH",
        parse="length",
    )
    factor: float | None = option(
        None,
        "Scale factor s (default: target / the run's train length).",
        metavar="S",
    )
    steps: int | None = option(
        None,
        (
            "Fine-tuning steps; 0 extends without training (default 400; 0 for the methods that take no "
            "training: self-extend, rerope, leaky-rerope, sinks, logn). drope: the recalibration steps at the "
            "train length."
        ),
        metavar="N",
    )
    finetune_length: int | None = option(
        None,
        "Fine-tuning sequence length (default: min(target, 4 x train length)).",
        metavar="LENGTH",
        parse="length",
    )
    lr: float = option(
        0.0003,
        "Fine-tuning peak learning rate.",
        metavar="LR",
    )
    batch_size: int | None = option(
        None,
        "Sequences per step (default: the parent's tokens per step).",
        metavar="N",
    )
    factors: Path | None = option(
        None,
        (
            'longrope: a JSON file {"long_factor": [...], "short_factor": [...]}, one factor per frequency, '
            'or "search": run poscli search-factors first (resumable).'
        ),
        metavar="FILE|search",
    )
    search_score: str | None = option(
        None,
        (
            "longrope with --factors search: what the search minimises, perplexity (the default: the loss on "
            "training-split windows) or needle (the loss on the answers of passkey prompts of the target "
            "length: LongRoPE2's fitness, Shang et al., 2025)."
        ),
        metavar="perplexity|needle",
    )
    method_option: list[str] | None = option(
        None,
        (
            "An option of the method, repeatable: -M beta_fast=16, or as a flag of its own after RUN "
            "(--beta-fast 16); numbers, or comma-separated lists. poscli methods lists each method's options "
            "and defaults."
        ),
        metavar="KEY=VALUE",
        flags=("--method-option", "-M"),
    )
    options_from: Path | None = option(
        None,
        (
            "The options poscli tune chose (its FILE; flags given beside it win; --method may be left out), "
            "or tune: run poscli tune first with its defaults (resumable)."
        ),
        metavar="FILE|tune",
    )
    pose: bool = option(
        False,
        ("PoSE: fine-tune at the train length with positions that skip up to the target (Zhu et al., 2024)."),
    )
    mixed_short: float | None = option(
        None,
        (
            "LongRoPE2's mixed context windows: this fraction of the fine-tuning steps at the run's train "
            "length, where longrope uses the original RoPE (e.g. 0.5; default none)."
        ),
        metavar="F",
    )
    cream: bool = option(
        False,
        (
            "CREAM: fine-tune at the train length, head at 0, tail at the target's end, a Gaussian-placed "
            "middle (Wu et al., 2024)."
        ),
    )
    seed: int = option(
        0,
        "Random seed for the fine-tuning batches.",
        metavar="N",
    )
    eval_every: int | None = shared("eval_every")
    eval_lengths: list[int] | None = shared("eval_lengths")
    device: str = shared("device")
    name: str | None = option(
        None,
        "Name of the new run (default: RUN+METHOD-xFACTOR).",
        metavar="NAME",
        runner=True,
    )
    replace: bool = shared("replace")
    resume: bool = option(
        False,
        "Continue the interrupted extension RUN from its last checkpoint.",
        flags=("--resume",),
        runner=True,
    )
    results: str | None = shared("results")
    quiet: bool = shared("quiet")
