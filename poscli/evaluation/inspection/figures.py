"""``poscli inspect``'s figures: entropy and span against length, mass by distance, angle coverage and
frequency use. Every axes holds at most ``MAX_LINES`` lines (more runs: more rows of panels), in Okabe
and Ito's colours, its legend outside the data."""

from __future__ import annotations

import math
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np

from poscli.evaluation.plots import MAX_LINES, OKABE_ITO, length_axis, save_figure, short_labels

PER_AXES = MAX_LINES - 1  # runs on one axes, beside one reference line (uniform entropy, the window)
TREATMENT_SHADE = {"kept": "#FFFFFF", "ramped": "#F0E442", "interpolated": "#56B4E9", "rescaled": "#CC79A7"}


def _run_groups(table, size: int = PER_AXES) -> list[list[str]]:
    runs = list(dict.fromkeys(table["run"]))
    return [runs[start : start + size] for start in range(0, len(runs), size)]


def _grid(rows: int, columns: int, width: float = 4.2, height: float = 3.4):
    figure, grid = plt.subplots(rows, columns, figsize=(width * columns + 2.5, height * rows), squeeze=False)
    return figure, grid


def _style(index: int) -> dict:
    return {"color": OKABE_ITO[index % 7], "marker": "os^D"[index % 4], "markersize": 4}


def _legend(axes) -> None:
    axes.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)


def plot_by_length(summary, column: str, ylabel: str, title: str, path: Path, reference=None, marks=None) -> Path:
    """``column`` (with its ``_low``/``_high`` interval) against length, a panel per layer and for all
    layers, a row of panels per group of runs; ``reference(lengths)``: a black dashed line (uniform
    entropy, the whole window); ``marks``: a column drawn dotted in each run's colour in the "all" panel
    (the effective context beside the span), with a log y axis."""
    layers = list(dict.fromkeys(summary["layer"].astype(str)))
    groups = _run_groups(summary, PER_AXES if marks is None else PER_AXES // 2)  # a mark is a second line per run
    figure, grid = _grid(len(groups), len(layers))
    for row, runs in enumerate(groups):
        labels = short_labels(runs)
        for column_index, layer in enumerate(layers):
            axes = grid[row, column_index]
            part = summary[summary["layer"].astype(str) == layer]
            for index, run in enumerate(runs):
                lines = part[part["run"] == run].sort_values("length")
                axes.plot(lines["length"], lines[column], label=labels[run], **_style(index))
                if f"{column}_low" in lines:
                    axes.fill_between(lines["length"], lines[f"{column}_low"], lines[f"{column}_high"], alpha=0.15,
                                      color=OKABE_ITO[index % 7])  # fmt: skip
                if marks is not None and layer == "all":
                    axes.plot(lines["length"], lines[marks].clip(lower=1), color=OKABE_ITO[index % 7], linestyle=":",
                              label=f"{labels[run]}: {marks.replace('_', ' ')}")  # fmt: skip
            if reference is not None:
                lengths = np.array(sorted(part["length"].unique()), dtype=float)
                axes.plot(lengths, reference(lengths, part), color="black", linestyle="--", label=reference.__doc__)
            for train_length in sorted(set(part["train_length"])):
                axes.axvline(train_length, color="grey", linestyle=":", linewidth=1)
            length_axis(axes)
            if marks is not None:
                axes.set_yscale("log", base=2)
            axes.set(xlabel="window length (tokens)", ylabel=ylabel, title=f"layer {layer}")
            axes.grid(True, which="both", alpha=0.3)
        _legend(grid[row, -1])
    figure.suptitle(title)
    return save_figure(figure, path)


def uniform_entropy(lengths, part):
    """uniform attention"""
    return np.interp(lengths, part.groupby("length")["uniform_entropy"].mean().index,
                     part.groupby("length")["uniform_entropy"].mean().values)  # fmt: skip


def whole_window(lengths, part):
    """the whole window"""
    return lengths


def plot_mass(mass, path: Path, title: str) -> Path:
    """The share of attention within each distance at each run's longest length, a panel per layer."""
    mass = mass[mass["head"].astype(str) == "all"]
    mass = mass[mass["length"] == mass.groupby("run")["length"].transform("max")]
    layers = sorted(mass["layer"].unique())
    groups = _run_groups(mass)
    figure, grid = _grid(len(groups), len(layers))
    for row, runs in enumerate(groups):
        labels = short_labels(runs)
        for column_index, layer in enumerate(layers):
            axes = grid[row, column_index]
            part = mass[mass["layer"] == layer]
            for index, run in enumerate(runs):
                lines = part[(part["run"] == run) & (part["distance"] > 0)].sort_values("distance")
                label = f"{labels[run]} @ {int(lines['length'].max())}" if len(lines) else labels[run]
                axes.plot(lines["distance"], lines["within"], label=label, **_style(index))
            for train_length in sorted(set(part["train_length"])):
                axes.axvline(train_length, color="grey", linestyle=":", linewidth=1)
            length_axis(axes)
            axes.set(xlabel="distance d (tokens)", ylabel="share of attention within d", title=f"layer {layer}",
                     ylim=(0, 1.02))  # fmt: skip
            axes.grid(True, which="both", alpha=0.3)
        _legend(grid[row, -1])
    figure.suptitle(title)
    return save_figure(figure, path)


def plot_angles(angles, path: Path, title: str) -> Path:
    """Per rotary run (a panel each): the largest angle each pair met in training and at each length,
    2 pi marked, pairs that meet unseen angles ringed, an extension's treatment of each pair shaded."""
    runs = list(dict.fromkeys(angles["run"]))
    columns = min(3, len(runs))
    figure, grid = _grid(-(-len(runs) // columns), columns, width=5.0, height=3.6)
    for axes, run in zip(grid.flat, runs):
        part = angles[angles["run"] == run]
        first = part[part["length"] == part["length"].min()].sort_values("pair")
        for pair, treatment in zip(first["pair"], first["treatment"]):
            axes.axvspan(pair - 0.5, pair + 0.5, color=TREATMENT_SHADE.get(treatment, "#FFFFFF"), alpha=0.35, lw=0)
        axes.plot(first["pair"], first["trained_max_angle"], color="black", label="training", marker=".")
        for index, (length, lines) in enumerate(part.groupby("length")):
            lines = lines.sort_values("pair")
            axes.plot(lines["pair"], lines["max_angle"], label=f"at {length}", **_style(index))
            unseen = lines[lines["unseen"].astype(bool)]
            axes.scatter(unseen["pair"], unseen["max_angle"], s=60, facecolors="none", edgecolors="#D55E00")
        axes.axhline(2 * math.pi, color="grey", linestyle="--", linewidth=1, label="2 pi")
        axes.set_yscale("log")
        treatments = ", ".join(f"{name}: {colour_name(colour)}" for name, colour in TREATMENT_SHADE.items()
                               if name in set(first["treatment"]) and name != "kept")  # fmt: skip
        axes.set(xlabel="rotary pair (highest frequency first)", ylabel="largest angle (radians)",
                 title=f"{run}" + (f"\n{treatments}" if treatments else ""))  # fmt: skip
        axes.title.set_fontsize(9)
        axes.grid(True, which="both", alpha=0.3)
        _legend(axes)
    for axes in grid.flat[len(runs) :]:
        axes.set_visible(False)
    figure.suptitle(title + " (ringed: angles never seen in training)")
    return save_figure(figure, path)


def colour_name(colour: str) -> str:
    return {"#F0E442": "yellow", "#56B4E9": "blue", "#CC79A7": "pink"}.get(colour, colour)


def plot_frequencies(frequencies, path: Path, title: str) -> Path:
    """Per rotary run (a panel each): each pair's mean |q| |k| (pairs highest frequency first), a line per layer."""
    frequencies = frequencies[frequencies["length"] == frequencies.groupby("run")["length"].transform("min")]
    runs = list(dict.fromkeys(frequencies["run"]))
    columns = min(3, len(runs))
    figure, grid = _grid(-(-len(runs) // columns), columns, width=5.0, height=3.6)
    for axes, run in zip(grid.flat, runs):
        part = frequencies[frequencies["run"] == run]
        for index, (layer, lines) in enumerate(part.groupby("layer")):
            lines = lines.sort_values("pair")
            axes.plot(lines["pair"], lines["q_norm"] * lines["k_norm"], label=f"layer {layer}", **_style(index))
        axes.set(xlabel="rotary pair (highest frequency first)", ylabel="mean |q| x |k| of the pair", title=run)
        axes.title.set_fontsize(9)
        axes.grid(True, alpha=0.3)
        _legend(axes)
    for axes in grid.flat[len(runs) :]:
        axes.set_visible(False)
    figure.suptitle(title)
    return save_figure(figure, path)
