"""poscli extend: the library and the CLI."""

import json
import os

import pandas as pd
import pytest
import torch

from poscli import runs
from poscli.config import ModelConfig
from poscli.model import GPT
from tests.conftest import tiny_config
from tests.test_cli import TINY, poscli


def test_position_interpolation_equals_the_parent_at_interpolated_positions():
    """PI (Chen et al., 2023) is RoPE at position m / s: check it through the whole model."""
    parent = GPT(tiny_config("rope")).eval()
    s = 4.0
    extended_config = ModelConfig.from_dict({**parent.config.to_dict(), "rope_scaling": {"method": "pi", "factor": s, "original_length": 32, "options": {}}})
    extended = GPT(extended_config).eval()
    extended.load_state_dict(parent.state_dict())
    tokens = torch.randint(0, 256, (2, 100))
    with torch.no_grad():
        torch.testing.assert_close(extended(tokens), parent(tokens, positions=torch.arange(100) / s), rtol=1e-4, atol=1e-4)


@pytest.fixture(scope="module")
def rope_run(tmp_path_factory):
    from tests.conftest import write_text_corpus

    base = tmp_path_factory.mktemp("extend")
    corpus = write_text_corpus(base / "corpus", documents=12, words=1200)
    results = base / "results"
    for pe in ("rope", "alibi"):
        done = poscli("train", "--pe", pe, "--data", str(corpus), "--steps", "4", "--results", str(results), *TINY)
        assert done.returncode == 0, done.stderr
    return results


def test_extend_records_parent_method_factor_options_and_finetuning(rope_run):
    done = poscli("extend", "rope", "--method", "yarn", "--target", "256", "--steps", "3", "--beta-fast", "16",
                  "--results", str(rope_run), "--quiet")
    assert done.returncode == 0, done.stderr
    folder = rope_run / "runs" / "rope+yarn-x8"
    config = json.loads((folder / "config.json").read_text())
    assert config["parent"] == "rope" and config["status"] == "finished" and config["steps_done"] == 3
    extension = config["extension"]
    assert extension["method"] == "yarn" and extension["factor"] == 8 and extension["target"] == 256
    assert extension["options"] == {"beta_fast": 16.0, "beta_slow": 1.0}
    assert extension["finetune"]["steps"] == 3 and extension["finetune"]["length"] == 128  # min(target, 4 x 32)
    assert config["model"]["rope_scaling"]["method"] == "yarn" and config["model"]["train_length"] == 128
    assert config["label"] == "rope +yarn x8, 3 steps at 128"
    # fine-tuning moved the weights away from the parent's
    parent, child = runs.load_weights(rope_run / "runs" / "rope"), runs.load_weights(folder)
    assert any(not torch.equal(parent[k], child[k]) for k in parent)


def test_extend_without_training_keeps_the_weights_and_eval_labels_it(rope_run):
    done = poscli("extend", "rope", "--method", "pi", "--target", "128", "--steps", "0", "--name", "rope-pi0",
                  "--results", str(rope_run), "--quiet")
    assert done.returncode == 0, done.stderr
    parent, child = runs.load_weights(rope_run / "runs" / "rope"), runs.load_weights(rope_run / "runs" / "rope-pi0")
    assert all(torch.equal(parent[k], child[k]) for k in parent)
    evaluated = poscli("eval", "rope-pi0", "--results", str(rope_run), "--quiet", "--table", "extended")
    assert evaluated.returncode == 0, evaluated.stderr
    table = pd.read_csv(rope_run / "extended.csv")
    assert set(table["length"]) == {32, 128}  # default lengths: original and target
    assert set(table["label"]) == {"rope +pi x4, no fine-tuning"}
    assert (table["ppl"] > 1).all()


def test_dynamic_ntk_run_evaluates_at_several_lengths(rope_run):
    done = poscli("extend", "rope", "--method", "dynamic-ntk", "--target", "256", "--steps", "0", "--name", "rope-dyn",
                  "--results", str(rope_run), "--quiet")
    assert done.returncode == 0, done.stderr
    evaluated = poscli("eval", "rope-dyn", "--lengths", "32,64,256", "--results", str(rope_run), "--quiet", "--table", "dyn")
    assert evaluated.returncode == 0, evaluated.stderr
    table = pd.read_csv(rope_run / "dyn.csv")
    assert len(table) == 3 and table["ppl"].notna().all()


EXTEND_ERRORS = [
    (["rope", "--method", "longrope", "--target", "1k"], "choose one of: default, pi, ntk, dynamic-ntk, yarn, llama3, base"),
    (["alibi", "--method", "yarn", "--target", "1k"], "uses --pe alibi"),
    (["rope", "--method", "yarn", "--target", "16"], "is not longer than the run's train length 32"),
    (["rope", "--method", "pi", "--target", "1k", "--beta-fast", "8"], "--method pi does not take --beta-fast"),
    (["rope", "--method", "base", "--target", "1k", "--steps", "0"], "add e.g. --rope-base 500000"),
    (["rope", "--method", "yarn", "--target", "1q"], "--target: '1q' is not a length"),
    (["rope", "--method", "yarn", "--target", "1k", "--factor", "0.5"], "--factor must be at least 1"),
    (["nope", "--method", "yarn", "--target", "1k"], "no run named 'nope'"),
    (["rope-pi0", "--method", "yarn", "--target", "1k"], "is already extended"),
]


@pytest.mark.parametrize("args, message", EXTEND_ERRORS, ids=[" ".join(a) for a, _ in EXTEND_ERRORS])
def test_extend_errors_are_one_line_exit_2_and_write_nothing(rope_run, args, message):
    if args[0] == "rope-pi0" and not (rope_run / "runs" / "rope-pi0").exists():
        pytest.skip("needs the run made by test_extend_without_training_keeps_the_weights_and_eval_labels_it")
    before = sorted(p.name for p in (rope_run / "runs").iterdir())
    done = poscli("extend", *args, "--results", str(rope_run))
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], done.stderr
    assert sorted(p.name for p in (rope_run / "runs").iterdir()) == before
