"""Every code block of the README and docs/ that runs is run here, in the order it appears, in a
scratch folder: ```sh blocks with bash (poscli on the PATH, results in the scratch folder),
```python blocks with this Python; a ```python block after ``<!-- file: NAME -->`` is written to
NAME instead (a module a later block imports). A block after ``<!-- not run ... -->`` says why it
is not (the setup commands that CI itself runs); ```text blocks are output or templates.

A ```sh block runs command by command in bash, except a plain ``poscli ARGS`` command (no pipe,
redirection or variable), which runs in this process as ``python -m poscli`` would run it
(``poscli_in_process``: the same ``main`` and argv, in the block's folder and environment),
saving each the seconds a fresh interpreter spends importing torch; ``export NAME=VALUE`` holds
for the commands after it."""

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import in_environment, poscli_in_process

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), ROOT / "recipes" / "README.md"]
BLOCK = re.compile(r"(?:<!-- (?P<marker>[^>]*?) -->\n)?```(?P<language>[\w-]*)\n(?P<code>.*?)```", re.S)


def blocks(path: Path) -> list[tuple[str, str, str]]:
    """(language, marker, code) of every fenced block; a block without a language is a defect."""
    found = [(m["language"], m["marker"] or "", m["code"]) for m in BLOCK.finditer(path.read_text(encoding="utf-8"))]
    unlabelled = [code.splitlines()[0] if code else "" for language, _, code in found if not language]
    assert not unlabelled, f"{path.name}: label every block (sh, python: run; text: not run): {unlabelled}"
    return found


@pytest.mark.slow
@pytest.mark.parametrize(
    "path",
    [p for p in DOCS if any(lang in ("sh", "python") for lang, _, _ in blocks(p))],
    ids=lambda p: str(p.relative_to(ROOT)),
)
def test_every_runnable_block_runs(path, tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    (work / "recipes").symlink_to(ROOT / "recipes")
    env = {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
        "POSCLI_RESULTS": str(work / "results"),
        "PYTHONPATH": str(work),
    }
    ran = 0
    for language, marker, code in blocks(path):
        if marker.startswith("not run"):
            continue
        if language == "python" and marker.startswith("file: "):
            (work / marker.removeprefix("file: ").strip()).write_text(code)
        elif language == "python":
            done = subprocess.run([sys.executable, "-c", code], cwd=work, env=env, capture_output=True, text=True)
            assert done.returncode == 0, f"{path.name}:\n{code}\n{done.stderr[-2000:]}"
            ran += 1
        elif language == "sh":
            for command in commands(code):
                done = run_command(command, work, env)
                assert done.returncode == 0, f"{path.name}:\n{command}\n{done.stdout[-1000:]}{done.stderr[-2000:]}"
            ran += 1
    assert ran


def commands(block: str) -> list[str]:
    """The block's commands: its lines, a line continued (a trailing backslash, an open quote)
    joined with the next."""
    found, pending = [], ""
    for line in block.splitlines(keepends=True):
        pending += line
        try:
            complete = bool(shlex.split(pending, comments=True)) or not pending.strip()
        except ValueError:  # an open quote: the command goes on
            continue
        if pending.rstrip().endswith("\\"):
            continue
        if complete and pending.strip():
            found.append(pending.strip())
        pending = ""
    assert not pending.strip(), f"an unfinished command: {pending}"
    return found


def run_command(command: str, work: Path, env: dict) -> subprocess.CompletedProcess:
    """One command of a block; ``export`` updates ``env`` for the commands after it."""
    words = shlex.split(command.replace("\\\n", " "), comments=True)  # a continued line, joined
    plain = not any(mark in command.split("#")[0] for mark in "|&;<>$`")
    if words[0] == "export" and plain and all("=" in word for word in words[1:]):
        env.update(word.split("=", 1) for word in words[1:])
        return subprocess.CompletedProcess(words, 0, "", "")
    if words[0] != "poscli" or not plain:
        return subprocess.run(
            ["bash", "-euo", "pipefail", "-c", command], cwd=work, env=env, capture_output=True, text=True
        )
    with in_environment(env, work):
        return poscli_in_process(*words[1:], cwd=work)


def test_the_readme_is_one_screenful_per_idea_and_its_encodings_table_names_only_encodings_that_exist():
    """The README's table introduces the encodings it names (a renamed or removed one would be a
    stale row); ``poscli encodings``, read from the registry, lists every one, a new file's too, so
    adding an encoding is one file with no README edit."""
    from poscli.encodings import builtin_names

    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= 250
    table = readme.split("| `--pe` |", 1)[1].split("\n\n", 1)[0]  # the encodings table, from its header row
    rows = re.findall(r"^\| `([a-z0-9-]+)` \|", table, re.M)
    assert len(rows) >= 10 and set(rows) <= set(builtin_names()), sorted(set(rows) - set(builtin_names()))
    assert "poscli encodings" in readme


def test_docs_cite_only_files_inside_the_project():
    for path in [*DOCS, *sorted((ROOT / "poscli").rglob("*.py"))]:
        text = path.read_text(encoding="utf-8")
        for outside in ("PAPERS.md", "MEASURED.md", "shared/reference", "seeds/0"):
            assert outside not in text, f"{path.relative_to(ROOT)} cites {outside}, which is not in the repository"
