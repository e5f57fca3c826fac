"""``poscli run``: a recipe's steps still to do, run here, ``--jobs N`` at a time in processes of their
own, or as cluster jobs; with ``--each`` run by run; [select]'s runs first; then the summaries and
the report. Ctrl-C stops it with the command that continues it."""

from __future__ import annotations

import dataclasses
import fnmatch
import shlex
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from poscli.errors import EnvironmentFailure, PoscliError
from poscli.model import runs
from poscli.study.plan import Recipe, RecipeError, RecipeInterrupted, Step
from poscli.study.recipes import load_recipe
from poscli.study.state import check_selection, check_state, write_sweep
from poscli.study.summaries import write_summaries


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
    slurm: dict | None = None,
    status: bool = False,
    detach: bool = False,
    rounds: int = 3,
) -> Recipe:
    """Run (or, with ``dry_run``, list) every step of a recipe that is not done yet. With ``each``,
    every trained run (and its snapshots) is evaluated by each [[eval]] that names it as soon as it
    is trained, before the next run starts: a long study stopped at any point keeps the tables of
    every finished run, and a run whose rows are in every table needs no weights to count as done.
    ``launcher``: ``local`` (this process, or ``jobs`` processes), or cluster jobs through submitit
    (``slurm``, ``submitit-local``: ``poscli.study.cluster``). ``only``: run patterns, the part of
    the study to run (``narrow``). ``sizes``: the [sizes] set (``load_recipe``). ``slurm``: the
    Slurm settings given as flags, over the recipe's [slurm] (``poscli.study.cluster.SlurmSettings``).
    A [select]'s runs train first; the main runs then train with the values they chose
    (``poscli.study.ladder``). ``status``: print each step's state (done, pending, running, failed
    with its log's last line, interrupted, to do) and run nothing. On Slurm the whole study is
    submitted at once (``poscli.study.submit``); ``detach``: submit it and return, the study goes on
    from its jobs (``rounds``: how many more times they may submit it)."""
    from rich.console import Console

    console = console or Console(stderr=True, soft_wrap=True)
    if jobs < 1:
        raise PoscliError(f"--jobs must be at least 1, got {jobs}")
    whole = load_recipe(path, sizes)
    settings = _job_settings(launcher, slurm or {}, whole)
    if detach and launcher != "slurm":
        raise PoscliError("--detach submits the study as Slurm jobs and leaves them to it: add --launcher slurm")
    recipe = narrow(whole, only) if only else whole
    check_selection(recipe, results)
    check_state(recipe, results, each)
    todo = [s for s in recipe.steps if s.status != "done"]
    selecting = [s for s in recipe.select if s.status != "done"]
    console.print(_headline(recipe, whole, only, len(todo) + len(selecting)), highlight=False)
    if dry_run:
        _print_plan(recipe, whole, console)
        return recipe
    if status:
        _print_status(recipe, results, console)
        return recipe
    if launcher == "slurm":
        _run_on_slurm(recipe, whole, results, console, jobs, each, settings, detach, rounds, (only, sizes))
        return recipe

    _run_here(recipe, whole, results, console, jobs, each, launcher, settings)
    return recipe


def _run_here(recipe: Recipe, whole: Recipe, results, console, jobs: int, each: bool, launcher: str, settings) -> None:
    """The steps left, on this machine (``jobs`` at a time, ``each``), or as submitit-local jobs, with
    a progress bar; then the whole study's summaries and the report."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    todo = [s for s in recipe.steps if s.status != "done"]
    selecting = [s for s in recipe.select if s.status != "done"]
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

        runner = _Runner(recipe, results, log_dir, report, launcher, plan, settings)
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


def _print_plan(recipe: Recipe, whole: Recipe, console) -> None:
    """--dry-run: every step with its status and the command that does it, then the claims."""
    from rich.markup import escape

    for step in [*recipe.select, *recipe.steps]:
        console.print(f"  {step.status:6}  {step.kind:6} {step.name}  [dim]{escape(step.detail)}[/]", highlight=False)
        if step.status != "done":
            console.print(f"          poscli {shlex.join(step.argv)}", highlight=False, markup=False)  # to paste
    _print_claims(whole, console)


def _job_settings(launcher: str, slurm: dict, whole: Recipe):
    """The launcher checked, and each job's Slurm settings: the flags given over the recipe's [slurm]."""
    from poscli.study.cluster import SlurmSettings, check_launcher

    check_launcher(launcher)
    if launcher == "local" and slurm:
        raise PoscliError(f"--{next(iter(slurm))} sets a Slurm job's request: add --launcher slurm, or leave it out")
    return SlurmSettings.resolve(whole.slurm, slurm)


def _run_on_slurm(recipe, whole, results, console, jobs, each, settings, detach, rounds, part) -> None:
    """The study as Slurm jobs, submitted at once (``poscli.study.submit``)."""
    from poscli.study.submit import Submission, run_on_slurm

    def report(line: str) -> None:
        console.print("  " + line, highlight=False, markup=False)

    submission = Submission(recipe, whole, results, settings, jobs, each, report)
    only, sizes = part
    given = {key: value for key, value in dataclasses.asdict(settings).items() if value not in (None, [])}
    folder = None if results is None else str(results)
    carry_on = CarryOn(str(recipe.path), folder, jobs, each, only, sizes, given, rounds - 1)
    report_path = run_on_slurm(submission, detach, carry_on, rounds)
    if report_path is None:
        console.print(f"submitted; this process can leave. Follow the study with: poscli run {recipe.path} --status"
                      f"{'' if results is None else f' --results {results}'}", highlight=False)  # fmt: skip
    else:
        console.print(f"recipe {recipe.name} done; report: {report_path}")


def _print_status(recipe: Recipe, results, console) -> None:
    """--status: each step's state from the results folder and the scheduler (poscli.study.status)."""
    from poscli.study.status import CARRY_ON, queued_carry_on, step_states

    named = [(f"select-{s.name}", s) for s in recipe.select] + [(f"{s.kind}-{s.name}", s) for s in recipe.steps]
    log_dir = runs.results_dir(results) / "logs"

    def training(step: Step) -> str | None:  # where its run is, if a process trains it now
        folder = runs.runs_dir(results) / step.name
        return runs.training_progress(folder) if step.kind != "eval" and runs.in_training(folder) else None

    for name, state, detail in step_states(named, log_dir, training):
        console.print(f"  {state:11} {name}  {detail}", highlight=False, markup=False)
    if carry_on := queued_carry_on(log_dir):
        job, state = carry_on
        console.print(f"  {state:11} {CARRY_ON}  job {job}: the summaries and the report, after the steps",
                      highlight=False, markup=False)  # fmt: skip


def _print_claims(recipe: Recipe, console) -> None:
    """--dry-run's list of the recipe's declared claims, each with its test and its planned runs."""
    from poscli.study.claims import describe

    if not recipe.claims:
        console.print("  claims: none declared (every comparison is an exploratory screen)", highlight=False)
        return
    console.print(f"  claims ({len(recipe.claims)}, each its own Holm family):", highlight=False)
    for claim in recipe.claims:
        console.print(f"    {describe(claim, recipe.tables[claim.table])}", highlight=False, markup=False)


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


def _run_selection(recipe: Recipe, selecting: list[Step], runner: _Runner, jobs: int, results) -> None:
    """[select]'s runs still to do (and those a widened grid adds), ``jobs`` at a time, the table
    rewritten after each batch (a study stopped mid-sweep keeps every finished select run's loss,
    and a fresh clone resumes from the table); a run that diverged counts as infinitely bad."""
    failure, tried = None, set()
    while selecting:
        batch = selecting[:jobs]
        try:
            runner.phase([(f"select-{s.name}", s) for s in batch], jobs, "select")
        except EnvironmentFailure as error:
            failure = error  # a diverged run fails its step, but is a result here
        tried |= {step.name for step in batch}
        write_sweep(recipe, results)  # also reads the selection: a widened grid's next value joins
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
        found: list[tuple[str, Step]] = []
        for evaluation in (e for e in recipe.evals if e.status != "done"):
            names = [n for n in evaluation.runs if n == run or n.startswith(run + runs.SNAPSHOT_MARK)]
            if names:
                narrowed = Step("eval", evaluation.name, runs=names, options=evaluation.options)
                name = f"eval-{evaluation.name}-{run}"
                taken = len([step for _, step in found if step.name == evaluation.name])  # two [[eval]] of one table
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

    def __init__(
        self, recipe: Recipe, results, log_dir: Path, report, launcher: str = "local", plan=None, settings=None
    ):
        self.recipe, self.results, self.log_dir, self.report = recipe, results, log_dir, report
        self.launcher, self.settings = launcher, settings
        self.plan = plan or (lambda steps: None)  # how many steps will be reported from here on

    def phase(self, named: list[tuple[str, Step]], parallel: int, phase: str) -> None:
        def run() -> list[str]:
            if self.launcher != "local":  # cluster jobs (poscli.study.cluster)
                from poscli.study.cluster import run_as_jobs

                calls = [(name, step.call(self.results)) for name, step in named]
                return run_as_jobs(calls, parallel, self.launcher, self.log_dir, self.report, self.settings)
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
        from poscli.training.stopping import TrainingInterrupted

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


@dataclass(frozen=True)
class CarryOn:
    """The last job of a detached study (``poscli run --detach``), run after every job before it: the
    recipe run again, detached, from the results folder. What the jobs before made is done; what is
    left (a [select]'s main runs, which needed its choice) is submitted with a CarryOn of its own;
    with nothing left, it writes the summaries and the report."""

    recipe: str
    results: str | None
    jobs: int
    each: bool
    only: list[str] | None
    sizes: str | None
    slurm: dict[str, Any] = field(default_factory=dict)  # the Slurm settings given, as flags
    rounds: int = 2  # how many more times the study may be submitted (``poscli.study.submit.run_on_slurm``)

    def __call__(self) -> int:
        import os

        for name in [name for name in os.environ if name.startswith(("SLURM_", "SBATCH_")) and name != "SLURM_CONF"]:
            os.environ.pop(name)  # this job's own settings must not leak into the jobs it submits
        run_recipe(self.recipe, self.results, jobs=self.jobs, each=self.each, launcher="slurm", only=self.only,
                   sizes=self.sizes, slurm=self.slurm, detach=True, rounds=self.rounds)  # fmt: skip
        return 0


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
