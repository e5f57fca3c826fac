"""A recipe's size axis, its learning rate chosen on held-out data, and claims decided at every size
(issue 63)."""

import json
import math
import shutil
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from poscli.config import ModelConfig
from poscli.evaluation.stats import welch_contrast, welch_t
from poscli.model.gpt import GPT
from poscli.study import ladder
from poscli.study.by_size import across_sizes, by_size_markdown
from poscli.study.claim_values import values_of
from poscli.study.claims import Claim, decide
from poscli.study.plan import RecipeError
from poscli.study.recipes import load_recipe
from tests.study.test_claims import info_of, summarised, tables
from tests.study.test_recipes import REPO, poscli, write

LADDER = """
name = "ladder"

[defaults]
train_length = 32
batch_size = 4
tokens_per_parameter = 0.05

[sizes.cpu]
a = { layers = 1, heads = 2, width = 16 }
b = { layers = 1, heads = 2, width = 32, warmup = 2 }

[sizes.big]
a = { layers = 2, heads = 2, width = 32 }
b = { layers = 2, heads = 2, width = 64 }

[select]
name = "lr-{pe}-{size}-{lr}"
option = "lr"
values = [1e-3, 1e-2]
table = "ladder-lr"

[[train]]
name = "{pe}-{size}-s{seed}"
size = ["a", "b"]
seed = [0, 1]
pe = ["rope", "alibi"]

[[eval]]
runs = ["*-s0", "*-s1"]
table = "ladder"
lengths = "32,64"
max_tokens = "1k"
"""


# ---------------------------------------------------------------- sizes and tokens per parameter


def test_each_rung_is_a_grid_value_with_its_shape_and_the_same_tokens_per_parameter(tmp_path):
    recipe = load_recipe(write(tmp_path, LADDER))
    by_name = {step.name: step for step in recipe.train}
    assert set(by_name) == {f"{pe}-{size}-s{seed}" for pe in ("rope", "alibi") for size in "ab" for seed in (0, 1)}
    assert by_name["rope-a-s0"].options["width"] == 16 and by_name["rope-b-s1"].options["width"] == 32
    assert by_name["rope-b-s0"].options["warmup"] == 2 and "warmup" not in by_name["rope-a-s0"].options
    assert {step.size for step in recipe.train} == {"a", "b"} and "size" not in by_name["rope-a-s0"].options
    for step in recipe.train:  # steps x batch x train length / the parameters of the model really built
        model = ModelConfig(n_layer=step.options["layers"], n_head=step.options["heads"],
                            d_model=step.options["width"], train_length=32, pe=step.options["pe"])  # fmt: skip
        built = GPT(model).num_parameters()
        ratio = step.options["steps"] * 4 * 32 / built
        assert ratio == pytest.approx(0.05, abs=4 * 32 / built / 2 + 1e-12)  # within half a step of the key
    assert by_name["rope-b-s0"].options["steps"] > 2 * by_name["rope-a-s0"].options["steps"]


def test_the_parameter_count_on_the_meta_device_is_the_built_models_for_every_encoding():
    for pe in ("rope", "alibi", "t5", "learned", "none"):
        options = {"pe": pe, "layers": 2, "heads": 2, "width": 32, "train_length": 64}
        model = ModelConfig(n_layer=2, n_head=2, d_model=32, train_length=64, pe=pe)
        from poscli import encodings

        assert ladder.parameter_count(options) == GPT(encodings.resolve_options(model)).num_parameters(), pe


def test_sizes_picks_another_set_of_the_same_rungs(tmp_path):
    recipe = load_recipe(write(tmp_path, LADDER), sizes="big")
    assert recipe.sizes == "big"
    assert {step.options["width"] for step in recipe.train if step.size == "b"} == {64}
    assert all(step.options["layers"] == 2 for step in recipe.train)


@pytest.mark.parametrize(
    "old, new, phrase",
    [
        ('size = ["a", "b"]', 'size = ["a", "c"]', "'c' is not a rung of [sizes]"),
        ("tokens_per_parameter = 0.05", "tokens_per_parameter = 0.05\nsteps = 3", "give steps or tokens_per_parameter"),
        ("a = { layers = 2, heads = 2, width = 32 }", "c = { width = 32 }", "every set names the same rungs"),
        ("a = { layers = 1, heads = 2, width = 16 }", "tiny = { width = 16 }", "is a --size preset's name"),
        ("a = { layers = 1, heads = 2, width = 16 }", 'a = { pe = "rope" }', "has no key 'pe'"),
        ('name = "lr-{pe}-{size}-{lr}"', 'name = "lr-{pe}-{size}"', "must hold {lr}"),
        ("values = [1e-3, 1e-2]", "values = [1e-3]", "two or more distinct numbers"),
        ('table = "ladder-lr"', 'table = "ladder-lr"\nbudget = 2', "budget is a fraction"),
        ('option = "lr"', 'option = "steps"', "option 'steps' is not a poscli train option it can choose"),
    ],
)
def test_a_bad_size_or_select_key_is_one_line_naming_it(tmp_path, old, new, phrase):
    assert old in LADDER
    with pytest.raises(RecipeError) as error:
        load_recipe(write(tmp_path, LADDER.replace(old, new)))
    assert phrase in str(error.value) and "\n" not in str(error.value)


def test_an_unknown_size_set_is_one_line(tmp_path):
    with pytest.raises(RecipeError, match="--sizes 'gpu' is not one of this recipe's size sets"):
        load_recipe(write(tmp_path, LADDER), sizes="gpu")


# ---------------------------------------------------------------- the learning rate, chosen on held-out data


def test_a_select_run_trains_a_budget_of_the_steps_and_warmup_at_one_seed_without_snapshots():
    selection = ladder.Selection("x-{lr}", "lr", (1e-3, 1e-2), 0.25, 0, "t")
    options = ladder.select_options(selection, {"steps": 400, "warmup": 40, "seed": 3, "snapshots": "0.5"}, 1e-2)
    assert options == {"steps": 100, "warmup": 10, "seed": 0, "lr": 1e-2}


def test_one_select_run_serves_every_seed_of_its_group(tmp_path):
    recipe = load_recipe(write(tmp_path, LADDER))
    assert sorted(step.name for step in recipe.select) == sorted(
        f"lr-{pe}-{size}-{lr}" for pe in ("rope", "alibi") for size in "ab" for lr in ("0.001", "0.01")
    )
    assert {step.select for step in recipe.train if step.name.startswith("rope-a-")} == {"lr-rope-a-*"}


def test_a_best_at_an_edge_widens_the_grid_by_its_ratio_up_to_widen_values_a_side():
    selection = ladder.Selection("x-{lr}", "lr", (2e-3, 4e-3, 8e-3), 0.25, 0, "t", widen=2)
    assert selection.next_value([2e-3, 4e-3, 8e-3], 4e-3) is None  # inside the grid: chosen
    assert selection.next_value([2e-3, 4e-3, 8e-3], 8e-3) == pytest.approx(1.6e-2)
    assert selection.next_value([2e-3, 4e-3, 8e-3, 1.6e-2], 1.6e-2) == pytest.approx(3.2e-2)
    assert selection.next_value([2e-3, 4e-3, 8e-3, 1.6e-2, 3.2e-2], 3.2e-2) is None  # two added: the edge stays
    assert selection.next_value([2e-3, 4e-3, 8e-3], 2e-3) == pytest.approx(1e-3)
    assert ladder.value_text(8e-3 * 2 * 2) == "0.032" and ladder.value_text(1e-3 * 0.1) == "0.0001"


def test_the_lowest_finite_held_out_loss_is_chosen_once_every_value_has_run():
    candidates = [(1e-3, "r1"), (1e-2, "r2"), (1e-1, "r3")]
    assert ladder.choose(candidates, {"r1": (4.0, ""), "r2": (3.5, "")}) is None  # r3 not run yet
    assert ladder.choose(candidates, {"r1": (4.0, ""), "r2": (3.5, ""), "r3": (math.inf, "diverged")}) == 1e-2
    with pytest.raises(Exception, match="every select run diverged"):
        ladder.choose(candidates[2:], {"r3": (math.inf, "diverged")})


@pytest.mark.slow
def test_the_main_runs_train_with_the_value_the_sweep_chose_and_a_fresh_clone_needs_no_sweep(tmp_path):
    text = LADDER.replace('runs = ["*-s0", "*-s1"]', 'runs = ["rope-*"]').replace(
        'pe = ["rope", "alibi"]', 'pe = "rope"'
    )
    recipe = write(tmp_path, text.replace('table = "ladder-lr"', 'table = "ladder-lr"\nwiden = 1'))
    results = tmp_path / "results"
    done = poscli("run", str(recipe), "--each", "--results", str(results))
    assert done.returncode == 0, done.stderr[-2000:]
    sweep = pd.read_csv(results / "ladder-lr.csv")
    assert sweep["heldout_loss"].notna().all()
    for scope, part in sweep.groupby("scope"):
        best = part.loc[part["heldout_loss"].idxmin()]
        assert bool(best["chosen"]) and part["chosen"].sum() == 1
        grid = part[part["value"].isin([1e-3, 1e-2])]
        edge = grid.loc[grid["heldout_loss"].idxmin(), "value"]  # the grid's best is at one of its two edges
        widened = sorted(set(part["value"]) - {1e-3, 1e-2})
        assert widened == pytest.approx([edge * 10 if edge == 1e-2 else edge / 10])  # widen = 1: one value past it
        for seed in (0, 1):  # the runs record the chosen value in their config
            run = scope.replace("lr-", "", 1).replace("-*", f"-s{seed}")
            config = json.loads((results / "runs" / run / "config.json").read_text())
            assert config["train"]["lr"] == pytest.approx(best["value"])
    assert "parameters" in pd.read_csv(results / "ladder.csv").columns
    brought = subprocess.run([sys.executable, "tools/bring_study.py", str(recipe), str(results), str(tmp_path / "in")],
                             capture_output=True, text=True, cwd=REPO)  # fmt: skip
    assert brought.returncode == 0, brought.stderr
    assert {"ladder.csv", "ladder_spans.csv", "ladder-lr.csv", "ladder-lr.md", "history.jsonl"} <= {
        path.name for path in (tmp_path / "in").iterdir()}  # fmt: skip
    logs = {path.name for path in (tmp_path / "in" / "logs").iterdir()}
    assert "train-rope-a-s0.log" in logs and "select-lr-rope-a-0.001.log" in logs
    history = (tmp_path / "in" / "history.jsonl").read_text().splitlines()
    assert history == (results / "history.jsonl").read_text().splitlines()  # every line, once, in order
    for run in sweep["run"]:  # a fresh clone holds the tables, not the run folders
        shutil.rmtree(results / "runs" / run)
    planned = poscli("run", str(recipe), "--each", "--dry-run", "--results", str(results))
    assert "0 steps to do" in planned.stderr, planned.stderr[-2000:]
    in_part = poscli("run", str(recipe), "--each", "--runs", "rope-a-*", "--results", str(results))
    assert in_part.returncode == 0, in_part.stderr[-2000:]
    kept = pd.read_csv(results / "ladder-lr.csv").dropna(subset=["heldout_loss"])
    assert set(kept["run"]) == set(sweep["run"])  # a study run in parts writes its own groups' rows, keeps the rest
    other = pd.DataFrame([{**sweep.iloc[0].to_dict(), "scope": "lr-elsewhere-*", "run": "lr-elsewhere-1"}])
    brought_table = tmp_path / "in" / "ladder-lr.csv"
    pd.concat([pd.read_csv(brought_table), other]).to_csv(brought_table, index=False)
    again_in = subprocess.run([sys.executable, "tools/bring_study.py", str(recipe), str(results), str(tmp_path / "in")],
                              capture_output=True, text=True, cwd=REPO)  # fmt: skip
    assert again_in.returncode == 0 and "lr-elsewhere-1" in set(pd.read_csv(brought_table)["run"])
    sweep.loc[sweep["scope"] == "lr-rope-b-*", "heldout_loss"] = math.nan  # rows of runs not run yet: a sweep
    sweep.to_csv(results / "ladder-lr.csv", index=False)  # under way, written before its runs ended
    again = poscli("run", str(recipe), "--summaries", "--results", str(results))
    assert again.returncode == 0, again.stderr[-2000:]
    rewritten = pd.read_csv(results / "ladder-lr.csv")
    scored = sweep.dropna(subset=["heldout_loss"])
    assert set(scored["run"]) <= set(rewritten["run"]) and (scored["scope"] == "lr-rope-a-*").sum() == 3  # widened kept


# ---------------------------------------------------------------- claims at every size


def test_welch_contrast_of_two_groups_is_scipys_welch_test():
    from scipy import stats

    rng = np.random.default_rng(1)
    a, b = rng.normal(0, 1, 5), rng.normal(0.5, 2, 4)
    estimate, low, high, p, df = welch_contrast([a, b], [1.0, -1.0])
    reference = stats.ttest_ind(a, b, equal_var=False)
    assert p == pytest.approx(reference.pvalue, rel=1e-6)
    assert welch_t(a, b)[3] == pytest.approx(reference.pvalue, rel=1e-6)
    interval = reference.confidence_interval(0.95)
    assert (low, high) == pytest.approx((interval.low, interval.high), rel=1e-5)


def test_an_interaction_of_four_groups_reduces_to_welch_when_two_of_them_are_constant():
    rng = np.random.default_rng(2)
    a, b = rng.normal(0, 1, 5), rng.normal(1, 1, 3)
    constant_c, constant_d = np.full(4, 2.0), np.full(4, 0.5)
    estimate, low, high, p, df = welch_contrast([a, b, constant_c, constant_d], [1.0, -1.0, -1.0, 1.0])
    two = welch_t(a, b + 1.5)  # the constants shift the contrast and add no variance or degrees of freedom
    assert (estimate, low, high, p, df) == pytest.approx(two)


@pytest.mark.parametrize(
    "words, reading",
    [
        ({"s": "holds", "m": "holds", "l": "holds"}, "holds across sizes"),
        ({"s": "holds", "m": "the opposite holds", "l": "holds"}, "changes with size"),
        ({"s": "holds", "m": "not separated", "l": "holds"}, "holds at s, l only (not separated at m)"),
        ({"s": "not tested", "m": "not separated"}, "decided at no size"),
        (
            {"s": "not tested: too few learned seeds", "m": "holds", "l": "not tested: too few learned seeds"},
            "holds at m only (not tested at s, l: too few learned seeds)",
        ),
        (
            {"s": "the opposite holds", "m": "not separated", "l": "not tested: too few learned seeds"},
            "the opposite holds at s only (not separated at m; not tested at l: too few learned seeds)",
        ),
        ({"s": "holds", "m": "fails", "l": "fails"}, "changes with size (holds at s; fails at m, l)"),
    ],
)
def test_a_claim_is_said_to_hold_across_sizes_only_where_every_rung_decides_it_alike(words, reading):
    assert across_sizes(words).startswith(reading)


def test_verdict_by_size_says_why_a_rung_was_not_tested():
    from poscli.study.by_size import by_size
    from poscli.study.claims import TOO_FEW_SEEDS, UNSCORED, Claim, Test, Verdict

    claim = Claim("c", "says", "source", "t", "a-{size}-s*", "NULL", ("4x",), "less")
    decided = Test("4x", True, (3, 3), 0.8, 0.7, 0.9, 1e-4, adjusted=1e-4)
    too_few = Test("4x", True, (0, 0), *[math.nan] * 4, untested=TOO_FEW_SEEDS, note="0 learned seeds paired, 3 needed")
    unscored = Test("4x", True, (0, 0), *[math.nan] * 4, untested=UNSCORED)
    verdicts = [Verdict(claim.at(rung), "perplexity", [test]) for rung, test in
                (("s", too_few), ("m", decided), ("l", unscored))]  # fmt: skip
    rows = by_size(verdicts)
    assert [row["word"] for row in rows] == [
        "not tested: too few learned seeds",
        "holds",
        "not tested: not scored on the same spans at this length",
    ]
    assert rows[0]["across_sizes"] == (
        "holds at m only (not tested at s: too few learned seeds; "
        "not tested at l: not scored on the same spans at this length)"
    )


def test_verdict_by_size_names_the_lengths_that_read_alike_once():
    def row(claim: str, length: str, reading: str, size: str) -> dict:
        return {"claim": claim, "length": length, "across_sizes": reading, "size": size}

    rows = [row("c", length, reading, size) for length, reading in
            (("4x", "holds across sizes"), ("16x", "changes with size (holds at s, fails at m)"),
             ("64x", "holds across sizes")) for size in "sm"]  # fmt: skip
    rows += [row("d", length, "holds at s only (not tested at m)", "s") for length in ("4x", "16x")]
    lines = by_size_markdown(rows)
    assert "- by size **c**: 4x, 64x: holds across sizes; 16x: changes with size (holds at s, fails at m)." in lines
    assert "- by size **d**: 4x, 16x: holds at s only (not tested at m)." in lines


def sized(compare: str, against: str, sizes=(), direction="less") -> Claim:
    return Claim("c", "says", "source", "t", compare, against, ("4x",), direction, sizes=tuple(sizes))


def test_an_advantage_that_grows_with_size_is_decided_by_the_contrast_of_the_two_rungs():
    groups = {"alibi-a-s*": [5.0, 5.1, 4.9, 5.05], "sin-a-s*": [5.5, 5.6, 5.4, 5.5],
              "alibi-b-s*": [4.0, 4.1, 3.9, 4.05], "sin-b-s*": [6.0, 6.2, 5.9, 6.1]}  # fmt: skip
    rows, spans, runs = tables(groups)
    info = info_of(runs) | {"sizes": ["a", "b"]}
    values = values_of(info, summarised(rows, spans, runs), rows, runs)
    grows = decide(sized("alibi-{size}-s*", "sin-{size}-s*", ("a", "b")), info, values)
    [test] = grows.tests
    assert grows.word(test) == "holds" and not test.paired
    assert test.estimate == pytest.approx((4.0 / 6.05) / (5.0 / 5.5), rel=0.03)  # ratio at b over ratio at a
    shrinks = decide(sized("alibi-{size}-s*", "sin-{size}-s*", ("a", "b"), "greater"), info, values)
    assert shrinks.word(shrinks.tests[0]) == "the opposite holds"
    at_a = decide(sized("alibi-{size}-s*", "sin-{size}-s*").at("a"), info, values)
    assert at_a.claim.compare == "alibi-a-s*" and at_a.word(at_a.tests[0]) == "holds"


SIZED = LADDER.replace('runs = ["*-s0", "*-s1"]', 'runs = ["*"]').replace("seed = [0, 1]", "seed = [0, 1, 2, 3]")
SIZED += """
null = true

[[claims]]
name = "alibi-below-rope"
says = "ALiBi below Rotary"
source = "Press et al., 2022, table 2"
compare = "alibi-{size}-s*"
against = "rope-{size}-s*"
lengths = ["2x"]
direction = "less"

[[claims]]
name = "alibi-advantage-grows"
says = "ALiBi's advantage over Rotary grows with size"
source = "Press et al., 2022, sec. 4.2"
compare = "alibi-{size}-s*"
against = "rope-{size}-s*"
sizes = ["a", "b"]
lengths = ["2x"]
direction = "less"
"""


def test_summaries_state_each_claim_per_size_and_across_sizes_with_a_table_and_figure(tmp_path):
    per_group = {"alibi-a-s*": [5.0, 5.1, 4.9, 5.05], "rope-a-s*": [5.5, 5.6, 5.4, 5.5],
                 "alibi-b-s*": [4.0, 4.1, 3.9, 4.05], "rope-b-s*": [6.0, 6.2, 5.9, 6.1]}  # fmt: skip
    rows, spans, _ = tables(per_group, null={group: values for group, values in per_group.items()})
    rows["train_length"], spans["length"] = 32, spans["length"].map({128: 32, 512: 64})
    rows["length"] = rows["length"].map({128: 32, 512: 64})
    rows["mode"] = rows["mode"].replace("truncated-128", "truncated-32")
    spans["mode"] = spans["mode"].replace("truncated-128", "truncated-32")
    reference = [{"run": "reference-3gram", "label": "3-gram", "pe": "reference", "train_length": 0, "corpus": "c",
                  "protocol": "stream", "mode": "nonoverlapping", "length": n, "ppl": 8.0, "spans": 16,
                  "documents": 16, "tokens": 1600, "eval_set": "e", "note": ""} for n in (32, 64)]  # fmt: skip
    results = tmp_path / "results"
    results.mkdir()
    pd.concat([rows, pd.DataFrame(reference)]).to_csv(results / "ladder.csv", index=False)
    spans.to_csv(results / "ladder_spans.csv", index=False)
    done = poscli("run", str(write(tmp_path, SIZED)), "--summaries", "--results", str(results))
    assert done.returncode == 0, done.stderr[-2000:]
    published = (results / "ladder-published.md").read_text(encoding="utf-8")
    assert "- claim **alibi-below-rope** at size a (" in published
    assert "- claim **alibi-below-rope** at size b (" in published
    assert "- by size **alibi-below-rope**: 2x: holds across sizes." in published
    assert "- claim **alibi-advantage-grows**: " in published and "(from size a to b). Here: holds at 2x" in published
    table = pd.read_csv(results / "ladder-by-size.csv")
    assert list(table["size"]) == ["a", "b"] and table["parameters"].is_monotonic_increasing
    assert (table["high"] < 1).all() and (table["word"] == "holds").all()
    assert (results / "ladder-by-size.png").stat().st_size > 10_000
    assert not (results / "runs").exists()  # nothing trained


def test_a_size_claim_needs_size_rungs_and_sizes_needs_a_size_claim(tmp_path):
    text = SIZED.replace('sizes = ["a", "b"]', 'sizes = ["a", "c"]')
    with pytest.raises(RecipeError, match="sizes: 'c' is not a rung of table ladder"):
        load_recipe(write(tmp_path, text))
    text = SIZED.replace('compare = "alibi-{size}-s*"\nagainst = "rope-{size}-s*"\nsizes',
                         'compare = "alibi-a-s*"\nagainst = "rope-a-s*"\nsizes')  # fmt: skip
    with pytest.raises(RecipeError, match="sizes needs groups that hold"):
        load_recipe(write(tmp_path, text))


def test_the_shipped_ladder_spans_ten_times_in_parameters_at_equal_tokens_per_parameter():
    recipe = load_recipe("recipes/scale-ladder.toml")
    counts = {step.size: ladder.parameter_count(step.options) for step in recipe.train if step.options["pe"] == "rope"}
    assert counts["l"] / counts["s"] >= 10
    for step in recipe.train:
        seen = step.options["steps"] * step.options["batch_size"] * step.options["train_length"]
        assert seen / ladder.parameter_count(step.options) == pytest.approx(6.2, rel=0.01)
    seeds = {size: {s.options["seed"] for s in recipe.train if s.size == size} for size in "sml"}
    assert len(seeds["s"]) == len(seeds["m"]) == 5 and len(seeds["l"]) >= 3
    assert {step.options["lr"] for step in recipe.select} >= {2e-3, 1.6e-2}  # 8x


def test_a_claim_at_every_size_is_declared_once_and_not_exploratory_at_any_rung(tmp_path):
    from poscli.study import claims as claim_module
    from poscli.study.summaries import recipe_claims

    for args in (["init", "-q"], ["config", "user.email", "t@t"], ["config", "user.name", "t"]):
        subprocess.run(["git", *args], cwd=tmp_path, check=True)
    path = write(tmp_path, SIZED)
    subprocess.run(["git", "add", "recipe.toml"], cwd=tmp_path, check=True)
    subprocess.run(["git", "commit", "-qm", "declare"], cwd=tmp_path, check=True)
    sized_claims = [claim for claim in load_recipe(path).claims if claim.size]
    assert [claim.size for claim in sized_claims] == ["a", "b"]
    for claim in sized_claims:
        when, exploratory = claim_module.declaration(path, claim, recipe_claims)
        assert when.startswith("in ") and exploratory == ""
    moved = write(
        tmp_path,
        SIZED.replace(
            'lengths = ["2x"]\ndirection = "less"\n\n[[claims]]',
            'lengths = ["1x", "2x"]\ndirection = "less"\n\n[[claims]]',
        ),
    )
    changed = [c for c in load_recipe(moved).claims if c.size]
    assert all("its test changed" in claim_module.declaration(moved, c, recipe_claims)[1] for c in changed)


def test_bringing_a_study_in_refuses_a_run_another_recipes_table_holds_under_the_same_name(tmp_path):
    import importlib.util

    spec = importlib.util.spec_from_file_location("bring_study", REPO / "tools" / "bring_study.py")
    bring_study = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bring_study)
    recipe = load_recipe(write(tmp_path, LADDER))
    source, destination = tmp_path / "source" / "logs", tmp_path / "dest"
    (destination / "logs").mkdir(parents=True)
    source.mkdir(parents=True)
    for run, text in {"rope-a-s0": "trained here", "alibi-a-s0": "same", "rope-b-s0": "new"}.items():
        (source / f"train-{run}.log").write_text(text)
    logs = {source / f"train-{run}.log": run for run in ("rope-a-s0", "alibi-a-s0", "rope-b-s0")}
    (destination / "logs" / "train-rope-a-s0.log").write_text("trained for another recipe")
    (destination / "logs" / "train-alibi-a-s0.log").write_text("same")  # the same run brought in twice
    pd.DataFrame({"run": ["rope-a-s0", "alibi-a-s0", "rope-b-s0"]}).to_csv(destination / "other.csv", index=False)
    pd.DataFrame({"run": ["rope-a-s0"]}).to_csv(destination / "ladder.csv", index=False)  # the recipe's own
    assert bring_study.clashing_runs(recipe, logs, destination) == ["rope-a-s0"]
    (destination / "other.csv").unlink()  # only the recipe's own table names it: a run trained again replaces it
    assert bring_study.clashing_runs(recipe, logs, destination) == []
