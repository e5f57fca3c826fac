"""One table of a study run on several corpora: each encoding's summary over seeds, per corpus and per
training budget, from the studies' ``TABLE-seeds.csv`` files (``poscli run`` writes them).

    python tools/corpora_table.py results/reference/tstl-corpora.md \
        results/reference/tstl-stdlib-seeds.csv results/reference/tstl-shakespeare-seeds.csv \
        --pe alibi,t5,rope,sinusoidal

The file's first line is the command that wrote it (tests/repository reruns it and compares).
Columns: the corpus; the group of runs (``NAME@STEP`` a snapshot); its seeds; the tokens each run had
seen; its perplexity at the train length with the 95% interval over seeds and spans, and the ratio to
the 3-gram's on the same tokens; at each longer length the ratio to its own perplexity at the train
length with its paired 95% interval. The files' own intervals and ratios are copied, not recomputed.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pandas as pd

from poscli.core.lengths import format_length
from poscli.evaluation.tables import format_estimate

REFERENCE = "reference"


def corpus_rows(summary: pd.DataFrame, encodings: set[str] | None) -> tuple[list[int], list[list[str]]]:
    """The longer lengths of one study's summary, and a row per group (the 3-gram's only as a ratio)."""
    train_length = int(summary.loc[summary["pe"] != REFERENCE, "train_length"].iloc[0])
    longer = sorted(int(n) for n in summary["length"].unique() if n > train_length)
    at_train = summary[summary["length"] == train_length]
    reference = at_train.loc[at_train["pe"] == REFERENCE, "mean"]
    reference = float(reference.iloc[0]) if len(reference) else float("nan")
    rows = []
    groups = summary[summary["pe"] != REFERENCE].groupby("group", sort=False)
    budget = {group: (group.split("@")[0], part["tokens_seen"].max()) for group, part in groups}
    for group, part in sorted(groups, key=lambda item: budget[item[0]]):  # by encoding, smallest budget first
        if encodings and part["pe"].iloc[0] not in encodings:
            continue
        at = part.set_index("length")
        own = at.loc[train_length]
        cells = [
            own["corpus"] if isinstance(own.get("corpus"), str) and own["corpus"] else "?",
            group,
            str(int(own["seeds"])),
            f"{own['tokens_seen'] / 1e6:.2f}M" if not math.isnan(own["tokens_seen"]) else "?",
            f"{format_estimate(own['mean'], own['ci_low'], own['ci_high'], 3)} ({own['mean'] / reference:.2f}x)",
        ]
        for length in longer:
            row = at.loc[length] if length in at.index else None
            cells.append(
                "-" if row is None else format_estimate(row["ratio"], row["ratio_low"], row["ratio_high"], 2, "x")
            )
        rows.append(cells)
    return longer, rows


def corpora_table(summaries: list[pd.DataFrame], encodings: set[str] | None = None) -> str:
    """The markdown table of every summary's groups, corpus by corpus; the summaries must share their
    train length and longer lengths (one protocol on several corpora)."""
    tables = [corpus_rows(summary, encodings) for summary in summaries]
    lengths = {tuple(longer) for longer, _ in tables}
    if len(lengths) != 1:
        raise ValueError(f"the studies were evaluated at different lengths: {sorted(lengths)}")
    longer = list(lengths.pop())
    train_length = int(summaries[0].loc[summaries[0]["pe"] != REFERENCE, "train_length"].iloc[0])
    header = ["corpus", "runs", "seeds", "tokens seen", f"ppl at {train_length} (x 3-gram)"]
    header += [f"{format_length(n)} ({n // train_length}x)" for n in longer]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cells) + " |" for _, rows in tables for cells in rows]
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    encodings = None
    if "--pe" in argv:
        at = argv.index("--pe")
        encodings = set(argv[at + 1].split(",")) if at + 1 < len(argv) else None
        argv = argv[:at] + argv[at + 2 :]
    if len(argv) < 2 or not argv[0].endswith(".md") or not all(a.endswith("-seeds.csv") for a in argv[1:]):
        print("usage: python tools/corpora_table.py OUT.md TABLE-seeds.csv... [--pe a,b]", file=sys.stderr)
        return 2
    missing = [a for a in argv[1:] if not Path(a).exists()]
    if missing:
        print(f"no such summary: {', '.join(missing)} (poscli run RECIPE writes it)", file=sys.stderr)
        return 1
    summaries = [pd.read_csv(a) for a in argv[1:]]
    try:
        text = corpora_table(summaries, encodings)
    except ValueError as error:
        print(error, file=sys.stderr)
        return 1
    command = " ".join(
        ["python tools/corpora_table.py", *argv, *(["--pe", ",".join(sorted(encodings))] if encodings else [])]
    )
    Path(argv[0]).write_text(f"<!-- {command} -->\n{text}", encoding="utf-8")  # the test reruns it
    print(argv[0])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
