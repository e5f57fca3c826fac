"""``--task passkey``: passkey retrieval, exact match over key depths at each length, with Wilson
intervals, the floor a local window reaches, and the effective length (Mohtashami and Jaggi, 2023;
RULER's threshold, Hsieh et al., 2024; ``poscli.evaluation.retrieval``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from poscli.core.lengths import parse_lengths
from poscli.evaluation.tasks import register
from poscli.evaluation.tasks.base import Task

FACETS_ONLY = 6  # a passkey table of more runs gets the one faceted figure, not a heatmap file per run


@register("passkey")
class Passkey(Task):
    summary = "passkey retrieval: exact match over key depths at each length, with Wilson intervals and floors"
    citation = "Mohtashami and Jaggi, 2023"
    default_table = "passkey"
    reads = ("depths", "trials", "keys")

    def check(self, options: dict[str, Any]) -> None:
        from poscli.evaluation.retrieval import check_passkey_counts, parse_depths

        parse_depths(options["depths"])
        check_passkey_counts(options["trials"], options["keys"])

    def evaluate(self, run_names: list[str], options: dict[str, Any], results, progress, table: str):
        from poscli.evaluation.passkey_tables import save_rows
        from poscli.evaluation.retrieval import evaluate_passkey, parse_depths

        return evaluate_passkey(
            run_names,
            options["lengths"],
            parse_depths(options["depths"]),
            options["trials"],
            results,
            options["device"],
            progress,
            options["keys"],
            save=lambda done: save_rows(done, results, table),
        )

    def write(self, result, options: dict[str, Any], results, table: str):
        from poscli.evaluation.passkey_tables import console_table, write_passkey_tables
        from poscli.evaluation.tasks import draw_plots
        from poscli.model import runs

        written = write_passkey_tables(result, results, table) + draw_plots(runs.results_dir(results), table)
        return written, console_table(result, options["trials"])

    def owns(self, data) -> bool:
        return {"accuracy", "depth", "digit_accuracy"} <= set(data.columns)

    def evaluated(self, rows, run: str, options: dict[str, Any]) -> bool:
        from poscli.config import DEFAULT_DEPTHS

        lengths = parse_lengths(str(options["lengths"])) if options.get("lengths") is not None else None
        depths = [float(d) for d in str(options.get("depths", DEFAULT_DEPTHS)).split(",")]
        mine = rows[rows["run"] == run]
        if "keys" in options and options["keys"] is not None and "keys" in mine.columns:
            mine = mine[mine["keys"] == int(options["keys"])]
        present = set(zip(mine["length"], mine["depth"]))
        return lengths is not None and all((length, depth) in present for length in lengths for depth in depths)

    def seed_summary(self, rows, groups, options: dict[str, Any], folder: Path, table: str, min_runs: int):
        from poscli.evaluation.passkey_tables import passkey_seed_markdown, passkey_seed_summary

        summary = passkey_seed_summary(rows, groups)
        return (None, "") if summary is None else (summary, passkey_seed_markdown(summary))

    def plots(self, data, folder: Path, table: str) -> list[Path]:
        """TABLE-heatmaps.png, every run's heatmap as a panel of one figure; and, for a table of at most
        FACETS_ONLY runs, each run's own (TABLE-RUN.png), which a larger table would multiply (and
        removes those a table that has since grown past it had written)."""
        from poscli.evaluation.plots import heatmap_parts, plot_passkey_facets, plot_passkey_heatmap
        from poscli.evaluation.retrieval import EFFECTIVE_THRESHOLD, run_effective_lengths

        parts = [(name, part) for name, part in heatmap_parts(data, table) if part["accuracy"].notna().any()]
        written, panels = [], []
        for name, part in parts:
            keys = int(part["keys"].iloc[0]) if "keys" in part else 1
            several = f", {keys} keys" if keys > 1 else ""
            effective = next(iter(run_effective_lengths(part).values()))
            panels.append((f"{part['label'].iloc[0]}{several}: effective {effective}", part))
            if len(parts) > FACETS_ONLY:  # a table that has grown past it: its runs' old files would go stale
                (folder / name).unlink(missing_ok=True)
            else:
                title = (
                    f"passkey accuracy: {part['label'].iloc[0]}{several} ({int(part['trials'].iloc[0])} trials per "
                    f"cell)\neffective length {effective} (RULER: every length up to it at >= {EFFECTIVE_THRESHOLD:g})"
                )
                written.append(plot_passkey_heatmap(part, folder / name, title))
        if panels:
            title = f"passkey accuracy ({table}); effective length: every length up to it at >= {EFFECTIVE_THRESHOLD:g}"
            written.append(plot_passkey_facets(panels, folder / f"{table}-heatmaps.png", title))
        return written
