"""The claims of issue 33's encodings checked against poscli's tables (poscli.study.published_recent):
the screen reads a claim as in the claimed direction only where Welch's test (or separated intervals)
supports the paper's order, against it where it supports the opposite, and not separated otherwise."""

import pandas as pd

from poscli.evaluation import generalization, passkey_tables
from poscli.study.published_recent import recent_perplexity, recent_retrieval, recent_tasks
from tests.evaluation.test_generalization import table
from tests.evaluation.test_retrieval import passkey_rows
from tests.study.test_recipes import summary_from


def line_with(text: str, *words: str) -> str:
    return next(line for line in text.splitlines() if all(word in line for word in words))


def test_extrapolation_claims_are_screened_by_welch_over_each_encodings_seeds():
    # FoX's seeds all lie near 0.8x RoPE's at 512 and stick-breaking's near 1.2x: Welch's test decides
    # both, in opposite directions, whatever the seeds' labels.
    perplexity = {
        "rope": {128: [5.0, 6.0, 7.0], 512: [12.0, 12.2, 11.8]},
        "fox": {128: [5.0, 6.0, 7.0], 512: [9.6, 9.7, 9.5]},
        "sb": {128: [5.0, 6.0, 7.0], 512: [14.4, 14.6, 14.2]},
    }
    summary, _ = summary_from(perplexity, {"rope": "rope", "fox": "fox", "sb": "stick-breaking"}, 128)
    text = recent_perplexity(summary, {})
    assert line_with(text, "512: fox").endswith(": in the claimed direction.")
    assert "against the claimed direction" in line_with(text, "512: stick-breaking")
    assert "ratio (3 and 3 seeds) 0.800 [" in line_with(text, "512: fox")  # the geometric mean ratio
    assert "128:" not in text  # the train length is not a claim about extrapolation


def test_relabelling_ropes_seeds_leaves_the_screen_unchanged_and_a_seed_short_side_keeps_its_seeds():
    fox = {128: [5.0, 6.0, 7.0], 512: [8.0, 9.6, 11.2]}
    lines = []
    for rope in ([10.0, 12.0, 14.0], [14.0, 10.0, 12.0]):
        perplexity = {"rope": {128: [5.0, 6.0, 7.0], 512: rope}, "fox": fox}
        summary, _ = summary_from(perplexity, {"rope": "rope", "fox": "fox"}, 128)
        lines.append(line_with(recent_perplexity(summary, {}), "512: fox"))
    assert lines[0] == lines[1] and lines[0].endswith(": not separated.")
    perplexity = {
        "t-rope-s*": {128: [5.0, 6.0, 7.0], 512: [10.0, 12.0, 14.0]},
        "t-fox-s*": {128: [5.0, 6.0], 512: [8.0, 9.6]},
    }
    summary, _ = summary_from(perplexity, {"t-rope-s*": "rope", "t-fox-s*": "fox"}, 128)
    assert "ratio (2 and 3 seeds)" in line_with(recent_perplexity(summary, {}), "512: fox")


def test_without_rope_nothing_is_claimed_and_the_file_says_why():
    summary, _ = summary_from({"fox": {128: [5.0, 6.0], 512: [8.0, 9.0]}}, {"fox": "fox"}, 128)
    text = recent_perplexity(summary, {})
    assert "- **" not in text and "no run in this table): stick-breaking, rope." in text  # no claim checked


def test_copes_task_claim_is_checked_on_the_tasks_it_names_by_the_paired_decision():
    # each task's runs are groups of their own, as a recipe names them (lg-TASK-PE-s*)
    other, rest = table({"cp-cope": [0.9, 0.9, 0.9], "cp-rope": [0.1, 0.1, 0.1]}, task="copy", at=32)
    copy, groups = table({"sc-cope": [0.9, 0.92, 0.95], "sc-rope": [0.1, 0.12, 0.1]}, task="selective-copy", at=32)
    flip, more = table({"ff-cope": [0.5, 0.52, 0.55], "ff-rope": [0.95, 0.97, 0.99]}, task="flip-flop", at=32)
    summary = generalization.seed_summary(pd.concat([other, copy, flip]), rest | groups | more)
    text = recent_tasks(summary, {})
    assert line_with(text, "selective-copy, sizes 9-16").endswith(": in the claimed direction.")
    assert "cope 0.92 [" in line_with(text, "selective-copy, sizes 9-16")
    assert "against the claimed direction" in line_with(text, "flip-flop, sizes 9-16")
    assert "copy, sizes" not in text.replace("selective-copy, sizes", "")  # CoPE's claim names no plain copy


def test_a_task_claim_with_an_unmastered_encoding_is_not_comparable():
    rows, groups = table({"lg-cope": [(0.5, 0.0), (0.6, 0.0)], "lg-rope": [0.3, 0.4]}, task="flip-flop", at=32)
    text = recent_tasks(generalization.seed_summary(rows, groups), {})
    assert "not comparable" in line_with(text, "flip-flop, sizes 9-16")
    assert "cope n/a (no seed mastered)" in line_with(text, "flip-flop, sizes 9-16")
    assert "not in this table: selective-copy, counting." in text


def passkey_summary(counts: dict[str, dict[int, list[int]]], pe: dict[str, str]):
    rows, groups = passkey_rows(counts)
    rows["pe"] = rows["run"].str.rsplit("-s", n=1).str[0].map(pe)
    return passkey_tables.passkey_seed_summary(rows, groups)


def test_the_hybrids_retrieval_claim_holds_only_where_the_intervals_separate():
    counts = {"hy": {256: [50], 512: [45], 1024: [20]}, "rp": {256: [50], 512: [3], 1024: [15]}}
    text = recent_retrieval(passkey_summary(counts, {"hy": "hybrid", "rp": "rope"}), {})
    assert line_with(text, "512 (2x)").endswith(": in the claimed direction.")
    assert line_with(text, "1024 (4x)").endswith(": not separated.")  # 0.40 against 0.30 of 100 prompts: overlapping
    assert "256 (" not in text
    reverse = recent_retrieval(passkey_summary(counts, {"hy": "rope", "rp": "hybrid"}), {})
    assert "against the claimed direction" in line_with(reverse, "512 (2x)")
