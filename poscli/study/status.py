"""``poscli run RECIPE --status``: each step's state from the results folder and the scheduler.

A step is *done* when the results folder holds it (as ``--dry-run`` reads it); otherwise the job it
was last submitted as (``RESULTS/logs/jobs.jsonl``, written by ``poscli.study.cluster``) is looked up in
Slurm's queue (``squeue``): *pending* or *running*; a step whose job has left the queue without
finishing is *failed* with its log's last line, or *interrupted* where its run can resume; a step
whose run a process trains now (``poscli.model.runs.in_training``: a study run here) is *running*;
the rest are *to do*."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from poscli.study.plan import Step

JOBS_FILE = "jobs.jsonl"
CARRY_ON = "carry-on"  # the job of a detached study that runs after its steps (poscli.study.jobs.CarryOn)


def record_job(log_dir: Path, log_name: str, job_id: str, launcher: str) -> None:
    """Note that the step logged as ``log_name`` was submitted as ``job_id``."""
    log_dir.mkdir(parents=True, exist_ok=True)
    line = {"step": log_name, "job": str(job_id), "launcher": launcher, "submitted": time.time()}
    with open(log_dir / JOBS_FILE, "a", encoding="utf-8") as handle:
        handle.write(json.dumps(line) + "\n")


def submitted_jobs(log_dir: Path) -> dict[str, str]:
    """Each step's last job id (step log name -> job id)."""
    path = log_dir / JOBS_FILE
    if not path.exists():
        return {}
    jobs = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            entry = json.loads(line)
            jobs[entry["step"]] = entry["job"]
    return jobs


def queue_states(job_ids: list[str]) -> dict[str, str] | None:
    """Slurm's state of each job still in its queue (job id, ARRAY_TASK for an array's task -> e.g.
    PENDING, RUNNING); {} without squeue; None when squeue failed (the controller did not answer)."""
    squeue = shutil.which("squeue")
    if squeue is None or not job_ids:
        return {}
    done = subprocess.run([squeue, "-h", "-r", "-o", "%i %T", "-j", ",".join(job_ids)], capture_output=True, text=True)
    if done.returncode != 0 and "Invalid job id" not in done.stderr:  # ids it has forgotten are not a failure
        return None
    pairs = (line.split() for line in done.stdout.splitlines())
    return {pair[0]: pair[1] for pair in pairs if len(pair) == 2}


def last_line(log: Path) -> str:
    lines = [line for line in log.read_text(encoding="utf-8", errors="replace").splitlines() if line.strip()]
    return lines[-1].strip() if lines else ""


def step_states(named: list[tuple[str, Step]], log_dir: Path, training=None) -> list[tuple[str, str, str]]:
    """(step, state, detail) for each (log name, Step) of ``named``, its status read from the results
    folder; ``training(step)``: where its run is ("step 2960 of 7491") if a process trains it now (a
    study run here), else None."""
    training = training or (lambda step: None)
    jobs = submitted_jobs(log_dir)
    queued = queue_states(sorted({jobs[name] for name, _ in named if name in jobs})) or {}
    rows = []
    for name, step in named:
        job, log = jobs.get(name), log_dir / f"{name}.log"
        status, detail = step.status, step.detail
        if status == "done":
            rows.append((name, "done", detail))
        elif job is not None and job in queued:
            rows.append((name, queued[job].lower(), f"job {job}"))
        elif (progress := training(step)) is not None:
            rows.append((name, "running", f"being trained now: {progress}"))
        elif status == "resume":
            rows.append((name, "interrupted", "resumes from its checkpoint when the recipe runs again"))
        elif log.exists() and last_line(log):
            rows.append((name, "failed", last_line(log)))
        else:
            rows.append((name, "to do", ""))
    return rows


def queued_carry_on(log_dir: Path) -> tuple[str, str] | None:
    """The job of a detached study that runs after its steps, if it is in the queue: (job id, state)."""
    job = submitted_jobs(log_dir).get(CARRY_ON)
    state = (queue_states([job]) or {}).get(job) if job else None
    return (job, state.lower()) if job and state else None
