"""Corpora tokenized once into token files on disk, read window by window (``poscli data prepare``).

A prepared corpus is a folder:

- ``train.bin``: the training documents' tokens joined by the separator, one flat array (dtype in
  meta.json), the stream training windows are cut from (nanoGPT's train.bin);
- ``heldout.bin`` and ``heldout_offsets.npy``: the held-out documents, concatenated, and where
  each starts, (H + 1,) int64;
- ``lengths.npy`` (D,) int64 and ``heldout.npy`` (D,) bool: every document's length and side;
- ``meta.json``: the source, tokenizer, split rule and summary; ``tokenizer.json`` for a BPE.

Documents are streamed: tokenized in batches and appended, so preparing needs memory for one
batch, whatever the corpus' size. The split is by document and decided by each document alone: a
document is held out when its sha1 falls in the held-out fraction of the hash range, so it needs no
second pass (near-duplicate grouping, which needs every document at once, is not done here; the
summary says so). Training and evaluation read windows with ``pread``, never mapping the file, so
resident memory stays the size of a batch.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from poscli.core.io import atomic_write
from poscli.data import sources
from poscli.data import tokenizer as tokenizers
from poscli.data.tokenizer import ByteTokenizer, load_file, token_dtype
from poscli.errors import PoscliError

FORMAT = 1
META_FILE = "meta.json"
BATCH_DOCUMENTS = 256
HASH_RANGE = 1 << 32
CHUNK_BYTES = 1 << 20  # a text file longer than this is cut at line ends into documents of about this size


def source_documents(spec: str, rows=None, chunk_bytes: int = CHUNK_BYTES) -> Iterator[str]:
    """The documents of a corpus, one at a time, from its source (``poscli.data.sources``): a long
    text file cut at line ends into documents of about ``chunk_bytes``; ``rows``: a ``RowOptions``."""
    yield from sources.resolve(spec, rows).documents(chunk_bytes)


def heldout_by_hash(digest: str, fraction: float) -> bool:
    """Whether a document whose sha1 is ``digest`` is held out: its first 32 bits, as a fraction of
    their range, fall below ``fraction``. Depends on the document's content only."""
    return int(digest[:8], 16) < fraction * HASH_RANGE


class TokenFile:
    """A flat token file read by position: ``read(start, count)``, ``windows(starts, length)``."""

    def __init__(self, path: Path, dtype: str):
        self.path = Path(path)
        self.dtype = np.dtype(dtype)
        self.length = self.path.stat().st_size // self.dtype.itemsize

    def __len__(self) -> int:
        return self.length

    def read(self, start: int, count: int) -> np.ndarray:
        """(count,) tokens from ``start``."""
        if start < 0 or start + count > self.length:
            raise IndexError(f"tokens {start}..{start + count} are outside {self.path.name} ({self.length} tokens)")
        with open(self.path, "rb") as handle:
            data = os.pread(handle.fileno(), count * self.dtype.itemsize, start * self.dtype.itemsize)
        return np.frombuffer(data, dtype=self.dtype).copy()

    def windows(self, starts, length: int) -> np.ndarray:
        """(B, length) tokens, row b from starts[b]; one open file for the batch."""
        out = np.empty((len(starts), length), dtype=self.dtype)
        size = length * self.dtype.itemsize
        with open(self.path, "rb") as handle:
            for row, start in enumerate(starts):
                if start < 0 or start + length > self.length:
                    raise IndexError(
                        f"window {start}..{start + length} is outside {self.path.name} ({self.length} tokens)"
                    )
                out[row] = np.frombuffer(
                    os.pread(handle.fileno(), size, int(start) * self.dtype.itemsize), dtype=self.dtype
                )
        return out


@dataclass
class PreparedCorpus:
    """A prepared folder with the part of ``data.Corpus``'s interface that training and evaluation use."""

    folder: Path
    meta: dict
    lengths: np.ndarray  # (D,) int64
    heldout: np.ndarray  # (D,) bool
    heldout_offsets: np.ndarray  # (H + 1,) int64
    _heldout_tokens: TokenFile = field(repr=False, default=None)

    @property
    def spec(self) -> str:
        return str(self.folder)

    @property
    def num_documents(self) -> int:
        return len(self.lengths)

    def document_lengths(self) -> np.ndarray:
        return self.lengths

    def heldout_indices(self) -> list[int]:
        return np.flatnonzero(self.heldout).tolist()

    def document(self, index: int) -> np.ndarray:
        """A held-out document's tokens (training documents are only read as the train stream)."""
        if not self.heldout[index]:
            raise PoscliError(
                f"document {index} of {self.folder} is a training document; a prepared corpus reads those only as "
                "train.bin"
            )
        h = int(np.searchsorted(np.flatnonzero(self.heldout), index))
        start, end = int(self.heldout_offsets[h]), int(self.heldout_offsets[h + 1])
        return self._heldout_tokens.read(start, end - start)

    def train_tokens(self) -> TokenFile:
        return TokenFile(self.folder / "train.bin", self.meta["dtype"])

    def heldout_sha1(self) -> list[str]:
        return list(self.meta["heldout_sha1"])

    def summary(self) -> dict:
        return dict(self.meta["summary"])

    @property
    def tokenizer(self) -> str:
        return self.meta["tokenizer"]

    def load_tokenizer(self):
        """The tokenizer the corpus was prepared with."""
        if self.meta["tokenizer"] == "bytes":
            return ByteTokenizer()
        loaded = load_file(self.folder)
        loaded.spec = self.meta["tokenizer"]
        return loaded

    def tokenized(self, tokenizer) -> PreparedCorpus:
        """Itself: a prepared corpus is already in its tokenizer's tokens (checked)."""
        if tokenizer.fingerprint() != self.load_tokenizer().fingerprint():
            raise PoscliError(f"{self.folder} was prepared with --tokenizer {self.tokenizer}, not {tokenizer.spec}")
        return self


def check_request(out: Path, fraction: float) -> None:
    """Refuse, in one line, a held-out share outside (0, 0.5) or an output folder already in use."""
    if not 0 < fraction < 0.5:
        raise PoscliError(f"--heldout-fraction {fraction}: use a share between 0 and 0.5, e.g. 0.01")
    if Path(out).exists():
        found = list(Path(out).iterdir())
        if found and all(path.name.endswith(".partial") for path in found):  # what a killed prepare left
            for path in found:
                path.unlink()
        elif found:
            raise PoscliError(f"{out} exists and is not empty; choose another --out or remove it")


def choose_tokenizer(spec: str, source: str, rows, fraction: float, sample_bytes: int):
    """The tokenizer ``spec`` names (bytes, bpe:N, a tokenizer.json); a BPE is trained on the first
    ``sample_bytes`` characters of training text (held-out documents, by their hash, skipped)."""
    kind, size = tokenizers.parse_spec(spec)
    if kind == "bytes":
        return tokenizers.ByteTokenizer()
    if kind == "file":
        return tokenizers.load_file(spec)

    def training_sample() -> Iterator[str]:
        total = 0
        for text in source_documents(source, rows):
            if heldout_by_hash(hashlib.sha1(text.encode("utf-8", errors="replace")).hexdigest(), fraction):
                continue
            yield text
            total += len(text)
            if total >= sample_bytes:
                return

    return tokenizers.train_bpe(training_sample(), size)


class _SplitWriter:
    """Documents tokenized in batches and written to the train or the held-out file as they come
    (held out by their sha1, ``heldout_by_hash``): training documents joined by a separator, held-out
    ones end to end with their offsets recorded."""

    def __init__(self, train_file, heldout_file, tokenizer, dtype, fraction: float):
        self.train_file, self.heldout_file, self.tokenizer, self.dtype = train_file, heldout_file, tokenizer, dtype
        self.separator = tokenizer.encode("\n\n").astype(dtype)
        self.fraction = fraction
        self.lengths, self.heldout, self.heldout_hashes, self.heldout_offsets = [], [], [], [0]
        self.train_count = self.heldout_count = self.read_bytes = 0

    def add(self, batch: list[str]) -> None:
        tokenizer = self.tokenizer
        encoded = (
            tokenizer.encode_batch(batch)
            if hasattr(tokenizer, "encode_batch")
            else [tokenizer.encode(t) for t in batch]
        )
        for text, ids in zip(batch, encoded):
            raw = text.encode("utf-8", errors="replace")
            self.read_bytes += len(raw)
            if len(ids) == 0:
                continue
            digest = hashlib.sha1(raw).hexdigest()
            held = heldout_by_hash(digest, self.fraction)
            self.lengths.append(len(ids))
            self.heldout.append(held)
            ids = np.asarray(ids, dtype=self.dtype)
            if held:
                self.heldout_file.write(ids.tobytes())
                self.heldout_count += len(ids)
                self.heldout_offsets.append(self.heldout_count)
                self.heldout_hashes.append(digest[:12])
                continue
            if self.train_count:
                self.train_file.write(self.separator.tobytes())
                self.train_count += len(self.separator)
            self.train_file.write(ids.tobytes())
            self.train_count += len(ids)


def prepare(
    documents: Iterable[str],
    out: Path,
    tokenizer,
    fraction: float,
    source: str,
    progress: Callable[[int, int], None] | None = None,
) -> PreparedCorpus:
    """Tokenize ``documents`` (an iterable of texts, read once) into the folder ``out``.

    ``progress(documents_done, bytes_done)`` is called after each batch."""
    out = Path(out)
    created = not out.exists()
    out.mkdir(parents=True, exist_ok=True)
    try:
        return _prepare_into(documents, out, tokenizer, fraction, source, progress)
    except BaseException:  # nothing left behind: not even the folder, where this call made it
        if created and out.is_dir() and not any(out.iterdir()):
            out.rmdir()
        raise


def _prepare_into(documents, out: Path, tokenizer, fraction: float, source: str, progress) -> PreparedCorpus:
    """``prepare``'s work, in the folder ``out`` that exists: the split files, then the metadata."""
    dtype = token_dtype(tokenizer.vocab_size)
    partial = {name: out / f"{name}.bin.partial" for name in ("train", "heldout")}
    try:
        with open(partial["train"], "wb") as train_file, open(partial["heldout"], "wb") as heldout_file:
            writer = _SplitWriter(train_file, heldout_file, tokenizer, dtype, fraction)
            for batch in _batches(documents):
                writer.add(batch)
                if progress:
                    progress(len(writer.lengths), writer.read_bytes)
    except BaseException:  # a source that fails to read, Ctrl-C: no half-written files left behind
        for path in partial.values():
            path.unlink(missing_ok=True)
        raise
    held = sum(writer.heldout)
    if held == 0 or held == len(writer.heldout):
        for path in partial.values():
            path.unlink(missing_ok=True)
        raise PoscliError(
            f"{source}: {len(writer.lengths)} document(s), {held} held out at fraction {fraction}; "
            "a prepared corpus needs documents on both sides (a larger --heldout-fraction; a corpus this small needs "
            "no preparing: train on it directly with --data)"
        )
    for name, path in partial.items():
        os.replace(path, out / f"{name}.bin")
    _write_meta(out, writer, tokenizer, source)
    return open_prepared(out)


def _batches(documents: Iterable[str]) -> Iterator[list[str]]:
    """The non-empty documents in batches of BATCH_DOCUMENTS (the last one shorter)."""
    batch = []
    for text in documents:
        if text:
            batch.append(text)
        if len(batch) == BATCH_DOCUMENTS:
            yield batch
            batch = []
    if batch:
        yield batch


def _write_meta(out: Path, writer: _SplitWriter, tokenizer, source: str) -> None:
    """The index arrays, the tokenizer and META_FILE (format, source, tokenizer, split, summary)."""
    lengths, heldout = np.array(writer.lengths, dtype=np.int64), np.array(writer.heldout, dtype=bool)
    np.save(out / "lengths.npy", lengths)
    np.save(out / "heldout.npy", heldout)
    np.save(out / "heldout_offsets.npy", np.array(writer.heldout_offsets, dtype=np.int64))
    tokenizer.save(out)
    fraction = writer.fraction
    meta = {
        "format": FORMAT,
        "source": source,
        "tokenizer": tokenizer.spec,
        "vocab_size": tokenizer.vocab_size,
        "dtype": writer.dtype.name,
        "heldout_fraction": fraction,
        "heldout_sha1": sorted(writer.heldout_hashes),
        "summary": {
            "spec": source,
            "documents": len(lengths),
            "train_documents": int((~heldout).sum()),
            "heldout_documents": int(heldout.sum()),
            "train_tokens": int(lengths[~heldout].sum()),
            "heldout_tokens": int(lengths[heldout].sum()),
            "longest_heldout_document": int(lengths[heldout].max()),
            "bytes": writer.read_bytes,
            "split": f"by document: held out when the first 32 bits of its sha1 fall in the lowest {fraction:g} of "
            "their range (decided per document while streaming; no near-duplicate grouping)",
        },
    }
    with atomic_write(out / META_FILE, "w") as handle:
        json.dump(meta, handle, indent=2)


def is_prepared(path) -> bool:
    return (Path(path) / META_FILE).is_file()


def open_prepared(folder) -> PreparedCorpus:
    folder = Path(folder)
    try:
        meta = json.loads((folder / META_FILE).read_text())
    except (OSError, ValueError) as error:
        raise PoscliError(
            f"{folder} is not a prepared corpus ({error}); make one with: poscli data prepare SOURCE --out {folder}"
        ) from None
    if meta.get("format") != FORMAT:
        raise PoscliError(
            f"{folder} was prepared in format {meta.get('format')}, this poscli reads {FORMAT}; prepare it again"
        )
    return PreparedCorpus(
        folder=folder,
        meta=meta,
        lengths=np.load(folder / "lengths.npy"),
        heldout=np.load(folder / "heldout.npy"),
        heldout_offsets=np.load(folder / "heldout_offsets.npy"),
        _heldout_tokens=TokenFile(folder / "heldout.bin", meta["dtype"]),
    )
