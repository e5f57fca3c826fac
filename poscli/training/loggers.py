"""Where a run's training curve goes besides ``RUN/metrics.jsonl``, which is always written:
``--logger tensorboard`` (event files in ``RUN/tensorboard``: ``tensorboard --logdir results/runs``)
or ``--logger wandb`` (Weights & Biases, offline unless ``WANDB_MODE`` says otherwise, in
``RUN/wandb``; ``wandb sync`` uploads it later). Each is an optional extra (``pip install
'poscli[tensorboard]'``, ``'poscli[wandb]'``). The x axis is tokens seen, so runs of different
batch sizes and lengths share one; the scalars are ``train/loss``, ``train/lr``,
``train/tokens_per_s`` and, at the end, ``heldout/loss`` at the train length.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import re
from collections.abc import Iterator
from pathlib import Path

from poscli.errors import PoscliError

LOGGERS = ("jsonl", "tensorboard", "wandb")  # jsonl: metrics.jsonl only


def check_logger(kind: str) -> None:
    """A known logger whose package is installed, or a one-line error saying what to install."""
    if kind not in LOGGERS:
        raise PoscliError(f"--logger {kind!r}: choose one of {', '.join(LOGGERS)}")
    if kind != "jsonl" and importlib.util.find_spec(kind) is None:
        raise PoscliError(f"--logger {kind} needs the {kind} package: pip install 'poscli[{kind}]'")


class Logger:
    """Logs nothing (``--logger jsonl``: metrics.jsonl holds the curve)."""

    def scalars(self, values: dict[str, float], tokens: int) -> None:
        """``values`` (name -> number) at ``tokens`` tokens seen."""

    def close(self) -> None:
        pass


class TensorBoardLogger(Logger):
    def __init__(self, run: Path, config: dict, start_tokens: int):
        from torch.utils.tensorboard import SummaryWriter

        # a resumed run drops the events past its checkpoint, which it trains again
        self.writer = SummaryWriter(log_dir=str(run / "tensorboard"), purge_step=start_tokens or None)
        if not start_tokens:
            self.writer.add_text("config", f"```\n{json.dumps(config, indent=2)}\n```")

    def scalars(self, values: dict[str, float], tokens: int) -> None:
        for name, value in values.items():
            self.writer.add_scalar(name, value, global_step=tokens)
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()


class WandbLogger(Logger):
    def __init__(self, run: Path, config: dict, start_tokens: int):
        import wandb

        self.run = wandb.init(
            project=os.environ.get("WANDB_PROJECT", "poscli"),
            name=config["name"],
            id=re.sub(r"[^A-Za-z0-9_-]", "-", f"{config['name']}-{config.get('created', '')}"),  # resumes join it
            dir=str(run),
            config=config,
            mode=os.environ.get("WANDB_MODE", "offline"),
            resume="allow",
        )

    def scalars(self, values: dict[str, float], tokens: int) -> None:
        self.run.log({**values, "tokens": tokens})

    def close(self) -> None:
        self.run.finish()


@contextlib.contextmanager
def opened(kind: str, run: Path, config: dict, main: bool, start_tokens: int) -> Iterator[Logger]:
    """The run's logger (a silent one on a data-parallel process other than rank 0), closed after."""
    check_logger(kind)
    kinds = {"tensorboard": TensorBoardLogger, "wandb": WandbLogger}
    logger = kinds[kind](run, config, start_tokens) if main and kind in kinds else Logger()
    try:
        yield logger
    finally:
        logger.close()
