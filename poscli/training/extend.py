"""``poscli extend``: make a run work at a longer length by rescaling RoPE's frequencies (see
``poscli.extension.scaling``), stretching a learned table or interpolating sinusoidal positions, and,
unless ``steps == 0``, fine-tuning it briefly.

Defaults, sized for 2 CPU cores (a few minutes, whatever the target): fine-tune for 400 steps
(YaRN's fine-tuning length for s = 16, Peng et al. 2023) at min(target, 4 x the original
length), with the parent's tokens per step. YaRN reports that a model extended this way
generalises past its fine-tuning length, so a 32k target does not need 32k-token batches.
"""

from __future__ import annotations

import re
from pathlib import Path

from poscli.config import ModelConfig, TrainConfig
from poscli.core.lengths import format_length
from poscli.errors import Answer, PoscliError
from poscli.extension import remap as remapping
from poscli.model import runs

CONTINUE = "continue"  # the control: no rescaling at all, the same fine-tuning (any encoding)
DEFAULT_STEPS = 400
DEFAULT_LR = 3e-4
FINETUNE_LENGTH_MULTIPLE = 4  # default fine-tuning length: min(target, 4 x original)


def extension_label(parent_label: str, method: str, factor: float, steps: int, finetune_length: int) -> str:
    """e.g. ``rope +yarn x128, 400 steps at 1k`` or ``rope +pi x8, no fine-tuning``."""
    tuning = f"{steps} steps at {format_length(finetune_length)}" if steps else "no fine-tuning"
    return f"{parent_label} +{method} x{factor:g}, {tuning}"


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
):
    """Extend ``run`` to ``target`` tokens with ``method``; returns the new run's TrainResult."""
    parent_folder = runs.find_run(run, results)
    parent = runs.read_config(parent_folder)
    model = parent["model"]
    pe = model["pe"]
    from poscli import encodings

    encoding = encodings.get(pe)
    methods = encoding.extension_methods()
    attention = remapping.METHODS.get(method)
    if method == CONTINUE:  # the control of a fine-tuned extension: the extra training without the rescaling
        methods = [*(methods or []), CONTINUE]
        if not steps:
            raise PoscliError(
                "--method continue is continued training, the control of a fine-tuned extension; give --steps N (e.g. "
                "400)"
            )
    if attention is not None:
        steps = _check_remap(parent, encoding, methods, attention, steps)
    elif methods is None:
        raise Answer(
            f"run {parent['name']!r} uses --pe {pe}, which needs no rescaling: evaluate it at any length, "
            f"e.g. poscli eval {parent['name']} --lengths {format_length(target)}"
        )
    if attention is None and method not in methods:
        raise PoscliError(
            f"--method {method} does not apply to --pe {pe}; for run {parent['name']!r} use: "
            f"{', '.join(methods) or 'none'}"
        )
    steps = DEFAULT_STEPS if steps is None else steps
    if method == CONTINUE and options:
        raise PoscliError(f"--method continue changes nothing but the training; drop {', '.join(sorted(options))}")
    options = (
        remapping.check_options(method, options or {})
        if attention
        else (options or {})
        if method == CONTINUE
        else encoding.check_extension_options(method, options or {})
    )
    if parent.get("extension"):
        raise PoscliError(
            f"run {parent['name']!r} is already extended ({parent['extension']['method']}); extend its parent "
            f"{parent.get('parent')!r} instead"
        )
    original_length = model["train_length"]
    if target <= original_length:
        raise PoscliError(
            f"--target {target} is not longer than the run's train length {original_length}; choose a longer --target"
        )
    factor = factor if factor is not None else target / original_length
    if factor < 1:
        raise PoscliError(f"--factor must be at least 1, got {factor:g}")
    if steps < 0:
        raise PoscliError(f"--steps must be 0 (no fine-tuning) or more, got {steps}")
    if pose and not steps:
        raise PoscliError("--pose fine-tunes with skipping positions; give --steps N (e.g. 400)")
    if pose and attention is not None:
        raise PoscliError(f"--pose fine-tunes, and --method {method} needs no training; drop --pose")
    if finetune_length is None:  # PoSE fine-tunes at the original window (Zhu et al., 2024)
        finetune_length = original_length if pose else min(target, FINETUNE_LENGTH_MULTIPLE * original_length)
    if pose and finetune_length >= target:
        raise PoscliError(f"--pose needs a --finetune-length shorter than the target {target}, got {finetune_length}")
    if finetune_length < 2:
        raise PoscliError(f"--finetune-length must be at least 2, got {finetune_length}")
    parent_train = parent["train"]
    tokens_per_step = parent_train["batch_size"] * original_length
    batch_size = batch_size or max(1, tokens_per_step // finetune_length)

    weights = runs.load_weights(parent_folder)
    parent_config = ModelConfig.from_dict(model)
    if attention is not None:  # no weights change: the attention sees far keys at other positions
        remap = remapping.plan(method, original_length, target, **options)
        changes, options = {"remap": remap.to_dict()}, remap.to_dict()
    elif method == CONTINUE:
        changes = {}
    else:
        try:
            changes = encoding.extended_config(parent_config, method, factor, target, options, weights)
        except Answer as answer:
            raise Answer(f"run {parent['name']!r} {answer}") from None
    changes["train_length"] = finetune_length if steps else original_length
    model_config = ModelConfig.from_dict({**parent_config.to_dict(), **changes})
    train_config = TrainConfig.from_dict(
        {
            **parent_train,
            "steps": steps,
            "minutes": None,
            "lr": lr,
            "warmup_steps": min(20, steps),
            "batch_size": batch_size,
            "seed": seed,
            "device": device,
            "random_positions": 0,  # fine-tuning at the new length uses plain positions
            "pose": target if pose else 0,  # or PoSE's skipping positions up to the target
        }
    )
    label = extension_label(runs.run_label(parent), method, factor, steps, finetune_length)
    if attention is not None:
        label = f"{runs.run_label(parent)} +{remap.describe()}, no training"
    elif method == CONTINUE:
        at = format_length(finetune_length)
        label = f"{runs.run_label(parent)} +continued training (no rescaling), {steps} steps at {at}"
    elif pose:
        label += f" (PoSE to {format_length(target)})"
    lineage = {
        "parent": parent["name"],
        "parent_budget": runs.training_budget(parent),  # what the base had seen: tokens_seen counts both
        "label": label,
        "extension": {
            "method": method,
            "factor": factor,
            "target": target,
            "original_length": original_length,
            "options": options,
            "finetune": {
                "steps": steps,
                "length": finetune_length if steps else None,
                "batch_size": batch_size,
                "lr": lr,
                "pose": pose,
            },
        },
    }
    if name is None:
        name = re.sub(r"[^A-Za-z0-9._+-]", "", f"{parent['name']}+{method}-x{factor:g}{'-pose' if pose else ''}")

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


def _check_remap(parent: dict, encoding, methods: dict | None, attention: remapping.Method, steps: int | None) -> int:
    """An attention remapping (``poscli.extension.remap``) applies to this run, without training: -> 0 steps."""
    pe = parent["model"]["pe"]
    if not attention.any_encoding and attention.name not in (methods or {}):
        raise PoscliError(
            f"--method {attention.name} remaps rotary positions and does not apply to --pe {pe}; "
            f"--method sinks works for every encoding"
        )
    if not encoding.separable_positions:
        raise PoscliError(
            f"--method {attention.name} needs an encoding whose queries and keys can be placed at different positions; "
            f"--pe {pe} measures positions from the middle of the sequence, so it cannot be remapped"
        )
    if steps:
        raise PoscliError(f"--method {attention.name} needs no training; drop --steps (or give --steps 0)")
    return 0
