"""Parallel sweeps: every combination runs, a failure is reported and does not stop the others."""

import json
import os
import sys

import pytest

from poscli.study.sweep import Job, job_environment, run_jobs
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


def test_a_job_stopped_by_a_signal_stops_the_pool(tmp_path):
    """One job exiting 130 (stopped by Ctrl-C where this process, started in the background, ignores
    SIGINT) stops the pool: the running job is sent SIGINT (and saves its checkpoint), the waiting
    one never starts, and the caller gets KeyboardInterrupt."""
    running = "\n".join([
        "import signal, time",
        "signal.signal(signal.SIGINT, signal.default_int_handler)  # as poscli train does, however it was started",
        "try:",
        "    time.sleep(30)",
        "except KeyboardInterrupt:",
        "    print('stopped'); raise SystemExit(130)",
    ])  # fmt: skip
    jobs = [
        Job("stopped", [sys.executable, "-c", "import sys, time; time.sleep(1); sys.exit(130)"]),
        Job("running", [sys.executable, "-c", running]),
        Job("waiting", [sys.executable, "-c", "print('started')"]),
    ]
    with pytest.raises(KeyboardInterrupt):
        run_jobs(jobs, parallel=2, log_dir=tmp_path, report=lambda line: None)
    assert (tmp_path / "running.log").read_text().strip() == "stopped"
    assert not (tmp_path / "waiting.log").exists()


def test_jobs_share_the_cores():
    env = job_environment(parallel=2)
    assert env["OMP_NUM_THREADS"] == str(max(1, (os.cpu_count() or 1) // 2)) and "CUDA_VISIBLE_DEVICES" not in env


def test_a_job_started_when_another_ends_takes_the_gpu_that_ended(tmp_path):
    """Two GPUs, two jobs at once: the long job keeps GPU 0, so the third job, started when the
    short one on GPU 1 ends, gets GPU 1 (round robin by index would put it beside the long one)."""
    show = "import os, time; time.sleep({}); print(os.environ['CUDA_VISIBLE_DEVICES'])"
    jobs = [
        Job(name, [sys.executable, "-c", show.format(wait)])
        for name, wait in (("long", 1.5), ("short", 0), ("next", 0))
    ]
    outcomes = run_jobs(jobs, parallel=2, log_dir=tmp_path, report=lambda line: None, gpus=2)
    assert [o.last_line() for o in outcomes] == ["0", "1", "1"]


def test_a_job_killed_by_sigkill_is_reported_as_the_out_of_memory_killer_leaves_it(tmp_path):
    jobs = [
        Job(
            "killed",
            [sys.executable, "-c", "import os, signal; print('step 10'); os.kill(os.getpid(), signal.SIGKILL)"],
        )
    ]
    lines = []
    (outcome,) = run_jobs(jobs, parallel=1, log_dir=tmp_path, report=lines.append)
    assert not outcome.ok and "out-of-memory" in lines[-1] and "--jobs" in lines[-1], lines


def test_child_processes_do_not_import_modules_from_the_current_folder(tmp_path, monkeypatch):
    """A file in the working folder named like a library poscli imports (typer.py, read by every command)
    is not imported by a recipe's or sweep's child process in its place (python -P)."""
    from poscli.study.sweep import run_commands

    (tmp_path / "typer.py").write_text("raise SystemExit('the folder copy of typer was imported')\n")
    monkeypatch.chdir(tmp_path)
    (outcome,) = run_commands([("version", ["--version"])], 1, tmp_path / "logs", report=lambda *_: None)
    assert outcome.ok, outcome.log.read_text()
    assert "poscli" in outcome.log.read_text()


def test_follow_gets_each_line_a_job_logs_while_it_runs_and_all_before_its_end_is_reported(tmp_path):
    """``poscli run --each --jobs N`` counts a chain's steps as they end from the lines its process
    logs; a line must reach ``follow`` while the job still runs (not only when it exits), every line
    once, and the last one even without a newline."""
    marker = tmp_path / "go"
    script = (
        "import pathlib, sys, time\n"
        "print('finished step-1', flush=True)\n"
        f"go, deadline = pathlib.Path({str(marker)!r}), time.time() + 30\n"
        "while not go.exists() and time.time() < deadline: time.sleep(0.05)\n"
        "if not go.exists(): sys.exit(3)\n"  # its first line never reached follow while it ran
        "print('finished step-2', flush=True)\n"
        "sys.stdout.write('finished step-3')\n"
    )
    events = []

    def follow(name, line):
        events.append((name, line))
        if line == "finished step-1":
            marker.touch()  # the job waits for this: it is read while the job runs

    (outcome,) = run_jobs(
        [Job("chain", [sys.executable, "-c", script])],
        parallel=1,
        log_dir=tmp_path,
        report=lambda line: events.append(("report", line)),
        follow=follow,
    )
    assert outcome.ok, outcome.log.read_text()
    followed = [line for name, line in events if name == "chain"]
    assert followed == ["finished step-1", "finished step-2", "finished step-3"]
    ended = next(i for i, (name, line) in enumerate(events) if name == "report" and line.startswith("finished chain"))
    assert ended > max(i for i, (name, _) in enumerate(events) if name == "chain")


def test_the_running_count_follows_the_jobs_so_the_last_one_can_take_the_freed_cores(tmp_path):
    """Two at a time, three jobs: the third starts when the second ends and reads 2 running; the
    first, still running after the third has ended, reads 1 (its chain's next step takes every core).
    Each starts with the share of a pair, and the count file is gone when the pool is done."""
    from poscli.core.device import RUNNING_JOBS_VARIABLE, threads_for

    done = tmp_path / "next-ended"
    read = (
        "import os, pathlib, time\n"
        f"count = pathlib.Path(os.environ[{RUNNING_JOBS_VARIABLE!r}])\n"
        "def now(): return count.read_text()\n"
    )
    first = read + (
        f"deadline = time.time() + 20\n"
        f"while not pathlib.Path({str(done)!r}).exists() and time.time() < deadline: time.sleep(0.05)\n"
        "while now() != '1' and time.time() < deadline: time.sleep(0.05)\n"
        "print(os.environ['OMP_NUM_THREADS'], now())\n"
    )
    nxt = read + f"print(os.environ['OMP_NUM_THREADS'], now()); pathlib.Path({str(done)!r}).touch()\n"
    jobs = [
        Job("first", [sys.executable, "-c", first]),
        Job("second", [sys.executable, "-c", read + "print(os.environ['OMP_NUM_THREADS'], now())"]),
        Job("next", [sys.executable, "-c", nxt]),
    ]
    outcomes = run_jobs(jobs, parallel=2, log_dir=tmp_path, report=lambda line: None)
    pair = str(threads_for(2))
    assert [o.last_line() for o in outcomes] == [f"{pair} 1", f"{pair} 2", f"{pair} 2"]
    assert not list(tmp_path.glob(".running-jobs*"))


def test_a_chain_takes_the_cores_the_other_chains_freed_before_each_step(tmp_path, monkeypatch):
    """``--each --jobs 2``: a chain's steps after the other chain ended (the count file says 1) run
    with every core, those before with half (torch's thread count at each step's start)."""
    import torch

    from poscli.core.device import RUNNING_JOBS_VARIABLE, threads_for
    from poscli.study import steps

    count = tmp_path / "running"
    count.write_text("2")
    monkeypatch.setenv(RUNNING_JOBS_VARIABLE, str(count))
    seen = []

    def step(kind, name, **_):
        seen.append(torch.get_num_threads())
        count.write_text("1")  # the other chain ends during this chain's first step

    monkeypatch.setattr(steps, "run_step", step)
    threads = torch.get_num_threads()
    try:
        chain = [(f"s-{n}", {"kind": "train", "name": n}) for n in ("first", "second")]
        assert steps.run_chain(chain, str(tmp_path)) == 0
    finally:
        torch.set_num_threads(threads)
    assert seen == [threads_for(2), threads_for(1)]
