"""Flat configuration dataclasses that serialise to plain JSON (in the spirit of litgpt's config.py)."""

from __future__ import annotations

import dataclasses
import sys
from dataclasses import dataclass, field
from typing import Any, TypeVar

from poscli.errors import PoscliError

C = TypeVar("C", bound="FlatConfig")

# Model-config keys that held encoding options before options belonged to the encodings.
LEGACY_OPTION_KEYS = {
    "rope_base",
    "rope_layout",
    "rotary_fraction",
    "rope_keep",
    "shaw_clip",
    "xpos_gamma",
    "t5_num_buckets",
    "t5_max_distance",
}


_WARNED: set[tuple[str, tuple[str, ...]]] = set()


class FlatConfig:
    """Serialises a dataclass to a plain dict (for config.json) and back; unknown keys are left out
    so a config written by a newer poscli still loads, with one line on stderr naming them (a newer
    poscli's setting this one ignores may change what the run computes)."""

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls: type[C], values: dict[str, Any]) -> C:
        known = {f.name for f in dataclasses.fields(cls)}
        values = cls.migrate(values)
        unknown = tuple(sorted(set(values) - known))
        if unknown and (cls.__name__, unknown) not in _WARNED:
            _WARNED.add((cls.__name__, unknown))
            print(
                f"warning: a config.json holds {cls.__name__} keys this poscli does not know ({', '.join(unknown)}), "
                "left out: was it written by a newer poscli?",
                file=sys.stderr,
            )
        return cls(**{k: v for k, v in values.items() if k in known})

    @classmethod
    def migrate(cls, values: dict[str, Any]) -> dict[str, Any]:
        """Keys of older config.json files renamed to today's (none unless a class says)."""
        return values


@dataclass(frozen=True)
class AttentionOptions:
    """Switches on the attention of every layer, for any encoding: ``poscli train --attention-option KEY=VALUE``
    (``-A``), recorded in config.json under ``model.attention_options``.

    - ``ssmax``: Scalable-Softmax (Nakanishi, 2025, arXiv 2501.19399): the query at position i (seeing
      n = i + 1 keys) is multiplied by s_h log n, s_h learned per head and layer, so attention does not
      flatten as n grows. s_h starts at 1 / log(train length), a factor of 1 at the train length
      (the paper learns s; where it starts is ours). It scales q, so an additive position bias is not
      scaled with it.
    - ``sinks``: a learned sink logit per head and layer (an off-by-one softmax: a key with score
      sink_h and no value; gpt-oss; Gu et al., 2025, "When Attention Sink Emerges in Language Models",
      arXiv 2410.10781): a query may put its attention nowhere.
    - ``gate``: a sigmoid gate per head on the attention output, read from the layer's input
      (Qiu et al., 2025, "Gated Attention for Large Language Models", arXiv 2505.06708, the head-wise
      gate after the attention): y_h <- sigmoid(w_h . x + b_h) y_h.
    """

    ssmax: bool = False
    sinks: bool = False
    gate: bool = False

    @classmethod
    def parse(cls, values: dict[str, Any]) -> AttentionOptions:
        """From config.json's dict or ``-A key=value`` strings; an unknown key or a value that is not a
        switch is a one-line error naming what there is."""
        known = {f.name for f in dataclasses.fields(cls)}
        given = {}
        for key, value in values.items():
            if key not in known:
                raise PoscliError(
                    f"--attention-option {key!r} is not an option; there are: {', '.join(sorted(known))} "
                    "(e.g. -A ssmax=true)"
                )
            given[key] = _switch(key, value)
        return cls(**given)

    def to_dict(self) -> dict[str, bool]:
        """Only the switches that are on: a run without any records {} (config.json of older runs)."""
        return {key: True for key, value in dataclasses.asdict(self).items() if value}


def _switch(key: str, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    words = {"true": True, "1": True, "yes": True, "on": True, "false": False, "0": False, "no": False, "off": False}
    if str(value).lower() not in words:
        raise PoscliError(f"--attention-option {key}={value}: write true or false, e.g. -A {key}=true")
    return words[str(value).lower()]


@dataclass
class ModelConfig(FlatConfig):
    # --- tokenizer ---
    vocab_size: int = 256  # byte-level: one token per byte
    # --- transformer ---
    n_layer: int = 4
    n_head: int = 4
    d_model: int = 128
    mlp_ratio: int = 4
    train_length: int = 256  # tokens per training sequence; `learned` has this many rows
    # The standard deviation of the token embedding's and the blocks' weights at initialisation
    # (GPT-2's 0.02, chosen for width 768; about 1/sqrt(width) suits a tiny model better: at width
    # 64, 0.02 never learned two-pair associative recall in 1500 steps, 0.08 did, docs/results.md).
    init_std: float = 0.02
    # --- positional encoding ---
    pe: str = "rope"
    # The encoding's own options (its Options dataclass: `poscli encodings` lists them), e.g.
    # {"base": 500000.0} for rope; missing keys take the encoding's defaults.
    pe_options: dict[str, Any] = field(default_factory=dict)
    # --- attention ---
    attention_block: int = 1024  # query rows per block when a score bias must be materialised
    # Switches on every layer's attention, for any encoding (AttentionOptions above: ssmax,
    # sinks, gate; --attention-option KEY=VALUE); only the switches that are on, {} for none.
    attention_options: dict[str, Any] = field(default_factory=dict)
    # Extension of RoPE's frequencies (see poscli.extension.scaling); empty for a model as trained.
    rope_scaling: dict[str, Any] = field(default_factory=dict)
    # Extensions of the absolute encodings (poscli extend): rows of the learned table
    # (0 means train_length) and the divisor of sinusoidal positions (position interpolation).
    position_rows: int = 0
    position_scale: float = 1.0
    # Far keys at remapped positions (poscli.extension.remap: Self-Extend, ReRoPE, attention sinks); empty: none.
    remap: dict[str, Any] = field(default_factory=dict)
    # A factor on every query by position ({"method": NAME, ...its recorded values}; the method's
    # query_scale computes it: log-n attention scaling); empty: none.
    query_scaling: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.validate()

    @classmethod
    def migrate(cls, values: dict[str, Any]) -> dict[str, Any]:
        """Run folders written before options belonged to the encodings kept them as model fields
        (rope_base, shaw_clip, ...): they move into ``pe_options``, where the encoding reads the
        ones it declares (its ``legacy_options``) and ignores the rest."""
        legacy = {k: v for k, v in values.items() if k in LEGACY_OPTION_KEYS}
        if not legacy or "pe_options" in values:
            return values
        return {**{k: v for k, v in values.items() if k not in legacy}, "pe_options": legacy}

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_head

    def validate(self) -> None:
        positive = ("n_layer", "n_head", "d_model", "mlp_ratio", "train_length", "vocab_size", "attention_block")
        for name in positive:
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                flag = {"n_layer": "--layers", "n_head": "--heads", "d_model": "--width"}.get(
                    name, "--" + name.replace("_", "-")
                )
                raise PoscliError(f"{flag} must be a positive whole number, got {value!r}")
        if self.d_model % self.n_head:
            raise PoscliError(
                f"width {self.d_model} is not divisible by {self.n_head} heads; "
                f"choose --width as a multiple of --heads (e.g. --width {self.n_head * 32})"
            )
        if self.head_dim % 2:
            raise PoscliError(
                f"head dimension {self.head_dim} (width / heads) must be even for rotary and sinusoidal encodings"
            )
        if not self.init_std > 0:
            raise PoscliError(f"--init-std must be positive, e.g. 0.02 or 1/sqrt(width); got {self.init_std!r}")
        AttentionOptions.parse(self.attention_options)  # an unknown switch is a one-line error


DTYPES = ("fp32", "bf16")
# The depths a passkey evaluation places its key at, in percent of the filler: every depth, so a
# local window cannot look like retrieval (`poscli eval --depths`, recipes' `depths`).
DEFAULT_DEPTHS = "0,10,20,30,40,50,60,70,80,90,100"
OPTIMIZERS = ("adamw", "muon")  # poscli.training.optim
TASK_LOSSES = ("answer", "all")  # --task-loss: the answer tokens only, or every token of the instance


@dataclass
class TrainConfig(FlatConfig):
    # --- data ---
    # "stdlib", "shakespeare", "passkey", text files, dataset files, a prepared folder, or "hf:NAME[:CONFIG]"
    data: str = "stdlib"
    tokenizer: str = (
        "bytes"  # "bytes", "bpe:N" (trained on the training split; tokenizer.json in the run) or a tokenizer.json
    )
    split: str = (
        "auto"  # held-out text: "documents", by position ("tail", "blocks:K"), "auto" (tail for a single document)
    )
    data_split: str = "train"  # the dataset split(s) to train on (datasets' syntax: "train+validation")
    heldout_split: str | None = None  # a dataset split to hold out instead of a fraction of the training documents
    text_column: str | None = None  # a dataset's text column ("text", else its only string column)
    join_rows: str = "none"  # dataset rows -> documents: "none", "heading" (WikiText titles) or N rows
    streaming: bool = False  # read a dataset row by row (with max_data_bytes for a budget)
    max_data_bytes: int | None = None  # stop reading a dataset after this much text
    mix: str | None = None  # "passkey:F": a fraction F of training sequences are passkey examples
    passkey_template: str = "compact"  # the passkey format of training examples and of evaluation (poscli.data.passkey)
    passkey_keys: int = 1  # keys per passkey prompt; more than 1: distractors with other names (RULER's multi-key)
    passkey_lengths: str = (
        "random"  # passkey examples fill the sequence ("full") or end it at a random length ("random")
    )
    answer_loss: float = 0.0  # W > 0: the loss adds W times the mean loss of the passkey answers' tokens
    heldout_fraction: float = 0.1
    # --- optimisation ---
    size: str = "tiny"  # the --size preset the model and optimisation started from (poscli.training.options.SIZES)
    batch_size: int = 16  # sequences per optimizer step (the global batch, whatever --accumulate and --nproc)
    accumulate: int = 1  # micro-batches per step: each holds batch_size / accumulate sequences
    steps: int = 1000
    minutes: float | None = None  # a time budget; training stops at whichever of steps/minutes comes first
    optimizer: str = (
        "adamw"  # "adamw", or "muon": Muon for the blocks' matrices, AdamW for the rest (poscli.training.optim)
    )
    lr: float = 1e-3
    min_lr_ratio: float = 0.1  # cosine decay ends at lr * min_lr_ratio
    warmup_steps: int = 100
    weight_decay: float = 0.1
    grad_clip: float = 1.0
    dtype: str = (
        "fp32"  # "bf16": autocast (matmuls in bfloat16; RoPE angles, softmax statistics, norms and loss in float32)
    )
    # Ruoss et al. (2023): each training sequence takes a sorted random subset of [0, MAX) as its
    # positions instead of 0..T-1 (0: plain positions). Evaluation always uses plain positions.
    random_positions: int = 0
    # PoSE (Zhu et al., 2024): each step's window takes skipping positions reaching up to this
    # length (0: plain positions); set by `poscli extend --pose`.
    pose: int = 0
    pose_chunks: int = 2
    # CREAM (Wu et al., 2024): each step's window takes a head at 0, a tail at the end of this length
    # and a middle placed by a truncated Gaussian (0: plain positions); set by `poscli extend --cream`.
    cream: int = 0
    # LongRoPE2 (Shang et al., 2025): this fraction of the steps, drawn at random, run at
    # ``mixed_length`` (the original length) with the same tokens per step, where a method that switches
    # frequency sets at the original length (longrope) uses the original RoPE; `poscli extend --mixed-short F`.
    mixed_short: float = 0.0
    mixed_length: int = 0
    # An algorithmic task trained on instead of text (poscli.training.tasks): one instance a sequence,
    # its size drawn from task_sizes ("": the task's own), the loss on the answer or on every token.
    task: str = ""
    task_sizes: str = ""
    task_loss: str = "answer"
    # --- bookkeeping ---
    seed: int = 0
    device: str = "auto"
    compile: bool = False  # torch.compile the model (falls back to eager, with one line, where the backend is missing)
    log_every: int = 10
    logger: str = "jsonl"  # also log to "tensorboard" or "wandb" (poscli.training.loggers); metrics.jsonl always
    checkpoint_every: int = 200
    # Fractions of --steps after which the weights are kept as snapshots (RUN@STEP), e.g. "0.25,0.5":
    # the model at smaller training budgets, for verdicts against the budget. "": none.
    snapshots: str = ""
    eval_tokens: int = 65536  # held-out tokens scored at the train length at the end of training
    # the validation curve (poscli.training.metrics.HeldoutCurve): steps between its points (None: about
    # 20 points, at most a tenth of the training time; 0: none), and its lengths ([]: the train length and 4x)
    eval_every: int | None = None
    eval_lengths: list[int] | None = None
    keep_optimizer: bool = False  # keep checkpoint.safetensors (optimizer state, 3x the weights) once finished

    @classmethod
    def migrate(cls, values: dict[str, Any]) -> dict[str, Any]:
        """Runs made before passkey formats were recorded trained on examples that filled the
        sequence (the compact sentence then had no key name)."""
        if "passkey_lengths" in values or "data" not in values:
            return values
        return {**values, "passkey_lengths": "full"}

    def validate(self, min_steps: int = 1) -> None:
        if self.batch_size < 1:
            raise PoscliError(f"--batch-size must be at least 1, got {self.batch_size}")
        if self.accumulate < 1:
            raise PoscliError(f"--accumulate must be at least 1, got {self.accumulate}")
        if self.batch_size % self.accumulate:
            raise PoscliError(
                f"--batch-size {self.batch_size} does not split into {self.accumulate} equal micro-batches; "
                f"use a multiple of {self.accumulate} (the batch stays --batch-size, --accumulate only saves memory)"
            )
        if self.steps < min_steps:
            raise PoscliError(f"--steps must be at least {min_steps}, got {self.steps}")
        if self.minutes is not None and self.minutes <= 0:
            raise PoscliError(f"--minutes must be a positive number, got {self.minutes}")
        if not (0 < self.lr < 1):
            raise PoscliError(f"--lr must be between 0 and 1, got {self.lr}")
        if self.optimizer not in OPTIMIZERS:
            raise PoscliError(f"--optimizer {self.optimizer!r} is not one of {', '.join(OPTIMIZERS)}")
        if self.warmup_steps < 0:
            raise PoscliError(f"--warmup must be 0 or more, got {self.warmup_steps}")
        self.snapshot_steps()
        if self.checkpoint_every < 1:
            raise PoscliError(f"--checkpoint-every must be at least 1, got {self.checkpoint_every}")
        if self.eval_every is not None and self.eval_every < 0:
            raise PoscliError(f"--eval-every must be 0 (no curve) or a number of steps, got {self.eval_every}")
        if any(length < 1 for length in self.eval_lengths or []):
            raise PoscliError(f"--eval-lengths must be positive lengths, got {self.eval_lengths}")
        if self.dtype not in DTYPES:
            raise PoscliError(f"--dtype {self.dtype!r} is not supported; choose {' or '.join(DTYPES)}")
        if self.answer_loss < 0:
            raise PoscliError(f"--answer-loss must be 0 (off) or a positive weight, got {self.answer_loss}")
        if self.random_positions < 0:
            raise PoscliError(f"--random-positions must be 0 (off) or a length, got {self.random_positions}")
        if sum(bool(x) for x in (self.pose, self.random_positions, self.cream)) > 1:
            raise PoscliError("--pose, --cream and --random-positions each choose the training positions; use one")
        if self.task_loss not in TASK_LOSSES:
            raise PoscliError(f"--task-loss {self.task_loss!r} is not one of {', '.join(TASK_LOSSES)}")
        task_mixed = bool(self.mix) and not str(self.mix).startswith("passkey")
        if not self.task and not task_mixed and (self.task_sizes or self.task_loss != "answer"):
            flag = "--sizes" if self.task_sizes else "--task-loss"
            raise PoscliError(f"{flag} sets how a task is trained: add --task NAME (or --mix NAME:F), or leave it out")
        if not 0 <= self.mixed_short < 1:
            raise PoscliError(f"--mixed-short must be a fraction of the steps in [0, 1), got {self.mixed_short:g}")
        if self.mixed_short and (self.mixed_length < 1 or self.pose or self.cream or self.random_positions):
            raise PoscliError("--mixed-short goes with a fine-tuning of plain positions (not --pose or --cream)")
        if self.pose_chunks < 1:
            raise PoscliError(f"--pose-chunks must be at least 1, got {self.pose_chunks}")
        if not (0 < self.heldout_fraction < 0.5):
            raise PoscliError(f"the held-out fraction must be between 0 and 0.5, got {self.heldout_fraction}")

    def snapshot_steps(self) -> list[int]:
        """The steps ``snapshots`` names (fractions of ``steps``, rounded; the last step is the run itself)."""
        if not self.snapshots:
            return []
        try:
            fractions = [float(part) for part in str(self.snapshots).split(",")]
        except ValueError:
            fractions = [-1.0]
        if not all(0 < f < 1 for f in fractions):
            raise PoscliError(
                f"--snapshots {self.snapshots!r}: give fractions of --steps between 0 and 1, e.g. --snapshots 0.25,0.5"
            )
        return sorted({max(1, round(f * self.steps)) for f in fractions} - {self.steps})
