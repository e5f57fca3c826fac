"""What a training run writes as it goes: metrics.jsonl (cut back to a checkpoint's step on resume),
the loggers, and the held-out validation curve (--eval-every)."""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

import torch
from rich.progress import Progress

from poscli.config import TrainConfig
from poscli.core.io import atomic_write
from poscli.data.corpus import Corpus
from poscli.errors import PoscliError
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

    def heldout(self, step: int, losses: dict[int, float], train_length: int) -> None:
        """A point of the validation curve: {"step", "heldout_loss" (at the train length), "heldout" (every
        length's)} in metrics.jsonl; the logger's heldout/loss (the train length) and heldout/loss_at_L."""
        record: dict = {"step": step, "heldout": {str(length): round(loss, 5) for length, loss in losses.items()}}
        if train_length in losses:
            record["heldout_loss"] = round(losses[train_length], 5)
        self.metrics.write(json.dumps(record) + "\n")
        self.metrics.flush()
        scalars = {"heldout/loss" if length == train_length else f"heldout/loss_at_{length}": loss
                   for length, loss in losses.items()}  # fmt: skip
        self.logger.scalars(scalars, step * self.tokens_per_step)


CURVE_POINTS, CURVE_SHARE, CURVE_TOKENS = 20, 0.10, 16384  # the default curve: points, share of the time, sample


def curve_every(train_config: TrainConfig, train_length: int, tokens: int, lengths: list[int]) -> int:
    """Steps between the validation curve's points: ``--eval-every`` where given, else about
    CURVE_POINTS points, fewer where they would cost more than CURVE_SHARE of the training time (an
    evaluation scores ``tokens`` at each length forward only, measured at about half the cost of
    training on as many tokens: 12.3% of a 600-step RoPE run's time for 20 points at 256 and 1k on
    2 cores, docs/guide.md); 0 (no curve) where fewer than 2 points fit."""
    if train_config.eval_every is not None:
        return train_config.eval_every
    steps = train_config.steps
    cost = len(lengths) * tokens / (2 * train_config.batch_size * train_length)  # in training steps
    points = min(CURVE_POINTS, int(CURVE_SHARE * steps / max(cost, 1e-9)))
    return 0 if points < 2 else -(-steps // points)


def widened_every(every: int, point_seconds: float, step_seconds: float) -> int:
    """The spacing, at least ``every`` steps, at which a curve point of ``point_seconds`` costs at most
    CURVE_SHARE of the training time between points (``step_seconds`` a step)."""
    return max(every, math.ceil(point_seconds / (CURVE_SHARE * step_seconds)))


def heldout_scores(model, eval_set, length: int, device) -> dict:
    """``poscli.evaluation.evaluate.perplexity``'s scores of ``eval_set`` at ``length``, in eval mode,
    the model back in its mode after."""
    was_training = model.training
    model.eval()
    try:
        return perplexity(model, eval_set, length, device)
    finally:
        model.train(was_training)


def heldout_set(corpus: Corpus, length: int, tokens: int, tokenizer):
    """The held-out windows of ``length`` holding about ``tokens`` targets (the same every time)."""
    token_bytes = None if tokenizer is None or tokenizer.spec == "bytes" else tokenizer.token_bytes()
    return build_eval_set(corpus, length, tokens, token_bytes=token_bytes)


class HeldoutCurve:
    """The validation curve (``--eval-every``, ``--eval-lengths``): the held-out loss at each of its
    lengths (default: the train length and 4x; those the encoding cannot represent left out) on the
    same held-out sample every time, min(--eval-tokens, CURVE_TOKENS) targets per length, every
    ``every`` steps and at the last; what it cost, in seconds."""

    def __init__(self, corpus: Corpus | None, config: dict, device, tokenizer, max_length: int | None = None):
        train_config = TrainConfig.from_dict(config["train"])
        self.train_length = int(config["model"]["train_length"])
        self.corpus, self.device, self.tokenizer = corpus, device, tokenizer
        self.tokens = min(train_config.eval_tokens, CURVE_TOKENS)
        wanted = train_config.eval_lengths or [self.train_length, 4 * self.train_length]
        heldout = int((config.get("data") or {}).get("heldout_tokens") or 0)
        self.left_out: dict[int, str] = {}  # a length the curve cannot score, and why: said in its lines
        for length in dict.fromkeys(wanted):
            if max_length is not None and length > max_length:
                self.left_out[length] = f"past the encoding's {max_length} positions"
            elif heldout and length >= heldout:
                self.left_out[length] = f"longer than the {heldout:,} held-out tokens"
        self.lengths = [length for length in dict.fromkeys(wanted) if length not in self.left_out]
        self.every = curve_every(train_config, self.train_length, self.tokens, self.lengths) if corpus else 0
        self.chosen = train_config.eval_every is not None  # --eval-every given: its spacing is kept as it is
        self.planned_every = self.every  # the spacing before the first point's cost was known
        self.sets: dict[int, object] = {}
        self.seconds, self.points, self.last_step = 0.0, 0, -1

    def schedule(self) -> str:
        """The run's line saying when the curve is scored."""
        lengths = ", ".join(map(str, self.lengths))
        left = "".join(f"; {length} left out: {why}" for length, why in self.left_out.items())
        return (f"validation curve: the held-out loss every {self.every} steps at lengths {lengths}, {self.tokens:,} "
                f"held-out tokens each (--eval-every N sets its spacing; 0: none){left}")  # fmt: skip

    def due(self, step: int, last: int) -> bool:
        return bool(self.every) and (step % self.every == 0 or step == last) and step != self.last_step

    def __call__(self, model, step: int) -> dict[int, float]:
        """The held-out loss at each length (a length whose held-out text is too short is dropped)."""
        started = time.perf_counter()
        losses = {}
        for length in list(self.lengths):
            if length not in self.sets:
                try:
                    self.sets[length] = heldout_set(self.corpus, length, self.tokens, self.tokenizer)
                except PoscliError:  # too little held-out text for this length: the curve goes on without it
                    self.lengths.remove(length)
                    self.left_out[length] = "too little held-out text for one window"
                    continue
            losses[length] = float(heldout_scores(model, self.sets[length], length, self.device)["loss"])
        self.seconds += time.perf_counter() - started
        self.points, self.last_step = self.points + 1, step
        return losses

    def fit_to_cost(self, point_seconds: float, step_seconds: float) -> str | None:
        """After the first point, with the default spacing: widen it so that a point costs at most
        CURVE_SHARE of the training between points (the spacing was planned from a cost model in which
        a held-out token costs half a training token; an encoding whose attention is written out pair by
        pair, CoPE or stick-breaking, pays far more at 4x the train length). -> the line saying so, or
        None where the spacing stands."""
        if self.chosen or not self.every or step_seconds <= 0:
            return None
        needed = widened_every(self.every, point_seconds, step_seconds)
        if needed == self.every:
            return None
        self.every = needed
        return (f"validation curve: a point costs {point_seconds:.1f} s, {point_seconds / step_seconds:.0f} training "
                f"steps; now every {needed} steps to stay under {CURVE_SHARE:.0%} of the training time "
                "(--eval-every N sets it)")  # fmt: skip

    def summary(self, train_seconds: float) -> dict:
        """What config.json records of the curve: its schedule, sample and cost."""
        share = self.seconds / train_seconds if train_seconds > 0 else 0.0
        widened = {"planned_every": self.planned_every} if self.planned_every != self.every else {}
        return {"every": self.every, **widened, "lengths": self.lengths, "tokens": self.tokens, "points": self.points,
                "seconds": round(self.seconds, 2), "share_of_training": round(share, 4),
                "left_out": {str(length): why for length, why in self.left_out.items()}}  # fmt: skip
