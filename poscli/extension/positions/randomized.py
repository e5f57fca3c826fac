"""Randomized positional encodings (Ruoss et al., 2023): each training sequence gets T distinct
positions drawn from [0, MAX) and sorted, so a model trained at T sees positions up to MAX."""

from __future__ import annotations

import torch

from poscli.errors import NotApplicable, PoscliError
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

    def evaluation_positions(self, batch_size, length, generator, device) -> torch.Tensor:
        """Drawn as in training, as Ruoss et al. (2023) evaluate (their model samples positions at
        every call): each sequence's first ``length`` of max(train length, length) sorted
        positions from [0, MAX), so an instance within the train length sees the positions its
        training windows gave it, and a longer one ``length`` positions from the same range. An
        instance longer than MAX has no such positions (NotApplicable: the cell is n/a)."""
        if length > self.limit:
            raise NotApplicable(f"positions drawn from [0, {self.limit}) cannot place {length} tokens")
        window = max(self.model_config.train_length, length)
        return sample_positions(batch_size, window, self.limit, generator, device)[:, :length]  # (B, T)


def sample_positions(
    batch_size: int, length: int, max_position: int, generator: torch.Generator, device: torch.device
) -> torch.Tensor:
    """For each sequence, ``length`` distinct positions drawn uniformly from [0, max_position) and
    sorted, used in place of 0..T-1. -> (B, T) int64."""
    rows = [torch.randperm(max_position, generator=generator)[:length].sort().values for _ in range(batch_size)]
    return torch.stack(rows).to(device)  # (B, T)
