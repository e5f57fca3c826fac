"""``poscli run RECIPE.toml``: a whole study from one file (format: recipes/README.md).

A recipe lists runs to train (``[[train]]``; a list value is a sweep axis, every combination is
a run), extensions of them (``[[extend]]``), evaluations (``[[eval]]``) and comparisons with
published numbers (``[[compare]]``). It compiles to a plan of steps, each a library call through
one entry point (``poscli.study.steps.run_step``, what ``poscli train``, ``extend`` and ``eval`` call
too) with the recipe's keys as option values, in four phases: train, extend, evaluate, then
summaries over seeds, comparisons and the report. This module reads and checks a recipe into its
plan (every error names the key and its line); ``poscli.study.state`` sets each step's status from
what the results folder holds, ``poscli.study.runner`` runs what is left and
``poscli.study.summaries`` writes the summaries, verdicts and screen.
"""

from __future__ import annotations

import fnmatch
import itertools
import re
import tomllib
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from poscli.config import ModelConfig
from poscli.core.lengths import parse_length, parse_lengths
from poscli.errors import PoscliError
from poscli.evaluation import tasks
from poscli.model import runs
from poscli.study import ladder
from poscli.study.plan import Recipe, RecipeError, Step
from poscli.training.options import (
    EVAL_OPTIONS,
    EXTEND_OPTIONS,
    TRAIN_OPTIONS,
)

if TYPE_CHECKING:
    pass

# `pe = "all"` in a [[train]] (or a list holding "all"): every registered encoding, so a new
# encoding file joins a study without a recipe edit.
EVERY_ENCODING = "all"

SECTIONS = {"name", "description", "defaults", "sizes", "select", "train", "extend", "eval", "compare", "claims",
            "gates", "slurm"}  # fmt: skip
# Options a recipe may not set: the runner sets them, or they would break the plan.
EVAL_KEYS = {*EVAL_OPTIONS, "runs", "budgets"}  # every poscli eval option, and what the runner reads
EXTEND_KEYS = {"runs", "name", "method_options"}


# --------------------------------------------------------------------------- parsing


def _line_of(text: str, key: str, section: str | None = None, index: int = 0) -> int | None:
    """The line (1-based) where ``key`` is set, inside the ``index``-th [[section]] if given."""
    current, seen = None, -1
    for number, line in enumerate(text.splitlines(), 1):
        header = re.match(r"^\s*\[\[?\s*([A-Za-z0-9_.-]+)\s*\]\]?", line)
        if header:
            current = header.group(1)
            if current == section:
                seen += 1
            if section is None and current == key:
                return number
            continue
        if re.match(rf"^\s*{re.escape(key)}\s*=", line) and (
            section is None and current is None or current == section and seen == index
        ):
            return number
    return None


def _axes(entry: dict) -> list[dict]:
    """Every combination of an entry's list values (sweep axes), in order."""
    keys = list(entry)
    values = [entry[key] if isinstance(entry[key], list) else [entry[key]] for key in keys]
    return [dict(zip(keys, combo)) for combo in itertools.product(*values)]


def _render(template: str, values: dict, where: str, group: bool = False) -> str:
    """A run's name from its template (or, with ``group``, the name of its group: seed = *)."""
    try:
        name = template.format(**values)
    except (KeyError, IndexError, ValueError) as error:
        raise RecipeError(
            f"{where}: name {template!r} uses {error}, which is not one of its keys ({', '.join(values)})"
        ) from None
    if not group and not runs.RUN_NAME.match(name):
        raise RecipeError(
            f"{where}: name {template!r} gives {name!r}; run names may use only letters, digits and . _ + -"
        )
    return name


def _recipes_at_hand() -> str:
    """Where the user can find a recipe: ./recipes, else the built-in ones beside the package
    (an editable install from poscli's checkout), else how to write one."""
    for folder in (Path("recipes"), Path(__file__).resolve().parents[2] / "recipes"):
        names = sorted(p.name for p in folder.glob("*.toml"))
        if names:
            example = "train-short-test-long.toml" if "train-short-test-long.toml" in names else names[0]
            return f"the recipes in {folder}/ are {', '.join(names)}; e.g. poscli run {folder / example}"
    return "no recipes/ folder here; write one as the Recipes section of docs/guide.md shows"


def load_recipe(path: str | Path, sizes: str | None = None) -> Recipe:
    """Parse and check a recipe; every error names the key and its line. ``sizes``: the [sizes]
    set its rungs come from (``poscli run --sizes``; the first by default)."""
    path = Path(path)
    if not path.is_file():
        raise RecipeError(f"no recipe at {path}; {_recipes_at_hand()}")
    text = path.read_text(encoding="utf-8")
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise RecipeError(f"{path}: not valid TOML: {error}") from None
    parser = _RecipeParser(path, text, data)
    for key in data:
        if key not in SECTIONS:
            parser.fail(f"unknown key {key!r}; a recipe has: {', '.join(sorted(SECTIONS))}", key)
    if not isinstance(data.get("name"), str) or not runs.RUN_NAME.match(data["name"]):
        parser.fail("'name' must be a short name (letters, digits, . _ + -)", "name")
    size_name, parser.rungs = ladder.size_set(data, sizes, parser.fail)
    train_steps = parser.train_steps()
    selection = ladder.parse_selection(data.get("select"), parser.fail)
    select_steps = parser.select_steps(selection, train_steps)
    extend_steps = parser.extend_steps(train_steps)
    eval_steps = parser.eval_steps([*train_steps, *extend_steps])
    compare = parser.compare({s.name for s in eval_steps})
    tables = parser.tables(train_steps, extend_steps, eval_steps)
    claims = parser.claims(tables)
    gates = parser.gates()
    description = data.get("description", "")
    return Recipe(
        path, data["name"], description, train_steps, extend_steps, eval_steps, compare, claims, gates, tables,
        selection, select_steps, size_name, parser.slurm(),
    )  # fmt: skip


class _RecipeParser:
    """The sections of one recipe, checked; ``fail`` names the file, the line and the key."""

    def __init__(self, path: Path, text: str, data: dict):
        self.path, self.text, self.data = path, text, data
        self.rungs: dict[str, dict] = {}  # the active [sizes] set: rung -> options

    def fail(self, message: str, key: str, section: str | None = None, index: int = 0) -> NoReturn:
        line = _line_of(self.text, key, section, index)
        place = f"{self.path}, line {line}" if line else str(self.path)
        raise RecipeError(f"{place}: {message}")

    def slurm(self) -> dict:
        """[slurm]: what each job asks Slurm for with --launcher slurm (poscli.study.cluster.SlurmSettings), checked."""
        from poscli.study.cluster import SlurmSettings

        table = self.data.get("slurm", {})
        if not isinstance(table, dict):
            self.fail('[slurm] is a table of sbatch settings, e.g. account = "lab"', "slurm")
        try:
            SlurmSettings.resolve(table, {})
        except PoscliError as error:
            key = next((k for k in table if f"--{k}" in str(error) or repr(k) in str(error)), "slurm")
            self.fail(str(error).replace(f"--{key} ", f"{key} = ", 1), key, "slurm" if key != "slurm" else None)
        return table

    def check_keys(self, entry: dict, allowed: set, section: str, index: int, command: str) -> None:
        for key in entry:
            if key not in allowed:  # poscli.training.options.RUNNER_OPTIONS are never allowed: the runner sets them
                message = f"[{section}] has no key {key!r}; use the options of poscli {command} (with _ for -)"
                self.fail(message, key, section, index)

    def train_steps(self) -> list[Step]:
        defaults = self.data.get("defaults", {})
        keys = set(TRAIN_OPTIONS) | {ladder.TOKENS_PER_PARAMETER}
        self.check_keys(defaults, keys, "defaults", 0, "train")
        steps = []
        for index, entry in enumerate(self.data.get("train", [])):
            where = f"{self.path}, [[train]] {index + 1}"
            self.check_keys(entry, keys | {"name"}, "train", index, "train")
            if "name" not in entry:
                self.fail('every [[train]] needs a name, e.g. name = "{pe}-s{seed}"', "train", None)
            entry = {**entry, **({"pe": _encodings(entry["pe"])} if "pe" in entry else {})}
            for values in _axes({key: value for key, value in entry.items() if key != "name"}):
                named = {**defaults, **values}
                name = _render(entry["name"], named, where)
                group = _render(entry["name"], {**named, "seed": "*"}, where, group=True)
                options, rung = self.sized(defaults, values, index)
                steps.append(
                    Step("train", name, group=group, detail=describe_options(options), options=options, size=rung)
                )
                self.check_values(steps[-1], "train", index)
        _check_unique([s.name for s in steps], self.path)
        return steps

    def sized(self, defaults: dict, values: dict, index: int) -> tuple[dict, str]:
        """A run's options with its size rung's ([defaults] under the rung under the run's own) and
        its steps from tokens_per_parameter where the most specific of the three that sets steps or
        tokens_per_parameter sets the latter: (options, rung)."""
        from poscli.training.options import SIZES

        size = values.get("size", defaults.get("size"))
        if self.rungs and size is not None and size not in self.rungs and size not in SIZES:
            self.fail(f"size {size!r} is not a rung of [sizes] ({', '.join(self.rungs)})", "size", "train", index)
        rung = self.rungs.get(size, {}) if size in self.rungs else {}
        options = {**defaults, **rung, **values}
        name = str(size) if rung else ""
        if rung:
            options.pop("size")
        budget = ("steps", ladder.TOKENS_PER_PARAMETER)
        level = next((level for level in (values, rung, defaults) if any(key in level for key in budget)), {})
        if all(key in level for key in budget):
            self.fail("give steps or tokens_per_parameter, not both (steps follow from tokens_per_parameter)",
                      ladder.TOKENS_PER_PARAMETER, "train", index)  # fmt: skip
        if ladder.TOKENS_PER_PARAMETER not in level:
            options.pop(ladder.TOKENS_PER_PARAMETER, None)
            return options, name
        try:
            return ladder.steps_for_tokens({k: v for k, v in options.items() if k != "steps"}), name
        except PoscliError as error:
            self.fail(f"[[train]] {index + 1}: {error}", ladder.TOKENS_PER_PARAMETER, "train", index)

    def select_steps(self, selection, train_steps: list[Step]) -> list[Step]:
        """[select]'s runs: each value of its option for each of the main runs' groups (one run
        serves every main run whose name template gives it the same name); each main run is told
        which group chooses its value (``Step.select``)."""
        if selection is None:
            return []
        where = f"{self.path}, [select]"
        found: dict[str, Step] = {}
        for step in train_steps:
            keys = {**step.options, "size": step.size or step.options.get("size", "")}
            step.select = _render(selection.name, {**keys, selection.option: "*"}, where, group=True)
            for value in selection.values:
                made = select_step(selection, step, value)
                if made.name in found and found[made.name].options != made.options:
                    differ = sorted(k for k in {*made.options, *found[made.name].options}
                                    if made.options.get(k) != found[made.name].options.get(k))  # fmt: skip
                    self.fail(f"[select] runs named {made.name} would differ in {', '.join(differ)}: put them in its "
                              "name template", "name", "select")  # fmt: skip
                if made.name not in found:
                    found[made.name] = made
                    self.check_values(made, "select", 0)
        _check_unique([*[s.name for s in train_steps], *found], self.path)
        return list(found.values())

    def extend_steps(self, train_steps: list[Step]) -> list[Step]:
        steps = []
        for index, entry in enumerate(self.data.get("extend", [])):
            where = f"{self.path}, [[extend]] {index + 1}"
            if "method_option" in entry:
                self.fail("[[extend]] method_option is now the method's options as keys of the [[extend]] "
                          "(e.g. window = 64), or method_options = { METHOD = { ... } } for one method",
                          "method_option",
                          "extend", index)  # fmt: skip
            methods_asked = entry.get("method", [])
            own = method_option_names(methods_asked if isinstance(methods_asked, list) else [methods_asked])
            self.check_keys(entry, set(EXTEND_OPTIONS) | EXTEND_KEYS | own, "extend", index, "extend")
            for key in ("runs", "name", "method", "target"):
                if key not in entry:
                    self.fail(f"every [[extend]] needs {key!r}", "extend")
            parents = _match(entry["runs"], list(train_steps), self.fail, "extend", index)
            per_method = entry.get("method_options", {})
            axes = {key: value for key, value in entry.items() if key not in EXTEND_KEYS}
            for parent in parents:
                for values in _axes(axes):
                    options = {**values, **per_method.get(values["method"], {})}
                    name = _render(entry["name"], {"run": parent.name, **values}, where)
                    group = _render(entry["name"], {"run": parent.group, **values}, where, group=True)
                    lineage = {"parent": parent.name, "parent_options": parent.options}
                    detail = f"{parent.name}: {describe_options(options)}"
                    steps.append(Step("extend", name, group=group, detail=detail, options={**options, **lineage},
                                      size=parent.size))  # fmt: skip
                    self.check_values(steps[-1], "extend", index)
        _check_unique([s.name for s in [*train_steps, *steps]], self.path)
        return steps

    def eval_steps(self, all_runs: list[Step]) -> list[Step]:
        steps = []
        for index, entry in enumerate(self.data.get("eval", [])):
            self.check_keys(entry, EVAL_KEYS, "eval", index, "eval")
            for key in ("runs", "table"):
                if key not in entry:
                    self.fail(f"every [[eval]] needs {key!r}", "eval")
            try:
                runs.check_table_name(str(entry["table"]))
            except PoscliError as error:
                self.fail(str(error).replace("--table", "table"), "table", "eval", index)
            matched = self.with_budgets(entry, _match(entry["runs"], all_runs, self.fail, "eval", index), index)
            options = {key: value for key, value in entry.items() if key not in ("runs", "budgets")}
            self.check_eval_values(options, index)
            names = [s.name for s in matched]
            groups = {s.name: s.group for s in matched}
            detail = f"{len(names)} runs"
            steps.append(Step("eval", str(entry["table"]), runs=names, detail=detail, options=options, groups=groups))
            self.check_values(steps[-1], "eval", index)
        return steps

    def check_values(self, step: Step, section: str, index: int) -> None:
        """The step's values as its command would check them (``poscli.study.step_checks.check_step``), so a
        typo in any table fails now, in one line naming the step and the key, before anything runs."""
        from poscli.study.step_checks import check_step

        try:
            check_step(step.kind, step.name, step.positional, step.options)
        except PoscliError as error:
            flag = re.search(r"--([a-z][a-z-]*)", str(error))
            key = flag[1].replace("-", "_") if flag else section
            if section == "train" and _line_of(self.text, key, section, index) is None:
                section, index = "defaults", 0  # the value came from [defaults]
            self.fail(f"[[{step.kind}]] {step.name}: {error}", key, section, index)

    def with_budgets(self, entry: dict, matched: list[Step], index: int) -> list[Step]:
        """``budgets``: the matched runs, and (true) or instead of them ("only") their snapshots."""
        budgets = entry.get("budgets", False)
        if budgets not in (True, False, "only"):
            message = 'budgets must be true (each run and its snapshots), "only" (the snapshots alone) or false'
            self.fail(message, "budgets", "eval", index)
        if not budgets:
            return matched
        snapshots = [snapshot for s in matched for snapshot in snapshot_steps(s)]
        if not snapshots:
            message = 'budgets: none of these runs keeps snapshots; add snapshots = "0.25,0.5" to their [[train]] or '
            self.fail(message + "[defaults]", "budgets", "eval", index)
        return snapshots if budgets == "only" else [*matched, *snapshots]

    def check_eval_values(self, options: dict, index: int) -> None:
        for key in ("lengths", "max_tokens", "stride"):
            if key in options:
                try:
                    if key == "lengths":
                        parse_lengths(str(options[key]))
                    else:
                        parse_length(str(options[key]), "--" + key.replace("_", "-"))
                except PoscliError as error:
                    self.fail(str(error), key, "eval", index)
        try:
            tasks.check_name(str(options.get("task", EVAL_OPTIONS["task"])))
        except PoscliError as error:
            self.fail(str(error), "task", "eval", index)

    def compare(self, tables: set[str]) -> list[dict]:
        from poscli.study.published import PUBLISHED

        compare = self.data.get("compare", [])
        for index, entry in enumerate(compare):
            if entry.get("published") not in PUBLISHED:
                self.fail(f"published must be one of: {', '.join(PUBLISHED)}", "published", "compare", index)
            for key in ("table", "perplexity"):
                if (key == "table" or key in entry) and entry.get(key) not in tables:
                    message = f"{key} {entry.get(key)!r} is not one of this recipe's [[eval]] tables"
                    self.fail(f"{message} ({', '.join(sorted(tables))})", key, "compare", index)
        return compare

    def tables(self, train: list[Step], extend: list[Step], evals: list[Step]) -> dict[str, dict]:
        tables = {name: _claim_table(train, extend, evals, name) for name in dict.fromkeys(s.name for s in evals)}
        for info in tables.values():  # the rungs in the order [sizes] gives them, smallest first
            info["sizes"] = [rung for rung in self.rungs if rung in info["sizes"]]
        return tables

    def claims(self, tables: dict[str, dict]) -> list:
        from poscli.study.claims import parse_claims

        entries = self.data.get("claims", [])
        if not isinstance(entries, list):
            self.fail("claims must be [[claims]] tables, one per claim", "claims")
        return parse_claims(entries, lambda message, key, index: self.fail(message, key, "claims", index), tables)

    def gates(self):
        from poscli.study.gates import GateBounds

        entry = self.data.get("gates", {})
        for key, value in entry.items():
            if key not in GateBounds.names():
                self.fail(
                    f"[gates] has no key {key!r}; its keys: {', '.join(sorted(GateBounds.names()))}", key, "gates"
                )
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < 100:
                self.fail(f"[gates] {key} must be a number from 0 (no gate) up, got {value!r}", key, "gates")
        return GateBounds(**{key: float(value) for key, value in entry.items()})


def select_step(selection, step: Step, value: float) -> Step:
    """The [select] run at ``value`` for a main run's group."""
    options = ladder.select_options(selection, step.options, value)
    keys = {**step.options, "size": step.size or step.options.get("size", "")}
    name = _render(selection.name, {**keys, **options, selection.option: ladder.value_text(value)}, "[select]")
    return Step("train", name, group=step.select, detail=describe_options(options), options=options, size=step.size,
                select=step.select)  # fmt: skip


def snapshot_steps(step: Step) -> list[Step]:
    """A train step's snapshots (``snapshots`` fractions of its ``steps``) as steps of their own,
    named RUN@STEP, in a group GROUP@STEP: the same runs at an earlier training budget."""
    if step.kind != "train" or not step.options.get("snapshots"):
        return []
    from poscli.config import TrainConfig

    budget = TrainConfig(
        steps=int(step.options.get("steps", TrainConfig.steps)), snapshots=str(step.options["snapshots"])
    )
    return [
        Step(
            "snapshot",
            f"{step.name}{runs.SNAPSHOT_MARK}{n}",
            group=f"{step.group}{runs.SNAPSHOT_MARK}{n}",
            options={**step.options, "budget_steps": n, "snapshot_of": step.name},
            size=step.size,
        )
        for n in budget.snapshot_steps()
    ]


def _encodings(value):
    """A [[train]]'s pe with "all" read as every registered encoding (a list: a sweep axis)."""
    from poscli.encodings import builtin_names

    values = value if isinstance(value, list) else [value]
    if EVERY_ENCODING not in values:
        return value
    return [name for v in values for name in (builtin_names() if v == EVERY_ENCODING else [v])]


def describe_options(options: dict) -> str:
    return " ".join(f"{key}={value}" for key, value in options.items())


def method_option_names(asked: list) -> set[str]:
    """The options the methods ``asked`` declare (keys an [[extend]] may hold); an unknown method adds none
    (its step's check names it)."""
    from poscli.extension import methods

    names: set[str] = set()
    for method in asked:
        try:
            names |= set(methods.get(str(method)).options)
        except PoscliError:
            continue
    return names


def _check_unique(names: list[str], path: Path) -> None:
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        raise RecipeError(
            f"{path}: the run names repeat ({', '.join(repeated[:5])}); put every sweep key into the name template"
        )


def _match(patterns, steps: list[Step], fail, section: str, index: int) -> list[Step]:
    patterns = [patterns] if isinstance(patterns, str) else list(patterns)
    matched = []
    for pattern in patterns:
        found = [s for s in steps if fnmatch.fnmatchcase(s.name, pattern) and s not in matched]
        if not found and not any(fnmatch.fnmatchcase(s.name, pattern) for s in steps):
            fail(f"runs pattern {pattern!r} matches none of this recipe's runs", "runs", section, index)
        matched += found
    return matched


def _table_kind(task: str) -> str:
    from poscli.evaluation.algorithmic import AlgorithmicTask

    if task in ("perplexity", "passkey"):
        return task
    return "algorithmic" if isinstance(tasks.get(task), AlgorithmicTask) else task


def _claim_table(train: list[Step], extend: list[Step], evals: list[Step], name: str) -> dict:
    """What the claims of one table may name: its groups, lengths, kind and tasks, each group's base
    train length, an extension's target and base group, and the runs each group has planned."""
    mine = [step for step in evals if step.name == name]
    steps = {s.name: s for s in [*train, *extend]}
    groups = list(dict.fromkeys(group for step in mine for group in step.groups.values()))
    kind = _table_kind(str(mine[0].options.get("task", EVAL_OPTIONS["task"])))
    lengths = None
    if kind != "algorithmic" and all(step.options.get("lengths") for step in mine):
        lengths = {n for step in mine for n in parse_lengths(str(step.options["lengths"]))}
    null = any(s.options.get("null") for s in mine)
    info: dict[str, Any] = {"groups": groups, "lengths": lengths, "kind": kind, "null": null,
            "tasks": sorted({str(s.options.get("task")) for s in mine}), "train_length": {}, "target": {},
            "parent": {}, "runs": {}, "size": {}, "sizes": [], "parameters": {}}  # fmt: skip
    for step in mine:
        for run, group in step.groups.items():
            info["runs"][group] = info["runs"].get(group, 0) + 1
            made = steps.get(run.split(runs.SNAPSHOT_MARK)[0])
            if made is None or group in info["train_length"]:
                continue
            if made.size:
                info["size"][group] = made.size
                info["sizes"] += [made.size] if made.size not in info["sizes"] else []
                info["parameters"][group] = ladder.parameter_count(made.options.get("parent_options", made.options))
            own = made.options.get("parent_options", made.options)
            info["train_length"][group] = int(own.get("train_length") or ModelConfig.train_length)
            if made.kind == "extend":
                info["target"][group] = parse_length(str(made.options["target"]), "target")
                info["parent"][group] = steps[made.options["parent"]].group
    return info
