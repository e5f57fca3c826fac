"""``--task perplexity`` (the default): perplexity against length on the same tokens at every length,
with intervals, the 3-gram row, the truncation null and the loss by position
(``poscli.evaluation.evaluate``; Press et al., 2022, for the protocol)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from poscli.core.lengths import parse_lengths
from poscli.evaluation.tasks import register
from poscli.evaluation.tasks.base import Task


@register("perplexity")
class Perplexity(Task):
    summary = "perplexity versus length on the same held-out tokens, with intervals and the 3-gram row"
    citation = "Press et al., 2022"
    default_table = "ppl"
    reads = ("max_tokens", "stride", "protocol", "data", "reference", "null", "allow_split_mismatch", "compile")

    def check(self, options: dict[str, Any]) -> None:
        from poscli.data.checks import check_data_spec
        from poscli.errors import PoscliError

        if options["stride"] is not None and options["stride"] < 1:
            raise PoscliError(f"--stride must be at least 1, got {options['stride']}")
        if options["data"] is not None:
            check_data_spec(options["data"])

    def evaluate(self, run_names: list[str], options: dict[str, Any], results, progress, table: str):
        from poscli.evaluation.evaluate import evaluate_runs
        from poscli.evaluation.perplexity_tables import write_tables

        return evaluate_runs(
            run_names,
            options["lengths"],
            results,
            options["max_tokens"],
            options["device"],
            progress,
            options["stride"],
            options["protocol"],
            options["data"],
            options["reference"],
            options["allow_split_mismatch"],
            save=lambda part: write_tables(part, results, table, draw=False),
            compile=options["compile"],
            null=options["null"],
        )

    def write(self, result, options: dict[str, Any], results, table: str):
        from poscli.evaluation.perplexity_tables import console_table, write_tables
        from poscli.evaluation.tasks import draw_plots
        from poscli.model import runs

        written = write_tables(result, results, table)
        written += draw_plots(runs.results_dir(results), table)
        return written, console_table(result["rows"], options["protocol"], options["stride"])

    def owns(self, data) -> bool:
        return "ppl" in data.columns and bool(data["ppl"].notna().any())

    def evaluated(self, rows, run: str, options: dict[str, Any]) -> bool:
        from poscli.evaluation.evalset import NULL_PREFIX
        from poscli.evaluation.seeds import table_mode

        lengths = parse_lengths(str(options["lengths"])) if options.get("lengths") is not None else None
        mine = rows[rows["run"] == run]
        if "protocol" in mine.columns:
            mine = mine[mine["protocol"] == options.get("protocol", "stream")]
        scored = mine[mine["mode"] == table_mode(options.get("stride"))]
        present = set(scored["length"])
        if not present or (lengths is not None and not all(length in present for length in lengths)):
            return False
        if options.get("null", False) and options.get("stride") is None:
            # the null beside each longer length the run could score (none where it is n/a, e.g. a
            # learned table's rows run out: the evaluation writes no null there)
            nulls = mine[mine["mode"].astype(str).str.startswith(NULL_PREFIX)]
            valued = set(scored[scored["ppl"].notna()]["length"])
            longer = [n for n in valued if n > int(mine["train_length"].iloc[0])]
            return all(n in set(nulls["length"]) for n in longer) if longer and len(nulls) else not longer
        return True

    def seed_summary(self, rows, groups, options: dict[str, Any], folder: Path, table: str, min_runs: int):
        import pandas as pd

        from poscli.evaluation.evalset import NULL_PREFIX
        from poscli.evaluation.seeds import seed_markdown, seed_summary

        spans_path = folder / f"{table}_spans.csv"
        spans = pd.read_csv(spans_path) if spans_path.exists() else None
        stride, protocol = options.get("stride"), options.get("protocol", "stream")
        summary = seed_summary(rows, spans, groups, stride, protocol, min_runs=min_runs)
        if summary is None:
            return None, ""
        nulls = sorted({m for m in rows["mode"].astype(str) if m.startswith(NULL_PREFIX)})
        if nulls and stride is None:  # the truncation null, for "keeps" and "uses"
            found = [seed_summary(rows, spans, groups, None, protocol, min_runs=1, mode=m) for m in nulls]
            summary.attrs["null"] = [part for part in found if part is not None]
        return summary, seed_markdown(summary)

    def seed_plots(self, summary, folder: Path, table: str) -> list[Path]:
        from poscli.evaluation.plots import plot_budgets, plot_seed_summary
        from poscli.evaluation.seeds import SEEDS_SUFFIX
        from poscli.model.runs import SNAPSHOT_MARK

        finals = summary[~summary["group"].str.contains(SNAPSHOT_MARK, regex=False)]
        title = f"perplexity versus length over seeds ({table})"
        written = [plot_seed_summary(finals, folder / f"{table}{SEEDS_SUFFIX}.png", title)]
        budgets = plot_budgets(summary, folder / f"{table}-budgets.png", f"ratio against training budget ({table})")
        return written + ([budgets] if budgets else [])

    def plots(self, data, folder: Path, table: str) -> list[Path]:
        import pandas as pd

        from poscli.evaluation.plots import plot_loss_by_position, plot_perplexity

        written = [plot_perplexity(data, folder / f"{table}.png", f"perplexity versus length ({table})")]
        positions_path = folder / f"{table}_by_position.csv"
        if positions_path.exists():
            positions = pd.read_csv(positions_path)
            nonoverlapping = positions[positions["mode"] == "nonoverlapping"]
            if len(nonoverlapping):
                title = f"loss by position ({table}, non-overlapping windows)"
                written.append(plot_loss_by_position(nonoverlapping, folder / f"{table}_by_position.png", title))
        return written
