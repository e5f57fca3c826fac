"""``poscli run``, ``export``, ``report``, ``runs``, ``encodings`` and ``methods``: studies, leaving
poscli, and what there is."""

from __future__ import annotations

import importlib.util
import inspect
from pathlib import Path
from typing import Annotated

import typer

from poscli.cli.common import Results, app, complete_runs, declared, new_console
from poscli.errors import PoscliError
from poscli.study.run_request import RunRequest

RECIPE = inspect.Parameter(
    "recipe",
    inspect.Parameter.POSITIONAL_OR_KEYWORD,
    annotation=Annotated[
        str,
        typer.Argument(
            metavar="RECIPE", help="A recipe file, e.g. recipes/train-short-test-long.toml (format: recipes/README.md)."
        ),
    ],
)


@app.command(
    "run", epilog="Examples: poscli run recipes/train-short-test-long.toml | poscli run recipes/smoke.toml --dry-run"
)
@declared(RunRequest, RECIPE)
def run_recipe(recipe: str, request: RunRequest):
    """Run a whole study: train, extend, evaluate, summarise over seeds, compare with the papers, report.
    Steps already done are skipped and interrupted runs resumed, so running it again continues."""
    from poscli.study.runner import run_recipe as run
    from poscli.study.summaries import summarise

    if request.summaries:
        if ignored := request.ignored_by_summaries():
            raise PoscliError(f"--summaries runs nothing, so {', '.join(ignored)} would be ignored: leave them out")
        for path in summarise(recipe, request.results, request.sizes):
            new_console().print(f"wrote {path}", highlight=False)
        return
    run(recipe, request.results, jobs=request.jobs, dry_run=request.dry_run, console=new_console(), each=request.each,
        launcher=request.launcher, only=request.runs, sizes=request.sizes, slurm=request.slurm(),
        status=request.status, detach=request.detach)  # fmt: skip


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
    from poscli.model.runs import existing_runs, results_dir
    from poscli.study.report import write_report

    folder = results_dir(results)
    if not folder.is_dir() or not (any(folder.glob("*.csv")) or existing_runs(results)):
        raise PoscliError(
            f"no tables or runs in {folder} to report; evaluate runs first (poscli eval RUN... --table NAME) "
            "or name the folder that holds them (--results DIR)"
        )
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
