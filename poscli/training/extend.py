"""``poscli extend``: make a run work at a longer length with an extension method (one file each in
``poscli/extension/methods/``: RoPE's frequencies rescaled, a learned table stretched, sinusoidal
positions interpolated, far keys remapped, queries scaled) and, unless ``steps == 0`` or the method
takes no training, fine-tuning it briefly.

Defaults, sized for 2 CPU cores (a few minutes, whatever the target): fine-tune for 400 steps
(YaRN's fine-tuning length for s = 16, Peng et al. 2023) at min(target, 4 x the original
length), with the parent's tokens per step. YaRN reports that a model extended this way
generalises past its fine-tuning length, so a 32k target does not need 32k-token batches.
"""

from __future__ import annotations

import re
from pathlib import Path

from poscli import encodings
from poscli.config import ModelConfig, TrainConfig
from poscli.core.lengths import format_length
from poscli.errors import Answer, PoscliError
from poscli.extension import methods, positions
from poscli.model import runs

DEFAULT_STEPS = 400
DEFAULT_LR = 3e-4


def extend(
    run: str,
    method: str,
    target: int,
    factor: float | None = None,
    steps: int | None = None,
    finetune_length: int | None = None,
    options: dict[str, float] | None = None,
    name: str | None = None,
    results: str | Path | None = None,
    lr: float = DEFAULT_LR,
    batch_size: int | None = None,
    seed: int = 0,
    device: str = "auto",
    console=None,
    show_progress: bool = True,
    replace: bool = False,
    pose: bool = False,
    cream: bool = False,
    mixed_short: float | None = None,
    eval_every: int | None = None,
    eval_lengths: list[int] | None = None,
):
    """Extend ``run`` to ``target`` tokens with ``method`` (a name of ``poscli.extension.methods`` or
    package.module:Class); returns the new run's TrainResult."""
    parent_folder = runs.find_run(run, results)
    parent = runs.read_config(parent_folder)
    chosen = applicable_method(parent, method, target)
    scheme = _position_scheme(pose, cream)
    options = chosen.check_options(options or {})
    original_length = parent["model"]["train_length"]
    factor = _checked_factor(factor, target, original_length)
    steps = training_steps(chosen, steps, scheme)
    finetune_length = _finetune_length(chosen, finetune_length, target, original_length, scheme)
    tokens_per_step = parent["train"]["batch_size"] * original_length
    batch_size = _checked_batch_size(batch_size) or max(1, tokens_per_step // finetune_length)
    weights = runs.load_weights(parent_folder)
    parent_config = ModelConfig.from_dict(parent["model"])
    try:
        changes = chosen.extended_config(
            encodings.get(parent_config.pe), parent_config, factor, target, options, weights
        )
    except Answer as answer:
        raise Answer(f"run {parent['name']!r} {answer}") from None
    recorded = chosen.recorded_options(changes, options)
    changes["train_length"] = finetune_length if steps else original_length
    model_config = ModelConfig.from_dict({**parent_config.to_dict(), **changes})
    mixed = _mixed_windows(mixed_short, steps, original_length)
    train_config = _finetune_config(parent["train"], steps, lr, batch_size, seed, device, scheme, target, mixed)
    train_config.eval_every, train_config.eval_lengths = eval_every, eval_lengths
    label = chosen.label(runs.run_label(parent), factor, steps, finetune_length, changes)
    if scheme:
        label += f" ({'PoSE' if pose else 'CREAM'} to {format_length(target)})"
    if mixed_short:
        label += f" ({mixed_short:.0%} of steps at {format_length(original_length)})"
    finetune = {"steps": steps, "length": finetune_length if steps else None, "batch_size": batch_size, "lr": lr}
    finetune.update(pose=pose, cream=cream, mixed_short=mixed["mixed_short"])
    extension = {"method": method, "factor": factor, "target": target, "original_length": original_length}
    lineage = {
        "parent": parent["name"],
        "parent_budget": runs.training_budget(parent),  # what the base had seen: tokens_seen counts both
        "label": label,
        "extension": {**extension, "options": recorded, "finetune": finetune},
    }
    if name is None:
        name = re.sub(r"[^A-Za-z0-9._+-]", "", f"{parent['name']}+{method}-x{factor:g}{'-' + scheme if scheme else ''}")

    from poscli.training.train import train

    return train(
        model_config,
        train_config,
        name=name,
        results=results,
        console=console,
        show_progress=show_progress,
        initial_weights=weights,
        lineage=lineage,
        replace=replace,
    )


def _position_scheme(pose: bool, cream: bool) -> str | None:
    """The fine-tuning's position scheme: PoSE's or CREAM's positions up to the target, or None."""
    if pose and cream:
        raise PoscliError("--pose and --cream each choose the fine-tuning positions; use one")
    return "pose" if pose else "cream" if cream else None


def _checked_batch_size(batch_size: int | None) -> int | None:
    """--batch-size as given (None: the parent's tokens per step at the fine-tuning length), at least 1."""
    if batch_size is not None and batch_size < 1:
        raise PoscliError(f"--batch-size must be at least 1 (left out: the parent's tokens per step), got {batch_size}")
    return batch_size


def _mixed_windows(mixed_short: float | None, steps: int, original_length: int) -> dict:
    """LongRoPE2's mixed windows as TrainConfig fields: a fraction of steps at the original length."""
    if mixed_short is not None and not 0 <= mixed_short < 1:
        raise PoscliError(f"--mixed-short must be a fraction of the steps in [0, 1), got {mixed_short:g}")
    if mixed_short and not steps:
        raise PoscliError("--mixed-short mixes fine-tuning steps; give --steps N (e.g. 400)")
    return {"mixed_short": mixed_short or 0.0, "mixed_length": original_length if mixed_short else 0}


def _finetune_config(
    parent_train: dict, steps, lr, batch_size, seed, device, scheme, target: int, mixed: dict
) -> TrainConfig:
    """The parent's training config with the fine-tuning's steps, rate, batch, seed and device; plain
    positions, or ``scheme``'s (PoSE's or CREAM's) reaching up to ``target``; ``mixed``: LongRoPE2's
    mixed windows (mixed_short, mixed_length)."""
    changes = {"steps": steps, "minutes": None, "lr": lr, "warmup_steps": min(20, steps), "batch_size": batch_size}
    positions_from = {"random_positions": 0, "pose": target if scheme == "pose" else 0}
    positions_from["cream"] = target if scheme == "cream" else 0
    return TrainConfig.from_dict({**parent_train, **changes, "seed": seed, "device": device, **positions_from, **mixed})


def check_extension(
    parent: str, pe: str, train_length: int, method: str, target: int, options: dict, steps, **settings
) -> None:
    """What ``extend`` refuses before it loads a weight, from the parent's name, encoding and train
    length alone: the method, whether it applies (a parent that needs no rescaling is an error here),
    its options (a frequency method's computed once, which checks their ranges), the factor, the
    fine-tuning steps, length, batch, curve and position scheme (``settings``: factor, pose, cream,
    mixed_short, finetune_length, batch_size, eval_every). A recipe checks its [[extend]] steps so
    before it trains their parents."""
    from poscli.extension.methods.protocol import FrequencyMethod

    try:
        chosen = applicable_method({"name": parent, "model": {"pe": pe}}, method, target)
    except Answer as answer:
        raise PoscliError(str(answer)) from None
    checked = chosen.check_options(options)
    factor = _checked_factor(settings.get("factor"), target, train_length)
    if issubclass(chosen, FrequencyMethod):  # computed once: each option's range is checked there
        chosen.frequencies(64, 10000.0, factor, train_length, target, **checked)
    scheme = _position_scheme(settings.get("pose", False), settings.get("cream", False))
    _mixed_windows(settings.get("mixed_short"), training_steps(chosen, steps, scheme), train_length)
    _finetune_length(chosen, settings.get("finetune_length"), target, train_length, scheme)
    _checked_batch_size(settings.get("batch_size"))
    if (every := settings.get("eval_every")) is not None and every < 0:
        raise PoscliError(f"--eval-every must be 0 (no curve) or a number of steps, got {every}")


def applicable_method(parent: dict, method: str, target: int):
    """The ExtensionMethod class ``method`` if it applies to the run ``parent`` (its config.json);
    an encoding that needs no rescaling is answered (exit 0), a method that does not apply is an error."""
    pe = parent["model"]["pe"]
    encoding = encodings.get(pe)
    chosen = methods.get(method)
    if parent.get("extension"):
        raise PoscliError(
            f"run {parent['name']!r} is already extended ({parent['extension']['method']}); extend its parent "
            f"{parent.get('parent')!r} instead"
        )
    reason = chosen.applies_to(encoding)
    if reason is None:
        return chosen
    if chosen.rescales and not methods.rescaling(encoding):
        raise Answer(
            f"run {parent['name']!r} uses --pe {pe}, which needs no rescaling: evaluate it at any length, "
            f"e.g. poscli eval {parent['name']} --lengths {format_length(target)}"
        )
    raise PoscliError(
        f"--method {method} {reason} and does not apply to --pe {pe}; for run {parent['name']!r} use: "
        f"{', '.join(methods.applicable(encoding))}"
    )


def training_steps(method, steps: int | None, scheme: str | None) -> int:
    """The fine-tuning steps: the method's ``training`` ("never", "optional", "required") against ``--steps``."""
    if steps is not None and steps < 0:
        raise PoscliError(f"--steps must be 0 (no fine-tuning) or more, got {steps}")
    if method.training == "never":
        if steps:
            raise PoscliError(f"--method {method.name} needs no training; drop --steps (or give --steps 0)")
        if scheme:
            positions.get(scheme).check_steps(method, 0)
        return 0
    if method.training == "required" and not steps:
        raise PoscliError(
            f"--method {method.name} is continued training, the control of a fine-tuned extension; give --steps N "
            "(e.g. 400)"
        )
    steps = DEFAULT_STEPS if steps is None else steps
    if scheme:
        positions.get(scheme).check_steps(method, steps)
    return steps


def _checked_factor(factor: float | None, target: int, original_length: int) -> float:
    if target <= original_length:
        raise PoscliError(
            f"--target {target} is not longer than the run's train length {original_length}; choose a longer --target"
        )
    factor = factor if factor is not None else target / original_length
    if factor < 1:
        raise PoscliError(f"--factor must be at least 1, got {factor:g}")
    return factor


def _finetune_length(method, finetune_length: int | None, target: int, original_length: int, scheme) -> int:
    """Default: the method's (min(target, 4 x original) but for DroPE's recalibration at the original
    length); with PoSE or CREAM, the scheme's own (``poscli.extension.positions``)."""
    if scheme:
        finetune_length = positions.get(scheme).finetune_length(finetune_length, target, original_length)
    elif finetune_length is None:
        finetune_length = method.default_finetune_length(target, original_length)
    if finetune_length < 2:
        raise PoscliError(f"--finetune-length must be at least 2, got {finetune_length}")
    return finetune_length
