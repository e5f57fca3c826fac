"""Result tables: merging rows into a CSV, number formats, and the one markdown pivot (runs or
groups by lengths) that every table uses: perplexity, seed summaries and passkey accuracy."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

from poscli.core.io import atomic_write
from poscli.errors import PoscliError


def read_table(path: Path):
    """A result table as it was written: text such as "n/a" or "NA" stays text (pandas' defaults
    read it as missing), an empty number is NaN, and an empty note is "" (not NaN), so every
    reader can test a note for truth."""
    import pandas as pd

    table = pd.read_csv(path, keep_default_na=False, na_values=["nan", "NaN", ""])
    if "note" in table.columns:
        notes = table["note"].astype(object)  # an all-empty column is read as float NaN
        table["note"] = notes.where(notes.notna(), "").astype(str)
    return table


def merge_rows(path: Path, rows: list[dict], columns: list[str], key: list[str], replace: list[str] | None = None):
    """Merge ``rows`` into the CSV at ``path``: every earlier row whose ``replace`` columns
    (default: ``key``) match a new row's is replaced, all others are kept; sorted by ``key``.
    Returns the merged table (a DataFrame).
    Callers hold ``poscli.core.io.locked`` on the table, so concurrent writers lose no rows."""
    import pandas as pd

    new = pd.DataFrame(rows, columns=columns)
    if path.exists():
        old = read_table(path)
        lacking = ", ".join(sorted(set(replace or key) - set(old.columns)))
        if lacking:
            raise PoscliError(
                f"{path} holds another kind of table (it lacks {lacking}: another task's, or an older poscli's); "
                "use another --table or move it away"
            )
        old = old[[c for c in columns if c in old.columns]]
        replaced = old.set_index(replace or key).index.isin(new.set_index(replace or key).index.unique())
        combined = pd.concat([old[~replaced], new], ignore_index=True)
    else:
        combined = new
    combined = combined.sort_values(key, kind="stable").reset_index(drop=True)
    with atomic_write(path) as handle:
        combined.to_csv(handle, index=False)
    return combined


def format_ppl(value: float) -> str:
    if _missing(value):
        return "n/a"
    return f"{value:.3f}" if value < 100 else f"{value:.1f}" if value < 1e5 else f"{value:.3g}"


def _missing(value) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def format_estimate(
    value: float, low: float = math.nan, high: float = math.nan, digits: int = 3, unit: str = ""
) -> str:
    """An estimate as "value [low, high]" with ``digits`` decimals and ``unit`` after the value;
    the value alone without an interval, "n/a" without a value."""
    if _missing(value):
        return "n/a"
    if _missing(low) or _missing(high):
        return f"{value:.{digits}f}{unit}"
    return f"{value:.{digits}f}{unit} [{low:.{digits}f}, {high:.{digits}f}]"


def format_interval(low: float, high: float) -> str:
    if _missing(low) or _missing(high):
        return ""
    return f"[{format_ppl(low)}, {format_ppl(high)}]"


def pivot_markdown(table, by: str, lead: dict[str, Callable], cell: Callable, sort: bool = True) -> list[str]:
    """A markdown table with one row per ``by`` group and one column per length.

    ``lead``: header -> function of the group's first row (the leading cells); ``cell``: function
    of the group's rows at one length (a non-empty DataFrame) -> the cell's text.
    """
    lengths = sorted(table["length"].unique())
    lines = ["| " + " | ".join([*lead, *(str(n) for n in lengths)]) + " |", "|" + "---|" * (len(lead) + len(lengths))]
    for _, part in table.groupby(by, sort=sort):
        first = part.iloc[0]
        cells = [str(value(first)) for value in lead.values()]
        for length in lengths:
            rows = part[part["length"] == length]
            cells.append("" if rows.empty else cell(rows))
        lines.append("| " + " | ".join(cells) + " |")
    return lines
