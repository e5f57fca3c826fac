"""What runs inside a Slurm job of a study (``poscli run --launcher slurm``, ``poscli.study.submit``):
one step that survives preemption and its time limit.

A step job is requeued, never failed, when Slurm stops it early: submitit asks Slurm for SIGUSR2 90 s
before the time limit (``--signal=USR2@90``) and a preempting cluster sends SIGTERM. A training or
extension step then finishes the optimizer step in progress, saves its checkpoint
(``poscli.training.stopping``) and requeues its own job (``scontrol requeue``); the requeued job
(``SLURM_RESTART_COUNT`` > 0) resumes the run from that checkpoint, so it ends with the weights an
uninterrupted run has. An evaluation is simply requeued and runs again."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from poscli.errors import PoscliError
from poscli.model import runs
from poscli.study.steps import run_logged

REQUEUE_LIMIT = 20  # a step stopped this many times fails instead (a job that cannot make progress)


def run_job(call: dict, log: Path) -> tuple[int, str]:
    """One recipe step (``Step.call``) as a job: (exit code, the line to report on failure), as
    :func:`poscli.study.steps.run_logged`. Uses the job's CPUs as torch threads."""
    restarts = int(os.environ.get("SLURM_RESTART_COUNT") or 0)
    if restarts:
        resumed = requeued_call(call)
        if resumed is None:
            return 0, ""
        call = resumed
    _take_the_jobs_cpus()
    previous = {signal.SIGTERM: signal.signal(signal.SIGTERM, _requeue_now),
                signal.SIGUSR2: signal.signal(signal.SIGUSR2, _as_sigterm)}  # fmt: skip
    try:
        return run_logged(call, log)
    except PoscliError as error:  # training stopped by the signal: its checkpoint is saved
        if error.exit_code in (130, 143):
            requeue(restarts)
        raise
    except KeyboardInterrupt:  # a second signal stopped a step halfway: resume from the last checkpoint
        requeue(restarts)
        raise
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)


def requeued_call(call: dict) -> dict | None:
    """The step a requeued job runs: its run resumed where its folder holds the unfinished run, nothing
    (None) where the run finished before the job was stopped; an evaluation as it was."""
    if call["kind"] == "eval" or call.get("resume"):
        return call
    folder = runs.runs_dir(call.get("results")) / call["name"]
    if not (folder / runs.CONFIG_FILE).exists():
        return call  # stopped before its run folder was written: start it
    if runs.read_config(folder).get("status") == "finished":
        return None
    return call | {"resume": True}


def requeue(restarts: int) -> None:
    """Put this job back in the queue (it starts again with SLURM_RESTART_COUNT + 1) and end this
    process without a result, as submitit's own requeue does; after REQUEUE_LIMIT stops, fail."""
    job = _job_id()
    if job is None or restarts >= REQUEUE_LIMIT:
        return  # not a Slurm job, or stopped too often: the step fails with its signal's exit code
    done = subprocess.run(["scontrol", "requeue", job], capture_output=True, text=True)
    if done.returncode != 0:  # cancelled (scancel), or the cluster refuses: the step ends as stopped
        print(f"poscli: job {job} not requeued: {done.stderr.strip()}", file=sys.stderr)
        return
    print(f"poscli: job {job} requeued (restart {restarts + 1}); it resumes from its checkpoint", file=sys.stderr)
    sys.exit(-1)


def _job_id() -> str | None:
    """This job's id as scontrol names it: ARRAY_TASK for a task of an array."""
    array, task = os.environ.get("SLURM_ARRAY_JOB_ID"), os.environ.get("SLURM_ARRAY_TASK_ID")
    return f"{array}_{task}" if array and task else os.environ.get("SLURM_JOB_ID")


def _requeue_now(number, frame) -> None:
    """SIGTERM outside training (an evaluation, or before the loop): requeue at once."""
    requeue(int(os.environ.get("SLURM_RESTART_COUNT") or 0))
    sys.exit(128 + number)  # not requeued: stopped, as SIGTERM would


def _as_sigterm(number, frame) -> None:
    """SIGUSR2 (the time limit is near): whatever SIGTERM does now (during training, stop at the step's end)."""
    handler = signal.getsignal(signal.SIGTERM)
    if callable(handler):
        handler(signal.SIGTERM, frame)


def _take_the_jobs_cpus() -> None:
    """torch's threads: the job's CPUs (SLURM_CPUS_PER_TASK), not every core of the node."""
    cpus = os.environ.get("SLURM_CPUS_PER_TASK", "")
    if cpus.isdigit() and int(cpus) > 0:
        import torch

        torch.set_num_threads(int(cpus))
