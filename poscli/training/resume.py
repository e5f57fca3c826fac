"""``poscli train --resume NAME`` (an extension too): a run continued from its last checkpoint, only
what may change changed."""

from __future__ import annotations

import contextlib
from pathlib import Path

import torch
from rich.console import Console

from poscli import encodings
from poscli.config import ModelConfig, TrainConfig
from poscli.data.checks import check_data_settings
from poscli.data.corpus import CorpusOptions, load_corpus
from poscli.data.tokenizer import run_tokenizer
from poscli.errors import Answer, PoscliError
from poscli.model import runs
from poscli.model.gpt import GPT
from poscli.training.distributed import check_batch, group_from_environment
from poscli.training.metrics import cut_metrics
from poscli.training.optim import make_optimizer
from poscli.training.train import TrainResult, run_device, train_loop

# Options that may differ when a run is resumed: where it runs and how often it reports, not what it computes.
RESUMABLE_CHANGES = {
    "device",
    "log_every",
    "checkpoint_every",
    "accumulate",
    "compile",
    "eval_every",
    "eval_lengths",
    "keep_optimizer",
}


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
    with runs.training_alone(run) if group.is_main else contextlib.nullcontext():  # not resumed twice at once
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
            check_data_settings(train_config)
        fresh = not (run / runs.CHECKPOINT_FILE).exists() and config.get("parent") is None
        checkpoint = None if fresh else runs.load_checkpoint(run)  # a damaged file fails before anything loads
        check_batch(group, train_config.batch_size, train_config.accumulate)
        device = run_device(group, train_config.device)
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
            cut_metrics(run, step)
            runs.write_config(run, config)
            console.print(f"resuming run [bold]{run.name}[/] at step {step} of {train_config.steps} on {device}")
        return train_loop(
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
