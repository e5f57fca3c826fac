"""Evaluation tasks, the ``--task`` axis: one file per task in this package (see
``poscli.evaluation.tasks.base.Task`` for the protocol, ``poscli.core.registry`` for the pattern).

``poscli eval --task NAME`` and a recipe's ``[[eval]] task = "NAME"`` run it; a task of your own is
``--task package.module:Class`` or a name an installed package declares in the entry-point group
``poscli.evaluation.tasks``.
"""

from __future__ import annotations

from pathlib import Path

from poscli.core.registry import Registry
from poscli.errors import PoscliError


def _base() -> type:
    from poscli.evaluation.tasks.base import Task

    return Task


REGISTRY: Registry = Registry("evaluation task", __name__, "--task", "passkey", _base)
register = REGISTRY.register
names = REGISTRY.names
check_name = REGISTRY.check_name


def get(name: str):
    """The task ``name`` (an instance of its class)."""
    return REGISTRY.get(name)()


def owner(data) -> object | None:
    """The task that wrote a results table (its rows, a DataFrame), or None."""
    return next((task for task in map(get, REGISTRY.builtin_names()) if task.owns(data)), None)


def refuse_other_kind(task, rows, path: Path, remedy: str, error: type[PoscliError] = PoscliError) -> None:
    """A table holds one task's rows: ``rows`` (read from ``path``) written by another task are refused
    before anything is measured, with ``remedy`` (what to type instead)."""
    if not rows.empty and not task.owns(rows):
        raise error(f"{path} holds another task's table, not the {task.name} task's; {remedy}")


def draw_plots(folder: Path, table: str) -> list[Path]:
    """Every plot of the results table ``table``, drawn from its CSV files in ``folder`` by the task
    that wrote it. Used after each evaluation and again by ``poscli report``."""
    from poscli.evaluation.tables import read_table  # pandas: loaded when a table is read, not with the registry

    csv_path = folder / f"{table}.csv"
    if not csv_path.exists():
        return []
    data = read_table(csv_path)
    task = owner(data)
    return task.plots(data, folder, table) if task is not None else []


def draw_subset(folder: Path, table: str, patterns: list[str], name: str) -> list[Path]:
    """The plots of the runs of ``table`` whose names match one of ``patterns`` (shell patterns, e.g.
    ``tstl-rope-*``; the 3-gram row kept), drawn as the table's task draws them, under the name
    ``name`` in ``folder``: a figure of some runs of a table that has many."""
    import fnmatch

    from poscli.evaluation.tables import read_table  # pandas: loaded when a table is read, not with the registry

    csv_path = folder / f"{table}.csv"
    if not csv_path.exists():
        raise PoscliError(f"no table {table!r} in {folder} (no {csv_path.name}); poscli report lists the tables")
    data = read_table(csv_path)
    chosen = data["run"].astype(str).map(lambda run: any(fnmatch.fnmatchcase(run, p) for p in patterns))
    if not chosen.any():
        raise PoscliError(f"--runs {' '.join(patterns)} matches no run of {table}; it has {data['run'].nunique()} runs")
    kept = chosen | (data["pe"] == "reference") if "pe" in data.columns else chosen
    task = owner(data)
    return task.plots(data[kept], folder, name) if task is not None else []
