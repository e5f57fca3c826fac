"""The bar for a new corpus source: ONE file and no other edit. A synthetic source (counting
sequences, made in the file) trains, evaluates and is recorded, both as a file dropped into
poscli/data/sources/ and as a module outside the package (--data module:Class=ARGUMENT); and the
glob source, itself one file, reads exactly the files its pattern names, as the files source does."""

import json
import os
from pathlib import Path

import pandas as pd
import pytest

from poscli.data.sources import members, recorded_spec, resolve
from poscli.data.sources.files import TextFiles
from poscli.data.sources.glob import GlobFiles
from poscli.errors import PoscliError
from tests.cli.test_cli import TINY
from tests.conftest import module_outside, package_with, run_poscli

REPOSITORY = Path(__file__).resolve().parents[2]

NEW_SOURCE = '''"""Counting sequences: each counts from a seeded start by a seeded step (a corpus to master)."""

import random

from poscli.data.sources import register
from poscli.data.sources.base import Source


@register("counting")
class Counting(Source):
    summary = "documents that count from a seeded start by a seeded step"
    form = "'counting'"
    priority = 0
    named = True

    @classmethod
    def matches(cls, spec):
        return spec == "counting"

    def documents(self, chunk_bytes=None):
        rng = random.Random(int(self.spec) if self.spec.isdigit() else 0)
        for _ in range(60):
            start, step = rng.randrange(1000), rng.randrange(1, 98)
            yield " ".join(str(start + step * n) for n in range(200))

    def cache_key(self):
        return ["counting", self.spec, 1]
'''


def through_the_cli(data: str, env: dict, results: Path, cwd: Path) -> None:
    def poscli(*args):
        return run_poscli(*args, "--results", str(results), env=env, cwd=cwd)

    trained = poscli("train", "--pe", "alibi", "--name", "counted", "--data", data, "--steps", "4", *TINY)
    assert trained.returncode == 0, trained.stderr
    config = json.loads((results / "runs" / "counted" / "config.json").read_text())
    assert config["train"]["data"] == data  # recorded as given: a name, not a path
    evaluated = poscli("eval", "counted", "--lengths", "32,64", "--max-tokens", "1k", "--quiet")
    assert evaluated.returncode == 0, evaluated.stderr
    table = pd.read_csv(results / "ppl.csv")
    assert table["ppl"].notna().all() and set(table["corpus"]) == {data}


@pytest.mark.slow
def test_one_file_in_the_sources_package_is_a_whole_new_source(tmp_path):
    env = package_with(tmp_path, "data/sources/counting.py", NEW_SOURCE)
    listed = run_poscli("data", "sources", env=env, cwd=tmp_path)
    assert "counting       documents that count from a seeded start" in listed.stdout, listed.stderr
    through_the_cli("counting", env, tmp_path / "results", tmp_path)


@pytest.mark.slow
def test_one_module_outside_the_package_is_a_whole_new_source(tmp_path):
    env = module_outside(tmp_path, "counting_source", NEW_SOURCE.replace('@register("counting")\n', ""))
    through_the_cli("counting_source:Counting=7", env, tmp_path / "results", tmp_path)


def test_a_class_that_is_not_a_source_is_refused_with_one_line(tmp_path, monkeypatch):
    (tmp_path / "not_a_source.py").write_text("class Thing:\n    pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(PoscliError, match="not a subclass of poscli.data.sources.base.Source"):
        resolve("not_a_source:Thing")


def test_a_glob_reads_exactly_the_files_it_matches_as_the_files_source_reads_them(tmp_path):
    (tmp_path / "src" / "pkg").mkdir(parents=True)
    for name, text in {"a.py": "alpha\n", "pkg/b.py": "beta\r\n", "pkg/c.txt": "not python\n", "d.py": ""}.items():
        (tmp_path / "src" / name).write_text(text, newline="")
    pattern = str(tmp_path / "src" / "**" / "*.py")
    source = resolve(pattern)
    assert isinstance(source, GlobFiles) and [p.name for p in source.files()] == ["a.py", "b.py"]  # d.py is empty
    one_by_one = [list(TextFiles(str(path)).documents()) for path in source.files()]
    assert list(source.documents()) == [document for part in one_by_one for document in part]
    assert source.cache_key()[0] == "files"  # the same cache entry as the files source would make
    with pytest.raises(PoscliError, match="matches no files"):
        resolve(str(tmp_path / "src" / "*.rs")).documents().__next__()
    assert recorded_spec("src/**/*.py") == os.path.abspath("src/**/*.py")


def test_every_source_is_offered_a_value_names_first_then_paths_then_patterns_then_the_hub():
    order = [source.name for source in members()]
    assert order.index("stdlib") < order.index("dataset-files") < order.index("files") < order.index("glob")
    assert order.index("glob") < order.index("hf")
