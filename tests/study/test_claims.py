"""Declared claims (issue 62): checked at --dry-run, one family per claim, pairing only where it is
physical, runs that did not learn kept out, and verdicts that do not move when unrelated runs join."""

import math
import subprocess
from itertools import combinations

import numpy as np
import pandas as pd
import pytest

from poscli.evaluation.seeds import seed_summary
from poscli.evaluation.stats import holm, paired_t, welch_t
from poscli.study import claims as claim_module
from poscli.study.claim_values import values_of
from poscli.study.claims import Claim, decide
from poscli.study.gates import GateBounds, perplexity_gates
from poscli.study.plan import RecipeError
from poscli.study.recipes import load_recipe
from poscli.study.summaries import recipe_claims
from tests.study.test_recipes import GOOD, poscli, write

TRAIN = 128
LENGTHS = (128, 512)


def tables(per_group: dict[str, list[float]], null: dict[str, list[float]] | None = None, noise: float = 0.02):
    """A perplexity table and its spans: each run of a group (its seeds, in order) scores 16 spans of
    100 tokens at 128 (perplexity 4) and at 512 (the given perplexity, times the run's span wobble);
    ``null``: the same runs' truncated rows at 512. -> rows, spans, run -> group."""
    rows, spans, groups = [], [], {}
    rng = np.random.default_rng(0)
    for group, values in per_group.items():
        for seed, value in enumerate(values):
            run = group.replace("*", str(seed))
            groups[run] = group
            cells = [("nonoverlapping", 128, 4.0), ("nonoverlapping", 512, value)]
            wobble = rng.normal(0, noise, 16)  # the spans' own difficulty for this run, the same in every cell
            if null is not None:
                cells.append(("truncated-128", 512, null[group][seed]))
            for mode, length, ppl in cells:
                key = {"run": run, "corpus": "c", "protocol": "stream", "mode": mode, "length": length}
                rows.append({**key, "pe": group.split("-")[0], "train_length": TRAIN, "ppl": ppl, "spans": 16,
                             "documents": 16, "tokens": 1600, "eval_set": "e", "note": ""})  # fmt: skip
                spans += [{**key, "span": s, "unit": s, "loss": (math.log(ppl) + wobble[s]) * 100, "tokens": 100}
                          for s in range(16)]  # fmt: skip
    return pd.DataFrame(rows), pd.DataFrame(spans), groups


def summarised(rows, spans, groups):
    summary = seed_summary(rows, spans, groups)
    nulls = [seed_summary(rows, spans, groups, mode="truncated-128", min_runs=1)] if "truncated-128" in set(
        rows["mode"]
    ) else []  # fmt: skip
    summary.attrs["null"] = [part for part in nulls if part is not None]
    return summary


def info_of(groups: dict[str, str], parent: dict[str, str] | None = None) -> dict:
    names = list(dict.fromkeys(groups.values()))
    return {"groups": names, "lengths": set(LENGTHS), "kind": "perplexity", "null": True, "tasks": [],
            "train_length": dict.fromkeys(names, TRAIN), "target": {}, "parent": parent or {},
            "runs": {g: list(groups.values()).count(g) for g in names}}  # fmt: skip


def verdict_of(claim: Claim, per_group, null=None, parent=None):
    rows, spans, groups = tables(per_group, null)
    info = info_of(groups, parent)
    return decide(claim, info, values_of(info, summarised(rows, spans, groups), rows, groups))


def claim(compare="alibi-s*", against="t5-s*", direction="less", lengths=("4x",)) -> Claim:
    return Claim("c", "says", "source", "t", compare, against, tuple(lengths), direction)


ALIBI = [5.0, 5.2, 4.9, 5.1, 5.05]
T5 = [5.6, 5.9, 5.5, 5.8, 5.7]


# ---------------------------------------------------------------- the tests a claim is decided by


def test_two_encodings_are_compared_by_welch_on_per_seed_losses_never_paired_by_seed_index():
    verdict = verdict_of(claim(), {"alibi-s*": ALIBI, "t5-s*": T5})
    test = verdict.tests[0]
    assert not test.paired and test.seeds == (5, 5)
    rows, spans, groups = tables({"alibi-s*": ALIBI, "t5-s*": T5})
    losses = summarised(rows, spans, groups).attrs["run_losses"]
    a, b = np.array(losses[("alibi-s*", 512)][1]), np.array(losses[("t5-s*", 512)][1])
    difference, low, high, p, _ = welch_t(a, b)
    assert test.estimate == pytest.approx(math.exp(difference)) and test.p == pytest.approx(p)
    assert (test.low, test.high) == pytest.approx((math.exp(low), math.exp(high)))
    assert verdict.word(test) == "holds" and test.adjusted == pytest.approx(p)  # one length: Holm of one


def test_a_model_against_its_null_is_paired_over_its_own_seeds():
    null = {"alibi-s*": [v * 1.02 for v in ALIBI]}
    verdict = verdict_of(claim(against="null"), {"alibi-s*": ALIBI}, null=null)
    test = verdict.tests[0]
    assert test.paired and test.seeds == (5, 5)
    assert test.estimate == pytest.approx(1 / 1.02, rel=2e-3) and verdict.word(test) == "holds"


def test_methods_extended_from_one_base_pair_and_other_groups_do_not():
    info = {"parent": {"b+yarn": "b", "b+pi": "b", "c+pi": "c"}}
    assert claim_module.is_paired(claim("b+yarn", "b+pi"), info)
    assert not claim_module.is_paired(claim("b+yarn", "c+pi"), info)
    assert claim_module.is_paired(claim("b+yarn", "base"), info)
    assert not claim_module.is_paired(claim("alibi-s*", "t5-s*"), info)


def test_a_claims_lengths_are_its_family_corrected_by_holm_inside_it():
    rows, spans, groups = tables({"alibi-s*": ALIBI, "t5-s*": T5})
    info = {**info_of(groups), "lengths": {128, 512}}
    verdict = decide(claim(lengths=("1x", "4x")), info, values_of(info, summarised(rows, spans, groups), rows, groups))
    raw = [t.p for t in verdict.tests]
    assert [t.adjusted for t in verdict.tests] == pytest.approx(holm(raw))


def test_an_undecided_test_says_not_separated_with_its_seeds_and_interval_never_no_difference():
    verdict = verdict_of(claim(), {"alibi-s*": [5.0, 5.6, 4.7], "t5-s*": [5.1, 4.8, 5.5]})
    lines = claim_module.claim_lines(verdict)
    assert verdict.word(verdict.tests[0]) == "not separated"
    assert "not separated at 3 and 3 seeds (ratio " in lines[1] and "no difference" not in " ".join(lines)


def test_a_side_with_fewer_than_three_learned_seeds_is_not_tested_never_equal():
    verdict = verdict_of(claim(), {"alibi-s*": ALIBI[:2], "t5-s*": T5})
    assert verdict.word(verdict.tests[0]) == "not tested" and "3 a side needed" in verdict.tests[0].note
    assert verdict.tests[0].untested == claim_module.TOO_FEW_SEEDS
    assert "Here: not tested at 4x" in claim_module.claim_lines(verdict)[0]


def test_groups_not_scored_on_the_same_spans_are_not_tested_and_left_out_of_holm():
    info = info_of({"alibi-s0": "alibi-s*", "t5-s0": "t5-s*"})
    verdict = claim_module.decide(claim(lengths=("4x",)), info, lambda one, length: None)
    test = verdict.tests[0]
    assert verdict.word(test) == "not tested" and test.untested == claim_module.UNSCORED
    assert math.isnan(test.adjusted)
    assert "4x: not tested (not scored on the same spans" in " ".join(claim_module.claim_lines(verdict))


def test_the_opposite_direction_is_named_when_the_test_decides_it():
    verdict = verdict_of(claim(direction="greater"), {"alibi-s*": ALIBI, "t5-s*": T5})
    assert verdict.word(verdict.tests[0]) == "the opposite holds"


def test_a_difference_under_the_minimum_effect_is_not_claimed_however_small_its_p():
    close = [v * 1.005 for v in ALIBI]
    verdict = verdict_of(claim(against="null"), {"alibi-s*": ALIBI}, null={"alibi-s*": close})
    assert verdict.tests[0].adjusted < 0.05 and verdict.word(verdict.tests[0]) == "not separated"


def test_no_worse_holds_under_the_margin_and_fails_above_it():
    keeps = verdict_of(claim(against="null", direction="no-worse"), {"alibi-s*": ALIBI},
                       null={"alibi-s*": [v * 1.01 for v in ALIBI]})  # fmt: skip
    assert keeps.word(keeps.tests[0]) == "holds"  # 0.99 with a tight interval: under 1.01
    blows = verdict_of(claim(against="null", direction="no-worse"), {"alibi-s*": [v * 1.5 for v in ALIBI]},
                       null={"alibi-s*": ALIBI})  # fmt: skip
    assert blows.word(blows.tests[0]) == "fails"


# ---------------------------------------------------------------- invariance (item 6)


def file_family_procedure(per_group, pairs):
    """The old procedure, for contrast: every pair's test in one family (Holm over the file)."""
    rows, spans, groups = tables(per_group)
    losses = summarised(rows, spans, groups).attrs["run_losses"]
    raw = [paired_t(np.array(losses[(a, 512)][1]) - np.array(losses[(b, 512)][1]))[3] for a, b in pairs]
    return holm(raw)[0]


def test_adding_groups_leaves_an_existing_claims_verdict_and_p_unchanged():
    two = {"alibi-s*": ALIBI, "t5-s*": T5}
    more = {**two, "rope-s*": [9.0, 9.5, 8.7, 9.2, 9.9], "sinusoidal-s*": [12.0, 11.0, 13.5, 12.2, 12.8]}
    before, after = verdict_of(claim(), two), verdict_of(claim(), more)
    assert before.tests[0].adjusted == after.tests[0].adjusted
    assert before.word(before.tests[0]) == after.word(after.tests[0])
    # the test can fail: with one family for the file, the same pair's p grows with the groups beside it
    alone = file_family_procedure(two, [("alibi-s*", "t5-s*")])
    crowded = file_family_procedure(more, [("alibi-s*", "t5-s*"), *combinations(["rope-s*", "sinusoidal-s*"], 2)])
    assert crowded != alone


def relabelled(rows, spans, order: list[int], group: str = "t5-s"):
    """The same runs, their seed labels permuted within one group: t5-s0 becomes t5-s{order[0]}."""
    names = {f"{group}{i}": f"{group}{j}" for i, j in enumerate(order)}
    return rows.replace({"run": names}), spans.replace({"run": names})


def test_relabelling_one_models_seeds_leaves_a_cross_model_verdict_unchanged():
    rows, spans, groups = tables({"alibi-s*": ALIBI, "t5-s*": T5})
    info = info_of(groups)

    def tested(rows, spans):
        summary = summarised(rows, spans, groups)
        test = decide(claim(), info, values_of(info, summary, rows, groups)).tests[0]
        losses = summary.attrs["run_losses"]
        by_index = paired_t(np.array(losses[("alibi-s*", 512)][1]) - np.array(losses[("t5-s*", 512)][1]))[3]
        return test, by_index

    base, base_by_index = tested(rows, spans)
    by_index = {base_by_index}
    for order in ([1, 0, 2, 3, 4], [4, 3, 2, 1, 0], [2, 4, 0, 1, 3]):
        shuffled, shuffled_by_index = tested(*relabelled(rows, spans, order))
        assert shuffled.p == pytest.approx(base.p, rel=1e-9) and shuffled.estimate == pytest.approx(base.estimate)
        by_index.add(shuffled_by_index)
    assert len(by_index) > 1  # the test can fail: pairing seed s with seed s, the p value moves with the labels


# ---------------------------------------------------------------- gates


def gate_rows(values: dict[str, dict[int, float]]):
    rows = [{"run": "reference-3gram", "mode": "nonoverlapping", "length": n, "ppl": 8.0} for n in (128, 512, 1024)]
    rows += [{"run": run, "mode": "nonoverlapping", "length": n, "ppl": v} for run, cells in values.items()
             for n, v in cells.items()]  # fmt: skip
    return pd.DataFrame(rows)


def test_gates_keep_out_what_did_not_learn_and_say_why():
    base = {"train_length": 128}
    meta = {
        "b-s*": base,
        "weak-s*": base,
        "b-s*+pi": {"method": "pi", "target": "1k", "steps": 250, "parent": "b-s0", "parent_options": base},
        "b-s*+drift": {"method": "yarn", "target": "1k", "steps": 250, "parent": "b-s0", "parent_options": base},
        "b-s*+yarn0": {"method": "yarn", "target": "1k", "steps": 0, "parent": "b-s0", "parent_options": base},
        "weak-s*+yarn0": {"method": "yarn", "target": "1k", "steps": 0, "parent": "weak-s0", "parent_options": base},
    }
    rows = gate_rows({"b-s0": {128: 4.0}, "weak-s0": {128: 7.0}, "b-s0+pi": {128: 10.0, 512: 10.5},
                      "b-s0+drift": {128: 4.6, 512: 4.0}, "b-s0+yarn0": {128: 4.0, 1024: 30.0},
                      "weak-s0+yarn0": {128: 7.0, 1024: 30.0}})  # fmt: skip
    groups = {run: run.replace("s0", "s*") for run in ["b-s0", "weak-s0", "b-s0+pi", "b-s0+drift", "b-s0+yarn0",
                                                       "weak-s0+yarn0"]}  # fmt: skip
    gates = perplexity_gates(rows, groups, meta, GateBounds(), "nonoverlapping")
    assert gates["b-s0"].learned and not gates["weak-s0"].learned and "0.88x the 3-gram" in gates["weak-s0"].reason
    assert not gates["b-s0+pi"].learned and "where it was fine-tuned (512" in gates["b-s0+pi"].reason
    assert gates["b-s0+pi"].reason.startswith("did not recover in ")
    assert not gates["b-s0+drift"].learned and "+15%" in gates["b-s0+drift"].reason
    assert gates["b-s0+yarn0"].learned  # an extension without training: its failure is the finding
    assert not gates["weak-s0+yarn0"].learned and "did not learn" in gates["weak-s0+yarn0"].reason
    assert perplexity_gates(rows, groups, meta, GateBounds(three_gram=0.9), "nonoverlapping")["weak-s0"].learned


def test_a_planned_run_with_no_row_yet_is_said_not_evaluated_never_learned():
    from poscli.study.gates import every_gate_markdown, gates_markdown

    base = {"train_length": 128}
    meta = {"b-s*": base, "weak-s*": base}
    groups = {"b-s0": "b-s*", "b-s1": "b-s*", "weak-s0": "weak-s*"}  # b-s1: planned, not evaluated yet
    gates = perplexity_gates(gate_rows({"b-s0": {128: 4.0}, "weak-s0": {128: 7.0}}), groups, meta, GateBounds(),
                             "nonoverlapping")  # fmt: skip
    assert not gates["b-s1"].evaluated and gates["b-s0"].evaluated and gates["weak-s0"].evaluated
    listing = every_gate_markdown("t", gates)
    assert "- not evaluated: b-s1," in listing and "learned: b-s1" not in listing
    published = "\n".join(gates_markdown(gates))
    assert "1 of 2 evaluated runs did not pass" in published and "1 of the 3 runs have no row" in published


# ---------------------------------------------------------------- declared in the recipe


CLAIMED = (
    GOOD
    + """
[[claims]]
name = "yarn-below-base"
says = "YaRN's rescaling beats a new base"
source = "Peng et al., 2023"
compare = "m-rope-s*+yarn"
against = "m-rope-s*+base"
lengths = ["4x"]
direction = "less"
"""
)


def test_a_recipe_declares_claims_and_dry_run_lists_each_with_its_test(tmp_path):
    recipe = load_recipe(write(tmp_path, CLAIMED))
    assert [c.name for c in recipe.claims] == ["yarn-below-base"] and recipe.claims[0].table == "mini"
    done = poscli("run", str(write(tmp_path, CLAIMED)), "--dry-run", "--results", str(tmp_path / "r"))
    assert done.returncode == 0
    assert "yarn-below-base: m-rope-s*+yarn less than m-rope-s*+base at 4x (paired t-test" in done.stdout + done.stderr


@pytest.mark.parametrize(
    "old, new, phrase",
    [
        ('compare = "m-rope-s*+yarn"', 'compare = "m-nope-s*"', "is not a group of table mini"),
        ('against = "m-rope-s*+base"', 'against = "nul"', "is not 'null', 'base' or a group"),
        ('against = "m-rope-s*+base"', 'against = "null"', "needs null = true"),
        ('lengths = ["4x"]', 'lengths = ["16x"]', "is not evaluated in table mini"),
        ('lengths = ["4x"]', 'lengths = ["4x", "4x"]', "distinct lengths"),
        ('lengths = ["4x"]', 'lengths = ["4x", "128"]', "are the same length (128)"),
        ('lengths = ["4x"]', 'lengths = ["8x"]', "is not evaluated in table mini"),
        ('direction = "less"', 'direction = "lower"', "direction must be one of"),
        ('source = "Peng et al., 2023"', 'sauce = "Peng"', "has no key 'sauce'"),
        ('name = "yarn-below-base"', 'name = "yarn-below-base"\ntask = "copy"', "task is for an algorithmic table"),
    ],
)
def test_a_claim_that_names_what_the_recipe_lacks_is_one_line_at_dry_run(tmp_path, old, new, phrase):
    with pytest.raises(RecipeError) as error:
        load_recipe(write(tmp_path, CLAIMED.replace(old, new)))
    message = str(error.value)
    assert phrase in message and "line" in message and "\n" not in message


def test_every_shipped_recipe_that_publishes_comparisons_declares_claims_with_sources():
    from pathlib import Path

    for path in sorted(Path("recipes").glob("*.toml")):
        recipe = load_recipe(path)
        if recipe.compare:
            assert recipe.claims, f"{path} publishes comparisons but declares no claim"
            assert all(c.source and c.says for c in recipe.claims)


def git(folder, *args):
    subprocess.run(["git", *args], cwd=folder, check=True, capture_output=True)


def test_a_claim_records_its_declaring_commit_and_is_exploratory_once_its_test_changes(tmp_path):
    git(tmp_path, "init", "-q")
    git(tmp_path, "config", "user.email", "t@t")
    git(tmp_path, "config", "user.name", "t")
    path = write(tmp_path, CLAIMED)
    claimed = load_recipe(path).claims[0]
    assert "not yet committed" in claim_module.declaration(path, claimed, recipe_claims)[0]
    git(tmp_path, "add", "recipe.toml")
    git(tmp_path, "commit", "-qm", "declare")
    when, exploratory = claim_module.declaration(path, claimed, recipe_claims)
    assert when.startswith("in ") and exploratory == ""
    reworded = write(tmp_path, CLAIMED.replace("beats a new base", "is better than a new base"))
    assert claim_module.declaration(reworded, load_recipe(reworded).claims[0], recipe_claims)[1] == ""
    moved = write(tmp_path, CLAIMED.replace('lengths = ["4x"]', 'lengths = ["1x", "4x"]'))
    assert "its test changed" in claim_module.declaration(moved, load_recipe(moved).claims[0], recipe_claims)[1]


def test_a_run_that_failed_its_gate_in_one_table_fails_it_in_every_table_of_the_recipe():
    from poscli.study.gates import Gate, merged

    perplexity = {"b+pi": Gate("b+pi", "g", False, "1.33x the 3-gram")}
    passkey = {"b+pi": Gate("b+pi", "g", True, "an extension"), "b": Gate("b", "b*", True, "ok")}
    gates = merged({"ppl": perplexity, "passkey": passkey})
    assert not gates["passkey"]["b+pi"].learned and "(in table ppl)" in gates["passkey"]["b+pi"].reason
    assert gates["passkey"]["b"].learned


SUMMARISED = """
name = "claimed"

[defaults]
train_length = 128

[[train]]
name = "alibi-s{seed}"
pe = "alibi"
seed = [0, 1, 2, 3, 4]

[[train]]
name = "t5-s{seed}"
pe = "t5"
seed = [0, 1, 2, 3, 4]

[[eval]]
runs = ["alibi-s*", "t5-s*"]
table = "claimed"
lengths = "128,512"
null = true

[[compare]]
table = "claimed"
published = "press2022"

[[claims]]
name = "alibi-below-t5"
says = "ALiBi's perplexity beyond the train length is below T5 bias's"
source = "Press et al., 2022, table 2"
compare = "alibi-s*"
against = "t5-s*"
lengths = ["4x"]
direction = "less"

[[claims]]
name = "alibi-keeps"
says = "ALiBi is no worse than its truncation null"
source = "Press et al., 2022, sec. 5"
compare = "alibi-s*"
against = "null"
lengths = ["4x"]
direction = "no-worse"
"""


def test_summaries_write_claims_gates_and_the_screen_from_the_tables_alone(tmp_path):
    """`poscli run RECIPE --summaries`: no run trained, the published file from the committed tables:
    the declared claims first, the runs that did not learn named, the screen below, over learned runs."""
    rows, spans, _ = tables({"alibi-s*": ALIBI, "t5-s*": T5}, null={"alibi-s*": [v * 1.01 for v in ALIBI],
                                                                   "t5-s*": T5})  # fmt: skip
    unlearned = (rows["run"] == "t5-s4") & (rows["length"] == 128) & (rows["mode"] == "nonoverlapping")
    rows.loc[unlearned, "ppl"] = 7.0  # 0.875x the 3-gram at its train length: did not learn
    reference = [{"run": "reference-3gram", "label": "3-gram", "pe": "reference", "train_length": 0, "corpus": "c",
                  "protocol": "stream", "mode": "nonoverlapping", "length": n, "ppl": 8.0, "spans": 16,
                  "documents": 16, "tokens": 1600, "eval_set": "e", "note": ""} for n in LENGTHS]  # fmt: skip
    results = tmp_path / "results"
    results.mkdir()
    pd.concat([rows, pd.DataFrame(reference)]).to_csv(results / "claimed.csv", index=False)
    spans.to_csv(results / "claimed_spans.csv", index=False)
    recipe = write(tmp_path, SUMMARISED)
    done = poscli("run", str(recipe), "--summaries", "--results", str(results))
    assert done.returncode == 0, done.stderr[-2000:]
    published = (results / "claimed-published.md").read_text(encoding="utf-8")
    claims, rest = published.split("### Runs that did not learn")
    assert "- claim **alibi-keeps**" in claims and "Here: holds at 4x" in claims
    assert "4x: not tested (5 and 4 learned seeds" not in claims and "5 and 4 seeds" in claims  # t5-s4 left out
    assert "- did not learn: t5-s4, 0.88x the 3-gram at its train length" in rest
    assert rest.index("did not learn") < rest.index("## Exploratory screen") < rest.index("Beside Press et al.")
    assert not (tmp_path / "results" / "runs").exists()  # nothing trained


@pytest.mark.parametrize("flags", [["--dry-run"], ["--each"], ["--jobs", "2"], ["--runs", "m-*"]])
def test_summaries_refuse_the_flags_they_would_ignore_in_one_line_writing_nothing(tmp_path, flags):
    results = tmp_path / "results"
    done = poscli("run", str(write(tmp_path, CLAIMED)), "--summaries", *flags, "--results", str(results))
    assert done.returncode == 2 and "would be ignored" in done.stderr and len(done.stderr.strip().splitlines()) == 1
    assert not results.exists()
