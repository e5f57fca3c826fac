"""A real single-node Slurm in the test suite: the fixture starts Debian's ``munged`` (unless one
runs), ``slurmctld`` and ``slurmd`` with a configuration for this host in a temporary folder, and
stops what it started. ``.ci/run`` installs the packages, so CI runs these tests; elsewhere they are
skipped with a one-line reason, except where ``CI`` is set, where a missing Slurm is a failure."""

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

from poscli.study.status import record_job
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
    host = socket.gethostname()
    memory = int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**20 * 0.8)
    controller, node = _free_ports(2)
    return f"""ClusterName=poscli-test
SlurmctldHost={host}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
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
    for daemon in ("slurmctld", "slurmd"):
        subprocess.run([daemon, "-f", str(conf)], check=True, env=env)
    deadline = time.monotonic() + 60
    while "idle" not in subprocess.run(["sinfo", "-h", "-o", "%t"], capture_output=True, text=True, env=env).stdout:
        assert time.monotonic() < deadline, (folder / "slurmctld.log").read_text()[-2000:]
        time.sleep(0.5)
    yield env
    subprocess.run(["scancel", "--user", "root"], env=env)
    for pid_file in ("slurmd.pid", "slurmctld.pid"):
        if (folder / pid_file).exists():
            os.kill(int((folder / pid_file).read_text()), signal.SIGTERM)
    if started_munge:
        subprocess.run(["pkill", "-x", "munged"])


@pytest.mark.slow
def test_a_recipe_runs_as_slurm_jobs_with_its_settings_to_its_report(slurm, tmp_path_factory, monkeypatch):
    """Each step an sbatch job with the request given as flags; the recipe completes to its report,
    a finished run is not submitted again, and the missing accounting is said once."""
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
    assert json.loads((results / "runs" / "j-rope" / "config.json").read_text())["status"] == "finished"
    again = poscli("run", str(recipe), "--results", str(results), *asked)
    assert again.returncode == 0 and "started" not in again.stderr, again.stderr[-2000:]
    listed = poscli("run", str(recipe), "--results", str(results), "--status")
    assert listed.returncode == 0 and "done        train-j-rope" in listed.stderr, listed.stderr[-2000:]
    sleeper = subprocess.run(["sbatch", "--parsable", "--wrap", "sleep 120"], capture_output=True, text=True,
                             env=slurm, check=True).stdout.strip().split(";")[0]  # fmt: skip
    (results / "jobs.csv").unlink()  # the evaluation is to do again; say it was submitted as that job
    record_job(results / "logs", "eval-jobs", sleeper, "slurm")
    queued = poscli("run", str(recipe), "--results", str(results), "--status")
    subprocess.run(["scancel", sleeper], env=slurm)
    assert re.search(rf"(pending|running)\s+eval-jobs  job {sleeper}", queued.stderr), queued.stderr[-2000:]
