"""Training-time position schemes: which positions a training step gives its tokens in place of
0..T-1, so that a model trained on windows of T tokens sees positions and distances beyond T. One
file per scheme in this package (see ``protocol.PositionScheme`` for the protocol,
``poscli.core.registry`` for the pattern): randomized positions (``poscli train --random-positions
MAX``, Ruoss et al., 2023) and PoSE's skipping positions (``poscli extend --pose``, Zhu et al., 2024).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from poscli.core.registry import Registry
from poscli.errors import PoscliError

if TYPE_CHECKING:
    from poscli.config import ModelConfig, TrainConfig
    from poscli.extension.positions.protocol import PositionScheme


def _base() -> type:
    from poscli.extension.positions.protocol import PositionScheme

    return PositionScheme


REGISTRY: Registry = Registry(
    "training position scheme", __name__, "--random-positions", "randomized", _base, protocol="protocol"
)
register = REGISTRY.register
names = REGISTRY.names
get = REGISTRY.get


def chosen(train_config: TrainConfig) -> type[PositionScheme] | None:
    """The scheme a training config turns on (its field set), or None: positions 0..T-1."""
    found = [get(name) for name in REGISTRY.builtin_names() if getattr(train_config, get(name).field, 0)]
    if len(found) > 1:
        flags = " and ".join(scheme.flag for scheme in found)
        raise PoscliError(f"{flags} both choose the training positions; use one")
    return found[0] if found else None


def for_training(model_config: ModelConfig, train_config: TrainConfig) -> PositionScheme | None:
    """The chosen scheme, ready to draw a training run's positions; None: positions 0..T-1."""
    scheme = chosen(train_config)
    return scheme(model_config, train_config) if scheme is not None else None


def configured(encoding: type, model_config: ModelConfig, train_config: TrainConfig) -> ModelConfig:
    """The model config checked against the chosen scheme, and grown where the scheme needs it (a
    learned table gets a row for every position it may draw). ``encoding``: the model's
    PositionalEncoding class."""
    from poscli.config import ModelConfig

    scheme = chosen(train_config)
    if scheme is None:
        return model_config
    scheme.check(encoding, model_config, train_config)
    changes = scheme.model_changes(encoding, model_config, train_config)
    return ModelConfig.from_dict({**model_config.to_dict(), **changes}) if changes else model_config
