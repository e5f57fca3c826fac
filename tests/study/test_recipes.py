"""`poscli run RECIPE`: parsing with errors that name the line, the plan, skip/resume, summaries,
and the comparisons with published numbers."""

import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from poscli.core.lengths import parse_length, parse_lengths
from poscli.errors import PoscliError
from poscli.evaluation.seeds import seed_summary
from poscli.study.paired import extrapolation_class
from poscli.study.plan import RecipeError
from poscli.study.published import peng2023
from poscli.study.published_press import press2022
from poscli.study.recipes import load_recipe
from poscli.study.runner import narrow
from poscli.study.state import check_state
from tests.conftest import poscli_in_process

REPO = Path(__file__).resolve().parents[2]


def poscli(*args):
    return poscli_in_process(*args)


def write(tmp_path, text: str) -> Path:
    path = tmp_path / "recipe.toml"
    path.write_text(text, encoding="utf-8")
    return path


GOOD = """
name = "mini"

[defaults]
train_length = 32
steps = 3

[[train]]
name = "m-{pe}-s{seed}"
pe = ["rope", "alibi"]
seed = [0, 1]

[[extend]]
runs = "m-rope-s*"
name = "{run}+{method}"
method = ["yarn", "base"]
target = 128
steps = 0
method_options = { base = { rope_base = 500000 } }

[[eval]]
runs = "m-*"
table = "mini"
lengths = "32,128"
"""


def test_sweep_axes_expand_to_every_combination_with_groups_over_seeds(tmp_path):
    recipe = load_recipe(write(tmp_path, GOOD))
    assert [s.name for s in recipe.train] == ["m-rope-s0", "m-rope-s1", "m-alibi-s0", "m-alibi-s1"]
    assert {s.group for s in recipe.train} == {"m-rope-s*", "m-alibi-s*"}
    assert [s.name for s in recipe.extend] == ["m-rope-s0+yarn", "m-rope-s0+base", "m-rope-s1+yarn", "m-rope-s1+base"]
    assert recipe.extend[1].argv == [
        "extend",
        "m-rope-s0",
        "--method",
        "base",
        "--target",
        "128",
        "--steps",
        "0",
        "--rope-base",
        "500000",
        "--name",
        "m-rope-s0+base",
    ]
    assert "--rope-base" not in recipe.extend[0].argv  # method_options apply to their method only
    assert recipe.train[0].argv[:4] == ["train", "--train-length", "32", "--steps"]
    assert recipe.evals[0].runs == [*(s.name for s in recipe.train), *(s.name for s in recipe.extend)]


# (recipe text, a piece of the offending line or None where no single line is at fault, phrase)
MALFORMED = [
    (GOOD.replace("steps = 3", "stepz = 3"), "stepz = 3", "'stepz'"),
    (GOOD.replace('name = "mini"', 'name = "mini"\ncolour = "red"'), "colour", "'colour'"),
    (GOOD.replace('runs = "m-rope-s*"', 'runs = "q-*"'), 'runs = "q-*"', "matches none"),
    (GOOD.replace('lengths = "32,128"', 'lengths = "32,12x"'), "12x", "is not a length"),
    (GOOD.replace('pe = ["rope", "alibi"]', 'pe = ["rope", "alibi"'), None, "not valid TOML"),
    (GOOD.replace('name = "m-{pe}-s{seed}"', 'name = "m-{pe}"'), None, "run names repeat"),
    (GOOD.replace('name = "m-{pe}-s{seed}"', 'name = "m-{pe}-{colour}"'), None, "'colour'"),
    (GOOD + '\n[[compare]]\ntable = "mini"\npublished = "vaswani2017"\n', "vaswani2017", "published must be one of"),
    (GOOD.replace('table = "mini"\n', ""), None, "needs 'table'"),
    (GOOD.replace("steps = 0\n", 'steps = 0\nresults = "elsewhere"\n'), "elsewhere", "'results'"),
    # values, checked as the commands check them, before anything runs (the step named)
    (GOOD.replace('pe = ["rope", "alibi"]', 'pe = ["rope", "ropee"]'), "ropee", "m-ropee-s0: unknown encoding 'ropee'"),
    (GOOD.replace("steps = 3", "steps = -2"), "steps = -2", "--steps must be at least 1"),
    (GOOD.replace('method = ["yarn", "base"]', 'method = ["yarnn"]'), "yarnn", "unknown extension method 'yarnn'"),
    (
        GOOD.replace('runs = "m-rope-s*"', 'runs = "m-alibi-s*"'),
        None,
        "m-alibi-s0+yarn: run 'm-alibi-s0' uses --pe alibi",
    ),
    (GOOD.replace("target = 128", "target = 16"), "target = 16", "--target 16 is not longer than the run's"),
    (GOOD.replace("steps = 0\n", "steps = 0\nbeta_fast = -1\n"), "beta_fast = -1", "--beta-fast -1 and --beta-slow 1"),
    (
        GOOD.replace('lengths = "32,128"', 'lengths = "32,128"\ntask = "passkeyy"'),
        "passkeyy",
        "unknown evaluation task",
    ),
    # values that were checked only when their step ran, after the runs before it had trained
    (GOOD.replace('lengths = "32,128"', 'lengths = "32,128"\ndata = "no-such.txt"'), "no-such", "an existing file"),
    (GOOD.replace("steps = 3", 'steps = 3\ndata = "no-such.txt"'), "no-such", "--data 'no-such.txt' is not"),
    (GOOD.replace('lengths = "32,128"', 'lengths = "32,128"\ntask = "passkey"\ndepths = "1,x"'), "1,x", "--depths"),
    (GOOD.replace('lengths = "32,128"', 'lengths = "32,128"\ntask = "copy"\ntrials = 0'), "trials", "--trials must"),
    (GOOD.replace('lengths = "32,128"', 'lengths = "32,128"\ndepths = "10,50"'), "depths", "not by --task perplexity"),
    (GOOD.replace('lengths = "32,128"', 'lengths = "32,128"\nsinks = 0'), "sinks", "--sinks must be at least 1"),
    (GOOD.replace("steps = 0\n", "steps = 2\nbatch_size = 0\n"), "batch_size", "--batch-size must be at least 1"),
    (GOOD.replace("steps = 0\n", "steps = 2\nfinetune_length = 1\n"), "finetune", "--finetune-length must be"),
    (GOOD.replace("steps = 0\n", "steps = 2\nmixed_short = 1.5\n"), "mixed_short", "--mixed-short must be"),
    (GOOD.replace("steps = 0\n", 'steps = 0\noptions_from = "no-such.json"\n'), "no-such", "no such file"),
    (GOOD.replace("steps = 0\n", 'steps = 0\nfactors = "no-such.json"\n'), "no-such", "cannot read it"),
]


@pytest.mark.parametrize("text, marker, phrase", MALFORMED)
def test_a_malformed_recipe_is_one_line_naming_the_key_and_its_line(tmp_path, text, marker, phrase):
    with pytest.raises(RecipeError) as error:
        load_recipe(write(tmp_path, text))
    assert phrase in str(error.value), str(error.value)
    if marker is not None:
        line = next(number for number, content in enumerate(text.splitlines(), 1) if marker in content)
        assert f"line {line}:" in str(error.value), str(error.value)


def test_a_malformed_recipe_through_the_cli_is_exit_2_one_line_and_writes_nothing(tmp_path):
    recipe = write(tmp_path, GOOD.replace("steps = 3", "stepz = 3"))
    done = poscli("run", str(recipe), "--results", str(tmp_path / "results"))
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "line 6:" in done.stderr
    assert not (tmp_path / "results").exists()
    missing = poscli("run", "recipes/nope.toml", "--results", str(tmp_path / "results"))
    assert missing.returncode == 2 and "no recipe at recipes/nope.toml" in missing.stderr


def test_a_missing_recipe_names_the_recipes_the_user_can_run(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no recipes/ here: the built-in ones beside the package are named
    with pytest.raises(RecipeError) as away:
        load_recipe("nosuch.toml")
    example = REPO / "recipes" / "train-short-test-long.toml"
    assert f"e.g. poscli run {example}" in str(away.value) and example.is_file()
    (tmp_path / "recipes").mkdir()
    (tmp_path / "recipes" / "mine.toml").write_text(GOOD)
    with pytest.raises(RecipeError) as here:
        load_recipe("nosuch.toml")
    assert str(here.value).endswith("the recipes in recipes/ are mine.toml; e.g. poscli run recipes/mine.toml")


TINY = """
name = "tiny"

[gates]             # 4-step models learn nothing: let every run through, to test the pipeline
three_gram = 99

[defaults]
layers = 1
width = 32
heads = 4
train_length = 32
batch_size = 4
steps = 4
warmup = 1
data = "{corpus}"

[[train]]
name = "t-{{pe}}-s{{seed}}"
pe = ["rope", "alibi"]
seed = [0, 1]

[[extend]]
runs = "t-rope-s*"
name = "{{run}}+yarn"
method = "yarn"
target = 128
steps = 0

[[eval]]
runs = ["t-*"]
table = "tiny"
lengths = "32,128"
max_tokens = "512"

[[compare]]
table = "tiny"
published = "press2022"

[[compare]]
table = "tiny"
published = "recent-perplexity"
"""


@pytest.mark.slow
def test_a_recipe_runs_then_skips_what_is_done_resumes_what_was_interrupted_and_refuses_a_changed_run(tmp_path_factory):
    from tests.conftest import cli_workspace

    corpus, results = cli_workspace(tmp_path_factory, "recipes")
    recipe = write(tmp_path_factory.mktemp("recipe"), TINY.format(corpus=corpus))
    dry = poscli("run", str(recipe), "--results", str(results), "--dry-run")
    assert dry.returncode == 0 and "7 steps to do, 0 already done" in dry.stderr and not (results / "runs").exists()

    first = poscli("run", str(recipe), "--results", str(results))
    assert first.returncode == 0, first.stderr
    for name in ("t-rope-s0", "t-rope-s1", "t-alibi-s0", "t-alibi-s1", "t-rope-s0+yarn", "t-rope-s1+yarn"):
        assert json.loads((results / "runs" / name / "config.json").read_text())["status"] == "finished"
    table = pd.read_csv(results / "tiny.csv")
    assert len(table) == (6 + 1) * 2 and set(table["length"]) == {
        32,
        128,
    }  # six runs and the 3-gram reference (no null unless asked)
    seeds = pd.read_csv(results / "tiny-seeds.csv")
    groups = {"t-rope-s*", "t-alibi-s*", "t-rope-s*+yarn"}
    assert (
        set(seeds["group"]) == groups | {"3-gram (no positions)"}
        and (seeds[seeds["group"].isin(groups)]["seeds"] == 2).all()
    )
    assert (seeds["ci_low"] <= seeds["mean"]).all() and (seeds["mean"] <= seeds["ci_high"]).all()
    assert (
        "Beside Press et al. (2022)" in (published := (results / "tiny-published.md").read_text())
        and published.index("Beside Press") < published.index("extrapolation claims")  # both [[compare]], in order
        and "no run in this table): fox, stick-breaking." in published
        and (results / "tiny-seeds.png").exists()
    )
    report = (results / "REPORT.md").read_text()
    assert (
        "tiny-seeds" not in report.split("## ")[0]
        and "mean over seeds, with its 95% interval" in report
        and "Beside Press" in report
    )

    weights = results / "runs" / "t-alibi-s0" / "model.safetensors"
    written = weights.stat().st_mtime_ns
    config_path = results / "runs" / "t-rope-s1" / "config.json"
    config = json.loads(config_path.read_text())
    config_path.write_text(json.dumps({**config, "status": "interrupted"}))  # as a Ctrl-C leaves it
    again = poscli("run", str(recipe), "--results", str(results), "--dry-run")
    # the resumed run's rows in the table are from before: it is evaluated again, the others are not
    assert "2 steps to do, 5 already done" in again.stderr and "poscli train --resume t-rope-s1" in again.stderr
    assert "1 of 6 runs still to evaluate" in again.stderr
    second = poscli("run", str(recipe), "--results", str(results))
    assert second.returncode == 0, second.stderr
    assert "started train-t-rope-s1" in second.stderr and "started train-t-alibi" not in second.stderr
    assert "started eval-tiny" in second.stderr
    assert json.loads(config_path.read_text())["status"] == "finished"
    assert weights.stat().st_mtime_ns == written, "a finished run is not retrained"

    # a run removed and trained again (a changed recipe: the old one is refused, so it was removed) is
    # evaluated again, though the table still holds rows of the old run under its name
    shutil.rmtree(results / "runs" / "t-alibi-s1")
    plan = poscli("run", str(recipe), "--results", str(results), "--dry-run")
    assert "2 steps to do, 5 already done" in plan.stderr and "1 of 6 runs still to evaluate" in plan.stderr

    changed = write(tmp_path_factory.mktemp("changed"), TINY.format(corpus=corpus).replace("steps = 4", "steps = 5"))
    refused = poscli("run", str(changed), "--results", str(results))
    assert refused.returncode == 2 and "exists with steps = 4 but the recipe asks for 5" in refused.stderr


def summary_from(
    per_group: dict[str, dict[int, list[float]]],
    pe_of: dict[str, str],
    train_length: int,
    spread: float = 0.0,
    min_runs: int = 2,
):
    """A seed summary from given perplexities: each run scores 16 spans of 100 tokens, span s with
    loss log(value) * 100 * (1 + spread * (s - 7.5) / 7.5), so ``spread`` 0 leaves only the seeds' variation."""
    rows, spans, groups = [], [], {}
    for group, by_length in per_group.items():
        for length, values in by_length.items():
            for seed, value in enumerate(values):
                run = group.replace("*", str(seed)) if "*" in group else f"{group}-s{seed}"
                groups[run] = group
                key = {"run": run, "corpus": "c", "protocol": "stream", "mode": "nonoverlapping", "length": length}
                rows.append(
                    {
                        **key,
                        "pe": pe_of[group],
                        "train_length": train_length,
                        "ppl": value,
                        "spans": 16,
                        "documents": 9,
                        "tokens": 1600,
                        "eval_set": "e",
                        "note": "",
                    }
                )
                if not math.isnan(value):
                    spans += [
                        {
                            **key,
                            "span": s,
                            "unit": s,
                            "loss": math.log(value) * 100 * (1 + spread * (s - 7.5) / 7.5),
                            "tokens": 100,
                        }
                        for s in range(16)
                    ]
    return seed_summary(pd.DataFrame(rows), pd.DataFrame(spans), groups, min_runs=min_runs), groups


def test_the_summary_over_seeds_is_the_mean_sd_and_range_of_each_group():
    values = {
        "a": {128: [4.0, 5.0, 6.0], 512: [4.0, float("nan"), 8.0]},
        "b": {128: [3.0, 3.5, 4.0], 512: [9.0, 9.0, 9.0]},
    }
    summary, _ = summary_from(values, {"a": "alibi", "b": "rope"}, 128)
    row = summary[(summary["group"] == "a") & (summary["length"] == 128)].iloc[0]
    assert (
        row["mean"] == 5.0
        and row["sd"] == pytest.approx(np.std([4, 5, 6], ddof=1))
        and (row["min"], row["max"]) == (4.0, 6.0)
    )
    assert 4.0 <= row["ci_low"] < 5.0 < row["ci_high"] <= 6.0  # the seeds' variation, within their range
    missing = summary[(summary["group"] == "a") & (summary["length"] == 512)].iloc[0]
    assert missing["seeds"] == 2 and missing["mean"] == 6.0  # an n/a seed is left out, and counted out
    flat = summary[(summary["group"] == "b") & (summary["length"] == 512)].iloc[0]
    assert flat["ci_low"] == pytest.approx(9.0) and flat["ci_high"] == pytest.approx(9.0)
    assert flat["ratio"] == pytest.approx(9.0 / 3.5) and flat["ratio_low"] < flat["ratio"] < flat["ratio_high"]
    assert summary_from({"a": {128: [4.0]}}, {"a": "alibi"}, 128)[0] is None  # one seed: nothing to summarise


def test_the_sample_adds_to_the_seeds_in_the_interval():
    values = {"a": {128: [5.0, 5.0, 5.0]}, "b": {128: [5.0, 5.0]}}
    quiet, _ = summary_from(values, {"a": "alibi", "b": "rope"}, 128)
    noisy, _ = summary_from(values, {"a": "alibi", "b": "rope"}, 128, spread=0.5)
    width = lambda summary: (summary["ci_high"] - summary["ci_low"]).iloc[0]
    assert width(quiet) < 1e-9 < width(noisy)


def test_extrapolation_classes_put_the_paper_where_the_brief_says():
    """The brief: ALiBi keeps its perplexity, T5 degrades gracefully, sinusoidal and RoPE blow up.
    Press et al.'s own ratios (longest lengths) must land in those classes."""
    assert extrapolation_class(18.31 / 19.73) == "keeps"
    assert extrapolation_class(22.91 / 19.65) == "degrades gracefully"
    assert extrapolation_class(79.25 / 20.07) == "blows up" and extrapolation_class(406.01 / 20.05) == "blows up"
    assert extrapolation_class(float("nan")) == "n/a"


def five(value: float, wobble: float = 0.01) -> list[float]:
    """Five seeds around ``value``, the same small pattern for every group (so pairs are consistent)."""
    return [value * (1 + wobble * k) for k in (0, 1, -1, 2, -2)]


def test_press2022_claims_a_class_where_intervals_and_an_order_where_paired_tests_decide():
    paper_like = {
        "alibi": {128: five(5.0), 512: five(4.9), 2048: five(4.9)},
        "t5": {128: five(5.0), 512: five(5.5), 2048: five(6.0)},
        "rope": {128: five(4.8), 512: five(9.0), 2048: five(20.0)},
        "sinusoidal": {128: five(5.5), 512: five(30.0), 2048: five(1.0)},
    }  # sinusoidal made to fail
    meta = {pe: {"pe": pe} for pe in paper_like}
    summary, groups = summary_from(paper_like, {pe: pe for pe in paper_like}, 128)
    text = press2022(summary, meta)
    lines = {line.split(":")[0]: line for line in text.splitlines() if line.startswith("- ")}
    assert (
        "at 4x poscli 0.98x [" in lines["- ALiBi"]
        and "paper 0.93x keeps (at 4.9x, the nearest): agrees" in lines["- ALiBi"]
    )
    assert (
        "at 16x poscli 1.20x" in lines["- T5 bias"]
        and "paper 1.17x degrades gracefully (at 6.9x, the nearest)" in lines["- T5 bias"]
    )
    assert "paper 3.95x blows up (at 30.3x, the nearest): agrees" in lines["- Rotary"]  # 16x: nearer 30x than 6.9x
    assert "keeps, paper 20.25x blows up (at 30.3x, the nearest): differs" in lines["- Sinusoidal"]
    assert "poscli at 512 (4x): ALiBi < T5 bias < Rotary < Sinusoidal: **same order**" in text
    assert (
        "poscli at 2048 (16x): Sinusoidal < ALiBi < T5 bias < Rotary: **a reversal of the paper's order**: Sinusoidal "
        "below ALiBi" in text
    )
    assert "Holm's correction across these 12 tests" in text  # 6 pairs x 2 lengths, no nulls
    assert "two different models by Welch's t-test" in text  # encodings are never paired by seed index


def test_press2022_ties_what_the_seeds_or_the_minimum_effect_do_not_separate():
    # alibi and t5 disagree in sign from seed to seed; rope is 0.5% above sinusoidal in every seed
    tied = {
        "alibi": {128: five(5.0), 512: [5.3, 5.8, 5.4, 5.9, 5.5]},
        "t5": {128: five(5.0), 512: [5.8, 5.3, 5.9, 5.4, 5.6]},
        "rope": {128: five(5.0), 512: five(8.04)},
        "sinusoidal": {128: five(5.0), 512: five(8.0)},
    }
    summary, _ = summary_from(tied, {pe: pe for pe in tied}, 128)
    text = press2022(summary, {pe: {"pe": pe} for pe in tied})
    assert "ALiBi ≈ T5 bias" in text and "Sinusoidal ≈ Rotary" in text
    assert "ALiBi < " not in text.split("poscli at 512")[1].split("T5 bias")[0]


def null_summary_from(per_group, null_per_group, pe_of, train_length):
    """A seed summary whose attrs carry the truncation null's, as ``write_summaries`` makes them."""
    summary, groups = summary_from(per_group, pe_of, train_length)
    null, _ = summary_from(null_per_group, pe_of, train_length, min_runs=1)
    null.attrs["run_losses"] = {key: value for key, value in null.attrs["run_losses"].items() if key[1] > train_length}
    summary.attrs["null"] = [null]
    return summary, groups


def test_keeps_and_uses_the_longer_context_are_decided_against_the_truncation_null():
    values = {
        "alibi": {128: five(5.0), 1024: five(4.6)},
        "t5": {128: five(5.0), 1024: five(5.0)},
        "rope": {128: five(5.0), 1024: five(9.0)},
    }
    nulls = {
        "alibi": {128: five(5.0), 1024: five(4.9)},
        "t5": {128: five(5.0), 1024: five(5.01)},
        "rope": {128: five(5.0), 1024: five(5.0)},
    }
    summary, _ = null_summary_from(values, nulls, {pe: pe for pe in values}, 128)
    text = press2022(summary, {pe: {"pe": pe} for pe in values})
    assert "- alibi: 8x: 0.939" in text and "uses the longer context" in text.split("- alibi: 8x")[1].split("\n")[0]
    assert "keeps" in text.split("- t5: 8x")[1].split("\n")[0]
    assert "loses to its own context cut" in text.split("- rope: 8x")[1].split("\n")[0]


def test_a_spread_that_the_test_cannot_decide_is_undecided_not_keeps():
    """Five times worse than its null on average but spread over seeds (one seed at 4x, two at the
    null's level): no corrected difference, and far from shown no worse, so not "keeps"."""
    values = {"rope": {128: five(5.0), 1024: [9.0, 5.1, 20.0, 4.6, 4.8]}, "alibi": {128: five(5.0), 1024: five(5.0)}}
    nulls = {"rope": {128: five(5.0), 1024: five(5.0)}, "alibi": {128: five(5.0), 1024: [4.99, 5.04, 4.95, 5.09, 4.9]}}
    summary, _ = null_summary_from(values, nulls, {pe: pe for pe in values}, 128)
    text = press2022(summary, {pe: {"pe": pe} for pe in values})
    rope_line = text.split("- rope: 8x")[1].split("\n")[0]
    assert "Holm p" in rope_line and "undecided" in rope_line and "keeps" not in rope_line
    assert "keeps" in text.split("- alibi: 8x")[1].split("\n")[0]  # within 1% in every seed: shown no worse


def test_a_verdict_is_settled_only_where_the_last_two_budgets_agree():
    # perplexity at 128 and at 16x: rope keeps (1.05x), degrades (1.6x), blows up (2.5x) as it trains; alibi keeps
    # throughout
    values = {
        "rope@100": {128: five(6.0), 2048: five(6.3)},
        "rope@200": {128: five(5.5), 2048: five(8.8)},
        "rope": {128: five(5.0), 2048: five(12.5)},
        "alibi@100": {128: five(6.0), 2048: five(6.0)},
        "alibi@200": {128: five(5.5), 2048: five(5.55)},
        "alibi": {128: five(5.0), 2048: five(5.0)},
        "learned@100": {128: five(6.0), 2048: [float("nan")] * 5},  # no representation past its 128 rows
        "learned": {128: five(5.0), 2048: [float("nan")] * 5},
    }
    pe_of = {group: group.split("@")[0] for group in values}
    summary, _ = summary_from(values, pe_of, 128)
    meta = {
        group: {"pe": pe_of[group], **({"budget_steps": int(group.split("@")[1])} if "@" in group else {})}
        for group in values
    }
    text = press2022(summary, meta)
    assert "- rope at 16x:" in text and "**still moving**" in text.split("- rope at 16x:")[1].split("\n")[0]
    rope = text.split("- rope at 16x:")[1].split("\n")[0]
    assert rope.index("keeps") < rope.index("degrades gracefully") < rope.index("blows up"), "budgets smallest first"
    assert "**settled**" in text.split("- alibi at 16x:")[1].split("\n")[0]
    assert "- learned at 16x: n/a at every budget." in text


def test_peng2023_names_a_best_method_only_where_a_paired_corrected_test_decides():
    values = {
        "x+pi": {1024: five(6.0)},
        "x+yarn": {1024: five(5.0)},
        "x+ntk": {1024: five(7.0)},
        "x": {1024: five(40.0)},
    }
    summary, _ = summary_from(values, {g: "rope" for g in values}, 128)
    meta = {f"x+{m}": {"method": m, "target": "1k", "steps": 400} for m in ("pi", "yarn", "ntk")}
    meta["x"] = {"pe": "rope"}
    text = peng2023(summary, meta)
    assert "target 1k, 400 fine-tuning steps, at 1024: yarn < pi < ntk" in text
    assert "YaRN is best, as in the paper" in text and "unextended base x: 1024: 40." in text
    close = {**values, "x+pi": {1024: [4.9, 5.2, 4.95, 5.15, 5.0]}}  # below YaRN in some seeds, above in others
    summary, _ = summary_from(close, {g: "rope" for g in close}, 128)
    assert "YaRN is tied for best with pi: the data do not decide" in peng2023(summary, meta)
    tiny = {**values, "x+pi": {1024: five(5.02)}}  # lower in every seed, but by 0.4%: under the minimum effect
    summary, _ = summary_from(tiny, {g: "rope" for g in tiny}, 128)
    assert "YaRN is tied for best with pi" in peng2023(summary, meta)
    # overlapping unpaired intervals, but 3% lower in every seed on the same spans: the paired test decides
    shifted = {**values, "x+yarn": {1024: [5.0, 5.6, 4.6, 6.0, 5.3]}, "x+pi": {1024: [5.15, 5.77, 4.74, 6.18, 5.46]}}
    summary, _ = summary_from(shifted, {g: "rope" for g in shifted}, 128)
    assert (
        summary[summary["group"] == "x+pi"]["ci_low"].iloc[0] < summary[summary["group"] == "x+yarn"]["ci_high"].iloc[0]
    )
    assert "at 1024: yarn < pi" in peng2023(summary, meta) and "YaRN is best, as in the paper" in peng2023(
        summary, meta
    )
    worse = {**values, "x+yarn": {1024: five(9.0)}}
    summary, _ = summary_from(worse, {g: "rope" for g in worse}, 128)
    assert "pi is best and YaRN lies above it: **differs from the paper**" in peng2023(summary, meta)
    alone = {"x+yarn": {1024: five(5.0)}, "x+logn": {1024: five(9.0)}, "x": {1024: five(40.0)}}  # no other of Peng's
    summary, _ = summary_from(alone, {g: "rope" for g in alone}, 128)
    meta_alone = {f"x+{m}": {"method": m, "target": "1k", "steps": 0} for m in ("yarn", "logn")} | {"x": meta["x"]}
    text = peng2023(summary, meta_alone)
    assert "yarn < logn" in text and "YaRN is" not in text and "Peng et al. compare" not in text


def test_a_fine_tuned_method_is_measured_over_the_continued_training_control():
    values = {"x+yarn": {1024: five(5.0)}, "x+pi": {1024: five(5.95)}, "x+continue": {1024: five(6.0)}}
    summary, _ = summary_from(values, {g: "rope" for g in values}, 128)
    meta = {
        "x+yarn": {"method": "yarn", "target": "1k", "steps": 100},
        "x+pi": {"method": "pi", "target": "1k", "steps": 100},
        "x+continue": {"method": "continue", "target": "1k", "steps": 100, "finetune_length": 512},
    }
    text = peng2023(summary, meta)
    line = next(row for row in text.splitlines() if "over the control (continue@512" in row)
    assert "yarn 0.833" in line and "yarn 0.833" in line.split(";")[0] and line.split(";")[0].strip().endswith("<")
    assert "pi 0.992" in line and line.rstrip(".").endswith("≈"), (
        "0.8% better in every seed: under the minimum effect, tied"
    )


def test_beyond_yarn_ranks_every_method_and_checks_the_newer_claims_by_their_intervals():
    """A claim that perplexity stays flat holds where the whole ratio interval is <= 1.10, fails
    where all of it is above, and is undecided otherwise; PoSE is named apart from plain YaRN."""
    from poscli.study.published import beyond_yarn

    values = {
        "x+self-extend": {128: [5.0, 5.1, 5.2], 8192: [5.1, 5.2, 5.3]},  # ratio ~1.02: holds
        "x+rerope": {128: [5.0, 5.1, 5.2], 8192: [9.0, 9.2, 9.4]},  # ratio ~1.8: fails
        "x+yarn": {128: [5.0, 5.1, 5.2], 8192: [7.0, 7.1, 7.2]},
        "x+yarn-pose": {128: [5.0, 5.1, 5.2], 8192: [5.0, 5.6, 6.2]},
    }  # ratio interval across 1.10: undecided
    summary, _ = summary_from(values, {g: "rope" for g in values}, 128)
    meta = {
        "x+self-extend": {"method": "self-extend", "target": "8k"},
        "x+rerope": {"method": "rerope", "target": "8k"},
        "x+yarn": {"method": "yarn", "target": "8k", "steps": 0},
        "x+yarn-pose": {"method": "yarn", "target": "8k", "steps": 400, "pose": True},
    }
    text = beyond_yarn(summary, meta)
    assert "target 8k, no fine-tuning, at 8192: self-extend < yarn < rerope" in text
    assert "target 8k, 400 fine-tuning steps, at 8192: yarn + PoSE" in text
    claims = {line[2:].split(" (")[0]: line for line in text.splitlines() if "Published:" in line}
    assert claims["self-extend"].endswith("Here: holds.") and claims["rerope"].endswith("Here: **does not hold**.")
    assert "undecided" in claims["yarn + PoSE"] and "yarn" not in claims  # YaRN itself makes no flatness claim here


def test_a_tuned_method_is_ranked_beside_its_defaults_never_in_their_place():
    """``options_from = "tune"`` makes a second group of the same method at the same target: both are
    ranked, each under its own name, and Peng et al.'s verdict reads YaRN at its defaults (here the
    worse of the two), while the tuned group is held to its method's claim."""
    from poscli.study.published import beyond_yarn

    values = {
        "x+yarn": {128: five(5.0), 1024: five(9.0)},
        "x+yarn-tuned": {128: five(5.0), 1024: five(5.0)},
        "x+pi": {1024: five(7.0), 128: five(5.0)},
        "x+self-extend": {128: five(5.0), 1024: five(8.0)},
        "x+self-extend-tuned": {128: five(5.0), 1024: five(5.1)},
    }
    summary, _ = summary_from(values, {g: "rope" for g in values}, 128)
    meta = {
        "x+yarn": {"method": "yarn", "target": "1k", "steps": 0},
        "x+yarn-tuned": {"method": "yarn", "target": "1k", "steps": 0, "options_from": "tune"},
        "x+pi": {"method": "pi", "target": "1k", "steps": 0},
        "x+self-extend": {"method": "self-extend", "target": "1k"},
        "x+self-extend-tuned": {"method": "self-extend", "target": "1k", "options_from": "tune"},
    }
    peng = peng2023(summary, meta)
    assert "yarn tuned 5.000" in peng and "yarn 9.000" in peng and "self-extend 8.000" in peng
    assert "pi is best and YaRN lies above it: **differs from the paper**" in peng
    claims = {line[2:].split(" (")[0]: line for line in beyond_yarn(summary, meta).splitlines() if "Published:" in line}
    assert claims["self-extend"].endswith("**does not hold**.") and claims["self-extend tuned"].endswith("holds.")


def test_the_length_generalization_recipe_plans_the_studies_issues_32_and_33_name():
    from poscli.evaluation import tasks
    from poscli.evaluation.algorithmic import AlgorithmicTask, parse_sizes

    recipe = load_recipe(REPO / "recipes" / "length-generalization.toml")
    plain = {(s.options["task"], s.options["pe"], s.options["seed"]) for s in recipe.train if "random" not in s.name}
    randomized = [s for s in recipe.train if "random" in s.name]
    studied = {"copy", "reverse", "duplicate", "addition-reversed", "associative-recall"}  # duplicate: Ruoss et al.'s
    pes = {"none", "learned", "sinusoidal", "rope", "alibi", "t5", "fire", "kerple"}
    strings, copes = ("copy", "reverse", "duplicate"), ("selective-copy", "counting", "flip-flop")  # CoPE's tasks
    recent = {"fox", "cope", "stick-breaking", "pope", "dpb", "scaled-sinusoidal"}
    seeds = (0, 1, 2)
    assert plain == (
        {(t, pe, seed) for t in studied for pe in pes for seed in seeds}
        | {(t, pe, seed) for t in strings for pe in recent for seed in seeds}
        | {(t, pe, seed) for t in copes for pe in recent | {"none", "rope", "alibi"} for seed in seeds}
        | {(t, "hybrid", seed) for t in (*strings, *copes) for seed in seeds}
    )
    for step in recipe.train:  # RNoPE-SWA: the local RoPE layers see less than the instances they train on
        if step.options["pe"] == "hybrid":
            assert step.options["pe_option"] == "layers=rope@8;rope@8;none" and step.options["train_length"] > 8
    assert {(s.options["task"], s.options["pe"], s.options["seed"]) for s in randomized} == {
        (t, "rope", seed) for t in studied for seed in seeds
    }
    assert all(s.options["random_positions"] >= 4 * s.options["train_length"] for s in randomized)
    assert all(isinstance(tasks.get(t), AlgorithmicTask) for t in studied | set(copes))
    largest = {s.options["task"]: max(parse_sizes(s.options["sizes"])) for s in recipe.train}
    for step in recipe.evals:  # each task tested to 4x its largest training size, every run of the task
        task = step.options["task"]
        assert max(parse_sizes(step.options["sizes"])) == 4 * largest[task]
        assert set(step.runs) == {s.name for s in recipe.train if s.options["task"] == task}
    assert recipe.compare == [
        {"table": "length-generalization", "published": "kazemnejad2023"},
        {"table": "length-generalization", "published": "recent-tasks"},
    ]


def test_a_recipes_table_held_by_another_task_is_refused_before_anything_trains(tmp_path):
    path = write(tmp_path, GOOD)
    results = tmp_path / "results"
    results.mkdir()
    passkey = {"run": "m-rope-s0", "length": 32, "depth": 50, "keys": 1, "accuracy": 1.0, "digit_accuracy": 1.0}
    pd.DataFrame([passkey]).to_csv(results / "mini.csv", index=False)  # a passkey table where perplexity goes
    before = (results / "mini.csv").read_bytes()
    with pytest.raises(RecipeError, match="mini.csv holds another task's table, not the perplexity task's"):
        check_state(load_recipe(path), results)
    done = poscli("run", str(path), "--results", str(results))  # the whole command: nothing trains or is written
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert "holds another task's table" in done.stderr and "give the [[eval]] another table" in done.stderr
    assert sorted(p.name for p in results.iterdir()) == ["mini.csv"] and (results / "mini.csv").read_bytes() == before


def test_a_run_two_shipped_recipes_name_is_the_same_run_in_both_and_a_table_is_one_recipes():
    """Recipes share a run only as one model (a base trained once, extended by two studies): the same
    command in both. Two recipes training different runs under one name would mix two models in
    the tables and overwrite each other's logs when a study is brought in (tools/bring_study.py)."""
    commands: dict[str, dict[str, list[str]]] = {}
    writers: dict[str, set[str]] = {}  # table -> the recipes that write it
    for path in sorted((REPO / "recipes").glob("*.toml")):
        recipe = load_recipe(path)
        for step in [*recipe.select, *recipe.train, *recipe.extend]:
            commands.setdefault(step.name, {})[path.name] = step.argv
        for step in recipe.evals:
            writers.setdefault(step.name, set()).add(path.name)
    assert all(len(recipes) == 1 for recipes in writers.values()), writers  # a table is one recipe's
    shared = {name: by_recipe for name, by_recipe in commands.items() if len(by_recipe) > 1}
    assert shared  # the extension studies do share their bases
    for name, by_recipe in shared.items():
        assert len({tuple(argv) for argv in by_recipe.values()}) == 1, (name, by_recipe)


def test_the_shipped_recipes_parse_and_plan_the_studies_the_issue_names():
    tstl = load_recipe(REPO / "recipes" / "train-short-test-long.toml")
    from poscli import encodings

    trained = {s.options["pe"] for s in tstl.train if s.name.startswith("tstl-")}
    assert trained == set(encodings.builtin_names())  # every registered encoding
    assert {s.options["seed"] for s in tstl.train if s.name.startswith("tstl-")} == {0, 1, 2}
    lengths = tstl.evals[0].options["lengths"].split(",")
    assert lengths[0] == "128" and lengths[-1] == "8k"  # from the train length to 64x it
    rope = load_recipe(REPO / "recipes" / "extend-rope.toml")
    methods = {
        (s.options["method"], str(s.options["target"]), s.options.get("steps", 0), s.options.get("pose", False))
        for s in rope.extend
    }
    every = ("pi", "ntk", "dynamic-ntk", "yarn", "llama3", "base")
    newer = ("ntk-by-parts", "longrope")
    remapped = ("self-extend", "rerope", "leaky-rerope", "sinks")
    assert methods == (
        {(m, "1k", n, False) for m in every + newer for n in (0, 400)}
        | {(m, "4k", 0, False) for m in every}
        | {(m, t, 0, False) for m in remapped for t in ("1k", "8k", "32k")}
        | {("yarn", t, 400, True) for t in ("1k", "8k")}
        | {(m, "8k", 0, False) for m in every + newer}
        | {(m, "32k", 0, False) for m in every + ("ntk-by-parts",)}
    )
    assert len(rope.extend) == 3 * len(methods) and len(rope.train) == 3
    assert all(s.options.get("factors") == "search" for s in rope.extend if s.options["method"] == "longrope")
    # passkey: a retrieving RoPE model (3 seeds) extended by every method to 4x and 8x, with and without
    # fine-tuning at the target; >= 50 prompts per cell; five encodings at 1x-16x
    retrieval, extension, across = (
        load_recipe(REPO / "recipes" / f"passkey-{n}.toml") for n in ("retrieval", "extension", "encodings")
    )
    assert {
        (
            s.options["method"],
            str(s.options["target"]),
            str(s.options.get("finetune_length")),
            s.options.get("steps", 0),
            s.options.get("pose", False),
        )
        for s in extension.extend
    } == (
        {(m, t, t, n, False) for m in every + newer for t in ("1k", "2k") for n in (0, 100)}
        | {("yarn", t, "None", 100, True) for t in ("1k", "2k")}
        | {(m, t, "None", 0, False) for m in remapped for t in ("1k", "2k")}
    )
    assert {s.options["seed"] for s in extension.train} == {0, 1, 2} and len(extension.extend) == 3 * (24 + 8 + 2 + 8)
    assert {s.options["pe"] for s in across.train} >= {"rope", "alibi", "t5", "kerple", "fire"}
    recipes = (tstl, rope, retrieval, extension, across)
    for step in [e for r in recipes for e in r.evals]:
        longest = max(parse_lengths(step.options["lengths"]))
        if step.options.get("task", "perplexity") == "perplexity":  # at least 16 spans of its longest length
            spans = (
                4 if step.name == "extend-rope-256x" else 16
            )  # 32k windows on 2 cores: 4 spans x 3 seeds, said in the recipe
            assert parse_length(str(step.options.get("max_tokens", 131072)), "max_tokens") >= spans * longest, step.name
        else:
            assert int(step.options["trials"]) >= 50, step.name
    assert not any(
        s.options.get("task") == "passkey" for s in [*tstl.evals, *rope.evals]
    )  # passkey has its own studies
    shared = {}  # a run named in several recipes is the same run in each, so one recipe finds it done for the next
    for step in [t for r in recipes for t in r.train]:
        assert shared.setdefault(step.name, step.options) == step.options, step.name
    assert sum(step.name == "pk256-rope-s0" for r in recipes for step in r.train) == 3


@pytest.mark.slow
def test_ctrl_c_stops_the_recipe_with_checkpoints_and_the_next_run_resumes(tmp_path_factory):
    """SIGINT to `poscli run` (not its children) is passed on: the running training saves its
    checkpoint, the recipe exits 130 naming the command to continue, and the plan then resumes it."""
    import contextlib
    import signal
    import time

    from tests.conftest import cli_workspace

    corpus, results = cli_workspace(tmp_path_factory, "recipe-interrupt")
    text = (
        TINY.format(corpus=corpus)
        .replace("steps = 4", "steps = 100000")
        .replace('pe = ["rope", "alibi"]\nseed = [0, 1]', 'pe = "rope"\nseed = 0')
    )
    recipe = write(tmp_path_factory.mktemp("long"), text)
    # Its own session (so nothing outlives the test) and SIGINT at its default even where this
    # test runs as a background job, which starts with SIGINT ignored (as a shell's `cmd &` does).
    process = subprocess.Popen(
        [sys.executable, "-m", "poscli", "run", str(recipe), "--results", str(results)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        metrics = results / "runs" / "t-rope-s0" / "metrics.jsonl"
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not (metrics.exists() and len(metrics.read_text().splitlines()) >= 3):
            time.sleep(0.2)
        process.send_signal(signal.SIGINT)
        _, stderr = process.communicate(timeout=120)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)  # the recipe and its training, if anything is left
    assert process.returncode == 130, stderr
    assert "interrupted during the train phase" in stderr and f"poscli run {recipe}" in stderr
    config = json.loads((results / "runs" / "t-rope-s0" / "config.json").read_text())
    assert config["status"] == "interrupted" and config["steps_done"] >= 30
    plan = poscli("run", str(recipe), "--results", str(results), "--dry-run")
    assert (
        "poscli train --resume t-rope-s0" in plan.stderr
        and f"interrupted at step {config['steps_done']}" in plan.stderr
    )


def test_the_extension_tables_hold_exactly_the_bases_and_their_own_targets():
    rope = load_recipe(REPO / "recipes" / "extend-rope.toml")
    bases = {"xr-rope-s0", "xr-rope-s1", "xr-rope-s2"}
    sizes = {
        "8x": ("1k", 3 * 21),
        "32x": ("4k", 18),
        "64x": ("8k", 3 * 13),
        "256x": ("32k", 3 * 11),
    }  # methods x 3 seeds
    for step in rope.evals:
        target, count = sizes[step.name.rsplit("-", 1)[1]]
        extensions = {name for name in step.runs if name not in bases}
        assert extensions and all(f"-{target}-" in name for name in extensions), step.name
        assert set(step.runs) - extensions == bases and len(extensions) == count, step.name


def test_each_gives_every_step_of_a_run_its_own_log_with_two_evaluations_of_one_table(tmp_path):
    """tstl-stdlib evaluates the runs, then their snapshots, into one table by two [[eval]]: under
    --each both come after the run, and the second must not overwrite the first's log."""
    from poscli.study import recipes
    from poscli.study import runner as recipe_runner

    text = BUDGETS.format(corpus=tmp_path).replace("budgets = true", "budgets = false") + (
        '\n[[eval]]\nruns = ["b-*"]\nbudgets = "only"\ntable = "budgets"\nlengths = "32,128"\n'
    )
    recipe = recipes.load_recipe(write(tmp_path, text))
    run = next(s for s in recipe.steps if s.kind == "train")
    names = [name for name, _ in recipe_runner._each_steps(recipe, run, [])]
    assert names == [f"train-{run.name}", f"eval-budgets-{run.name}", f"eval-budgets-{run.name}-2"]


BUDGETS = """
name = "budgets"

[gates]             # 8-step models learn nothing: let every run through, to test the pipeline
three_gram = 99

[defaults]
train_length = 32
steps = 8
batch_size = 4
layers = 1
width = 32
heads = 4
warmup = 2
data = "{corpus}"
snapshots = "0.5"

[[train]]
name = "b-{{pe}}-s{{seed}}"
pe = "rope"
seed = [0, 1]

[[extend]]
runs = "b-rope-s*"
name = "{{run}}+{{method}}"
method = "continue"
target = 64
steps = 2

[[eval]]
runs = ["b-*"]
budgets = true
table = "budgets"
lengths = "32,128"
max_tokens = "512"
null = true

[[compare]]
table = "budgets"
published = "press2022"
"""


@pytest.mark.slow
def test_each_run_and_its_snapshots_are_evaluated_as_trained_and_count_as_done_without_their_weights(tmp_path_factory):
    from tests.conftest import cli_workspace

    corpus, results = cli_workspace(tmp_path_factory, "budget-recipe")
    recipe = write(tmp_path_factory.mktemp("budget-recipe"), BUDGETS.format(corpus=corpus))
    plan = load_recipe(recipe)
    assert sorted(plan.evals[0].runs) == [
        "b-rope-s0",
        "b-rope-s0+continue",
        "b-rope-s0@4",
        "b-rope-s1",
        "b-rope-s1+continue",
        "b-rope-s1@4",
    ]
    check_state(plan, results, each=True)  # nothing trained yet: no old rows to replace
    assert not any("made again" in step.detail for step in plan.extend), [step.detail for step in plan.extend]
    done = poscli("run", str(recipe), "--results", str(results), "--each")
    assert done.returncode == 0, done.stderr
    log = done.stderr
    # each run is evaluated right after it is trained, before the next one starts
    assert (
        log.index("started train-b-rope-s0")
        < log.index("started eval-budgets-b-rope-s0")
        < log.index("started extend-b-rope-s0+continue")
        < log.index("started eval-budgets-b-rope-s0+continue")
        < log.index("started train-b-rope-s1")
    ), "a base and all made from it, in one go"
    table = pd.read_csv(results / "budgets.csv")
    assert {"b-rope-s0@4", "b-rope-s1@4", "b-rope-s0", "b-rope-s1"} <= set(table["run"])
    nulls = table[table["mode"] == "truncated-32"]
    assert set(nulls["run"]) == {f"b-rope-s{seed}{suffix}" for seed in (0, 1) for suffix in ("", "@4", "+continue")}
    assert set(nulls["length"]) == {128}
    seen = table.drop_duplicates("run").set_index("run")["tokens_seen"]
    assert seen["b-rope-s0@4"] == 4 * 4 * 32 and seen["b-rope-s0"] == 8 * 4 * 32
    published = (results / "budgets-published.md").read_text()
    assert "Verdicts against the training budget" in published and "Against the truncation null" in published
    assert "Benjamini-Hochberg over the" in published and "## Exploratory screen" in published
    assert (results / "budgets-budgets.png").exists()

    shutil.rmtree(results / "runs")  # a fresh clone: the tables, not the weights
    again = poscli("run", str(recipe), "--results", str(results), "--dry-run", "--each")
    assert again.returncode == 0 and "0 steps to do" in again.stderr, again.stderr
    assert "every table has its rows" in again.stderr
    summaries = {name: (results / name).read_text() for name in ("budgets-seeds.csv", "budgets-published.md")}
    part = poscli("run", str(recipe), "--results", str(results), "--each", "--runs", "b-rope-s0")
    assert part.returncode == 0 and "1 of its 2 runs" in part.stderr and "0 steps to do" in part.stderr, part.stderr
    for name, text in summaries.items():  # the whole study's summaries, not its part's
        assert (results / name).read_text() == text, name
    plain = poscli(
        "run", str(recipe), "--results", str(results), "--dry-run"
    )  # without --each a missing run is trained again
    assert plain.returncode == 0 and "5 steps to do" in plain.stderr  # 2 runs, 2 extensions, the table's missing runs
    # a base whose rows are incomplete is trained again, and what was made from its old weights is made again
    table[table["run"] != "b-rope-s1@4"].to_csv(results / "budgets.csv", index=False)
    again = poscli("run", str(recipe), "--results", str(results), "--dry-run", "--each")
    assert again.returncode == 0 and "3 steps to do" in again.stderr, again.stderr  # s1, s1+continue, the table
    assert "to do   extend b-rope-s1+continue" in again.stderr and "its base b-rope-s1 is trained again" in again.stderr
    assert "done    extend b-rope-s0+continue" in again.stderr
    part = poscli("run", str(recipe), "--results", str(results), "--dry-run", "--each", "--runs", "b-rope-s0")
    assert part.returncode == 0 and "0 steps to do" in part.stderr and "b-rope-s1" not in part.stderr, part.stderr


def test_a_part_of_a_study_is_its_runs_what_is_made_from_them_and_their_evaluations(tmp_path):
    plan = load_recipe(write(tmp_path, BUDGETS.format(corpus="stdlib")))
    part = narrow(plan, ["b-*-s1"])
    assert [step.name for step in part.train] == ["b-rope-s1"]
    assert [step.name for step in part.extend] == ["b-rope-s1+continue"]
    assert [sorted(step.runs) for step in part.evals] == [["b-rope-s1", "b-rope-s1+continue", "b-rope-s1@4"]]
    assert [len(step.runs) for step in plan.evals] == [6], "the whole recipe is left as it was"
    assert narrow(plan, ["b-rope-s0", "b-rope-s1"]).steps == plan.steps
    with pytest.raises(RecipeError, match="--runs 'b-nope-\\*' matches none"):
        narrow(plan, ["b-nope-*"])


def test_budgets_need_runs_that_keep_snapshots(tmp_path):
    text = GOOD + '\n[[eval]]\nruns = "m-*"\ntable = "b"\nlengths = "32"\nbudgets = true\n'
    with pytest.raises(RecipeError, match="keeps snapshots"):
        load_recipe(write(tmp_path, text))


def test_every_boolean_option_a_recipe_may_set_can_be_switched_off():
    """A recipe writes `compile = false`; the runner passes --no-compile, which the command must accept."""
    import typer.main

    from poscli.cli import app as cli
    from poscli.study.recipes import EVAL_KEYS
    from poscli.training.options import EVAL_OPTIONS, EXTEND_OPTIONS, TRAIN_OPTIONS

    commands = typer.main.get_command(cli.app).commands
    assert {*EVAL_OPTIONS, "runs", "budgets"} == EVAL_KEYS
    for command, declared in (("eval", EVAL_OPTIONS), ("train", TRAIN_OPTIONS), ("extend", EXTEND_OPTIONS)):
        for param in commands[command].params:
            if param.name in declared and param.is_flag:
                switches = {*param.opts, *param.secondary_opts}
                assert "--no-" + param.name.replace("_", "-") in switches, (command, param.name)


def test_a_run_that_cannot_score_the_longer_lengths_needs_no_truncation_null_there():
    """A learned table with 128 rows is n/a at 512 and the evaluation writes no null row there: its
    rows are complete, so a recipe must not evaluate (or train) it again. Past a length it can score,
    the null is still required."""
    import pandas as pd

    from poscli.evaluation import tasks

    base = {"run": "r", "train_length": 128, "protocol": "stream", "mode": "nonoverlapping"}
    rows = pd.DataFrame([{**base, "length": 128, "ppl": 3.1}, {**base, "length": 512, "ppl": float("nan")}])
    options = {"lengths": "128,512", "null": True}
    assert tasks.get("perplexity").evaluated(rows, "r", options)
    scored = rows.assign(ppl=[3.1, 6.0])  # a model that can score 512 still needs its null there
    assert not tasks.get("perplexity").evaluated(scored, "r", options)
    with_null = pd.concat([scored, pd.DataFrame([{**base, "length": 512, "ppl": 3.0, "mode": "truncated-128"}])])
    assert tasks.get("perplexity").evaluated(with_null, "r", options)


def test_steps_run_in_this_process_or_as_jobs_give_the_same_weights_and_tables(tmp_path_factory):
    """One entry point, two ways to run it: `poscli run` calls each step in the recipe's own
    process by default, and with --jobs 2 starts each training step as a process of its own (with half the
    cores). Both read the recipe's keys as the flags are read, so with the same threads the runs
    and the table agree bit for bit."""
    import torch

    from tests.conftest import cli_workspace

    corpus, results = cli_workspace(tmp_path_factory, "recipe-modes")
    one_seed = 'pe = ["rope", "alibi"]\nseed = 0'
    text = TINY.format(corpus=corpus).replace('pe = ["rope", "alibi"]\nseed = [0, 1]', one_seed)
    recipe = write(tmp_path_factory.mktemp("modes"), text)
    folders = {jobs: results.parent / f"jobs{jobs}" for jobs in ("1", "2")}
    threads = torch.get_num_threads()
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // 2))  # what each of two --jobs processes gets
    try:
        here = poscli("run", str(recipe), "--results", str(folders["1"]))
    finally:
        torch.set_num_threads(threads)
    jobs = poscli("run", str(recipe), "--results", str(folders["2"]), "--jobs", "2")
    assert here.returncode == 0 and jobs.returncode == 0, here.stderr + jobs.stderr
    assert "started train-t-rope-s0" in jobs.stderr and (folders["2"] / "logs" / "train-t-rope-s0.log").exists()
    for run in ("t-rope-s0", "t-alibi-s0", "t-rope-s0+yarn"):
        weights = [(folders[jobs] / "runs" / run / "model.safetensors").read_bytes() for jobs in ("1", "2")]
        assert weights[0] == weights[1], run
    tables = [pd.read_csv(folders[jobs] / "tiny.csv").drop(columns=["evaluated"]) for jobs in ("1", "2")]
    pd.testing.assert_frame_equal(*tables)
    history = [json.loads(line)["command"] for line in (folders["1"] / "history.jsonl").read_text().splitlines()]
    assert history[0].startswith("poscli train --layers 1")
    assert history[0].endswith(f"--results {folders['1']} --quiet")


def test_a_dry_run_prints_each_command_as_the_shell_reads_it(tmp_path):
    """A hybrid schedule's ';' (and any other shell character) is quoted, so the line can be pasted."""
    import shlex

    plan = poscli("run", str(REPO / "recipes" / "length-generalization.toml"), "--results", str(tmp_path), "--dry-run")
    line = next(line for line in (plan.stdout + plan.stderr).splitlines() if "--name lg-copy-hybrid-s0" in line)
    argv = shlex.split(line.strip())
    assert argv[argv.index("--pe-option") + 1] == "layers=rope@8;rope@8;none" and argv[-1] == "lg-copy-hybrid-s0"


TWO_RUNS = (
    TINY.split("[[train]]")[0].replace('name = "tiny"', 'name = "jobs"')
    + """
[[train]]
name = "j-{{pe}}"
pe = ["rope", "alibi"]

[[eval]]
runs = "j-*"
table = "jobs"
lengths = "32,64"
max_tokens = "512"
"""
)


def test_steps_stopped_by_a_signal_in_their_processes_interrupt_the_recipe_not_fail_it(tmp_path, monkeypatch):
    """With --jobs N the steps run as processes; one stopped by Ctrl-C or SIGTERM (exit 130 or 143,
    its checkpoint saved) makes the recipe interrupted, with the command that continues it, even
    where this process did not get the signal itself (started in the background, SIGINT ignored);
    a step that failed otherwise is a failure."""
    from poscli.study import plan, recipes, sweep
    from poscli.study import runner as recipe_runner

    recipe = recipes.load_recipe(write(tmp_path, TINY.format(corpus=tmp_path)))
    runner = recipe_runner._Runner(recipe, tmp_path / "results", tmp_path / "logs", report=lambda line: None)
    steps = [(f"train-{step.name}", step) for step in recipe.steps if step.kind == "train"][:2]
    for codes, expected in (((0, 130), "interrupted during the train phase"), ((143, 1), "interrupted"),
                            ((0, 1), "1 train steps failed")):  # fmt: skip

        def exiting(commands, parallel, log_dir, report, module, follow=None, codes=codes):  # each step exits so
            exits = "import sys, time; time.sleep({}); sys.exit({})"
            jobs = [sweep.Job(name, [sys.executable, "-c", exits.format(0.3 * i, code)])
                    for i, ((name, _), code) in enumerate(zip(commands, codes, strict=True))]  # fmt: skip
            return sweep.run_jobs(jobs, parallel, log_dir, report)

        monkeypatch.setattr(sweep, "run_commands", exiting)
        with pytest.raises(PoscliError, match=expected) as raised:
            runner.phase(steps, 2, "train")
        assert isinstance(raised.value, plan.RecipeInterrupted) == ("interrupted" in expected)


def test_a_chain_runs_its_steps_in_turn_and_stops_at_the_first_that_fails(tmp_path, monkeypatch, capsys):
    """``--each --jobs N``: one process per run runs its training, then its evaluations, in order;
    a failed step leaves the steps after it (which need it) undone and is the chain's exit code."""
    from poscli.study import steps

    ran = []

    def step(kind, name, **_):
        ran.append(name)
        if name == "broken":
            raise PoscliError("no such corpus")

    monkeypatch.setattr(steps, "run_step", step)
    chain = [(f"s-{n}", {"kind": "train", "name": n}) for n in ("first", "broken", "after")]
    assert steps.run_chain(chain, str(tmp_path)) == PoscliError.exit_code
    assert ran == ["first", "broken"]
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "started s-first" and lines[1].startswith("finished s-first")
    assert lines[-1].startswith("FAILED s-broken") and "no such corpus" in lines[-1]
    assert "no such corpus" in (tmp_path / "s-broken.log").read_text()
    assert steps.run_chain(chain[:1], str(tmp_path)) == 0


def test_chains_are_one_process_per_run_and_a_finished_one_completes_its_steps(tmp_path, monkeypatch):
    """The pool gets one command per run (its steps in order); each step a chain logs as finished
    advances the recipe's progress as it comes, and the chain's end by the steps it did not report;
    a chain stopped by a signal interrupts the recipe."""
    from poscli.study import plan, recipes, sweep
    from poscli.study import runner as recipe_runner

    recipe = recipes.load_recipe(write(tmp_path, TINY.format(corpus=tmp_path)))
    reported = []
    runner = recipe_runner._Runner(
        recipe, tmp_path / "results", tmp_path / "logs", report=lambda *a, **k: reported.append((a, k))
    )
    trains = [s for s in recipe.steps if s.kind == "train"]
    chains = [
        (step.name, recipe_runner._each_steps(recipe, step, [s for s in recipe.steps if s.kind == "extend"]))
        for step in trains
    ]

    def pool(commands, parallel, log_dir, report, module, follow):
        assert parallel == 2 and module == "poscli.study.steps"
        assert [name for name, _ in commands] == [f"each-{recipe.name}-{step.name}" for step in trains]
        for i, ((name, argv), (_, chain)) in enumerate(zip(commands, chains, strict=True)):
            payload = json.loads(argv[0])
            assert [n for n, _ in payload["chain"]] == [n for n, _ in chain]
            if i == 0:  # the first chain logs its first step's start and end, and other output
                follow(name, f"started {chain[0][0]}")
                follow(name, "UserWarning: something a step printed")
                follow(name, f"finished {chain[0][0]} in 0.1 min")
            report(f"finished {name} in 0.1 min")
        if stopped:
            raise KeyboardInterrupt  # what run_jobs raises when a job was stopped by a signal
        return [sweep.Outcome(sweep.Job(name, [], {}), 0, 1.0, tmp_path / "log") for name, _ in commands]

    monkeypatch.setattr(sweep, "run_commands", pool)
    stopped = False
    runner.chains(chains, 2)
    lines = [a[0] for a, _ in reported]
    assert lines[:2] == [f"started {chains[0][1][0][0]}", f"finished {chains[0][1][0][0]} in 0.1 min"], lines
    ends = [k["steps"] for a, k in reported if a[0].startswith("finished each-")]
    assert ends == [len(chains[0][1]) - 1, *(len(chain) for _, chain in chains[1:])]  # the rest of each chain
    for _, chain in chains:
        assert len({name for name, _ in chain}) == len(chain), "each step of a chain has a log of its own"
    assert max(len(chain) for _, chain in chains) > 1  # a run with evaluations after it
    stopped = True
    with pytest.raises(plan.RecipeInterrupted):
        runner.chains(chains, 2)


def test_each_first_finishes_a_run_trained_before_its_evaluations_and_extensions(tmp_path):
    """A study stopped between a run's training and its evaluation: with --each the run's missing
    steps go to the pool first (they were left to the end of the recipe, a session or more away),
    and a run with nothing left gets no chain."""
    from poscli.study import recipes
    from poscli.study import runner as recipe_runner

    recipe = recipes.load_recipe(write(tmp_path, TINY.format(corpus=tmp_path)))
    trains = [s for s in recipe.steps if s.kind == "train"]
    stopped, finished = trains[0], trains[2]  # t-rope-s0 (it has an extension) and t-alibi-s0
    stopped.status = "done"
    extensions = [s for s in recipe.steps if s.kind == "extend"]

    class Pool:
        launcher = "local"

        def plan(self, steps):
            planned.append(steps)

        def chains(self, named, parallel):
            captured.extend(named)

    captured, planned = [], []
    recipe_runner._run_each(recipe, [s for s in recipe.steps if s.status != "done"], Pool(), 2)
    assert [name for name, _ in captured] == [stopped.name, *(s.name for s in trains if s is not stopped)]
    assert planned == [sum(len(chain) for _, chain in captured)]  # the progress bar counts the chains' steps
    kinds = [step.kind for _, step in captured[0][1]]
    assert kinds[0] == "eval" and "extend" in kinds and "train" not in kinds
    assert [n for n, _ in captured[0][1]] == [n for n, _ in recipe_runner._each_steps(recipe, stopped, extensions)[1:]]

    class Cluster:  # --launcher submitit: runs train as jobs, two at a time, the rest follows here
        launcher = "submitit"

        def plan(self, steps):
            pass

        def phase(self, named, parallel, phase):
            phases.append((phase, [step.kind for _, step in named]))

    phases = []
    recipe_runner._run_each(recipe, [s for s in recipe.steps if s.status != "done"], Cluster(), 2)
    assert all(phase == kind for phase, kinds in phases for kind in kinds), "a step runs under its own kind's phase"
    assert phases[0] == ("eval", ["eval"]) and ("train", ["train", "train"]) in phases  # the stopped run's first

    finished.status = "done"
    recipe.evals[0].runs = [name for name in recipe.evals[0].runs if name != finished.name]  # its rows are there
    captured.clear()
    recipe_runner._run_each(recipe, [s for s in recipe.steps if s.status != "done"], Pool(), 2)
    assert finished.name not in [name for name, _ in captured]


@pytest.mark.slow
def test_each_with_two_jobs_trains_two_runs_at_once_then_evaluates_each(tmp_path_factory):
    from tests.conftest import cli_workspace

    corpus, results = cli_workspace(tmp_path_factory, "each-jobs")
    recipe = write(tmp_path_factory.mktemp("each-jobs-recipe"), TWO_RUNS.format(corpus=corpus))
    done = poscli("run", str(recipe), "--results", str(results), "--each", "--jobs", "2")
    assert done.returncode == 0, done.stderr
    log = done.stderr
    assert max(log.index("started each-jobs-j-rope"), log.index("started each-jobs-j-alibi")) < min(
        log.index("finished each-jobs-j-rope"), log.index("finished each-jobs-j-alibi")
    ), "both runs train at once"
    for run in ("j-rope", "j-alibi"):  # each run's process trains it, then evaluates it; each step logs apart
        assert log.index(f"finished train-{run}") < log.index(f"finished each-jobs-{run}"), "each step shown as it ends"
        chain = (results / "logs" / f"each-jobs-{run}.log").read_text()  # named by the recipe, then the run
        assert chain.index(f"finished train-{run}") < chain.index(f"started eval-jobs-{run}"), chain
        assert "wrote" in (results / "logs" / f"eval-jobs-{run}.log").read_text()  # the step's own log
    assert set(pd.read_csv(results / "jobs.csv")["run"]) == {"j-rope", "j-alibi", "reference-3gram"}
    for run in ("j-rope", "j-alibi"):
        assert json.loads((results / "runs" / run / "config.json").read_text())["environment"]["threads"] == max(
            1, (os.cpu_count() or 1) // 2
        )  # the cores split between the two


@pytest.mark.slow
def test_a_two_run_recipe_as_submitit_jobs_completes_and_resumes(tmp_path_factory):
    """--launcher submitit-local: each step a job of submitit's LocalExecutor (the Slurm path's offline
    twin); the same rules: a second run resumes the interrupted run alone and re-evaluates it."""
    from tests.conftest import cli_workspace

    corpus, results = cli_workspace(tmp_path_factory, "jobs")
    recipe = write(tmp_path_factory.mktemp("jobs-recipe"), TWO_RUNS.format(corpus=corpus))
    first = poscli("run", str(recipe), "--results", str(results), "--launcher", "submitit-local", "--jobs", "2")
    assert first.returncode == 0, first.stderr
    assert "started train-j-rope (job " in first.stderr and "finished eval-jobs" in first.stderr
    assert set(pd.read_csv(results / "jobs.csv")["run"]) == {"j-rope", "j-alibi", "reference-3gram"}
    assert list((results / "logs" / "submitit").glob("*_result.pkl"))  # submitit's own files beside the logs
    config_path = results / "runs" / "j-rope" / "config.json"
    config_path.write_text(json.dumps({**json.loads(config_path.read_text()), "status": "interrupted"}))
    second = poscli("run", str(recipe), "--results", str(results), "--launcher", "submitit-local")
    assert second.returncode == 0, second.stderr
    assert "started train-j-rope" in second.stderr and "started train-j-alibi" not in second.stderr
    assert json.loads(config_path.read_text())["status"] == "finished"
    unknown = poscli("run", str(recipe), "--results", str(results), "--launcher", "pbs")
    assert unknown.returncode == 2 and "choose one of local, slurm, submitit-local" in unknown.stderr


def test_a_recipe_steps_single_pe_or_attention_option_matches_the_run_it_made():
    """A recipe's `pe_option = ["KEY=V"]` is a grid axis, so each step holds one pair as a string; the
    check that an existing run is the one the recipe asks for (on resuming) reads it as one pair, as
    the command line's list, not as its characters."""
    from poscli.config import ModelConfig
    from poscli.training.options import attention_switches, wanted_value

    config = {"model": ModelConfig(pe="rope").to_dict()}
    one = wanted_value(config, "pe_option", "base=500000")
    assert one == wanted_value(config, "pe_option", ["base=500000"]) and one["base"] == 500000
    assert attention_switches("gate=true") == attention_switches(["gate=true"]) == {"gate": True}
