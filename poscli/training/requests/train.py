"""``poscli train``'s request: one field per option."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from poscli.training.requests import option, shared


@dataclass(frozen=True)
class TrainRequest:
    """``poscli train``'s options: what a run is (the config fields) and how it is run (runner options)."""

    # train --help's groups: every option in one (tests/cli/test_cli.py checks that none is left out)
    PANELS: ClassVar[dict[str, tuple[str, ...]]] = {
        "Model": ("pe", "pe_option", "attention_option", "size", "layers", "heads", "width", "init_std"),
        "Data": ("data", "tokenizer", "split", "data_split", "heldout_split", "text_column", "join_rows", "streaming",
                 "max_data_bytes"),
        "Tasks and passkeys": ("mix", "task", "sizes", "task_loss", "passkey_template", "passkey_keys",
                               "passkey_lengths", "answer_loss"),
        "Optimisation": ("batch_size", "accumulate", "steps", "minutes", "optimizer", "lr", "warmup", "seed", "dtype"),
        "Positions": ("train_length", "random_positions"),
        "Output and running": ("device", "compile", "name", "replace", "eval_every", "eval_lengths", "keep_optimizer",
                               "checkpoint_every", "logger", "snapshots", "resume", "nproc", "seeds", "jobs", "results",
                               "quiet"),
    }  # fmt: skip

    pe: str = option(
        "rope",
        "Positional encoding: {encodings}, or package.module:Class (poscli encodings describes each).",
        metavar="NAME[,NAME...]",
        complete="encodings",
    )
    pe_option: list[str] | None = option(
        None,
        "An option of the encoding, repeatable, e.g. -O base=500000 (poscli encodings lists them).",
        metavar="KEY=VALUE",
        flags=("--pe-option", "-O"),
        field="pe_options",
    )
    attention_option: list[str] | None = option(
        None,
        (
            "A switch on every layer's attention, repeatable: ssmax (Scalable-Softmax), sinks (a learned sink "
            "logit per head), gate (a sigmoid gate per head on the output), e.g. -A ssmax=true."
        ),
        metavar="KEY=VALUE",
        flags=("--attention-option", "-A"),
        field="attention_options",
    )
    size: str = option(
        "tiny",
        (
            "A preset of the options marked [size] below: tiny (4 x 128, CPU minutes), small (6 x 384, "
            "nanoGPT's), base (12 x 768, GPT-2 small's); a flag given overrides it."
        ),
        choices=("tiny", "small", "base"),
    )
    layers: int | None = option(
        None,
        "Transformer layers [size; tiny: 4].",
        metavar="N",
        field="n_layer",
    )
    heads: int | None = option(
        None,
        "Attention heads [size; tiny: 4].",
        metavar="N",
        field="n_head",
    )
    width: int | None = option(
        None,
        "Model width (d_model) [size; tiny: 128].",
        metavar="N",
        field="d_model",
    )
    init_std: float = option(
        0.02,
        (
            "The weights' standard deviation at initialisation (GPT-2's 0.02; about 1/sqrt(width) helps a "
            "tiny model learn recall)."
        ),
        metavar="S",
    )
    train_length: int | None = option(
        None,
        "Tokens per training sequence, e.g. 256 or 1k [size; tiny: 256].",
        metavar="LENGTH",
        parse="length",
    )
    data: str = option(
        "stdlib",
        "{sources}, or a folder poscli data prepare wrote (poscli data sources describes each).",
        metavar="CORPUS",
    )
    tokenizer: str = option(
        "bytes",
        ("bytes (default), bpe:N (a byte-level BPE of N tokens trained on the training split) or a tokenizer.json."),
        metavar="bytes|bpe:N|PATH",
    )
    split: str = option(
        "auto",
        (
            "Held-out text: by document, the tail, or K blocks spread through the text (auto: tail for a "
            "single document)."
        ),
        metavar="auto|documents|tail|blocks:K",
    )
    data_split: str = option(
        "train",
        "The dataset split(s) to train on, e.g. train or train+validation.",
        metavar="SPLIT",
    )
    heldout_split: str | None = option(
        None,
        "Hold out this dataset split whole (e.g. test) instead of a fraction of the training documents.",
        metavar="SPLIT",
    )
    text_column: str | None = option(
        None,
        "The dataset column holding the text (default: text, or the only string column).",
        metavar="COLUMN",
    )
    join_rows: str = option(
        "none",
        "Join dataset rows into documents: heading (WikiText's article titles) or every N rows.",
        metavar="none|heading|N",
    )
    streaming: bool = option(
        False,
        "Read the dataset row by row (use with --max-data-bytes).",
    )
    max_data_bytes: int | None = option(
        None,
        "Stop reading the dataset after this much text, e.g. 200M.",
        metavar="BYTES",
        parse="bytes",
    )
    mix: str | None = option(
        None,
        (
            "End a fraction of training sequences in a passkey example or a task's instance (its --sizes), "
            "e.g. passkey:0.2 or copy:0.2."
        ),
        metavar="NAME:F",
    )
    task: str = option(
        "",
        (
            "Train on an algorithmic task instead of text, one instance a sequence (copy, reverse, addition, "
            "...; poscli eval --task NAME --sizes scores it), e.g. --task copy --sizes 1-16."
        ),
        metavar="NAME",
    )
    sizes: str = option(
        "",
        "with --task: the instance sizes trained on, a range or a list (default: the task's, 1-16).",
        metavar="N-M",
        field="task_sizes",
    )
    task_loss: str = option(
        "answer",
        "with --task: the loss on the answer tokens only, or on all.",
        choices=("answer", "all"),
    )
    passkey_template: str = option(
        "compact",
        "Passkey prompt format, trained on and evaluated on.",
        choices=("compact", "paper"),
    )
    passkey_keys: int = option(
        1,
        "Keys per passkey prompt; K > 1 adds distractors with other names.",
        metavar="K",
    )
    passkey_lengths: str = option(
        "random",
        (
            "random: each passkey example ends its sequence at a random length, corpus text before it; full: "
            "it fills the sequence."
        ),
        choices=("random", "full"),
    )
    answer_loss: float = option(
        0.0,
        "Add W x the mean loss of passkey answers' tokens to the loss (0: off).",
        metavar="W",
    )
    batch_size: int | None = option(
        None,
        "Sequences per optimizer step, the global batch [size; tiny: 16].",
        metavar="N",
    )
    accumulate: int = option(
        1,
        ("Gradient accumulation: each step runs N micro-batches of batch-size / N sequences (same step, less memory)."),
        metavar="N",
    )
    steps: int = option(
        1000,
        "Optimizer steps (training stops at steps or --minutes, whichever first).",
        metavar="N",
    )
    minutes: float | None = option(
        None,
        "Time budget in minutes.",
        metavar="M",
    )
    optimizer: str = option(
        "adamw",
        (
            "adamw, or muon: Muon for the blocks' weight matrices, AdamW for the rest, one --lr (Muon's step "
            "matched to AdamW's RMS)."
        ),
        choices=("adamw", "muon"),
    )
    lr: float | None = option(
        None,
        "Peak learning rate [size; tiny: 1e-3].",
        metavar="LR",
    )
    warmup: int | None = option(
        None,
        "Warmup steps (linear), then cosine decay to lr/10 [size; tiny: 100].",
        metavar="N",
        field="warmup_steps",
    )
    seed: int = option(
        0,
        "Random seed for initialisation and batches.",
        metavar="N",
    )
    dtype: str = option(
        "fp32",
        "bf16: autocast (matmuls in bfloat16, softmax statistics and RoPE angles in float32).",
        choices=("fp32", "bf16"),
    )
    random_positions: int = option(
        0,
        (
            "Train each sequence at a sorted random subset of positions in [0, MAX), e.g. 4k (Ruoss et al., "
            "2023); 0: off."
        ),
        metavar="LENGTH",
        parse="length-or-zero",
    )
    device: str = shared("device")
    compile: bool = option(
        False,
        "torch.compile the model (one line and eager where the backend is missing).",
    )
    name: str | None = option(
        None,
        "Run name (default: the encoding's name).",
        metavar="NAME",
        runner=True,
    )
    replace: bool = shared("replace")
    eval_every: int | None = shared("eval_every")
    eval_lengths: list[int] | None = shared("eval_lengths")
    keep_optimizer: bool = option(
        False,
        "Keep the optimizer's state (checkpoint.safetensors, about 3x the weights) once the run has finished; by "
        "default a finished run keeps its weights only.",
    )
    checkpoint_every: int = option(
        200,
        "Steps between checkpoints (also written at the start, on Ctrl-C/SIGTERM and at the end).",
        metavar="N",
    )
    logger: str = option(
        "jsonl",
        (
            "Also log the training curve to tensorboard (RUN/tensorboard) or wandb (offline unless WANDB_MODE "
            "says otherwise); RUN/metrics.jsonl is always written."
        ),
        choices=("jsonl", "tensorboard", "wandb"),
    )
    snapshots: str = option(
        "",
        ("Keep the weights after these fractions of --steps as runs NAME@STEP, e.g. 0.25,0.5 (poscli eval NAME@STEP)."),
        metavar="F[,F...]",
    )
    resume: str | None = option(
        None,
        ("Continue RUN (trained or extended) from its last checkpoint; other options must match its config."),
        metavar="RUN",
        complete="runs",
        runner=True,
    )
    nproc: int = option(
        1,
        ("Data-parallel processes on this machine (launches torchrun; the global batch stays --batch-size)."),
        metavar="N",
        runner=True,
    )
    seeds: str | None = option(
        None,
        "A sweep over seeds, e.g. 0,1,2 (with --pe a,b,c: every combination).",
        metavar="N,N...",
        runner=True,
    )
    jobs: int = option(
        1,
        "Sweep runs at once (each gets cores / jobs threads, or its own GPU).",
        metavar="N",
        runner=True,
    )
    results: str | None = shared("results")
    quiet: bool = shared("quiet")
