"""The trust boundary: code a received run names (package.module:Class in its config.json) is not
imported from the current folder, where a file beside it would run by being there; --trust-code
imports it. Weights never run code (safetensors)."""

import json
import os
import subprocess
import sys

import pytest

MODULE = """
open("IMPORTED", "w").write("ran")
from poscli.encodings.base import PositionalEncoding
class Evil(PositionalEncoding):
    citation = summary = "x"
"""


@pytest.mark.slow
def test_a_received_run_naming_code_beside_it_does_not_import_it_unless_trusted(tmp_path):
    (tmp_path / "mod.py").write_text(MODULE)
    run = tmp_path / "results" / "runs" / "r"
    run.mkdir(parents=True)
    model = {"pe": "mod:Evil", "n_layer": 1, "n_head": 4, "d_model": 32, "train_length": 32}
    (run / "config.json").write_text(json.dumps({"name": "r", "model": model, "train": {}, "status": "finished"}))
    environment = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    command = [sys.executable, "-m", "poscli"]  # python -m puts the current folder first on the import path
    asked = ["eval", "r", "--lengths", "32", "--results", "results"]
    refused = subprocess.run([*command, *asked], cwd=tmp_path, env=environment, capture_output=True, text=True)
    assert refused.returncode == 2 and len(refused.stderr.strip().splitlines()) == 1, refused.stderr
    assert "'mod' is in the current folder" in refused.stderr and "--trust-code" in refused.stderr
    assert not (tmp_path / "IMPORTED").exists()
    trusted = subprocess.run([*command, "--trust-code", *asked], cwd=tmp_path, env=environment, capture_output=True,
                             text=True)  # fmt: skip
    assert (tmp_path / "IMPORTED").exists(), trusted.stderr  # imported (the run then has no weights: exit 2)
    assert "has no weights" in trusted.stderr
