"""Algorithmic tasks with an instance size (poscli/evaluation/algorithmic.py and one file each in
poscli/evaluation/tasks/): every answer against an independent computation from its question, the
instances the same for every run, and teacher-forced scoring against models that know the answer
(exact 1) or miss one token (exact 0, token accuracy (A-1)/A)."""

import functools
import json
import random

import numpy as np
import pytest
import torch

from poscli.data.tokens import encode
from poscli.errors import PoscliError
from poscli.evaluation import tasks
from poscli.evaluation.algorithmic import AlgorithmicTask, parse_sizes, score
from tests.cli.test_cli import TINY, poscli


def algorithmic() -> list[str]:
    return [name for name in tasks.REGISTRY.builtin_names() if isinstance(tasks.get(name), AlgorithmicTask)]


def left_to_right_mod5(question: str) -> int:
    tokens = [question[0]] + [question[i : i + 2] for i in range(1, len(question), 2)]
    return functools.reduce(lambda v, t: eval(f"({v}){t[0]}{t[1]}") % 5, tokens[1:], int(tokens[0]))


def flip_flop(question: str) -> str:
    writes = [question[i + 1] for i in range(0, len(question) - 1, 2) if question[i] == "w"]
    return writes[-1]


def tracked(question: str) -> str:
    statements, target = question.split("?")
    value = dict(s.split(":") for s in statements.split(";"))
    while target in value:
        target = value[target]
    return target


def recalled(question: str, queries: str) -> str:
    """Multi-query recall: as many queries as pairs, each a key of the pairs, each followed by its value."""
    values = {question[i]: question[i + 1] for i in range(0, len(question), 2)}
    assert len(queries) == len(values) and set(queries) <= set(values)
    return "".join(key + values[key] for key in queries)


EXPECTED = {  # task -> the answer computed from the question alone
    "copy": lambda q: q,
    "selective-copy": lambda q: q.replace(".", "") if q.count(".") * 2 == len(q) else "half blanks",
    "reverse": lambda q: q[::-1],
    "duplicate": lambda q: q + q,
    "sort": lambda q: "".join(sorted(q)),
    "parity": lambda q: str(sum(map(int, q)) % 2),
    "addition": lambda q: str(sum(map(int, q.split("+")))),
    "addition-reversed": lambda q: str(sum(int(p[::-1]) for p in q.split("+")))[::-1],
    "binary-addition": lambda q: format(sum(int(p, 2) for p in q.split("+")), "b"),
    "modular-arithmetic": lambda q: str(left_to_right_mod5(q)),
    "associative-recall": lambda q, a: recalled(q, a[::2]),  # the queries are given in the answer
    "flip-flop": lambda q: flip_flop(q[:-1]),
    "counting": lambda q: str(q.split("|")[-1].count("x")) if set(q) <= set("xo|") else "not x, o and |",
    "variable-tracking": tracked,
}


def test_every_reference_answer_names_a_registered_task():
    assert set(EXPECTED) <= set(algorithmic())  # a reference for each of these; a new task keeps the generic checks


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_every_answer_follows_from_its_question_and_the_instances_are_fixed(name):
    task = tasks.get(name)
    lengths = []
    for size in (1, 2, 5, 12):
        examples = task.examples(size, 20)
        assert examples == task.examples(size, 20), "the same instances for every run"
        for prompt, answer in examples:
            question = prompt[:-1]
            assert prompt.endswith("=") and "=" not in question and answer.endswith(".") and "." not in answer[:-1]
            expected = EXPECTED[name]
            truth = expected(question, answer[:-1]) if expected.__code__.co_argcount == 2 else expected(question)
            assert answer[:-1] == truth, (question, answer)
            assert prompt.isascii() and answer.isascii()
        lengths.append(max(len(p) + len(a) for p, a in examples))
        assert len({p for p, _ in examples}) > 1 or size == 1 or name == "flip-flop" and size < 2
    assert lengths == sorted(lengths) and lengths[-1] > lengths[0], "a larger size is a longer instance"


class Oracle(torch.nn.Module):
    """Logits that put the true next token first (teacher forcing shows it), except at ``miss``:
    (row, position) pairs where the second-best byte wins."""

    def __init__(self, miss=()):
        super().__init__()
        self.miss = set(miss)

    def forward(self, tokens):  # (B, T) -> (B, T, 256)
        logits = torch.zeros(*tokens.shape, 256)
        following = torch.roll(tokens, -1, dims=1)
        logits.scatter_(2, following[..., None], 1.0)
        for row, position in self.miss:
            logits[row, position, (following[row, position] + 1) % 256] = 2.0
        return logits


def test_scoring_is_exact_for_a_model_that_knows_the_answers_and_counts_a_missed_token():
    examples = tasks.get("addition").examples(3, 6) + tasks.get("addition").examples(1, 2)  # lengths differ
    exact, share = score(Oracle(), examples, "cpu")
    assert exact.all() and (share == 1).all()
    prompt, answer = examples[2]
    missed = (2, len(prompt) - 1 + 1)  # the prediction of the answer's second token
    exact, share = score(Oracle([missed]), examples, "cpu")
    assert not exact[2] and exact.sum() == len(examples) - 1
    assert share[2] == pytest.approx((len(answer) - 1) / len(answer))
    missed_prompt = (2, len(prompt) - 3)  # inside the prompt: not scored
    assert score(Oracle([missed_prompt]), examples, "cpu")[0].all()


def test_only_the_answer_tokens_a_task_scores_count_and_training_weighs_only_them():
    from poscli.config import TrainConfig
    from poscli.training.tasks import TaskTraining
    from tests.conftest import tiny_config

    recall = tasks.get("associative-recall")
    examples = recall.examples(3, 4)  # pairs "a1b2c3=", answer "b2a1c3.": the queried keys are given
    masks = [recall.scored(answer) for _, answer in examples]
    assert all(list(m) == [False, True] * 3 + [True] for m in masks)
    prompt, _ = examples[1]
    key, value = (1, len(prompt) - 1), (1, len(prompt))  # the predictions of the first key, then its value
    assert score(Oracle([key]), examples, "cpu", masks)[0].all()  # a given key missed: still exact
    exact, share = score(Oracle([value]), examples, "cpu", masks)
    assert not exact[1] and share[1] == pytest.approx(3 / 4)
    assert not score(Oracle([key]), examples, "cpu")[0][1]  # scored everywhere, the key would count
    config = TrainConfig(task="associative-recall", task_sizes="2-4")
    plan = TaskTraining.plan(config, tiny_config("rope", train_length=20))
    tokens, targets, weights = plan.batch(16, 20, torch.Generator().manual_seed(0), "cpu")
    for row in range(16):
        text = bytes(targets[row][weights[row] > 0].tolist()).decode()
        assert text[-1] == "." and text[:-1].isdigit()  # the values and the stop, no key


@pytest.mark.parametrize(
    "text, sizes", [("1-4", [1, 2, 3, 4]), ("8,2,4", [2, 4, 8]), (" 3 - 5 ", [3, 4, 5]), ("7", [7])]
)
def test_sizes_are_a_range_or_a_list(text, sizes):
    assert parse_sizes(text) == sizes


@pytest.mark.parametrize("text", ["0-4", "4-1", "a-b", "1,1", "", "2,-1"])
def test_bad_sizes_are_one_line(text):
    with pytest.raises(PoscliError, match="--sizes"):
        parse_sizes(text)


@pytest.mark.slow
def test_a_text_run_is_scored_by_size_through_the_cli(tmp_path, text_corpus):
    results = tmp_path / "results"
    trained = poscli(
        "train", *TINY, "--data", str(text_corpus), "--steps", "2", "--name", "plain", "--results", str(results)
    )
    assert trained.returncode == 0, trained.stderr
    done = poscli("eval", "plain", "--task", "reverse", "--sizes", "1-3,", "--results", str(results), "--quiet")
    assert done.returncode == 2 and "--sizes" in done.stderr and len(done.stderr.strip().splitlines()) == 1
    done = poscli(
        "eval", "plain", "--task", "reverse", "--sizes", "1-3", "--trials", "8", "--results", str(results), "--quiet"
    )
    assert done.returncode == 0, done.stderr
    import pandas as pd

    table = pd.read_csv(results / "reverse.csv")
    assert list(table["size"]) == [1, 2, 3] and (table["trials"] == 8).all() and not table["in_distribution"].any()
    assert ((table["ci_low"] <= table["accuracy"]) & (table["accuracy"] <= table["ci_high"])).all()
    assert "not trained on it" in (results / "reverse.md").read_text() and (results / "reverse.png").exists()
    rng = random.Random("reverse-2-0")
    assert tasks.get("reverse").example(2, rng) == tasks.get("reverse").examples(2, 1)[0]
    assert np.isfinite(table["token_accuracy"]).all()
    assert encode("=")[0] != encode(".")[0]


def test_a_task_batch_is_one_instance_a_row_with_the_loss_on_its_answer():
    from poscli.config import TrainConfig
    from poscli.training.tasks import TaskTraining
    from tests.conftest import tiny_config

    plan = TaskTraining.plan(TrainConfig(task="addition", task_sizes="1-3"), tiny_config("rope", train_length=16))
    tokens, targets, weights = plan.batch(64, 16, torch.Generator().manual_seed(0), "cpu")
    assert tokens.shape == targets.shape == weights.shape == (64, 16)
    assert torch.equal(tokens[:, 1:], targets[:, :-1])  # targets are the next tokens
    assert weights.mean().item() == pytest.approx(1.0)
    for row in range(64):
        text = bytes(tokens[row].tolist() + [targets[row, -1].item()]).rstrip(b"\0").decode()
        question, answer = text.split("=")
        assert answer == str(sum(map(int, question.split("+")))) + "."
        scored = (weights[row] > 0).nonzero().flatten().tolist()  # targets in the loss: exactly the answer
        assert bytes(targets[row, scored].tolist()).decode() == answer
    again = plan.batch(64, 16, torch.Generator().manual_seed(0), "cpu")
    assert all(torch.equal(a, b) for a, b in zip((tokens, targets, weights), again))
    every = TaskTraining.plan(
        TrainConfig(task="addition", task_sizes="1-3", task_loss="all"), tiny_config("rope", train_length=16)
    )
    _, targets, weights = every.batch(4, 16, torch.Generator().manual_seed(0), "cpu")
    assert ((weights > 0) == (targets != 0)).all()  # every instance token, no padding
    with pytest.raises(PoscliError, match="--task-loss"):
        TrainConfig(task="copy", task_loss="some").validate()


def test_a_task_mixed_into_text_ends_a_fraction_of_the_windows_in_a_whole_instance():
    from poscli.config import TrainConfig
    from poscli.data.tokens import decode
    from poscli.training.batches import sample_batch
    from poscli.training.tasks import TaskMix, training_mix
    from tests.conftest import tiny_config

    config = TrainConfig(mix="reverse:0.5", task_sizes="2-5", answer_loss=2.0)
    plan = training_mix(config, tiny_config("rope", train_length=32))
    assert isinstance(plan, TaskMix) and plan.sizes == (2, 3, 4, 5)
    stream = torch.from_numpy(encode("plain text without the marks " * 100))
    tokens, targets, weights = sample_batch(stream, 64, 32, torch.Generator().manual_seed(0), "cpu", plan)
    ended = 0
    for row in range(64):
        text = decode(torch.cat([tokens[row], targets[row, -1:]]))
        if "=" not in text:
            assert (weights[row] == weights.min()).all()  # text alone: no answer weight
            continue
        ended += 1
        question, answer = text.rsplit("=", 1)
        letters = question[-(len(answer) - 1) :]
        assert answer == letters[::-1] + "." and 2 <= len(letters) <= 5  # a whole instance, at the end
        assert decode(targets[row][weights[row] > weights.min()]) == answer  # its answer carries the weight
    assert 16 < ended < 48  # about half of 64
    with pytest.raises(PoscliError, match="mix in passkey or an algorithmic task"):
        training_mix(TrainConfig(mix="other:0.2"), tiny_config("rope", train_length=32))
    with pytest.raises(PoscliError, match="use --train-length"):
        training_mix(TrainConfig(mix="copy:0.2", task_sizes="1-40"), tiny_config("rope", train_length=32))


@pytest.mark.parametrize(
    "args, phrase",
    [
        (["--task", "passkey"], "is evaluated, not trained on"),
        (["--task", "copy", "--sizes", "1-40"], "use --train-length 81 or more"),
        (["--task", "copy", "--mix", "passkey:0.5"], "drop --mix"),
        (["--task", "copy", "--sizes", "0-3"], "--sizes"),
    ],
)
def test_a_task_that_cannot_be_trained_is_one_line(tmp_path, args, phrase):
    done = poscli("train", *TINY, *args, "--steps", "1", "--results", str(tmp_path))
    assert done.returncode == 2 and phrase in done.stderr and len(done.stderr.strip().splitlines()) <= 3
    assert not (tmp_path / "runs").exists()


@pytest.mark.slow
def test_a_tiny_model_masters_copy_at_its_sizes_and_is_scored_in_and_out_of_distribution(tmp_path):
    """The bar's commands at toy scale: train --task copy --sizes 1-4, then eval --sizes 1-8. A two-layer
    model learns to copy four letters in 200 Muon steps (0.995 exact when this test was written); the
    table marks sizes 1-4 in distribution."""
    results = tmp_path / "results"
    trained = poscli(
        "train", "--pe", "rope", "--layers", "2", "--width", "64", "--heads", "4", "--train-length", "12",
        "--batch-size", "32", "--steps", "200", "--warmup", "20", "--optimizer", "muon", "--lr", "0.01",
        "--task", "copy", "--sizes", "1-4",
        "--name", "copy4", "--results", str(results), "--quiet",
    )  # fmt: skip
    assert trained.returncode == 0, trained.stderr
    config = json.loads((results / "runs" / "copy4" / "config.json").read_text())
    assert config["train"]["task"] == "copy" and config["task_accuracy"]["exact"] >= 0.9, config["task_accuracy"]
    done = poscli("eval", "copy4", "--task", "copy", "--sizes", "1-8", "--trials", "20", "--results", str(results))
    assert done.returncode == 0, done.stderr
    import pandas as pd

    table = pd.read_csv(results / "copy.csv").set_index("size")
    assert list(table["in_distribution"]) == [True] * 4 + [False] * 4
    assert table.loc[[1, 2, 3, 4], "accuracy"].mean() >= 0.9
    assert "not mastered" not in (results / "copy.md").read_text().split("\n")[4]
    # exported, the same model evaluated as hf:DIR (its byte-level tokenizer) scores the same instances the same
    assert poscli("export", "copy4", str(tmp_path / "hf"), "--no-check", "--results", str(results)).returncode == 0
    done = poscli("eval", f"hf:{tmp_path / 'hf'}", "--task", "copy", "--sizes", "1-8", "--trials", "20",
                  "--table", "copy-hf", "--results", str(results))  # fmt: skip
    assert done.returncode == 0, done.stderr
    exported = pd.read_csv(results / "copy-hf.csv").set_index("size")
    assert list(exported["exact"]) == list(table["exact"]) and list(exported["in_distribution"]) == [False] * 8
    assert list(exported["token_accuracy"]) == list(table["token_accuracy"])


def test_the_markdown_keeps_the_numbers_of_runs_evaluated_before_the_last(tmp_path):
    """TABLE.md is written from the merged table: rows read back from the CSV (an empty note reads as
    NaN) show their accuracy, not n/a, beside the rows just evaluated."""
    task = tasks.get("copy")

    def rows(run: str, note: str = "") -> list[dict]:
        return [{"run": run, "label": run, "pe": "rope", "seed": 0, "task": "copy", "trained_sizes": "1-2",
                 "size": size, "in_distribution": size <= 2, "tokens": 5, "trials": 4, "exact": 3,
                 "accuracy": 0.75, "ci_low": 0.3, "ci_high": 0.95, "token_accuracy": 0.9, "note": note}
                for size in (1, 2, 3)]  # fmt: skip

    task.write(rows("first"), {}, tmp_path, "t")
    task.write(rows("second") + rows("learned", note="n/a: no positions there"), {}, tmp_path, "t")
    lines = {line.split(" | ")[0]: line for line in (tmp_path / "t.md").read_text().splitlines()}
    assert lines["| first"].count("0.75 [0.30, 0.95]") == 3 and "n/a" not in lines["| first"]
    assert lines["| second"].count("0.75 [0.30, 0.95]") == 3
    assert lines["| learned"].count("n/a") == 3
