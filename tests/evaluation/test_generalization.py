"""Length generalization over seeds: mastery first, then paired decisions by seed with Holm's
correction, and the comparison with the published orderings built on them."""

import json
import math

import pandas as pd
import pytest

from poscli.evaluation import generalization
from poscli.evaluation.stats import paired_t
from poscli.study.published_tasks import kazemnejad2023

TRIALS = 100


def table(accuracy: dict[str, list[float]], task: str = "copy", at: int = 16, trained: float = 1.0):
    """Rows of an algorithmic table: each group's seeds trained on sizes 1-8 (scored at 4 and 8, exact
    match ``trained`` there) and scored at every size from 9 to ``at`` (the seed's value; given as
    (in distribution, beyond) where the seed has its own in-distribution value)."""
    rows, groups = [], {}
    for group, seeds in accuracy.items():
        for seed, value in enumerate(seeds):
            inside, outside = value if isinstance(value, tuple) else (trained, value)
            run = f"{group}-s{seed}"
            groups[run] = f"{group}-s*"
            for size, share in [(4, inside), (8, inside), *((size, outside) for size in range(9, at + 1))]:
                exact = round(share * TRIALS)
                rows.append({"run": run, "pe": group.split("-")[1], "seed": seed, "task": task, "size": size,
                             "trained_sizes": "1-8", "in_distribution": size <= 8, "trials": TRIALS, "exact": exact,
                             "accuracy": exact / TRIALS, "token_accuracy": share, "note": ""})  # fmt: skip
    return pd.DataFrame(rows), groups


def test_paired_t_matches_the_textbook_value():
    mean, low, high, p = paired_t([1.0, 2.0, 3.0])  # t = 2 / (1 / sqrt 3) = 3.464, df 2
    assert mean == 2.0
    assert p == pytest.approx(0.0742, abs=5e-4)
    assert (low, high) == pytest.approx((2 - 4.303 / math.sqrt(3), 2 + 4.303 / math.sqrt(3)), abs=1e-3)


def test_an_unmastered_seed_counts_in_distribution_but_not_beyond():
    rows, groups = table({"a-rope": [(1.0, 0.6), (1.0, 0.8), (0.5, 0.0)]})
    summary = generalization.seed_summary(rows, groups)
    at = summary[summary["size"] == 16].iloc[0]
    assert (at["seeds"], at["mastered"]) == (3, 2)
    assert at["accuracy"] == pytest.approx(0.7)  # the mean of the two mastered seeds, not 0.467
    assert at["in_distribution"] == pytest.approx((1 + 1 + 0.5) / 3)
    assert json.loads(at["seed_accuracy"]) == {"0": 0.6, "1": 0.8, "2": None}
    assert at["ci_low"] < 0.7 < at["ci_high"]


def test_no_mastered_seed_means_no_accuracy_beyond_and_the_table_says_so():
    rows, groups = table({"a-none": [(0.5, 0.0), (0.6, 0.0)], "b-rope": [0.3, 0.4]})
    summary = generalization.seed_summary(rows, groups)
    assert math.isnan(summary[(summary["group"] == "a-none-s*") & (summary["size"] == 16)]["accuracy"].iloc[0])
    assert "no seed mastered" in generalization.seed_markdown(summary)


def test_the_screen_compares_two_encodings_unpaired_so_seed_labels_do_not_matter():
    # Seed s of A is 0.1 above seed s of B at every seed, but seed 0 of ALiBi and seed 0 of RoPE share
    # nothing: Welch's test sees two spreads far wider than the difference, in any labelling.
    rows, groups = table({"a-alibi": [0.2, 0.5, 0.8], "b-rope": [0.1, 0.4, 0.7]})
    found = generalization.decisions(generalization.seed_summary(rows, groups))
    row = found[found["factor"] == 2].iloc[0]
    assert (row["a"], row["b"], row["pairs"]) == ("a-alibi-s*", "b-rope-s*", 3)
    assert row["difference"] == pytest.approx(0.1) and row["verdict"] == "≈"
    shuffled, groups = table({"a-alibi": [0.8, 0.2, 0.5], "b-rope": [0.1, 0.4, 0.7]})  # the same values, relabelled
    other = generalization.decisions(generalization.seed_summary(shuffled, groups)).iloc[0]
    assert other["p"] == pytest.approx(row["p"]) and other["verdict"] == row["verdict"]
    apart, groups = table({"a-alibi": [0.9, 0.92, 0.95], "b-rope": [0.1, 0.12, 0.1]})
    assert generalization.decisions(generalization.seed_summary(apart, groups)).iloc[0]["verdict"] == ">"


def test_small_differences_and_many_comparisons_are_not_claimed():
    assert generalization.verdict(0.03, 0.0) == "≈"  # under MIN_DIFFERENCE
    rows, groups = table({f"g{i}-rope": [0.5 + 0.02 * i + 0.01 * s for s in range(3)] for i in range(5)})
    found = generalization.decisions(generalization.seed_summary(rows, groups))
    assert len(found) == 10  # every pair of five groups
    assert (found["adjusted"] >= found["p"]).all()  # Benjamini-Hochberg only raises p-values


def test_groups_with_fewer_than_two_mastered_seeds_in_common_are_not_tested():
    rows, groups = table({"a-rope": [(1.0, 0.9), (0.2, 0.0), (0.2, 0.0)], "b-alibi": [0.1, 0.1, 0.1]})
    assert generalization.decisions(generalization.seed_summary(rows, groups)).empty


def test_the_published_comparison_counts_agreement_and_disagreement_from_the_decisions():
    rows, groups = table({"lg-none": [0.9, 0.92, 0.95], "lg-t5": [0.1, 0.12, 0.1], "lg-rope": [0.95, 0.97, 0.99]})
    text = kazemnejad2023(generalization.seed_summary(rows, groups), {})
    line = next(line for line in text.splitlines() if line.startswith("| copy"))
    cells = [cell.strip() for cell in line.split("|")[1:-1]]
    assert cells[1] == "9-16" and cells[2].startswith("rope 0.97, none 0.92, t5 0.11")
    assert cells[3] == "1 (none>t5)"  # agrees
    assert cells[4].startswith("1 (t5>rope")  # the paper: T5 above Rotary; here Rotary is far above
    assert "none>rope" in cells[5]  # 0.92 against 0.97: not decided
    assert "No task has an encoding both with and without random positions" in text


def test_randomized_rope_is_compared_with_rope_beside_ruoss():
    rows, groups = table({"lg-rope": [0.1, 0.2, 0.1], "lg-rope-random": [0.6, 0.7, 0.65]})
    meta = {"lg-rope-random-s*": {"random_positions": 160}}
    text = kazemnejad2023(generalization.seed_summary(rows, groups), meta)
    assert "- copy, rope: +51.7 points" in text and "randomized positions higher" in text


def test_the_task_writes_its_summary_and_one_heatmap_per_task(tmp_path):
    from poscli.evaluation import tasks

    copy, groups = table({"a-rope": [0.5, 0.6], "b-alibi": [0.7, 0.8]}, task="copy")
    reverse, more = table({"c-rope": [0.1, 0.2]}, task="reverse")
    summary, text = tasks.get("copy").seed_summary(pd.concat([copy, reverse]), groups | more, {}, tmp_path, "lg", 2)
    assert set(summary["task"]) == {"copy", "reverse"} and "### copy" in text and "### reverse" in text
    written = tasks.get("copy").seed_plots(summary, tmp_path, "lg")
    assert sorted(p.name for p in written) == ["lg-seeds-copy.png", "lg-seeds-reverse.png"]
    assert all(p.stat().st_size > 1000 for p in written)
    one_seed = copy[copy["run"].str.endswith("s0")]
    assert tasks.get("copy").seed_summary(one_seed, groups, {}, tmp_path, "lg", 2)[0] is None


def test_a_band_is_each_seeds_mean_over_its_sizes_and_a_group_without_positions_there_is_n_a():
    rows, groups = table({"a-rope": [0.5, 0.7], "b-learned": [0.4, 0.4]})
    rows.loc[(rows["run"].str.startswith("a-rope")) & (rows["size"] == 9), ["exact", "accuracy"]] = [100, 1.0]
    learned = rows["run"].str.startswith("b-learned") & (rows["size"] > 12)
    rows.loc[learned, ["exact", "accuracy", "note"]] = [0, float("nan"), "n/a: no position"]
    summary = generalization.seed_summary(rows, groups)
    values = generalization.band_values(summary, 2)
    assert values["a-rope-s*"] == pytest.approx({"0": (1.0 + 7 * 0.5) / 8, "1": (1.0 + 7 * 0.7) / 8})
    assert "b-learned-s*" not in values  # not scored at every size of the band: no band value, not zeros
    line = next(x for x in generalization.seed_markdown(summary).splitlines() if x.startswith("| b-learned"))
    assert line.split(" | ")[3] == "n/a"


def test_heatmap_labels_keep_what_tells_the_groups_apart():
    groups = ["lg-copy-alibi-s*", "lg-copy-rope-s*", "lg-copy-rope-random-s*"]
    assert generalization.short_labels(groups) == ["alibi", "rope", "rope-random"]
    assert generalization.short_labels(["lg-copy-rope-s*"]) == ["lg-copy-rope"]
    assert generalization.short_labels(["a-x-s*", "a-xy-s*"]) == ["x", "xy"]  # never half a word


def test_randomized_rope_that_mastered_no_seed_is_named_not_comparable_rather_than_absent():
    rows, groups = table({"lg-rope": [0.1, 0.2, 0.1], "lg-rope-random": [(0.8, 0.1), (0.85, 0.1), (0.9, 0.0)]})
    meta = {"lg-rope-random-s*": {"random_positions": 160}}
    text = kazemnejad2023(generalization.seed_summary(rows, groups), meta)
    assert "- copy, rope: not comparable (fewer than two seeds mastered in both)." in text
    assert "No task has an encoding both with and without random positions" not in text
