"""One evaluation set per table: the same scored tokens at every length.

A perplexity-versus-length table compares lengths, so every length must score the same
target tokens of the same text; otherwise a cell moves with the text it happened to get.
``EvalSet`` fixes spans of ``span_length + 1`` tokens (``span_length`` = the longest length of
the table) once, and each length L cuts every span into its own windows:

- non-overlapping (Press et al., 2022): windows of L inputs at 0, L, 2L, ... of the span; a
  last, shorter window takes the remainder when L does not divide the span;
- sliding with stride S (Press et al.; Peng et al., 2023): windows of L inputs ending at
  L, L + S, L + 2S, ... (the last ending at the span's end), each scoring only the targets
  after the previous window's end, the first scoring all of its own.

- truncated to C (the truncation null): the non-overlapping windows of L, each scored by a model
  that sees at most C tokens: inside every window of L, the first C targets as in a window of C,
  then windows of C inputs sliding by ``null_stride(C)``, each scoring its last targets. The
  cold starts are those of L; only the context beyond C is taken away. A model that "keeps" its
  perplexity at L scores no worse than this; one that "uses" the longer context scores better.

Every way, the targets scored at every length are exactly positions 1 .. span_length of
every span, each once. Two protocols choose the spans:

- ``stream`` (Press et al., WikiText-103): the held-out documents joined into one stream with
  ``DOCUMENT_SEPARATOR`` and cut into consecutive spans, spread evenly over the stream when the
  budget allows fewer than all; long lengths get many spans even from short documents.
  The bootstrap unit is the span.
- ``documents`` (Peng et al. and Chen et al., PG-19 / Proof-pile): only held-out documents at
  least ``span_length + 1`` tokens long, each contributing spans from its start, one document
  after another (a second span of each document only once every document has one), so the
  spans cover as many distinct documents as possible. The bootstrap unit is the document.

A cell with fewer than ``MIN_SPANS`` spans (stream) or ``MIN_DOCUMENTS`` documents (documents)
carries a note saying so instead of looking as solid as the others.
"""

from __future__ import annotations

import hashlib
import math
import sys
from dataclasses import dataclass

import numpy as np

from poscli.data.corpus import DOCUMENT_SEPARATOR, Corpus, join_documents
from poscli.errors import PoscliError

PROTOCOLS = ("stream", "documents")
MIN_SPANS = 16
MIN_DOCUMENTS = 8


@dataclass(frozen=True)
class Window:
    """One forward pass: inputs span[start:end], targets span[start + 1 : end + 1], of which the
    first ``scored_from`` are context only."""

    span: int
    start: int
    end: int
    scored_from: int

    @property
    def length(self) -> int:
        return self.end - self.start


@dataclass
class EvalSet:
    """Spans of ``span_length + 1`` tokens scored at every length.

    spans: (S, span_length + 1) uint8 (bytes) or wider; units: (S,) the bootstrap unit of each span (its index in
    the stream protocol, its document in the documents protocol); documents: (S,) how many
    distinct documents each span touches (1 in the documents protocol).
    """

    corpus: str
    protocol: str
    span_length: int
    spans: np.ndarray
    units: np.ndarray
    document_ids: list[set[int]]
    token_bytes: np.ndarray | None = None  # (V,) UTF-8 bytes each token stands for; None: one (byte tokens)

    @property
    def num_spans(self) -> int:
        return len(self.spans)

    @property
    def num_documents(self) -> int:
        return len(set().union(*self.document_ids)) if self.document_ids else 0

    @property
    def num_units(self) -> int:
        return len(np.unique(self.units))

    @property
    def fingerprint(self) -> str:
        """12 hex digits naming the exact tokens of the set (equal sets, equal fingerprints)."""
        digest = hashlib.sha1(f"{self.protocol}:{self.span_length}:".encode())
        digest.update(np.ascontiguousarray(self.spans).tobytes())
        return digest.hexdigest()[:12]

    def note(self) -> str:
        """Why a cell of this set is thin, or ''."""
        if self.protocol == "stream" and self.num_spans < MIN_SPANS:
            return f"only {self.num_spans} spans of {self.span_length} (fewer than {MIN_SPANS})"
        if self.protocol == "documents" and self.num_documents < MIN_DOCUMENTS:
            shortest = self.span_length + 1
            return f"only {self.num_documents} documents of at least {shortest} tokens (fewer than {MIN_DOCUMENTS})"
        return ""

    def windows(self, length: int, stride: int | None = None, context: int | None = None) -> list[Window]:
        """Every window of ``length`` inputs over every span (see the module docstring); with
        ``context``, the truncation null's windows of at most ``context`` inputs."""
        cut = (
            span_windows(self.span_length, length, stride)
            if context is None
            else truncated_windows(self.span_length, length, context)
        )
        return [Window(span, start, end, first) for span in range(self.num_spans) for start, end, first in cut]


NULL_PREFIX = "truncated-"


def mode_name(stride: int | None, context: int | None = None) -> str:
    """How a row's windows were cut: nonoverlapping, sliding-S, or truncated-C (the truncation null)."""
    if context is not None:
        return f"{NULL_PREFIX}{context}"
    return "nonoverlapping" if stride is None else f"sliding-{stride}"


def null_stride(context: int) -> int:
    """The truncation null's stride: a quarter of the context, so every target beyond the first C
    of its window sees between 3/4 C and C - 1 tokens (a stride of 1 would give exactly C - 1,
    at C times the cost; the loss by position of poscli's models is flat well before 3/4 C)."""
    return max(1, context // 4)


def truncated_windows(span_length: int, length: int, context: int) -> list[tuple[int, int, int]]:
    """(start, end, scored_from) of the truncation null at ``length`` over one span: each
    non-overlapping window of ``length`` cut into sliding windows of ``context`` inputs that never
    reach before its start, so every target is scored once, with the cold starts of ``length``."""
    if context < 1:
        raise PoscliError(f"a context must be at least 1, got {context}")
    windows = []
    for start, end, _ in span_windows(span_length, length):
        windows += [
            (start + a, start + b, first) for a, b, first in span_windows(end - start, context, null_stride(context))
        ]
    return windows


def span_windows(span_length: int, length: int, stride: int | None = None) -> list[tuple[int, int, int]]:
    """(start, end, scored_from) of each window of ``length`` inputs over one span whose targets
    are 1 .. span_length: every target is scored exactly once, at every length and stride."""
    if length < 1:
        raise PoscliError(f"a length must be at least 1, got {length}")
    length = min(length, span_length)
    if stride is None:
        return [(start, min(start + length, span_length), 0) for start in range(0, span_length, length)]
    if not stride >= 1:
        raise PoscliError(f"--stride must be at least 1, got {stride}")
    windows, previous_end = [], 0
    end = length
    while True:
        end = min(end, span_length)
        start = end - length
        windows.append((start, end, previous_end - start))
        if end == span_length:
            return windows
        previous_end = end
        end += stride


def build_eval_set(
    corpus: Corpus,
    span_length: int,
    max_tokens: int,
    protocol: str = "stream",
    all_documents: bool = False,
    token_bytes: np.ndarray | None = None,
) -> EvalSet:
    """The spans scored at every length of a table whose longest length is ``span_length``.

    About ``max_tokens`` targets per length: ceil(max_tokens / span_length) spans (at least one).
    ``all_documents`` uses every document of the corpus (for a corpus the run did not train on);
    otherwise only the held-out ones.
    """
    if protocol not in PROTOCOLS:
        raise PoscliError(f"--protocol {protocol!r} is not a protocol; choose {' or '.join(PROTOCOLS)}")
    wanted = max(1, math.ceil(max_tokens / span_length))
    indices = list(range(corpus.num_documents)) if all_documents else corpus.heldout_indices()
    lengths = corpus.document_lengths()
    where = "documents" if all_documents else "held-out documents"
    if protocol == "stream":
        stream, starts = join_documents(
            [corpus.document(d) for d in indices], getattr(corpus, "separator", DOCUMENT_SEPARATOR)
        )
        available = (len(stream) - 1) // span_length
        if available < 1:
            raise PoscliError(
                f"the {where} of {corpus.spec!r} hold {len(stream)} tokens in all, too few for length {span_length}; "
                f"lengths up to {max(len(stream) - 1, 1)} work: use a shorter --lengths or a larger corpus"
            )
        slots = np.unique(np.linspace(0, available - 1, min(wanted, available)).round().astype(int))
        spans = np.stack([stream[k * span_length : k * span_length + span_length + 1] for k in slots])
        ends = starts + np.array([lengths[d] for d in indices])
        document_ids = []
        for k in slots:
            first, last = k * span_length, k * span_length + span_length  # tokens first .. last of the stream
            touched = np.flatnonzero((starts <= last) & (ends > first))
            document_ids.append({indices[i] for i in touched})
        return EvalSet(corpus.spec, protocol, span_length, spans, np.arange(len(slots)), document_ids, token_bytes)

    long_enough = [d for d in indices if lengths[d] >= span_length + 1]
    if not long_enough:
        longest = int(max(lengths[d] for d in indices)) if indices else 0
        raise PoscliError(
            f"no {where[:-1]} of {corpus.spec!r} is long enough for length {span_length}: the longest has {longest} "
            "tokens, "
            f"so lengths up to {max(longest - 1, 1)} work; use a shorter --lengths, --protocol stream, or a corpus "
            "with longer documents"
        )
    chosen: list[tuple[int, int]] = []  # (document, start)
    round_index = 0
    while len(chosen) < wanted:
        added = False
        for d in long_enough:
            start = round_index * span_length
            if start + span_length + 1 <= lengths[d] and len(chosen) < wanted:
                chosen.append((d, start))
                added = True
        if not added:
            break
        round_index += 1
    spans = np.stack([corpus.document(d)[start : start + span_length + 1] for d, start in chosen])
    return EvalSet(
        corpus.spec,
        protocol,
        span_length,
        spans,
        np.array([d for d, _ in chosen]),
        [{d} for d, _ in chosen],
        token_bytes,
    )


class SplitMismatch(PoscliError):
    """The held-out documents a run recorded are not the ones this corpus would hold out now."""


def default_lengths(config: dict) -> list[int]:
    """A trained run: its train length x1, x4, x16. An extended run: its original length, its
    fine-tuning length and its target."""
    extension = config.get("extension")
    if extension:
        finetune = extension["finetune"]["length"]
        return sorted({extension["original_length"], extension["target"], *([finetune] if finetune else [])})
    train_length = config["model"]["train_length"]
    return [train_length, 4 * train_length, 16 * train_length]


def check_split(config: dict, corpus: Corpus) -> None:
    """Refuse to evaluate a run on documents it may have trained on: the held-out documents it
    recorded must be the ones ``corpus`` holds out now."""
    recorded = (config.get("data") or {}).get("heldout_sha1")
    if recorded is None or recorded == corpus.heldout_sha1():
        return
    python = (config.get("data") or {}).get("python")
    now = sys.version.split()[0]
    if corpus.spec == "stdlib" and python and python != now:
        cause = f"it was trained on the standard library of Python {python}, and this is Python {now}"
    elif corpus.spec == "stdlib" and not python:
        cause = (
            "it was trained before poscli grouped near-duplicates in the split, or on another Python's standard library"
        )
    else:
        cause = f"the documents of {corpus.spec!r} changed since it was trained (edited, added or removed files)"
    raise SplitMismatch(
        f"run {config['name']!r} held out other documents than {corpus.spec!r} holds out now: {cause}. "
        "Its held-out perplexity could include text it trained on; evaluate with the same corpus and Python, "
        "or add --allow-split-mismatch to evaluate anyway"
    )
