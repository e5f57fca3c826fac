"""The training loop: AdamW (or Muon, ``poscli.training.optim``), linear warmup then cosine decay, random windows of
the train corpus.

``train()`` works from Python; ``poscli train`` is a thin wrapper around it.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import random
import shutil
import signal
import threading
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import torch
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from poscli import encodings
from poscli.config import ModelConfig, TrainConfig
from poscli.core.device import autocast, compile_model, select_device
from poscli.core.io import atomic_write
from poscli.core.provenance import environment
from poscli.data.corpus import Corpus, CorpusOptions, absolute_spec, load_corpus
from poscli.data.passkey import PasskeyTraining
from poscli.data.prepared import PreparedCorpus, TokenFile
from poscli.data.tokenizer import run_tokenizer
from poscli.errors import Answer, PoscliError
from poscli.evaluation.evalset import build_eval_set
from poscli.evaluation.evaluate import perplexity
from poscli.extension import positions as position_schemes
from poscli.model import runs
from poscli.model.gpt import GPT
from poscli.training import loggers
from poscli.training.distributed import Group, check_batch, data_parallel_loss, group_from_environment
from poscli.training.distributed import start as start_group
from poscli.training.optim import make_optimizer
from poscli.training.tasks import TaskMix, TaskTraining, task_accuracy, training_mix


class TrainingInterrupted(PoscliError):
    """Ctrl-C (exit 130) or SIGTERM (exit 143) during training: a checkpoint was saved."""

    exit_code = 130
    prefix = ""

    @classmethod
    def by(cls, number: int, step: int, run: Path | None, main: bool = True) -> TrainingInterrupted:
        message = (
            f"{signal.Signals(number).name} at step {step}: checkpoint saved in {run}; resume with: poscli train "
            f"--resume {run.name}"
            if main
            else ""
        )
        error = cls(message)
        error.exit_code = 128 + number  # 130 for SIGINT, 143 for SIGTERM
        return error

    @classmethod
    def mid_step(cls, step: int, name: str) -> TrainingInterrupted:
        """A second signal stopped a step halfway: the last checkpoint is the state to resume from."""
        return cls(f"interrupted at step {step}; resume from the last checkpoint with: poscli train --resume {name}")


def learning_rate(step: int, progress: float, config: TrainConfig) -> float:
    """Linear warmup over ``warmup_steps``, then cosine decay to ``lr * min_lr_ratio``.

    ``progress`` in [0, 1] is how far training is through its budget (steps, or time when
    ``--minutes`` ends it first), so a time budget still decays the rate to its floor.
    """
    if step < config.warmup_steps:
        return config.lr * (step + 1) / config.warmup_steps
    cosine = 0.5 * (1 + math.cos(math.pi * min(1.0, progress)))
    return config.lr * (config.min_lr_ratio + (1 - config.min_lr_ratio) * cosine)


def sample_batch(
    stream: torch.Tensor,
    batch_size: int,
    length: int,
    generator: torch.Generator,
    device: torch.device,
    passkey: PasskeyTraining | None = None,
):
    """Random windows of the training stream, each ending with probability ``passkey.fraction``
    in a whole passkey example (so the question and its key are in one sequence): of the full
    window's length, or (``passkey.lengths == "random"``) of a length drawn uniformly from the
    format's shortest to the window's, the corpus text before it. With ``passkey.answer_weight``
    W > 0 the loss adds W times the mean loss of the batch's answer tokens (the key's digits and
    the stop after them) to the mean loss of all tokens, given as per-token weights (None when
    W = 0 or the batch holds no example).
    stream: (N,) uint8 or int32 tensor, or a TokenFile -> tokens, targets: (B, T) int64, weights: (B, T) float32
    or None."""
    starts = torch.randint(0, len(stream) - length - 1, (batch_size,), generator=generator)  # (B,)
    if isinstance(stream, TokenFile):  # a prepared corpus on disk: read the windows, nothing else
        window = torch.from_numpy(stream.windows(starts.numpy(), length + 1).astype(np.int64))  # (B, T + 1)
    else:
        index = starts[:, None] + torch.arange(length + 1)[None, :]  # (B, T + 1)
        window = stream[index]  # (B, T + 1) uint8 (bytes) or int32
    answers = torch.zeros(batch_size, length, dtype=torch.bool)  # (B, T): targets that are answer tokens
    if passkey is not None and passkey.fraction > 0:
        chosen = (torch.rand(batch_size, generator=generator) < passkey.fraction).nonzero().flatten().tolist()
        for row in chosen:
            seed = int(torch.randint(0, 2**62, (1,), generator=generator))
            example, answer_start = passkey.example(length + 1, random.Random(seed))
            offset = length + 1 - len(example)  # (T + 1 - E) corpus tokens, then the example
            window[row, offset:] = torch.from_numpy(example)
            answers[row, offset + answer_start - 1 :] = (
                True  # targets answer_start.. are predicted from answer_start - 1..
            )
    weights = None
    if passkey is not None and passkey.answer_weight > 0 and answers.any():
        weights = torch.ones(batch_size, length) + answers * (
            passkey.answer_weight * answers.numel() / answers.sum()
        )  # (B, T)
        weights = weights.to(device)
    window = window.to(device=device, dtype=torch.long)
    return window[:, :-1], window[:, 1:], weights


@dataclass
class TrainResult:
    run: Path
    steps: int
    heldout_loss: float
    heldout_perplexity: float
    seconds: float
    heldout_length: int = 0
    heldout_bpb: float | None = None  # bits per UTF-8 byte of the scored text (None: loss / ln 2, byte tokens)
    task_accuracy: dict | None = None  # a task run or mix: exact match at its training sizes (tasks.task_accuracy)
    heldout_tokens: int = 0  # the held-out tokens scored (TrainConfig.eval_tokens of them, at most)

    def summary(self) -> str:
        """One line for the console: steps, time, and the held-out perplexity at the train length
        and/or (a task run, or a task mixed in) exact match at the task's training sizes."""
        parts = []
        if not math.isnan(self.heldout_loss):
            bpb = self.heldout_bpb if self.heldout_bpb is not None else self.heldout_loss / math.log(2)
            sample = f" on {self.heldout_tokens:,} held-out tokens" if self.heldout_tokens else ""
            parts.append(
                f"held-out loss at length {self.heldout_length}{sample}: {self.heldout_loss:.4f} nats/token "
                f"(perplexity {self.heldout_perplexity:.3f}, {bpb:.3f} bits/byte; poscli eval's table scores a "
                "sample of its own, the same tokens at every length)"
            )
        if self.task_accuracy:
            a = self.task_accuracy
            parts.append(
                f"exact match on {a['task']} at its training sizes: {a['exact']:.3f} [{a['ci_low']:.3f}, "
                f"{a['ci_high']:.3f}] ({a['instances']} instances)"
            )
        return f"finished {self.steps} steps in {self.seconds / 60:.1f} min; " + "; ".join(parts)


def training_step(
    model,
    optimizer,
    tokens: torch.Tensor,
    targets: torch.Tensor,
    grad_clip: float,
    dtype: str = "fp32",
    loss_fn=None,
    group: Group | None = None,
    positions: torch.Tensor | None = None,
    weights: torch.Tensor | None = None,
    accumulate: int = 1,
) -> torch.Tensor:
    """One optimizer step on a batch; returns the batch's mean loss before the step (a 0-d tensor).

    ``accumulate`` N > 1 splits the batch into N micro-batches of equal size whose gradients add up
    (each loss divided by N), so the step is the full batch's step (to float rounding) with a
    micro-batch's activation memory. A non-finite loss skips the update: gradients are computed
    (every data-parallel process runs the same backward passes) but the weights are not touched.
    The training loop and ``make bench`` both call this, so the benchmark measures the step users run.
    Data-parallel: ``loss_fn`` is the DDP-wrapped loss, which averages gradients on the last
    micro-batch only, and ``group`` averages the reported loss over the processes, so they all see
    the same value and all skip a non-finite step together.
    ``positions`` (B, T) or (T,), if given, are the positions (``--random-positions``, PoSE);
    ``weights`` (B, T), each target's weight in the loss (``--answer-loss``).
    """
    compute_loss = loss_fn or model.loss
    optimizer.zero_grad(set_to_none=True)
    total = torch.zeros((), device=tokens.device)
    for index, (rows_tokens, rows_targets, rows_positions, rows_weights) in enumerate(
        micro_batches(accumulate, tokens, targets, positions, weights)
    ):
        last = index == accumulate - 1
        sync = contextlib.nullcontext() if last or not hasattr(compute_loss, "no_sync") else compute_loss.no_sync()
        with sync:
            with autocast(tokens.device, dtype):
                loss = compute_loss(rows_tokens, rows_targets, rows_positions, rows_weights) / accumulate
            total += loss.detach().float()
            if accumulate == 1 and group is None and not torch.isfinite(total):
                return total  # nothing to average with other processes: skip the backward pass too
            loss.backward()
    reported = group.mean(total) if group is not None else total
    if not torch.isfinite(reported):
        return reported
    torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
    optimizer.step()
    return reported


def micro_batches(
    accumulate: int,
    tokens: torch.Tensor,
    targets: torch.Tensor,
    positions: torch.Tensor | None,
    weights: torch.Tensor | None,
) -> list[tuple]:
    """The batch cut into ``accumulate`` equal runs of rows; positions shared by every row ((T,),
    PoSE) stay whole. -> [(tokens, targets, positions, weights)] with (B / N, T) tensors."""
    if accumulate == 1:
        return [(tokens, targets, positions, weights)]
    rows = tokens.shape[0] // accumulate
    cut = lambda x: [x[i * rows : (i + 1) * rows] for i in range(accumulate)] if x is not None else [None] * accumulate  # noqa: E731
    shared = positions is not None and positions.dim() == 1
    return list(zip(cut(tokens), cut(targets), [positions] * accumulate if shared else cut(positions), cut(weights)))


def resolve_tokenizer(train_config: TrainConfig, corpus, parent: Path | None = None):
    """A new run's tokenizer: its parent's (an extension), a prepared corpus' own, bytes, a BPE
    trained now on the corpus' training documents (``bpe:N``), or a tokenizer.json (a path)."""
    from poscli.data import tokenizer as tokenizers

    if parent is not None:
        return tokenizers.run_tokenizer(train_config.tokenizer, parent)
    if isinstance(corpus, PreparedCorpus):
        own = corpus.load_tokenizer()
        if train_config.tokenizer not in ("bytes", own.spec):
            raise PoscliError(
                f"{corpus.spec} was prepared with --tokenizer {own.spec}; drop --tokenizer {train_config.tokenizer} "
                "or prepare the corpus again with it"
            )
        return own
    kind, size = tokenizers.parse_spec(train_config.tokenizer)
    if kind == "bytes":
        return tokenizers.ByteTokenizer()
    if kind == "bpe":
        return tokenizers.train_bpe(corpus.texts(heldout=False), size)
    return tokenizers.load_file(train_config.tokenizer)


def check_corpus_fits(corpus: Corpus, train_length: int, batch_size: int) -> None:
    train_tokens = int(corpus.document_lengths()[~corpus.heldout].sum())
    if train_tokens < train_length + 2:
        raise PoscliError(
            f"the training part of {corpus.spec!r} has {train_tokens} tokens, too few for --train-length "
            f"{train_length}; "
            f"use a shorter --train-length or a larger corpus"
        )
    build_eval_set(corpus, train_length, max_tokens=1)  # raises if the held-out text is too short


def train(
    model_config: ModelConfig,
    train_config: TrainConfig,
    name: str | None = None,
    results: str | Path | None = None,
    console: Console | None = None,
    show_progress: bool = True,
    initial_weights: dict | None = None,
    lineage: dict | None = None,
    replace: bool = False,
) -> TrainResult | None:
    """Train a model and write its run folder. Everything is validated before a file is written.

    ``initial_weights`` (a state dict) starts from another run's weights instead of a fresh
    initialisation, and ``lineage`` (parent, extension, label) is recorded in the run's config:
    this is how ``poscli extend`` fine-tunes. With ``initial_weights``, ``steps`` may be 0.
    A checkpoint is written before the first step, every ``checkpoint_every`` steps, on Ctrl-C
    or SIGTERM, and at the end, so ``resume()`` can always continue the run.

    Under torchrun every process calls this; rank 0 writes the run and returns its result, the
    others return None (see ``poscli.training.distributed``).
    """
    console = console or Console(stderr=True, soft_wrap=True)
    group = group_from_environment()
    model_config.validate()
    train_config.validate(min_steps=0 if initial_weights is not None else 1)
    check_batch(group, train_config.batch_size, train_config.accumulate)
    name = name or encodings.run_name_base(model_config.pe)
    runs.check_name(name)
    if group.is_main and not replace:
        runs.check_free(
            name, results, resume=f"poscli {'extend ' + name + ' --resume' if lineage else 'train --resume ' + name}"
        )
    device = _select_device(group, train_config.device)
    parent = runs.find_run(lineage["parent"], results) if lineage and lineage.get("parent") else None
    corpus, tokenizer, model_config, train_config = _data_and_configs(model_config, train_config, parent)

    torch.manual_seed(train_config.seed)
    model = GPT(model_config)
    if initial_weights is not None:
        model.load_state_dict(initial_weights)
    model = model.to(device)
    generator = torch.Generator().manual_seed(train_config.seed)
    optimizer = make_optimizer(model, train_config)

    run = _create_run_folder(name, results, replace) if group.is_main else None
    config = {
        "name": run.name if run else name,
        "label": None,
        "status": "running",
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
        "model": model_config.to_dict(),
        "train": train_config.to_dict(),
        "data": corpus.summary(),
        "parameters": model.num_parameters(),
        "environment": {**environment(device, train_config.dtype), "processes": group.world_size},
        "parent": None,
        **(lineage or {}),
    }
    show_progress = show_progress and group.is_main
    loop = (run, config, model, optimizer, generator, corpus, device, console, show_progress)
    if not group.is_main:
        return _train_loop(*loop, group=group, tokenizer=tokenizer)
    from poscli.training.memory import training_memory

    estimate = training_memory(
        model, model_config.train_length, train_config.batch_size, train_config.accumulate, device,
        train_config.dtype, group.world_size,
    )  # fmt: skip
    config["memory_estimate_gib"] = round(estimate.total / 2**30, 3)
    tokenizer.save(run)
    runs.write_config(run, config)
    runs.save_checkpoint(run, model, optimizer, generator, step=0, elapsed=0.0)
    _announce(console, run, config, model, device, group, estimate)
    return _train_loop(*loop, group=group, tokenizer=tokenizer)


def _data_and_configs(model_config: ModelConfig, train_config: TrainConfig, parent: Path | None):
    """The corpus, tokenized (with the parent's tokenizer when extending), and the configs as the run
    records them: the data path absolute, the tokenizer and vocabulary, every encoding option, a
    learned table grown for --random-positions. Everything is checked here, before a file is written."""
    train_config = TrainConfig.from_dict({**train_config.to_dict(), "data": absolute_spec(train_config.data)})
    corpus = load_corpus(train_config.data, train_config.heldout_fraction, CorpusOptions.of(train_config))
    tokenizer = resolve_tokenizer(train_config, corpus, parent)
    corpus = corpus.tokenized(tokenizer)
    train_config = TrainConfig.from_dict({**train_config.to_dict(), "tokenizer": tokenizer.spec})
    model_config = ModelConfig.from_dict({**model_config.to_dict(), "vocab_size": tokenizer.vocab_size})
    check_corpus_fits(corpus, model_config.train_length, train_config.batch_size)
    training_mix(train_config, model_config, tokenizer)  # a task or --mix that cannot be trained on or does not fit
    model_config = encodings.resolve_options(model_config)  # config.json records every option
    model_config = position_schemes.configured(encodings.get(model_config.pe), model_config, train_config)
    return corpus, tokenizer, model_config, train_config


def _announce(console: Console, run: Path, config: dict, model, device, group: Group, estimate) -> None:
    """The run's first two lines: what is trained on what, and the batch and its memory."""
    model_config, train_config = ModelConfig.from_dict(config["model"]), TrainConfig.from_dict(config["train"])
    console.print(
        f"run [bold]{run.name}[/]{' (' + config['label'] + ')' if config['label'] else ''}: pe={model_config.pe}, "
        f"{model.num_parameters() / 1e6:.2f}M parameters, "
        f"train length {model_config.train_length}, on "
        f"{device}{f' x {group.world_size} processes' if group.active else ''}; corpus {config['data']['spec']!r}: "
        f"{config['data']['train_tokens'] / 1e6:.1f}M train / {config['data']['heldout_tokens'] / 1e6:.2f}M held-out "
        "tokens"
    )
    accumulation = f" in {train_config.accumulate} micro-batches" if train_config.accumulate > 1 else ""
    console.print(
        f"batch {train_config.batch_size} sequences x {model_config.train_length} tokens per step{accumulation}; "
        f"{estimate.line()}"
    )


# Options that may differ when a run is resumed: where it runs and how often it reports, not what it computes.
RESUMABLE_CHANGES = {"device", "log_every", "checkpoint_every", "accumulate", "compile", "eval_every"}


def resume(
    name: str,
    results: str | Path | None = None,
    console: Console | None = None,
    show_progress: bool = True,
    given: dict | None = None,
) -> TrainResult:
    """Continue a run from its last checkpoint, to the end of its configured steps.

    On CPU the result is identical to an uninterrupted run: the checkpoint holds the weights,
    AdamW's moments, the batch sampler's random state and the step, and metrics.jsonl is cut
    back to the checkpoint so every logged step appears once. ``given`` (config field -> value,
    the options a user passed alongside ``--resume``) must match the run's config, except
    for the fields in RESUMABLE_CHANGES.
    """
    console = console or Console(stderr=True, soft_wrap=True)
    group = group_from_environment()
    run = runs.find_run(name, results)
    config = runs.read_config(run)
    model_config = ModelConfig.from_dict(config["model"])
    train_config = TrainConfig.from_dict(config["train"])
    saved = {**encodings.resolve_options(model_config).to_dict(), **train_config.to_dict()}
    different = {
        key: (value, saved.get(key))
        for key, value in (given or {}).items()
        if key not in RESUMABLE_CHANGES and value != saved.get(key)
    }
    if different:
        listed = ", ".join(f"{key} {new!r} (the run has {old!r})" for key, (new, old) in different.items())
        raise PoscliError(
            f"cannot resume {run.name!r} with a different config: {listed}; drop those options to resume as it was"
        )
    if config.get("status") == "finished":
        raise Answer(f"run {run.name!r} has finished its {config.get('steps_done')} steps; nothing to resume")
    changed = {key: value for key, value in (given or {}).items() if key in RESUMABLE_CHANGES}
    if changed:
        train_config = TrainConfig.from_dict({**train_config.to_dict(), **changed})
        config["train"] = train_config.to_dict()  # the loop reads it: how the rest of the run runs
        train_config.validate(min_steps=0)
    fresh = not (run / runs.CHECKPOINT_FILE).exists() and config.get("parent") is None
    checkpoint = None if fresh else runs.load_checkpoint(run)  # a damaged file fails before anything loads
    check_batch(group, train_config.batch_size, train_config.accumulate)
    device = _select_device(group, train_config.device)
    corpus = load_corpus(train_config.data, train_config.heldout_fraction, CorpusOptions.of(train_config))
    tokenizer = run_tokenizer(train_config.tokenizer, run)
    corpus = corpus.tokenized(tokenizer)
    torch.manual_seed(train_config.seed)
    model = GPT(model_config)  # killed before its first checkpoint: the same seed gives the same start
    generator = torch.Generator().manual_seed(train_config.seed)
    step, elapsed = 0, 0.0
    if checkpoint is not None:
        model.load_state_dict(checkpoint["model"])
        generator.set_state(checkpoint["rng"])
        step, elapsed = checkpoint["step"], checkpoint["elapsed"]
    model = model.to(device)
    optimizer = make_optimizer(model, train_config)
    if checkpoint is not None:
        optimizer.load_state_dict(checkpoint["optimizer"])
    config.update(status="running", steps_done=step)
    if group.is_main:
        _cut_metrics(run, step)
        runs.write_config(run, config)
        console.print(f"resuming run [bold]{run.name}[/] at step {step} of {train_config.steps} on {device}")
    return _train_loop(
        run if group.is_main else None,
        config,
        model,
        optimizer,
        generator,
        corpus,
        device,
        console,
        show_progress and group.is_main,
        start_step=step,
        elapsed_before=elapsed,
        group=group,
        tokenizer=tokenizer,
    )


def _select_device(group: Group, requested: str) -> torch.device:
    """A data-parallel process's device comes from its rank; a single process's from --device."""
    return start_group(group, requested) if group.active else select_device(requested)


def _create_run_folder(name: str, results, replace: bool) -> Path:
    """Make RESULTS/runs/NAME atomically, so two processes can never take the same name;
    ``replace`` first removes a run of that name (and only a run folder)."""
    run = runs.runs_dir(results) / name
    if replace and run.exists():
        if not (run / runs.CONFIG_FILE).is_file() and any(run.iterdir()):
            raise PoscliError(
                f"{run} is not a run folder (no {runs.CONFIG_FILE}); --replace removes only runs, so move it away by "
                "hand"
            )
        shutil.rmtree(run)
    try:
        run.mkdir(parents=True)
        return run
    except FileExistsError:
        raise PoscliError(f"a run named {name!r} was created by another process; choose another --name") from None
    except OSError as error:
        raise PoscliError(
            f"cannot create {run}: {error.strerror}; check that the results folder is writable"
        ) from error


def _cut_metrics(run: Path, step: int) -> None:
    """Drop metrics logged after the checkpoint, so the resumed run logs each step exactly once."""
    path = run / runs.METRICS_FILE
    if not path.exists():
        return
    kept = [record for record in runs.read_metrics(run) if record["step"] <= step]  # a torn last line: dropped
    with atomic_write(path) as handle:
        handle.write("".join(json.dumps(record) + "\n" for record in kept))


class _StopRequest:
    """SIGINT and SIGTERM set a flag that the loop reads between steps, so the checkpoint it then
    writes is always a consistent state. A second signal of either kind stops at once."""

    def __init__(self):
        self.signal: int | None = None
        self._previous: dict = {}

    def _handle(self, number, frame):
        if self.signal is not None:  # asked twice: do not wait for the step to finish
            raise KeyboardInterrupt
        self.signal = number

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            for number in (signal.SIGINT, signal.SIGTERM):
                self._previous[number] = signal.signal(number, self._handle)
        return self

    def __exit__(self, *exc):
        for number, handler in self._previous.items():
            signal.signal(number, handler)
        return False


def _progress_bar(console: Console, show_progress: bool) -> Progress:
    return Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("loss {task.fields[loss]}"),
        TextColumn("{task.fields[speed]} tok/s"),
        TimeElapsedColumn(),
        TextColumn("left {task.fields[left]}"),
        console=console,
        disable=not show_progress,
        transient=False,
    )


def _batch(stream, train_config: TrainConfig, model_config: ModelConfig, generator, device, mix, group, scheme):
    """One step's batch, this process's rows of it: tokens, targets (B, T), positions (T,) or (B, T)
    or None, answer weights (B, T) or None. The generator draws the batch (text with passkey
    examples mixed in, or a task's instances), then the positions (from the run's training position
    scheme, ``poscli.extension.positions``; None: 0..T-1)."""
    length, batch_size = model_config.train_length, train_config.batch_size
    if train_config.mixed_short and float(torch.rand((), generator=generator)) < train_config.mixed_short:
        # LongRoPE2's mixed context windows: this step at the original length, the same tokens per step
        length, batch_size = train_config.mixed_length, max(1, batch_size * length // train_config.mixed_length)
    if isinstance(mix, TaskTraining):
        tokens, targets, weights = mix.batch(batch_size, length, generator, device)
    else:
        tokens, targets, weights = sample_batch(stream, batch_size, length, generator, device, mix)
    positions = None
    if scheme is not None:
        positions = scheme.draw(train_config.batch_size, model_config.train_length, generator, device)
    shared = positions if positions is not None and positions.dim() == 1 else None  # PoSE: one row for every sequence
    tokens, targets, positions, weights = group.shard(
        tokens, targets, None if shared is not None else positions, weights
    )  # the global batch, this process's rows
    return tokens, targets, shared if shared is not None else positions, weights


class _Log:
    """Every ``log_every`` steps (and the last): a line in metrics.jsonl and the progress bar's
    loss, speed and time left; the bar's count on every step."""

    def __init__(self, metrics, progress: Progress, name: str, step: int, train_config, tokens_per_step: int, start,
                 logger):  # fmt: skip
        self.task = progress.add_task(
            f"train {name}", total=train_config.steps, completed=step, loss="-", speed="-", left="-"
        )
        self.metrics, self.progress, self.config = metrics, progress, train_config
        self.tokens_per_step, self.start, self.logger = tokens_per_step, start, logger
        self.window_start, self.window_tokens = time.perf_counter(), 0

    def step(self, step: int, loss: torch.Tensor, lr: float, budget_seconds: float | None) -> None:
        self.window_tokens += self.tokens_per_step
        if step % self.config.log_every and step != self.config.steps:
            self.progress.update(self.task, completed=step)
            return
        now = time.perf_counter()
        speed = self.window_tokens / (now - self.window_start)
        self.window_start, self.window_tokens = now, 0
        elapsed = now - self.start
        left = (self.config.steps - step) * self.tokens_per_step / speed
        if budget_seconds is not None:
            left = min(left, budget_seconds - elapsed)
        record = {"step": step, "loss": round(loss.item(), 5), "lr": lr, "tokens_per_s": round(speed)}
        self.metrics.write(json.dumps({**record, "elapsed_s": round(elapsed, 2)}) + "\n")
        self.metrics.flush()
        scalars = {"train/loss": record["loss"], "train/lr": lr, "train/tokens_per_s": record["tokens_per_s"]}
        self.logger.scalars(scalars, step * self.tokens_per_step)
        self.progress.update(
            self.task, completed=step, loss=f"{loss.item():.3f}", speed=f"{speed:,.0f}", left=f"{max(0, left):.0f}s"
        )

    def heldout(self, step: int, loss: float) -> None:
        """A point of the validation curve: {"step", "heldout_loss"} in metrics.jsonl and the logger's heldout/loss."""
        self.metrics.write(json.dumps({"step": step, "heldout_loss": round(loss, 5)}) + "\n")
        self.metrics.flush()
        self.logger.scalars({"heldout/loss": loss}, step * self.tokens_per_step)


class _HeldoutCurve:
    """``--eval-every``: the held-out loss at the train length on the same windows every time (the
    ones scored after the last step), the model back in training mode after."""

    def __init__(self, corpus: Corpus, config: dict, device, tokenizer):
        self.corpus, self.config, self.device, self.tokenizer = corpus, config, device, tokenizer
        self.eval_set = None

    def __call__(self, model) -> float:
        return float(self.scores(model)["loss"])

    def scores(self, model) -> dict:
        """``poscli.evaluation.evaluate.perplexity``'s scores of the held-out windows."""
        length = self.config["model"]["train_length"]
        if self.eval_set is None:
            tokens = TrainConfig.from_dict(self.config["train"]).eval_tokens
            tokenizer = self.tokenizer
            token_bytes = None if tokenizer is None or tokenizer.spec == "bytes" else tokenizer.token_bytes()
            self.eval_set = build_eval_set(self.corpus, length, tokens, token_bytes=token_bytes)
        was_training = model.training
        model.eval()
        try:
            return perplexity(model, self.eval_set, length, self.device)
        finally:
            model.train(was_training)


def _token_stream(corpus: Corpus):
    """The training tokens: (N_train,) uint8 or int32 in memory, or a TokenFile for a prepared corpus."""
    stream = corpus.train_tokens()
    if isinstance(stream, TokenFile):
        return stream
    return torch.from_numpy(stream if stream.dtype == np.uint8 else stream.astype(np.int32))


def _set_learning_rate(optimizer, step: int, elapsed: float, budget_seconds: float | None, train_config) -> float:
    """The schedule's rate at this step (or at this fraction of a --minutes budget, if further), set on every group."""
    fraction_done = max(step / train_config.steps, elapsed / budget_seconds if budget_seconds else 0.0)
    lr = learning_rate(step, fraction_done, train_config)
    for param_group in optimizer.param_groups:
        param_group["lr"] = lr
    return lr


def _stopping(stop: _StopRequest, group: Group) -> bool:
    """A signal arrived, in any process: every process stops at the same step, or the others would wait forever."""
    stopping = stop.signal is not None
    if group.active:
        stopping = bool(group.mean(torch.tensor([float(stopping)])) > 0)
    return stopping


def _check_finite(loss: torch.Tensor, step: int, run: Path, config: dict, main: bool, lr: float) -> None:
    if torch.isfinite(loss):
        return
    if main:
        runs.write_config(run, {**config, "status": "failed", "steps_done": step})
    raise PoscliError(
        f"the loss became {loss.item()} at step {step}; the last good checkpoint in {run} is kept "
        "(resume it with a lower --lr by training anew, or inspect it). Try a lower --lr (now "
        f"{lr})"
    )


def _train_loop(
    run: Path,
    config: dict,
    model,
    optimizer,
    generator: torch.Generator,
    corpus: Corpus,
    device: torch.device,
    console: Console,
    show_progress: bool,
    start_step: int = 0,
    elapsed_before: float = 0.0,
    group: Group | None = None,
    tokenizer=None,
) -> TrainResult | None:
    """The steps from ``start_step`` to the end. Every process of a data-parallel group runs it;
    only rank 0 (the one with a ``run`` folder) writes, logs and evaluates."""
    group = Group() if group is None else group
    train_config = TrainConfig.from_dict(config["train"])
    start_tokens = start_step * train_config.batch_size * config["model"]["train_length"]
    with loggers.opened(train_config.logger, run, config, group.is_main, start_tokens) as logger:
        loop = (run, config, model, optimizer, generator, corpus, device, console, show_progress)
        return _steps(*loop, start_step, elapsed_before, group, tokenizer, logger)


def _steps(
    run, config, model, optimizer, generator, corpus, device, console, show_progress, start_step, elapsed_before,
    group: Group, tokenizer, logger: loggers.Logger,
) -> TrainResult | None:  # fmt: skip
    """``_train_loop``'s body, with the run's logger (``poscli.training.loggers``) open."""
    main = group.is_main
    loss_fn = data_parallel_loss(model, group)
    model_config, train_config = ModelConfig.from_dict(config["model"]), TrainConfig.from_dict(config["train"])
    mix = training_mix(train_config, model_config, tokenizer)
    scheme = position_schemes.for_training(model_config, train_config)  # None: positions 0..T-1
    if train_config.compile:
        compile_model(model, device, model_config.train_length, report=console.print if main else lambda line: None)
    stream = _token_stream(corpus)
    snapshot_steps, tokens_per_step = (
        set(train_config.snapshot_steps()),
        train_config.batch_size * model_config.train_length,
    )
    budget_seconds = train_config.minutes * 60 if train_config.minutes else None
    start, step, progress = time.perf_counter() - elapsed_before, start_step, _progress_bar(console, show_progress)

    def checkpoint(status: str = "running") -> None:
        if not main:
            return
        runs.save_checkpoint(run, model, optimizer, generator, step, time.perf_counter() - start)
        runs.save_weights(model, run)
        runs.write_config(run, {**config, "status": status, "steps_done": step})

    metrics = open(run / runs.METRICS_FILE if main else os.devnull, "a", encoding="utf-8")  # noqa: SIM115
    heldout_curve = _HeldoutCurve(corpus, config, device, tokenizer)
    model.train()
    try:
        with progress, _StopRequest() as stop:
            log = _Log(metrics, progress, config["name"], step, train_config, tokens_per_step, start, logger)
            while step < train_config.steps:
                if _stopping(stop, group):
                    checkpoint("interrupted")
                    raise TrainingInterrupted.by(stop.signal or signal.SIGTERM, step, run, main)
                elapsed = time.perf_counter() - start
                if budget_seconds is not None and elapsed >= budget_seconds:
                    break
                lr = _set_learning_rate(optimizer, step, elapsed, budget_seconds, train_config)
                tokens, targets, positions, weights = _batch(
                    stream, train_config, model_config, generator, device, mix, group, scheme
                )
                if step == start_step:
                    config["first_step_at"] = time.time()  # with the launch time, how long start-up took
                loss = training_step(
                    model, optimizer, tokens, targets, train_config.grad_clip, train_config.dtype, loss_fn=loss_fn,
                    group=group if group.active else None, positions=positions, weights=weights,
                    accumulate=train_config.accumulate,
                )  # fmt: skip
                _check_finite(loss, step, run, config, main, train_config.lr)
                step += 1
                log.step(step, loss, lr, budget_seconds)
                every = train_config.eval_every
                if main and every and step % every == 0 and step < train_config.steps:  # the end scores its own
                    log.heldout(step, heldout_curve(model))
                if step in snapshot_steps and main:
                    runs.save_snapshot(run, model, config, step)
                if step % train_config.checkpoint_every == 0:
                    checkpoint()
    except KeyboardInterrupt:  # a second Ctrl-C mid-step: the last checkpoint is the state to resume from
        raise TrainingInterrupted.mid_step(step, config["name"]) from None
    finally:
        metrics.close()

    seconds = time.perf_counter() - start
    if not main:
        return None
    checkpoint("evaluating")
    result = _finish(run, config, model, corpus, device, tokenizer, (start_step, step), seconds, elapsed_before)
    if not math.isnan(result.heldout_loss):
        logger.scalars({"heldout/loss": result.heldout_loss}, step * tokens_per_step)
        if train_config.eval_every:  # the curve's last point: the final held-out loss, on the same windows
            with open(run / runs.METRICS_FILE, "a", encoding="utf-8") as handle:
                handle.write(json.dumps({"step": step, "heldout_loss": round(result.heldout_loss, 5)}) + "\n")
    return result


def _finish(run: Path, config: dict, model, corpus: Corpus, device, tokenizer, steps, seconds, elapsed_before):
    """After the last step: the held-out perplexity at the train length and/or (a task run, or a
    task mixed in) exact match at the task's training sizes, the finished config.json, the
    TrainResult. ``steps``: (first step of this process, last step)."""
    start_step, step = steps
    model_config, train_config = ModelConfig.from_dict(config["model"]), TrainConfig.from_dict(config["train"])
    model.eval()
    task = TaskTraining.plan(train_config, model_config) or TaskMix.plan(train_config, model_config)
    nan = float("nan")
    text = not isinstance(task, TaskTraining)  # a text run, perhaps with a task mixed in
    heldout = _heldout(model, corpus, config, device, tokenizer) if text else {"loss": nan, "ppl": nan, "bpb": None}
    tokens_per_step = train_config.batch_size * model_config.train_length
    config.update(
        status="finished",
        steps_done=step,
        train_seconds=round(seconds, 1),
        tokens_per_s=round((step - start_step) * tokens_per_step / max(seconds - elapsed_before, 1e-9)),
    )
    if task:
        scheme = position_schemes.for_training(model_config, train_config)
        config["task_accuracy"] = task_accuracy(task.task, task.sizes, model, device, scheme=scheme)
    if text:
        config["heldout"] = {"length": model_config.train_length, **heldout}
    if step == start_step:
        config.pop("tokens_per_s")
    if device.type == "cuda":
        config["peak_memory_gib"] = round(torch.cuda.max_memory_allocated(device) / 2**30, 3)
    runs.write_config(run, config)
    return TrainResult(
        run=run,
        steps=step,
        heldout_loss=heldout["loss"],
        heldout_perplexity=heldout["ppl"],
        seconds=seconds,
        heldout_length=model_config.train_length,
        heldout_bpb=heldout["bpb"],
        task_accuracy=config.get("task_accuracy"),
        heldout_tokens=int(heldout.get("tokens") or 0),
    )


def _heldout(model, corpus: Corpus, config: dict, device, tokenizer) -> dict:
    """Perplexity at the train length on the corpus' held-out text (``eval_tokens`` of it)."""
    heldout = _HeldoutCurve(corpus, config, device, tokenizer).scores(model)
    keys = ("loss", "ppl", "ci_low", "ci_high", "bpb", "windows", "spans", "documents", "tokens")
    return {key: heldout[key] for key in keys}
