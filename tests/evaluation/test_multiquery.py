"""--task multiquery (RULER's multi-query needle, Hsieh et al., 2024): K named keys in the filler,
every one asked for in the passkey format; a query counts at its key's depth and only when its
digits and stop are right; a prompt is exact when every query is."""

import random
import re

import numpy as np
import pandas as pd
import pytest

from poscli.evaluation import tasks
from poscli.evaluation.tasks.multiquery import ALL_DEPTHS, MultiQuery, multiquery_prompt, recalled
from tests.cli.test_cli import TINY, poscli
from tests.conftest import cli_workspace
from tests.evaluation.test_multivalue import Oracle

DEPTHS = [0.0, 50.0, 100.0]


@pytest.mark.parametrize("length, keys", [(400, 1), (600, 4), (3000, 8)])
def test_every_key_is_hidden_once_and_asked_once_and_only_its_digits_and_stop_are_scored(length, keys):
    prompt, answer, mask, depths = multiquery_prompt(length, keys, DEPTHS, random.Random(length))
    assert len(prompt) + len(answer) == length  # the whole context, questions included
    hidden = dict(re.findall(r"The (\w+) pass key is (\d+)\. ", prompt))
    asked = re.findall(r"What is the (\w+) pass key\? The \1 pass key is (\d+)\. ", answer)
    assert len(hidden) == keys and sorted(asked) == sorted(hidden.items())  # each key asked once, answered truly
    assert "What is" not in prompt and len(depths) == keys and set(depths) <= set(DEPTHS)
    assert "".join(c for c, scored in zip(answer, mask) if scored) == "".join(f"{key}." for _, key in asked)
    again = multiquery_prompt(length, keys, DEPTHS, random.Random(length))
    assert again[0] == prompt and again[1] == answer  # the same prompts for every run


def test_a_query_counts_only_when_its_digits_and_stop_are_right():
    prompt, answer, mask, _ = multiquery_prompt(600, 3, DEPTHS, random.Random(0))
    assert recalled(Oracle(), prompt, answer, mask, "cpu").all()
    last_digit = len(answer) - 3  # "....12345. ": the last query's final digit, counted back from the end
    assert list(recalled(Oracle(wrong=(3,)), prompt, answer, mask, "cpu")) == [True, True, False]
    assert recalled(Oracle(wrong=(1,)), prompt, answer, mask, "cpu").all()  # the trailing space is not scored
    assert mask[last_digit]


def test_a_cell_counts_each_query_at_its_keys_depth_and_each_prompt_once():
    rows = MultiQuery().cells(Oracle(), 800, 4, DEPTHS, 6, "cpu")
    by_depth = {row["depth"]: row for row in rows}
    assert set(by_depth) == {*DEPTHS, ALL_DEPTHS}
    assert sum(by_depth[d]["trials"] for d in DEPTHS) == 6 * 4 and by_depth[ALL_DEPTHS]["trials"] == 6
    assert all(row["accuracy"] == 1.0 for row in rows if row["trials"])


@pytest.mark.slow
def test_multiquery_runs_through_poscli_eval_with_a_heatmap_of_counts(tmp_path_factory):
    corpus, results = cli_workspace(tmp_path_factory, "multiquery")
    trained = poscli("train", "--pe", "alibi", "--name", "mq", "--data", str(corpus), "--steps", "2", *TINY,
                     "--results", str(results))  # fmt: skip
    assert trained.returncode == 0, trained.stderr
    done = poscli("eval", "mq", "--task", "multiquery", "--lengths", "400,800", "--depths", "0,50,100",
                  "--trials", "3", "--keys", "2", "--results", str(results), "--quiet")  # fmt: skip
    assert done.returncode == 0, done.stderr
    table = pd.read_csv(results / "multiquery.csv")
    assert set(table["length"]) == {400, 800} and set(table["depth"]) == {*DEPTHS, ALL_DEPTHS}
    for _, part in table.groupby("length"):
        assert part.loc[part["depth"] != ALL_DEPTHS, "trials"].sum() == 3 * 2
    assert (results / "multiquery-mq-2keys.png").exists()
    assert "effective length" in (results / "multiquery.md").read_text()
    assert tasks.owner(table).name == "multiquery" and not tasks.get("passkey").owns(table)
    assert tasks.get("multiquery").evaluated(table, "mq", {"lengths": "400,800", "keys": 2})
    bad = poscli("eval", "mq", "--task", "multiquery", "--lengths", "100", "--keys", "8", "--results", str(results))
    assert bad.returncode == 2 and "use longer --lengths" in bad.stderr and "Traceback" not in bad.stderr
    assert (np.isfinite(table["accuracy"]) == (table["trials"] > 0)).all()  # a depth no key was drawn at: no rate
    done = poscli("eval", "mq", "--task", "variables", "--lengths", "600", "--depths", "0,50,100", "--trials", "2",
                  "--keys", "3", "--results", str(results), "--quiet")  # fmt: skip
    assert done.returncode == 0, done.stderr
    chains = pd.read_csv(results / "variables.csv")
    assert chains.loc[chains["depth"] != ALL_DEPTHS, "trials"].sum() == 2 * 3
    assert tasks.owner(chains).name == "variables" and not tasks.get("multiquery").owns(chains)
    assert (results / "variables-mq-3keys.png").exists()


@pytest.mark.parametrize("length, keys", [(500, 2), (1500, 4)])
def test_variables_hide_a_chain_in_order_beside_a_distractor_and_ask_for_its_names(length, keys):
    from poscli.evaluation.tasks.variables import variables_context

    prompt, answer, mask, depths = variables_context(length, keys, DEPTHS, random.Random(length))
    assert len(prompt) + len(answer) == length and len(depths) == keys and depths == sorted(depths)
    assignments = re.findall(r"VAR ([A-Z]+) = (VAR [A-Z]+|\d+)\. ", prompt)
    assert len(assignments) == 2 * keys
    value = re.search(r"Which variables hold (\d+)\? They are $", prompt)[1]
    chain, source = [], value
    assert len({name for name, _ in assignments}) == 2 * keys  # two chains, no name in both
    for _ in range(keys):  # follow the value from assignment to assignment
        follows = [name for name, src in assignments if src == source]
        assert len(follows) == 1
        chain.append(follows[0])
        source = f"VAR {follows[0]}"
    assert not [name for name, src in assignments if src == source]  # the chain ends there
    assert answer == " ".join(chain) + "." and len(chain) == keys
    positions = [prompt.index(f"VAR {name} =") for name in chain]
    assert positions == sorted(positions)  # each assignment after the one it copies
    assert "".join(c for c, scored in zip(answer, mask) if scored) == "".join(chain) + "."
    assert list(recalled(Oracle(wrong=(2,)), prompt, answer, mask, "cpu")) == [True] * (keys - 1) + [False]
