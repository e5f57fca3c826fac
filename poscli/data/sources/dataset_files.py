"""``--data FILE`` or ``--data FOLDER`` of dataset files: ``.parquet``, ``.jsonl`` / ``.json``,
``.arrow`` or ``.csv``, all of one kind, through ``datasets.load_dataset`` (the rows become
documents as ``RowOptions`` say). A folder's splits come from its file names (``train*``,
``validation*``, ``test*``), as ``datasets`` infers them."""

from __future__ import annotations

from pathlib import Path

from poscli.data.sources import register
from poscli.data.sources.base import DatasetSource, fingerprint
from poscli.errors import PoscliError

DATASET_SUFFIXES = {".parquet": "parquet", ".jsonl": "json", ".json": "json", ".arrow": "arrow", ".csv": "csv"}


@register("dataset-files")
class DatasetFiles(DatasetSource):
    summary = "a dataset file, or a folder of them (.parquet, .jsonl, .json, .arrow, .csv), rows as documents"
    priority = 10  # before text files: a .csv is a file too

    @classmethod
    def matches(cls, spec: str) -> bool:
        return dataset_files(spec) is not None

    def load_arguments(self) -> tuple[tuple, dict]:
        found = dataset_files(self.spec)
        if found is None:
            raise PoscliError(
                f"--data {self.spec!r} is not a dataset file or folder (.parquet, .jsonl, .json, .arrow, .csv)"
            )
        builder, files = found
        folder = Path(self.spec).expanduser()
        if folder.is_dir():  # splits from the file names, as datasets infers them
            return (builder,), {"data_dir": str(folder)}
        return (builder,), {"data_files": {"train": files}}

    def cache_key(self) -> list:
        return ["dataset", fingerprint([Path(f) for f in dataset_files(self.spec)[1]]), *self.options.key()]


def dataset_files(spec: str) -> tuple[str, list[str]] | None:
    """(builder, files) when ``spec`` names dataset files (one file, or a folder holding them, all
    of one kind); None when it names text files or something else."""
    path = Path(spec).expanduser()
    if path.is_file():
        builder = DATASET_SUFFIXES.get(path.suffix.lower())
        return (builder, [str(path)]) if builder else None
    if path.is_dir():
        files = sorted(p for p in path.rglob("*") if p.is_file() and p.suffix.lower() in DATASET_SUFFIXES)
        builders = {DATASET_SUFFIXES[p.suffix.lower()] for p in files}
        if len(builders) > 1:
            raise PoscliError(
                f"--data {spec!r} mixes dataset formats ({', '.join(sorted(builders))}); point it at one kind"
            )
        if files and not any(p.is_file() and p.suffix.lower() not in DATASET_SUFFIXES for p in path.rglob("*")):
            return builders.pop(), [str(p) for p in files]
    return None
