"""Splitting one text by position (a single file as a corpus, nanoGPT's habit)."""

import numpy as np
import pytest

from poscli.data.corpus import cut_near, parse_split, position_split
from poscli.data.tokens import encode
from poscli.errors import PoscliError

TEXT = encode("".join(f"line {i}: {'é' * (i % 7)} some words of text\n" for i in range(5000)))


@pytest.mark.parametrize("fraction, blocks", [(0.1, 1), (0.1, 10), (0.2, 3), (0.05, 4)])
def test_the_split_covers_the_text_once_holds_out_the_fraction_and_cuts_at_line_starts(fraction, blocks):
    offsets, heldout = position_split(TEXT, fraction, blocks)
    assert offsets[0] == 0 and offsets[-1] == len(TEXT) and (np.diff(offsets) > 0).all()
    assert len(heldout) == len(offsets) - 1 and heldout.sum() == blocks and heldout[-1]
    assert not (heldout[:-1] & heldout[1:]).any() and not (~heldout[:-1] & ~heldout[1:]).any()  # they alternate
    held = np.diff(offsets)[heldout].sum() / len(TEXT)
    assert abs(held - fraction) < 0.01, held
    for cut in offsets[1:-1]:
        assert TEXT[cut - 1] == ord("\n")  # every segment starts a line


def test_blocks_spread_the_held_out_text_through_the_file():
    offsets, heldout = position_split(TEXT, 0.1, 10)
    starts = offsets[:-1][heldout] / len(TEXT)
    assert np.allclose(starts, np.arange(10) / 10 + 0.09, atol=0.01)


def test_a_cut_never_splits_a_utf8_character():
    text = encode("é" * 5000)  # no newline within reach
    cut = cut_near(text, 1001)
    assert text[cut] == 0xC3 and cut in (1002,)


@pytest.mark.parametrize(
    "text, phrase", [("blocks:0", "blocks:K"), ("rows", "auto, documents, tail"), ("blocks:x", "blocks:K")]
)
def test_a_bad_split_is_one_line_naming_the_choices(text, phrase):
    with pytest.raises(PoscliError, match=phrase):
        parse_split(text)


def test_a_text_too_short_for_the_split_is_refused():
    with pytest.raises(PoscliError, match="too few"):
        position_split(encode("short text\n"), 0.1, 10)
