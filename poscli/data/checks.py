"""The checks of a training config that need the data layer: the passkey format, the tokenizer and
split specs, and how a dataset's rows become documents. ``TrainConfig.validate`` checks its own
fields; whoever builds a config to train with calls ``check_data_settings`` too (the config sits a
layer above data, so it is read here by its field names)."""

from __future__ import annotations

from typing import Any

from poscli.data.corpus import parse_split
from poscli.data.passkey import PASSKEY_LENGTHS, check_format
from poscli.data.sources.base import RowOptions
from poscli.data.tokenizer import parse_spec
from poscli.errors import PoscliError


def check_data_settings(config: Any) -> None:
    """Stop in one line at a passkey format, tokenizer, split or row rule of a ``TrainConfig`` that
    the data layer cannot read."""
    check_format(config.passkey_template, config.passkey_keys)
    if config.passkey_lengths not in PASSKEY_LENGTHS:
        raise PoscliError(f"--passkey-lengths {config.passkey_lengths!r} is not one of {', '.join(PASSKEY_LENGTHS)}")
    check_data_spec(config.data)
    parse_spec(config.tokenizer)
    parse_split(config.split)
    RowOptions.of(config).validate()


def check_data_spec(spec: str) -> None:
    """Stop in one line at a ``--data`` no source reads (a missing file, a misspelt name), listing
    the forms it takes; reads no file and opens no dataset, so a recipe is checked before it runs."""
    from poscli.data import prepared, sources

    if not sources.is_named(spec) and prepared.is_prepared(spec):
        return
    sources.resolve(spec)
