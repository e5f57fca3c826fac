"""--task multivalue (RULER's multi-value needle, Hsieh et al., 2024): the prompt holds every value
under one name, the answer lists them in the order they appear, and teacher-forced scoring counts a
value only when all its digits are right."""

import random
import re

import numpy as np
import pandas as pd
import pytest
import torch
from torch import nn

from poscli.data.tokens import encode
from poscli.evaluation import tasks
from poscli.evaluation.tasks.multivalue import multivalue_prompt, score
from tests.cli.test_cli import TINY, poscli
from tests.conftest import cli_workspace


@pytest.mark.parametrize("length, values", [(160, 1), (400, 4), (2000, 8)])
def test_the_prompt_hides_every_value_under_one_name_and_the_answer_lists_them_in_order(length, values):
    prompt, answer = multivalue_prompt(length, values, random.Random(length))
    assert len(prompt) == length
    found = re.findall(r"The (\w+) pass key is (\d+)\. ", prompt)
    assert len(found) == values and len({name for name, _ in found}) == 1
    assert answer == ", ".join(value for _, value in found) + "." and len(set(found)) == values
    assert prompt.endswith(f"What are all the {found[0][0]} pass keys? The {found[0][0]} pass keys are ")


class Oracle(nn.Module):
    """Predicts the true next byte of the sequence it is given (teacher forcing makes that the
    answer), except at the positions in ``wrong``, counted back from the end."""

    def __init__(self, wrong=()):
        super().__init__()
        self.wrong = wrong

    def forward(self, tokens):  # (1, T) -> (1, T, 256)
        following = torch.cat([tokens[:, 1:], tokens[:, :1]], dim=1)
        for back in self.wrong:
            following[0, -1 - back] = (following[0, -1 - back] + 1) % 256
        return nn.functional.one_hot(following, 256).float()


def test_an_oracle_recalls_every_value_and_one_wrong_digit_loses_exactly_that_value():
    rng = random.Random(0)
    cells = [multivalue_prompt(300, 3, rng) for _ in range(4)]
    prompts, answers = [p for p, _ in cells], [a for _, a in cells]
    exact, recall = score(Oracle(), prompts, answers, "cpu")
    assert exact.all() and (recall == 1).all()
    # the prediction of the answer's last token (the stop) is at back 1; of the last value's last digit, back 2
    exact, recall = score(Oracle(wrong=(2,)), prompts, answers, "cpu")
    assert not exact.any() and np.allclose(recall, 2 / 3)
    exact, recall = score(Oracle(wrong=(1,)), prompts, answers, "cpu")  # the stop alone: every value recalled
    assert not exact.any() and (recall == 1).all()
    assert len(encode(answers[0])) == len(answers[0])


@pytest.mark.slow
def test_multivalue_runs_through_poscli_eval_and_a_recipe_counts_it_done(tmp_path_factory):
    corpus, results = cli_workspace(tmp_path_factory, "multivalue")
    trained = poscli("train", "--pe", "alibi", "--name", "mv", "--data", str(corpus), "--steps", "2", *TINY,
                     "--results", str(results))  # fmt: skip
    assert trained.returncode == 0, trained.stderr
    done = poscli("eval", "mv", "--task", "multivalue", "--lengths", "128,256", "--trials", "3", "--keys", "2",
                  "--results", str(results), "--quiet")  # fmt: skip
    assert done.returncode == 0, done.stderr
    table = pd.read_csv(results / "multivalue.csv")
    assert list(table["length"]) == [128, 256] and (table["values"] == 2).all() and (table["trials"] == 3).all()
    assert table["recall"].between(0, 1).all() and (table["ci_low"] <= table["accuracy"]).all()
    assert (results / "multivalue.png").exists() and (results / "multivalue.md").exists()
    task = tasks.get("multivalue")
    assert task.owns(table) and task.evaluated(table, "mv", {"lengths": "128,256", "keys": 2})
    assert not task.evaluated(table, "mv", {"lengths": "128,512", "keys": 2})
