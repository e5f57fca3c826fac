"""What a training run writes as it goes: metrics.jsonl (cut back to a checkpoint's step on resume),
the loggers, and the held-out validation curve (--eval-every)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import torch
from rich.progress import Progress

from poscli.config import TrainConfig
from poscli.core.io import atomic_write
from poscli.data.corpus import Corpus
from poscli.evaluation.evalset import build_eval_set
from poscli.evaluation.evaluate import perplexity
from poscli.model import runs


def cut_metrics(run: Path, step: int) -> None:
    """Drop metrics logged after the checkpoint, so the resumed run logs each step exactly once."""
    path = run / runs.METRICS_FILE
    if not path.exists():
        return
    kept = [record for record in runs.read_metrics(run) if record["step"] <= step]  # a torn last line: dropped
    with atomic_write(path) as handle:
        handle.write("".join(json.dumps(record) + "\n" for record in kept))


class RunLog:
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


class HeldoutCurve:
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
