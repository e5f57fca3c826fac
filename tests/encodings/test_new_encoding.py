"""The bar for a new encoding: ONE file and no other edit. A learned-bias encoding with one user
option, which needs no rescaling, trains, extends ("needs no rescaling"), evaluates and passes
every registry-wide test, both as a file dropped into poscli/encodings/ (with a hyphenated name)
and as a module outside the package (--pe module:Class)."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from tests.cli.test_cli import TINY
from tests.conftest import COPY, IN_PROCESS, module_outside, package_with, run_poscli

REPOSITORY = Path(__file__).resolve().parents[2]

NEW_ENCODING = '''"""A learned linear distance penalty per head, starting from a slope the user chooses."""

from dataclasses import dataclass

import torch
from torch import nn

from poscli.encodings import register
from poscli.encodings.base import PositionalEncoding
from poscli.errors import PoscliError


@dataclass(frozen=True)
class SlopeOptions:
    slope: float = 0.5  # every head's initial slope

    def __post_init__(self):
        if self.slope <= 0:
            raise PoscliError(f"--pe-option slope must be positive, got {self.slope}")


@register("learned-slope")
class LearnedSlope(PositionalEncoding):
    citation = "a test of the encoding interface"
    summary = "a learned per-head linear distance penalty"
    has_score_bias = True
    Options = SlopeOptions

    def __init__(self, config):
        super().__init__(config)
        self.slopes = nn.Parameter(torch.full((config.n_head,), float(self.options.slope)))  # (H,)

    def bias_of_distance(self, distance, layer):
        return -self.slopes[:, None] * distance  # distance (N,) -> (H, N): score_bias and the fast path follow
'''


def through_the_cli(pe: str, env: dict, corpus: Path, results: Path, cwd: Path) -> None:
    def poscli(*args):
        return run_poscli(*args, "--results", str(results), env=env, cwd=cwd)

    trained = poscli(
        "train", "--pe", pe, "-O", "slope=0.25", "--name", "slope", "--data", str(corpus), "--steps", "4", *TINY
    )
    assert trained.returncode == 0, trained.stderr
    config = json.loads((results / "runs" / "slope" / "config.json").read_text())
    assert config["model"]["pe"] == pe and config["model"]["pe_options"] == {"slope": 0.25}
    extended = poscli("extend", "slope", "--method", "yarn", "--target", "128")
    assert extended.returncode == 0 and "needs no rescaling" in extended.stderr, extended.stderr
    evaluated = poscli("eval", "slope", "--lengths", "32,128", "--max-tokens", "1k", "--no-reference", "--quiet")
    assert evaluated.returncode == 0, evaluated.stderr
    table = pd.read_csv(results / "ppl.csv")
    assert set(table["pe"]) == {pe} and table["ppl"].notna().all()
    assert (results / "runs" / "slope+yarn-x4").exists() is False, (
        "an encoding that needs no rescaling makes no new run"
    )
    refused = poscli("train", "--pe", pe, "-O", "slope=-1", "--data", str(corpus), "--steps", "1", *TINY)
    assert refused.returncode == 2 and "slope must be positive" in refused.stderr


def registry_tests(pe: str, env: dict, root: Path = REPOSITORY) -> None:
    """tests/encodings/test_encodings.py for ``pe`` alone, run from ``root`` (which holds poscli/ and tests/)."""
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            str(root / "tests" / "encodings" / "test_encodings.py"),
        ],
        capture_output=True,
        text=True,
        env={**env, "POSCLI_TEST_ENCODINGS": pe},
        cwd=root,
    )
    assert done.returncode == 0, done.stdout[-3000:]
    assert "passed" in done.stdout and "failed" not in done.stdout


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    from tests.conftest import write_text_corpus

    return write_text_corpus(tmp_path_factory.mktemp("new-encoding") / "corpus")


@pytest.mark.slow
def test_one_file_in_the_encodings_package_is_a_whole_new_encoding(corpus, tmp_path):
    """A copy of poscli with one file added to poscli/encodings/ and nothing else changed."""
    env = package_with(tmp_path, "encodings/learned_slope.py", NEW_ENCODING)
    shutil.copytree(REPOSITORY / "tests", tmp_path / "site" / "tests", ignore=shutil.ignore_patterns("__pycache__"))
    listed = run_poscli("encodings", env=env, cwd=tmp_path)
    assert "learned-slope" in listed.stdout and "options: slope=0.5; extend: needs no rescaling" in listed.stdout
    helped = run_poscli("train", "--help", env=env, cwd=tmp_path)
    assert "learned-slope" in helped.stdout
    through_the_cli("learned-slope", env, corpus, tmp_path / "results", tmp_path)
    copy_alone = {key: value for key, value in env.items() if key not in (IN_PROCESS, COPY)}
    registry_tests("learned-slope", {**copy_alone, "PYTHONPATH": str(tmp_path / "site")}, root=tmp_path / "site")


@pytest.mark.slow
def test_one_module_outside_the_package_is_a_whole_new_encoding(corpus, tmp_path):
    """The same class as --pe module:Class (the registry tests ran on it above, as a package file)."""
    env = module_outside(tmp_path, "slope_encoding", NEW_ENCODING)
    through_the_cli("slope_encoding:LearnedSlope", env, corpus, tmp_path / "results", tmp_path)
