"""The interface of a training-time position scheme (one file per scheme in this package).

A scheme is turned on by a field of the training config (a length; 0: off) that a run's
config.json records, so a run resumes with the same positions; ``poscli train`` or ``poscli extend``
sets the field through the flag the scheme names. During training, each step's positions come from
``draw``, after the step's batch, from the same generator, so a run is reproducible from its seed.
Shape legend: B batch, T sequence length.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    import torch

    from poscli.config import ModelConfig, TrainConfig


class PositionScheme:
    """Base class. Class attributes declare the scheme:

    - ``field``: the TrainConfig field that turns it on and holds its length (0: off);
    - ``flag``: the option that sets that field, for messages;
    - ``summary`` and ``citation``: for the docs and ``poscli methods``.
    """

    name: ClassVar[str] = ""
    summary: ClassVar[str] = ""
    citation: ClassVar[str] = ""
    field: ClassVar[str] = ""
    flag: ClassVar[str] = ""

    def __init__(self, model_config: ModelConfig, train_config: TrainConfig):
        self.model_config, self.train_config = model_config, train_config
        self.limit = int(getattr(train_config, self.field))  # positions are drawn from [0, limit)

    @classmethod
    def check(cls, encoding: type, model_config: ModelConfig, train_config: TrainConfig) -> None:
        """Raise a one-line PoscliError for a setting the scheme cannot train with. ``encoding``: the
        model's PositionalEncoding class (a scheme reads what it can do, never its name)."""

    @classmethod
    def model_changes(cls, encoding: type, model_config: ModelConfig, train_config: TrainConfig) -> dict[str, Any]:
        """Config changes the model needs to represent the positions drawn; none by default."""
        return {}

    def draw(self, batch_size: int, length: int, generator: torch.Generator, device: torch.device) -> torch.Tensor:
        """One step's positions, increasing along T, each below ``self.limit``: (T,) shared by every
        sequence of the batch (one forward for the batch) or (B, T). int64."""
        raise NotImplementedError

    def evaluation_positions(
        self, batch_size: int, length: int, generator: torch.Generator, device: torch.device
    ) -> torch.Tensor | None:
        """The positions an evaluation gives a run trained with this scheme: None (the default)
        for 0..T-1, as a run extended by PoSE is meant to be read; or (B, T) int64, as randomized
        positions are read at test time too (Ruoss et al., 2023)."""
        return None
