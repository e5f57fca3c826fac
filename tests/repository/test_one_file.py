"""The one-file promise under `make test`: for each axis a researcher extends (encodings, extension
methods, evaluation tasks, corpus sources), a new member written as ONE file into a copy of the
repository passes the repository's structure and docs tests, and the registry-wide tests of its
axis, with no other file edited; and it shows in ``--help`` or its listing command.

The members are the ones tests/*/test_new_*.py drive through the CLI and a recipe."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.data.test_new_source import NEW_SOURCE
from tests.encodings.test_new_encoding import NEW_ENCODING
from tests.evaluation.test_new_task import NEW_TASK
from tests.extension.test_new_method import NEW_METHOD

REPOSITORY = Path(__file__).resolve().parents[2]
COPIED = ("poscli", "tests", "docs", "benchmarks", "examples", "recipes", "README.md", "pyproject.toml")

# axis -> (the member's file, its text, the axis's registry-wide tests, a command that lists it, what it shows)
AXES = {
    "encoding": (
        "poscli/encodings/learned_slope.py",
        NEW_ENCODING,
        ["tests/encodings/test_encodings.py", "-k", "learned-slope"],
        ["encodings"],
        "learned-slope",
    ),
    "method": (
        "poscli/extension/methods/power_pi.py",
        NEW_METHOD,
        ["tests/extension/test_methods.py", "-k", "declared_with_a_help_line"],
        ["extend", "--help"],
        "power-pi",
    ),
    "task": (
        "poscli/evaluation/tasks/induction.py",
        NEW_TASK,
        ["tests/evaluation/test_algorithmic.py", "-k", "reference_answer"],
        ["eval", "--help"],
        "induction",
    ),
    "source": (
        "poscli/data/sources/counting.py",
        NEW_SOURCE,
        ["tests/data/test_sources.py", "-k", "size_takes"],
        ["train", "--help"],
        "counting",
    ),
}


def repository_with(tmp_path: Path, member: str, text: str) -> Path:
    """A copy of the repository's code, tests and docs under ``tmp_path`` with one file added."""
    copy = tmp_path / "repository"
    for name in COPIED:
        source = REPOSITORY / name
        if source.is_dir():
            shutil.copytree(source, copy / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            (copy / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, copy / name)
    (copy / member).write_text(text)
    return copy


def run_in(copy: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(copy), "COLUMNS": "200"}
    return subprocess.run([sys.executable, *args], cwd=copy, env=env, capture_output=True, text=True)


@pytest.mark.slow
@pytest.mark.parametrize("axis", sorted(AXES))
def test_a_new_member_is_one_file_and_make_tests_checks_pass_with_no_other_edit(axis, tmp_path):
    member, text, axis_tests, listing, shown = AXES[axis]
    copy = repository_with(tmp_path, member, text)
    listed = run_in(copy, "-m", "poscli", *listing)
    assert listed.returncode == 0 and shown in listed.stdout, listed.stdout + listed.stderr
    repository = ["tests/repository/test_structure.py", "tests/repository/test_docs.py", "-k", "not runnable_block"]
    for tests in (repository, axis_tests):
        done = run_in(copy, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-x", *tests)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
        assert " passed" in done.stdout, done.stdout  # at least one test selected and run
