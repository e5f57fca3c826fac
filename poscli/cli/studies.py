"""``poscli run``, ``export``, ``report``, ``runs``, ``encodings`` and ``methods``: studies, leaving
poscli, and what there is."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Annotated

import typer

from poscli.cli.common import Results, app, complete_runs, new_console, typer_option
from poscli.errors import PoscliError
from poscli.study.cluster import SlurmSettings
from poscli.training.requests import declared_options

SLURM = {name: typer_option(option) for name, option in declared_options(SlurmSettings).items()}


@app.command(
    "run", epilog="Examples: poscli run recipes/train-short-test-long.toml | poscli run recipes/smoke.toml --dry-run"
)
def run_recipe(
    recipe: Annotated[
        str,
        typer.Argument(
            metavar="RECIPE", help="A recipe file, e.g. recipes/train-short-test-long.toml (format: recipes/README.md)."
        ),
    ],
    jobs: Annotated[
        int,
        typer.Option(
            metavar="N", help="Runs to train or extend at once (each gets cores / jobs threads, or its own GPU)."
        ),
    ] = 1,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="List every step and whether it is done, to do or to resume; run nothing.")
    ] = False,
    each: Annotated[
        bool,
        typer.Option(
            "--each",
            help="Evaluate every run (and its snapshots) as soon as it is trained: a study stopped anywhere keeps "
            "every finished run's rows, and needs no weights to go on. With --jobs N, N runs train at once, then "
            "each is evaluated.",
        ),
    ] = False,
    launcher: Annotated[
        str,
        typer.Option(
            metavar="local|slurm|submitit-local",
            help="local: this machine; slurm: each step a Slurm job through submitit (pip install 'poscli[slurm]'; "
            "the job's request from the flags below, else the recipe's [slurm], else POSCLI_SLURM_PARTITION, _GPUS, "
            "_CPUS, _TIMEOUT_MIN); submitit-local: the same jobs as local processes.",
        ),
    ] = "local",
    partition: Annotated[str | None, SLURM["partition"]] = None,
    account: Annotated[str | None, SLURM["account"]] = None,
    qos: Annotated[str | None, SLURM["qos"]] = None,
    time: Annotated[str | None, SLURM["time"]] = None,
    mem: Annotated[str | None, SLURM["mem"]] = None,
    cpus: Annotated[int | None, SLURM["cpus"]] = None,
    gpus: Annotated[int | None, SLURM["gpus"]] = None,
    constraint: Annotated[str | None, SLURM["constraint"]] = None,
    setup: Annotated[list[str] | None, SLURM["setup"]] = None,
    sbatch: Annotated[list[str] | None, SLURM["sbatch"]] = None,
    runs: Annotated[
        list[str] | None,
        typer.Option(
            "--runs",
            metavar="PATTERN",
            help="Only the runs to train whose names match (a glob, repeatable), what is extended from them and "
            "their evaluations: a long study in parts, e.g. --runs 'xt-*-s[01]' for two seeds a session. "
            "Summaries and comparisons are the whole study's.",
        ),
    ] = None,
    sizes: Annotated[
        str | None,
        typer.Option(
            "--sizes",
            metavar="SET",
            help="The recipe's [sizes] set its size rungs take their shapes from (default: its first), e.g. --sizes "
            "gpu for recipes/scale-ladder.toml's 10x ladder; give a --results folder of its own.",
        ),
    ] = None,
    summaries: Annotated[
        bool,
        typer.Option(
            "--summaries",
            help="Train and evaluate nothing: rewrite the summaries over seeds, the published files (declared claims, "
            "gates, screen) and the report from the tables as they are, e.g. after declaring a claim.",
        ),
    ] = False,
    results: Results = None,
):
    """Run a whole study: train, extend, evaluate, summarise over seeds, compare with the papers, report.
    Steps already done are skipped and interrupted runs resumed, so running it again continues."""
    from poscli.study.runner import run_recipe as run
    from poscli.study.summaries import summarise

    asked = dict(partition=partition, account=account, qos=qos, time=time, mem=mem, cpus=cpus, gpus=gpus,
                 constraint=constraint, setup=setup, sbatch=sbatch)  # fmt: skip
    slurm = {key: value for key, value in asked.items() if value not in (None, [])}

    if summaries:
        ignored = [flag for flag, given in (("--jobs", jobs != 1), ("--dry-run", dry_run), ("--each", each),
                   ("--launcher", launcher != "local"), ("--runs", bool(runs)),
                   *((f"--{key}", True) for key in slurm)) if given]  # fmt: skip
        if ignored:
            raise PoscliError(f"--summaries runs nothing, so {', '.join(ignored)} would be ignored: leave them out")
        for path in summarise(recipe, results, sizes):
            new_console().print(f"wrote {path}", highlight=False)
        return
    run(recipe, results, jobs=jobs, dry_run=dry_run, console=new_console(), each=each, launcher=launcher, only=runs,
        sizes=sizes, slurm=slurm)  # fmt: skip


@app.command(
    epilog="Examples: poscli export rope exports/rope | poscli export rope+yarn-4k exports/rope-yarn --no-check"
)
def export(
    run: Annotated[
        str,
        typer.Argument(
            metavar="RUN", autocompletion=complete_runs, help="A RoPE or learned-position run (trained or extended)."
        ),
    ],
    folder: Annotated[Path, typer.Argument(metavar="DIR", help="The transformers model folder to write.")],
    check: Annotated[
        bool,
        typer.Option(
            "--check/--no-check",
            help="Load DIR with transformers and compare its logits with poscli's (needs transformers).",
        ),
    ] = True,
    replace: Annotated[
        bool, typer.Option("--replace", help="Overwrite an earlier export in DIR (other files there are kept).")
    ] = False,
    results: Results = None,
):
    """Write RUN as a transformers model folder: AutoModelForCausalLM.from_pretrained(DIR) loads it."""
    from poscli.export.hf import check_export
    from poscli.export.hf import export as export_run
    from poscli.model.runs import find_run

    found = find_run(run, results)
    written = export_run(found, folder, replace)
    print(f"wrote {folder} ({written['architectures'][0]})")
    if check and importlib.util.find_spec("transformers") is None:
        print("not checked: transformers is not installed (pip install 'transformers>=4.57' to load and check it)")
    elif check:
        checked = check_export(found, folder)
        lengths = ", ".join(str(length) for length in checked["lengths"])
        print(
            f"checked with transformers {checked['transformers']}: max |logit difference| "
            f"{checked['max_abs_diff']:.2e} at lengths {lengths}"
        )


@app.command(epilog="Example: poscli report --results results/reference")
def report(results: Results = None):
    """Write RESULTS/REPORT.md: every table and plot in the results folder, the commands that made them, the machine."""
    from poscli.study.report import write_report

    print(f"wrote {write_report(results)}")


@app.command("runs", epilog="Example: poscli runs --results results/reference")
def list_runs(results: Results = None):
    """List the runs in the results folder: name, encoding, status, steps, held-out perplexity."""
    from poscli.model.runs import run_lines

    for line in run_lines(results):
        print(line)


@app.command("encodings", epilog="Example: poscli encodings")
def list_encodings():
    """List the positional encodings: a line, a citation, their options and extension methods."""
    from poscli.encodings import describe, names

    for name in names():
        info = describe(name)
        options = ", ".join(f"{key}={value}" for key, value in info["options"].items()) or "none"
        print(
            f"{name:<11} {info['summary']} ({info['citation']})\n{'':<11} options: {options}; extend: "
            f"{info['extension']}"
        )


@app.command("methods", epilog="Example: poscli methods")
def list_methods():
    """List the extension methods of poscli extend: a line, a citation, options, training, where they apply."""
    from poscli import encodings
    from poscli.extension.methods import describe, get, names

    for name in names():
        info = describe(name)
        info["encodings"] = [pe for pe in encodings.names() if get(name).applies_to(encodings.get(pe)) is None]
        print(
            f"{name:<13} {info['summary']} ({info['citation']})\n{'':<13} training: {info['training']}; applies to: "
            f"{', '.join(info['encodings']) or 'none'}"
        )
        for key, (default, help_line) in info["options"].items():
            print(f"{'':<13} --{key.replace('_', '-')} (default {default if default != () else 'none'}): {help_line}")
