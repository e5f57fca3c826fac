"""Byte-level tokenizer, corpora, a deterministic document-level split, and a token cache.

Corpora (``--data``):

- ``stdlib`` (default): the Python standard library sources of the running interpreter,
  one document per ``.py`` file, test packages and site-packages excluded. Available
  offline on every machine that runs poscli.
- a local text file, folder (searched recursively) or glob, loaded with ``datasets``'
  ``text`` builder, one document per file. Files that look binary (a NUL byte) are skipped.
- ``passkey``: synthetic passkey-retrieval documents (``poscli.passkey``); training on it
  draws whole passkey examples of exactly the train length instead of random windows.
- ``hf:NAME[:CONFIG]``: ``datasets.load_dataset(NAME, CONFIG, split="train")`` for users who
  are online; each row's ``text`` column (or its first string column) is a document.

Tokenized corpora are cached under ``$POSCLI_CACHE`` (default ``~/.cache/poscli``) keyed by
the corpus and the files' sizes and modification times, so a second run starts in seconds.
"""

from __future__ import annotations

import glob as globlib
import hashlib
import json
import math
import os
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from poscli.errors import EnvironmentFailure, PoscliError
from poscli.io import atomic_write

VOCAB_SIZE = 256
CACHE_VERSION = 1
TEST_DIRECTORY_NAMES = {"test", "tests", "idle_test"}


def encode(text: str) -> np.ndarray:
    """UTF-8 bytes as token ids 0..255. (N,) uint8."""
    return np.frombuffer(text.encode("utf-8"), dtype=np.uint8).copy()  # writable, so torch can share it


def decode(tokens) -> str:
    return bytes(bytearray(int(t) for t in tokens)).decode("utf-8", errors="replace")


def cache_dir() -> Path:
    return Path(os.environ.get("POSCLI_CACHE", Path.home() / ".cache" / "poscli"))


@dataclass
class Corpus:
    """A tokenized corpus: documents concatenated, with offsets and a held-out mask.

    tokens: (N,) uint8; offsets: (D + 1,) int64, document d is tokens[offsets[d]:offsets[d+1]];
    doc_hashes: (D,) sha1 hex of each document's bytes; heldout: (D,) bool.
    """

    spec: str
    tokens: np.ndarray
    offsets: np.ndarray
    doc_hashes: list[str]
    heldout: np.ndarray

    @property
    def num_documents(self) -> int:
        return len(self.offsets) - 1

    def document(self, index: int) -> np.ndarray:
        return self.tokens[self.offsets[index] : self.offsets[index + 1]]

    def document_lengths(self) -> np.ndarray:
        return np.diff(self.offsets)

    def train_tokens(self) -> np.ndarray:
        """Every training document, concatenated. (N_train,) uint8."""
        return np.concatenate([self.document(d) for d in range(self.num_documents) if not self.heldout[d]])

    def heldout_documents(self) -> list[np.ndarray]:
        return [self.document(d) for d in range(self.num_documents) if self.heldout[d]]

    def summary(self) -> dict:
        lengths = self.document_lengths()
        return {
            "spec": self.spec,
            "documents": self.num_documents,
            "train_documents": int((~self.heldout).sum()),
            "heldout_documents": int(self.heldout.sum()),
            "train_tokens": int(lengths[~self.heldout].sum()),
            "heldout_tokens": int(lengths[self.heldout].sum()),
            "longest_heldout_document": int(lengths[self.heldout].max()),
            "split": "stratified by length: documents sorted by (length, sha1); in each run of "
            "round(1/fraction) the one with the smallest sha1 is held out",
            "heldout_sha1": sorted(h[:12] for h, held in zip(self.doc_hashes, self.heldout) if held),
        }


def stratified_split(lengths: np.ndarray, doc_hashes: list[str], fraction: float) -> np.ndarray:
    """Deterministic document-level held-out mask that spans the whole range of lengths.

    Documents are sorted by (length, sha1 of content) and cut into consecutive groups of
    round(1 / fraction); the document with the smallest sha1 in each group is held out. The
    result depends only on the documents' contents, not on their order or the machine, and
    the held-out set has long documents too, so long-context evaluation finds windows.
    """
    group = max(2, round(1 / fraction))
    order = sorted(range(len(lengths)), key=lambda d: (int(lengths[d]), doc_hashes[d]))
    heldout = np.zeros(len(lengths), dtype=bool)
    for start in range(0, len(order), group):
        members = order[start : start + group]
        heldout[min(members, key=lambda d: doc_hashes[d])] = True
    return heldout


# --------------------------------------------------------------------------- sources


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
        candidates = sorted(p for p in path.rglob("*") if p.is_file() and not any(x.startswith(".") for x in p.relative_to(path).parts))
    elif any(ch in spec for ch in "*?["):
        candidates = sorted(Path(p) for p in globlib.glob(os.path.expanduser(spec), recursive=True) if Path(p).is_file())
        if not candidates:
            raise PoscliError(f"the pattern {spec!r} matches no files; check the path or quote the glob")
    else:
        raise PoscliError(
            f"--data {spec!r} is not 'stdlib', 'passkey', an existing file or folder, a glob, or hf:NAME[:CONFIG]"
        )
    unreadable = [p for p in candidates if not os.access(p, os.R_OK)]
    if unreadable:
        raise PoscliError(f"cannot read {unreadable[0]}: check its permissions")
    files = [p for p in candidates if p.stat().st_size > 0 and not _looks_binary(p)]
    if not files:
        raise PoscliError(f"--data {spec!r} has no non-empty text files (binary files are skipped)")
    return files


def _fingerprint(files: list[Path]) -> list:
    return [(str(p), p.stat().st_size, p.stat().st_mtime_ns) for p in files]


def _load_text_files(files: list[Path]) -> list[str]:
    """One document per file, read by ``datasets``' text builder."""
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


def _load_hub(name: str, config: str | None) -> list[str]:
    """``datasets.load_dataset`` from the Hugging Face hub; needs a network connection."""
    import datasets

    try:
        dataset = datasets.load_dataset(name, config, split="train")
    except Exception as error:  # offline, unknown name, missing config: all surface here
        first_line = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise EnvironmentFailure(
            f"could not load hf:{name}{':' + config if config else ''} from the Hugging Face hub ({first_line}); "
            "check the name and your connection, or use --data stdlib or a local path"
        ) from error
    column = "text" if "text" in dataset.column_names else next(
        (c for c, f in dataset.features.items() if getattr(f, "dtype", None) == "string"), None
    )
    if column is None:
        raise PoscliError(f"hf:{name} has no text column; its columns are {', '.join(dataset.column_names)}")
    return [row for row in dataset[column] if row]


def _documents_and_key(spec: str) -> tuple[callable, str]:
    """A loader for the corpus' documents and a cache key that changes when its sources do."""
    if spec == "stdlib":
        files = stdlib_files()
        key_source = ["stdlib", sys.version, _fingerprint(files)]
        return (lambda: [p.read_text(encoding="utf-8", errors="replace") for p in files]), _hash(key_source)
    if spec == "passkey":
        from poscli.passkey import synthetic_documents

        return synthetic_documents, _hash(["passkey", CACHE_VERSION])
    if spec.startswith("hf:"):
        name, _, config = spec[3:].partition(":")
        if not name:
            raise PoscliError("--data hf: needs a dataset name, e.g. --data hf:wikitext:wikitext-103-raw-v1")
        return (lambda: _load_hub(name, config or None)), _hash(["hf", name, config])
    files = local_files(spec)
    return (lambda: _load_text_files(files)), _hash(["files", _fingerprint(files)])


def _hash(value) -> str:
    return hashlib.sha256(json.dumps(value, default=str).encode()).hexdigest()[:24]


def load_corpus(spec: str = "stdlib", heldout_fraction: float = 0.1) -> Corpus:
    """Tokenize (or read from cache) the corpus ``spec`` and split it into train / held-out."""
    load_documents, key = _documents_and_key(spec)
    cache_file = cache_dir() / f"corpus-{key}-v{CACHE_VERSION}.npz"
    tokens = offsets = doc_hashes = None
    if cache_file.exists():
        try:
            with np.load(cache_file, allow_pickle=False) as cached:
                tokens, offsets, doc_hashes = cached["tokens"], cached["offsets"], [str(h) for h in cached["doc_hashes"]]
        except (OSError, ValueError, KeyError):
            tokens = None  # a damaged cache is rebuilt, not trusted
    if tokens is None:
        documents = [encode(text) for text in load_documents()]
        documents = [d for d in documents if len(d) > 0]
        if not documents:
            raise PoscliError(f"--data {spec!r} has no text")
        tokens = np.concatenate(documents)
        offsets = np.concatenate([[0], np.cumsum([len(d) for d in documents])]).astype(np.int64)
        doc_hashes = [hashlib.sha1(d.tobytes()).hexdigest() for d in documents]
        try:
            cache_file.parent.mkdir(parents=True, exist_ok=True)
            with atomic_write(cache_file, "wb") as handle:
                np.savez(handle, tokens=tokens, offsets=offsets, doc_hashes=np.array(doc_hashes))
        except OSError:
            pass  # the cache is an optimisation; a read-only home must not stop training
    if len(offsets) - 1 < 2:
        raise PoscliError(f"--data {spec!r} has only one document; it needs at least 2 to hold one out for evaluation")
    heldout = stratified_split(np.diff(offsets), doc_hashes, heldout_fraction)
    return Corpus(spec=spec, tokens=tokens, offsets=offsets, doc_hashes=doc_hashes, heldout=heldout)


def eval_windows(corpus: Corpus, length: int, max_tokens: int, stride: int | None = None) -> list[tuple[np.ndarray, int]]:
    """Evaluation windows of ``length + 1`` tokens (``length`` inputs, each with its next token
    as target) cut from held-out documents with at least that many tokens, each paired with
    the index of its first scored target.

    - ``stride`` None (non-overlapping, the default of Press et al.): windows start every
      ``length`` tokens and score every target; consecutive windows share one boundary token,
      so every token after a document's first is scored exactly once.
    - ``stride`` S < length (sliding window, as the ALiBi and YaRN evaluations): windows start
      every S tokens; a document's first window scores all its targets, each later one only
      its last S, so every token is still scored once but each has >= length - S of context.

    About enough windows to score ``max_tokens`` targets are used (the count is set from the
    mean number scored per window), spread evenly over all candidates, so the choice is
    deterministic and covers many documents.
    """
    step = stride or length
    if not 1 <= step <= length:
        raise PoscliError(f"--stride must be between 1 and the window length {length}, got {step}")
    windows = []
    for document in corpus.heldout_documents():
        for start in range(0, len(document) - length, step):
            windows.append((document[start : start + length + 1], 0 if start == 0 else length - step))
    if not windows:
        longest = int(corpus.document_lengths()[corpus.heldout].max())
        raise PoscliError(
            f"no held-out document of {corpus.spec!r} is long enough for length {length}: the longest has "
            f"{longest} tokens, so lengths up to {longest - 1} work; use a shorter --lengths or a corpus with longer documents"
        )
    scored_per_window = sum(length - first for _, first in windows) / len(windows)  # `step`, or more with first windows
    limit = max(1, math.ceil(max_tokens / scored_per_window))
    if len(windows) > limit:
        picks = np.linspace(0, len(windows) - 1, limit).round().astype(int)
        windows = [windows[i] for i in picks]
    return windows
