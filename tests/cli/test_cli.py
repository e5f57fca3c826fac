"""The CLI end to end, and every documented error: one line, exit code 2, no traceback, no files."""

import dataclasses
import os
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from poscli import encodings
from poscli.evaluation import tasks
from tests.conftest import poscli_in_process

TINY = "--layers 1 --width 32 --heads 4 --train-length 32 --batch-size 4 --warmup 2 --quiet".split()


def poscli(*args, cwd=None):
    """``poscli ARGS``, in this process (``tests.conftest.poscli_in_process``)."""
    return poscli_in_process(*args, cwd=cwd)


def snapshot(folder):
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*")) if folder.exists() else []


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """Two tiny runs trained through the CLI on a small text corpus."""
    from tests.conftest import cli_workspace

    corpus, results = cli_workspace(tmp_path_factory, "cli")
    for pe in ("alibi", "learned"):
        done = poscli("train", "--pe", pe, "--data", str(corpus), "--steps", "6", "--results", str(results), *TINY)
        assert done.returncode == 0, done.stderr
        assert "held-out loss at length 32" in done.stderr
    return corpus, results


@pytest.mark.slow
def test_train_writes_a_run_folder_with_config_metrics_and_safetensors(trained):
    _, results = trained
    run = results / "runs" / "alibi"
    assert {"config.json", "metrics.jsonl", "model.safetensors"} <= {p.name for p in run.iterdir()}
    import json

    config = json.loads((run / "config.json").read_text())
    assert config["status"] == "finished" and config["steps_done"] == 6
    assert config["model"]["pe"] == "alibi" and config["model"]["train_length"] == 32
    assert config["data"]["heldout_documents"] >= 1 and config["environment"]["torch"]
    assert config["model"]["pe_options"] == {}, "alibi declares no options"
    assert len((run / "metrics.jsonl").read_text().splitlines()) >= 1


@pytest.mark.slow
def test_eval_writes_long_csv_and_markdown_pivot_and_keeps_earlier_rows(trained):
    _, results = trained
    first = poscli("eval", "alibi", "--lengths", "32,128", "--results", str(results), "--quiet")
    assert first.returncode == 0, first.stderr
    assert "alibi" in first.stdout and "128" in first.stdout
    table = pd.read_csv(results / "ppl.csv")
    assert set(table["length"]) == {32, 128}
    assert (table["ppl"] > 1).all() and (table["tokens"] > 0).all()
    assert (table["bpb"] - table["loss"] / 0.6931471805599453).abs().max() < 1e-9
    # bytes are the tokens: the per-byte interval is the perplexity interval in log2
    scored = table[table["tokens"] > 0]
    assert (scored["bytes"] == scored["tokens"]).all()
    assert (scored["bpb_low"] - np.log2(scored["ci_low"])).abs().max() < 1e-9 and (
        scored["bpb_high"] - np.log2(scored["ci_high"])
    ).abs().max() < 1e-9
    assert set(table["mode"]) == {"nonoverlapping"} and set(table[table["run"] == "alibi"]["train_length"]) == {32}

    second = poscli("eval", "learned", "--lengths", "32,128", "--results", str(results), "--quiet")
    assert second.returncode == 0, second.stderr
    table = pd.read_csv(results / "ppl.csv", keep_default_na=False, na_values=["nan", ""])
    assert len(table) == 6 and set(table["run"]) == {"alibi", "learned", "reference-3gram"}
    scored = table[table["tokens"] > 0]
    assert scored.groupby("run")["tokens"].nunique().max() == 1, "every length scores the same number of tokens"
    assert (
        scored["eval_set"].nunique() == 1
        and (scored["ci_low"] <= scored["ppl"]).all()
        and (scored["ppl"] <= scored["ci_high"]).all()
    )
    reference = table[table["run"] == "reference-3gram"]
    assert reference["ppl"].nunique() == 1, "the context-free reference is the same at every length"
    spans = pd.read_csv(results / "ppl_spans.csv")
    per_length = spans[spans["run"] == "alibi"].groupby("length")
    assert per_length["tokens"].sum().nunique() == 1 and per_length["span"].apply(tuple).nunique() == 1
    learned_long = table[(table["run"] == "learned") & (table["length"] == 128)].iloc[0]
    assert learned_long["note"].startswith("n/a") and pd.isna(learned_long["ppl"])
    pivot = (results / "ppl.md").read_text()
    assert "| alibi | alibi | 32 |" in pivot and "n/a" in pivot


@pytest.mark.slow
def test_a_run_whose_recorded_split_differs_is_refused_and_nothing_is_written(trained):
    import json
    import shutil

    _, results = trained
    corrupt = results / "runs" / "alibi-corrupt"
    shutil.copytree(results / "runs" / "alibi", corrupt)
    config = json.loads((corrupt / "config.json").read_text())
    config["name"] = "alibi-corrupt"
    config["data"]["heldout_sha1"] = sorted(
        config["data"]["heldout_sha1"][1:] + ["0123456789ab"]
    )  # one document swapped
    (corrupt / "config.json").write_text(json.dumps(config))
    try:
        before = snapshot(results)
        refused = poscli(
            "eval", "alibi-corrupt", "--lengths", "32", "--table", "split", "--results", str(results), "--quiet"
        )
        assert refused.returncode == 2 and refused.stderr.count("\n") == 1, refused.stderr
        assert "held out other documents" in refused.stderr and "--allow-split-mismatch" in refused.stderr
        assert snapshot(results) == before
        forced = poscli(
            "eval",
            "alibi-corrupt",
            "--lengths",
            "32",
            "--table",
            "split",
            "--allow-split-mismatch",
            "--results",
            str(results),
            "--quiet",
        )
        assert forced.returncode == 0, forced.stderr
    finally:
        shutil.rmtree(corrupt)
        for path in results.glob("split*"):
            path.unlink()


@pytest.mark.slow
def test_eval_scores_a_run_on_another_corpus_whole(trained, tmp_path):
    from tests.conftest import write_text_corpus

    _, results = trained
    other = write_text_corpus(tmp_path / "other", documents=5, words=300, seed=7)
    done = poscli(
        "eval",
        "alibi",
        "--data",
        str(other),
        "--lengths",
        "32,64",
        "--max-tokens",
        "2k",
        "--table",
        "other",
        "--results",
        str(results),
        "--quiet",
    )
    assert done.returncode == 0, done.stderr
    table = pd.read_csv(results / "other.csv")
    assert set(table["corpus"]) == {str(other)} and (table[table["run"] == "alibi"]["documents"] > 1).all()


@pytest.mark.slow
def test_an_existing_run_name_is_refused_with_the_ways_on_and_replace_starts_it_over(trained, tmp_path):
    """One rule for a run name that exists, default or given: refused (resume, --replace, or --name)."""
    import json
    import shutil

    corpus, results = trained
    scratch = tmp_path / "results"
    shutil.copytree(results / "runs" / "alibi", scratch / "runs" / "alibi")
    again = poscli("train", "--pe", "alibi", "--data", str(corpus), "--steps", "2", "--results", str(scratch), *TINY)
    assert again.returncode == 2 and "already exists" in again.stderr
    assert "poscli train --resume alibi" in again.stderr and "--replace" in again.stderr and "--name" in again.stderr
    assert sorted(p.name for p in (scratch / "runs").iterdir()) == ["alibi"], "no alibi-2 or any other new run"
    replaced = poscli(
        "train", "--pe", "alibi", "--data", str(corpus), "--steps", "2", "--replace", "--results", str(scratch), *TINY
    )
    assert replaced.returncode == 0, replaced.stderr
    assert json.loads((scratch / "runs" / "alibi" / "config.json").read_text())["steps_done"] == 2


ERRORS = [
    (
        ["eval", "alibi", "--task", "multivalue", "--keys", "0"],
        "--keys must be at least 1 for --task multivalue, got 0",
    ),
    (["eval", "alibi", "--task", "multivalue", "--trials", "0"], "--trials must be at least 1 for --task multivalue"),
    (["eval", "alibi", "--task", "passkey", "--keys", "0"], "--keys must be at least 1 for --task passkey, got 0"),
    (["train", "--pe", "rope", "--steps", "2", "--data-split", "test"], "--data-split reads the rows of a dataset"),
    (["extend", "alibi", "--method", "logn", "--target", "1k", "-M", "window"], "--method-option 'window': write KEY="),
    (["extend", "rope", "--method", "yarn", "--target", "1k", "--beta-fast", "x"], "--beta-fast 'x' is not a number"),
    (["extend", "rope", "--method", "yarn", "--target", "1k", "--beta-fast"], "'--beta-fast' is not an option"),
    (["extend", "rope", "--method", "self-extend", "--target", "1k", "--window", "nan"], "give a finite number"),
    (
        ["extend", "alibi", "--method", "logn", "--target", "1k", "-M", "w=x"],
        "--method logn does not take --w; it takes no options",
    ),
    (
        ["eval", "alibi", "--task", "bogus"],
        "unknown evaluation task 'bogus'; choose one of: " + ", ".join(tasks.names()),  # a new task file joins
    ),
    (
        ["train", "--pe", "rotary"],
        "choose one of: " + ", ".join(sorted(encodings.builtin_names())),  # a new encoding file joins
    ),
    (["eval", "missing-run"], "no run named 'missing-run'; runs in"),
    (["eval", "alibi", "learned", "alibi"], "run 'alibi' is given twice; give each run once"),
    (["inspect", "alibi", "learned", "alibi"], "run 'alibi' is given twice; give each run once"),
    (["eval", "alibi", "ALIBI_FOLDER"], "is given twice (as 'alibi' too); give each run once"),
    (["eval", "alibi", "--depths", "10,50"], "--depths is read by --task multiquery, passkey"),
    (["eval", "alibi", "--task", "copy", "--max-tokens", "4k"], "--max-tokens is read by --task inspect, perplexity"),
    (["eval", "alibi", "--task", "passkey", "--depths", "1,x"], "--depths '1,x': use percentages from 0 to 100"),
    (["eval", "alibi", "--sinks", "0"], "--sinks must be at least 1, got 0"),
    (["eval", "alibi", "--data", "no-such-file.txt"], "--data 'no-such-file.txt' is not"),
    (
        ["extend", "alibi", "--method", "continue", "--target", "1k", "--steps", "2", "--batch-size", "0"],
        "--batch-size must",
    ),
    (["eval", "alibbi"], "no run named 'alibbi' (did you mean alibi?); runs in"),
    (["train", "--pe", "alibii"], "unknown encoding 'alibii' (did you mean alibi?); choose one of"),
    (
        ["extend", "learned", "--method", "yran", "--target", "4k"],
        "unknown extension method 'yran' (did you mean yarn?)",
    ),
    (["eval", "alibi", "--task", "passky"], "unknown evaluation task 'passky' (did you mean passkey?)"),
    (["eval", "alibi", "--lengths", "1m"], "lengths up to"),
    (["eval", "alibi", "--lengths", "1m", "--protocol", "documents"], "the longest has"),
    (["eval", "alibi", "--lengths", "32,64", "--stride", "48"], "--stride 48 is longer than the length 32"),
    (
        ["eval", "alibi", "--data", "/no/such/corpus"],
        "is not 'passkey', 'shakespeare', 'stdlib', an existing file or folder",
    ),
    (["train", "--width", "30"], "not divisible by 4 heads"),
    (["train", "--data", "/no/such/corpus"], "is not 'passkey', 'shakespeare', 'stdlib', an existing file or folder"),
    (["train", "--device", "cuda:7"], "is not available on this machine"),
    (["train", "--train-length", "1000000"], "too few for --train-length"),
    (["train", "--name", "alibi"], "already exists"),
    (["train", "--batch-size", "0"], "--batch-size must be at least 1"),
    (["train", "--lr", "5"], "--lr must be between 0 and 1"),
    (["train", "--warmup", "-1"], "--warmup must be 0 or more"),
    (["train", "--minutes", "0"], "--minutes must be a positive number"),
    (["train", "--layers", "0"], "--layers must be a positive whole number"),
    (["train", "--heads", "3"], "not divisible by 3 heads"),
    (["train", "-O", "layout=diagonal"], "layout must be halves or interleaved"),
    (["train", "--pe", "shaw", "-O", "clip=0"], "clip must be at least 1"),
    (["train", "--pe", "shaw", "-O", "clip=many"], "shaw's clip is an int"),
    (["train", "--pe", "fox", "-O", "gate_bias=nan"], "--pe-option gate_bias=nan: give a finite number"),
    (["train", "-O", "base=inf"], "--pe-option base=inf: give a finite number"),
    (["train", "--sizes", "1-8"], "--sizes sets how a task is trained: add --task NAME"),
    (["train", "--task-loss", "all"], "--task-loss sets how a task is trained: add --task NAME"),
    (["train", "--task", "copy", "--sizes", "1-9999999999"], "sizes go up to 65536"),
    (["train", "--pe", "cope", "-O", "max_positions=1000000000000"], "max_positions must be from 2 to 1048576"),
    (["train", "--pe", "hybrid", "--layers", "2", "-O", "layers=rope@8;rope@8;none"], "the schedule has 3 entries"),
    (["tune", "rope", "--method", "self-extend", "--target", "1k", "--grid", "window=64,0"], "--window 0: --method"),
    (["tune", "rope", "--method", "yarn", "--target", "1k", "--grid", "beta_fast=32,nan"], "give a finite number"),
    (["train", "--pe", "alibi", "-O", "slope=1"], "--pe alibi has no option 'slope'"),
    (["train", "-O", "base"], "write KEY=VALUE"),
    (["train", "--mix", "passkey:2"], "F in (0, 1]"),
    (["train", "--checkpoint-every", "0"], "--checkpoint-every must be at least 1"),
    (["train", "-O", "rotary_fraction=0"], "rotary_fraction must be in (0, 1]"),
    (["train", "-O", "keep=2"], "keep must be between 0 and 1"),
    (["train", "--pe", "xpos", "-O", "rotary_fraction=0.5"], "rotary_fraction at 1 with --pe xpos"),
    (["train", "--pe", "xpos", "-O", "gamma=0"], "gamma must be positive"),
    (["train", "--random-positions", "100"], "--random-positions 100 is shorter than --train-length 256"),
    (["train", "--pe", "none", "--random-positions", "4k"], "--pe none reads no positions"),
    (["train", "--resume", "no-such-run"], "no run named 'no-such-run'"),
    (["train", "--resume", "alibi", "--name", "x"], "--name cannot be combined with --resume"),
    (["train", "--resume", "alibi", "--lr", "0.5"], "lr 0.5 (the run has 0.001)"),
    (["train", "--data", "EMPTY"], "has no non-empty text files"),
    (["train", "--data", "BINARY"], "binary files are skipped"),
    (["extend", "no-such-run", "--method", "yarn", "--target", "4k"], "no run named 'no-such-run'"),
    (["extend", "learned", "--method", "yarn", "--target", "4k"], "interpolate"),
    (
        ["extend", "learned", "--method", "interpolate", "--target", "4k", "--factor", "0.5"],
        "--factor must be at least 1",
    ),
    (["extend", "learned"], "--method and --target are required"),
    (["extend", "learned", "--resume", "--lr", "0.1"], "--resume continues 'learned' as it was configured; drop --lr"),
    (["eval", "alibi", "--task", "passkey", "--depths", "150"], "between 0 and 100"),
    (["eval", "alibi", "--table", "a b"], "may use only letters"),
    (["eval", "PICKLE"], "never unpickles"),
    (["train", "--results", "READONLY"], "check that the results folder is writable"),
]


# Usage errors (a value of the wrong form, an unknown option, a missing argument) are click's own:
# its usage line, a hint, and "Error: ...", exit code 2.
USAGE_ERRORS = [
    (["eval", "alibi", "--lengths", "1x"], "is not a list of lengths"),
    (["eval", "alibi", "--lengths", "0"], "is not a list of lengths"),
    (["train", "--eval-lengths", "0"], "is not a list of lengths"),
    (["eval", "alibi", "--protocol", "books"], "'books' is not one of 'stream', 'documents'"),
    (["train", "--steps", "abc"], "Invalid value for '--steps': give a whole number"),
    (["train", "--steps", "1.5"], "Invalid value for '--steps': give a whole number"),
    (["train", "--lr", "abc"], "Invalid value for '--lr': give a number"),
    (["train", "--dtype", "fp8"], "'fp8' is not one of 'fp32', 'bf16'"),
    (["train", "--train-length", "1x"], "'1x' is not a length"),
    (["train", "--random-positions", "lots"], "is not a length"),
    (["train", "--bogus-option"], "No such option: --bogus-option"),
    (["extend", "learned", "--method", "interpolate", "--target", "abc"], "is not a length"),
    (["eval", "alibi", "--max-tokens", "many"], "is not a length"),
    (["plot", "decay", "--max-distance", "far"], "is not a length"),
    (["eval"], "Missing argument"),
]


@pytest.mark.slow
@pytest.mark.parametrize("args, message", USAGE_ERRORS, ids=[" ".join(a) for a, _ in USAGE_ERRORS])
def test_usage_errors_are_clicks_own_exit_2_no_traceback_no_files(trained, args, message):
    _, results = trained
    before = snapshot(results)
    done = poscli(*args, "--results", str(results))
    assert done.returncode == 2, (done.returncode, done.stderr)
    assert done.stderr.startswith("Usage: poscli") and f"Try 'poscli {args[0]}" in done.stderr
    assert done.stderr.strip().splitlines()[-1].startswith("Error: ") and message in done.stderr
    assert "Traceback" not in done.stderr and snapshot(results) == before
    assert "Value error" not in done.stderr and "Input should be" not in done.stderr  # pydantic's words, via Typer


def test_a_broken_run_folder_is_named_in_listings_and_refused_in_one_line_by_commands(tmp_path):
    """A folder under runs/ whose config.json is not a run poscli wrote (no model.pe, or not JSON):
    poscli runs and the report list it as broken beside the others; eval and extend refuse it in one
    line."""
    results = tmp_path / "results"
    for name, text in (("no-pe", '{"name": "no-pe", "model": {}}'), ("not-json", "not json")):
        (results / "runs" / name).mkdir(parents=True)
        (results / "runs" / name / "config.json").write_text(text)
    listed = poscli("runs", "--results", str(results))
    assert listed.returncode == 0, listed.stderr
    assert "no-pe\t?\tbroken: " in listed.stdout and "has no model.pe" in listed.stdout
    assert "not-json\t?\tbroken: cannot read" in listed.stdout
    reported = poscli("report", "--results", str(results))
    assert reported.returncode == 0 and "| no-pe | broken: " in (results / "REPORT.md").read_text()
    for args in (["eval", "no-pe"], ["extend", "no-pe", "--method", "pi", "--target", "1k"]):
        done = poscli(*args, "--results", str(results))
        assert done.returncode == 2 and "has no model.pe" in done.stderr and "Traceback" not in done.stderr


def test_version_and_a_group_without_its_command_answer_plainly():
    from poscli import __version__

    assert poscli("--version").stdout.strip() == f"poscli {__version__}"
    plot = poscli("plot")
    assert (
        plot.returncode == 0
        and plot.stdout.startswith("Usage: poscli plot")
        and "decay" in plot.stdout
        and not plot.stderr
    )


@pytest.mark.slow
@pytest.mark.parametrize("args, message", ERRORS, ids=[" ".join(a) for a, _ in ERRORS])
def test_bad_input_is_one_line_exit_2_no_traceback_no_files(trained, args, message):
    corpus, results = trained
    folder = corpus.parent / "bad-input"
    folder.mkdir(exist_ok=True)
    (folder / "empty.txt").write_text("")
    (folder / "binary.bin").write_bytes(bytes(range(256)) * 8)
    (folder / "model.pt").write_bytes(b"never read")
    readonly = folder / "readonly"
    readonly.mkdir(exist_ok=True)
    readonly.chmod(0o555)
    if os.access(readonly, os.W_OK):  # root ignores permissions: use a folder the kernel refuses
        readonly = "/sys/poscli-results"
    substitutes = {
        "EMPTY": str(folder / "empty.txt"),
        "BINARY": str(folder / "binary.bin"),
        "PICKLE": str(folder / "model.pt"),
        "READONLY": str(readonly),
        "ALIBI_FOLDER": str(results / "runs" / "alibi"),  # a run by its name and by its folder
    }
    args = [substitutes.get(a, a) for a in args]
    before = snapshot(results)
    extra = ["--results", str(results)] if "--results" not in args else []
    if args[0] == "train":
        extra += ["--data", str(corpus)] if "--data" not in args else []
        extra += ["--steps", "1"] if "--steps" not in args else []
    done = poscli(*args, *extra)
    assert done.returncode == 2, (done.returncode, done.stderr)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("error: ") and message in lines[0]
    assert "Traceback" not in done.stderr
    assert snapshot(results) == before
    assert not any(p.name.endswith(".tmp") for p in results.rglob("*")), "no temporary file left behind"


@pytest.mark.slow
def test_one_tasks_rows_into_another_tasks_table_is_one_line_and_changes_nothing(trained):
    """passkey or inspect rows into a perplexity table: refused before anything is measured, the table as it was."""
    _, results = trained
    done = poscli("eval", "alibi", "--lengths", "64", "--max-tokens", "256", "--table", "kinds", "--results",
                  str(results), "-q")  # fmt: skip
    assert done.returncode == 0, done.stderr
    before = (results / "kinds.csv").read_bytes()
    done = poscli("eval", "alibi", "--task", "passkey", "--lengths", "128", "--trials", "1", "--depths", "50",
                  "--table", "kinds", "--results", str(results), "-q")  # fmt: skip
    assert done.returncode == 2 and "kinds.csv holds another task's table, not the passkey task's" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and (results / "kinds.csv").read_bytes() == before
    # inspect's rows once replaced the perplexity table's (its ppl columns dropped), then failed drawing
    done = poscli("inspect", "alibi", "--lengths", "64", "--max-tokens", "256", "--table", "kinds", "--results",
                  str(results), "-q")  # fmt: skip
    assert done.returncode == 2 and "not the inspect task's" in done.stderr, done.stderr
    assert (results / "kinds.csv").read_bytes() == before


def test_a_report_of_a_folder_with_nothing_in_it_is_one_line_and_writes_nothing(tmp_path):
    """A mistyped --results made a new folder holding a REPORT.md of nothing (which --data then read as a corpus)."""
    (tmp_path / "empty").mkdir()
    for folder in (tmp_path / "typo", tmp_path / "empty"):
        done = poscli("report", "--results", str(folder))
        assert done.returncode == 2 and "no tables or runs in" in done.stderr, done.stderr
        assert len(done.stderr.strip().splitlines()) == 1 and not (folder / "REPORT.md").exists()
    assert not (tmp_path / "typo").exists()


def test_a_full_disk_is_one_line_exit_1_and_leaves_no_partial_file(trained, tmp_path, monkeypatch, capsys):
    """ENOSPC while a table is written: one line, exit 1, no half-written or temporary file."""
    import errno

    from poscli.cli import app as cli
    from poscli.core import io

    _, results = trained
    target = tmp_path / "results"
    real_fsync = os.fsync

    def full_disk(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(io.os, "fsync", full_disk)
    with pytest.raises(SystemExit) as exit_info:
        cli.main(
            [
                "eval",
                str(results / "runs" / "alibi"),
                "--lengths",
                "32",
                "--max-tokens",
                "64",
                "--results",
                str(target),
                "--quiet",
            ]
        )
    monkeypatch.setattr(io.os, "fsync", real_fsync)
    assert exit_info.value.code == 1
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines[-1].startswith("error: No space left on device") and "Traceback" not in "".join(lines)
    assert not [p for p in target.rglob("*") if p.is_file() and not p.name.endswith(".lock")], "nothing written"


def test_debug_mode_shows_the_traceback(trained):
    _, results = trained
    env = {**os.environ, "POSCLI_DEBUG": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "poscli", "eval", "nope", "--results", str(results)],
        capture_output=True,
        text=True,
        env=env,
    )
    assert done.returncode != 0 and "Traceback" in done.stderr


def test_help_lists_the_commands():
    done = poscli("--help")
    assert done.returncode == 0
    for command in ("train", "extend", "eval", "runs", "encodings"):
        assert command in done.stdout


def test_extend_help_lists_every_built_in_method():
    import re

    from poscli.extension import methods

    done = poscli("extend", "--help")
    assert done.returncode == 0
    text = " ".join(re.sub(r"-\n\s*", "-", done.stdout).split())  # names the help wrapped at a hyphen rejoined
    assert all(name in text for name in methods.REGISTRY.builtin_names())


@pytest.mark.parametrize(
    "args",
    [
        ["--help"],
        ["train", "--help"],
        ["train", "--pe", "bogus"],
        ["train", "--steps", "-1"],
        ["train", "--dtype", "fp8"],
        ["eval", "no-such-run"],
        ["extend", "no-such-run", "--method", "yarn", "--target", "4k"],
        ["eval", "x", "--lengths", "1q"],
    ],
)
def test_help_and_argument_errors_answer_without_importing_torch(args, tmp_path):
    """Importing torch takes about a second; help and bad arguments must not wait for it."""
    script = (
        "import sys\n"
        "from poscli.cli.app import main\n"
        f"sys.argv = ['poscli', *{args!r}, '--results', {str(tmp_path)!r}] if {args!r}[0] != '--help' else ['poscli', "
        "'--help']\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        "print('torch imported' if 'torch' in sys.modules else 'no torch')\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.stdout.strip().splitlines()[-1] == "no torch", done.stderr


@pytest.mark.slow
def test_a_time_budget_ends_training_before_its_steps(trained, tmp_path):
    import json

    corpus, _ = trained
    done = poscli(
        "train",
        "--pe",
        "rope",
        "--data",
        str(corpus),
        "--steps",
        "100000",
        "--minutes",
        "0.05",
        "--results",
        str(tmp_path),
        *TINY,
    )
    assert done.returncode == 0, done.stderr
    config = json.loads((tmp_path / "runs" / "rope" / "config.json").read_text())
    assert 0 < config["steps_done"] < 100000 and config["train_seconds"] < 20


@pytest.mark.slow
@pytest.mark.parametrize("pe", ["xpos", "kerple", "fire"])
def test_newer_encodings_train_extend_and_evaluate_at_16x(pe, trained):
    corpus, results = trained
    done = poscli(
        "train",
        "--pe",
        pe,
        "--data",
        str(corpus),
        "--steps",
        "6",
        "--results",
        str(results),
        "--name",
        f"new-{pe}",
        *TINY,
    )
    assert done.returncode == 0, done.stderr
    extended = poscli(
        "extend",
        f"new-{pe}",
        "--method",
        "yarn",
        "--target",
        "128",
        "--steps",
        "2",
        "--results",
        str(results),
        "--quiet",
    )
    if pe == "xpos":  # rotary: every RoPE method applies
        assert extended.returncode == 0, extended.stderr
    else:  # a relative bias: nothing to rescale, answered in one line
        assert extended.returncode == 0 and "needs no rescaling" in extended.stderr
    evaluated = poscli(
        "eval",
        f"new-{pe}",
        "--lengths",
        "512",
        "--max-tokens",
        "1k",
        "--results",
        str(results),
        "--table",
        f"new-{pe}",
        "--quiet",
    )
    assert evaluated.returncode == 0, evaluated.stderr
    table = pd.read_csv(results / f"new-{pe}.csv")
    assert table["ppl"].notna().all() and (table["length"] == 512).all()


@pytest.mark.slow
def test_random_positions_train_through_the_cli_and_evaluate_plainly(trained):
    """--random-positions 512 at train length 32: recorded in the config (resume draws the same),
    a learned table gets 512 rows, evaluation at 16x (512) uses positions 0..511."""
    corpus, results = trained
    done = poscli(
        "train",
        "--pe",
        "learned",
        "--random-positions",
        "512",
        "--data",
        str(corpus),
        "--steps",
        "4",
        "--results",
        str(results),
        "--name",
        "learned-rp",
        *TINY,
    )
    assert done.returncode == 0, done.stderr
    import json

    config = json.loads((results / "runs" / "learned-rp" / "config.json").read_text())
    assert config["train"]["random_positions"] == 512 and config["model"]["position_rows"] == 512
    evaluated = poscli(
        "eval",
        "learned-rp",
        "--lengths",
        "512",
        "--max-tokens",
        "1k",
        "--results",
        str(results),
        "--table",
        "rp",
        "--quiet",
    )
    assert evaluated.returncode == 0, evaluated.stderr
    assert pd.read_csv(results / "rp.csv")["ppl"].notna().all()
    extended = poscli(
        "extend", "learned-rp", "--method", "interpolate", "--target", "1k", "--results", str(results), "--quiet"
    )
    assert extended.returncode == 0 and "rows for positions up to 512" in extended.stderr


@pytest.mark.slow
def test_a_user_encoding_that_cannot_be_imported_or_is_no_encoding_is_one_line(trained, tmp_path):
    """(A user encoding that works is trained, extended and evaluated in tests/encodings/test_new_encoding.py.)"""
    corpus, _ = trained
    (tmp_path / "myencoding.py").write_text("import torch\n")
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    for spec, message in [
        ("nosuch.module:X", "cannot import 'nosuch.module'"),
        ("myencoding:torch", "is not a subclass of"),
    ]:
        failed = subprocess.run(
            [
                sys.executable,
                "-m",
                "poscli",
                "train",
                "--pe",
                spec,
                "--data",
                str(corpus),
                "--steps",
                "1",
                "--results",
                str(tmp_path / "results"),
                *TINY,
            ],
            capture_output=True,
            text=True,
            env=env,
        )
        assert failed.returncode == 2 and message in failed.stderr and len(failed.stderr.strip().splitlines()) == 1


def test_the_options_recipes_and_resume_read_are_the_clis_own():
    """poscli.training.options describes poscli train, extend and eval as data (so the library never imports
    the CLI); it must name the same options with the same defaults as the Typer commands."""
    import typer.main

    from poscli.cli import app as cli
    from poscli.training import options

    commands = typer.main.get_command(cli.app).commands
    train = {p.name: p.default for p in commands["train"].params if p.param_type_name == "option"}
    assert set(options.TRAIN_OPTIONS) == set(train) - options.RUNNER_OPTIONS
    for option, (_, default) in options.TRAIN_OPTIONS.items():
        assert getattr(train[option], "value", train[option]) in (default, None if default == [] else default), option
    extend = {p.name: p.default for p in commands["extend"].params if p.param_type_name == "option"}
    assert {k: v for k, v in extend.items() if k not in options.RUNNER_OPTIONS} == options.EXTEND_OPTIONS
    evaluate = {p.name: p.default for p in commands["eval"].params if p.param_type_name == "option"}
    assert {k: getattr(v, "value", v) for k, v in evaluate.items() if k not in options.RUNNER_OPTIONS} == (
        options.EVAL_OPTIONS
    )
    assert options.TRAIN_DECLARED["size"].choices == tuple(options.SIZES)


@pytest.mark.slow
def test_a_run_trained_on_a_relative_path_is_evaluated_from_any_folder(trained, tmp_path):
    """--data is stored absolute, so the run's own held-out text is found from another folder."""
    import json

    corpus, _ = trained
    results = tmp_path / "results"
    done = poscli(
        "train",
        "--pe",
        "alibi",
        "--data",
        corpus.name,
        "--steps",
        "2",
        "--results",
        str(results),
        *TINY,
        cwd=corpus.parent,
    )
    assert done.returncode == 0, done.stderr
    config = json.loads((results / "runs" / "alibi" / "config.json").read_text())
    assert config["train"]["data"] == str(corpus)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    evaluated = poscli(
        "eval",
        "alibi",
        "--lengths",
        "32",
        "--max-tokens",
        "1k",
        "--no-reference",
        "--results",
        str(results),
        "--quiet",
        cwd=elsewhere,
    )
    assert evaluated.returncode == 0, evaluated.stderr


def test_train_help_groups_every_option_under_one_heading():
    """train --help: Model, Data, Tasks and passkeys, Optimisation, Positions, Output and running; an
    option added to TrainRequest without a group would fall into none, so each is in exactly one."""
    from poscli.training.requests.train import TrainRequest

    grouped = [name for names in TrainRequest.PANELS.values() for name in names]
    assert sorted(grouped) == sorted(field.name for field in dataclasses.fields(TrainRequest))
    done = poscli("train", "--help")
    assert done.returncode == 0
    headings = [line[:-1] for line in done.stdout.splitlines() if line and not line[0].isspace() and line.endswith(":")]
    assert set(TrainRequest.PANELS) <= set(headings), headings
    model = done.stdout.split("Model:")[1].split("Positions:")[0]
    assert "--pe NAME" in model and "--layers N" in model and "--lr" not in model


@pytest.mark.parametrize(
    "words, expected",
    [("poscli extend r --method ya", {"yarn", "yarn-beta"}), ("poscli train --pe al", {"alibi"}),
     ("poscli eval r --task pass", {"passkey"})],
)  # fmt: skip
def test_the_shell_completes_encodings_methods_and_tasks(words, expected):
    """Typer's bash completion (what `poscli --install-completion` installs) offers the registry's names."""
    env = {
        **os.environ,
        "_POSCLI_COMPLETE": "complete_bash",
        "COMP_WORDS": words,
        "COMP_CWORD": str(len(words.split()) - 1),
    }
    done = subprocess.run([sys.executable, "-m", "poscli"], capture_output=True, text=True, env=env)
    assert set(done.stdout.split()) == expected, (done.stdout, done.stderr)
