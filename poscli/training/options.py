"""The options of ``poscli train``, ``extend`` and ``eval`` read as the code uses them: the requests'
fields (``poscli.training.requests``) as Option records, each train option's config field and
default, the --size presets, a recipe's values read as their flags read them, and ``train``'s
options checked as a whole (``train_plan``). Recipes and ``--resume`` read them here, so the
library never imports its CLI.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, TypeVar

from poscli.config import AttentionOptions, ModelConfig, TrainConfig
from poscli.data.checks import check_data_settings
from poscli.errors import PoscliError
from poscli.training.requests import Option, declared_options
from poscli.training.requests.evaluate import EvalRequest
from poscli.training.requests.extend import ExtendRequest
from poscli.training.requests.train import TrainRequest

__all__ = ["EvalRequest", "ExtendRequest", "Option", "TrainRequest"]

_MODEL, _TRAIN = ModelConfig(), TrainConfig()
R = TypeVar("R")

# --size presets: the model's shape and the optimisation that suits it; an option given explicitly
# overrides its preset's value. tiny is poscli's CPU default (0.8M parameters); small is nanoGPT's
# character-level Shakespeare model (Karpathy, 2022: 6 x 384 x 6); base is GPT-2 small's shape
# (Radford et al., 2019: 12 x 768 x 12, 1024 tokens, lr 6e-4), for a GPU (--accumulate N reaches
# GPT-2's 0.5M-token batch in N micro-batches).
SIZES: dict[str, dict[str, Any]] = {
    "tiny": {
        "layers": _MODEL.n_layer,
        "heads": _MODEL.n_head,
        "width": _MODEL.d_model,
        "train_length": _MODEL.train_length,
        "batch_size": _TRAIN.batch_size,
        "lr": _TRAIN.lr,
        "warmup": _TRAIN.warmup_steps,
    },
    "small": {"layers": 6, "heads": 6, "width": 384, "train_length": 512, "batch_size": 32, "lr": 6e-4, "warmup": 200},
    "base": {
        "layers": 12,
        "heads": 12,
        "width": 768,
        "train_length": 1024,
        "batch_size": 32,
        "lr": 6e-4,
        "warmup": 500,
    },
}

# --------------------------------------------------------------------------- the options, declared once
#
# Every option of poscli train, extend and eval is a field of its request (poscli.training.requests):
# the CLI builds its flags from them (poscli.cli.app), recipes accept exactly their names as keys, and
# --resume and the summaries read their config fields and defaults. A new option is one field there.

TRAIN_DECLARED: dict[str, Option] = declared_options(TrainRequest)
EXTEND_DECLARED: dict[str, Option] = declared_options(ExtendRequest)
EVAL_DECLARED: dict[str, Option] = declared_options(EvalRequest)


# option (as a Python name) -> (config field, default), the options that make a run what it is.
# Lengths are given as numbers of tokens. None: the --size preset's value (SIZES).
TRAIN_OPTIONS: dict[str, tuple[str, Any]] = {
    name: (option.field or name, [] if option.kind is list else option.default)
    for name, option in TRAIN_DECLARED.items()
    if not option.runner
}
# Options that change how a run is run, not what it is: they never make a run "different".
RUN_ONLY = {"device", "checkpoint_every", "accumulate", "compile", "eval_every", "eval_lengths", "keep_optimizer"}
# Options the runner of a sweep or recipe sets itself.
RUNNER_OPTIONS = {name for name, option in (TRAIN_DECLARED | EXTEND_DECLARED).items() if option.runner}
LENGTH_OPTIONS = {"train_length": "--train-length", "random_positions": "--random-positions"}

# What a LongRoPE factor search or poscli tune scores a candidate by: every token of training-split
# windows, or only the answers of passkey prompts (LongRoPE2's needle-driven perplexity).
SCORES = ("perplexity", "needle")


def check_score(score: str, flag: str = "--score") -> None:
    """Stop in one line when ``score`` is not one of ``SCORES``."""
    if score not in SCORES:
        raise PoscliError(f"{flag} {score!r} is unknown; choose {' or '.join(SCORES)}")


def check_positive(settings, *names: str) -> None:
    """Stop in one line at the first of ``names`` (a field of ``settings`` and its --flag) below 1."""
    for name in names:
        if getattr(settings, name) < 1:
            raise PoscliError(f"--{name} must be at least 1, got {getattr(settings, name)}")


# `poscli extend`'s and `poscli eval`'s options and their defaults: recipes' [[extend]] and [[eval]]
# accept exactly these (and `runs`, `name`, `budgets`).
EXTEND_OPTIONS: dict[str, Any] = {name: option.default for name, option in EXTEND_DECLARED.items() if not option.runner}
EVAL_OPTIONS: dict[str, Any] = {name: option.default for name, option in EVAL_DECLARED.items() if not option.runner}


def parsed(declared: dict[str, Option], given: dict[str, Any]) -> dict[str, Any]:
    """Every declared option's value as the command line hands it to its command: the given ones
    read as their flags read them (a length from "4k", a size from "200M", a choice checked, a
    table {KEY = VALUE} as KEY=VALUE items), the others their defaults. What a recipe's step runs
    with."""
    unknown = sorted(set(given) - set(declared))
    if unknown:
        raise PoscliError(f"no option {unknown[0]!r}; the options are {', '.join(declared)}")
    values = {name: option.default for name, option in declared.items()}
    for name, value in given.items():
        values[name] = None if value is None else parsed_value(declared[name], value)
    return values


def request_from(kind: type[R], given: dict[str, Any]) -> R:
    """A command's request (``TrainRequest``, ``ExtendRequest`` or ``EvalRequest``) from option values
    by name, each read as its flag reads it (:func:`parsed`); the others their defaults. What a
    recipe's step runs with."""
    return kind(**parsed(declared_options(kind), given))


def request_values(made: Any) -> dict[str, Any]:
    """A request's fields by name (what the config-building code below reads)."""
    return {each.name: getattr(made, each.name) for each in dataclasses.fields(made)}


def parsed_value(option: Option, value: Any) -> Any:
    """One option's value read as its flag reads it (see :func:`parsed`)."""
    from poscli.core.lengths import parse_length, parse_lengths, parse_size

    flag = "--" + option.name.replace("_", "-")
    if isinstance(value, dict):
        return [f"{key}={setting}" for key, setting in value.items()]
    if option.parse == "lengths":
        return value if isinstance(value, list) else parse_lengths(str(value), flag)
    if option.parse in ("length", "length-or-zero") and not isinstance(value, int):
        text = str(value).strip()
        return 0 if option.parse == "length-or-zero" and text == "0" else parse_length(text, flag)
    if option.parse == "bytes" and not isinstance(value, int):
        try:
            return parse_size(value)
        except ValueError:
            raise PoscliError(
                f"{flag} {value!r} is not a size; use a number of bytes with K, M or G, e.g. 200M"
            ) from None
    if option.choices and str(value) not in option.choices:
        raise PoscliError(f"{flag} {value!r}: choose one of {', '.join(option.choices)}")
    if option.kind is list:
        return value if isinstance(value, list) else [str(value)]
    if option.kind is bool and not isinstance(value, bool):
        raise PoscliError(f"{flag} takes true or false, got {value!r}")
    kinds = {int: "a whole number, e.g. 4", float: "a number, e.g. 0.5", str: "a text in quotes"}
    try:
        converted = option.kind(value)
    except (TypeError, ValueError):
        raise PoscliError(f"{flag} {value!r}: give {kinds.get(option.kind, option.kind.__name__)}") from None
    if isinstance(converted, float) and not math.isfinite(converted):
        raise PoscliError(f"{flag} {value!r}: give a finite number")
    return converted


def train_defaults() -> dict[str, Any]:
    return {option: default for option, (_, default) in TRAIN_OPTIONS.items()}


def with_size(values: dict[str, Any]) -> dict[str, Any]:
    """``values`` with every option left unset (None) taken from the --size preset."""
    size = getattr(values.get("size"), "value", values.get("size")) or _TRAIN.size
    if size not in SIZES:
        raise PoscliError(f"--size {size!r} is not a preset; choose one of: {', '.join(SIZES)} (e.g. --size small)")
    return {
        **values,
        **{option: value for option, value in SIZES[size].items() if values.get(option) is None},
        "size": size,
    }


def saved_value(config: dict, option: str) -> Any:
    """What a run's config.json holds for a ``poscli train`` option (pe options in full)."""
    field = TRAIN_OPTIONS[option][0]
    if field == "pe_options":
        from poscli import encodings

        return encodings.resolve_options(ModelConfig.from_dict(config["model"])).pe_options
    if field == "attention_options":
        return config["model"].get(field) or {}  # runs from before the switches recorded none
    return {**config["model"], **config["train"]}.get(field)


def wanted_value(config: dict, option: str, value: Any) -> Any:
    """An option's value as config.json would hold it (lengths parsed, pe options in full)."""
    from poscli.core.lengths import parse_length

    if option in LENGTH_OPTIONS:
        return parse_length(str(value), LENGTH_OPTIONS[option]) if str(value) != "0" else 0
    if option == "pe_option":
        from poscli import encodings

        pairs = value if isinstance(value, dict) else encodings.parse_option_pairs(_as_list(value))
        model = ModelConfig.from_dict({**config["model"], "pe_options": pairs})
        return encodings.resolve_options(model).pe_options
    if option == "attention_option":
        return attention_switches(value)
    return value


def _as_list(value) -> list[str]:
    """KEY=VALUE pairs as a list: a recipe step holds one pair as a string (its list of values was
    a grid axis), the command line a list of them."""
    return [value] if isinstance(value, str) else list(value or [])


def attention_switches(value) -> dict[str, bool]:
    """``--attention-option`` pairs (or a recipe's dict) as config.json records them: the switches that are on."""
    from poscli import encodings

    pairs = value if isinstance(value, dict) else encodings.parse_option_pairs(_as_list(value), "--attention-option")
    return AttentionOptions.parse(pairs).to_dict()


def train_plan(train: TrainRequest) -> tuple[list[str], ModelConfig, TrainConfig]:
    """``poscli train``'s options checked as a whole: the
    encodings asked for (a sweep when more than one), the model config of the first, and the
    training config. Every encoding's options are checked before any run starts."""
    from poscli import encodings
    from poscli.extension import positions

    names = [encodings.check_name(each) for each in train.pe.split(",")]
    values = with_size(request_values(train))
    options = encodings.parse_option_pairs(values.get("pe_option") or [])
    model = {TRAIN_OPTIONS[o][0]: values[o] for o in ("layers", "heads", "width", "train_length", "init_std")}
    model["attention_options"] = attention_switches(values.get("attention_option"))
    train = {
        TRAIN_OPTIONS[o][0]: getattr(values[o], "value", values[o])
        for o, (field, _) in TRAIN_OPTIONS.items()
        if field in {f for f in TrainConfig.__dataclass_fields__} and o in values
    }
    train_config = TrainConfig(**train)
    train_config.validate()
    check_data_settings(train_config)
    from poscli.training.loggers import check_logger

    check_logger(train_config.logger)  # its package installed, before any run starts
    configs = [encodings.resolve_options(ModelConfig(**model, pe=name, pe_options=options)) for name in names]
    for config in configs:
        positions.configured(encodings.get(config.pe), config, train_config)  # --random-positions fits the encoding
    from poscli.training.tasks import training_mix

    training_mix(train_config, configs[0])  # a bad --task or --mix, or instances the train length cannot hold
    return names, configs[0], train_config
