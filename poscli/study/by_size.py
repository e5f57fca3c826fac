"""A claim decided at every rung of a recipe's size ladder, read across the rungs (issue 63): the
published file's "Verdict by size", TABLE-by-size.csv and TABLE-by-size.png.

A claim holds across sizes only where every rung decides it the same way (holds, the opposite
holds, fails); it changes with size where two rungs decide it differently; otherwise the words say
which rungs decide it and which do not (not separated, not tested), never that it holds.
"""

from __future__ import annotations

from pathlib import Path

from poscli.study.claims import Test, Verdict

DECIDED = ("holds", "the opposite holds", "fails")  # a test's words that decide it


def across_sizes(words: dict[str, str]) -> str:
    """One claim at one length over the rungs (rung -> word, smallest first; a word may end in
    ": why", as "not tested: too few learned seeds"): "holds across sizes" (or another decision)
    only where every rung decides it the same way; "changes with size" where two rungs decide it
    differently; else which rungs decide it."""
    decided = {rung: word for rung, word in words.items() if word in DECIDED}
    if len(set(decided.values())) > 1:
        return f"changes with size ({_at(words)})"
    if decided and len(decided) == len(words):
        return f"{next(iter(decided.values()))} across sizes"
    if decided:
        rest = _at({rung: word for rung, word in words.items() if rung not in decided})
        return f"{next(iter(decided.values()))} at {', '.join(decided)} only ({rest})"
    return f"decided at no size ({_at(words)})"


def _at(words: dict[str, str]) -> str:
    """The rungs named once per word: "not separated at m; not tested at l: too few learned seeds"."""
    rungs: dict[str, list[str]] = {}
    for rung, word in words.items():
        rungs.setdefault(word, []).append(rung)
    parts = []
    for word, named in rungs.items():
        head, _, why = word.partition(": ")
        parts.append(f"{head} at {', '.join(named)}" + (f": {why}" if why else ""))
    return "; ".join(parts)


def _word(verdict: Verdict, test: Test) -> str:
    """The test's word, with why where it was not tested (a rung's runs that did not learn or are
    not in yet leave too few learned seeds)."""
    word = verdict.word(test)
    return f"{word}: {test.untested}" if test.untested else word


def by_size(verdicts: list[Verdict]) -> list[dict]:
    """Each claim decided at several rungs, one row per rung and length: its estimate with the
    interval, Holm p, word, and the claim's reading across sizes at that length."""
    rows: list[dict] = []
    families: dict[str, list] = {}
    for verdict in verdicts:
        if verdict.claim.size:
            families.setdefault(verdict.claim.name, []).append(verdict)
    for name, family in families.items():
        for index, length in enumerate(family[0].claim.lengths):
            words = {v.claim.size: _word(v, v.tests[index]) for v in family}
            reading = across_sizes(words)
            for verdict in family:
                test = verdict.tests[index]
                rows.append({"claim": name, "size": verdict.claim.size, "parameters": verdict.parameters,
                             "length": length, "compare": verdict.claim.compare, "against": verdict.claim.against,
                             "direction": verdict.claim.direction, "metric": verdict.metric,
                             "estimate": test.estimate, "low": test.low, "high": test.high, "p_holm": test.adjusted,
                             "seeds": test.seeds[0], "seeds_against": test.seeds[1],
                             "word": words[verdict.claim.size], "across_sizes": reading})  # fmt: skip
    return rows


def by_size_markdown(rows: list[dict]) -> list[str]:
    """The published file's "Verdict by size": each claim, per length, across the rungs."""
    if not rows:
        return []
    lines = [
        "### Verdict by size\n",
        "Each claim decided at every rung on its own (above). A claim holds across sizes only where every rung decides "
        'it the same way; it "changes with size" where two rungs decide it differently; otherwise the rungs that '
        "decide it are named. The ratios with their intervals against parameters: the figure TABLE-by-size.png.\n",
    ]
    claims: dict[str, dict[str, list[str]]] = {}  # claim -> reading -> the lengths it reads so at
    for row in rows:
        lengths = claims.setdefault(row["claim"], {}).setdefault(row["across_sizes"], [])
        if row["length"] not in lengths:
            lengths.append(row["length"])
    for claim, readings in claims.items():
        said = "; ".join(f"{', '.join(map(str, lengths))}: {text}" for text, lengths in readings.items())
        lines.append(f"- by size **{claim}**: {said}.")
    return lines


def _size_axes(axis, metric: str, rungs: list[float], length) -> None:
    """One panel's axes: parameters on a log axis at the rungs, the no-effect line, the length as its title."""
    from matplotlib.ticker import FixedLocator, FuncFormatter, LogLocator, NullFormatter

    axis.axhline(1.0 if metric == "perplexity" else 0.0, color="black", linewidth=0.8, linestyle="--")
    axis.set_xscale("log")
    axis.set_xlim(rungs[0] / 1.6, rungs[-1] * 1.6)
    axis.xaxis.set_major_locator(FixedLocator(rungs))
    axis.xaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value / 1e6:.2f}M"))
    axis.xaxis.set_minor_formatter(NullFormatter())
    if metric == "perplexity":
        axis.set_yscale("log")
        axis.yaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
        axis.yaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
        axis.yaxis.set_minor_formatter(NullFormatter())
    axis.set_title(f"at {length}")
    axis.set_xlabel("parameters")
    axis.grid(alpha=0.3, which="major")


def plot_by_size(rows: list[dict], path: Path) -> Path | None:
    """Each claim's ratio (or difference) with its 95% interval against parameters (log axis), one
    line per claim (the same Okabe-Ito colour, marker and line style in every panel; dashed past the
    seventh colour), one panel per length, and rows of panels of at most MAX_LINES claims each, each
    row with its legend at its right."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import pandas as pd

    frame = pd.DataFrame(rows)
    frame = frame[frame["estimate"].notna()] if not frame.empty else frame
    if frame.empty:
        return None
    from poscli.evaluation.plots import MAX_LINES, OKABE_ITO

    lengths = list(dict.fromkeys(frame["length"]))
    claims = list(dict.fromkeys(frame["claim"]))
    rows_of_panels = -(-len(claims) // MAX_LINES)  # at most MAX_LINES claims on one axes: rows of them
    per_row = -(-len(claims) // rows_of_panels)
    figure, axes = plt.subplots(rows_of_panels, len(lengths), figsize=(4.4 * len(lengths), 4.4 * rows_of_panels),
                                squeeze=False, sharey=True)  # fmt: skip
    colours, markers = OKABE_ITO[:7], "osD^vP*Xh<>"
    rungs = sorted(frame.groupby("size")["parameters"].median())
    for row, axes_row in enumerate(axes):
        shown = claims[row * per_row : (row + 1) * per_row]
        for axis, length in zip(axes_row, lengths):
            part = frame[(frame["length"] == length) & frame["claim"].isin(shown)]
            for claim, line in part.groupby("claim", sort=False):
                index = claims.index(claim)
                line = line.sort_values("parameters")
                error = [line["estimate"] - line["low"], line["high"] - line["estimate"]]
                axis.errorbar(line["parameters"], line["estimate"], yerr=error, label=claim,
                              color=colours[index % len(colours)], marker=markers[index % len(markers)], capsize=3,
                              linewidth=1.4, linestyle=("-", "--", ":")[index // len(colours) % 3])  # fmt: skip
            _size_axes(axis, frame["metric"].iloc[0], rungs, length)
        axes_row[0].set_ylabel("ratio, compare / against (95% interval)")
        handles = {label: handle for axis in axes_row for handle, label in zip(*axis.get_legend_handles_labels())}
        ordered = [claim for claim in shown if claim in handles]
        axes_row[-1].legend([handles[c] for c in ordered], ordered, loc="upper left", bbox_to_anchor=(1.01, 1.0),
                            fontsize=9, frameon=False)  # fmt: skip
    figure.tight_layout()
    figure.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(figure)
    return path
