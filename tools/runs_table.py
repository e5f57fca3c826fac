"""One row per run (and snapshot) of a perplexity table: what a study in progress shows before it has
the seeds that ``TABLE-seeds.md`` needs. docs/results.md includes the file it writes.

    python tools/runs_table.py results/reference/tstl-stdlib.csv  # -> results/reference/tstl-stdlib-runs.md

Columns: the tokens the run had seen; its perplexity at its train length with the 95% interval and
its ratio to the 3-gram's on the same tokens; at each longer length its perplexity and the ratio to
its own at the train length; and, where the table has it, the truncation null (the context cut to
the train length, ``mode`` truncated-L) at those lengths. n/a: the encoding has no positions there;
-: not evaluated (a snapshot's null).
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pandas as pd

from poscli.core.lengths import format_length
from poscli.evaluation.tables import read_table


def number(value: float, digits: int = 2) -> str:
    return "n/a" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.{digits}f}"


def runs_table(table: pd.DataFrame) -> str:
    """The markdown table of every run of ``table`` (a perplexity CSV read back), the 3-gram's line after it."""
    train_length = int(table.loc[table["pe"] != "reference", "train_length"].iloc[0])
    plain = table[table["mode"] == "nonoverlapping"]
    null = table[table["mode"] == f"truncated-{train_length}"]
    longer = sorted(int(n) for n in plain["length"].unique() if n > train_length)
    reference = plain[(plain["pe"] == "reference") & (plain["length"] == train_length)]["ppl"].iloc[0]
    names = [format_length(n) for n in longer]
    header = ["run", "tokens seen", f"ppl at {train_length} (x 3-gram)", *names]
    header.append(f"context cut to {train_length} at {' / '.join(names)}")
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for run, part in plain[plain["pe"] != "reference"].groupby("run", sort=True):
        at = part.set_index("length")
        own = at.loc[train_length]
        cells = [
            run,
            f"{own['tokens_seen'] / 1e6:.2f}M",
            f"{own['ppl']:.3f} [{own['ci_low']:.3f}, {own['ci_high']:.3f}] ({own['ppl'] / reference:.2f}x)",
        ]
        for length in longer:
            ppl = at["ppl"].get(length, float("nan"))
            cells.append("n/a" if math.isnan(ppl) else f"{ppl:.2f} ({ppl / own['ppl']:.2f}x)")
        cut = null[null["run"] == run].set_index("length")["ppl"]
        no_positions = at.loc[longer, "ppl"].isna().all()  # a learned table: no null either
        cells.append(
            " / ".join(number(cut.get(n, float("nan"))) for n in longer) if len(cut) else "n/a" if no_positions else "-"
        )
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + f"\n\n3-gram on the same tokens: {reference:.3f}\n"


def main(argv: list[str]) -> int:
    if len(argv) != 1 or not argv[0].endswith(".csv"):
        print("usage: python tools/runs_table.py results/reference/TABLE.csv", file=sys.stderr)
        return 2
    path = Path(argv[0])
    table = read_table(path)
    out = path.with_name(path.stem + "-runs.md")
    out.write_text(runs_table(table), encoding="utf-8")
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
