"""What a recipe's results folder already holds: each step done, to do or to resume (a run of the
same name but another config refused), each evaluation narrowed to the runs it still lacks, and
[select]'s choices (``poscli.study.ladder``) set on the runs they are made for."""

from __future__ import annotations

from pathlib import Path

from poscli.core.lengths import parse_length
from poscli.model import runs
from poscli.study import ladder
from poscli.study.plan import Recipe, RecipeError, Step
from poscli.study.recipes import describe_options, select_step
from poscli.training.options import EVAL_OPTIONS, RUN_ONLY, TRAIN_OPTIONS, saved_value, train_defaults, wanted_value


def check_state(recipe: Recipe, results=None, each: bool = False) -> None:
    """Set each step's status from what RESULTS already holds. With ``each`` (``poscli run --each``),
    a run whose folder is gone but whose rows are in every table that names it counts as done (a
    study carried on in a fresh clone, which holds the tables, not the weights); without it, a
    missing run is trained (again). A run trained again takes everything made from it along: an
    extension of a base trained again is made again and its old rows replaced, since a base trained
    twice is not the same model (training is not bitwise repeatable across thread counts)."""
    from poscli.evaluation.tables import read_table

    folder = runs.runs_dir(results)
    tables = {
        step.name: read_table(runs.results_dir(results) / f"{step.name}.csv")
        for step in recipe.evals
        if (runs.results_dir(results) / f"{step.name}.csv").exists()
    }
    gone = "evaluated (its folder is not here: every table has its rows)"
    remade = set()  # runs trained (or extended) from scratch: what was made from their last weights is stale
    for step in recipe.train:
        if not (folder / step.name / runs.CONFIG_FILE).exists():
            extensions = [e for e in recipe.extend if e.options.get("parent") == step.name]
            evaluated = [e for e in extensions if any(e.name in evaluation.runs for evaluation in recipe.evals)]
            if each and all(_all_evaluated(recipe, s, tables) for s in [step, *evaluated]):
                step.status, step.detail = "done", gone  # trained, extended and evaluated earlier (a fresh clone)
            else:
                remade.add(step.name)
            continue
        config = runs.read_config(folder / step.name)
        _check_same_run(recipe, step, config, folder)
        _set_status(step, config)
    for step in recipe.extend:
        if not (folder / step.name / runs.CONFIG_FILE).exists():
            if step.options.get("parent") in remade:  # training is not bitwise repeatable across thread counts
                if _has_rows(step, tables):  # rows of the old base's extension, to be replaced
                    step.detail = f"{step.detail}; made again: its base {step.options['parent']} is trained again"
                remade.add(step.name)
            elif each and _all_evaluated(recipe, step, tables):
                step.status, step.detail = "done", gone
            else:
                remade.add(step.name)
            continue
        config = runs.read_config(folder / step.name)
        _check_same_extension(recipe, step, config, folder)
        _set_status(step, config)
    _check_evaluations(recipe, tables, results)


def _check_same_run(recipe: Recipe, step: Step, config: dict, folder: Path) -> None:
    """A run folder of the step's name must hold the run the recipe asks for (options that change
    only how it runs aside)."""
    defaults = train_defaults()
    for option in TRAIN_OPTIONS:
        if option in RUN_ONLY:
            continue
        wanted = step.options.get(option, defaults[option])
        if wanted is None:
            continue
        wanted, have = wanted_value(config, option, wanted), saved_value(config, option)
        if have is not None and type(have)(wanted) != have:
            raise RecipeError(
                f"run {step.name!r} exists with {option} = {have!r} but the recipe asks for {wanted!r}; "
                f"remove {folder / step.name} or rename the run in {recipe.path}"
            )


def _check_same_extension(recipe: Recipe, step: Step, config: dict, folder: Path) -> None:
    extension = config.get("extension") or {}
    asked = (step.options["parent"], step.options["method"], parse_length(str(step.options["target"]), "target"))
    have = (config.get("parent"), extension.get("method"), extension.get("target"))
    steps_asked = step.options.get("steps")
    if asked != have or (steps_asked is not None and int(steps_asked) != extension.get("finetune", {}).get("steps")):
        raise RecipeError(
            f"run {step.name!r} exists but is not {step.detail}; remove {folder / step.name} or rename it in "
            f"{recipe.path}"
        )


def _check_evaluations(recipe: Recipe, tables: dict, results) -> None:
    """Each evaluation: done, or narrowed to the runs whose rows are missing. A run still to train,
    or trained after the table was last written, has no valid rows in it: its old rows (from an
    earlier run of the same name) are replaced when it is evaluated again."""
    from poscli.evaluation import tasks as evaluation_tasks

    folder = runs.runs_dir(results)
    pending = {step.name for step in [*recipe.train, *recipe.extend] if step.status != "done"}
    for step in recipe.evals:
        table = runs.results_dir(results) / f"{step.name}.csv"
        if not table.exists():
            continue
        task = evaluation_tasks.get(step.options.get("task", EVAL_OPTIONS["task"]))
        evaluation_tasks.refuse_other_kind(  # found before anything trains
            task,
            tables[step.name],
            table,
            f"give the [[eval]] another table in {recipe.path} or move the file away",
            RecipeError,
        )
        written = table.stat().st_mtime

        def stale(name: str, written: float = written) -> bool:
            weights = folder / name / runs.WEIGHTS_FILE
            return name in pending or (weights.exists() and weights.stat().st_mtime > written)

        missing = [name for name in step.runs if stale(name) or not _evaluated(tables[step.name], name, step)]
        if not missing:
            step.status, step.detail = "done", f"{len(step.runs)} runs in {table.name}"
        elif len(missing) < len(step.runs):
            step.detail = f"{len(missing)} of {len(step.runs)} runs still to evaluate"
            step.runs = missing


def _all_evaluated(recipe: Recipe, step: Step, tables: dict) -> bool:
    """Whether every evaluation of the recipe that includes this run (or its snapshots) has its rows."""
    mine = [
        (e, name)
        for e in recipe.evals
        for name in e.runs
        if name == step.name or name.startswith(step.name + runs.SNAPSHOT_MARK)
    ]
    return bool(mine) and all(e.name in tables and _evaluated(tables[e.name], name, e) for e, name in mine)


def _has_rows(step: Step, tables: dict) -> bool:
    """Whether any table of the recipe holds a row of this run."""
    return any(step.name in set(table["run"]) for table in tables.values() if "run" in table.columns)


def _set_status(step: Step, config: dict) -> None:
    status = config.get("status")
    if status == "finished":
        step.status, step.detail = "done", f"finished {config.get('steps_done')} steps"
    else:
        step.status, step.detail = "resume", f"{status} at step {config.get('steps_done', 0)}"


def _evaluated(rows, name: str, step: Step) -> bool:
    """Whether TABLE.csv has every row this evaluation would write for run ``name`` (its task says)."""
    from poscli.evaluation import tasks

    return tasks.get(step.options.get("task", EVAL_OPTIONS["task"])).evaluated(rows, name, step.options)


def _select_scopes(recipe: Recipe) -> dict[str, list[tuple[float, str]]]:
    """[select]'s groups: scope -> [(value, select run)]."""
    scopes: dict[str, list[tuple[float, str]]] = {}
    if recipe.selection is None:
        return scopes
    for step in recipe.select:
        scopes.setdefault(step.group, []).append((step.options[recipe.selection.option], step.name))
    return scopes


def check_selection(recipe: Recipe, results=None) -> bool:
    """Each [select] run's status from RESULTS (its folder, else the sweep's table), and each main
    run's chosen value set on it where its group's runs are all done (None, to be chosen, where
    not); whether every main run has its value."""
    selection = recipe.selection
    if selection is None:
        return True
    option, folder = selection.option, runs.runs_dir(results)
    widened = True
    while widened:  # until no group's best lies at an edge it may still widen past
        losses = ladder.read_losses(selection, [s.name for s in recipe.select], results)
        for step in recipe.select:
            if step.name in losses:
                loss, note = losses[step.name]
                step.status, step.detail = "done", note or f"held-out loss {loss:.4f}"
            elif (folder / step.name / runs.CONFIG_FILE).exists():
                _set_status(step, runs.read_config(folder / step.name))
        chosen, widened = {}, False
        for scope, candidates in _select_scopes(recipe).items():
            best = ladder.choose(candidates, losses)
            further = None if best is None else selection.next_value([v for v, _ in candidates], best)
            if further is not None:  # the best is at an edge: try the next value past it first
                source = next(step for step in recipe.train if step.select == scope)
                recipe.select.append(select_step(selection, source, further))
                widened, best = True, None
            chosen[scope] = best
    for step in recipe.train:
        value = chosen.get(step.select)
        step.options[option] = value
        said = f"{ladder.value_text(value)}, chosen" if value is not None else "to be chosen"
        shown = describe_options({key: value for key, value in step.options.items() if key != option})
        step.detail = f"{shown} ({option} {said} by the select runs {step.select})"
    return all(value is not None for value in chosen.values())


def write_sweep(recipe: Recipe, results=None) -> list[Path]:
    """[select]'s table: each of its runs' held-out loss so far (those its widened grid added
    included), and each group's choice."""
    if recipe.selection is None or not recipe.select:
        return []
    check_selection(recipe, results)  # the values a widened grid added, found in the folder or the table
    options = {step.name: (step.options, step.size or step.options.get("size", "")) for step in recipe.select}
    losses = ladder.read_losses(recipe.selection, list(options), results)
    return ladder.write_sweep(recipe.selection, _select_scopes(recipe), losses, options, results)
