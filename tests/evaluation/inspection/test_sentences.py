"""The sentences of an inspect table state an order only where the 95% interval over spans excludes the
value compared with, and say "not separated" otherwise."""

import math

import pandas as pd

from poscli.evaluation.inspection.tables import why_sentences


def _row(run: str, ratio: tuple, span: tuple, base: tuple | None = None, growth=(1.5, 1.4, 1.6)) -> dict:
    row = {"run": run, "layer": "all", "length": 1024, "train_length": 128, "entropy": 4.0, "entropy_low": 3.9,
           "entropy_high": 4.1, "uniform_entropy": 6.2, "span90_growth": growth[0], "span90_growth_low": growth[1],
           "span90_growth_high": growth[2], "span90_from": 512,
           "entropy_ratio": ratio[0], "entropy_ratio_low": ratio[1], "entropy_ratio_high": ratio[2],
           "span90": span[0], "span90_low": span[1], "span90_high": span[2], "sink": 0.05,
           "effective_context": 63, "context_open_ended": False}  # fmt: skip
    base = base or (math.nan, math.nan, math.nan)
    row.update(base_entropy_ratio=base[0], base_entropy_ratio_low=base[1], base_entropy_ratio_high=base[2])
    return row


def test_an_order_is_stated_only_where_the_interval_excludes_the_value():
    summary = pd.DataFrame(
        [
            _row("higher", (1.3, 1.2, 1.4), (300, 250, 350)),
            _row("lower", (0.8, 0.7, 0.9), (60, 50, 70)),
            _row("unclear", (1.02, 0.95, 1.1), (130, 100, 160), base=(1.01, 0.97, 1.05), growth=(1.0, 0.9, 1.1)),
            _row("tiny", (1.008, 1.004, 1.012), (130, 100, 160), growth=(1.011, 1.003, 1.019)),
            {**_row("train", (1.0, 1.0, 1.0), (60, 50, 70)), "length": 128},  # at the train length: no sentence
        ]
    )
    sentences = {line.split(" at ")[0][2:]: line for line in why_sentences(summary)}
    assert set(sentences) == {"higher", "lower", "unclear", "tiny"}
    assert "(within 1% of it;" in sentences["tiny"] and "x its span at 512: within 1% of it)" in sentences["tiny"]
    assert "(higher;" in sentences["higher"] and "(beyond the train length 128;" in sentences["higher"]
    assert "(lower;" in sentences["lower"] and "(within the train length 128;" in sentences["lower"]
    assert "(not separated from it;" in sentences["unclear"]
    assert "(not separated from the train length 128;" in sentences["unclear"]
    assert "x its base's entropy at 128 (not separated from it)" in sentences["unclear"]
    assert "base's" not in sentences["higher"], "a run without its base inspected beside it says nothing of one"
    assert "below uniform attention's 6.20" in sentences["higher"]
    assert "x its span at 512: longer)" in sentences["higher"]
    assert "x its span at 512: not separated from it)" in sentences["unclear"]
