"""A recipe's plan as data: its steps (train, extend, eval, each with its options, group and status)
and what it declares (claims, gates, [select], size rungs)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from poscli.errors import PoscliError
from poscli.study import ladder
from poscli.study.steps import command_line

if TYPE_CHECKING:
    from poscli.study.gates import GateBounds


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
    gates: GateBounds | None = None  # which runs learned
    tables: dict = field(default_factory=dict)  # table -> what its claims may name (``_RecipeParser.tables``)
    selection: ladder.Selection | None = None  # [select]
    select: list[Step] = field(default_factory=list)  # its runs, trained before the others
    sizes: str = ""  # the [sizes] set the rungs are taken from
    slurm: dict = field(default_factory=dict)  # [slurm]: the jobs' sbatch settings (poscli.study.cluster.SlurmSettings)

    @property
    def steps(self) -> list[Step]:
        return [*self.train, *self.extend, *self.evals]


class RecipeError(PoscliError):
    pass


class RecipeInterrupted(PoscliError):
    exit_code = 130
