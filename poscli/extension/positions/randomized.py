"""Randomized positional encodings (Ruoss et al., 2023): each training sequence gets T distinct
positions drawn from [0, MAX) and sorted, so a model trained at T sees positions up to MAX."""

from __future__ import annotations

import torch

from poscli.errors import PoscliError
from poscli.extension.positions import register
from poscli.extension.positions.protocol import PositionScheme


@register("randomized")
class Randomized(PositionScheme):
    summary = "each sequence's positions drawn from [0, MAX) without repeats and sorted (train --random-positions MAX)"
    citation = "Ruoss et al., 2023, Randomized Positional Encodings Boost Length Generalization of Transformers"
    field = "random_positions"
    flag = "--random-positions"

    @classmethod
    def check(cls, encoding, model_config, train_config) -> None:
        """MAX at least the train length, and an encoding that reads positions."""
        maximum = train_config.random_positions
        if not encoding.reads_positions:
            raise PoscliError(
                f"--pe {model_config.pe} reads no positions, so --random-positions changes nothing; drop it or "
                "choose another --pe"
            )
        if maximum < model_config.train_length:
            raise PoscliError(
                f"--random-positions {maximum} is shorter than --train-length {model_config.train_length}; "
                f"positions are drawn from [0, MAX), so use at least {model_config.train_length} (e.g. 16x: "
                f"{16 * model_config.train_length})"
            )

    @classmethod
    def model_changes(cls, encoding, model_config, train_config) -> dict:
        """A learned table gets a row for every position it may draw."""
        return encoding.grown_for_positions(model_config, train_config.random_positions)

    def draw(self, batch_size, length, generator, device) -> torch.Tensor:
        return sample_positions(batch_size, length, self.limit, generator, device)  # (B, T)


def sample_positions(
    batch_size: int, length: int, max_position: int, generator: torch.Generator, device: torch.device
) -> torch.Tensor:
    """For each sequence, ``length`` distinct positions drawn uniformly from [0, max_position) and
    sorted, used in place of 0..T-1. -> (B, T) int64."""
    rows = [torch.randperm(max_position, generator=generator)[:length].sort().values for _ in range(batch_size)]
    return torch.stack(rows).to(device)  # (B, T)
