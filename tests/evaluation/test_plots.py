"""Figures a person reads: at 28 lines no two share a colour and a line style, every colour is one of
Okabe & Ito's (told apart with colour blindness), and legends name groups by what differs."""

import matplotlib

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
