"""``poscli run RECIPE.toml``: a whole study from one file (format: recipes/README.md).

A recipe lists runs to train (``[[train]]``; a list value is a sweep axis, every combination is
a run), extensions of them (``[[extend]]``), evaluations (``[[eval]]``) and comparisons with
published numbers (``[[compare]]``). It compiles to a plan of steps, each a library call through
one entry point (``poscli.study.steps.run_step``, what ``poscli train``, ``extend`` and ``eval`` call
too) with the recipe's keys as option values, in four phases: train, extend, evaluate, then
summaries over seeds, comparisons and the report. Steps run one after another in this process, or
``--jobs N`` at a time, each in a process of its own. Every step is checked against what the results folder
already holds, so running a recipe again skips what is done, resumes what was interrupted
(from the run's checkpoint) and refuses a run of the same name with a different config.
"""

from __future__ import annotations

import fnmatch
import itertools
import re
import shlex
import tomllib
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path

from poscli.config import ModelConfig
from poscli.core.lengths import parse_length, parse_lengths
from poscli.errors import EnvironmentFailure, PoscliError
from poscli.evaluation import tasks
from poscli.model import runs
from poscli.study import ladder
from poscli.study.steps import command_line
from poscli.training.options import (
    EVAL_OPTIONS,
    EXTEND_OPTIONS,
    RUN_ONLY,
    TRAIN_OPTIONS,
    saved_value,
    train_defaults,
    wanted_value,
)

# `pe = "all"` in a [[train]] (or a list holding "all"): every registered encoding, so a new
# encoding file joins a study without a recipe edit.
EVERY_ENCODING = "all"

SECTIONS = {"name", "description", "defaults", "sizes", "select", "train", "extend", "eval", "compare", "claims",
            "gates"}  # fmt: skip
# Options a recipe may not set: the runner sets them, or they would break the plan.
EVAL_KEYS = {*EVAL_OPTIONS, "runs", "budgets"}  # every poscli eval option, and what the runner reads
EXTEND_KEYS = {"runs", "name", "method_options"}


@dataclass
class Step:
    """One step of the plan: a poscli command's work. ``status``: "to do", "resume", "done"."""

    kind: str  # train, extend, eval
    name: str  # the run's name, or the table's for an evaluation
    status: str = "to do"
    detail: str = ""
    group: str = ""  # the run's name with its seed replaced by *, for summaries over seeds
    runs: list[str] = field(default_factory=list)  # an evaluation's runs
    options: dict = field(default_factory=dict)  # the recipe's options for this step
    groups: dict = field(default_factory=dict)  # an evaluation's run -> group
    size: str = ""  # a trained run's rung of the recipe's [sizes] (its extensions' too)
    select: str = ""  # the [select] group whose choice sets one of its options (poscli.study.ladder)

    @property
    def positional(self) -> list[str]:
        """The command's arguments: an extension's parent, an evaluation's runs."""
        return [self.options["parent"]] if self.kind == "extend" else list(self.runs) if self.kind == "eval" else []

    @property
    def argv(self) -> list[str]:
        """The poscli command that does this step (for --dry-run, the logs and the history)."""
        return command_line(self.kind, self.name, self.positional, self.options, self.status == "resume")

    def call(self, results) -> dict:
        """The arguments of ``run_step`` for this step (JSON-ready: a --jobs process reads them)."""
        resume = self.status == "resume"
        folder = None if results is None else str(results)
        return {"kind": self.kind, "name": self.name, "positional": self.positional, "options": self.options,
                "results": folder, "resume": resume}  # fmt: skip


@dataclass
class Recipe:
    path: Path
    name: str
    description: str
    train: list[Step]
    extend: list[Step]
    evals: list[Step]
    compare: list[dict]
    claims: list = field(default_factory=list)  # poscli.study.claims.Claim, declared before the runs
    gates: object = None  # poscli.study.gates.GateBounds: which runs learned
    tables: dict = field(default_factory=dict)  # table -> what its claims may name (``_RecipeParser.tables``)
    selection: object = None  # poscli.study.ladder.Selection: [select]
    select: list[Step] = field(default_factory=list)  # its runs, trained before the others
    sizes: str = ""  # the [sizes] set the rungs are taken from

    @property
    def steps(self) -> list[Step]:
        return [*self.train, *self.extend, *self.evals]


class RecipeError(PoscliError):
    pass


class RecipeInterrupted(PoscliError):
    exit_code = 130


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


def load_recipe(path: str | Path, sizes: str | None = None) -> Recipe:
    """Parse and check a recipe; every error names the key and its line. ``sizes``: the [sizes]
    set its rungs come from (``poscli run --sizes``; the first by default)."""
    path = Path(path)
    if not path.is_file():
        raise RecipeError(
            f"no recipe at {path}; recipes in this checkout: "
            f"{', '.join(sorted(p.name for p in Path('recipes').glob('*.toml'))) or 'none'}"
        )
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
        selection, select_steps, size_name,
    )  # fmt: skip


def recipe_claims(text: str) -> dict | None:
    """The claims of a recipe's text by name, unchecked against its runs (an older copy of the
    recipe, from git: when a claim was declared); None where the text is not TOML."""
    from poscli.study.claims import claim_of_entry

    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError:
        return None
    tables = list(dict.fromkeys(str(entry.get("table")) for entry in data.get("eval", [])))
    found = {}
    for entry in data.get("claims", []):
        claim = claim_of_entry(entry)
        if claim is not None:
            found[claim.name] = replace(claim, table=claim.table or (tables[0] if len(tables) == 1 else ""))
    return found


class _RecipeParser:
    """The sections of one recipe, checked; ``fail`` names the file, the line and the key."""

    def __init__(self, path: Path, text: str, data: dict):
        self.path, self.text, self.data = path, text, data
        self.rungs: dict[str, dict] = {}  # the active [sizes] set: rung -> options

    def fail(self, message: str, key: str, section: str | None = None, index: int = 0):
        line = _line_of(self.text, key, section, index)
        place = f"{self.path}, line {line}" if line else str(self.path)
        raise RecipeError(f"{place}: {message}")

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
                steps.append(Step("train", name, group=group, detail=_describe(options), options=options, size=rung))
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
            self.check_keys(entry, set(EXTEND_OPTIONS) | EXTEND_KEYS, "extend", index, "extend")
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
                    detail = f"{parent.name}: {_describe(options)}"
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
        """The step's values as its command would check them (``poscli.study.steps.check_step``), so a
        typo in any table fails now, in one line naming the step and the key, before anything runs."""
        from poscli.study.steps import check_step

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
        snapshots = [snapshot for s in matched for snapshot in _snapshots(s)]
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
    return Step("train", name, group=step.select, detail=_describe(options), options=options, size=step.size,
                select=step.select)  # fmt: skip


def _snapshots(step: Step) -> list[Step]:
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


def _describe(options: dict) -> str:
    return " ".join(f"{key}={value}" for key, value in options.items())


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


# --------------------------------------------------------------------------- a part of a study


def narrow(recipe: Recipe, patterns: list[str]) -> Recipe:
    """The part of a recipe that makes the runs matching any of ``patterns`` (globs on the run names of
    its [[train]]s), everything extended from them, and their evaluations: a long study planned in
    parts, such as two seeds a session (``poscli run --runs``). The summaries and comparisons are
    still the whole recipe's, written from whatever its tables hold."""
    for pattern in patterns:
        if not any(fnmatch.fnmatchcase(step.name, pattern) for step in recipe.train):
            shown = ", ".join(step.name for step in recipe.train[:4]) + (", ..." if len(recipe.train) > 4 else "")
            raise RecipeError(f"--runs {pattern!r} matches none of this recipe's runs to train ({shown})")
    train = [step for step in recipe.train if any(fnmatch.fnmatchcase(step.name, p) for p in patterns)]
    kept = {step.name for step in train}
    extend = []
    for step in recipe.extend:  # in the recipe's order, so an extension of an extension follows its base
        if step.options.get("parent") in kept:
            extend.append(step)
            kept.add(step.name)
    evals = []
    for step in recipe.evals:
        names = [name for name in step.runs if name.split(runs.SNAPSHOT_MARK)[0] in kept]
        if names:
            evals.append(replace(step, runs=names))
    scopes = {step.select for step in train}
    select = [step for step in recipe.select if step.group in scopes]
    return replace(recipe, train=train, extend=extend, evals=evals, select=select)


# --------------------------------------------------------------------------- state


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


def _print_plan(recipe: Recipe, whole: Recipe, console) -> None:
    """--dry-run: every step with its status and the command that does it, then the claims."""
    from rich.markup import escape

    for step in [*recipe.select, *recipe.steps]:
        console.print(f"  {step.status:6}  {step.kind:6} {step.name}  [dim]{escape(step.detail)}[/]", highlight=False)
        if step.status != "done":
            console.print(f"          poscli {shlex.join(step.argv)}", highlight=False, markup=False)  # to paste
    _print_claims(whole, console)


def _print_claims(recipe: Recipe, console) -> None:
    """--dry-run's list of the recipe's declared claims, each with its test and its planned runs."""
    from poscli.study.claims import describe

    if not recipe.claims:
        console.print("  claims: none declared (every comparison is an exploratory screen)", highlight=False)
        return
    console.print(f"  claims ({len(recipe.claims)}, each its own Holm family):", highlight=False)
    for claim in recipe.claims:
        console.print(f"    {describe(claim, recipe.tables[claim.table])}", highlight=False, markup=False)


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
    folder = runs.runs_dir(results)
    pending = {step.name for step in [*recipe.train, *recipe.extend] if step.status != "done"}
    for step in recipe.evals:
        table = runs.results_dir(results) / f"{step.name}.csv"
        if not table.exists():
            continue
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


# --------------------------------------------------------------------------- running


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
    info = {"groups": groups, "lengths": lengths, "kind": kind, "null": any(s.options.get("null") for s in mine),
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


def run_recipe(
    path: str | Path,
    results=None,
    jobs: int = 1,
    dry_run: bool = False,
    console=None,
    each: bool = False,
    launcher: str = "local",
    only: list[str] | None = None,
    sizes: str | None = None,
) -> Recipe:
    """Run (or, with ``dry_run``, list) every step of a recipe that is not done yet. With ``each``,
    every trained run (and its snapshots) is evaluated by each [[eval]] that names it as soon as it
    is trained, before the next run starts: a long study stopped at any point keeps the tables of
    every finished run, and a run whose rows are in every table needs no weights to count as done.
    ``launcher``: ``local`` (this process, or ``jobs`` processes), or cluster jobs through submitit
    (``slurm``, ``submitit-local``: ``poscli.study.cluster``). ``only``: run patterns, the part of
    the study to run (``narrow``). ``sizes``: the [sizes] set (``load_recipe``). A [select]'s runs
    train first; the main runs then train with the values they chose (``poscli.study.ladder``)."""
    from rich.console import Console

    console = console or Console(stderr=True, soft_wrap=True)
    if jobs < 1:
        raise PoscliError(f"--jobs must be at least 1, got {jobs}")
    from poscli.study.cluster import check_launcher

    check_launcher(launcher)
    whole = load_recipe(path, sizes)
    recipe = narrow(whole, only) if only else whole
    check_selection(recipe, results)
    check_state(recipe, results, each)
    todo = [s for s in recipe.steps if s.status != "done"]
    selecting = [s for s in recipe.select if s.status != "done"]
    console.print(_headline(recipe, whole, only, len(todo) + len(selecting)), highlight=False)
    if dry_run:
        _print_plan(recipe, whole, console)
        return recipe

    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    log_dir = runs.results_dir(results) / "logs"
    with Progress(
        TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=console
    ) as progress:
        overall = progress.add_task(
            f"recipe {recipe.name}", total=len(recipe.steps) + len(selecting), completed=len(recipe.steps) - len(todo)
        )

        def report(line: str, steps: int = 1) -> None:
            progress.console.print("  " + line, highlight=False, markup=False)
            if line.startswith(("finished", "FAILED")):
                progress.advance(overall, steps)

        def plan(steps: int) -> None:  # --each splits an evaluation per run: count what will be reported
            progress.update(overall, total=steps, completed=0)

        runner = _Runner(recipe, results, log_dir, report, launcher, plan)
        if recipe.selection is not None:
            _run_selection(recipe, selecting, runner, jobs, results)
            check_state(recipe, results, each)  # the main runs now know their chosen values
            todo = [s for s in recipe.steps if s.status != "done"]
        if each:
            _run_each(recipe, todo, runner, jobs)
            check_state(recipe, results, each)  # what is left: extensions, and evaluations of runs trained before
            todo = [s for s in recipe.steps if s.status != "done"]
            if todo:
                plan(len(todo))
        _run_phases(todo, runner, jobs)
        write_summaries(whole, results)  # the whole study's, from what its tables hold
        from poscli.study.report import write_report

        report_path = write_report(results)
    console.print(f"recipe {recipe.name} done; report: {report_path}")
    return recipe


def _run_phases(todo: list[Step], runner: _Runner, jobs: int) -> None:
    """The steps still to do, phase by phase: training and extension ``jobs`` at a time, then the evaluations."""
    for phase, parallel in (("train", jobs), ("extend", jobs), ("eval", 1)):
        steps = [s for s in todo if s.kind == phase]
        if not steps:
            continue
        names = [f"{s.kind}-{s.name}" for s in steps]
        names = [
            name if names.count(name) == 1 else f"{name}-{i + 1}" for i, name in enumerate(names)
        ]  # two [[eval]] of one table
        runner.phase(list(zip(names, steps)), parallel, phase)


def _headline(recipe: Recipe, whole: Recipe, only: list[str] | None, todo: int) -> str:
    """The recipe's first line: what it holds, what is done, and the part run (``--runs``)."""
    part = f" (--runs {' '.join(only)}: {len(recipe.train)} of its {len(whole.train)} runs)" if only else ""
    select = f"{len(recipe.select)} \\[select] runs, " if recipe.select else ""
    sizes = f" (sizes: {recipe.sizes})" if recipe.sizes else ""
    steps = len(recipe.steps) + len(recipe.select)
    return (
        f"recipe [bold]{recipe.name}[/]{part}{sizes}: {select}{len(recipe.train)} runs to train, "
        f"{len(recipe.extend)} extensions, {len(recipe.evals)} evaluations; {todo} steps to do, {steps - todo} "
        "already done"
    )


# --------------------------------------------------------------------------- [select]


def _select_scopes(recipe: Recipe) -> dict[str, list[tuple[float, str]]]:
    """[select]'s groups: scope -> [(value, select run)]."""
    scopes: dict[str, list[tuple[float, str]]] = {}
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
        shown = _describe({key: value for key, value in step.options.items() if key != option})
        step.detail = f"{shown} ({option} {said} by the select runs {step.select})"
    return all(value is not None for value in chosen.values())


def write_sweep(recipe: Recipe, results=None) -> list[Path]:
    """[select]'s table: each of its runs' held-out loss so far, and each group's choice."""
    if recipe.selection is None or not recipe.select:
        return []
    options = {step.name: (step.options, step.size or step.options.get("size", "")) for step in recipe.select}
    losses = ladder.read_losses(recipe.selection, list(options), results)
    return ladder.write_sweep(recipe.selection, _select_scopes(recipe), losses, options, results)


def _run_selection(recipe: Recipe, selecting: list[Step], runner: _Runner, jobs: int, results) -> None:
    """[select]'s runs still to do (and those a widened grid adds), then its table; a run that
    diverged counts as infinitely bad."""
    failure, tried = None, set()
    while selecting:
        try:
            runner.phase([(f"select-{s.name}", s) for s in selecting], jobs, "select")
        except EnvironmentFailure as error:
            failure = error  # a diverged run fails its step, but is a result here
        tried |= {step.name for step in selecting}
        check_selection(recipe, results)
        selecting = [s for s in recipe.select if s.status != "done" and s.name not in tried]
    resolved = check_selection(recipe, results)
    write_sweep(recipe, results)
    if not resolved:
        raise failure or RecipeError("[select] runs are missing; run the recipe again")


def _run_each(recipe: Recipe, todo: list[Step], runner: _Runner, jobs: int) -> None:
    """``--each``: every run to train with all made from it (``_each_steps``), after the missing
    steps of runs trained before (a study stopped between a run's training and its evaluation
    finishes that run first, not after every other run has trained). With ``jobs`` > 1,
    each run's steps are one process, ``jobs`` at a time (the cores split between them), the next
    starting as soon as one ends; on a cluster, ``jobs`` runs train at once as jobs, then each one's
    evaluations and extensions follow in this process."""
    trains, extensions = [s for s in todo if s.kind == "train"], [s for s in todo if s.kind == "extend"]
    # a run trained before but not (fully) evaluated or extended, a study stopped between its steps: first
    unfinished = [
        (step.name, _each_steps(recipe, step, extensions)[1:]) for step in recipe.train if step.status == "done"
    ]
    unfinished = [(name, chain) for name, chain in unfinished if chain]
    fresh = [(step.name, _each_steps(recipe, step, extensions)) for step in trains]
    runner.plan(sum(len(chain) for _, chain in unfinished + fresh))  # the steps each chain will report
    if jobs > 1 and runner.launcher == "local":
        runner.chains(unfinished + fresh, jobs)
        return
    for _, chain in unfinished:  # no training in them: step by step, each under its own kind
        for name, each_step in chain:
            runner.phase([(name, each_step)], 1, each_step.kind)
    chains = [chain for _, chain in fresh]
    for start in range(0, len(chains), jobs):
        group = chains[start : start + jobs]
        if jobs > 1:
            runner.phase([steps[0] for steps in group], jobs, "train")
        for steps in group:
            for name, each_step in steps[1 if jobs > 1 else 0 :]:
                runner.phase([(name, each_step)], 1, name.split("-", 1)[0])


def _each_steps(recipe: Recipe, step: Step, extensions: list[Step]) -> list[tuple[str, Step]]:
    """``--each``: a run, its evaluations (its snapshots' too), then each of its extensions still to
    do, each followed by its own evaluations: a base and everything made from it, in one go."""

    def evaluations(run: str) -> list[tuple[str, Step]]:
        found = []
        for evaluation in (e for e in recipe.evals if e.status != "done"):
            names = [n for n in evaluation.runs if n == run or n.startswith(run + runs.SNAPSHOT_MARK)]
            if names:
                narrowed = Step("eval", evaluation.name, runs=names, options=evaluation.options)
                name = f"eval-{evaluation.name}-{run}"
                taken = sum(1 for _, step in found if step.name == evaluation.name)  # two [[eval]] of one table
                found.append((f"{name}-{taken + 1}" if taken else name, narrowed))
        return found

    found = [(f"train-{step.name}", step), *evaluations(step.name)]
    for extension in (e for e in extensions if e.options.get("parent") == step.name):
        found += [(f"extend-{extension.name}", extension), *evaluations(extension.name)]
    return found


class _Runner:
    """Runs a phase's steps: one after another in this process (each step's output in
    RESULTS/logs/NAME.log), or ``parallel`` at a time as processes of their own. One line names
    the failed steps and their logs if any fails; Ctrl-C stops the recipe (runs in progress save
    checkpoints) with the command that continues it."""

    def __init__(self, recipe: Recipe, results, log_dir: Path, report, launcher: str = "local", plan=None):
        self.recipe, self.results, self.log_dir, self.report = recipe, results, log_dir, report
        self.launcher = launcher
        self.plan = plan or (lambda steps: None)  # how many steps will be reported from here on

    def phase(self, named: list[tuple[str, Step]], parallel: int, phase: str) -> None:
        def run() -> list[str]:
            if self.launcher != "local":  # cluster jobs (poscli.study.cluster)
                from poscli.study.cluster import run_as_jobs

                calls = [(name, step.call(self.results)) for name, step in named]
                return run_as_jobs(calls, parallel, self.launcher, self.log_dir, self.report)
            if parallel > 1:
                return self.in_processes([(name, step.call(self.results)) for name, step in named], parallel)
            return [n for n, s in named if not self.here(n, s)]

        self._guarded(phase, run)

    def chains(self, chains: list[tuple[str, list[tuple[str, Step]]]], parallel: int) -> None:
        """``--each --jobs N``: each chain (a run and everything made from it, ``_each_steps``) as one
        process running its steps in turn, ``parallel`` at a time, a new one starting as soon as one
        ends, so no core waits for another chain's run to finish. Each step still has its own log;
        the recipe goes on past a failed chain and names the failed ones at the end."""
        log_dir = str(self.log_dir)
        payloads = [
            # named by the recipe too: another recipe's chain of the same run (its own extensions) keeps its log
            (
                f"each-{self.recipe.name}-{run}",
                {"chain": [(n, s.call(self.results)) for n, s in chain], "log_dir": log_dir},
            )
            for run, chain in chains
        ]
        sizes = {name: len(payload["chain"]) for name, payload in payloads}
        reported = dict.fromkeys(sizes, 0)

        def step_line(chain: str, line: str) -> None:  # a chain's step starts or ends: shown and counted now
            if line.startswith(("started ", "finished ", "FAILED ")):
                reported[chain] += line.startswith(("finished ", "FAILED "))
                self.report(line)

        def relay(line: str) -> None:  # a chain's end completes the steps it did not reach
            word, name = (line.split(" ", 2) + ["", ""])[:2]
            self.report(line, steps=sizes.get(name, 1) - reported.get(name, 0) if word in ("finished", "FAILED") else 1)

        self._guarded("train", lambda: self.in_processes(payloads, parallel, relay, step_line))

    def _guarded(self, phase: str, run) -> None:
        """``run()`` (-> the names of the failed steps): Ctrl-C or a stopped run interrupts the recipe
        with the command that continues it; failed steps fail it, naming them and their logs."""
        from poscli.training.train import TrainingInterrupted

        self.log_dir.mkdir(parents=True, exist_ok=True)
        try:
            failed = run()
        except (KeyboardInterrupt, TrainingInterrupted):
            raise RecipeInterrupted(
                f"interrupted during the {phase} phase; the runs in progress saved checkpoints. "
                f"Continue with: poscli run {self.recipe.path}"
            ) from None
        if failed:
            raise EnvironmentFailure(
                f"{len(failed)} {phase} steps failed ({', '.join(failed[:5])}); logs in {self.log_dir}. "
                f"Fix the cause and run `poscli run {self.recipe.path}` again: finished steps are kept"
            )

    def here(self, name: str, step: Step) -> bool:
        """One step in this process; whether it succeeded."""
        from poscli.study.steps import run_reported

        return run_reported(name, step.call(self.results), self.log_dir / f"{name}.log", self.report) == 0

    def in_processes(self, payloads: list[tuple[str, dict]], parallel: int, report=None, follow=None) -> list[str]:
        """Steps (or chains of steps) as processes (``python -m poscli.study.steps PAYLOAD``),
        ``parallel`` at a time; the failed ones' names."""
        import json

        from poscli.study.sweep import run_commands

        commands = [(name, [json.dumps(payload)]) for name, payload in payloads]
        # a step stopped by Ctrl-C or SIGTERM raises KeyboardInterrupt: the recipe is interrupted, not failed
        outcomes = run_commands(
            commands, parallel, self.log_dir, report=report or self.report, module="poscli.study.steps", follow=follow
        )
        return [o.job.name for o in outcomes if not o.ok]


def write_summaries(recipe: Recipe, results=None) -> list[Path]:
    """For each table of the recipe whose runs repeat over seeds: TABLE-seeds.csv/.md/.png, the
    mean over seeds of each group of runs at each length with its 95% interval over seeds and
    evaluation sample (``seed_summary``), and how many of each group's runs did not learn
    (``poscli.study.gates``). Then, for each table with declared claims or a [[compare]],
    TABLE-published.md: the claims' verdicts, the runs that did not learn, and the exploratory
    screen (the [[compare]] writers, over the runs that learned)."""
    from poscli.core.io import atomic_write
    from poscli.evaluation.tables import read_table
    from poscli.study.gates import merged as merged_gates
    from poscli.study.report import PUBLISHED_SUFFIX, SEEDS_SUFFIX

    folder = runs.results_dir(results)
    written = []
    studied: dict[str, tuple] = {}  # table -> (summary over learned runs, rows, learned run -> group, gates)
    groups_of_table: dict[str, dict] = {}  # two [[eval]] of one table (runs, then snapshots) summarise together
    for step in recipe.evals:
        groups_of_table.setdefault(step.name, {}).update(step.groups)
    meta = _group_options(recipe)
    read = {}  # table -> (its step with every group, its rows)
    for step in recipe.evals:
        table = folder / f"{step.name}.csv"
        if table.exists() and step.name not in read:
            merged_step = Step(
                step.kind, step.name, runs=step.runs, options=step.options, groups=groups_of_table[step.name]
            )
            read[step.name] = (merged_step, read_table(table))
    gates_of = merged_gates({name: _gates(recipe, step, rows, meta) for name, (step, rows) in read.items()})
    for name, (step, rows) in read.items():
        task = tasks.get(step.options.get("task", EVAL_OPTIONS["task"]))
        compared = any(entry.get("perplexity") == step.name for entry in recipe.compare)  # one seed is enough
        min_runs = 1 if compared else 2
        summary, text = task.seed_summary(rows, step.groups, step.options, folder, step.name, min_runs)
        if summary is None:
            continue
        gates = gates_of[name]
        learned = {run: group for run, group in step.groups.items() if run not in gates or gates[run].learned}
        _count_unlearned(summary, gates)
        with atomic_write(folder / f"{step.name}{SEEDS_SUFFIX}.csv") as handle:
            summary.to_csv(handle, index=False)
        with atomic_write(folder / f"{step.name}{SEEDS_SUFFIX}.md") as handle:
            handle.write(text + _unlearned_note(gates))
        written += [folder / f"{step.name}{SEEDS_SUFFIX}.csv", folder / f"{step.name}{SEEDS_SUFFIX}.md"]
        written += task.seed_plots(summary, folder, step.name)
        if len(learned) < len(step.groups) and recipe.tables[step.name]["kind"] != "algorithmic":
            summary = task.seed_summary(rows, learned, step.options, folder, step.name, min_runs)[0]
        studied[step.name] = (summary, rows, learned, gates)
    for table in dict.fromkeys([*(e["table"] for e in recipe.compare), *(c.table for c in recipe.claims)]):
        if table in studied:
            verdicts = _verdicts(recipe, table, studied)
            text = _published_text(recipe, table, studied, meta, verdicts)
            with atomic_write(folder / f"{table}{PUBLISHED_SUFFIX}.md") as handle:
                handle.write(text)
            written.append(folder / f"{table}{PUBLISHED_SUFFIX}.md")
            written += _write_by_size(verdicts, folder, table)
    return written


def _verdicts(recipe: Recipe, table: str, studied: dict) -> list:
    """The table's declared claims, decided over its learned runs, each with when it was declared."""
    from poscli.study import claims as claim_module

    summary, rows, learned, _ = studied[table]
    info = recipe.tables[table]
    values = claim_module.values_of(info, summary, rows, learned)
    verdicts = []
    for claim in (c for c in recipe.claims if c.table == table):
        verdict = claim_module.decide(claim, info, values)
        verdict.declared, verdict.exploratory = claim_module.declaration(recipe.path, claim, recipe_claims)
        verdicts.append(verdict)
    return verdicts


def _write_by_size(verdicts: list, folder: Path, table: str) -> list[Path]:
    """TABLE-by-size.csv and .png: each claim decided at several sizes, against parameters."""
    import pandas as pd

    from poscli.core.io import atomic_write
    from poscli.study.claims import by_size, plot_by_size

    rows = by_size(verdicts)
    if not rows:
        return []
    with atomic_write(folder / f"{table}-by-size.csv") as handle:
        pd.DataFrame(rows).to_csv(handle, index=False)
    figure = plot_by_size([row for row in rows if row["metric"] == "perplexity"], folder / f"{table}-by-size.png")
    return [folder / f"{table}-by-size.csv", *([figure] if figure else [])]


def summarise(path: str | Path, results=None, sizes: str | None = None) -> list[Path]:
    """``poscli run RECIPE --summaries``: the recipe's summaries, published files and report from
    its tables as they are, nothing trained or evaluated."""
    from poscli.study.report import write_report

    recipe = load_recipe(path, sizes)
    if not (runs.results_dir(results)).is_dir():
        raise RecipeError(f"no results folder {runs.results_dir(results)}; give the one the study wrote (--results)")
    return [*write_sweep(recipe, results), *write_summaries(recipe, results), write_report(results)]


def _group_options(recipe: Recipe) -> dict:
    """group -> the options that made it (an extension's include its parent's; a snapshot's, its budget)."""
    meta = {}
    for step in [*recipe.train, *recipe.extend, *(snapshot for s in recipe.train for snapshot in _snapshots(s))]:
        meta.setdefault(step.group, step.options)
    return meta


def _gates(recipe: Recipe, step: Step, rows, meta: dict) -> dict:
    """Each run's gate (``poscli.study.gates``) by its table's kind."""
    from poscli.evaluation.seeds import table_mode
    from poscli.study import gates

    kind = recipe.tables[step.name]["kind"]
    if kind == "perplexity":
        mode = table_mode(step.options.get("stride"))
        return gates.perplexity_gates(rows, step.groups, meta, recipe.gates or gates.GateBounds(), mode)
    if kind == "algorithmic":
        return gates.task_gates(rows, step.groups)
    if kind == "passkey":
        return gates.passkey_gates(rows, step.groups, meta, recipe.gates or gates.GateBounds())
    return {}


def _count_unlearned(summary, gates: dict) -> None:
    """The summary's ``not_learned`` column: how many of each group's runs did not pass their gate."""
    failed: dict[str, int] = {}
    for gate in gates.values():
        failed[gate.group] = failed.get(gate.group, 0) + (not gate.learned)
    summary["not_learned"] = [failed.get(group, 0) for group in summary["group"]]


def _unlearned_note(gates: dict) -> str:
    failed = sorted(gate.run for gate in gates.values() if not gate.learned)
    if not failed:
        return ""
    return (f"\nDid not learn ({len(failed)} runs, kept out of every claim and ranking; the reasons are in the "
            f"published file): {', '.join(failed)}.\n")  # fmt: skip


def _published_text(recipe: Recipe, table: str, studied: dict, meta: dict, verdicts: list) -> str:
    """TABLE-published.md: the declared claims (and, for claims at several sizes, their verdict by
    size), the runs that did not learn, then the exploratory screen."""
    from poscli.study import claims as claim_module
    from poscli.study.gates import gates_markdown
    from poscli.study.paired import corrected_together
    from poscli.study.published import PUBLISHED

    summary, _, _, gates = studied[table]
    writers = []
    for entry in (e for e in recipe.compare if e["table"] == table):
        extra = {"perplexity": studied[entry["perplexity"]][0]} if "perplexity" in entry else {}
        writers.append(partial(PUBLISHED[entry["published"]], summary, meta, **extra))
    lines = claim_module.claims_markdown(verdicts) or [
        "### Declared claims\n",
        "None: this table's recipe declares no claim, so nothing below is a verdict.",
    ]
    sized = claim_module.by_size_markdown(claim_module.by_size(verdicts))
    lines += ["", *[line.replace("TABLE", table) for line in sized]] if sized else []
    lines += ["", *gates_markdown(gates)] if gates else []
    if writers:
        lines += ["", "### Exploratory screen\n", claim_module.SCREEN_NOTE, ""]
        if summary is None:
            lines.append("None: no group of this table has runs enough that learned.")
        else:
            lines += corrected_together(writers)  # Benjamini-Hochberg over the screen's tests
    return "\n".join(lines).rstrip("\n") + "\n"
