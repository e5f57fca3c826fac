"""Parallel sweeps: many independent runs (encodings x seeds), several at a time.

``poscli train --pe alibi,rope,t5 --seeds 0,1 --jobs 2`` runs each combination as its own
``poscli train`` process, ``--jobs`` at once. On the CPU each job gets cores / jobs threads
(two torch processes that each take every core run many times slower than one at a time), and a
job takes the cores freed by the others before each step of its chain and at each checkpoint of its
training (``poscli.core.device.take_free_cores``); with
several GPUs each job gets the one the fewest running jobs hold (CUDA_VISIBLE_DEVICES). A job
that fails is reported with the last line of its log and the others carry on; the sweep exits 1
if any failed. Each job's output goes to RESULTS/logs/NAME.log.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from poscli.core.device import RUNNING_JOBS_VARIABLE, threads_for

STOP_GRACE_SECONDS = 60  # after Ctrl-C, how long the jobs get to write their checkpoints
# a poscli process stopped by SIGINT or SIGTERM (its checkpoint saved), or killed by either unhandled
INTERRUPTED_EXITS = (130, 143, -signal.SIGINT, -signal.SIGTERM)


@dataclass
class Job:
    name: str
    command: list[str]
    env: dict = field(default_factory=dict)


@dataclass
class Outcome:
    job: Job
    returncode: int
    seconds: float
    log: Path

    @property
    def ok(self) -> bool:
        return self.returncode == 0

    def last_line(self) -> str:
        lines = [line for line in self.log.read_text(encoding="utf-8", errors="replace").splitlines() if line.strip()]
        return lines[-1] if lines else f"exit code {self.returncode}"

    def reason(self) -> str:
        """Why it failed: the last line of its log, or for a process killed by SIGKILL (which the
        kernel's out-of-memory killer sends, and after which nothing is logged) what to try."""
        if self.returncode in (-signal.SIGKILL, 128 + signal.SIGKILL):
            return "killed by SIGKILL, as the out-of-memory killer does: run fewer --jobs or a smaller --batch-size"
        return self.last_line()


@dataclass
class _Running:
    job: Job
    process: subprocess.Popen
    handle: object  # the log file the process writes to
    log: Path
    started: float
    gpu: int | None
    followed: int = 0  # bytes of its log already passed to ``follow``


def job_environment(parallel: int) -> dict:
    """What each of ``parallel`` jobs at once gets on the CPU: a share of the cores."""
    threads = threads_for(parallel)
    return {"OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}


def least_used_gpu(running: dict, gpus: int) -> int:
    """The GPU the fewest running jobs hold (the lowest such index), so a job started when another
    ends takes the GPU that ended, whichever it was."""
    held = [entry.gpu for entry in running.values()]
    return min(range(gpus), key=lambda gpu: (held.count(gpu), gpu))


def run_jobs(jobs: list[Job], parallel: int, log_dir: Path, report=print, gpus: int = 0, follow=None) -> list[Outcome]:
    """Run ``jobs`` with at most ``parallel`` at once, each started as soon as another ends; with
    several ``gpus``, each on the one the fewest running jobs hold. ``follow(name, line)``, if given,
    gets each line a job writes to its log as it comes, all of them before the job's end is
    reported. Returns their outcomes in the jobs' order. Ctrl-C here, or a job stopped by a signal
    of its own (exit 130 or 143: this process may have been started where SIGINT is ignored), stops
    the running jobs (they save checkpoints), starts no more, and raises KeyboardInterrupt."""
    log_dir.mkdir(parents=True, exist_ok=True)
    waiting = list(jobs)
    running: dict[Any, Any] = {}
    finished: dict[Any, Any] = {}
    count_file = (log_dir / f".running-jobs-{os.getpid()}").absolute()  # read by jobs that may change folder
    try:
        _schedule(waiting, running, finished, parallel, log_dir, report, gpus, follow, count_file)
    except KeyboardInterrupt:  # Ctrl-C: each running poscli process checkpoints, then exits
        for entry in running.values():
            if entry.process.poll() is None:
                entry.process.send_signal(signal.SIGINT)
        deadline = time.monotonic() + STOP_GRACE_SECONDS
        for entry in running.values():
            try:
                entry.process.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                entry.process.kill()
            entry.handle.close()
        raise
    finally:
        count_file.unlink(missing_ok=True)
    return [finished[job.name] for job in jobs]


def _follow(entry: _Running, follow, ended: bool) -> None:
    """The complete lines ``entry``'s log has gained since the last call, to ``follow``; once the
    job has ended, its last line too, complete or not."""
    with open(entry.log, "rb") as handle:
        handle.seek(entry.followed)
        text = handle.read()
    complete = text if ended else text[: text.rfind(b"\n") + 1]
    entry.followed += len(complete)
    for line in complete.decode("utf-8", errors="replace").splitlines():
        follow(entry.job.name, line)


def _write_count(count_file: Path, running: int) -> None:
    """How many jobs run now, for the chains' ``take_free_cores`` (replaced whole: never read half written)."""
    partial = count_file.with_name(count_file.name + ".partial")
    partial.write_text(str(running))
    partial.replace(count_file)


def _schedule(
    waiting: list[Job],
    running: dict,
    finished: dict,
    parallel: int,
    log_dir: Path,
    report,
    gpus: int,
    follow,
    count_file: Path,
) -> None:
    """Start jobs while fewer than ``parallel`` run, each with the cores' share of as many as run with
    it (the last ones, with nothing left waiting, get more); follow and collect them as they end."""
    _write_count(count_file, 0)
    while waiting or running:
        while waiting and len(running) < parallel:
            job = waiting.pop(0)
            log = log_dir / f"{job.name}.log"
            handle = open(log, "w", encoding="utf-8")  # noqa: SIM115
            gpu = least_used_gpu(running, gpus) if gpus > 1 else None
            cores = job_environment(min(parallel, len(running) + 1 + len(waiting)))
            env = {
                **os.environ,
                **cores,
                RUNNING_JOBS_VARIABLE: str(count_file),
                **job.env,
                **({"CUDA_VISIBLE_DEVICES": str(gpu)} if gpu is not None else {}),
            }
            _write_count(count_file, len(running) + 1)  # before it starts: it may read the count at once
            process = subprocess.Popen(job.command, stdout=handle, stderr=subprocess.STDOUT, env=env)
            running[job.name] = _Running(job, process, handle, log, time.perf_counter(), gpu)
            report(f"started {job.name}")
        for name, entry in list(running.items()):
            ended = entry.process.poll() is not None
            if follow:
                _follow(entry, follow, ended)
            if not ended:
                continue
            entry.handle.close()
            outcome = Outcome(entry.job, entry.process.returncode, time.perf_counter() - entry.started, entry.log)
            finished[name] = outcome
            del running[name]
            _write_count(count_file, len(running) + min(len(waiting), parallel - len(running)))
            if outcome.ok:
                report(f"finished {name} in {outcome.seconds / 60:.1f} min")
            elif outcome.returncode in INTERRUPTED_EXITS:
                report(f"stopped {name}: {outcome.last_line()}")
                raise KeyboardInterrupt  # the whole pool is being stopped: start nothing more
            else:
                report(f"FAILED {name} (exit {outcome.returncode}): {outcome.reason()}  [log: {entry.log}]")
        time.sleep(0.2)


def gpu_count() -> int:
    try:
        import torch

        return torch.cuda.device_count()
    except ImportError:
        return 0


def run_commands(
    commands: list[tuple[str, list[str]]],
    parallel: int,
    log_dir: Path,
    report=print,
    module: str = "poscli",
    follow=None,
) -> list[Outcome]:
    """Run commands (job name, argv after ``python -P -m MODULE``) as processes, ``parallel`` at a time,
    each with its share of cores (or its own GPU); the one way both ``train --seeds`` sweeps (poscli
    commands) and recipes with ``--jobs N`` (``poscli.study.steps``) run their processes."""
    if parallel < 1:
        from poscli.errors import PoscliError

        raise PoscliError(f"--jobs must be at least 1, got {parallel}")
    # -P: the current folder is not put on the import path, so a file there named like a library
    # (rich.py, datasets.py) is never imported in its place
    jobs = [Job(name, [sys.executable, "-P", "-m", module, *argv]) for name, argv in commands]
    return run_jobs(jobs, parallel, log_dir, report=report, gpus=gpu_count(), follow=follow)


def plan_train_sweep(
    encodings: list[str], seeds: list[int], prefix: str | None, base_argv: list[str]
) -> list[tuple[str, list[str]]]:
    """Every (encoding, seed) of a ``poscli train`` sweep as (run name, argv): NAME-PE[-sSEED]."""
    from poscli.encodings import run_name_base

    plan = []
    for pe in encodings:
        for seed in seeds:
            name = f"{prefix + '-' if prefix else ''}{run_name_base(pe)}{f'-s{seed}' if len(seeds) > 1 else ''}"
            plan.append((name, [*base_argv, "--pe", pe, "--seed", str(seed), "--name", name, "--quiet"]))
    return plan


def without_options(args: list[str], options: set[str]) -> list[str]:
    """A command line without these options (and their values)."""
    kept, skip = [], False
    for arg in args:
        if skip:
            skip = False
        elif arg in options:
            skip = True
        elif not any(arg.startswith(option + "=") for option in options):
            kept.append(arg)
    return kept


def train_sweep(
    encodings: list[str],
    seeds: list[int],
    jobs: int,
    prefix: str | None,
    base_argv: list[str],
    results=None,
    report=print,
) -> list[Path]:
    """``poscli train --pe a,b --seeds 0,1 --jobs N``: each run its own process; returns the run folders."""
    from poscli.errors import EnvironmentFailure
    from poscli.model import runs

    plan = plan_train_sweep(encodings, seeds, prefix, base_argv)
    for name, _ in plan:
        runs.check_name(name)
        runs.check_free(name, results, resume=f"poscli train --resume {name}")
    log_dir = runs.results_dir(results) / "logs"
    report(f"sweep: {len(plan)} runs, {min(jobs, len(plan))} at a time; logs in {log_dir}")
    outcomes = run_commands(plan, jobs, log_dir, report=report)
    failed = [o.job.name for o in outcomes if not o.ok]
    if failed:
        raise EnvironmentFailure(
            f"{len(failed)} of {len(outcomes)} runs failed: {', '.join(failed)}; the others finished (see their logs)"
        )
    return [runs.runs_dir(results) / o.job.name for o in outcomes]
