"""The options of ``poscli train`` and ``poscli extend`` as data: each option's config field and
default. The CLI declares the same options with Typer (a test checks that the two agree), and
recipes and ``--resume`` read them here, so the library never imports its CLI.
"""

from __future__ import annotations

from typing import Any

from poscli.config import DEFAULT_DEPTHS, ModelConfig, TrainConfig
from poscli.errors import PoscliError

_MODEL, _TRAIN = ModelConfig(), TrainConfig()

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

# option (as a Python name) -> (config field, default). Lengths are given as numbers of tokens.
# None: the --size preset's value (SIZES).
TRAIN_OPTIONS: dict[str, tuple[str, Any]] = {
    "pe": ("pe", _MODEL.pe),
    "pe_option": ("pe_options", []),
    "size": ("size", _TRAIN.size),
    "layers": ("n_layer", None),
    "heads": ("n_head", None),
    "width": ("d_model", None),
    "train_length": ("train_length", None),
    "data": ("data", _TRAIN.data),
    "tokenizer": ("tokenizer", _TRAIN.tokenizer),
    "split": ("split", _TRAIN.split),
    "data_split": ("data_split", _TRAIN.data_split),
    "heldout_split": ("heldout_split", _TRAIN.heldout_split),
    "text_column": ("text_column", _TRAIN.text_column),
    "join_rows": ("join_rows", _TRAIN.join_rows),
    "streaming": ("streaming", _TRAIN.streaming),
    "max_data_bytes": ("max_data_bytes", _TRAIN.max_data_bytes),
    "mix": ("mix", _TRAIN.mix),
    "passkey_template": ("passkey_template", _TRAIN.passkey_template),
    "passkey_keys": ("passkey_keys", _TRAIN.passkey_keys),
    "passkey_lengths": ("passkey_lengths", _TRAIN.passkey_lengths),
    "answer_loss": ("answer_loss", _TRAIN.answer_loss),
    "batch_size": ("batch_size", None),
    "accumulate": ("accumulate", _TRAIN.accumulate),
    "steps": ("steps", _TRAIN.steps),
    "minutes": ("minutes", _TRAIN.minutes),
    "optimizer": ("optimizer", _TRAIN.optimizer),
    "lr": ("lr", None),
    "warmup": ("warmup_steps", None),
    "seed": ("seed", _TRAIN.seed),
    "dtype": ("dtype", _TRAIN.dtype),
    "random_positions": ("random_positions", _TRAIN.random_positions),
    "device": ("device", _TRAIN.device),
    "compile": ("compile", _TRAIN.compile),
    "checkpoint_every": ("checkpoint_every", _TRAIN.checkpoint_every),
    "snapshots": ("snapshots", _TRAIN.snapshots),
}
# Options that change how a run is run, not what it is: they never make a run "different".
RUN_ONLY = {"device", "checkpoint_every", "accumulate", "compile"}
# Options the runner of a sweep or recipe sets itself.
RUNNER_OPTIONS = {"name", "resume", "results", "quiet", "seeds", "jobs", "nproc", "replace"}
LENGTH_OPTIONS = {"train_length": "--train-length", "random_positions": "--random-positions"}

# `poscli eval`'s options and their defaults, as data: recipes' [[eval]] accept exactly these (and
# `runs`, `budgets`), tests/test_cli.py checks them against the command.
EVAL_OPTIONS: dict[str, Any] = {
    "lengths": None,
    "max_tokens": 131072,
    "stride": None,
    "protocol": "stream",
    "data": None,
    "reference": True,
    "null": False,
    "allow_split_mismatch": False,
    "table": None,
    "task": "perplexity",  # a name in poscli.evaluation.tasks
    "depths": DEFAULT_DEPTHS,
    "trials": 50,
    "keys": None,
    "sinks": None,
    "window": None,
    "device": "auto",
    "compile": False,
}

EXTEND_OPTIONS: dict[str, Any] = {
    "method": None,
    "target": None,
    "factor": None,
    "steps": None,
    "finetune_length": None,
    "lr": 3e-4,
    "batch_size": None,
    "beta_fast": None,
    "beta_slow": None,
    "attention_factor": None,
    "factors": None,
    "low_freq_factor": None,
    "high_freq_factor": None,
    "rope_base": None,
    "window": None,
    "group": None,
    "leak": None,
    "sinks": None,
    "method_option": None,
    "pose": False,
    "seed": 0,
    "device": "auto",
}


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
    return {**config["model"], **config["train"]}.get(field)


def wanted_value(config: dict, option: str, value: Any) -> Any:
    """An option's value as config.json would hold it (lengths parsed, pe options in full)."""
    from poscli.core.lengths import parse_length

    if option in LENGTH_OPTIONS:
        return parse_length(str(value), LENGTH_OPTIONS[option]) if str(value) != "0" else 0
    if option == "pe_option":
        from poscli import encodings

        pairs = value if isinstance(value, dict) else encodings.parse_option_pairs(list(value))
        model = ModelConfig.from_dict({**config["model"], "pe_options": pairs})
        return encodings.resolve_options(model).pe_options
    return value


def train_plan(values: dict[str, Any]) -> tuple[list[str], ModelConfig, TrainConfig]:
    """``poscli train``'s options (as parsed: option name -> value) checked as a whole: the
    encodings asked for (a sweep when more than one), the model config of the first, and the
    training config. Every encoding's options are checked before any run starts."""
    from poscli import encodings
    from poscli.data.passkey import PasskeyTraining

    names = [encodings.check_name(each) for each in values["pe"].split(",")]
    values = with_size(values)
    options = encodings.parse_option_pairs(values.get("pe_option") or [])
    model = {TRAIN_OPTIONS[o][0]: values[o] for o in ("layers", "heads", "width", "train_length")}
    train = {
        TRAIN_OPTIONS[o][0]: getattr(values[o], "value", values[o])
        for o, (field, _) in TRAIN_OPTIONS.items()
        if field in {f for f in TrainConfig.__dataclass_fields__} and o in values
    }
    train_config = TrainConfig(**train)
    train_config.validate()
    configs = [encodings.resolve_options(ModelConfig(**model, pe=name, pe_options=options)) for name in names]
    for config in configs:
        encodings.check_random_positions(config, train_config)
    PasskeyTraining.plan(train_config, configs[0])  # a bad --mix, or a passkey format the train length cannot hold
    return names, configs[0], train_config
