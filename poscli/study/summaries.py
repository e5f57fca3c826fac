"""After a recipe's evaluations: the summaries over seeds (TABLE-seeds.*), each run's gate, the
declared claims' verdicts (with their verdict by size), the runs that did not learn and the
exploratory screen (TABLE-published.md), from the tables as they are."""

from __future__ import annotations

import tomllib
from collections.abc import Callable
from dataclasses import replace
from functools import partial
from pathlib import Path

from poscli.evaluation import tasks
from poscli.model import runs
from poscli.study.by_size import by_size, by_size_markdown, plot_by_size
from poscli.study.plan import Recipe, RecipeError, Step
from poscli.study.recipes import load_recipe, snapshot_steps
from poscli.study.state import write_sweep
from poscli.training.options import EVAL_OPTIONS


def write_summaries(recipe: Recipe, results=None) -> list[Path]:
    """For each table of the recipe whose runs repeat over seeds: TABLE-seeds.csv/.md/.png, the
    mean over seeds of each group of runs at each length with its 95% interval over seeds and
    evaluation sample (``seed_summary``), and how many of each group's runs did not learn
    (``poscli.study.gates``). Then, for each table with declared claims or a [[compare]],
    TABLE-published.md: the claims' verdicts, the runs that did not learn, and the exploratory
    screen (the [[compare]] writers, over the runs that learned)."""
    from poscli.core.io import atomic_write
    from poscli.evaluation.tables import read_table
    from poscli.study.gates import GATES_SUFFIX, every_gate_markdown
    from poscli.study.gates import merged as merged_gates
    from poscli.study.report import PUBLISHED_SUFFIX, SEEDS_SUFFIX

    folder = runs.results_dir(results)
    written = []
    studied: dict[str, tuple] = {}  # table -> (summary over learned runs, rows, learned run -> group, gates)
    groups_of_table: dict[str, dict] = {}  # two [[eval]] of one table (runs, then snapshots) summarise together
    for step in recipe.evals:
        groups_of_table.setdefault(step.name, {}).update(step.groups)
    meta = _group_options(recipe)
    read = {}  # table -> (its step with every group, its rows)
    for step in recipe.evals:
        table = folder / f"{step.name}.csv"
        if table.exists() and step.name not in read:
            merged_step = Step(
                step.kind, step.name, runs=step.runs, options=step.options, groups=groups_of_table[step.name]
            )
            read[step.name] = (merged_step, read_table(table))
    gates_of = merged_gates({name: _gates(recipe, step, rows, meta) for name, (step, rows) in read.items()})
    for name, gates in gates_of.items():
        if gates:
            with atomic_write(folder / f"{name}{GATES_SUFFIX}.md") as handle:
                handle.write(every_gate_markdown(name, gates))
            written.append(folder / f"{name}{GATES_SUFFIX}.md")
    for name, (step, rows) in read.items():
        task = tasks.get(step.options.get("task", EVAL_OPTIONS["task"]))
        compared = any(entry.get("perplexity") == step.name for entry in recipe.compare)  # one seed is enough
        min_runs = 1 if compared else 2
        summary, text = task.seed_summary(rows, step.groups, step.options, folder, step.name, min_runs)
        if summary is None:
            continue
        gates = gates_of[name]
        learned = {run: group for run, group in step.groups.items() if run not in gates or gates[run].learned}
        _count_unlearned(summary, gates)
        with atomic_write(folder / f"{step.name}{SEEDS_SUFFIX}.csv") as handle:
            summary.to_csv(handle, index=False)
        with atomic_write(folder / f"{step.name}{SEEDS_SUFFIX}.md") as handle:
            handle.write(text + _unlearned_note(gates))
        written += [folder / f"{step.name}{SEEDS_SUFFIX}.csv", folder / f"{step.name}{SEEDS_SUFFIX}.md"]
        written += task.seed_plots(summary, folder, step.name)
        if len(learned) < len(step.groups) and recipe.tables[step.name]["kind"] != "algorithmic":
            summary = task.seed_summary(rows, learned, step.options, folder, step.name, min_runs)[0]
        studied[step.name] = (summary, rows, learned, gates)
    for table in dict.fromkeys([*(e["table"] for e in recipe.compare), *(c.table for c in recipe.claims)]):
        if table in studied:
            verdicts = _verdicts(recipe, table, studied)
            text = _published_text(recipe, table, studied, meta, verdicts)
            with atomic_write(folder / f"{table}{PUBLISHED_SUFFIX}.md") as handle:
                handle.write(text)
            written.append(folder / f"{table}{PUBLISHED_SUFFIX}.md")
            written += _write_by_size(verdicts, folder, table)
    return written


def summarise(path: str | Path, results=None, sizes: str | None = None) -> list[Path]:
    """``poscli run RECIPE --summaries``: the recipe's summaries, published files and report from
    its tables as they are, nothing trained or evaluated."""
    from poscli.study.report import write_report

    recipe = load_recipe(path, sizes)
    if not (runs.results_dir(results)).is_dir():
        raise RecipeError(f"no results folder {runs.results_dir(results)}; give the one the study wrote (--results)")
    return [*write_sweep(recipe, results), *write_summaries(recipe, results), write_report(results)]


def _verdicts(recipe: Recipe, table: str, studied: dict) -> list:
    """The table's declared claims, decided over its learned runs, each with when it was declared."""
    from poscli.study import claim_values
    from poscli.study import claims as claim_module

    summary, rows, learned, _ = studied[table]
    info = recipe.tables[table]
    values = claim_values.values_of(info, summary, rows, learned)
    verdicts = []
    for claim in (c for c in recipe.claims if c.table == table):
        verdict = claim_module.decide(claim, info, values)
        verdict.declared, verdict.exploratory = claim_module.declaration(recipe.path, claim, recipe_claims)
        verdicts.append(verdict)
    return verdicts


def _write_by_size(verdicts: list, folder: Path, table: str) -> list[Path]:
    """TABLE-by-size.csv and .png: each claim decided at several sizes, against parameters."""
    import pandas as pd

    from poscli.core.io import atomic_write

    rows = by_size(verdicts)
    if not rows:
        return []
    with atomic_write(folder / f"{table}-by-size.csv") as handle:
        pd.DataFrame(rows).to_csv(handle, index=False)
    figure = plot_by_size([row for row in rows if row["metric"] == "perplexity"], folder / f"{table}-by-size.png")
    return [folder / f"{table}-by-size.csv", *([figure] if figure else [])]


def _group_options(recipe: Recipe) -> dict:
    """group -> the options that made it (an extension's include its parent's; a snapshot's, its budget)."""
    meta: dict[str, dict] = {}
    for step in [*recipe.train, *recipe.extend, *(snapshot for s in recipe.train for snapshot in snapshot_steps(s))]:
        meta.setdefault(step.group, step.options)
    return meta


def _gates(recipe: Recipe, step: Step, rows, meta: dict) -> dict:
    """Each run's gate (``poscli.study.gates``) by its table's kind."""
    from poscli.evaluation.seeds import table_mode
    from poscli.study import gates

    kind = recipe.tables[step.name]["kind"]
    if kind == "perplexity":
        mode = table_mode(step.options.get("stride"))
        return gates.perplexity_gates(rows, step.groups, meta, recipe.gates or gates.GateBounds(), mode)
    if kind == "algorithmic":
        return gates.task_gates(rows, step.groups)
    if kind == "passkey":
        return gates.passkey_gates(rows, step.groups, meta, recipe.gates or gates.GateBounds())
    return {}


def _count_unlearned(summary, gates: dict) -> None:
    """The summary's ``not_learned`` column: how many of each group's runs did not pass their gate."""
    failed: dict[str, int] = {}
    for gate in gates.values():
        failed[gate.group] = failed.get(gate.group, 0) + (not gate.learned)
    summary["not_learned"] = [failed.get(group, 0) for group in summary["group"]]


def _unlearned_note(gates: dict) -> str:
    failed = sorted(gate.run for gate in gates.values() if not gate.learned)
    if not failed:
        return ""
    return (f"\nDid not learn ({len(failed)} runs, kept out of every claim and ranking; the reasons are in the "
            f"published file): {', '.join(failed)}.\n")  # fmt: skip


def _published_text(recipe: Recipe, table: str, studied: dict, meta: dict, verdicts: list) -> str:
    """TABLE-published.md: the declared claims (and, for claims at several sizes, their verdict by
    size), the runs that did not learn, then the exploratory screen."""
    from poscli.study import claims as claim_module
    from poscli.study.gates import gates_markdown
    from poscli.study.paired import corrected_together
    from poscli.study.published import PUBLISHED

    summary, _, _, gates = studied[table]
    writers: list[Callable[[], str]] = []
    for entry in (e for e in recipe.compare if e["table"] == table):
        extra = {"perplexity": studied[entry["perplexity"]][0]} if "perplexity" in entry else {}
        writers.append(partial(PUBLISHED[entry["published"]], summary, meta, **extra))
    lines = claim_module.claims_markdown(verdicts) or [
        "### Declared claims\n",
        "None: this table's recipe declares no claim, so nothing below is a verdict.",
    ]
    sized = by_size_markdown(by_size(verdicts))
    lines += ["", *[line.replace("TABLE", table) for line in sized]] if sized else []
    lines += ["", *gates_markdown(gates)] if gates else []
    if writers:
        lines += ["", "### Exploratory screen\n", claim_module.SCREEN_NOTE, ""]
        if summary is None:
            lines.append("None: no group of this table has runs enough that learned.")
        else:
            lines += corrected_together(writers)  # Benjamini-Hochberg over the screen's tests
    return "\n".join(lines).rstrip("\n") + "\n"


def recipe_claims(text: str) -> dict | None:
    """The claims of a recipe's text by name, unchecked against its runs (an older copy of the
    recipe, from git: when a claim was declared); None where the text is not TOML."""
    from poscli.study.claims import claim_of_entry

    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError:
        return None
    tables = list(dict.fromkeys(str(entry.get("table")) for entry in data.get("eval", [])))
    found = {}
    for entry in data.get("claims", []):
        claim = claim_of_entry(entry)
        if claim is not None:
            found[claim.name] = replace(claim, table=claim.table or (tables[0] if len(tables) == 1 else ""))
    return found
