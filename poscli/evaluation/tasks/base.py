"""The evaluation-task protocol: what ``poscli eval --task NAME`` and a recipe's ``[[eval]]`` ask of a task.

A task is one file in ``poscli/evaluation/tasks/``: a subclass of :class:`Task` registered by name.
It evaluates runs at lengths and writes its table (``RESULTS/TABLE.csv`` and ``.md``, its plots),
says when a table already holds a run's rows (so ``poscli run`` skips what is done), summarises a
table over seeds, and draws its figures. The options it reads are ``poscli eval``'s
(``poscli.training.options.EVAL_OPTIONS``), passed as a dict.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar


class Task:
    """Class attributes a task sets: ``summary`` (one line for ``poscli eval --help`` and the guide),
    ``citation``, ``default_table`` (the table name when ``--table`` is not given) and ``reads``,
    the ``poscli eval`` options it uses beyond ``lengths`` and ``device``."""

    name: ClassVar[str]
    summary: ClassVar[str] = ""
    citation: ClassVar[str] = ""
    default_table: ClassVar[str]
    reads: ClassVar[tuple[str, ...]] = ()

    def evaluate(self, run_names: list[str], options: dict[str, Any], results, progress, table: str):
        """Evaluate every run at every length; save rows to ``table`` as they come (an interrupted
        evaluation keeps them). Returns what ``write`` takes."""
        raise NotImplementedError

    def write(self, result, options: dict[str, Any], results, table: str) -> tuple[list[Path], object]:
        """The final tables and plots: (the files written, a rich table for the console)."""
        raise NotImplementedError

    def owns(self, data) -> bool:
        """Whether a results table (a DataFrame of its rows) is one this task writes."""
        raise NotImplementedError

    def evaluated(self, rows, run: str, options: dict[str, Any]) -> bool:
        """Whether ``rows`` (the table, as read) holds every row an evaluation with ``options`` would
        write for ``run``."""
        raise NotImplementedError

    def seed_summary(
        self, rows, groups: dict[str, str], options: dict[str, Any], folder: Path, table: str, min_runs: int
    ):
        """The table summarised over seeds (``groups``: run -> group), or None when no group has
        ``min_runs`` runs; and the markdown of it: (summary, text)."""
        raise NotImplementedError

    def seed_plots(self, summary, folder: Path, table: str) -> list[Path]:
        """Figures of the summary over seeds (none by default)."""
        return []

    def plots(self, data, folder: Path, table: str) -> list[Path]:
        """Figures drawn from the table's CSV files in ``folder`` (after each evaluation, and by ``poscli report``)."""
        return []
