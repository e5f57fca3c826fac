"""The corpus-source protocol (``--data``) and what sources share: how a dataset's rows become
documents, and how a source's files are fingerprinted for the corpus cache.

A source is one file in ``poscli/data/sources/``: a subclass of :class:`Source` registered by name
(see ``poscli.data.sources``). It says whether a ``--data`` value is its own (``matches``), yields
its documents, gives a cache key that changes when its documents do, and says how a run records
it. Both ways of reading a corpus use it: in memory (``poscli.data.corpus``: whole documents) and
prepared on disk (``poscli.data.prepared``: long documents cut at line ends, ``chunk_bytes``).

Rows of a dataset (the hub's or local dataset files) become documents as the user chooses:

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
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from poscli.errors import EnvironmentFailure, PoscliError

WIKITEXT_TITLE = re.compile(r"^ = [^=].* = \s*$")  # " = Title = ", not " = = Section = = "


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

    @classmethod
    def of(cls, config: Any) -> RowOptions:
        """A training config's row options (its --data-split, --text-column, --join-rows, --streaming
        and --max-data-bytes; the config, a layer above, is read by its field names)."""
        return cls(
            split=config.data_split,
            text_column=config.text_column,
            join_rows=config.join_rows,
            streaming=config.streaming,
            max_bytes=config.max_data_bytes,
        )

    def key(self) -> list:
        """What of these options changes the documents (streaming reads the same rows)."""
        return [self.split, self.text_column, self.join_rows, self.max_bytes]


class Source:
    """Where a corpus' documents come from.

    Class attributes a source sets:
        name: set by ``@register``.
        summary: one line for ``poscli data sources`` and the guide.
        form: how a user writes it, for the error that lists the accepted forms (None: not listed).
        priority: the order in which sources are asked whether a ``--data`` value is theirs (lowest
            first): names, then dataset files before text files, a glob after an existing path.
        named: the value is a name, not a path: a run records it as it is (a path is made absolute).
    """

    name: ClassVar[str]
    summary: ClassVar[str] = ""
    form: ClassVar[str | None] = None
    priority: ClassVar[int] = 50
    named: ClassVar[bool] = False

    def __init__(self, spec: str, rows: RowOptions | None = None):
        self.spec = spec
        self.options = rows or RowOptions()

    @classmethod
    def matches(cls, spec: str) -> bool:
        """Whether ``--data spec`` names this source. Cheap: no download, no reading of files."""
        raise NotImplementedError

    def documents(self, chunk_bytes: int | None = None) -> Iterable[str]:
        """The documents, in a fixed order. ``chunk_bytes``: the prepared path's request to cut
        long documents at line ends into pieces of about that size (a source may ignore it)."""
        raise NotImplementedError

    def cache_key(self) -> list:
        """JSON-able; changes whenever ``documents()`` would (file sizes and times, versions, options)."""
        raise NotImplementedError

    def cache_hash(self) -> str:
        return hashlib.sha256(json.dumps(self.cache_key(), default=str).encode()).hexdigest()[:24]


def fingerprint(files: list[Path]) -> list:
    """Each file's path, size and modification time: a cache key that changes when a file does."""
    return [(str(p), p.stat().st_size, p.stat().st_mtime_ns) for p in files]


# --------------------------------------------------------------------------- rows of a dataset


def parse_join(text: str) -> int | str | None:
    """``none`` -> None, ``heading`` -> "heading", ``N`` -> N (rows per document)."""
    if text in ("none", "heading"):
        return None if text == "none" else text
    if text.isdigit() and int(text) >= 1:
        return int(text)
    raise PoscliError(
        f"--join-rows {text!r}: use none, heading (WikiText's article titles) or a number of rows, e.g. --join-rows 50"
    )


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


def dataset_rows(
    args: tuple, kwargs: dict, source: str, options: RowOptions, split: str, online: bool
) -> Iterator[str]:
    """The text of each row of ``datasets.load_dataset(*args, split=split, **kwargs)``, in order;
    streamed when ``options.streaming``. A hub failure (``online``) is the environment's, a local
    one the user's."""
    import datasets

    datasets.disable_progress_bars()
    try:
        dataset = datasets.load_dataset(*args, split=split, streaming=options.streaming, **kwargs)
    except PoscliError:
        raise
    except Exception as error:  # offline, unknown name, missing split or config: all surface here
        first_line = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        hint = "; check the name and your connection, or use --data stdlib or a local path" if online else ""
        raise (EnvironmentFailure if online else PoscliError)(
            f"could not load {source} split {split!r} ({first_line}){hint}"
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


def joined_documents(rows: Iterable[str], options: RowOptions) -> Iterator[str]:
    """Rows joined by ``options.join_rows``, up to ``options.max_bytes`` of text."""
    options.validate()
    total = 0
    for document in join(rows, parse_join(options.join_rows)):
        yield document
        total += len(document.encode("utf-8"))
        if options.max_bytes is not None and total >= options.max_bytes:
            return


class DatasetSource(Source):
    """A source whose documents are a dataset's rows joined as ``RowOptions`` say (the hub, local
    dataset files). Subclasses say how ``datasets.load_dataset`` is called."""

    online: ClassVar[bool] = False  # a failure to load is the environment's (the network), not the user's

    def load_arguments(self) -> tuple[tuple, dict]:
        """(args, kwargs) for ``datasets.load_dataset``, split aside."""
        raise NotImplementedError

    def rows(self, split: str | None = None) -> Iterator[str]:
        """The text of each row of split ``split`` (default: the options' split), in order."""
        args, kwargs = self.load_arguments()
        return dataset_rows(args, kwargs, self.spec, self.options, split or self.options.split, self.online)

    def documents(self, chunk_bytes: int | None = None, split: str | None = None) -> Iterator[str]:
        return joined_documents(self.rows(split), self.options)
