"""``poscli inspect``'s request: one field per option."""

from __future__ import annotations

from dataclasses import dataclass

from poscli.training.requests import option, shared


@dataclass(frozen=True)
class InspectRequest:
    """``poscli inspect``'s options: runs read on ``poscli eval``'s spans, or (no run) an encoding and an
    extension drawn from their configuration alone."""

    lengths: list[int] | None = option(
        None,
        "Comma-separated window lengths, e.g. 128,1k,8k (default: each run's train length x1, x4, x16; each "
        "run's own train length is always added, for the ratios).",
        metavar="LENGTH,...",
        parse="lengths",
    )
    max_tokens: int = option(
        32768,
        "About how many tokens every length reads (the same spans poscli eval scores with this --max-tokens).",
        metavar="LENGTH",
        parse="length",
    )
    table: str = option("inspect", "Table name: writes RESULTS/NAME.csv, NAME_*.csv, .md and figures.", metavar="NAME")
    pe: str | None = option(
        None,
        "No run: the angle coverage of this rotary encoding from its configuration alone, e.g. --pe rope.",
        metavar="NAME",
        complete="encodings",
    )
    pe_option: list[str] | None = option(
        None,
        "With --pe: an option of the encoding, repeatable, e.g. -O base=500000.",
        metavar="KEY=VALUE",
        flags=("--pe-option", "-O"),
    )
    train_length: int = option(256, "With --pe: the length it was trained at.", metavar="LENGTH", parse="length")
    head_dim: int = option(32, "With --pe: the head dimension (its rotary pairs are half of it).", metavar="D")
    method: list[str] | None = option(
        None,
        "With --pe: an extension beside the plain encoding, repeatable, e.g. --method pi --method yarn "
        "(extended to --target).",
        metavar="METHOD",
    )
    target: int | None = option(
        None,
        "With --method: the length extended to (default: the longest of --lengths).",
        metavar="LENGTH",
        parse="length",
    )
    method_option: list[str] | None = option(
        None,
        "With --method: an option of the methods, repeatable, e.g. -M beta_fast=16.",
        metavar="KEY=VALUE",
        flags=("--method-option", "-M"),
    )
    device: str = shared("device")
    results: str | None = shared("results")
    quiet: bool = shared("quiet")
