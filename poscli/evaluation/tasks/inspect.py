"""``--task inspect``: why an encoding extrapolates or fails, read on the spans ``--task perplexity`` scores:
attention entropy, span and mass by distance, the share on the first keys, RoPE angle coverage and
frequency use (``poscli.evaluation.inspection``; ``poscli inspect`` is the same with its own defaults). A
recipe's ``[[eval]] task = "inspect"`` puts the tables and figures beside its perplexity table."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from poscli.evaluation.tasks import register
from poscli.evaluation.tasks.base import Task, lengths_done


@register("inspect")
class Inspect(Task):
    summary = "attention entropy, span and sinks, RoPE angle coverage and frequency use against length"
    citation = "Peng et al., 2023; Xiao et al., 2023; Barbero et al., 2024"
    default_table = "inspect"
    reads = ("max_tokens",)

    def evaluate(self, run_names: list[str], options: dict[str, Any], results, progress, table: str):
        from poscli.evaluation.inspection.runs import inspect_runs

        return inspect_runs(run_names, options["lengths"], results, options["max_tokens"], options["device"], progress)

    def write(self, result, options: dict[str, Any], results, table: str):
        from poscli.evaluation.inspection.tables import summary_lines, write_inspection

        written, summary = write_inspection(result, results, table)
        return written, "\n".join(summary_lines(summary)) if summary is not None else ""

    def owns(self, data) -> bool:
        return {"entropy_ratio", "span90", "sink"} <= set(data.columns)

    def evaluated(self, rows, run: str, options: dict[str, Any]) -> bool:
        return lengths_done(rows[rows["run"] == run], options)

    def seed_summary(self, rows, groups, options: dict[str, Any], folder: Path, table: str, min_runs: int):
        return None, ""  # read run by run: the figures set seeds side by side

    def plots(self, data, folder: Path, table: str) -> list[Path]:
        from poscli.evaluation.inspection.tables import draw_tables

        return draw_tables(folder, table)
