"""Slurm settings for ``poscli run --launcher slurm`` (:class:`SlurmSettings`), and submitit's
executors (an optional extra: ``pip install 'poscli[slurm]'``). On Slurm the whole study is
submitted at once as job arrays with dependencies (``poscli.study.submit``); ``--launcher
submitit-local`` runs the same step function as local processes through submitit's LocalExecutor,
a phase at a time, ``--jobs N`` at once (:func:`run_as_jobs`): the offline test of that path. Each
step's output goes to ``RESULTS/logs/NAME.log``, submitit's own files to ``RESULTS/logs/submitit``.

Slurm settings come from ``poscli run``'s flags (``--partition``, ``--account``, ``--time``, ...),
else the recipe's ``[slurm]`` table, else the environment (``POSCLI_SLURM_PARTITION``,
``POSCLI_SLURM_GPUS``, ``POSCLI_SLURM_CPUS``, ``POSCLI_SLURM_TIMEOUT_MIN``), else their defaults;
all are checked before anything is submitted.
"""

from __future__ import annotations

import contextlib
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from poscli.errors import PoscliError
from poscli.study.status import record_job
from poscli.training.requests import declared_options, option

LAUNCHERS = ("local", "slurm", "submitit-local")  # local: this process, or --jobs N processes (poscli.study.sweep)


def check_launcher(launcher: str) -> None:
    """A known launcher whose package is installed, or a one-line error saying what to install."""
    if launcher not in LAUNCHERS:
        raise PoscliError(f"--launcher {launcher!r}: choose one of {', '.join(LAUNCHERS)}")
    if launcher != "local":
        import importlib.util

        if importlib.util.find_spec("submitit") is None:
            raise PoscliError(f"--launcher {launcher} needs submitit: pip install 'poscli[slurm]'")


@dataclass(frozen=True)
class SlurmSettings:
    """What each job of a study asks Slurm for: ``poscli run --launcher slurm``'s flags, a recipe's
    ``[slurm]`` keys (the same names), checked in one line each before anything is submitted."""

    partition: str | None = option(None, "Slurm partition (POSCLI_SLURM_PARTITION).", metavar="NAME")
    account: str | None = option(None, "Account the jobs are charged to.", metavar="NAME")
    qos: str | None = option(None, "Quality of service.", metavar="NAME")
    time: str | None = option(
        None, "Time limit per job: minutes, or [D-]HH:MM[:SS] (POSCLI_SLURM_TIMEOUT_MIN; default 1 day).",
        metavar="TIME",
    )  # fmt: skip
    mem: str | None = option(None, "Memory per job, e.g. 32G.", metavar="SIZE")
    cpus: int | None = option(None, "CPU cores per job (POSCLI_SLURM_CPUS; default 4).", metavar="N")
    gpus: int | None = option(None, "GPUs per job (POSCLI_SLURM_GPUS; default 0).", metavar="N")
    constraint: str | None = option(None, "Node features the jobs need, e.g. a100.", metavar="FEATURES")
    setup: list[str] | None = option(
        None, "A line each job runs before its step, repeatable, e.g. --setup 'module load cuda'.", metavar="LINE"
    )
    sbatch: list[str] | None = option(
        None, "Any other sbatch option as KEY=VALUE, repeatable, e.g. --sbatch mail-type=END.", metavar="KEY=VALUE"
    )

    @classmethod
    def resolve(cls, recipe: dict[str, Any], flags: dict[str, Any]) -> SlurmSettings:
        """The flags given, else the recipe's [slurm] keys, else the environment; checked."""
        unknown = sorted(set(recipe) - set(declared_options(cls)))
        if unknown:
            raise PoscliError(f"[slurm] has no key {unknown[0]!r}; its keys are {', '.join(declared_options(cls))}")
        environment = {
            "partition": os.environ.get("POSCLI_SLURM_PARTITION") or None,
            "time": os.environ.get("POSCLI_SLURM_TIMEOUT_MIN") or None,
            "cpus": os.environ.get("POSCLI_SLURM_CPUS") or None,
            "gpus": os.environ.get("POSCLI_SLURM_GPUS") or None,
        }
        chosen: dict[str, Any] = {key: value for key, value in environment.items() if value is not None}
        chosen |= {key: value for key, value in recipe.items() if value is not None}
        chosen |= {key: value for key, value in flags.items() if value not in (None, [])}
        for key in ("setup", "sbatch"):
            if key in chosen:
                chosen[key] = _as_list(chosen[key])
        settings = cls(**chosen)
        settings.check()
        return settings

    def check(self) -> None:
        minutes(self.time)
        for name in ("cpus", "gpus"):
            value = getattr(self, name)
            if value is not None and (not str(value).isdigit() or (name == "cpus" and int(value) < 1)):
                raise PoscliError(
                    f"--{name} {value!r}: give a whole number{' of at least 1' if name == 'cpus' else ''}"
                )
        if self.gpus is not None and int(self.gpus) > 1:
            raise PoscliError(
                f"--gpus {self.gpus}: a recipe step is one process on one GPU; give --gpus 1 and run more steps at "
                "once with --jobs N (or train one run on several GPUs with torchrun: docs/guide.md)"
            )
        if self.mem is not None and not re.fullmatch(r"\d+[KMGT]?", str(self.mem)):
            raise PoscliError(f"--mem {self.mem!r}: give a size Slurm reads, e.g. 32G or 16000M")
        extra_parameters(self.sbatch)

    def executor_parameters(self, launcher: str) -> dict[str, Any]:
        """submitit's AutoExecutor parameters (one task on one node per job)."""
        parameters: dict[str, Any] = {"timeout_min": minutes(self.time), "nodes": 1, "tasks_per_node": 1}
        if launcher != "slurm":
            return parameters
        parameters |= {"cpus_per_task": int(self.cpus or 4), "gpus_per_node": int(self.gpus or 0)}
        named = {"partition": self.partition, "account": self.account, "qos": self.qos, "mem": self.mem,
                 "constraint": self.constraint, "setup": self.setup,
                 "additional_parameters": extra_parameters(self.sbatch)}  # fmt: skip
        return parameters | {f"slurm_{key}": value for key, value in named.items() if value}


def _as_list(value: Any) -> list[str]:
    return [str(value)] if isinstance(value, str) else [str(item) for item in value]


TIME = re.compile(r"(?:(\d+)-)?(\d+):(\d{2})(?::(\d{2}))?")


def minutes(text: str | None) -> int:
    """A Slurm time limit in whole minutes (rounded up): minutes, or [D-]HH:MM[:SS]; None: a day."""
    if text is None:
        return 1440
    text = str(text).strip()
    if text.isdigit() and int(text) > 0:
        return int(text)
    match = TIME.fullmatch(text)
    if not match:
        raise PoscliError(f"--time {text!r}: give minutes (e.g. 90) or [D-]HH:MM[:SS] (e.g. 1-12:00:00)")
    days, hours, mins, secs = (int(part or 0) for part in match.groups())
    total = days * 1440 + hours * 60 + mins + (1 if secs else 0)
    if total < 1 or mins >= 60 or secs >= 60:
        raise PoscliError(f"--time {text!r}: give minutes (e.g. 90) or [D-]HH:MM[:SS] (e.g. 1-12:00:00)")
    return total


def extra_parameters(pairs: list[str] | None) -> dict[str, str]:
    """``--sbatch KEY=VALUE`` pairs as submitit's additional sbatch parameters."""
    extra = {}
    for pair in pairs or []:
        key, equals, value = pair.partition("=")
        if not equals or not re.fullmatch(r"[a-z][a-z0-9-]*", key.strip()):
            raise PoscliError(f"--sbatch {pair!r}: write an sbatch option as KEY=VALUE, e.g. --sbatch mail-type=END")
        extra[key.strip().replace("-", "_")] = value.strip()
    return extra


def executor(launcher: str, log_dir: Path, settings: SlurmSettings | None = None):
    """submitit's executor for ``launcher``, its files under ``log_dir``/submitit."""
    import submitit

    cluster = "slurm" if launcher == "slurm" else "local"
    chosen = submitit.AutoExecutor(folder=str(log_dir / "submitit"), cluster=cluster)
    chosen.update_parameters(**(settings or SlurmSettings.resolve({}, {})).executor_parameters(launcher))
    return chosen


def run_as_jobs(
    named: list[tuple[str, dict]], parallel: int, launcher: str, log_dir: Path, report, settings: SlurmSettings | None
) -> list[str]:
    """Each (name, step call) as a job, ``parallel`` at a time; ``report`` gets started / finished /
    FAILED lines as a local phase's do. Ctrl-C cancels the jobs (a training job checkpoints on the
    SIGTERM that follows) and propagates. Returns the names of the failed steps."""
    import time

    from poscli.study.steps import run_logged

    chosen, failed = executor(launcher, log_dir, settings), []
    for first in range(0, len(named), parallel):
        submitted = []
        for name, call in named[first : first + parallel]:
            with safe_path():
                submitted.append((name, chosen.submit(run_logged, call, log_dir / f"{name}.log"), time.perf_counter()))
            record_job(log_dir, name, submitted[-1][1].job_id, launcher)
            report(f"started {name} (job {submitted[-1][1].job_id})")
        try:
            failed += [name for name, job, started in submitted if not _succeeded(name, job, started, log_dir, report)]
        except KeyboardInterrupt:
            for _, job, _ in submitted:
                job.cancel(check=False)
            raise
    return failed


@contextlib.contextmanager
def safe_path():
    """PYTHONSAFEPATH=1 while a job is submitted (its environment is this one): the job's Python, as
    ``python -P`` does for local steps, does not import from the folder it starts in."""
    saved = os.environ.get("PYTHONSAFEPATH")
    os.environ["PYTHONSAFEPATH"] = "1"
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop("PYTHONSAFEPATH")
        else:
            os.environ["PYTHONSAFEPATH"] = saved


def _succeeded(name: str, job, started: float, log_dir: Path, report) -> bool:
    """Wait for one job; report how it ended."""
    import time

    log = log_dir / f"{name}.log"
    try:
        code, line = job.result()
    except KeyboardInterrupt:
        raise
    except Exception as error:  # the job itself died (killed, out of memory, a node lost)
        text = str(error).strip()
        code, line = 1, text.splitlines()[-1] if text else repr(error)
    if code:
        report(f"FAILED {name} (exit {code}): {line}  [log: {log}]")
    else:
        report(f"finished {name} in {(time.perf_counter() - started) / 60:.1f} min")
    return code == 0
