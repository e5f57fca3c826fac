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

    def check(self, options: dict[str, Any]) -> None:
        """Stop in one line (a ``PoscliError`` saying what to type) at an option value this task cannot
        use, before any run is loaded: ``poscli eval`` checks first, and ``poscli run`` checks every
        [[eval]] of a recipe before anything trains. Nothing to check by default."""

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

    def load_byte_run(self, name: str, results, device):
        """The run ``name``'s model and config, for a task scored byte by byte (a BPE may merge the
        tokens it scores): a clear error for a run with another tokenizer. -> (model, config)."""
        from poscli.errors import PoscliError
        from poscli.model import runs

        model, config = runs.load_model(runs.find_run(name, results), str(device))
        tokenizer = config["train"].get("tokenizer", "bytes")
        if tokenizer != "bytes":
            raise PoscliError(f"--task {self.name} scores byte-level runs; {name} uses {tokenizer}")
        return model, config

    def write_rows(self, rows, results, table: str, columns: list[str], key: list[str], markdown) -> tuple[list, str]:
        """What most tasks' ``write`` does: merge ``rows`` into RESULTS/TABLE.csv (a new row replaces
        the one with its ``key``), write ``markdown(merged)`` to TABLE.md and draw the plots, the
        table locked so that concurrent evaluations take turns. -> (files written, the markdown)."""
        from poscli.core.io import atomic_write, locked
        from poscli.evaluation.tables import merge_rows
        from poscli.model import runs

        folder = runs.results_dir(results)
        folder.mkdir(parents=True, exist_ok=True)
        with locked(folder / table):
            merged = merge_rows(folder / f"{table}.csv", rows, columns, key)
            text = markdown(merged)
            with atomic_write(folder / f"{table}.md") as handle:
                handle.write(text)
            return [folder / f"{table}.csv", folder / f"{table}.md", *self.plots(merged, folder, table)], text


def lengths_done(rows, options: dict[str, Any]) -> bool:
    """Whether ``rows`` (one run's, of one format) hold every length ``options["lengths"]`` asks for."""
    from poscli.core.lengths import parse_lengths

    wanted = parse_lengths(str(options["lengths"])) if options.get("lengths") else []
    return bool(wanted) and set(wanted) <= set(rows["length"])
