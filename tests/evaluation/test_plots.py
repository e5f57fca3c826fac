"""Figures a person reads: at 28 lines no two share a colour and a line style, every colour is one of
Okabe & Ito's (told apart with colour blindness), and legends name groups by what differs."""

import matplotlib
import pytest

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from poscli.evaluation.plots import OKABE_ITO, _distinct_colors, short_labels  # noqa: E402


def test_28_lines_are_28_distinct_colour_and_style_pairs_from_a_colour_blind_safe_palette():
    figure, axes = plt.subplots()
    _distinct_colors(axes, 28)
    lines = [axes.plot([0, 1], [i, i])[0] for i in range(28)]
    pairs = {(line.get_color(), line.get_linestyle(), line.get_marker()) for line in lines}
    assert len(pairs) == 28 and {line.get_color() for line in lines} <= set(OKABE_ITO)
    plt.close(figure)


def test_legends_drop_the_shared_prefix_and_the_seed_wildcard():
    groups = ["tstl-alibi-s*", "tstl-rope-s*", "tstl-rope-s*+yarn", "tstl-rope-s*@200"]
    assert list(short_labels(groups).values()) == ["alibi", "rope", "rope+yarn", "rope@200"]
    assert short_labels(["rope"]) == {"rope": "rope"}  # a single name keeps itself


@pytest.mark.slow
def test_a_passkey_table_of_many_runs_is_one_faceted_figure_not_a_file_per_run(tmp_path):
    """From the committed passkey-extension table: 8 runs give TABLE-heatmaps.png alone; 2 runs give
    it and each run's own heatmap, removed once the table has grown to 8."""
    from pathlib import Path

    import pandas as pd

    from poscli.evaluation import tasks
    from poscli.evaluation.tasks.passkey import FACETS_ONLY

    table = pd.read_csv(Path(__file__).resolve().parents[2] / "results/reference/passkey-extension.csv")
    names = sorted(table["run"].unique())
    (tmp_path / "a").mkdir(), (tmp_path / "b").mkdir()
    many = tasks.get("passkey").plots(table[table["run"].isin(names[: FACETS_ONLY + 2])], tmp_path / "a", "pk")
    assert [p.name for p in many] == ["pk-heatmaps.png"]
    few = tasks.get("passkey").plots(table[table["run"].isin(names[:2])], tmp_path / "b", "pk")
    assert len(few) == 3 and few[-1].name == "pk-heatmaps.png"
    grown = tasks.get("passkey").plots(table[table["run"].isin(names[: FACETS_ONLY + 2])], tmp_path / "b", "pk")
    assert [p.name for p in grown] == ["pk-heatmaps.png"] and sorted(q.name for q in (tmp_path / "b").iterdir()) == [
        "pk-heatmaps.png"
    ], "the table grew past FACETS_ONLY runs: the per-run files of its first two are gone, not stale"


def test_plot_table_draws_the_runs_a_pattern_names_with_the_3gram_row(tmp_path):
    import shutil
    from pathlib import Path

    from tests.cli.test_cli import poscli

    shutil.copy(Path(__file__).resolve().parents[2] / "results/reference/tstl.csv", tmp_path / "tstl.csv")
    done = poscli("plot", "table", "tstl", "--runs", "tstl-rope-*", "--results", str(tmp_path))
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "tstl-subset.png").stat().st_size > 10_000
    none = poscli("plot", "table", "tstl", "--runs", "nope-*", "--results", str(tmp_path))
    assert none.returncode == 2 and "--runs nope-* matches no run of tstl; it has 31 runs" in none.stderr


@pytest.mark.slow
def test_a_perplexity_figure_of_many_runs_gets_a_panel_per_encoding(tmp_path):
    """tstl.csv's 30 runs of 10 encodings: four rows of panels (3 per row); four runs: one axis."""
    from pathlib import Path

    import pandas as pd
    from PIL import Image

    from poscli.evaluation.plots import plot_perplexity

    table = pd.read_csv(Path(__file__).resolve().parents[2] / "results/reference/tstl.csv")
    many = Image.open(plot_perplexity(table, tmp_path / "many.png", "all"))
    few = Image.open(plot_perplexity(table[table["run"].str.match(r"tstl-(rope|alibi)-s[01]$")], tmp_path / "few.png",
                                     "four"))  # fmt: skip
    assert many.size[1] >= 4 * 4 * 100 and few.size[1] < 4 * 4 * 100  # 4 rows of 4-inch panels at 100 dpi


def test_the_3gram_row_is_black_and_dashed_in_the_loss_by_position_figure(tmp_path, monkeypatch):
    """As in the perplexity figures: the reference is told apart from eight runs, which reuse the colours."""
    import pandas as pd

    from poscli.evaluation import plots

    rows = [
        {"label": label, "pe": pe, "length": 64, "position_start": p, "position_end": p + 1, "loss": 1.0 + i}
        for i, (label, pe) in enumerate([(f"run{k}", "rope") for k in range(8)] + [("3-gram", "reference")])
        for p in range(4)
    ]
    kept = []
    monkeypatch.setattr(plots.plt, "close", kept.append)
    plots.plot_loss_by_position(pd.DataFrame(rows).assign(train_length=64), tmp_path / "p.png", "t")
    lines = {line.get_label(): line for line in kept[0].axes[0].get_lines()}
    reference = lines["3-gram (length 64)"]
    assert reference.get_color() == "black" and reference.get_linestyle() == "--"
    assert all(line.get_color() != "black" for label, line in lines.items() if label.startswith("run"))


def test_facets_hold_at_most_facet_above_lines_each_keep_a_family_whole_and_the_3gram_in_every_panel():
    """An extension table's 28 methods x 5 seeds of one encoding (140 lines, one panel before) and 5
    runs of another: every line in exactly one panel, no panel over FACET_ABOVE, no method's seeds split."""
    import pandas as pd

    from poscli.evaluation.plots import FACET_ABOVE, facets

    labels = [(f"xt-rope-s{seed} +method{m} x8, no training", "rope") for m in range(28) for seed in range(5)]
    labels += [(f"xt-none-s{seed} +drope", "none") for seed in range(5)] + [("3-gram", "reference")]
    rows = pd.DataFrame([{"label": label, "pe": pe, "mode": "m", "length": n} for label, pe in labels for n in (1, 2)])
    panels = facets(rows, ["label", "mode"])
    runs = [part[part["pe"] != "reference"] for _, part in panels]
    assert all(part["label"].nunique() <= FACET_ABOVE for part in runs)
    assert sum(part["label"].nunique() for part in runs) == len(labels) - 1
    assert all((part["pe"] == "reference").any() for _, part in panels)
    for part in runs:
        methods = part["label"].str.extract(r"\+(\w+)")[0]
        assert all(len(part[methods == m]["label"].unique()) == 5 for m in methods.unique())
    assert [title for title, _ in panels][-1] == "none" and panels[0][0] == f"rope (1/{len(panels) - 1})"
    assert facets(rows[rows["label"].str.startswith("xt-none")], ["label", "mode"])[0][0] == ""  # 5 lines: one panel


def drawn_figures(monkeypatch) -> list:
    """Every figure saved while the test runs (Figure.savefig recorded, then done as usual)."""
    from matplotlib.figure import Figure

    saved, original = [], Figure.savefig

    def recording(self, *args, **kwargs):
        saved.append(self)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", recording)
    return saved


def check_figure_rules(figure) -> None:
    """At most MAX_LINES lines on an axes (legend entries, error bars included: the train-length marker
    and interval bands excepted), no red-green colour map, no text under 8 points, every encoding line in its colour."""
    from matplotlib.lines import Line2D

    from poscli.evaluation.plots import MAX_LINES

    for axes in figure.axes:
        lines = [line for line in axes.get_lines() if not line.get_label().startswith("_")
                 and line.get_label() != "train length"]  # fmt: skip
        series = [line.get_label() for line in lines] + [
            bars.get_label() for bars in axes.containers if bars.get_label() and not bars.get_label().startswith("_")
        ]  # an errorbar's line carries no label: its container does
        assert len(series) <= MAX_LINES, (axes.get_title(), series)
        for image in axes.get_images():
            assert image.get_cmap().name in ("viridis", "cividis"), image.get_cmap().name
        texts = [*axes.texts, axes.title, axes.xaxis.label, axes.yaxis.label, *axes.get_xticklabels(),
                 *axes.get_yticklabels()]  # fmt: skip
        if axes.get_legend() is not None:
            texts += axes.get_legend().get_texts()
        small = [
            (text.get_text(), text.get_fontsize()) for text in texts if text.get_text() and text.get_fontsize() < 8
        ]
        assert not small, small
        assert all(isinstance(line, Line2D) for line in lines)


@pytest.mark.parametrize("table", ["tstl-stdlib", "tstl", "passkey-extension"])
def test_the_committed_tables_draw_figures_by_the_rules(tmp_path, monkeypatch, table):
    """The README's figure (tstl-stdlib's summary over seeds: 18 groups) and the others drawn from the
    committed tables keep the rules: at most 8 lines an axes (panels otherwise), a colour-blind-safe
    map for heatmaps, no text under 8 points, and an encoding's colour the same in every panel."""
    import shutil
    from pathlib import Path

    import pandas as pd

    from poscli.evaluation import tasks
    from poscli.evaluation.plots import encoding_style, plot_seed_summary

    reference = Path(__file__).resolve().parents[2] / "results/reference"
    rows = pd.read_csv(reference / f"{table}.csv")
    if (reference / f"{table}_by_position.csv").exists():  # the loss-by-position figure too
        shutil.copy(reference / f"{table}_by_position.csv", tmp_path)
    saved = drawn_figures(monkeypatch)
    task = tasks.get("passkey" if table.startswith("passkey") else "perplexity")
    task.plots(rows, tmp_path, table)
    if not table.startswith("passkey"):
        plot_seed_summary(pd.read_csv(reference / f"{table}-seeds.csv"), tmp_path / "seeds.png", table)
    assert saved
    for figure in saved:
        check_figure_rules(figure)
    if not table.startswith("passkey"):
        colours = {}
        for axes in saved[-1].axes:
            for line in axes.get_lines():
                pe = next((pe for pe in ("alibi", "rope", "sinusoidal", "t5") if line.get_label().startswith(pe)), None)
                if pe is not None:
                    colours.setdefault(pe, set()).add(line.get_color())
        assert colours and all(found == {encoding_style(pe)["color"]} for pe, found in colours.items()), colours


def test_the_verdict_by_size_figure_keeps_the_rules(tmp_path, monkeypatch):
    """scale-ladder-by-size.png from its committed table: at most 8 claims an axes (rows of panels
    otherwise), Okabe-Ito colours, no text under 8 points."""
    from pathlib import Path

    import pandas as pd

    from poscli.evaluation.plots import OKABE_ITO
    from poscli.study.by_size import plot_by_size

    table = Path(__file__).resolve().parents[2] / "results/reference/scale-ladder-by-size.csv"
    rows = pd.read_csv(table).to_dict("records")
    many = rows + [{**row, "claim": f"{row['claim']}-again"} for row in rows]  # twice the claims: a second row
    saved = drawn_figures(monkeypatch)
    for drawn in (rows, many):
        assert plot_by_size(drawn, tmp_path / "by-size.png") is not None
    for figure in saved:
        check_figure_rules(figure)
        colours = {bars.lines[0].get_color() for axes in figure.axes for bars in axes.containers}
        assert colours and colours <= set(OKABE_ITO), colours
        for axes in figure.axes:  # no two claims on one axes drawn alike (colour and line style)
            lines = {bars.get_label(): bars.lines[0] for bars in axes.containers}  # each claim's errorbar line
            looks = {(line.get_color(), line.get_linestyle()) for line in lines.values()}
            assert len(lines) > 1 and len(looks) == len(lines), (lines, looks)
    assert len(saved[-1].axes) > len(saved[0].axes), "more claims than fit on one axes: another row of panels"
