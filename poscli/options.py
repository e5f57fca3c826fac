"""The options of ``poscli train`` and ``poscli extend`` as data: each option's config field and
default. The CLI declares the same options with Typer (a test checks that the two agree), and
recipes and ``--resume`` read them here, so the library never imports its CLI.
"""

from __future__ import annotations

from typing import Any

from poscli.config import ModelConfig, TrainConfig

_MODEL, _TRAIN = ModelConfig(), TrainConfig()

# option (as a Python name) -> (config field, default). Lengths are given as numbers of tokens.
TRAIN_OPTIONS: dict[str, tuple[str, Any]] = {
    "pe": ("pe", _MODEL.pe),
    "pe_option": ("pe_options", []),
    "layers": ("n_layer", _MODEL.n_layer),
    "heads": ("n_head", _MODEL.n_head),
    "width": ("d_model", _MODEL.d_model),
    "train_length": ("train_length", _MODEL.train_length),
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
    "batch_size": ("batch_size", _TRAIN.batch_size),
    "steps": ("steps", _TRAIN.steps),
    "minutes": ("minutes", _TRAIN.minutes),
    "lr": ("lr", _TRAIN.lr),
    "warmup": ("warmup_steps", _TRAIN.warmup_steps),
    "seed": ("seed", _TRAIN.seed),
    "dtype": ("dtype", _TRAIN.dtype),
    "random_positions": ("random_positions", _TRAIN.random_positions),
    "device": ("device", _TRAIN.device),
    "checkpoint_every": ("checkpoint_every", _TRAIN.checkpoint_every),
}
# Options that change how a run is run, not what it is: they never make a run "different".
RUN_ONLY = {"device", "checkpoint_every"}
# Options the runner of a sweep or recipe sets itself.
RUNNER_OPTIONS = {"name", "resume", "results", "quiet", "seeds", "jobs", "nproc", "replace"}
LENGTH_OPTIONS = {"train_length": "--train-length", "random_positions": "--random-positions"}

EVAL_TASKS = ("perplexity", "passkey")

EXTEND_OPTIONS: dict[str, Any] = {
    "method": None, "target": None, "factor": None, "steps": None, "finetune_length": None, "lr": 3e-4,
    "batch_size": None, "beta_fast": None, "beta_slow": None, "attention_factor": None, "factors": None, "low_freq_factor": None, "high_freq_factor": None,
    "rope_base": None, "window": None, "group": None, "leak": None, "sinks": None, "pose": False, "seed": 0, "device": "auto",
}


def train_defaults() -> dict[str, Any]:
    return {option: default for option, (_, default) in TRAIN_OPTIONS.items()}


def saved_value(config: dict, option: str) -> Any:
    """What a run's config.json holds for a ``poscli train`` option (pe options in full)."""
    field = TRAIN_OPTIONS[option][0]
    if field == "pe_options":
        from poscli import encodings

        return encodings.resolve_options(ModelConfig.from_dict(config["model"])).pe_options
    return {**config["model"], **config["train"]}.get(field)


def wanted_value(config: dict, option: str, value: Any) -> Any:
    """An option's value as config.json would hold it (lengths parsed, pe options in full)."""
    from poscli.lengths import parse_length

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
    from poscli.passkey import PasskeyTraining

    names = [encodings.check_name(each) for each in values["pe"].split(",")]
    options = encodings.parse_option_pairs(values.get("pe_option") or [])
    model = {TRAIN_OPTIONS[o][0]: values[o] for o in ("layers", "heads", "width", "train_length")}
    train = {TRAIN_OPTIONS[o][0]: getattr(values[o], "value", values[o]) for o, (field, _) in TRAIN_OPTIONS.items()
             if field in {f for f in TrainConfig.__dataclass_fields__} and o in values}
    train_config = TrainConfig(**train)
    train_config.validate()
    configs = [encodings.resolve_options(ModelConfig(**model, pe=name, pe_options=options)) for name in names]
    for config in configs:
        encodings.check_random_positions(config, train_config)
    PasskeyTraining.plan(train_config, configs[0])  # a bad --mix, or a passkey format the train length cannot hold
    return names, configs[0], train_config
