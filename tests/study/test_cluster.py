"""Slurm settings as flags and recipe keys (poscli.study.cluster.SlurmSettings): read in order
(flag, recipe, environment, default), checked in one line before anything is submitted, and written
by submitit's own sbatch writer as the #SBATCH lines a cluster user would type."""

import json

import pytest

from poscli.errors import PoscliError
from poscli.study.cluster import SlurmSettings, extra_parameters, minutes
from tests.conftest import poscli_in_process as poscli


@pytest.mark.parametrize(
    "text, expected",
    [("90", 90), ("1:30", 90), ("01:30:00", 90), ("1-00:00", 1440), ("2-12:00:00", 3600), ("0:00:30", 1), (None, 1440)],
)
def test_a_time_limit_reads_as_slurm_writes_it_in_whole_minutes_rounded_up(text, expected):
    assert minutes(text) == expected


@pytest.mark.parametrize("text", ["0", "abc", "1:75", "1:30:99", "-5", "1.5"])
def test_a_time_limit_slurm_would_not_read_is_one_line(text):
    with pytest.raises(PoscliError, match="give minutes"):
        minutes(text)


def test_flags_win_over_the_recipe_which_wins_over_the_environment(monkeypatch):
    monkeypatch.setenv("POSCLI_SLURM_PARTITION", "from-env")
    monkeypatch.setenv("POSCLI_SLURM_CPUS", "2")
    monkeypatch.setenv("POSCLI_SLURM_GPUS", "1")
    settings = SlurmSettings.resolve({"partition": "from-recipe", "account": "lab", "cpus": 8}, {"partition": "gpu"})
    assert (settings.partition, settings.account, settings.cpus, settings.gpus) == ("gpu", "lab", 8, "1")
    assert SlurmSettings.resolve({}, {}).partition == "from-env"


@pytest.mark.parametrize(
    "given, message",
    [
        ({"mem": "lots"}, "--mem 'lots': give a size"),
        ({"cpus": 0}, "--cpus 0: give a whole number of at least 1"),
        ({"gpus": "two"}, "--gpus 'two': give a whole number"),
        ({"sbatch": ["mail-type"]}, "--sbatch 'mail-type': write an sbatch option as KEY=VALUE"),
        ({"time": "forever"}, "--time 'forever'"),
    ],
)
def test_a_bad_setting_is_one_line_before_anything_is_submitted(given, message):
    with pytest.raises(PoscliError, match=message):
        SlurmSettings.resolve({}, given)


def test_the_settings_reach_the_sbatch_script_submitit_writes(tmp_path):
    """The AutoExecutor parameters, renamed as submitit's AutoExecutor renames them for its Slurm
    executor, give the sbatch script these #SBATCH lines and the setup line before the step."""
    slurm = pytest.importorskip("submitit.slurm.slurm")
    settings = SlurmSettings.resolve(
        {"account": "lab", "setup": ["module load cuda/12.4"]},
        {"partition": "gpu", "qos": "normal", "time": "1:30", "mem": "32G", "cpus": 8, "gpus": 1,
         "constraint": "a100", "sbatch": ["mail-type=END"]},
    )  # fmt: skip
    parameters = settings.executor_parameters("slurm")
    renamed = {"timeout_min": "time", "tasks_per_node": "ntasks_per_node"}
    native = {renamed.get(key, key.removeprefix("slurm_")): value for key, value in parameters.items()}
    script = slurm._make_sbatch_string(command="poscli step", folder=tmp_path, **native)
    wanted = ["--partition=gpu", "--account=lab", "--qos=normal", "--time=90", "--mem=32G", "--cpus-per-task=8"]
    wanted += ["--gpus-per-node=1", "--constraint=a100", "--mail-type=END", "--nodes=1", "--ntasks-per-node=1"]
    for line in wanted:
        assert f"#SBATCH {line}\n" in script, line
    assert script.index("module load cuda/12.4") < script.index("poscli step")
    assert extra_parameters(["mail-user=me@lab.org"]) == {"mail_user": "me@lab.org"}
    local = SlurmSettings.resolve({}, {"time": "15"}).executor_parameters("submitit-local")
    assert local == {"timeout_min": 15, "nodes": 1, "tasks_per_node": 1}  # a local job asks for no partition


RECIPE = """name = "slurm-keys"
[slurm]
account = "lab"
{line}
[[train]]
name = "r"
pe = "rope"
steps = 1
"""


def test_a_recipes_slurm_table_is_checked_at_dry_run_with_its_line(tmp_path):
    recipe = tmp_path / "r.toml"
    recipe.write_text(RECIPE.format(line='mem = "plenty"'))
    done = poscli("run", str(recipe), "--dry-run", "--results", str(tmp_path / "results"))
    assert done.returncode == 2 and "line 4: mem = 'plenty': give a size Slurm reads" in done.stderr, done.stderr
    recipe.write_text(RECIPE.format(line='queue = "short"'))
    done = poscli("run", str(recipe), "--dry-run", "--results", str(tmp_path / "results"))
    assert done.returncode == 2 and "[slurm] has no key 'queue'" in done.stderr, done.stderr
    recipe.write_text(RECIPE.format(line='time = "2:00:00"'))
    assert poscli("run", str(recipe), "--dry-run", "--results", str(tmp_path / "results")).returncode == 0
    local = poscli("run", str(recipe), "--dry-run", "--partition", "gpu", "--results", str(tmp_path / "results"))
    assert local.returncode == 2 and "--partition sets a Slurm job's request: add --launcher slurm" in local.stderr


def test_status_reads_each_steps_state_from_the_results_folder_and_its_log(tmp_path):
    """--status without a queue: done as the results folder says, failed with the log's last line,
    interrupted where the run resumes, to do otherwise (a job no longer queued is not running)."""
    from poscli.study.plan import Step
    from poscli.study.status import record_job, step_states

    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "train-b.log").write_text("run b: ...\nRuntimeError: CUDA out of memory\n\n")
    record_job(logs, "train-c", "999999", "slurm")  # long gone from any queue
    named = [("train-a", Step("train", "a", status="done", detail="trained")), ("train-b", Step("train", "b")),
             ("train-c", Step("train", "c", status="resume")), ("eval-t", Step("eval", "t"))]  # fmt: skip
    rows = step_states(named, logs)
    assert [state for _, state, _ in rows] == ["done", "failed", "interrupted", "to do"]
    assert rows[1][2] == "RuntimeError: CUDA out of memory"
    # a run a process trains now (a study run here) is running, not "interrupted"
    from poscli.model import runs

    def training(step) -> str | None:
        folder = tmp_path / "runs" / step.name
        return runs.training_progress(folder) if runs.in_training(folder) else None

    run = tmp_path / "runs" / "c"
    run.mkdir(parents=True)
    model, train = {"pe": "rope", "train_length": 32}, {"steps": 90, "batch_size": 4, "accumulate": 2}
    (run / "config.json").write_text(json.dumps({"name": "c", "model": model, "train": train}))
    # 128 tokens a step (the batch is global, whatever --accumulate) at the median speed, 32 tokens/s: 4 s
    (run / "metrics.jsonl").write_text(
        '{"step": 10, "loss": 3.1, "tokens_per_s": 30}\n{"step": 20, "loss": 2.9, "tokens_per_s": 32}\n'
        '{"step": 20, "heldout_loss": 3}\n{"step": 30, "loss": 2.8, "tokens_per_s": 900}\n'
    )
    with runs.training_alone(run):
        said = step_states(named, logs, training)[2][1:]
        assert said == ("running", "being trained now: step 30 of 90, about 4 min left")  # 60 steps x 4 s
    assert [state for _, state, _ in step_states(named, logs, training)][2] == "interrupted"


ARRAYS = """name = "arrays"
[defaults]
steps = 1
train_length = 32
[[train]]
name = "a-{pe}"
pe = ["rope", "sinusoidal"]
[[extend]]
runs = "a-rope"
name = "{run}+pi"
method = "pi"
target = 64
steps = 0
[[extend]]
runs = "a-*"
name = "{run}+sinks"
method = "sinks"
target = 128
steps = 0
[[eval]]
runs = ["a-*"]
table = "t"
lengths = "32"
"""


def test_a_study_is_submitted_as_one_array_per_phase_each_waiting_for_what_makes_its_inputs(tmp_path):
    """Training, then the extensions, then the evaluations; an evaluation needs the runs it names,
    an extension its parent; with
    --each, an evaluation per run. The [select] runs, while any is to do, are submitted alone."""
    from poscli.study.recipes import load_recipe
    from poscli.study.submit import Submission, inputs, phases

    (tmp_path / "r.toml").write_text(ARRAYS)
    recipe = load_recipe(tmp_path / "r.toml")
    submission = Submission(recipe, recipe, None, SlurmSettings(), 2, False, lambda line: None)
    planned = phases(submission, [])
    assert [(phase, [name for name, _ in named]) for phase, named in planned] == [
        ("train", ["train-a-rope", "train-a-sinusoidal"]),
        ("extend", ["extend-a-rope+pi", "extend-a-rope+sinks", "extend-a-sinusoidal+sinks"]),
        ("eval", ["eval-t"]),
    ]
    assert [inputs(step) for _, step in planned[1][1]] == [["a-rope"], ["a-rope"], ["a-sinusoidal"]]
    made = ["a-rope", "a-rope+pi", "a-rope+sinks", "a-sinusoidal", "a-sinusoidal+sinks"]
    assert sorted(inputs(planned[2][1][0][1])) == made
    each = phases(Submission(recipe, recipe, None, SlurmSettings(), 2, True, lambda line: None), [])
    assert [name for name, _ in each[-1][1]] == [f"eval-t-{run}" for run in recipe.evals[0].runs]
    assert all(step.runs == [name.removeprefix("eval-t-")] for name, step in each[-1][1])
    selecting = [recipe.train[0]]
    assert [phase for phase, _ in phases(submission, selecting)] == ["select"]


def test_a_requeued_job_resumes_its_run_and_does_not_train_a_finished_one_again(tmp_path):
    """A requeued training or extension job (SLURM_RESTART_COUNT > 0) resumes the run its folder
    holds, skips one that finished before the job was stopped, and starts one it never wrote."""
    import json

    from poscli.study.jobs import requeued_call

    call = {"kind": "train", "name": "r", "positional": [], "options": {}, "results": str(tmp_path), "resume": False}
    assert requeued_call(call) == call  # no run folder yet
    folder = tmp_path / "runs" / "r"
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps({"status": "interrupted", "steps_done": 225}))
    assert requeued_call(call) == call | {"resume": True}
    (folder / "config.json").write_text(json.dumps({"status": "finished", "steps_done": 600}))
    assert requeued_call(call) is None
    evaluation = call | {"kind": "eval", "name": "table"}
    assert requeued_call(evaluation) == evaluation  # an evaluation simply runs again


def test_a_job_that_left_the_queue_is_read_from_submitits_result_file(tmp_path):
    """Finished with its step's exit code, failed with its step's line, a traceback's last line for a
    job that raised; killed when it ran without a result; never ran when it has no output at all."""
    submitit = pytest.importorskip("submitit")
    from submitit.core.utils import cloudpickle_dump

    from poscli.study.submit import outcome

    logs = tmp_path / "logs"
    for job, result in (("7_0", ("success", (0, ""))), ("7_1", ("success", (2, "--pe 'ropee': did you mean rope?"))),
                        ("8", ("error", "Traceback ...\nRuntimeError: CUDA out of memory"))):  # fmt: skip
        paths = submitit.SlurmJob(folder=str(logs / "submitit"), job_id=job).paths
        paths.folder.mkdir(parents=True, exist_ok=True)
        cloudpickle_dump(result, paths.result_pickle)
    killed = submitit.SlurmJob(folder=str(logs / "submitit"), job_id="9").paths
    killed.stdout.write_text("started\n")
    assert outcome("7_0", logs) == (0, "")
    assert outcome("7_1", logs) == (2, "--pe 'ropee': did you mean rope?")
    assert outcome("8", logs) == (1, "RuntimeError: CUDA out of memory")
    assert outcome("9", logs)[1].startswith("the job ended without a result (killed")
    assert outcome("10", logs)[1].startswith("never ran: a job it waits for failed")


def test_detach_without_slurm_and_several_gpus_per_step_are_refused_in_one_line(tmp_path):
    recipe = tmp_path / "r.toml"
    recipe.write_text(RECIPE.format(line=""))
    done = poscli("run", str(recipe), "--detach", "--results", str(tmp_path / "results"))
    assert done.returncode == 2 and "--detach submits the study as Slurm jobs" in done.stderr, done.stderr
    with pytest.raises(PoscliError, match="--gpus 2: a recipe step is one process on one GPU"):
        SlurmSettings.resolve({}, {"gpus": 2})
