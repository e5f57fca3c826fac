"""Data-parallel training: two gloo processes on this CPU equal one process with the same global batch.

These run the README's commands: `torchrun --nproc-per-node 2 -m poscli train ...`,
`poscli train --nproc 2 ...` and `torchrun ... -m poscli train --resume NAME`.
"""

import json
import os
import shutil
import signal
import subprocess
import sys

import pytest
import torch
from safetensors.torch import load_file

from tests.cli.test_cli import poscli
from tests.conftest import cli_workspace

TINY = "--pe alibi --layers 1 --width 32 --heads 4 --train-length 32 --batch-size 8 --warmup 2 --steps 40".split()
TINY += "--checkpoint-every 10 --quiet".split()
TORCHRUN = shutil.which("torchrun", path=os.path.dirname(sys.executable)) or "torchrun"


@pytest.fixture(scope="module")
def single(tmp_path_factory):
    corpus, results = cli_workspace(tmp_path_factory, "ddp")
    done = poscli("train", *TINY, "--data", str(corpus), "--results", str(results), "--name", "single")
    assert done.returncode == 0, done.stderr
    return corpus, results


def weights(results, name):
    return load_file(str(results / "runs" / name / "model.safetensors"))


def losses(results, name):
    return [json.loads(line)["loss"] for line in (results / "runs" / name / "metrics.jsonl").read_text().splitlines()]


def assert_equivalent(results, name):
    one, two = weights(results, "single"), weights(results, name)
    for key in one:
        torch.testing.assert_close(two[key], one[key], rtol=1e-5, atol=1e-5, msg=lambda m, key=key: f"{key}: {m}")
    assert losses(results, name) == pytest.approx(losses(results, "single"), abs=2e-4)


@pytest.mark.slow
def test_two_gloo_processes_equal_one_process(single):
    corpus, results = single
    done = subprocess.run(
        [
            TORCHRUN,
            "--nproc-per-node",
            "2",
            "-m",
            "poscli",
            "train",
            *TINY,
            "--data",
            str(corpus),
            "--results",
            str(results),
            "--name",
            "torchrun",
        ],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    config = json.loads((results / "runs" / "torchrun" / "config.json").read_text())
    assert config["environment"]["processes"] == 2 and config["train"]["batch_size"] == 8
    assert_equivalent(results, "torchrun")
    assert done.stdout.count("runs/torchrun") == 1, "only rank 0 prints"


@pytest.mark.slow
def test_nproc_shortcut_launches_torchrun(single):
    corpus, results = single
    done = poscli(
        "train", *TINY, "--data", str(corpus), "--results", str(results), "--name", "shortcut", "--nproc", "2"
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads((results / "runs" / "shortcut" / "config.json").read_text())["environment"]["processes"] == 2
    assert_equivalent(results, "shortcut")


@pytest.mark.slow
def test_a_single_process_run_resumes_under_torchrun(single):
    corpus, results = single
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "poscli",
            "train",
            *TINY,
            "--steps",
            "200",
            "--data",
            str(corpus),
            "--results",
            str(results),
            "--name",
            "moved",
        ],
        stderr=subprocess.PIPE,
        text=True,
    )
    from tests.training.test_resume import wait_for_step

    wait_for_step(results, "moved", 30, process)
    process.send_signal(signal.SIGTERM)
    process.communicate(timeout=60)
    assert process.returncode == 143
    done = subprocess.run(
        [
            TORCHRUN,
            "--nproc-per-node",
            "2",
            "-m",
            "poscli",
            "train",
            "--resume",
            "moved",
            "--results",
            str(results),
            "--quiet",
        ],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    steps = [
        json.loads(line)["step"] for line in (results / "runs" / "moved" / "metrics.jsonl").read_text().splitlines()
    ]
    assert steps == list(range(10, 201, 10))
