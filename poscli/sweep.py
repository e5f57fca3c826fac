"""Parallel sweeps: many independent runs (encodings x seeds), several at a time.

``poscli train --pe alibi,rope,t5 --seeds 0,1 --jobs 2`` runs each combination as its own
``poscli train`` process, ``--jobs`` at once. On the CPU each job gets cores / jobs threads
(two torch processes that each take every core run many times slower than one at a time); with
several GPUs each job gets one (CUDA_VISIBLE_DEVICES, round robin). A job that fails is
reported with the last line of its log and the others carry on; the sweep exits 1 if any
failed. Each job's output goes to RESULTS/logs/NAME.log.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path


STOP_GRACE_SECONDS = 60  # after Ctrl-C, how long the jobs get to write their checkpoints


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


def job_environments(count: int, parallel: int, gpus: int) -> list[dict]:
    """Per-job environment: a GPU each when there are several, else a share of the CPU cores."""
    threads = max(1, (os.cpu_count() or 1) // max(1, parallel))
    envs = []
    for index in range(count):
        env = {"OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
        if gpus > 1:
            env["CUDA_VISIBLE_DEVICES"] = str(index % gpus)
        envs.append(env)
    return envs


def run_jobs(jobs: list[Job], parallel: int, log_dir: Path, report=print) -> list[Outcome]:
    """Run ``jobs`` with at most ``parallel`` at once; returns their outcomes in the jobs' order."""
    log_dir.mkdir(parents=True, exist_ok=True)
    waiting, running, finished = list(jobs), {}, {}
    try:
        _schedule(waiting, running, finished, parallel, log_dir, report)
    except KeyboardInterrupt:  # Ctrl-C: each running poscli process checkpoints, then exits
        for job, process, handle, log, started in running.values():
            if process.poll() is None:
                process.send_signal(signal.SIGINT)
        deadline = time.monotonic() + STOP_GRACE_SECONDS
        for job, process, handle, log, started in running.values():
            try:
                process.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                process.kill()
            handle.close()
        raise
    return [finished[job.name] for job in jobs]


def _schedule(waiting: list[Job], running: dict, finished: dict, parallel: int, log_dir: Path, report) -> None:
    while waiting or running:
        while waiting and len(running) < parallel:
            job = waiting.pop(0)
            log = log_dir / f"{job.name}.log"
            handle = open(log, "w", encoding="utf-8")
            process = subprocess.Popen(job.command, stdout=handle, stderr=subprocess.STDOUT, env={**os.environ, **job.env})
            running[job.name] = (job, process, handle, log, time.perf_counter())
            report(f"started {job.name}")
        for name, (job, process, handle, log, started) in list(running.items()):
            if process.poll() is None:
                continue
            handle.close()
            outcome = Outcome(job, process.returncode, time.perf_counter() - started, log)
            finished[name] = outcome
            del running[name]
            if outcome.ok:
                report(f"finished {name} in {outcome.seconds / 60:.1f} min")
            else:
                report(f"FAILED {name} (exit {outcome.returncode}): {outcome.last_line()}  [log: {log}]")
        time.sleep(0.2)
