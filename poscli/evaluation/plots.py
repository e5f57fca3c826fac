"""PNG plots with matplotlib (Agg backend: no display needed). Each reads like a figure in a
paper: labelled axes, a title that says what was measured, the train length marked."""

from __future__ import annotations

import re
from pathlib import Path

import matplotlib
import numpy as np

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from poscli.core.io import atomic_write  # noqa: E402


def save_figure(figure, path: Path) -> Path:
    figure.tight_layout()
    with atomic_write(path, "wb") as handle:
        figure.savefig(handle, format="png", dpi=120, bbox_inches="tight")  # legends placed outside the axes too
    plt.close(figure)
    return path


def length_axis(axes) -> None:
    """Log2 x axis labelled 256, 1k, 4k, ..."""
    from matplotlib.ticker import FuncFormatter

    from poscli.core.lengths import format_length

    axes.set_xscale("log", base=2)
    axes.xaxis.set_major_formatter(FuncFormatter(lambda x, _: format_length(int(round(x))) if x >= 1 else f"{x:g}"))


def _plain_log_y(axes) -> None:
    from matplotlib.ticker import ScalarFormatter

    axes.set_yscale("log")
    axes.yaxis.set_major_formatter(ScalarFormatter())
    axes.yaxis.set_minor_formatter(ScalarFormatter())
    axes.ticklabel_format(axis="y", style="plain")


def _mark_train_lengths(axes, train_lengths) -> None:
    for n, length in enumerate(sorted(set(int(x) for x in train_lengths if int(x) > 0))):
        axes.axvline(length, color="grey", linestyle="--", linewidth=1, label="train length" if n == 0 else None)


def _finish_length_plot(figure, axes, table, xlabel: str, ylabel: str, title: str, path: Path) -> Path:
    """Shared ending of the plots over length or position: train length marked, log2 axis, legend."""
    _mark_train_lengths(axes, table["train_length"])
    length_axis(axes)
    axes.set_xlabel(xlabel)
    axes.set_ylabel(ylabel)
    axes.set_title(title)
    axes.grid(True, which="both", alpha=0.3)
    axes.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return save_figure(figure, path)


# Okabe & Ito's eight colours, told apart with every kind of colour blindness (Wong, 2011, Nature Methods)
OKABE_ITO = ("#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#F0E442", "#000000")
LINE_STYLES = ("-", "--", ":", "-.")
REFERENCE_STYLE = {"linestyle": "--", "color": "black", "marker": "o"}  # the 3-gram row in every figure


MAX_LINES = 8  # at most this many lines on one axes, the 3-gram row included: more become panels
# Each encoding's colour and marker, the same in every figure: the five of Press et al. first (Okabe
# & Ito's seven colours, then the same colours with another marker); an encoding of the user's own grey.
ENCODING_ORDER = ("none", "sinusoidal", "rope", "alibi", "t5", "learned", "xpos", "fire", "kerple", "shaw", "cope",
                  "fox", "stick-breaking", "pope", "dpb", "scaled-sinusoidal", "hybrid")  # fmt: skip
HEATMAP = "viridis"  # perceptually uniform and colour-blind-safe (never a red-green map)


def encoding_style(pe: str) -> dict:
    """The colour and marker of ``pe``'s lines in every figure (the 3-gram row: black, dashed)."""
    if pe == "reference":
        return dict(REFERENCE_STYLE)
    if pe not in ENCODING_ORDER:
        return {"color": "#7f7f7f", "marker": "x"}
    index = ENCODING_ORDER.index(pe)
    return {"color": OKABE_ITO[index % 7], "marker": "osD^"[index // 7 % 4]}


def line_styles(encodings: list[str]) -> list[dict]:
    """Styles for lines of these encodings, in order: each encoding's colour and marker, and a line
    style numbering the lines of one encoding on the axes (its seeds' group, its extensions)."""
    seen: dict[str, int] = {}
    styles = []
    for pe in encodings:
        style = encoding_style(pe)
        if pe != "reference":
            style["linestyle"] = LINE_STYLES[seen.get(pe, 0) % len(LINE_STYLES)]
            seen[pe] = seen.get(pe, 0) + 1
        styles.append(style)
    return styles


def _encoding_of(part) -> str:
    return str(part["pe"].iloc[0]) if "pe" in part.columns and len(part) else ""


def _distinct_colors(axes, count: int) -> None:
    """A colour-blind-safe cycle: Okabe & Ito's colours (black last, which the 3-gram row takes
    anyway), then the same seven again with another line style and marker, so 28 lines stay apart."""
    from cycler import cycler

    colours = OKABE_ITO[:7]
    blocks = max(1, -(-count // len(colours)))
    styles = [style for style in LINE_STYLES[: min(blocks, len(LINE_STYLES))] for _ in colours]
    markers = [marker for marker in "os^D"[: min(blocks, len(LINE_STYLES))] for _ in colours]
    axes.set_prop_cycle(
        cycler(color=list(colours) * min(blocks, len(LINE_STYLES))) + cycler(linestyle=styles) + cycler(marker=markers)
    )


def short_labels(names) -> dict[str, str]:
    """Legend labels for run or group names: the words every name shares at its start dropped
    (``tstl-``), and a seed wildcard (``-s*``) dropped: ``tstl-alibi-s*`` reads ``alibi``."""
    names = [str(name) for name in names]
    words = [name.split("-") for name in names]
    shared = 0
    while len(names) > 1 and all(len(w) > shared + 1 and w[shared] == words[0][shared] for w in words):
        shared += 1
    return {name: re.sub(r"-s\*(?=$|\+|@)", "", "-".join(w[shared:])) or name for name, w in zip(names, words)}


FACET_ABOVE = MAX_LINES - 1  # a figure of more lines than this gets panels of at most this many (plus the 3-gram)


def facets(rows, line_keys: list[str]) -> list[tuple[str, object]]:
    """Panels of at most FACET_ABOVE lines, the 3-gram row in each: one per encoding, and an
    encoding of more lines split into panels that each hold whole families (a run's seeds, or one
    extension method's seeds: the label with its ``-sN`` dropped). One panel when the whole figure
    has at most FACET_ABOVE lines. rows: a table with ``pe``, ``label`` and ``line_keys`` columns
    -> [(panel title, rows)]."""
    import pandas as pd

    if "pe" not in rows.columns:
        return [("", rows)]
    reference = rows[rows["pe"] == "reference"]
    runs = rows[rows["pe"] != "reference"]
    if runs.groupby(line_keys).ngroups <= FACET_ABOVE:
        return [("", rows)]
    panels = []
    for pe, part in runs.groupby("pe", sort=False):
        family = part["label"].astype(str).str.replace(r"-s\d+(?=$|[\s+@])", "", regex=True)
        packed, held = [[]], 0  # families per panel, and the lines the last panel holds
        for name in family.unique():
            lines = part[family == name].groupby(line_keys).ngroups
            if packed[-1] and held + lines > FACET_ABOVE:
                packed, held = [*packed, []], 0
            packed[-1].append(name)
            held += lines
        for n, names in enumerate(packed):
            title = str(pe) if len(packed) == 1 else f"{pe} ({n + 1}/{len(packed)})"
            panels.append((title, pd.concat([reference, part[family.isin(names)]])))
    return panels


def packed_panels(rows) -> list[tuple[str, object]]:
    """A summary's groups in ENCODING_ORDER, FACET_ABOVE to a panel, the 3-gram row in each:
    [(panel title: its encodings, rows)]; one untitled panel when all fit."""
    import pandas as pd

    reference = rows[rows["pe"] == "reference"]
    runs = rows[rows["pe"] != "reference"]
    order = {pe: index for index, pe in enumerate(ENCODING_ORDER)}
    groups = sorted(runs["group"].unique(), key=lambda group: (order.get(
        str(runs.loc[runs["group"] == group, "pe"].iloc[0]), len(order)), str(group)))  # fmt: skip
    if len(groups) <= FACET_ABOVE:
        return [("", rows)]
    panels = []
    for start in range(0, len(groups), FACET_ABOVE):
        chosen = groups[start : start + FACET_ABOVE]
        part = runs[runs["group"].isin(chosen)]
        title = ", ".join(dict.fromkeys(str(pe) for pe in part.set_index("group").loc[chosen, "pe"]))
        panels.append((title, pd.concat([reference, part])))
    return panels


def _faceted(panels, draw, title: str, path: Path) -> Path:
    """A grid of up to three panels a row, ``draw(axes, rows)`` on each, the figure's title above."""
    columns = min(3, len(panels))
    grid_rows = -(-len(panels) // columns)
    figure, grid = plt.subplots(
        grid_rows, columns, figsize=(8.5 * columns, 4.5 * grid_rows), squeeze=False, sharey=True, layout="constrained"
    )
    for axes, (name, rows) in zip(grid.flat, panels):
        draw(axes, rows)
        _mark_train_lengths(axes, rows.loc[rows["pe"] != "reference", "train_length"])
        length_axis(axes)
        axes.set_title(name)
        axes.grid(True, which="both", alpha=0.3)
        axes.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    for axes in grid.flat[len(panels) :]:
        axes.set_visible(False)
    figure.suptitle(title)
    with atomic_write(path, "wb") as handle:
        figure.savefig(handle, format="png", dpi=100, bbox_inches="tight")
    plt.close(figure)
    return path


def plot_perplexity(table, path: Path, title: str) -> Path:
    """Perplexity versus evaluation length, one line per run (and mode) with its interval band,
    log-log axes; with more than FACET_ABOVE lines, panels (``facets``)."""
    from poscli.evaluation.evalset import NULL_PREFIX

    rows = table.dropna(subset=["ppl"])
    rows = rows[~rows["mode"].astype(str).str.startswith(NULL_PREFIX)]  # the null is in the tables, not the figure
    panels = facets(rows, ["label", "mode"])
    xlabel, ylabel = "evaluation length (tokens)", "perplexity (held-out, per byte)"
    if len(panels) == 1:
        figure, axes = plt.subplots(figsize=(11, 5))
        _perplexity_lines(axes, rows)
        _plain_log_y(axes)
        return _finish_length_plot(figure, axes, table, xlabel, ylabel, title, path)

    def draw(axes, part):
        _perplexity_lines(axes, part)
        _plain_log_y(axes)
        axes.set(xlabel=xlabel, ylabel=ylabel)

    return _faceted(panels, draw, title, path)


def _perplexity_lines(axes, rows) -> None:
    """One line per (label, mode) of ``rows`` with its interval band; the 3-gram row black and dashed."""
    modes = rows["mode"].unique()
    lines = list(rows.groupby(["label", "mode"], sort=False))
    for ((label, mode), part), style in zip(lines, line_styles([_encoding_of(part) for _, part in lines])):
        part = part.sort_values("length")
        name = label if len(modes) == 1 else f"{label} ({mode})"
        line = axes.plot(part["length"], part["ppl"], label=name, **style)[0]
        if "ci_low" in part.columns:
            axes.fill_between(part["length"], part["ci_low"], part["ci_high"], color=line.get_color(), alpha=0.12)


def plot_seed_summary(summary, path: Path, title: str) -> Path:
    """Mean perplexity over seeds versus length, one line per group of runs, the band its 95%
    interval over seeds and evaluation sample (``poscli.evaluation.seeds.seed_summary``), each
    encoding in its own colour; with more than FACET_ABOVE groups, panels of FACET_ABOVE in
    ENCODING_ORDER (Press et al.'s five first) with the 3-gram in each. Budget snapshots (GROUP@STEP)
    are the budgets figure's (``plot_budgets``)."""
    from poscli.model.runs import SNAPSHOT_MARK

    rows = summary[(summary["seeds"] > 0) & ~summary["group"].astype(str).str.contains(SNAPSHOT_MARK, regex=False)]
    rows = rows.copy()
    rows.attrs = {}  # a summary carries its bootstrap draws there, which pandas cannot compare when it joins panels
    short = short_labels(rows.loc[rows["pe"] != "reference", "group"].unique())
    panels = packed_panels(rows)
    xlabel, ylabel = "evaluation length (tokens)", "perplexity (mean over seeds; band: 95% interval)"

    def draw(axes, part) -> None:
        groups = list(part.groupby("group", sort=False))
        for (group, lines), style in zip(groups, line_styles([_encoding_of(lines) for _, lines in groups])):
            lines = lines.sort_values("length")
            seeds = int(lines["seeds"].max())
            reference = (lines["pe"] == "reference").all()
            label = group if reference else f"{short[group]} ({seeds} seed{'s' * (seeds != 1)})"
            line = axes.plot(lines["length"], lines["mean"], label=label, **style)[0]
            axes.fill_between(lines["length"], lines["ci_low"], lines["ci_high"], color=line.get_color(), alpha=0.15)
        _plain_log_y(axes)
        axes.set(xlabel=xlabel, ylabel=ylabel)

    if len(panels) == 1:
        figure, axes = plt.subplots(figsize=(11, 5))
        draw(axes, rows)
        return _finish_length_plot(figure, axes, summary, xlabel, ylabel, title, path)
    return _faceted(panels, draw, title, path)


def plot_budgets(summary, path: Path, title: str, multiples=(16, 64)) -> Path | None:
    """Each group's ratio (perplexity at 16x and 64x its train length over its own at the train
    length, 95% interval) against the tokens it had seen: its snapshots (GROUP@STEP) and itself."""
    from poscli.model.runs import SNAPSHOT_MARK

    rows = summary[(summary["seeds"] > 0) & summary["ratio"].notna()].copy()
    rows["base"] = rows["group"].str.split(SNAPSHOT_MARK).str[0]
    rows["length_multiple"] = rows["length"] / rows["train_length"].replace(0, np.nan)
    longer = sorted(m for m in rows["length_multiple"].dropna().unique() if m > 1)
    shown = [m for m in multiples if m in longer] or longer[-1:]  # 16x and 64x, else the longest there is
    if not shown or not rows["group"].str.contains(SNAPSHOT_MARK, regex=False).any():
        return None
    figure, panels = plt.subplots(1, len(shown), figsize=(6 * len(shown), 4.5), squeeze=False)
    for axes, multiple in zip(panels[0], shown):
        part = rows[rows["length_multiple"] == multiple]
        _distinct_colors(axes, part["base"].nunique())
        for base, line in part.groupby("base", sort=False):
            line = line.sort_values("tokens_seen")
            drawn = axes.plot(line["tokens_seen"], line["ratio"], marker="o", label=base)[0]
            axes.fill_between(
                line["tokens_seen"], line["ratio_low"], line["ratio_high"], color=drawn.get_color(), alpha=0.12
            )
        axes.set_xscale("log")
        _plain_log_y(axes)
        axes.set_xlabel("tokens seen in training")
        axes.set_ylabel(f"perplexity at {multiple:g}x / at the train length")
        axes.set_title(f"{title}: {multiple:g}x", fontsize=10)
        axes.grid(True, which="both", alpha=0.3)
    panels[0][-1].legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return save_figure(figure, path)


def plot_loss_by_position(table, path: Path, title: str) -> Path:
    """Mean loss against token position (log axis), one line per run at its longest length; with
    more than FACET_ABOVE runs, panels (``facets``)."""
    panels = facets(table, ["label"])
    xlabel, ylabel = "token position in the window", "mean loss (nats per byte)"
    if len(panels) == 1:
        figure, axes = plt.subplots(figsize=(11, 5))
        _loss_lines(axes, table)
        return _finish_length_plot(figure, axes, table, xlabel, ylabel, title, path)

    def draw(axes, part):
        _loss_lines(axes, part)
        axes.set(xlabel=xlabel, ylabel=ylabel)

    return _faceted(panels, draw, title, path)


def _loss_lines(axes, table) -> None:
    """One line per label at its longest length; the 3-gram row black and dashed, as in the other figures."""
    lines = list(table.groupby("label", sort=False))
    for (label, part), style in zip(lines, line_styles([_encoding_of(part) for _, part in lines])):
        longest = part[part["length"] == part["length"].max()].sort_values("position_start")
        centre = (longest["position_start"] + longest["position_end"]) / 2
        style = {**style, "marker": "."}
        line_label = f"{label} (length {longest['length'].iloc[0]})"
        axes.plot(centre, longest["loss"], markersize=4, label=line_label, **style)


def _heatmap(axes, table, title: str, font: int = 8):
    """One run's passkey accuracy per (length, depth) cell on ``axes``: length on x, depth on y."""
    pivot = table.pivot_table(index="depth", columns="length", values="accuracy").sort_index(ascending=False)
    image = axes.imshow(pivot.values, vmin=0, vmax=1, cmap=HEATMAP, aspect="auto")
    axes.set_xticks(range(len(pivot.columns)), [str(c) for c in pivot.columns])
    axes.set_yticks(range(len(pivot.index)), [f"{d:g}%" for d in pivot.index])
    for (y, x), value in np.ndenumerate(pivot.values):  # dark text on viridis' light end, white on its dark
        axes.text(x, y, f"{value:.2f}", ha="center", va="center", fontsize=font,
                  color="black" if value > 0.6 else "white")  # fmt: skip
    axes.set_xlabel("context length (tokens)")
    axes.set_ylabel("key depth")
    axes.set_title(title, fontsize=10)
    return image, pivot.shape


def plot_passkey_heatmap(table, path: Path, title: str) -> Path:
    """Passkey accuracy per (length, depth) cell for one run: length on x, depth on y."""
    rows, columns = table.pivot_table(index="depth", columns="length", values="accuracy").shape
    figure, axes = plt.subplots(figsize=(1.2 + 1.1 * columns, 1.2 + 0.6 * rows))
    image, _ = _heatmap(axes, table, title)
    figure.colorbar(image, ax=axes, label="exact-match accuracy")
    return save_figure(figure, path)


def plot_passkey_facets(parts: list[tuple[str, object]], path: Path, title: str) -> Path:
    """Every run's heatmap of one passkey table in one figure, a panel each (``parts``: (panel
    title, the run's rows)), four to a row, one colour scale."""
    columns = min(4, len(parts))
    rows = -(-len(parts) // columns)
    figure, grid = plt.subplots(rows, columns, figsize=(5 * columns, 3.8 * rows), squeeze=False, layout="constrained")
    image = None
    for axes, (name, part) in zip(grid.flat, parts):
        image, _ = _heatmap(axes, part, name)
    for axes in grid.flat[len(parts) :]:
        axes.set_visible(False)
    figure.suptitle(title)
    figure.colorbar(image, ax=grid.ravel().tolist(), label="exact-match accuracy", shrink=min(0.6, 3 / rows))
    with atomic_write(path, "wb") as handle:
        figure.savefig(handle, format="png", dpi=100 if rows <= 8 else 60)
    plt.close(figure)
    return path


def plot_decay(result: dict, path: Path, dim: int, base: float, pairs: int) -> Path:
    """Mean q.k against relative distance, sinusoidal versus RoPE."""
    figure, axes = plt.subplots(figsize=(8, 4.5))
    axes.plot(result["distance"], result["sinusoidal"], label="sinusoidal: (q + PE_i) . (k + PE_j)", linewidth=1)
    axes.plot(result["distance"], result["rope"], label="RoPE: R(i) q . R(j) k", linewidth=1)
    axes.axhline(0, color="black", linewidth=0.5)
    axes.set_xlabel("relative distance j - i")
    axes.set_ylabel(f"mean q.k over {pairs} random pairs")
    axes.set_title(f"q.k versus distance (d = {dim}, base = {base:g})")
    axes.grid(True, alpha=0.3)
    axes.legend()
    return save_figure(figure, path)


def heatmap_parts(data, table: str) -> list[tuple[str, object]]:
    """A passkey table's heatmaps: (file name, rows) per run, TABLE-RUN.png, and per number of
    keys when a run was scored with more than one (TABLE-RUN-Kkeys.png for K > 1)."""
    if "keys" not in data.columns:
        return [(f"{table}-{file_part(run)}.png", part) for run, part in data.groupby("run")]
    return [
        (f"{table}-{file_part(run)}{f'-{int(keys)}keys' if int(keys) > 1 else ''}.png", part)
        for (run, keys), part in data.groupby(["run", "keys"])
    ]


def file_part(run: str) -> str:
    """A run's name as part of a file name: an hf:PATH model's slashes and colon made dashes."""
    return re.sub(r"[^A-Za-z0-9._+@-]+", "-", run).strip("-")


def plot_loss(curves: dict[str, dict], path: Path, facet: bool = False) -> Path:
    """Training curves: each run's training loss (the batch's, at every logged step) against tokens
    seen, solid; its validation curve at the train length (dashed) and at longer lengths (dotted),
    in the run's colour; its held-out loss after the last step with its 95% interval;
    runs overlaid on one axis, or (``facet``) one panel each. ``curves``: run name -> {"tokens",
    "loss" (arrays), "heldout": (tokens, loss, low, high) or None, "length": train length}."""
    names = list(curves)
    columns = min(3, len(names)) if facet else 1
    rows = -(-len(names) // columns) if facet else 1
    size = (5 * columns, 3.4 * rows) if facet else (7, 4.2)
    figure, grid = plt.subplots(rows, columns, figsize=size, squeeze=False, sharey=facet)
    axes_of = {name: grid.flat[i] if facet else grid.flat[0] for i, name in enumerate(names)}
    if not facet:
        _distinct_colors(grid.flat[0], len(names))
    for name in names:
        curve, axes = curves[name], axes_of[name]
        validation = curve.get("heldout_curve") or ([], [])
        faint = {"alpha": 0.35, "marker": ""} if validation[0] else {}  # the batches' noise behind the curve
        (line,) = axes.plot(
            curve["tokens"], curve["loss"], linewidth=1, label=f"{name} train (length {curve['length']})", **faint
        )
        color = line.get_color()
        if validation[0]:
            axes.plot(*validation, linestyle="--", marker="o", markersize=3, color=color, linewidth=1.8, zorder=3,
                      label=f"{name} held-out, length {curve['length']}")  # fmt: skip
        for (length, longer), style in zip((curve.get("heldout_longer") or {}).items(), (":", "-.", (0, (1, 3)))):
            axes.plot(*longer, linestyle=style, marker="s", markersize=3, color=color, linewidth=1.8, zorder=3,
                      label=f"{name} held-out, length {length}")  # fmt: skip
        if curve["heldout"] is not None:
            tokens, loss, low, high = curve["heldout"]
            axes.errorbar([tokens], [loss], yerr=[[loss - low], [high - loss]], marker="D", color=color,
                          capsize=3, linestyle="", label=f"{name} held-out at the end, 95% interval")  # fmt: skip
    for axes in grid.flat[: len(names) if facet else 1]:
        axes.set_xlabel("tokens seen")
        axes.set_ylabel("loss (nats/token)")
        axes.grid(True, alpha=0.3)
        axes.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    for axes in grid.flat[len(names) if facet else 1 :]:
        axes.set_visible(False)
    figure.suptitle("training loss (solid, the logged batches) and held-out loss (dashed and dotted)", fontsize=10)
    return save_figure(figure, path)
