"""A recipe's size axis and its learning-rate selection (issue 63).

**Sizes.** ``[sizes.SET]`` names the rungs of a ladder (``s = {layers = 4, heads = 4, width = 64}``:
any ``poscli train`` options); a ``[[train]]``'s ``size = ["s", "m", "l"]`` is then a grid axis over
them, with ``{size}`` in the run name. A recipe may hold several sets (``[sizes.cpu]``,
``[sizes.gpu]``: the same rungs at other shapes); ``poscli run --sizes gpu`` picks one, the first by
default. ``tokens_per_parameter`` (in ``[defaults]``, a ``[[train]]`` or a rung) sets ``steps`` from
the model's parameter count, the batch and the train length, so every rung sees the same number of
training tokens per parameter (Hoffmann et al., 2022, scale data with parameters; Kaplan et al.,
2020 count tokens per parameter the same way).

**Selection.** ``[select]`` chooses one training option (the learning rate) per group of runs
before the main runs, on held-out data: for each value, one short run (``budget`` of the steps,
warmup scaled alike, one seed) named by its own template; the value with the lowest held-out loss at
the train length (the loss ``poscli train`` scores after its last step, on the held-out split)
is the one the main runs train with, recorded in their config. Runs that diverged count as
infinitely bad. The sweep's table (``TABLE.csv``/``.md``) is written beside the study's tables, and
a fresh clone that has it (but not the sweep's run folders) needs no sweep again.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from poscli.errors import PoscliError
from poscli.model import runs

TOKENS_PER_PARAMETER = "tokens_per_parameter"
SELECT_KEYS = {"name", "option", "values", "budget", "seed", "table", "widen"}


@dataclass(frozen=True)
class Selection:
    """A recipe's ``[select]``: which option, over which values, at what budget, named how."""

    name: str  # the select runs' name template: the main run's keys and the option's value
    option: str  # a numeric poscli train option, e.g. "lr"
    values: tuple[float, ...]
    budget: float  # the fraction of the main runs' steps (and warmup) a select run trains
    seed: int | None  # None (seed = "own"): each main run's own seed (the name template then needs {seed})
    table: str  # where the sweep's losses and choices are written
    widen: int = 0  # values a group may add past an edge of the grid where its best lies, by the grid's ratio

    def next_value(self, tried: list[float], best: float) -> float | None:
        """The value to try next where ``best`` lies at an edge of the values ``tried`` (the grid
        continued by its end's ratio), while fewer than ``widen`` were added on that side; None
        where the best is inside, or the grid may grow no further."""
        grid = sorted(self.values)
        if best == max(tried) and sum(v > grid[-1] for v in tried) < self.widen:
            return best * grid[-1] / grid[-2]
        if best == min(tried) and sum(v < grid[0] for v in tried) < self.widen:
            return best * grid[0] / grid[1]
        return None


# --------------------------------------------------------------------------- sizes


def size_set(data: dict, chosen: str | None, fail) -> tuple[str, dict[str, dict]]:
    """The rungs of the active ``[sizes.SET]``: (the set's name, rung -> train options).
    ``chosen``: ``--sizes``; None, the first set. No [sizes]: ("", {})."""
    from poscli.training.options import SIZES, TRAIN_OPTIONS

    sets = data.get("sizes")
    if sets is None:
        if chosen:
            fail(f"--sizes {chosen}: this recipe has no [sizes] sets", "name")
        return "", {}
    if not isinstance(sets, dict) or not sets or not all(isinstance(rungs, dict) for rungs in sets.values()):
        fail("[sizes] holds sets of rungs: [sizes.cpu] with s = {layers = 4, heads = 4, width = 64}", "sizes")
    name = chosen or next(iter(sets))
    if name not in sets:
        fail(f"--sizes {name!r} is not one of this recipe's size sets ({', '.join(sets)})", "sizes")
    rungs = sets[name]
    for rung, options in rungs.items():
        if not isinstance(options, dict):
            message = f"[sizes.{name}] {rung} must be a table of poscli train options, e.g. {{width = 64}}"
            fail(message, rung, f"sizes.{name}")
        if rung in SIZES:
            fail(f"[sizes.{name}] rung {rung!r} is a --size preset's name; name it otherwise", rung, f"sizes.{name}")
        for key in options:
            if key not in TRAIN_OPTIONS and key != TOKENS_PER_PARAMETER or key in ("size", "seed", "pe"):
                fail(f"[sizes.{name}] {rung} has no key {key!r}; a rung sets options of poscli train", rung,
                     f"sizes.{name}")  # fmt: skip
    for other, its_rungs in sets.items():
        if set(its_rungs) != set(rungs):
            fail(f"[sizes.{other}] has rungs {sorted(its_rungs)} but [sizes.{name}] has {sorted(rungs)}: every set "
                 "names the same rungs", "sizes")  # fmt: skip
    return name, rungs


def with_rung(options: dict, rungs: dict[str, dict]) -> tuple[dict, str]:
    """A step's options with its ``size`` read as a rung of the recipe (the rung's options under
    the step's own): (options, rung), or (options, "") where size is a --size preset or unset."""
    rung = options.get("size")
    if rung not in rungs:
        return options, ""
    own = {key: value for key, value in options.items() if key != "size"}
    return {**rungs[rung], **own}, str(rung)


def steps_for_tokens(options: dict) -> dict:
    """``tokens_per_parameter`` read as ``steps``: the steps at which the run has seen that many
    training tokens per parameter (batch x train length a step); the key itself is removed."""
    if TOKENS_PER_PARAMETER not in options:
        return options
    ratio = options[TOKENS_PER_PARAMETER]
    if isinstance(ratio, bool) or not isinstance(ratio, (int, float)) or not 0 < ratio < 1e6:
        raise PoscliError(f"tokens_per_parameter must be a positive number, got {ratio!r}")
    options = {key: value for key, value in options.items() if key != TOKENS_PER_PARAMETER}
    values = _plan_values(options)
    per_step = int(values["batch_size"]) * int(values["train_length"])
    return {**options, "steps": max(1, round(ratio * parameter_count(options) / per_step))}


def _plan_values(options: dict) -> dict:
    from poscli.training.options import TRAIN_DECLARED, parsed, with_size

    return with_size(parsed(TRAIN_DECLARED, {key: value for key, value in options.items() if key != "name"}))


def parameter_count(options: dict) -> int:
    """The parameters of the model a ``poscli train`` with these options builds (on the meta
    device: nothing allocated), the vocabulary its tokenizer gives included."""
    from poscli.training.options import TrainRequest, train_plan

    values = {**_plan_values(options), "name": "count"}
    _, model, _ = train_plan(TrainRequest(**values))
    return _count(model.to_dict() | {"vocab_size": _vocabulary(str(values.get("tokenizer") or "bytes"))})


def _vocabulary(tokenizer: str) -> int:
    from poscli.config import ModelConfig

    if tokenizer == "bytes":
        return ModelConfig.vocab_size
    if tokenizer.startswith("bpe:") and tokenizer[4:].isdigit():
        return int(tokenizer[4:])
    raise PoscliError(f"tokens_per_parameter needs the vocabulary before training: use --tokenizer bytes or bpe:N, "
                      f"not {tokenizer!r}")  # fmt: skip


_COUNTED: dict[str, int] = {}  # a model config (as JSON) -> its parameters: a recipe counts each shape once


def _count(model: dict) -> int:
    import json

    import torch

    from poscli.config import ModelConfig
    from poscli.model.gpt import GPT

    key = json.dumps(model, sort_keys=True, default=str)
    if key not in _COUNTED:
        with torch.device("meta"):
            _COUNTED[key] = GPT(ModelConfig.from_dict(model)).num_parameters()
    return _COUNTED[key]


# --------------------------------------------------------------------------- selection


def parse_selection(entry, fail) -> Selection | None:
    """A recipe's ``[select]``, checked (None without one)."""
    from poscli.training.options import TRAIN_OPTIONS

    if entry is None:
        return None
    if not isinstance(entry, dict):
        fail("[select] is one table: option, values, budget, seed, name, table", "select")
    for key in entry:
        if key not in SELECT_KEYS:
            fail(f"[select] has no key {key!r}; its keys: {', '.join(sorted(SELECT_KEYS))}", key, "select")
    for key in ("name", "option", "values", "table"):
        if key not in entry:
            fail(f'[select] needs {key!r} (e.g. option = "lr", values = [2e-3, 4e-3, 8e-3, 1.6e-2])', "select")
    option, values = entry["option"], entry["values"]
    if option not in TRAIN_OPTIONS or option in ("seed", "steps", "pe", "size"):
        fail(f"[select] option {option!r} is not a poscli train option it can choose (e.g. lr)", "option", "select")
    numbers = isinstance(values, list) and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)
    if not numbers or len(values) < 2 or len(set(values)) != len(values):
        fail("[select] values must be two or more distinct numbers", "values", "select")
    budget = entry.get("budget", 0.25)
    if isinstance(budget, bool) or not isinstance(budget, (int, float)) or not 0 < budget <= 1:
        fail(f"[select] budget is a fraction of the main runs' steps in (0, 1], got {budget!r}", "budget", "select")
    seed = entry.get("seed", 0)
    if seed != "own" and (isinstance(seed, bool) or not isinstance(seed, int)):
        fail(f'[select] seed must be an integer, or "own" (each main run\'s seed), got {seed!r}', "seed", "select")
    if "{" + option + "}" not in str(entry["name"]):
        fail(f"[select] name must hold {{{option}}}: each value is a run of its own", "name", "select")
    try:
        runs.check_table_name(str(entry["table"]))
    except PoscliError as error:
        fail(str(error).replace("--table", "table"), "table", "select")
    seed = None if seed == "own" else seed
    widen = entry.get("widen", 0)
    if isinstance(widen, bool) or not isinstance(widen, int) or not 0 <= widen <= 8:
        message = f"[select] widen is how many values a group may add past an edge, 0 to 8, got {widen!r}"
        fail(message, "widen", "select")
    if widen and min(values) <= 0:
        fail("[select] widen continues the grid by its ratio: its values must be positive", "widen", "select")
    return Selection(str(entry["name"]), option, tuple(values), float(budget), seed, str(entry["table"]), widen)


def select_options(selection: Selection, options: dict, value: float) -> dict:
    """A main run's options as its select run at ``value`` trains them: the budget's share of the
    steps and warmup, the select seed, no snapshots."""
    from poscli.training.options import train_defaults, with_size

    full = with_size({**train_defaults(), **options})
    steps = max(1, round(selection.budget * int(full["steps"])))
    warmup = min(steps - 1, round(selection.budget * int(full["warmup"])))
    chosen = {**options, selection.option: value, "steps": steps, "warmup": max(0, warmup)}
    chosen.pop("snapshots", None)
    if selection.seed is not None:
        chosen["seed"] = selection.seed
    return chosen


def value_text(value: float) -> str:
    """A value as a run name holds it: 0.008 for 8e-3 (six significant digits: a widened grid's
    values are products of floats)."""
    return f"{float(f'{value:.6g}'):g}"


def read_losses(selection: Selection, names: list[str], results=None) -> dict[str, tuple[float, str]]:
    """Each select run's held-out loss at its train length and a note: from its folder where it
    is there (a run that diverged: inf), else from the sweep's table (a fresh clone)."""
    from poscli.evaluation.tables import read_table

    folder, found = runs.runs_dir(results), {}
    table = runs.results_dir(results) / f"{selection.table}.csv"
    rows = read_table(table) if table.exists() else None
    for name in names:
        path = folder / name / runs.CONFIG_FILE
        if path.exists():
            config = runs.read_config(folder / name)
            if config.get("status") == "failed":
                found[name] = (math.inf, f"diverged at step {config.get('steps_done', 0)}")
            elif config.get("status") == "finished":
                found[name] = (float((config.get("heldout") or {}).get("loss", math.nan)), "")
        elif rows is not None and name in set(rows["run"]):
            row = rows[rows["run"] == name].iloc[0]
            if math.isnan(float(row["heldout_loss"])):  # a row of a run not run yet
                continue
            found[name] = (float(row["heldout_loss"]), str(row["note"]) if isinstance(row["note"], str) else "")
    return found


def write_sweep(selection: Selection, scopes: dict, losses: dict, options_of: dict, results=None) -> list[Path]:
    """TABLE.csv and TABLE.md: every select run's loss, and the value each scope chose.
    scopes: scope -> [(value, run)]; options_of: run -> (its options, its size rung)."""
    import pandas as pd

    from poscli.core.io import atomic_write

    records = []
    for scope, candidates in scopes.items():
        choice = choose(candidates, losses)
        for value, run in candidates:
            loss, note = losses.get(run, (math.nan, "not run yet"))
            options, size = options_of[run]
            records.append({"scope": scope, "run": run, "pe": options.get("pe", ""), "size": size,
                            "parameters": parameter_count(options), "option": selection.option, "value": value,
                            "steps": options.get("steps"), "heldout_loss": loss, "chosen": value == choice,
                            "note": note})  # fmt: skip
    frame = pd.DataFrame(records)
    folder = runs.results_dir(results)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{selection.table}.csv"
    if path.exists():  # a recipe run in parts (--runs) writes its own groups' rows and keeps the others'
        kept = pd.read_csv(path)
        frame = pd.concat([kept[~kept["scope"].isin(list(scopes))], frame], ignore_index=True)
    with atomic_write(folder / f"{selection.table}.csv") as handle:
        frame.to_csv(handle, index=False)
    with atomic_write(folder / f"{selection.table}.md") as handle:
        handle.write(sweep_markdown(selection, frame))
    return [folder / f"{selection.table}.csv", folder / f"{selection.table}.md"]


def choose(candidates: list[tuple[float, str]], losses: dict) -> float | None:
    """The value with the lowest finite held-out loss, once every candidate has run; None before."""
    if any(run not in losses for _, run in candidates):
        return None
    scored = [(losses[run][0], value) for value, run in candidates if math.isfinite(losses[run][0])]
    if not scored:
        raise PoscliError(f"every select run diverged or failed ({', '.join(run for _, run in candidates)}); "
                          "lower the [select] values")  # fmt: skip
    return min(scored)[1]


def sweep_markdown(selection: Selection, frame) -> str:
    """One row per scope, one column per value tried: held-out loss (nats per token), the chosen in
    bold, marked where it lies at an edge of what its group tried."""
    values = sorted(set(frame["value"]))
    head = [f"{selection.option} = {value_text(v)}" for v in values]
    lines = [
        f"# {selection.table}: {selection.option} chosen by held-out loss at the train length\n",
        f"Each run trains {selection.budget:g} of its group's steps and warmup"
        + (f", seed {selection.seed}" if selection.seed is not None else "")
        + "; its held-out loss (nats per token) after the last step, on the held-out split at the train length. The "
        "lowest is chosen (bold) and the group's runs train with it. inf: the run diverged."
        + (
            f" Where the lowest lay at an edge, the grid was continued by its ratio, up to {selection.widen} values a "
            "side; a choice still at an edge of what its group tried is marked (edge)."
            if selection.widen
            else ""
        )
        + "\n",
        "| group | parameters | " + " | ".join(head) + " |",
        "|---|---:|" + "---:|" * len(values),
    ]
    for scope, part in frame.groupby("scope", sort=False):
        cells = []
        for value in values:
            row = part[part["value"] == value]
            if row.empty or math.isnan(row["heldout_loss"].iloc[0]):
                cells.append("")
                continue
            loss = row["heldout_loss"].iloc[0]
            text = "inf" if math.isinf(loss) else f"{loss:.4f}"
            tried = part["value"][part["heldout_loss"].notna()]
            edge = " (edge)" if value in (tried.min(), tried.max()) else ""
            cells.append(f"**{text}**{edge}" if bool(row["chosen"].iloc[0]) else text)
        lines.append(f"| {scope} | {int(part['parameters'].iloc[0]) / 1e6:.2f}M | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"
