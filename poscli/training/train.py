"""The training loop: AdamW (or Muon, ``poscli.training.optim``), linear warmup then cosine decay, random windows of
the train corpus.

``train()`` works from Python; ``poscli train`` is a thin wrapper around it.
"""

from __future__ import annotations

import contextlib
import math
import os
import shutil
import signal
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import torch
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from poscli import encodings
from poscli.config import ModelConfig, TrainConfig
from poscli.core.device import autocast, compile_model, select_device, take_free_cores
from poscli.core.provenance import environment
from poscli.data import tokenizer as tokenizers
from poscli.data.checks import check_data_settings
from poscli.data.corpus import Corpus, CorpusOptions, absolute_spec, load_corpus
from poscli.data.prepared import PreparedCorpus
from poscli.errors import PoscliError
from poscli.extension import positions as position_schemes
from poscli.model import runs
from poscli.model.gpt import GPT
from poscli.training import loggers
from poscli.training.batches import check_corpus_fits, micro_batches, next_batch, token_stream
from poscli.training.distributed import Group, check_batch, data_parallel_loss, group_from_environment
from poscli.training.distributed import start as start_group
from poscli.training.memory import training_memory
from poscli.training.metrics import HeldoutCurve, RunLog, heldout_scores, heldout_set
from poscli.training.optim import make_optimizer, set_learning_rate
from poscli.training.stopping import StopRequest, TrainingInterrupted, stopping_now
from poscli.training.tasks import TaskMix, TaskTraining, task_accuracy, training_mix


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
    curve: dict | None = None  # the validation curve's schedule and cost (HeldoutCurve.summary)

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
        if self.curve:
            c = self.curve
            lengths = ", ".join(str(length) for length in c["lengths"])
            parts.append(f"validation curve: {c['points']} points at lengths {lengths} ({c['tokens']:,} held-out "
                         f"tokens each), {c['share_of_training']:.1%} of the training time")  # fmt: skip
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


def resolve_tokenizer(train_config: TrainConfig, corpus, parent: Path | None = None):
    """A new run's tokenizer: its parent's (an extension), a prepared corpus' own, bytes, a BPE
    trained now on the corpus' training documents (``bpe:N``), or a tokenizer.json (a path)."""
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
    check_data_settings(train_config)
    check_batch(group, train_config.batch_size, train_config.accumulate)
    name = name or encodings.run_name_base(model_config.pe)
    runs.check_name(name)
    if group.is_main and not replace:
        runs.check_free(
            name, results, resume=f"poscli {'extend ' + name + ' --resume' if lineage else 'train --resume ' + name}"
        )
    device = run_device(group, train_config.device)
    parent = runs.find_run(lineage["parent"], results) if lineage and lineage.get("parent") else None
    corpus, tokenizer, model_config, train_config = _data_and_configs(model_config, train_config, parent)

    torch.manual_seed(train_config.seed)
    model = GPT(model_config)
    if initial_weights is not None:
        model.load_state_dict(initial_weights)
    model = model.to(device)
    generator = torch.Generator().manual_seed(train_config.seed)
    optimizer = make_optimizer(model, train_config)

    # one process trains a run at a time: another that would replace it now, or train it too, is refused
    holding = runs.training_alone(runs.runs_dir(results) / name) if group.is_main else contextlib.nullcontext()
    with holding:
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
            return train_loop(*loop, group=group, tokenizer=tokenizer)

        estimate = training_memory(
            model, model_config.train_length, train_config.batch_size, train_config.accumulate, device,
            train_config.dtype, group.world_size,
        )  # fmt: skip
        config["memory_estimate_gib"] = round(estimate.total / 2**30, 3)
        tokenizer.save(run)
        runs.write_config(run, config)
        runs.save_checkpoint(run, model, optimizer, generator, step=0, elapsed=0.0)
        _announce(console, run, config, model, device, group, estimate)
        return train_loop(*loop, group=group, tokenizer=tokenizer)


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


def run_device(group: Group, requested: str) -> torch.device:
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


def train_loop(
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


def _score_curve(curve, log, model, step: int, train_length: int, console, seconds: float, steps: int) -> None:
    """A point of the validation curve, logged; after the first, the spacing fitted to what a point
    costs against a training step (``seconds`` and ``steps``: this process's so far, before this
    point, the curve's earlier points included)."""
    spent = curve.seconds  # the curve's seconds before this point
    log.heldout(step, curve(model, step), train_length)
    if curve.points == 1 and steps > 0:
        step_seconds = (seconds - spent) / steps  # training alone
        if line := curve.fit_to_cost(curve.seconds - spent, step_seconds):
            console.print(line)


def _steps(
    run, config, model, optimizer, generator, corpus, device, console, show_progress, start_step, elapsed_before,
    group: Group, tokenizer, logger: loggers.Logger,
) -> TrainResult | None:  # fmt: skip
    """``train_loop``'s body, with the run's logger (``poscli.training.loggers``) open."""
    main = group.is_main
    loss_fn = data_parallel_loss(model, group)
    model_config, train_config = ModelConfig.from_dict(config["model"]), TrainConfig.from_dict(config["train"])
    mix = training_mix(train_config, model_config, tokenizer)
    scheme = position_schemes.for_training(model_config, train_config)  # None: positions 0..T-1
    if train_config.compile:
        compile_model(model, device, model_config.train_length, report=console.print if main else lambda line: None)
    stream = token_stream(corpus)
    snapshot_steps = set(train_config.snapshot_steps())
    tokens_per_step = runs.tokens_per_step(config)
    budget_seconds = train_config.minutes * 60 if train_config.minutes else None
    start, step, progress = time.perf_counter() - elapsed_before, start_step, _progress_bar(console, show_progress)

    def checkpoint(status: str = "running") -> None:
        if main:
            runs.save_checkpoint(run, model, optimizer, generator, step, time.perf_counter() - start)
            runs.save_weights(model, run)
            runs.write_config(run, {**config, "status": status, "steps_done": step})
        if status == "running" and not group.active:  # a sweep's job: the cores freed by the others, or its share
            take_free_cores()

    metrics = open(run / runs.METRICS_FILE if main else os.devnull, "a", encoding="utf-8")  # noqa: SIM115
    curve = _heldout_curve(config, corpus, device, tokenizer, model, console if main else None)
    model.train()
    try:
        with progress, StopRequest() as stop:
            log = RunLog(metrics, progress, config["name"], step, train_config, tokens_per_step, start, logger)
            while step < train_config.steps:
                if stopping_now(stop, group):
                    checkpoint("interrupted")
                    raise TrainingInterrupted.by(stop.signal or signal.SIGTERM, step, run, main)
                elapsed = time.perf_counter() - start
                if budget_seconds is not None and elapsed >= budget_seconds:
                    break
                lr = set_learning_rate(optimizer, step, elapsed, budget_seconds, train_config)
                tokens, targets, positions, weights = next_batch(
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
                if main and curve.due(step, train_config.steps):
                    in_process = time.perf_counter() - start - elapsed_before  # this process's seconds
                    _score_curve(curve, log, model, step, model_config.train_length, console, in_process,
                                 step - start_step)  # fmt: skip
                if step in snapshot_steps and main:
                    runs.save_snapshot(run, model, config, step)
                if step % train_config.checkpoint_every == 0:
                    checkpoint()
            if main and curve.every and curve.last_step != step and step > start_step:  # stopped early (--minutes)
                log.heldout(step, curve(model, step), model_config.train_length)
    except KeyboardInterrupt:  # a second Ctrl-C mid-step: the last checkpoint is the state to resume from
        raise TrainingInterrupted.mid_step(step, config["name"]) from None
    finally:
        metrics.close()

    seconds = time.perf_counter() - start
    if not main:
        return None
    checkpoint("evaluating")
    if curve.points:
        config["curve"] = curve.summary(seconds)
    result = _finish(run, config, model, corpus, device, tokenizer, (start_step, step), seconds, elapsed_before)
    if not math.isnan(result.heldout_loss) and not curve.points:  # else the curve's points are the logger's
        logger.scalars({"heldout/loss": result.heldout_loss}, step * tokens_per_step)
    return result


def _heldout_curve(config: dict, corpus: Corpus, device, tokenizer, model, console) -> HeldoutCurve:
    """The validation curve's scorer (none for a task run: it has no text), its schedule said on
    ``console`` (None: another rank's process)."""
    model_config, train_config = ModelConfig.from_dict(config["model"]), TrainConfig.from_dict(config["train"])
    text = not isinstance(TaskTraining.plan(train_config, model_config), TaskTraining)
    curve = HeldoutCurve(corpus if text else None, config, device, tokenizer, model.encoding.max_length)
    if console is not None and curve.every:
        console.print(curve.schedule())
    return curve


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
    config.update(
        status="finished",
        steps_done=step,
        train_seconds=round(seconds, 1),
        tokens_per_s=round((step - start_step) * runs.tokens_per_step(config) / max(seconds - elapsed_before, 1e-9)),
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
    if not train_config.keep_optimizer:  # finished: nothing resumes it, and the weights are model.safetensors
        (run / runs.CHECKPOINT_FILE).unlink(missing_ok=True)
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
        curve=config.get("curve"),
    )


def _heldout(model, corpus: Corpus, config: dict, device, tokenizer) -> dict:
    """Perplexity at the train length on the corpus' held-out text (``eval_tokens`` of it)."""
    length, tokens = config["model"]["train_length"], TrainConfig.from_dict(config["train"]).eval_tokens
    heldout = heldout_scores(model, heldout_set(corpus, length, tokens, tokenizer), length, device)
    keys = ("loss", "ppl", "ci_low", "ci_high", "bpb", "windows", "spans", "documents", "tokens")
    return {key: heldout[key] for key in keys}
