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

from poscli.published import extrapolation_class, peng2023, press2022
from poscli.lengths import parse_length, parse_lengths
from poscli.recipes import RecipeError, load_recipe, seed_summary

REPO = Path(__file__).resolve().parent.parent


def poscli(*args):
    return subprocess.run([sys.executable, "-m", "poscli", *args], capture_output=True, text=True, env={**os.environ})


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
    assert recipe.extend[1].argv == ["extend", "m-rope-s0", "--method", "base", "--target", "128", "--steps", "0",
                                      "--rope-base", "500000", "--name", "m-rope-s0+base"]
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


TINY = """
name = "tiny"

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
"""


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
    assert len(table) == (6 + 1) * 2 and set(table["length"]) == {32, 128}  # six runs and the 3-gram reference
    seeds = pd.read_csv(results / "tiny-seeds.csv")
    groups = {"t-rope-s*", "t-alibi-s*", "t-rope-s*+yarn"}
    assert set(seeds["group"]) == groups | {"3-gram (no positions)"} and (seeds[seeds["group"].isin(groups)]["seeds"] == 2).all()
    assert (seeds["ci_low"] <= seeds["mean"]).all() and (seeds["mean"] <= seeds["ci_high"]).all()
    assert "Beside Press et al. (2022)" in (results / "tiny-published.md").read_text() and (results / "tiny-seeds.png").exists()
    report = (results / "REPORT.md").read_text()
    assert "tiny-seeds" not in report.split("## ")[0] and "mean over seeds, with its 95% interval" in report and "Beside Press" in report

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


def summary_from(per_group: dict[str, dict[int, list[float]]], pe_of: dict[str, str], train_length: int, spread: float = 0.0, min_runs: int = 2):
    """A seed summary from given perplexities: each run scores 16 spans of 100 tokens, span s with
    loss log(value) * 100 * (1 + spread * (s - 7.5) / 7.5), so ``spread`` 0 leaves only the seeds' variation."""
    rows, spans, groups = [], [], {}
    for group, by_length in per_group.items():
        for length, values in by_length.items():
            for seed, value in enumerate(values):
                run = f"{group}-s{seed}"
                groups[run] = group
                key = {"run": run, "corpus": "c", "protocol": "stream", "mode": "nonoverlapping", "length": length}
                rows.append({**key, "pe": pe_of[group], "train_length": train_length, "ppl": value, "spans": 16, "documents": 9,
                             "tokens": 1600, "eval_set": "e", "note": ""})
                if not math.isnan(value):
                    spans += [{**key, "span": s, "unit": s, "loss": math.log(value) * 100 * (1 + spread * (s - 7.5) / 7.5), "tokens": 100} for s in range(16)]
    return seed_summary(pd.DataFrame(rows), pd.DataFrame(spans), groups, min_runs=min_runs), groups


def test_the_summary_over_seeds_is_the_mean_sd_and_range_of_each_group():
    values = {"a": {128: [4.0, 5.0, 6.0], 512: [4.0, float("nan"), 8.0]}, "b": {128: [3.0, 3.5, 4.0], 512: [9.0, 9.0, 9.0]}}
    summary, _ = summary_from(values, {"a": "alibi", "b": "rope"}, 128)
    row = summary[(summary["group"] == "a") & (summary["length"] == 128)].iloc[0]
    assert row["mean"] == 5.0 and row["sd"] == pytest.approx(np.std([4, 5, 6], ddof=1)) and (row["min"], row["max"]) == (4.0, 6.0)
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


def test_press2022_comparison_claims_a_class_or_an_order_only_where_intervals_separate():
    paper_like = {"alibi": {128: [5.0, 5.1], 512: [4.9, 5.0], 2048: [4.9, 5.0]},
                  "t5": {128: [5.0, 5.0], 512: [5.5, 5.6], 2048: [6.0, 6.1]},
                  "rope": {128: [4.8, 4.9], 512: [9.0, 9.5], 2048: [20.0, 21.0]},
                  "sinusoidal": {128: [5.5, 5.6], 512: [30.0, 31.0], 2048: [1.0, 1.1]}}  # sinusoidal made to fail
    meta = {pe: {"pe": pe} for pe in paper_like}
    summary, groups = summary_from(paper_like, {pe: pe for pe in paper_like}, 128)
    text = press2022(summary, meta)
    assert "- ALiBi: paper keeps" in text and "poscli keeps" in text
    assert "T5 bias: paper degrades gracefully (1.17x at 7x); poscli degrades gracefully" in text
    assert "Rotary: paper blows up (3.95x at 30x); poscli blows up" in text and "**agrees**" in text
    assert "Sinusoidal: paper blows up (20.25x at 30x); poscli keeps" in text and "**differs**" in text
    assert "poscli at 512 (4x): ALiBi < T5 bias < Rotary < Sinusoidal: **same order**" in text
    assert "poscli at 2048 (16x): Sinusoidal < ALiBi < T5 bias < Rotary: **a different order**" in text
    tied = {"alibi": {128: [5.0, 5.0], 512: [5.3, 5.8]}, "t5": {128: [5.0, 5.0], 512: [5.4, 5.9]},
            "rope": {128: [5.0, 5.0], 512: [8.0, 8.1]}, "sinusoidal": {128: [5.0, 5.0], 512: [4.0, 4.1]}}
    summary, _ = summary_from(tied, {pe: pe for pe in tied}, 128)
    text = press2022(summary, {pe: {"pe": pe} for pe in tied})
    assert "ALiBi ≈ T5 bias" in text  # overlapping intervals: no order claimed between them
    assert "ALiBi: paper keeps (0.93x at 30x); poscli keeps or degrades gracefully" in text and "tied (the interval crosses" in text
    assert "**a different order**: Sinusoidal below ALiBi" in text


def test_peng2023_comparison_names_a_best_method_only_where_its_paired_interval_separates():
    values = {"x+pi": {1024: [6.0, 6.2]}, "x+yarn": {1024: [5.0, 5.1]}, "x+ntk": {1024: [7.0, 7.1]}, "x": {1024: [40.0, 41.0]}}
    summary, _ = summary_from(values, {g: "rope" for g in values}, 128)
    meta = {f"x+{m}": {"method": m, "target": "1k", "steps": 400} for m in ("pi", "yarn", "ntk")}
    meta["x"] = {"pe": "rope"}
    text = peng2023(summary, meta)
    assert "target 1k, 400 fine-tuning steps, at 1024: yarn < pi < ntk" in text
    assert "YaRN is best, as in the paper" in text and "unextended base x: 1024: 40.500" in text
    close = {**values, "x+pi": {1024: [4.9, 5.2]}}  # below YaRN with seed 0, above with seed 1: the paired ratio crosses 1
    summary, _ = summary_from(close, {g: "rope" for g in close}, 128)
    assert "YaRN is tied for best with pi: the data do not decide" in peng2023(summary, meta)
    # overlapping intervals, but lower for every seed on the same spans: the paired ratio decides
    shifted = {**values, "x+pi": {1024: [5.02, 5.12]}}
    summary, _ = summary_from(shifted, {g: "rope" for g in shifted}, 128)
    assert summary[summary["group"] == "x+pi"]["ci_low"].iloc[0] < summary[summary["group"] == "x+yarn"]["ci_high"].iloc[0]
    assert "at 1024: yarn < pi" in peng2023(summary, meta) and "YaRN is best, as in the paper" in peng2023(summary, meta)
    worse = {**values, "x+yarn": {1024: [8.9, 9.1]}}
    summary, _ = summary_from(worse, {g: "rope" for g in worse}, 128)
    assert "pi is best and YaRN lies above it: **differs from the paper**" in peng2023(summary, meta)


def test_beyond_yarn_ranks_every_method_and_checks_the_newer_claims_by_their_intervals():
    """A claim that perplexity stays flat holds where the whole ratio interval is <= 1.10, fails
    where all of it is above, and is undecided otherwise; PoSE is named apart from plain YaRN."""
    from poscli.published import beyond_yarn

    values = {"x+self-extend": {128: [5.0, 5.1, 5.2], 8192: [5.1, 5.2, 5.3]},     # ratio ~1.02: holds
              "x+rerope": {128: [5.0, 5.1, 5.2], 8192: [9.0, 9.2, 9.4]},          # ratio ~1.8: fails
              "x+yarn": {128: [5.0, 5.1, 5.2], 8192: [7.0, 7.1, 7.2]},
              "x+yarn-pose": {128: [5.0, 5.1, 5.2], 8192: [5.0, 5.6, 6.2]}}       # ratio interval across 1.10: undecided
    summary, _ = summary_from(values, {g: "rope" for g in values}, 128)
    meta = {"x+self-extend": {"method": "self-extend", "target": "8k"}, "x+rerope": {"method": "rerope", "target": "8k"},
            "x+yarn": {"method": "yarn", "target": "8k", "steps": 0},
            "x+yarn-pose": {"method": "yarn", "target": "8k", "steps": 400, "pose": True}}
    text = beyond_yarn(summary, meta)
    assert "target 8k, no fine-tuning, at 8192: self-extend < yarn < rerope" in text
    assert "target 8k, 400 fine-tuning steps, at 8192: yarn + PoSE" in text
    claims = {line[2:].split(" (")[0]: line for line in text.splitlines() if "Published:" in line}
    assert claims["self-extend"].endswith("Here: holds.") and claims["rerope"].endswith("Here: **does not hold**.")
    assert "undecided" in claims["yarn + PoSE"] and "yarn" not in claims  # YaRN itself makes no flatness claim here


def test_the_shipped_recipes_parse_and_plan_the_studies_the_issue_names():
    tstl = load_recipe(REPO / "recipes" / "train-short-test-long.toml")
    from poscli import encodings

    trained = {s.options["pe"] for s in tstl.train if s.name.startswith("tstl-")}
    assert trained == set(encodings.builtin_names())  # every registered encoding
    assert {s.options["seed"] for s in tstl.train if s.name.startswith("tstl-")} == {0, 1, 2}
    lengths = tstl.evals[0].options["lengths"].split(",")
    assert lengths[0] == "128" and lengths[-1] == "8k"  # from the train length to 64x it
    rope = load_recipe(REPO / "recipes" / "extend-rope.toml")
    methods = {(s.options["method"], str(s.options["target"]), s.options.get("steps", 0), s.options.get("pose", False)) for s in rope.extend}
    every = ("pi", "ntk", "dynamic-ntk", "yarn", "llama3", "base")
    newer = ("ntk-by-parts", "longrope")
    remapped = ("self-extend", "rerope", "leaky-rerope", "sinks")
    assert methods == ({(m, "1k", n, False) for m in every + newer for n in (0, 400)} | {(m, "4k", 0, False) for m in every}
                       | {(m, t, 0, False) for m in remapped for t in ("1k", "8k", "32k")} | {("yarn", t, 400, True) for t in ("1k", "8k")}
                       | {(m, "8k", 0, False) for m in every + newer} | {(m, "32k", 0, False) for m in every + ("ntk-by-parts",)})
    assert len(rope.extend) == 3 * len(methods) and len(rope.train) == 3
    assert all(s.options.get("factors") == "search" for s in rope.extend if s.options["method"] == "longrope")
    # passkey: a retrieving RoPE model (3 seeds) extended by every method to 4x and 8x, with and without
    # fine-tuning at the target; >= 50 prompts per cell; five encodings at 1x-16x
    retrieval, extension, across = (load_recipe(REPO / "recipes" / f"passkey-{n}.toml") for n in ("retrieval", "extension", "encodings"))
    assert {(s.options["method"], str(s.options["target"]), str(s.options.get("finetune_length")), s.options.get("steps", 0), s.options.get("pose", False))
            for s in extension.extend} == ({(m, t, t, n, False) for m in every + newer for t in ("1k", "2k") for n in (0, 100)}
                                           | {("yarn", t, "None", 100, True) for t in ("1k", "2k")}
                                           | {(m, t, "None", 0, False) for m in remapped for t in ("1k", "2k")})
    assert {s.options["seed"] for s in extension.train} == {0, 1, 2} and len(extension.extend) == 3 * (24 + 8 + 2 + 8)
    assert {s.options["pe"] for s in across.train} >= {"rope", "alibi", "t5", "kerple", "fire"}
    recipes = (tstl, rope, retrieval, extension, across)
    for step in [e for r in recipes for e in r.evals]:
        longest = max(parse_lengths(step.options["lengths"]))
        if step.options.get("task", "perplexity") == "perplexity":  # at least 16 spans of its longest length
            spans = 4 if step.name == "extend-rope-256x" else 16  # 32k windows on 2 cores: 4 spans x 3 seeds, said in the recipe
            assert parse_length(str(step.options.get("max_tokens", 131072)), "max_tokens") >= spans * longest, step.name
        else:
            assert int(step.options["trials"]) >= 50, step.name
    assert not any(s.options.get("task") == "passkey" for s in [*tstl.evals, *rope.evals])  # passkey has its own studies
    shared = {}  # a run named in several recipes is the same run in each, so one recipe finds it done for the next
    for step in [t for r in recipes for t in r.train]:
        assert shared.setdefault(step.name, step.options) == step.options, step.name
    assert sum(step.name == "pk256-rope-s0" for r in recipes for step in r.train) == 3


def test_ctrl_c_stops_the_recipe_with_checkpoints_and_the_next_run_resumes(tmp_path_factory):
    """SIGINT to `poscli run` (not its children) is passed on: the running training saves its
    checkpoint, the recipe exits 130 naming the command to continue, and the plan then resumes it."""
    import contextlib
    import os
    import signal
    import time

    from tests.conftest import cli_workspace

    corpus, results = cli_workspace(tmp_path_factory, "recipe-interrupt")
    text = TINY.format(corpus=corpus).replace("steps = 4", "steps = 100000").replace('pe = ["rope", "alibi"]\nseed = [0, 1]', 'pe = "rope"\nseed = 0')
    recipe = write(tmp_path_factory.mktemp("long"), text)
    # Its own session (so nothing outlives the test) and SIGINT at its default even where this
    # test runs as a background job, which starts with SIGINT ignored (as a shell's `cmd &` does).
    process = subprocess.Popen([sys.executable, "-m", "poscli", "run", str(recipe), "--results", str(results)],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
                               preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
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
    assert "poscli train --resume t-rope-s0" in plan.stderr and f"interrupted at step {config['steps_done']}" in plan.stderr


def test_the_extension_tables_hold_exactly_the_bases_and_their_own_targets():
    rope = load_recipe(REPO / "recipes" / "extend-rope.toml")
    bases = {"xr-rope-s0", "xr-rope-s1", "xr-rope-s2"}
    sizes = {"8x": ("1k", 3 * 21), "32x": ("4k", 18), "64x": ("8k", 3 * 13), "256x": ("32k", 3 * 11)}  # methods x 3 seeds
    for step in rope.evals:
        target, count = sizes[step.name.rsplit("-", 1)[1]]
        extensions = {name for name in step.runs if name not in bases}
        assert extensions and all(f"-{target}-" in name for name in extensions), step.name
        assert set(step.runs) - extensions == bases and len(extensions) == count, step.name
