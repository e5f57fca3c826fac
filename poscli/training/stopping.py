"""Stopping a run cleanly: Ctrl-C or SIGTERM asks, every data-parallel process agrees at a step's
end, a checkpoint is written, and TrainingInterrupted says so."""

from __future__ import annotations

import signal
import threading
from pathlib import Path

import torch

from poscli.errors import PoscliError
from poscli.training.distributed import Group


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


class StopRequest:
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


def stopping_now(stop: StopRequest, group: Group) -> bool:
    """A signal arrived, in any process: every process stops at the same step, or the others would wait forever."""
    stopping = stop.signal is not None
    if group.active:
        stopping = bool(group.mean(torch.tensor([float(stopping)])) > 0)
    return stopping
