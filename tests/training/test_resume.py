"""Nothing lost: checkpoints, resume after SIGKILL, SIGINT/SIGTERM, determinism, safe and atomic files."""

import json
import signal
import subprocess
import sys
import time

import pytest
import torch
from safetensors.torch import load_file

from tests.cli.test_cli import TINY, poscli
from tests.conftest import cli_workspace

RUN = [*TINY, "--steps", "400", "--checkpoint-every", "25"]


@pytest.fixture(scope="module")
def corpus_and_reference(tmp_path_factory):
    """A small corpus and one uninterrupted run to compare with."""
    corpus, results = cli_workspace(tmp_path_factory, "resume")
    done = poscli(
        "train", "--pe", "rope", "--data", str(corpus), "--results", str(results), "--name", "reference", *RUN
    )
    assert done.returncode == 0, done.stderr
    return corpus, results


def metrics(results, name):
    lines = (results / "runs" / name / "metrics.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines]


def start(corpus, results, name, *extra):
    args = [
        sys.executable,
        "-m",
        "poscli",
        "train",
        "--pe",
        "rope",
        "--data",
        str(corpus),
        "--results",
        str(results),
        "--name",
        name,
        *RUN,
        *extra,
    ]
    return subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def wait_for_step(results, name, step, process, timeout=60):
    """Block until the run has logged ``step`` (or finished)."""
    path = results / "runs" / name / "metrics.jsonl"
    deadline = time.time() + timeout
    while time.time() < deadline and process.poll() is None:
        if path.exists() and any(
            json.loads(line)["step"] >= step for line in path.read_text().splitlines() if line.strip()
        ):
            return
        time.sleep(0.02)


def stopped_then_resumed(argv: list, results, name: str, resume_argv: list, step: int = 50) -> None:
    """``poscli *argv --name NAME`` stopped by SIGTERM after ``step`` (exit 143), then ``poscli *resume_argv``."""
    process = subprocess.Popen(
        [sys.executable, "-m", "poscli", *argv, "--name", name], stderr=subprocess.PIPE, text=True
    )
    wait_for_step(results, name, step, process)
    process.send_signal(signal.SIGTERM)
    process.communicate(timeout=60)
    assert process.returncode == 143
    done = poscli(*resume_argv)
    assert done.returncode == 0, done.stderr


def same_weights(results, a, b):
    first, second = (load_file(str(results / "runs" / n / "model.safetensors")) for n in (a, b))
    return first.keys() == second.keys() and all(torch.equal(first[k], second[k]) for k in first)


@pytest.mark.slow
@pytest.mark.parametrize("kill_at_step", [0, 130])
def test_sigkill_at_any_point_then_resume_equals_an_uninterrupted_run(corpus_and_reference, kill_at_step):
    corpus, results = corpus_and_reference
    name = f"killed-{kill_at_step}"
    process = start(corpus, results, name)
    if kill_at_step:
        wait_for_step(results, name, kill_at_step, process)
    else:  # as soon as the run folder exists: possibly before its first checkpoint
        while process.poll() is None and not (results / "runs" / name / "config.json").exists():
            time.sleep(0.005)
    process.send_signal(signal.SIGKILL)
    process.wait()

    done = poscli("train", "--resume", name, "--results", str(results), "--quiet")
    assert done.returncode == 0, done.stderr
    assert same_weights(results, "reference", name), "a resumed run must end with the uninterrupted run's weights"
    resumed, reference = metrics(results, name), metrics(results, "reference")
    assert [m["step"] for m in resumed] == list(range(10, 401, 10)), "every logged step exactly once"
    assert [m["loss"] for m in resumed] == [m["loss"] for m in reference]


@pytest.mark.slow
@pytest.mark.parametrize("signal_number, exit_code", [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_sigterm_and_sigint_save_a_checkpoint_and_say_how_to_resume(corpus_and_reference, signal_number, exit_code):
    corpus, results = corpus_and_reference
    name = f"signalled-{signal_number}"
    process = start(corpus, results, name)
    wait_for_step(results, name, 60, process)
    process.send_signal(signal_number)
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == exit_code, stderr
    assert f"resume with: poscli train --resume {name}" in stderr and "Traceback" not in stderr
    config = json.loads((results / "runs" / name / "config.json").read_text())
    assert config["status"] == "interrupted" and config["steps_done"] >= 60
    done = poscli("train", "--resume", name, "--results", str(results), "--quiet")
    assert done.returncode == 0, done.stderr
    assert same_weights(results, "reference", name)


@pytest.mark.slow
def test_the_same_seed_gives_the_same_loss_curve_and_the_run_records_its_environment(corpus_and_reference):
    corpus, results = corpus_and_reference
    done = poscli("train", "--pe", "rope", "--data", str(corpus), "--results", str(results), "--name", "again", *RUN)
    assert done.returncode == 0, done.stderr
    assert [m["loss"] for m in metrics(results, "again")] == [m["loss"] for m in metrics(results, "reference")]
    environment = json.loads((results / "runs" / "again" / "config.json").read_text())["environment"]
    assert (
        environment["torch"] == torch.__version__ and environment["device"] == "cpu" and environment["dtype"] == "fp32"
    )
    assert "poscli_commit" in environment


@pytest.mark.slow
def test_a_run_being_trained_is_not_resumed_or_replaced_by_another_process(corpus_and_reference):
    """Two processes on one run would each write its checkpoint over the other's: while one trains
    it (this test holds its lock, as train() does), resuming or replacing it is refused in one line,
    and `poscli runs` reads it as running; a run whose process was killed reads stopped."""
    from poscli.model import runs

    corpus, results = corpus_and_reference
    folder = results / "runs" / "reference"
    before = {path.name: path.read_bytes() for path in folder.iterdir() if path.is_file()}
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "status": "running"}))  # as a killed run leaves it
    try:
        assert "reference\trope\tstopped\t" in poscli("runs", "--results", str(results)).stdout
        with runs.training_alone(folder):
            assert "reference\trope\trunning\t" in poscli("runs", "--results", str(results)).stdout
            for args in (["--resume", "reference"], ["--pe", "rope", "--data", str(corpus), "--name", "reference",
                                                     "--replace", *RUN]):  # fmt: skip
                done = poscli("train", *args, "--results", str(results))
                assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, done.stderr
                assert "run 'reference' is being trained by another process now" in done.stderr
    finally:
        (folder / "config.json").write_bytes(before["config.json"])
    assert {path.name: path.read_bytes() for path in folder.iterdir() if path.is_file()} == before


@pytest.mark.slow
def test_resuming_with_a_different_config_names_the_differing_fields(corpus_and_reference):
    corpus, results = corpus_and_reference
    process = start(corpus, results, "changed")
    wait_for_step(results, "changed", 30, process)
    process.send_signal(signal.SIGTERM)
    process.communicate(timeout=60)
    done = poscli("train", "--resume", "changed", "--lr", "0.01", "--pe", "alibi", "--results", str(results))
    assert done.returncode == 2
    assert "lr 0.01 (the run has 0.001)" in done.stderr and "pe 'alibi' (the run has 'rope')" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


@pytest.mark.slow
def test_a_truncated_checkpoint_is_a_clear_error_naming_the_file(corpus_and_reference, tmp_path):
    import shutil

    _, results = corpus_and_reference
    run = tmp_path / "runs" / "damaged"
    shutil.copytree(results / "runs" / "reference", run)
    config = json.loads((run / "config.json").read_text())
    (run / "config.json").write_text(json.dumps({**config, "status": "interrupted"}))
    checkpoint = run / "checkpoint.safetensors"  # a finished run keeps none: a truncated one written here
    checkpoint.write_bytes((run / "model.safetensors").read_bytes()[:1000])
    done = poscli("train", "--resume", "damaged", "--results", str(tmp_path))
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert str(checkpoint) in done.stderr and "truncated or corrupt" in done.stderr


def test_a_finished_run_keeps_its_weights_not_its_optimizer_state_unless_asked(corpus_and_reference, tmp_path):
    """checkpoint.safetensors (weights, optimizer moments, sampler state) is for resuming; once a run
    has finished nothing resumes it, so it goes, unless --keep-optimizer keeps it."""
    corpus, results = corpus_and_reference
    assert not (results / "runs" / "reference" / "checkpoint.safetensors").exists()
    assert (results / "runs" / "reference" / "model.safetensors").exists()
    done = poscli("train", "--pe", "rope", "--data", str(corpus), "--results", str(tmp_path), "--name", "kept",
                  *TINY, "--steps", "3", "--keep-optimizer")  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "runs" / "kept" / "checkpoint.safetensors").exists()


def test_pickle_checkpoints_are_refused_without_being_opened(tmp_path):
    bait = tmp_path / "model.pt"
    bait.write_bytes(b"not even read")
    done = poscli("eval", str(bait), "--results", str(tmp_path))
    assert done.returncode == 2 and "never unpickles" in done.stderr


@pytest.mark.slow
def test_concurrent_writers_lose_no_rows(tmp_path):
    """Four processes merge rows into the same table at once; every row survives, and no lock file
    is left beside the table."""
    script = (
        "import sys\n"
        "from poscli.evaluation.perplexity_tables import write_tables\n"
        "i = int(sys.argv[1])\n"
        "rows = [dict(run=f'run{i}', label=f'run{i}', pe='none', train_length=32, corpus='c', protocol='stream', "
        "length=n,"
        " mode='nonoverlapping', ppl=2.0, ci_low=1.9, ci_high=2.1, bpb=1.0, loss=0.69, windows=1, spans=1, "
        "documents=1, tokens=n,"
        " eval_set='x', note='', evaluated='now') for n in (32, 64)]\n"
        f"write_tables({{'rows': rows}}, {str(tmp_path)!r}, 'shared')\n"
    )
    processes = [subprocess.Popen([sys.executable, "-c", script, str(i)]) for i in range(4)]
    assert all(p.wait() == 0 for p in processes)
    import pandas as pd

    table = pd.read_csv(tmp_path / "shared.csv")
    assert sorted(set(table["run"])) == sorted(f"run{i}" for i in range(4)) and len(table) == 8
    assert not list(tmp_path.glob("*.lock")), "the lock files stay out of the results (.locks/)"


@pytest.mark.slow
def test_an_interrupted_extension_resumes_to_the_same_weights(corpus_and_reference):
    corpus, results = corpus_and_reference
    extend = [
        "extend",
        "reference",
        "--method",
        "yarn",
        "--target",
        "128",
        "--steps",
        "300",
        "--results",
        str(results),
        "--quiet",
    ]
    done = poscli(*extend, "--name", "yarn-whole")
    assert done.returncode == 0, done.stderr
    stopped_then_resumed(
        extend, results, "yarn-cut", ["extend", "yarn-cut", "--resume", "--results", str(results), "--quiet"]
    )
    assert same_weights(results, "yarn-whole", "yarn-cut")
