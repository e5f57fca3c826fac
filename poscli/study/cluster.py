"""``poscli run RECIPE --launcher slurm``: a recipe's steps as cluster jobs through submitit (an
optional extra: ``pip install 'poscli[slurm]'``), each step a job that calls
``poscli.study.steps.run_logged`` as a local step does, its output in ``RESULTS/logs/NAME.log`` and
submitit's own files in ``RESULTS/logs/submitit``. The recipe's rules are unchanged: a finished run
is skipped, an interrupted one resumes from its checkpoint, ``--jobs N`` jobs run at once (a phase's
steps are submitted N at a time). ``--launcher submitit-local`` runs the same jobs as local
processes (submitit's LocalExecutor): the offline test of this path.

Slurm settings come from the environment: ``POSCLI_SLURM_PARTITION``, ``POSCLI_SLURM_GPUS`` (per
job, default 0), ``POSCLI_SLURM_CPUS`` (default 4), ``POSCLI_SLURM_TIMEOUT_MIN`` (default 1440).
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from poscli.errors import PoscliError

LAUNCHERS = ("local", "slurm", "submitit-local")  # local: this process, or --jobs N processes (poscli.study.sweep)


def check_launcher(launcher: str) -> None:
    """A known launcher whose package is installed, or a one-line error saying what to install."""
    if launcher not in LAUNCHERS:
        raise PoscliError(f"--launcher {launcher!r}: choose one of {', '.join(LAUNCHERS)}")
    if launcher != "local":
        import importlib.util

        if importlib.util.find_spec("submitit") is None:
            raise PoscliError(f"--launcher {launcher} needs submitit: pip install 'poscli[slurm]'")


def executor(launcher: str, log_dir: Path):
    """submitit's executor for ``launcher``, its files under ``log_dir``/submitit."""
    import submitit

    cluster = "slurm" if launcher == "slurm" else "local"
    chosen = submitit.AutoExecutor(folder=str(log_dir / "submitit"), cluster=cluster)
    settings: dict[str, int | str] = {
        "timeout_min": int(os.environ.get("POSCLI_SLURM_TIMEOUT_MIN", 1440)),
        "nodes": 1,
        "tasks_per_node": 1,
    }
    if cluster == "slurm":
        settings["cpus_per_task"] = int(os.environ.get("POSCLI_SLURM_CPUS", 4))
        settings["gpus_per_node"] = int(os.environ.get("POSCLI_SLURM_GPUS", 0))
        if os.environ.get("POSCLI_SLURM_PARTITION"):
            settings["slurm_partition"] = os.environ["POSCLI_SLURM_PARTITION"]
    chosen.update_parameters(**settings)
    return chosen


def run_as_jobs(named: list[tuple[str, dict]], parallel: int, launcher: str, log_dir: Path, report) -> list[str]:
    """Each (name, step call) as a job, ``parallel`` at a time; ``report`` gets started / finished /
    FAILED lines as a local phase's do. Ctrl-C cancels the jobs (a training job checkpoints on the
    SIGTERM that follows) and propagates. Returns the names of the failed steps."""
    import time

    from poscli.study.steps import run_logged

    chosen, failed = executor(launcher, log_dir), []
    for first in range(0, len(named), parallel):
        submitted = []
        for name, call in named[first : first + parallel]:
            with _safe_path():
                submitted.append((name, chosen.submit(run_logged, call, log_dir / f"{name}.log"), time.perf_counter()))
            report(f"started {name} (job {submitted[-1][1].job_id})")
        try:
            failed += [name for name, job, started in submitted if not _succeeded(name, job, started, log_dir, report)]
        except KeyboardInterrupt:
            for _, job, _ in submitted:
                job.cancel(check=False)
            raise
    return failed


@contextlib.contextmanager
def _safe_path():
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
