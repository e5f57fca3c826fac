"""``poscli eval``'s request: one field per option."""

from __future__ import annotations

from dataclasses import dataclass

from poscli.config import DEFAULT_DEPTHS
from poscli.training.requests import option, shared


@dataclass(frozen=True)
class EvalRequest:
    """``poscli eval``'s options."""

    lengths: list[int] | None = option(
        None,
        "Comma-separated lengths, e.g. 256,1k,4k (default: each run's train length x1, x4, x16).",
        metavar="LENGTH,...",
        parse="lengths",
    )
    max_tokens: int = option(
        131072,
        "About how many tokens every length scores (the same tokens at every length).",
        metavar="LENGTH",
        parse="length",
    )
    stride: int | None = option(
        None,
        "Sliding windows: score only the last S tokens of each window (default: non-overlapping windows).",
        metavar="LENGTH",
        parse="length",
    )
    protocol: str = option(
        "stream",
        (
            "stream: held-out documents joined and cut into spans (Press et al.); documents: only documents "
            "as long as the longest length (Peng et al.)."
        ),
        choices=("stream", "documents"),
    )
    data: str | None = option(
        None,
        (
            "Evaluate on this corpus instead of each run's own held-out text (stdlib, a file or folder, "
            "hf:NAME); a corpus a run did not train on is used whole."
        ),
        metavar="CORPUS",
    )
    reference: bool = option(
        True,
        "Add a context-free 3-gram row scored on the same spans.",
    )
    null: bool = option(
        False,
        (
            "Beside each length past the train length, the truncation null: the same targets with the context "
            "cut to the train length (sliding windows; about 4x the train length's cost per length)."
        ),
    )
    allow_split_mismatch: bool = option(
        False,
        "Evaluate even when a run's recorded held-out documents differ from the corpus' split now.",
    )
    table: str | None = option(
        None,
        "Table name: writes RESULTS/NAME.csv, .md and .png (default: ppl, or passkey for --task passkey).",
        metavar="NAME",
    )
    task: str = option(
        "perplexity",
        "What to measure: {tasks}, or your own as package.module:Class.",
        metavar="NAME",
        complete="tasks",
    )
    depths: str = option(
        DEFAULT_DEPTHS,
        "passkey, multiquery: key depths in percent of the filler (default 0 to 100 by 10).",
        metavar="D,D...",
    )
    trials: int = option(
        50,
        ("passkey: prompts per (length, depth) cell; multivalue, multiquery: per length; algorithmic tasks: per size."),
        metavar="N",
    )
    sizes: str | None = option(
        None,
        (
            "algorithmic tasks (copy, reverse, addition, ...): instance sizes, a range or a list, e.g. 1-64 "
            "or 1,2,4,8 (default: the task's, 1-16)."
        ),
        metavar="N-M",
    )
    keys: int | None = option(
        None,
        (
            "passkey: keys per prompt (default: the run's training format; K > 1: distractors); multivalue: "
            "values under the one key (default 4); multiquery: keys, every one asked for (default 4)."
        ),
        metavar="K",
    )
    sinks: int | None = option(
        None,
        (
            "StreamingLLM: evaluate with S attention sinks and a window of recent keys (any encoding), as the "
            "run RUN+sinksS made by poscli extend RUN --method sinks."
        ),
        metavar="S",
    )
    window: int | None = option(
        None,
        "with --sinks: recent keys kept (default: the train length - S).",
        metavar="R",
    )
    device: str = shared("device")
    compile: bool = option(
        False,
        "perplexity: torch.compile each model (one line and eager where the backend is missing).",
    )
    results: str | None = shared("results")
    quiet: bool = shared("quiet")
