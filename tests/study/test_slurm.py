"""A real single-node Slurm in the test suite: the fixture starts Debian's ``munged`` (unless one
runs), ``slurmctld`` and ``slurmd`` with a configuration for this host in a temporary folder, and
stops what it started. ``.ci/run`` installs the packages, so CI runs these tests; elsewhere they are
skipped with a one-line reason, except where ``CI`` is set, where a missing Slurm is a failure."""

import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

import pandas as pd
import pytest

from poscli.study.status import record_job, submitted_jobs
from tests.conftest import cli_workspace
from tests.study.test_recipes import TWO_RUNS, write

DAEMONS = ("munged", "slurmctld", "slurmd", "sbatch", "squeue", "sinfo")
SBIN = os.pathsep.join(("/usr/sbin", "/usr/bin", os.environ.get("PATH", "")))


def _free_ports(count: int) -> list[int]:
    """``count`` distinct free ports (each held open until all are found, so none repeats)."""
    probes = [socket.socket() for _ in range(count)]
    for probe in probes:
        probe.bind(("127.0.0.1", 0))
    ports = [probe.getsockname()[1] for probe in probes]
    for probe in probes:
        probe.close()
    return ports


def _config(folder: Path) -> str:
    """slurm.conf for one node, this host, with every core; no accounting; a requeued job waits 10 s
    (``cred_expire``; 120 s by default) before it starts again."""
    host = socket.gethostname()
    memory = int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**20 * 0.8)
    controller, node = _free_ports(2)
    return f"""ClusterName=poscli-test
SlurmctldHost={host}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=cred_expire=10
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SwitchType=switch/none
ReturnToService=2
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
JobAcctGatherType=jobacct_gather/none
SlurmctldPidFile={folder}/slurmctld.pid
SlurmdPidFile={folder}/slurmd.pid
SlurmdSpoolDir={folder}/spool
StateSaveLocation={folder}/state
SlurmctldLogFile={folder}/slurmctld.log
SlurmdLogFile={folder}/slurmd.log
SlurmctldPort={controller}
SlurmdPort={node}
NodeName={host} CPUs={os.cpu_count()} RealMemory={memory} State=UNKNOWN
PartitionName=debug Nodes={host} Default=YES MaxTime=INFINITE State=UP
"""


@pytest.fixture(scope="module")
def slurm(tmp_path_factory):
    """SLURM_CONF of a single-node Slurm started for these tests (stopped after them)."""
    missing = [name for name in DAEMONS if shutil.which(name, path=SBIN) is None]
    if missing or os.geteuid() != 0:
        reason = (
            f"no single-node Slurm here ({', '.join(missing) or 'not root'}): .ci/run installs slurmctld, slurmd, munge"
        )
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)
    folder = tmp_path_factory.mktemp("slurm")
    (folder / "spool").mkdir()
    (folder / "state").mkdir()
    conf = folder / "slurm.conf"
    conf.write_text(_config(folder))
    env = {**os.environ, "SLURM_CONF": str(conf), "PATH": SBIN}
    started_munge = subprocess.run(["pgrep", "-x", "munged"], capture_output=True).returncode != 0
    if started_munge:
        Path("/run/munge").mkdir(parents=True, exist_ok=True)
        shutil.chown("/run/munge", "munge", "munge")
        subprocess.run(["su", "-s", "/bin/sh", "munge", "-c", "/usr/sbin/munged"], check=True, env=env)
    try:  # stopped however the tests end, a start that never became idle too: no daemon outlives them
        for daemon in ("slurmctld", "slurmd"):
            subprocess.run([daemon, "-f", str(conf)], check=True, env=env)
        deadline = time.monotonic() + 60
        while "idle" not in subprocess.run(["sinfo", "-h", "-o", "%t"], capture_output=True, text=True, env=env).stdout:
            assert time.monotonic() < deadline, (folder / "slurmctld.log").read_text()[-2000:]
            time.sleep(0.5)
        yield env
    finally:
        subprocess.run(["scancel", "--user", "root"], env=env)
        for pid_file in ("slurmd.pid", "slurmctld.pid"):
            if (folder / pid_file).exists():
                with contextlib.suppress(ProcessLookupError):  # a daemon that ended on its own
                    os.kill(int((folder / pid_file).read_text()), signal.SIGTERM)
        if started_munge:
            subprocess.run(["pkill", "-x", "munged"])


@pytest.mark.slow
def test_a_recipe_runs_as_slurm_job_arrays_with_dependencies_to_its_report(slurm, tmp_path_factory, monkeypatch):
    """The whole study submitted at once, each phase one array (``--jobs 2``: ``%2``) with the request
    given as flags, the evaluation waiting for the training jobs; the recipe completes to its report,
    a finished run is not submitted again, and no accounting warning is printed at each poll."""
    from tests.conftest import poscli_in_process as poscli

    for key in ("SLURM_CONF", "PATH"):
        monkeypatch.setenv(key, slurm[key])
    corpus, results = cli_workspace(tmp_path_factory, "slurm")
    recipe = write(tmp_path_factory.mktemp("slurm-recipe"), TWO_RUNS.format(corpus=corpus))
    asked = ("--launcher", "slurm", "--jobs", "2", "--partition", "debug", "--cpus", "1", "--mem", "2G", "--time", "15")
    done = poscli("run", str(recipe), "--results", str(results), *asked)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "started train-j-rope (job " in done.stderr and "finished eval-jobs" in done.stderr
    noisy = [line for line in done.stderr.splitlines() if "sacct" in line]
    assert len(noisy) <= 1, noisy  # said once, not at every poll
    assert set(pd.read_csv(results / "jobs.csv")["run"]) == {"j-rope", "j-alibi", "reference-3gram"}
    scripts = list((results / "logs" / "submitit").glob("*_submission.sh"))
    assert scripts and all(
        "#SBATCH --mem=2G" in p.read_text() and "#SBATCH --time=15" in p.read_text() for p in scripts
    )
    train, evaluation = sorted(scripts, key=lambda path: int(path.name.split("_")[0]))
    assert "#SBATCH --array=0-1%2\n" in train.read_text() and "--dependency" not in train.read_text()
    trained = [job for step, job in submitted_jobs(results / "logs").items() if step.startswith("train-")]
    assert f"#SBATCH --dependency=afterok:{':'.join(sorted(trained))}\n" in evaluation.read_text()
    assert "#SBATCH --kill-on-invalid-dep=yes" in evaluation.read_text()
    assert json.loads((results / "runs" / "j-rope" / "config.json").read_text())["status"] == "finished"
    again = poscli("run", str(recipe), "--results", str(results), *asked)
    assert again.returncode == 0 and "submitted" not in again.stderr, again.stderr[-2000:]
    listed = poscli("run", str(recipe), "--results", str(results), "--status")
    assert listed.returncode == 0 and "done        train-j-rope" in listed.stderr, listed.stderr[-2000:]
    sleeper = subprocess.run(["sbatch", "--parsable", "--wrap", "sleep 120"], capture_output=True, text=True,
                             env=slurm, check=True).stdout.strip().split(";")[0]  # fmt: skip
    (results / "jobs.csv").unlink()  # the evaluation is to do again; say it was submitted as that job
    record_job(results / "logs", "eval-jobs", sleeper, "slurm")
    queued = poscli("run", str(recipe), "--results", str(results), "--status")
    subprocess.run(["scancel", sleeper], env=slurm)
    assert re.search(rf"(pending|running)\s+eval-jobs  job {sleeper}", queued.stderr), queued.stderr[-2000:]


REQUEUE = """name = "requeue"
[gates]             # 600 steps of a 1-layer model on a toy corpus: the pipeline, not the science
three_gram = 99
[defaults]
layers = 1
width = 32
heads = 4
train_length = 32
batch_size = 4
steps = 600
warmup = 1
checkpoint_every = 25
data = "{corpus}"
pe = "rope"
[[train]]
name = "q-uninterrupted"
[[train]]
name = "q-requeued"
[[eval]]
runs = "q-*"
table = "requeue"
lengths = "32,64"
max_tokens = "512"
"""


def _until(condition, seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, f"waited {seconds:.0f} s for {what}"
        time.sleep(0.5)


def _steps_logged(results: Path, run: str) -> int:
    path = results / "runs" / run / "metrics.jsonl"
    return len(path.read_text().splitlines()) * 10 if path.exists() else 0  # a line every 10 steps


@pytest.mark.slow
def test_a_detached_study_finishes_with_no_driver_and_a_requeued_run_ends_with_the_uninterrupted_weights(
    slurm, tmp_path_factory, monkeypatch
):
    """--detach submits everything and returns; --status reads the queue; a training job sent the
    time-limit signal (SIGUSR2, as Slurm sends it 90 s before the limit) checkpoints, requeues itself
    and resumes, ending with the weights of the same run never stopped; the last job writes the
    report with no driver alive."""
    from safetensors.torch import load_file

    from tests.conftest import poscli_in_process as poscli

    for key in ("SLURM_CONF", "PATH"):
        monkeypatch.setenv(key, slurm[key])
    corpus, results = cli_workspace(tmp_path_factory, "slurm-requeue")
    recipe = str(write(tmp_path_factory.mktemp("requeue-recipe"), REQUEUE.format(corpus=corpus)))
    asked = ("--launcher", "slurm", "--jobs", "2", "--cpus", "1", "--mem", "2G", "--time", "15")
    detached = poscli("run", recipe, "--results", str(results), "--detach", *asked)
    assert detached.returncode == 0, detached.stderr[-3000:]
    assert not (results / "REPORT.md").exists(), "--detach waits for nothing"
    for line in ("submitted train: 2 jobs (array", "submitted eval: 1 job", "after them: it writes the summaries"):
        assert line in detached.stderr, detached.stderr[-2000:]
    assert f"poscli run {recipe} --status" in detached.stderr
    again = poscli("run", recipe, "--results", str(results), "--detach", *asked)  # while the jobs are queued
    assert again.returncode == 0 and "steps already in the queue are not submitted again" in again.stderr
    assert "submitted train" not in again.stderr and "submitted eval" not in again.stderr, again.stderr[-2000:]
    job = submitted_jobs(results / "logs")["train-q-requeued"]
    _until(lambda: _steps_logged(results, "q-requeued") >= 100, 120, "q-requeued to train 100 steps")
    listed = poscli("run", recipe, "--results", str(results), "--status")
    assert re.search(rf"running\s+train-q-requeued  job {job}", listed.stderr), listed.stderr[-2000:]
    assert re.search(r"pending\s+eval-requeue  job \d+", listed.stderr), listed.stderr[-2000:]
    assert re.search(r"pending\s+carry-on  job \d+", listed.stderr), listed.stderr[-2000:]

    subprocess.run(["scancel", "--signal=USR2", job], env=slurm, check=True)

    def requeued() -> bool:
        shown = subprocess.run(["scontrol", "show", "job", job], capture_output=True, text=True, env=slurm).stdout
        return "Restarts=1" in shown and "JobState=PENDING" in shown

    _until(requeued, 90, f"job {job} to be requeued")  # it starts again cred_expire (10 s here) later
    carry_on = submitted_jobs(results / "logs")["carry-on"]

    def finished() -> bool:
        return not subprocess.run(["squeue", "-h", "-j", carry_on], capture_output=True, text=True, env=slurm).stdout

    _until(finished, 300, "the carry-on job to end")
    assert (results / "REPORT.md").exists(), "the last job wrote the report"

    runs = results / "runs"
    log = (results / "logs" / "train-q-requeued.log").read_text()
    assert "resuming run q-requeued at step" in log, log[-2000:]
    interrupted = int(re.search(r"resuming run q-requeued at step (\d+)", log).group(1))
    assert 100 <= interrupted < 600, "stopped mid-run, resumed from its checkpoint, not from the start"
    logged = [json.loads(line)["step"] for line in (runs / "q-requeued" / "metrics.jsonl").read_text().splitlines()]
    assert logged == list(range(10, 601, 10)), "every logged step exactly once"
    first, second = (load_file(str(runs / name / "model.safetensors")) for name in ("q-uninterrupted", "q-requeued"))
    assert first.keys() == second.keys() and all((first[k] == second[k]).all() for k in first)
    assert set(pd.read_csv(results / "requeue.csv")["run"]) >= {"q-uninterrupted", "q-requeued"}
    final = poscli("run", recipe, "--results", str(results), "--status")
    assert final.stderr.count("done  ") == 3 and "carry-on" not in final.stderr, final.stderr[-2000:]
