"""``--data stdlib`` (the default): the Python standard library's own ``.py`` files, one document
per file, test packages and site-packages left out. On every machine with Python, offline."""

from __future__ import annotations

import functools
import os
import sys
import sysconfig
from collections.abc import Iterator
from pathlib import Path

from poscli.data.sources import register
from poscli.data.sources.base import Source, fingerprint

TEST_DIRECTORY_NAMES = {"test", "tests", "idle_test"}  # stdlib test packages, left out of the corpus


@register("stdlib")
class StandardLibrary(Source):
    summary = "the Python standard library's .py files (the default; offline everywhere)"
    form = "'stdlib'"
    priority = 0
    named = True

    @classmethod
    def matches(cls, spec: str) -> bool:
        return spec == "stdlib"

    @functools.cached_property
    def files(self) -> list[Path]:
        return stdlib_files()  # once per source: the cache key and the documents read the same list

    def documents(self, chunk_bytes: int | None = None) -> Iterator[str]:
        for path in self.files:
            yield path.read_text(encoding="utf-8", errors="replace")

    def cache_key(self) -> list:
        return ["stdlib", sys.version, fingerprint(self.files)]


def stdlib_files() -> list[Path]:
    """The interpreter's standard library ``.py`` files, without test packages or site-packages.
    The walk skips the folders it would leave out anyway (site-packages can hold thousands of files)."""
    root = Path(sysconfig.get_paths()["stdlib"])
    files = []
    for folder, subfolders, names in os.walk(root):
        top = folder == str(root)
        subfolders[:] = [name for name in subfolders if not _left_out(name, top)]
        files += [Path(folder) / name for name in names if name.endswith(".py") and not _left_out(name, top)]
    return sorted(files)


def _left_out(part: str, top: bool) -> bool:
    """A path part that leaves its file out: a test package or test_ module, or, at the top,
    site-packages, dist-packages or a config-* folder."""
    if top and (part in ("site-packages", "dist-packages") or part.startswith("config-")):
        return True
    return part in TEST_DIRECTORY_NAMES or part.startswith("test_")
