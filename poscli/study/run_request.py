"""``poscli run``'s request: one field per option; the Slurm ones are ``SlurmSettings``' own fields."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from poscli.study.cluster import SlurmSettings
from poscli.training.requests import option, shared


def slurm_field(name: str) -> Any:
    """A request field declared once, as ``SlurmSettings.NAME``."""
    declared = next(field for field in dataclasses.fields(SlurmSettings) if field.name == name)
    how = dict(declared.metadata)
    return option(declared.default, how.pop("help"), **how)


@dataclass(frozen=True)
class RunRequest:
    """Run a recipe: how many steps at once, where (this machine, or Slurm jobs and what each asks for)."""

    jobs: int = option(
        1, "Runs to train or extend at once (each gets cores / jobs threads, or its own GPU).", metavar="N"
    )
    dry_run: bool = option(
        False, "List every step and whether it is done, to do or to resume; run nothing.", flags=("--dry-run",)
    )
    status: bool = option(
        False,
        "Run nothing: each step's state from the results folder and, for steps submitted as Slurm jobs, the "
        "queue: done, pending, running, failed (its log's last line), interrupted, to do.",
        flags=("--status",),
    )
    detach: bool = option(
        False,
        "With --launcher slurm: submit the whole study and exit, printing the job ids; its jobs finish it, report "
        "included. Follow it with --status; running the recipe again submits only what is neither done nor queued.",
        flags=("--detach",),
    )
    each: bool = option(
        False,
        "Evaluate every run (and its snapshots) as soon as it is trained: a study stopped anywhere keeps every "
        "finished run's rows, and needs no weights to go on. With --jobs N, N runs train at once, then each is "
        "evaluated.",
        flags=("--each",),
    )
    launcher: str = option(
        "local",
        "local: this machine; slurm: the whole study submitted at once through submitit (pip install "
        "'poscli[slurm]'), a job array per phase (--jobs N at once) waiting for its inputs, each job's request from "
        "the flags below, else the recipe's [slurm], else POSCLI_SLURM_PARTITION, _GPUS, _CPUS, _TIMEOUT_MIN; "
        "submitit-local: the steps as local processes through submitit.",
        metavar="local|slurm|submitit-local",
    )
    partition: str | None = slurm_field("partition")
    account: str | None = slurm_field("account")
    qos: str | None = slurm_field("qos")
    time: str | None = slurm_field("time")
    mem: str | None = slurm_field("mem")
    cpus: int | None = slurm_field("cpus")
    gpus: int | None = slurm_field("gpus")
    constraint: str | None = slurm_field("constraint")
    setup: list[str] | None = slurm_field("setup")
    sbatch: list[str] | None = slurm_field("sbatch")
    runs: list[str] | None = option(
        None,
        "Only the runs to train whose names match (a glob, repeatable), what is extended from them and their "
        "evaluations: a long study in parts, e.g. --runs 'xt-*-s[01]' for two seeds a session. Summaries and "
        "comparisons are the whole study's.",
        metavar="PATTERN",
    )
    sizes: str | None = option(
        None,
        "The recipe's [sizes] set its size rungs take their shapes from (default: its first), e.g. --sizes gpu for "
        "recipes/scale-ladder.toml's 10x ladder; give a --results folder of its own.",
        metavar="SET",
    )
    summaries: bool = option(
        False,
        "Train and evaluate nothing: rewrite the summaries over seeds, the published files (declared claims, gates, "
        "screen) and the report from the tables as they are, e.g. after declaring a claim.",
        flags=("--summaries",),
    )
    results: str | None = shared("results")

    def slurm(self) -> dict[str, Any]:
        """The Slurm settings given (``SlurmSettings``' fields that are set)."""
        names = [field.name for field in dataclasses.fields(SlurmSettings)]
        return {name: getattr(self, name) for name in names if getattr(self, name) not in (None, [])}

    def ignored_by_summaries(self) -> list[str]:
        """The flags ``--summaries`` would ignore: it runs nothing."""
        given = {"--jobs": self.jobs != 1, "--dry-run": self.dry_run, "--status": self.status, "--detach": self.detach,
                 "--each": self.each, "--launcher": self.launcher != "local", "--runs": bool(self.runs)}  # fmt: skip
        return [flag for flag, set_ in given.items() if set_] + [f"--{key}" for key in self.slurm()]
