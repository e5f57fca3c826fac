"""Parallel sweeps: every combination runs, a failure is reported and does not stop the others."""

import json
import os
import sys

import pytest

from poscli.study.sweep import Job, job_environments, run_jobs
from tests.cli.test_cli import poscli
from tests.conftest import cli_workspace

TINY = "--layers 1 --width 32 --heads 4 --train-length 32 --batch-size 4 --steps 8 --warmup 2".split()


@pytest.mark.slow
def test_a_sweep_trains_every_encoding_and_seed(tmp_path_factory):
    corpus, results = cli_workspace(tmp_path_factory, "sweep")
    done = poscli(
        "train",
        "--pe",
        "alibi,rope",
        "--seeds",
        "0,1",
        "--jobs",
        "2",
        *TINY,
        "--data",
        str(corpus),
        "--results",
        str(results),
    )
    assert done.returncode == 0, done.stderr
    for pe in ("alibi", "rope"):
        for seed in (0, 1):
            config = json.loads((results / "runs" / f"{pe}-s{seed}" / "config.json").read_text())
            assert (config["model"]["pe"], config["train"]["seed"], config["status"]) == (pe, seed, "finished")
            assert (results / "logs" / f"{pe}-s{seed}.log").exists()
    assert len(done.stdout.split()) == 4


def test_a_failed_job_is_reported_and_the_others_finish(tmp_path):
    jobs = [
        Job("broken", [sys.executable, "-c", "import sys; print('error: the corpus is gone'); sys.exit(2)"]),
        Job("fine", [sys.executable, "-c", "import time; time.sleep(0.5); print('ok')"]),
    ]
    lines = []
    outcomes = run_jobs(jobs, parallel=2, log_dir=tmp_path, report=lines.append)
    assert [o.ok for o in outcomes] == [False, True]
    assert outcomes[0].last_line() == "error: the corpus is gone"
    assert any(line.startswith("FAILED broken (exit 2): error: the corpus is gone") for line in lines)


def test_jobs_share_the_cores_or_get_a_gpu_each():
    cores = os.cpu_count()
    cpu = job_environments(4, parallel=2, gpus=0)
    assert all(env["OMP_NUM_THREADS"] == str(max(1, cores // 2)) and "CUDA_VISIBLE_DEVICES" not in env for env in cpu)
    gpu = job_environments(5, parallel=3, gpus=3)
    assert [env["CUDA_VISIBLE_DEVICES"] for env in gpu] == ["0", "1", "2", "0", "1"]


def test_child_processes_do_not_import_modules_from_the_current_folder(tmp_path, monkeypatch):
    """A file in the working folder named like a library poscli imports (typer.py, read by every command)
    is not imported by a recipe's or sweep's child process in its place (python -P)."""
    from poscli.study.sweep import run_commands

    (tmp_path / "typer.py").write_text("raise SystemExit('the folder copy of typer was imported')\n")
    monkeypatch.chdir(tmp_path)
    (outcome,) = run_commands([("version", ["--version"])], 1, tmp_path / "logs", report=lambda *_: None)
    assert outcome.ok, outcome.log.read_text()
    assert "poscli" in outcome.log.read_text()
