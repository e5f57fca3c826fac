"""Rows from datasets, joined into documents: the Hugging Face hub and local dataset files.

``--data hf:NAME[:CONFIG]`` loads a hub dataset (online), ``--data FILE`` or a folder of
``.parquet``, ``.jsonl`` / ``.json``, ``.arrow`` or ``.csv`` files a local one, both through
``datasets.load_dataset``. What a research user chooses:

- ``--data-split``: the split(s) to train on (``train``; ``train+validation`` joins two);
- ``--heldout-split``: a split to hold out instead of a fraction of the training documents
  (e.g. WikiText's ``test``; Press et al. (2022) evaluate on it);
- ``--text-column``: the column that holds the text (``text``, else the only string column);
- ``--join-rows``: ``none`` (a row is a document), ``N`` (every N rows are one document), or
  ``heading`` (a row that is a top-level WikiText heading, `` = Title = ``, starts a document):
  WikiText stores a paragraph per row, so without joining no document is long enough for long
  windows;
- ``--streaming`` with ``--max-data-bytes``: read a big dataset row by row (PG-19, the YaRN
  evaluation's corpus, is 11 GB) and stop after a byte budget.

Offline, a hub name fails at once: the hub's offline mode is switched on when huggingface.co does
not answer within a few seconds, so ``datasets`` does not retry for minutes.
"""

from __future__ import annotations

import glob as globlib
import os
import re
import sysconfig
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from poscli.errors import EnvironmentFailure, PoscliError

TEST_DIRECTORY_NAMES = {"test", "tests", "idle_test"}  # stdlib test packages, left out of the corpus

DATASET_SUFFIXES = {".parquet": "parquet", ".jsonl": "json", ".json": "json", ".arrow": "arrow", ".csv": "csv"}
WIKITEXT_TITLE = re.compile(r"^ = [^=].* = \s*$")  # " = Title = ", not " = = Section = = "
HUB_TIMEOUT_S = 3.0


@dataclass(frozen=True)
class RowOptions:
    """How rows become documents (see the module docstring)."""

    split: str = "train"
    text_column: str | None = None
    join_rows: str = "none"
    streaming: bool = False
    max_bytes: int | None = None

    def validate(self) -> None:
        parse_join(self.join_rows)
        if self.max_bytes is not None and self.max_bytes <= 0:
            raise PoscliError(
                f"--max-data-bytes {self.max_bytes}: give a positive number of bytes, e.g. --max-data-bytes 100M"
            )


def parse_join(text: str) -> int | str | None:
    """``none`` -> None, ``heading`` -> "heading", ``N`` -> N (rows per document)."""
    if text in ("none", "heading"):
        return None if text == "none" else text
    if text.isdigit() and int(text) >= 1:
        return int(text)
    raise PoscliError(
        f"--join-rows {text!r}: use none, heading (WikiText's article titles) or a number of rows, e.g. --join-rows 50"
    )


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


def hub_reachable(timeout: float = HUB_TIMEOUT_S) -> bool:
    """Whether the hub answers an HTTPS request within ``timeout`` seconds (any HTTP status counts:
    a TCP connection alone can be accepted by a firewall that then drops everything)."""
    import urllib.error
    import urllib.request

    endpoint = os.environ.get("HF_ENDPOINT", "https://huggingface.co").rstrip("/")
    try:
        urllib.request.urlopen(
            urllib.request.Request(endpoint + "/api/datasets?limit=1", method="HEAD"), timeout=timeout
        ).close()
        return True
    except urllib.error.HTTPError:
        return True  # the hub answered, if not with 200
    except (OSError, ValueError):  # URLError, timeouts, refused connections, a malformed endpoint
        return False


def go_offline() -> None:
    """The hub's offline mode, for this process: set before ``datasets`` is imported it is read
    from the environment; after, the libraries' flags are set too."""
    import sys

    os.environ["HF_HUB_OFFLINE"] = os.environ["HF_DATASETS_OFFLINE"] = "1"
    if "huggingface_hub" in sys.modules:
        sys.modules["huggingface_hub"].constants.HF_HUB_OFFLINE = True
    if "datasets" in sys.modules:
        sys.modules["datasets"].config.HF_HUB_OFFLINE = True


def _pick_column(columns: dict, wanted: str | None, source: str) -> str:
    if wanted:
        if wanted not in columns:
            raise PoscliError(
                f"{source} has no column {wanted!r}; its columns are {', '.join(columns)}; choose one with "
                "--text-column"
            )
        return wanted
    if "text" in columns:
        return "text"
    strings = [
        name for name, feature in columns.items() if getattr(feature, "dtype", None) in ("string", "large_string")
    ]
    if len(strings) != 1:
        raise PoscliError(
            f"{source}: say which column holds the text with --text-column (its columns are {', '.join(columns)})"
        )
    return strings[0]


def load_rows(spec: str, options: RowOptions, split: str | None = None) -> Iterator[str]:
    """The text of each row of ``spec`` (hf:NAME[:CONFIG] or dataset files), split ``split`` or
    ``options.split``, in order; streamed when ``options.streaming``."""
    split = split or options.split
    if spec.startswith("hf:"):
        name, _, config = spec[3:].partition(":")
        if not name:
            raise PoscliError("--data hf: needs a dataset name, e.g. --data hf:Salesforce/wikitext:wikitext-103-raw-v1")
        source = spec
        if os.environ.get("HF_HUB_OFFLINE") != "1" and not hub_reachable():
            go_offline()  # fail now, from the cache or not at all, instead of minutes of retries
        args, kwargs = (name, config or None), {}
    else:
        found = dataset_files(spec)
        if found is None:
            raise PoscliError(
                f"--data {spec!r} is not a dataset file or folder (.parquet, .jsonl, .json, .arrow, .csv)"
            )
        builder, files = found
        source = spec
        if (
            Path(spec).expanduser().is_dir()
        ):  # splits from the file names (train*, validation*, test*), as datasets infers them
            args, kwargs = (builder,), {"data_dir": str(Path(spec).expanduser())}
        else:
            args, kwargs = (builder,), {"data_files": {"train": files}}
    import datasets

    datasets.disable_progress_bars()
    try:
        dataset = datasets.load_dataset(*args, split=split, streaming=options.streaming, **kwargs)
    except PoscliError:
        raise
    except Exception as error:  # offline, unknown name, missing split or config: all surface here
        first_line = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        failure = EnvironmentFailure if spec.startswith("hf:") else PoscliError
        raise failure(
            f"could not load {source} split {split!r} ({first_line})"
            + (
                "; check the name and your connection, or use --data stdlib or a local path"
                if spec.startswith("hf:")
                else ""
            )
        ) from None
    column = _pick_column(dict(dataset.features or {}), options.text_column, source)
    for row in dataset:
        yield row[column] or ""


def join(rows: Iterable[str], rule: int | str | None) -> Iterator[str]:
    """Documents from rows: each row (None), every ``rule`` rows, or from one WikiText title row
    to the next ("heading"). Rows are concatenated as they are (WikiText's rows end in a newline)."""
    if rule is None:
        yield from (row for row in rows if row)
        return
    document: list[str] = []
    for index, row in enumerate(rows):
        starts = WIKITEXT_TITLE.match(row) is not None if rule == "heading" else index % rule == 0
        if starts and any(document):
            yield "".join(document)
            document = []
        document.append(row)
    if any(document):
        yield "".join(document)


def documents(spec: str, options: RowOptions, split: str | None = None) -> Iterator[str]:
    """Rows of ``spec`` joined by ``options.join_rows``, up to ``options.max_bytes`` of text."""
    options.validate()
    total = 0
    for document in join(load_rows(spec, options, split), parse_join(options.join_rows)):
        yield document
        total += len(document.encode("utf-8"))
        if options.max_bytes is not None and total >= options.max_bytes:
            return


# --------------------------------------------------------------------------- text files


def stdlib_files() -> list[Path]:
    """The interpreter's standard library ``.py`` files, without test packages or site-packages."""
    root = Path(sysconfig.get_paths()["stdlib"])
    files = []
    for path in root.rglob("*.py"):
        parts = path.relative_to(root).parts
        if parts[0] in ("site-packages", "dist-packages") or parts[0].startswith("config-"):
            continue
        if any(part in TEST_DIRECTORY_NAMES or part.startswith("test_") for part in parts):
            continue
        files.append(path)
    return sorted(files)


def _looks_binary(path: Path) -> bool:
    with open(path, "rb") as handle:
        return b"\0" in handle.read(8192)


def local_files(spec: str) -> list[Path]:
    """Text files named by a file path, a folder (recursive) or a glob pattern."""
    path = Path(spec).expanduser()
    if path.is_file():
        candidates = [path]
    elif path.is_dir():
        candidates = sorted(
            p for p in path.rglob("*") if p.is_file() and not any(x.startswith(".") for x in p.relative_to(path).parts)
        )
    elif any(ch in spec for ch in "*?["):
        candidates = sorted(
            Path(p) for p in globlib.glob(os.path.expanduser(spec), recursive=True) if Path(p).is_file()
        )
        if not candidates:
            raise PoscliError(f"the pattern {spec!r} matches no files; check the path or quote the glob")
    else:
        raise PoscliError(
            f"--data {spec!r} is not 'stdlib', 'shakespeare', 'passkey', an existing file or folder, a glob, or "
            "hf:NAME[:CONFIG]"
        )
    unreadable = [p for p in candidates if not os.access(p, os.R_OK)]
    if unreadable:
        raise PoscliError(f"cannot read {unreadable[0]}: check its permissions")
    files = [p for p in candidates if p.stat().st_size > 0 and not _looks_binary(p)]
    if not files:
        raise PoscliError(f"--data {spec!r} has no non-empty text files (binary files are skipped)")
    return files
