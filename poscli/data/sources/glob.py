"""``--data 'src/**/*.py'``: the text files a glob pattern matches (``**`` reaches into
subfolders), one document per file, as ``files`` reads them. Quote the pattern, or the shell expands
it first."""

from __future__ import annotations

import glob
import os
from pathlib import Path

from poscli.data.sources import register
from poscli.data.sources.files import TextFiles
from poscli.errors import PoscliError


@register("glob")
class GlobFiles(TextFiles):
    summary = "the text files a glob pattern matches, e.g. 'src/**/*.py' (quoted)"
    form = "a glob"
    priority = 30  # after an existing path: a folder may have [ or * in its name

    @classmethod
    def matches(cls, spec: str) -> bool:
        return any(character in spec for character in "*?[")

    def candidates(self) -> list[Path]:
        found = sorted(Path(p) for p in glob.glob(os.path.expanduser(self.spec), recursive=True) if Path(p).is_file())
        if not found:
            raise PoscliError(f"the pattern {self.spec!r} matches no files; check the path or quote the glob")
        return found
