"""``poscli run RECIPE --launcher slurm``: the whole study submitted at once, as job arrays that wait
for their inputs.

Each phase is one job array with at most ``--jobs N`` of its tasks running at once (``%N``): the
[select] runs; or the runs to train, the extensions and the evaluations. An array waits for the
jobs that make its inputs (``--dependency=afterok:...``, a task of an array named as ARRAY_TASK)
and is cancelled if one of them fails (``--kill-on-invalid-dep=yes``). A step whose job is still
pending or running
(``RESULTS/logs/jobs.jsonl``) is not submitted again; what needs it waits for that job.

The driver then follows the jobs, a line per change (started, finished, FAILED), and writes the
summaries and the report. With ``--detach`` it submits one more job that runs after the others,
``poscli.study.runner.CarryOn`` (which submits what a [select] left to choose, or writes the summaries
and the report), prints the job ids and exits: the study completes with no driver alive. Every step
job runs ``poscli.study.jobs.run_job`` (requeued, never failed, when preempted or out of time)."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from poscli.errors import EnvironmentFailure
from poscli.model import runs
from poscli.study.cluster import SlurmSettings, safe_path
from poscli.study.plan import Recipe, RecipeError, RecipeInterrupted, Step
from poscli.study.status import CARRY_ON, queue_states, record_job, submitted_jobs


@dataclass(frozen=True)
class InFlight:
    """A step's job in the queue: submitted now, or pending or running from an earlier submission."""

    name: str  # the step's log name: train-RUN, extend-RUN, eval-TABLE, select-RUN
    job: str  # Slurm's id: JOB, or ARRAY_TASK


@dataclass(frozen=True)
class Submission:
    """A study to submit: its part to run (``--runs``), the whole (for the summaries), how."""

    recipe: Recipe
    whole: Recipe
    results: str | None
    settings: SlurmSettings
    parallel: int  # --jobs: tasks of one array at once
    each: bool  # --each: an evaluation per run
    report: Callable[[str], None]

    @property
    def log_dir(self) -> Path:
        return runs.results_dir(self.results) / "logs"


def run_on_slurm(submission: Submission, detach: bool, carry_on: Callable[[], int], rounds: int) -> Path | None:
    """Submit what is to do (a [select]'s runs first, when they are), then follow the jobs to the end
    and write the summaries and the report (its path); with ``detach``, submit ``carry_on`` after them
    and return None at once. ``rounds``: how many times the study may still be submitted (a [select],
    then the rest, then nothing: 3), so a step that keeps failing cannot be submitted for ever."""
    from poscli.study.state import check_selection, check_state, write_sweep

    recipe, results, report = submission.recipe, submission.results, submission.report
    submission.log_dir.mkdir(parents=True, exist_ok=True)
    for _ in range(rounds):
        if recipe.selection is not None:
            check_selection(recipe, results)  # each [select] run's status (a diverged one is done: a result)
        selecting = [step for step in recipe.select if step.status != "done"]
        if recipe.selection is not None and not selecting:
            write_sweep(recipe, results)
            if not check_selection(recipe, results):
                raise RecipeError("[select] runs are missing; run the recipe again")
            check_state(recipe, results, submission.each)  # the main runs now know their chosen values
        in_flight = submit_steps(submission, selecting)
        if detach and in_flight:
            # after the [select] runs however they ended (a diverged one is a result), else after success
            tail = submit_carry_on(submission, carry_on, [f.job for f in in_flight], any_end=bool(selecting))
            chosen = ", after submitting the runs the [select] chooses values for" if selecting else ""
            report(f"submitted job {tail} after them: it writes the summaries and the report{chosen}")
            return None
        if not in_flight:
            if any(step.status != "done" for step in recipe.steps):
                raise RecipeError("steps are left that nothing could submit; see poscli run RECIPE --dry-run")
            break
        try:
            failed = follow(in_flight, submission.log_dir, report)
        except KeyboardInterrupt:
            raise RecipeInterrupted(
                f"interrupted: the jobs were cancelled (training ones saved checkpoints). Continue with: poscli run "
                f"{recipe.path} --launcher slurm"
            ) from None
        if failed and not selecting:  # a [select] run that failed is judged by check_selection
            raise EnvironmentFailure(
                f"{len(failed)} steps failed ({', '.join(failed[:5])}); logs in {submission.log_dir}. "
                f"Fix the cause and run `poscli run {recipe.path} --launcher slurm` again: finished steps are kept"
            )
        check_state(recipe, results, submission.each)
    else:
        raise RecipeError(f"the study was submitted {rounds} times and is not done; see poscli run --status")
    return write_summaries_and_report(submission.whole, results)


def write_summaries_and_report(whole: Recipe, results) -> Path:
    """The whole study's summaries over seeds and verdicts, from what its tables hold, and the report."""
    from poscli.study.report import write_report
    from poscli.study.summaries import write_summaries

    write_summaries(whole, results)
    return write_report(results)


def submit_steps(submission: Submission, selecting: list[Step]) -> list[InFlight]:
    """Submit each phase still to do as an array after the jobs that make its inputs; every step's
    job in flight (those submitted now and those already queued)."""
    log_dir, report = submission.log_dir, submission.report
    queued, planned = queued_steps(log_dir), phases(submission, selecting)
    in_flight = [InFlight(name, queued[name]) for _, named in planned for name, _ in named if name in queued]
    made = {step.name: queued[name] for _, named in planned for name, step in named
            if name in queued and step.kind != "eval"}  # fmt: skip
    for phase, named in planned:
        fresh = [(name, step) for name, step in named if name not in queued]
        if not fresh:
            continue
        after = sorted({made[run] for _, step in fresh for run in inputs(step) if run in made})
        jobs = submit_array(submission, fresh, after)
        for (name, step), job in zip(fresh, jobs):
            record_job(log_dir, name, job, "slurm")
            in_flight.append(InFlight(name, job))
            if step.kind != "eval":
                made[step.name] = job
        waits = f" after {_jobs(len(after))}" if after else ""
        report(f"submitted {phase}: {_jobs(len(fresh))} ({_array_of(jobs)}, {submission.parallel} at once){waits}")
    if queued_here := [f for f in in_flight if f.name in queued]:
        report(f"{len(queued_here)} steps already in the queue are not submitted again")
    return in_flight


def phases(submission: Submission, selecting: list[Step]) -> list[tuple[str, list[tuple[str, Step]]]]:
    """The arrays to submit, in order, each as (phase, [(log name, step)]): the [select] runs alone while
    they are to do (the main runs take the values they choose), else training, extension and the
    evaluations (one per run with ``each``)."""
    if selecting:
        return [("select", [(f"select-{step.name}", step) for step in selecting])]
    todo = [step for step in submission.recipe.steps if step.status != "done"]
    found = [
        (phase, [(f"{phase}-{step.name}", step) for step in todo if step.kind == phase])
        for phase in ("train", "extend")
    ]  # fmt: skip (a recipe extends trained runs only)
    evaluations: list[tuple[str, Step]] = []
    for step in (step for step in todo if step.kind == "eval"):
        if submission.each:  # a table grows run by run, and a failed run fails only its own evaluation
            evaluations += [(f"eval-{step.name}-{run}", Step("eval", step.name, runs=[run], options=step.options))
                            for run in step.runs]  # fmt: skip
        else:
            taken = sum(1 for _, other in evaluations if other.name == step.name)  # two [[eval]] of one table
            evaluations.append((f"eval-{step.name}" + (f"-{taken + 1}" if taken else ""), step))
    found.append(("eval", evaluations))
    return [(phase, named) for phase, named in found if named]


def inputs(step: Step) -> list[str]:
    """The runs a step needs made first: an extension's parent, an evaluation's runs."""
    if step.kind == "extend":
        return [step.options["parent"]]
    return [run.split(runs.SNAPSHOT_MARK)[0] for run in step.runs] if step.kind == "eval" else []


def submit_array(submission: Submission, named: list[tuple[str, Step]], after: list[str]) -> list[str]:
    """The steps as one job array (one job for one step), after ``after``; their job ids."""
    from poscli.study.jobs import run_job

    executor = _executor(submission, after, any_end=False)
    executor.update_parameters(slurm_array_parallelism=submission.parallel)
    with safe_path(), executor.batch():
        jobs = [executor.submit(run_job, step.call(submission.results), submission.log_dir / f"{name}.log")
                for name, step in named]  # fmt: skip
    return [str(job.job_id) for job in jobs]


def submit_carry_on(submission: Submission, carry_on: Callable[[], int], after: list[str], any_end: bool) -> str:
    """``carry_on`` as one job after ``after`` (after their success, or ``any_end``: however they end);
    sbatch is run from it, so not inside an srun step; it asks for no GPU."""
    executor = _executor(submission, after, any_end)
    executor.update_parameters(slurm_use_srun=False, slurm_gpus_per_node=0)
    with safe_path():
        job = str(executor.submit(carry_on).job_id)
    record_job(submission.log_dir, CARRY_ON, job, "slurm")
    return job


def _executor(submission: Submission, after: list[str], any_end: bool):
    import submitit

    parameters = submission.settings.executor_parameters("slurm")
    extra = dict(parameters.pop("slurm_additional_parameters", {}))
    if after:
        waits = ("afterany:" if any_end else "afterok:") + ":".join(after)
        extra |= {"dependency": waits, "kill_on_invalid_dep": "yes"}
    executor = submitit.AutoExecutor(folder=str(submission.log_dir / "submitit"), cluster="slurm")
    executor.update_parameters(**parameters, slurm_additional_parameters=extra)
    return executor


def _jobs(count: int) -> str:
    return f"{count} job{'s' if count != 1 else ''}"


def _array_of(jobs: list[str]) -> str:
    return f"job {jobs[0]}" if len(jobs) == 1 else f"array {jobs[0].split('_')[0]}"


def queued_steps(log_dir: Path) -> dict[str, str]:
    """The steps whose last job is still pending or running: log name -> job id."""
    jobs = submitted_jobs(log_dir)
    states = queue_states(sorted(set(jobs.values())))
    if states is None:
        raise EnvironmentFailure("squeue failed: is Slurm reachable from here? Try: squeue")
    return {name: job for name, job in jobs.items() if job in states}


def follow(in_flight: list[InFlight], log_dir: Path, report, longest_wait: float = 30.0) -> list[str]:
    """Wait for the jobs, a line per change: started (running), finished, FAILED (its log's last line,
    or why it never ran). The queue is read every second at first, less often while nothing changes
    (up to ``longest_wait`` s). Ctrl-C cancels the jobs (training ones checkpoint) and stops the
    recipe (KeyboardInterrupt). Returns the failed steps' names."""
    waiting, running, failed, wait = {f.name: f.job for f in in_flight}, {}, [], 1.0
    try:
        while waiting:
            states = queue_states(sorted(waiting.values()))
            changed = False
            for name, job in list(waiting.items()) if states is not None else []:
                state = (states or {}).get(job)
                if state == "RUNNING" and name not in running:
                    running[name], changed = time.perf_counter(), True
                    report(f"started {name} (job {job})")
                elif state is None:  # left the queue
                    del waiting[name]
                    changed = True
                    code, line = outcome(job, log_dir)
                    if code:
                        failed.append(name)
                        report(f"FAILED {name} (job {job}): {line}  [log: {log_dir / f'{name}.log'}]")
                    else:
                        took = (time.perf_counter() - running.get(name, time.perf_counter())) / 60
                        report(f"finished {name} in {took:.1f} min")
            wait = 1.0 if changed else min(longest_wait, wait * 1.5)
            if waiting:
                time.sleep(wait)
    except KeyboardInterrupt:
        subprocess.run(["scancel", *waiting.values()], capture_output=True)
        raise
    return failed


def outcome(job: str, log_dir: Path) -> tuple[int, str]:
    """How a job that left the queue ended: (exit code, the line to report), from submitit's result
    file; a job without one was killed, or never ran (a job it waited for failed)."""
    from submitit.core.utils import JobPaths, pickle_load

    paths = JobPaths(log_dir / "submitit", job_id=job, task_id=0)  # a job's files, without a SlurmJob's watcher
    if not paths.result_pickle.exists():
        if paths.stdout.exists():
            return 1, f"the job ended without a result (killed, out of memory, cancelled): see {paths.stderr}"
        return 1, "never ran: a job it waits for failed or was cancelled"
    kind, result = pickle_load(paths.result_pickle)  # submitit's own file, written by the job (docs/guide.md)
    if kind == "success":
        return result
    lines = str(result).strip().splitlines()  # the job raised: its traceback
    return 1, lines[-1] if lines else kind
