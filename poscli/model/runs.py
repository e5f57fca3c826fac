"""Run folders: ``RESULTS/runs/NAME/`` with ``config.json``, ``metrics.jsonl``,
``model.safetensors`` (the weights, for evaluation) and ``checkpoint.safetensors`` (everything a
resumed run needs: weights, optimizer moments, the batch sampler's random state, the step; removed
once the run has finished, unless ``--keep-optimizer``).

Tensors are stored with safetensors and everything else as JSON, so loading a run never
unpickles anything and a checkpoint from someone else cannot run code. Every file is written to
a temporary name and renamed, so a crash never leaves half a file.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from poscli.core.io import atomic_write, held_alone, is_held, read_json, write_json
from poscli.errors import PoscliError

RUN_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]*$")
CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"
METRICS_FILE = "metrics.jsonl"
CHECKPOINT_FILE = "checkpoint.safetensors"
PICKLE_SUFFIXES = {".pt", ".pth", ".bin", ".ckpt", ".pkl"}
SNAPSHOTS_DIR = "snapshots"  # RUN/snapshots/STEP: the weights at an earlier budget, a run folder of its own
SNAPSHOT_MARK = "@"  # NAME@STEP names a snapshot of run NAME


def results_dir(path: str | os.PathLike | None = None) -> Path:
    return Path(path or os.environ.get("POSCLI_RESULTS", "results"))


def runs_dir(results: str | os.PathLike | None = None) -> Path:
    return results_dir(results) / "runs"


def existing_runs(results: str | os.PathLike | None = None) -> list[str]:
    folder = runs_dir(results)
    if not folder.is_dir():
        return []
    return sorted(p.name for p in folder.iterdir() if (p / CONFIG_FILE).is_file())


def run_lines(results: str | os.PathLike | None = None) -> list[str]:
    """``poscli runs``: one tab-separated line per run (name, encoding, status, steps, held-out ppl). A
    run whose config says running but which no process trains now reads "stopped"."""
    names = existing_runs(results)
    if not names:
        return [f"no runs in {runs_dir(results)}; train one with: poscli train --pe rope"]
    lines = []
    for name in names:
        config, broken = listed_config(runs_dir(results) / name)
        if config is None:
            lines.append(f"{name}\t?\tbroken: {broken}")
            continue
        held = config.get("heldout") or {}
        ppl = f"ppl {held['ppl']:.3f} @ {held['length']}" if held else ""
        status = config.get("status", "?")
        if status == "running" and not in_training(runs_dir(results) / name):
            status = "stopped"  # its process ended without a word (killed): resume it from its last checkpoint
        lines.append(f"{name}\t{config['model']['pe']}\t{status}\t{config.get('steps_done', 0)} steps\t{ppl}")
    return lines


def _readable(run: Path) -> Path:
    """A run folder whose config.json holds a run (its model and training), or a one-line error."""
    config, broken = listed_config(run)
    if config is None:
        raise PoscliError(broken)
    if not isinstance(config.get("train"), dict):
        raise PoscliError(
            f"{run / CONFIG_FILE} has no train settings: not a run poscli wrote (fix or delete the folder)"
        )
    return run


def listed_config(run: Path) -> tuple[dict | None, str]:
    """A run folder's config for a listing (``poscli runs``, the report): (config, ""), or (None, why
    it cannot be read), so one broken folder does not stop the listing of the others."""
    try:
        config = read_config(run)
    except PoscliError as error:
        return None, f"{error} (fix or delete the folder)"
    if not isinstance(config.get("model"), dict) or "pe" not in config["model"]:
        return None, f"{run / CONFIG_FILE} has no model.pe: not a run poscli wrote (fix or delete the folder)"
    return config, ""


def check_table_name(table: str) -> str:
    """A table name becomes file names (TABLE.csv, TABLE.md): the same characters as a run name."""
    if not RUN_NAME.match(table):
        raise PoscliError(f"--table {table!r} may use only letters, digits and . _ + -")
    return table


def check_name(name: str) -> str:
    if not RUN_NAME.match(name):
        raise PoscliError(
            f"run name {name!r} may use only letters, digits and . _ + - (and must start with a letter or digit)"
        )
    return name


def check_free(name: str, results: str | os.PathLike | None = None, resume: str | None = None) -> None:
    """The one rule for a run name, whether given or the default (the encoding's name, or
    RUN+METHOD-xFACTOR): a name that exists is never silently reused or renamed, so a command
    that is run twice cannot quietly make a second run. The error names the ways on: resume it,
    start it over with --replace, or choose another --name. (A recipe applies the same rule from
    its side: a run of its own with the same config is done or resumed, another is refused.)"""
    folder = runs_dir(results) / name
    if folder.exists():
        on = f"continue it with `{resume}`, " if resume else ""
        raise PoscliError(
            f"a run named {name!r} already exists in {runs_dir(results)}; {on}start it over with --replace, or choose "
            "another --name"
        )


def training_alone(run: Path):
    """Hold run folder ``run`` for as long as a process trains it (a context manager): a second
    process that would train, resume or replace it meanwhile is refused in one line."""
    return held_alone(
        run,
        f"run {run.name!r} is being trained by another process now; wait for it to end (poscli runs shows it as "
        "running), or give another --name",
    )


def in_training(run: Path) -> bool:
    """Whether a process is training run folder ``run`` now (``training_alone``)."""
    return is_held(run)


def training_progress(run: Path) -> str:
    """Where a run in training is: "step 2960 of 7491, about 31 min left" (its last logged step, and
    the time its last ten logged speeds give the steps left; held-out curve points not counted)."""
    config = listed_config(run)[0]
    steps = (config or {}).get("train", {}).get("steps")
    logged = [record for record in read_metrics(run) if "step" in record and "loss" in record]
    step = logged[-1]["step"] if logged else 0
    said = f"step {step} of {steps if steps is not None else '?'}"
    speeds = sorted(record["tokens_per_s"] for record in logged[-10:] if record.get("tokens_per_s"))
    if not config or not speeds or steps is None:
        return said
    seconds = (steps - step) * tokens_per_step(config) / speeds[len(speeds) // 2]  # the median speed
    return f"{said}, about {_duration(seconds)} left"


def tokens_per_step(config: dict) -> int:
    """The tokens a run's optimizer step trains on: its global batch (whatever --accumulate) x train length."""
    return int(config["train"]["batch_size"]) * int(config["model"]["train_length"])


def _duration(seconds: float) -> str:
    """45 s, 31 min, 2.4 h."""
    if seconds < 60:
        return f"{seconds:.0f} s"
    return f"{seconds / 60:.0f} min" if seconds < 5400 else f"{seconds / 3600:.1f} h"


def find_run(name_or_path: str, results: str | os.PathLike | None = None) -> Path:
    """The folder of a run given by name (under RESULTS/runs) or by path; NAME@STEP is the
    snapshot of run NAME after STEP steps (``poscli train --snapshots``)."""
    if SNAPSHOT_MARK in name_or_path and not Path(name_or_path).exists():
        return find_snapshot(name_or_path, results)
    direct = Path(name_or_path)
    if (direct / CONFIG_FILE).is_file():
        return _readable(direct)
    if direct.is_file() or (direct.is_dir() and any(direct.glob("*.pt")) and not (direct / WEIGHTS_FILE).exists()):
        if direct.suffix in PICKLE_SUFFIXES or direct.is_dir():
            raise PoscliError(
                f"{name_or_path}: poscli reads only safetensors weights and a JSON config; it never unpickles "
                f".pt/.pth/.bin/.ckpt files, which can run code when loaded. Ask for the run folder "
                f"(config.json + model.safetensors), or convert with torch.load(..., weights_only=True) and safetensors"
            )
        raise PoscliError(f"{name_or_path} is a file; give a run folder (with config.json) or a run name")
    folder = runs_dir(results) / name_or_path
    if (folder / CONFIG_FILE).is_file():
        return _readable(folder)
    available = existing_runs(results)
    from poscli.core.registry import did_you_mean

    hint = (
        f"runs in {runs_dir(results)}: {', '.join(available)}"
        if available
        else f"there are no runs in {runs_dir(results)} yet; train one with: poscli train --pe rope"
    )
    raise PoscliError(f"no run named {name_or_path!r}{did_you_mean(name_or_path, available)}; {hint}")


def snapshot_steps(run: Path) -> list[int]:
    """The steps at which ``run`` kept a snapshot, in order."""
    folder = run / SNAPSHOTS_DIR
    if not folder.is_dir():
        return []
    return sorted(int(p.name) for p in folder.iterdir() if p.name.isdigit() and (p / CONFIG_FILE).is_file())


def find_snapshot(name: str, results: str | os.PathLike | None = None) -> Path:
    base, _, step = name.rpartition(SNAPSHOT_MARK)
    run = find_run(base, results)
    folder = run / SNAPSHOTS_DIR / step
    if step.isdigit() and (folder / CONFIG_FILE).is_file():
        return folder
    kept = snapshot_steps(run)
    hint = (
        f"it kept snapshots at steps {', '.join(map(str, kept))} (e.g. {base}{SNAPSHOT_MARK}{kept[0]})"
        if kept
        else "it kept none (train with --snapshots, e.g. --snapshots 0.25,0.5)"
    )
    raise PoscliError(f"run {base!r} has no snapshot at step {step!r}; {hint}")


def save_snapshot(run: Path, model, config: dict, step: int) -> Path:
    """RUN/snapshots/STEP: the weights after ``step`` steps with a config saying so, a run folder
    that ``poscli eval RUN@STEP`` reads like any other (config.json written last: a folder without
    it is not a snapshot yet)."""
    import shutil

    folder = run / SNAPSHOTS_DIR / str(step)
    folder.mkdir(parents=True, exist_ok=True)
    save_weights(model, folder)
    for extra in ("tokenizer.json",):
        if (run / extra).is_file():
            shutil.copyfile(run / extra, folder / extra)
    snapshot = {
        **config,
        "name": f"{config['name']}{SNAPSHOT_MARK}{step}",
        "status": "finished",
        "steps_done": step,
        "snapshot_of": config["name"],
    }
    snapshot.pop("heldout", None)
    write_config(folder, snapshot)
    return folder


def training_budget(config: dict) -> dict:
    """What a run's weights have been trained on: its parameters, tokens seen (its parent's included, for an
    extension), tokens per parameter and training FLOPs, 6 N D + 6 L T d D (Kaplan et al., 2020,
    section 2.1: N non-embedding parameters, L layers, T the train length, d the width, D tokens)."""
    model, train = config["model"], config["train"]
    tokens = int(config.get("steps_done") or 0) * int(train["batch_size"]) * int(model["train_length"])
    flops = _step_flops(model) * tokens
    parent = config.get("parent_budget") or {}
    tokens_seen, flops = tokens + int(parent.get("tokens_seen", 0)), flops + float(parent.get("train_flops", 0.0))
    parameters = int(config.get("parameters") or 0)
    return {
        "parameters": parameters,
        "tokens_seen": tokens_seen,
        "tokens_per_parameter": tokens_seen / parameters if parameters else float("nan"),
        "train_flops": flops,
    }


def _step_flops(model: dict) -> float:
    """Training FLOPs per token: 6 x non-embedding parameters + 6 x layers x train length x width."""
    layers, width, ratio = int(model["n_layer"]), int(model["d_model"]), int(model.get("mlp_ratio", 4))
    non_embedding = layers * (4 * width * width + 2 * ratio * width * width)  # qkv + proj, the MLP's two matrices
    return 6 * non_embedding + 6 * layers * int(model["train_length"]) * width


def read_config(run: Path) -> dict:
    try:
        return read_json(run / CONFIG_FILE)
    except (OSError, ValueError) as error:
        raise PoscliError(f"cannot read {run / CONFIG_FILE}: {error}") from error


def read_metrics(run: Path) -> list[dict]:
    """The records of ``run``'s metrics.jsonl (none if it has none); a torn last line, a write cut
    short by a kill, is left out, a damaged line before it is a one-line error."""
    import json

    path = run / METRICS_FILE
    lines = path.read_text(encoding="utf-8").splitlines() if path.exists() else []
    records = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            if number == len(lines):
                break
            raise PoscliError(f"{path}, line {number}: not a JSON record; delete the line to go on") from None
    return records


def training_curve(run: Path) -> dict:
    """What ``poscli plot loss`` draws of a run: tokens seen (step x batch size x train length) and
    the logged training loss at each logged step, the held-out loss at the train length after the
    last step with its 95% interval (None before the run finished), the validation curve
    (``--eval-every``: tokens and held-out loss at each of its steps at the train length, and at its
    longer lengths; empty without it) and the train length."""
    import math

    config = read_config(run)
    step_tokens = tokens_per_step(config)
    logged = read_metrics(run)
    records = [record for record in logged if "loss" in record]
    points = [record for record in logged if "heldout_loss" in record]
    heldout = config.get("heldout")
    return {
        "heldout_curve": ([record["step"] * step_tokens for record in points],
                          [record["heldout_loss"] for record in points]),
        "heldout_steps": [record["step"] for record in points],
        "heldout_longer": _longer_curves(logged, step_tokens, int(config["model"]["train_length"])),
        "tokens": [record["step"] * step_tokens for record in records],
        "loss": [record["loss"] for record in records],
        "heldout": None
        if not heldout or heldout.get("loss") is None or math.isnan(heldout["loss"])
        else (config.get("steps_done", 0) * step_tokens, heldout["loss"], math.log(heldout["ci_low"]),
              math.log(heldout["ci_high"])),
        "length": int(config["model"]["train_length"]),
    }  # fmt: skip


def _longer_curves(logged: list[dict], tokens_per_step: int, train_length: int) -> dict[int, tuple[list, list]]:
    """The validation curve at its lengths other than the train length: length -> (tokens, losses)."""
    curves: dict[int, tuple[list, list]] = {}
    for record in logged:
        for length, loss in (record.get("heldout") or {}).items():
            if int(length) != train_length:
                tokens, losses = curves.setdefault(int(length), ([], []))
                tokens.append(record["step"] * tokens_per_step)
                losses.append(loss)
    return dict(sorted(curves.items()))


def write_config(run: Path, config: dict) -> None:
    write_json(run / CONFIG_FILE, config)


def save_weights(model, run: Path) -> None:
    from safetensors.torch import save

    state = {k: v.detach().contiguous().cpu() for k, v in model.state_dict().items()}
    with atomic_write(run / WEIGHTS_FILE, "wb") as handle:
        handle.write(save(state))


def save_checkpoint(run: Path, model, optimizer, generator, step: int, elapsed: float) -> None:
    """One file, written atomically, holding all the state a resumed run continues from.

    Tensors: ``model.*`` (the state dict), ``optimizer.I.KEY`` (AdamW's per-parameter state),
    ``rng.batches`` (the batch sampler's generator). Metadata: step, elapsed seconds, the
    optimizer's parameter groups as JSON.
    """
    import json

    import torch
    from safetensors.torch import save

    tensors = {f"model.{k}": v.detach().contiguous().cpu() for k, v in model.state_dict().items()}
    state = optimizer.state_dict()
    for index, values in state["state"].items():
        for key, value in values.items():
            tensors[f"optimizer.{index}.{key}"] = torch.as_tensor(value).detach().contiguous().cpu()
    tensors["rng.batches"] = generator.get_state()
    metadata = {"step": str(step), "elapsed": repr(elapsed), "param_groups": json.dumps(state["param_groups"])}
    with atomic_write(run / CHECKPOINT_FILE, "wb") as handle:
        handle.write(save(tensors, metadata=metadata))


def load_checkpoint(run: Path) -> dict:
    """The state ``save_checkpoint`` wrote: {step, elapsed, model, optimizer, rng}; a clear error if
    the file is missing, truncated or corrupt."""
    import json

    from safetensors import SafetensorError, safe_open

    path = run / CHECKPOINT_FILE
    if not path.is_file():
        raise PoscliError(
            f"run {run.name!r} has no checkpoint ({path} is missing); start it again with poscli train or poscli extend"
        )
    try:
        with safe_open(str(path), framework="pt", device="cpu") as handle:
            metadata = handle.metadata() or {}
            tensors = {key: handle.get_tensor(key) for key in handle.keys()}  # noqa: SIM118 (safe_open is not a dict)
        step, elapsed = int(metadata["step"]), float(metadata["elapsed"])
        param_groups = json.loads(metadata["param_groups"])
    except (SafetensorError, OSError, ValueError, KeyError) as error:
        raise PoscliError(
            f"{path} is truncated or corrupt ({error}); delete it to restart the run from its beginning"
        ) from error
    model = {k.removeprefix("model."): v for k, v in tensors.items() if k.startswith("model.")}
    optimizer_state: dict = {}
    for key, value in tensors.items():
        if key.startswith("optimizer."):
            _, index, name = key.split(".", 2)
            optimizer_state.setdefault(int(index), {})[name] = value
    return {
        "step": step,
        "elapsed": elapsed,
        "model": model,
        "rng": tensors["rng.batches"],
        "optimizer": {"state": optimizer_state, "param_groups": param_groups},
    }


def load_weights(run: Path) -> dict:
    """The run's state dict, read with safetensors (no unpickling); a clear error if missing or damaged."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    weights = run / WEIGHTS_FILE
    if not weights.is_file():
        raise PoscliError(
            f"run {run.name!r} has no weights ({weights} is missing); was its training interrupted before the first "
            "checkpoint?"
        )
    try:
        return load_file(str(weights), device="cpu")
    except (SafetensorError, OSError, ValueError) as error:
        raise PoscliError(
            f"{weights} is truncated or corrupt ({error}); retrain the run or restore the file"
        ) from error


def load_model(run: Path, device: str = "cpu"):
    """The run's model with its weights, in eval mode, on ``device``. Returns (model, config dict)."""
    from poscli.config import ModelConfig
    from poscli.model.gpt import GPT

    config = read_config(run)
    model = GPT(ModelConfig.from_dict(config["model"]))
    missing, unexpected = model.load_state_dict(load_weights(run), strict=False)
    if missing or unexpected:
        raise PoscliError(
            f"{run / WEIGHTS_FILE} does not match its config (missing {missing[:3]}, unexpected {unexpected[:3]})"
        )
    return model.to(device).eval(), config


def run_label(config: dict) -> str:
    """A readable label for tables and plots."""
    return config.get("label") or config["name"]
