"""``--data FILE`` or ``--data FOLDER``: text files, one document per file (a folder is read
recursively, hidden files and binary files left out). Prepared on disk (``poscli data prepare``), a
file longer than ``chunk_bytes`` is cut at line ends, so one big file still has documents on both
sides of the split."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

from poscli.data.sources import register
from poscli.data.sources.base import Source, fingerprint
from poscli.errors import PoscliError


@register("files")
class TextFiles(Source):
    summary = "a text file, or a folder of them (recursive), one document per file"
    form = "an existing file or folder"
    priority = 20

    _files: list[Path] | None = None

    @classmethod
    def matches(cls, spec: str) -> bool:
        path = Path(spec).expanduser()
        return path.is_file() or path.is_dir()

    def candidates(self) -> list[Path]:
        """The files the spec names, before the checks of ``files``."""
        path = Path(self.spec).expanduser()
        if path.is_file():
            return [path]
        return sorted(
            p for p in path.rglob("*") if p.is_file() and not any(x.startswith(".") for x in p.relative_to(path).parts)
        )

    def files(self) -> list[Path]:
        """The readable, non-empty text files, in a fixed order (listed and checked once per source:
        the cache key and the documents read the same list)."""
        if self._files is None:
            self._files = self._checked_files()
        return self._files

    def _checked_files(self) -> list[Path]:
        candidates = self.candidates()
        unreadable = [p for p in candidates if not os.access(p, os.R_OK)]
        if unreadable:
            raise PoscliError(f"cannot read {unreadable[0]}: check its permissions")
        files = [p for p in candidates if p.stat().st_size > 0 and not looks_binary(p)]
        if not files:
            raise PoscliError(f"--data {self.spec!r} has no non-empty text files (binary files are skipped)")
        return files

    def documents(self, chunk_bytes: int | None = None) -> Iterator[str]:
        files = self.files()
        if chunk_bytes is None:
            yield from read_whole(files)
            return
        for path in files:
            yield from file_chunks(path, chunk_bytes)

    def cache_key(self) -> list:
        return ["files", fingerprint(self.files())]


def looks_binary(path: Path) -> bool:
    with open(path, "rb") as handle:
        return b"\0" in handle.read(8192)


def read_whole(files: list[Path]) -> list[str]:
    """One document per file, read by ``datasets``' text builder (empty files dropped)."""
    import datasets

    datasets.disable_progress_bars()
    dataset = datasets.load_dataset(
        "text",
        data_files=[str(p) for p in files],
        sample_by="document",
        split="train",
        encoding_errors="replace",
        keep_in_memory=True,
    )
    return [row for row in dataset["text"] if row]


def file_chunks(path: Path, chunk_bytes: int) -> Iterator[str]:
    """A text file as documents of about ``chunk_bytes``, each ending at a line end (a line longer
    than that is cut as it is)."""
    with open(path, "rb") as handle:
        rest = b""
        while True:
            block = handle.read(chunk_bytes)
            if not block:
                break
            block = rest + block
            end = block.rfind(b"\n") + 1 or len(block)
            rest = block[end:]
            yield block[:end].decode("utf-8", errors="replace")
        if rest:
            yield rest.decode("utf-8", errors="replace")
