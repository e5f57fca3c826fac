"""Perplexity versus length, and the results tables.

Every length of one evaluation scores exactly the same target tokens (``poscli.evaluation.evalset``): the
spans are fixed for the longest length and each length cuts them into its own windows,
non-overlapping (Press et al., 2022) or sliding. Perplexity is exp of the token-weighted mean
loss; each cell carries a 95% bootstrap interval over the evaluation units (spans or documents,
``poscli.evaluation.stats``) and the counts of windows, spans and documents behind it. Byte-level tokens
make bits per byte = loss / ln 2. An optional context-free reference row (``poscli.evaluation.reference``)
is scored on the same spans.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import NamedTuple

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from poscli.config import TrainConfig
from poscli.core.device import compile_model, select_device
from poscli.data.corpus import Corpus, CorpusOptions, absolute_spec, load_corpus
from poscli.data.prepared import TokenFile
from poscli.data.tokenizer import run_tokenizer
from poscli.errors import NotApplicable, PoscliError
from poscli.evaluation.by_position import loss_by_position, position_curve
from poscli.evaluation.evalset import EvalSet, build_eval_set, check_split, default_lengths, mode_name
from poscli.evaluation.perplexity_tables import TABLE_KEY
from poscli.evaluation.reference import REFERENCE_LABEL, REFERENCE_RUN, NGram
from poscli.evaluation.stats import bootstrap_perplexity, interval
from poscli.model import pretrained, runs
from poscli.model.pretrained import check_memory

EVAL_BATCH_TOKENS = 16384
# Logits (windows x tokens x vocabulary) of one forward, 0.25 GiB in float32: a pretrained model's
# 32k-150k vocabulary batches fewer windows, and its float64 loss is taken in slices of this size.
EVAL_BATCH_LOGITS = 1 << 26


def eval_batch_size(length: int, vocab_size: int) -> int:
    """Windows of ``length`` tokens per forward: EVAL_BATCH_TOKENS tokens and EVAL_BATCH_LOGITS logits at most."""
    return max(1, min(EVAL_BATCH_TOKENS // length, EVAL_BATCH_LOGITS // (length * vocab_size)))


def vocab_size(model) -> int:
    """The model's vocabulary: its config's (poscli's GPT, a transformers model, either compiled);
    bytes' 256 for a model without one (it sets only how many windows share a forward)."""
    return int(getattr(getattr(model, "config", None), "vocab_size", 256))


def token_losses(logits: Tensor, targets: Tensor) -> np.ndarray:
    """(B, T) float64 cross-entropy of logits (B, T, V) against targets (B, T), in slices of positions
    of EVAL_BATCH_LOGITS logits (the float64 copy of a long window of a large vocabulary is the
    largest tensor of an evaluation); the same logits give the same loss in any batch shape, to 1e-15."""
    B, T, V = logits.shape
    step = max(1, EVAL_BATCH_LOGITS // (B * V))
    slices = [
        F.cross_entropy(logits[:, i : i + step].transpose(1, 2).double(), targets[:, i : i + step], reduction="none")
        for i in range(0, T, step)
    ]  # each (B, step)
    return torch.cat(slices, dim=1).cpu().numpy()


REFERENCE_TOKENS = 1 << 24  # the 3-gram of a prepared corpus counts its first 16M training tokens


def null_context(config: dict) -> int:
    """The context of a run's truncation null: the length it was trained at (an extension's base's)."""
    extension = config.get("extension") or {}
    return int(extension.get("original_length") or config["model"]["train_length"])


@torch.inference_mode()
def perplexity(
    model,
    eval_set: EvalSet,
    length: int,
    device,
    stride: int | None = None,
    on_window: Callable[[int], None] | None = None,
    context: int | None = None,
) -> dict:
    """Token-weighted perplexity of ``model`` on ``eval_set`` with windows of ``length`` inputs
    (with ``context``: the truncation null, ``poscli.evaluation.evalset.truncated_windows``).

    Returns loss (nats/token), ppl, ci_low / ci_high (95% bootstrap over the set's units), bpb
    (bits per byte), windows, spans, documents and tokens scored; ``span_loss`` / ``span_tokens``:
    (S,) summed loss and targets of each span; ``position_loss`` / ``position_tokens``: (length,)
    sums of loss and counts at each position of a window.
    """
    windows = eval_set.windows(length, stride, context)
    width = min(length, eval_set.span_length)
    span_loss = np.zeros(eval_set.num_spans)
    span_tokens = np.zeros(eval_set.num_spans)
    span_bytes = np.zeros(eval_set.num_spans)
    position_loss = np.zeros(width)
    position_tokens = np.zeros(width)
    by_length: dict[int, list] = {}
    for window in windows:
        by_length.setdefault(window.length, []).append(window)
    for window_length, group in by_length.items():
        batch_size = eval_batch_size(window_length, vocab_size(model))
        positions = np.arange(window_length)
        for first in range(0, len(group), batch_size):
            chunk = group[first : first + batch_size]
            batch = np.stack([eval_set.spans[w.span, w.start : w.end + 1] for w in chunk])  # (B, T + 1)
            batch = torch.from_numpy(batch).to(device=device, dtype=torch.long)
            losses = token_losses(model(batch[:, :-1]), batch[:, 1:])  # logits (B, T, V) -> (B, T)
            scored = positions[None, :] >= np.array([w.scored_from for w in chunk])[:, None]  # (B, T)
            losses = np.where(scored, losses, 0.0)
            np.add.at(span_loss, [w.span for w in chunk], losses.sum(1))
            np.add.at(span_tokens, [w.span for w in chunk], scored.sum(1))
            covered = (
                scored if eval_set.token_bytes is None else scored * eval_set.token_bytes[batch[:, 1:].cpu().numpy()]
            )
            np.add.at(span_bytes, [w.span for w in chunk], covered.sum(1))
            position_loss[:window_length] += losses.sum(0)
            position_tokens[:window_length] += scored.sum(0)
            if on_window:
                on_window(len(chunk))
    return summarize(eval_set, span_loss, span_tokens, span_bytes) | {
        "windows": len(windows),
        "position_loss": position_loss,
        "position_tokens": position_tokens,
    }


def summarize(
    eval_set: EvalSet, span_loss: np.ndarray, span_tokens: np.ndarray, span_bytes: np.ndarray | None = None
) -> dict:
    """A cell's numbers from its per-span loss sums: point estimate, interval and counts. Bits per
    byte divide the summed loss by the UTF-8 bytes the scored tokens stand for (``span_bytes``;
    None: one byte per token), so runs with different tokenizers compare on the same text."""
    tokens = int(span_tokens.sum())
    loss = float(span_loss.sum()) / tokens
    span_bytes = span_tokens if span_bytes is None else span_bytes
    low, high = interval(bootstrap_perplexity(span_loss[None], span_tokens, eval_set.units))
    # the same resampled units, loss over bytes: exp(loss / bytes) is a perplexity per byte
    bpb_low, bpb_high = (
        math.log2(value) for value in interval(bootstrap_perplexity(span_loss[None], span_bytes, eval_set.units))
    )
    return {
        "loss": loss,
        "ppl": math.exp(loss),
        "ci_low": low,
        "ci_high": high,
        "bpb": float(span_loss.sum()) / float(span_bytes.sum()) / math.log(2),
        "bpb_low": bpb_low,
        "bpb_high": bpb_high,
        "bytes": int(span_bytes.sum()),
        "spans": eval_set.num_spans,
        "documents": eval_set.num_documents,
        "tokens": tokens,
        "span_loss": span_loss,
        "span_tokens": span_tokens,
    }


def _identity(config: dict, eval_set: EvalSet, length: int, stride: int | None, context: int | None = None) -> dict:
    """The columns naming a row: the run, its training budget (``runs.training_budget``), the sample and the length."""
    budget = runs.training_budget(config) if "train" in config else {}
    return {
        **budget,
        "run": config["name"],
        "label": runs.run_label(config),
        "pe": config["model"]["pe"],
        "train_length": config["model"]["train_length"],
        "corpus": eval_set.corpus,
        "protocol": eval_set.protocol,
        "length": length,
        "mode": mode_name(stride, context),
    }


class SetKey(NamedTuple):
    """One evaluation set: a corpus as read (spec, held-out fraction, reading options) and tokenized
    (the tokenizer's fingerprint); ``foreign``: not the runs' training corpus, so used whole."""

    spec: str
    fraction: float
    options: CorpusOptions
    fingerprint: str
    foreign: bool


class _Corpora:
    """Corpora loaded and tokenized once per (spec, fraction, options, tokenizer)."""

    def __init__(self):
        self.tokenizers: dict[str, object] = {}  # fingerprint -> tokenizer
        self._loaded: dict[tuple, Corpus] = {}

    def get(self, spec: str, fraction: float, options: CorpusOptions, fingerprint: str) -> Corpus:
        key = (spec, fraction, options, fingerprint)
        if key not in self._loaded:
            self._loaded[key] = load_corpus(spec, fraction, options).tokenized(self.tokenizers[fingerprint])
        return self._loaded[key]

    def of(self, key: SetKey) -> Corpus:
        return self.get(key.spec, key.fraction, key.options, key.fingerprint)

    def token_bytes(self, key: SetKey):
        tokenizer = self.tokenizers[key.fingerprint]
        return None if tokenizer.spec == "bytes" else tokenizer.token_bytes()


class _Plan(NamedTuple):
    folder: Path | None  # None: a pretrained transformers model (hf:NAME), ``config["name"]``
    config: dict
    key: SetKey
    lengths: list[int]


def _plan_runs(run_names, lengths, results, data, stride, allow_split_mismatch, corpora: _Corpora):
    """Each run's folder, config, evaluation set and lengths, every run checked first; and, per set,
    its span length (the longest length asked on it) and the training corpus whose train split fits
    the reference row."""
    plans, span_lengths, homes = [], {}, {}
    for name in run_names:
        folder, config, tokenizer, train_config = run_parts(name, results)
        fingerprint = tokenizer.fingerprint()
        corpora.tokenizers[fingerprint] = tokenizer
        trained_on = (train_config.data, train_config.heldout_fraction, CorpusOptions.of(train_config), fingerprint)
        spec = data or trained_on[0]
        foreign = spec != trained_on[0] and folder is not None  # a pretrained model reads --data's held-out part
        # a set per corpus as read and tokenized: runs with other tokenizers score other spans
        if foreign:
            key = SetKey(spec, 0.1, CorpusOptions(), fingerprint, True)
        else:
            key = SetKey(*trained_on, False)
        if folder is None:  # a pretrained model: the held-out documents of --data (default the built-in corpus)
            key = SetKey(absolute_spec(spec), train_config.heldout_fraction, CorpusOptions(), fingerprint, False)
            trained_on = key[:4]  # its 3-gram row: fitted on that corpus' train split
        corpus = corpora.of(key)
        if not foreign and not allow_split_mismatch and folder is not None:
            check_split(config, corpus)
        run_lengths = lengths or default_lengths(config)
        if stride is not None and stride > min(run_lengths):
            raise PoscliError(
                f"--stride {stride} is longer than the length {min(run_lengths)}; use a stride of at most the shortest "
                "length"
            )
        span_lengths[key] = max(span_lengths.get(key, 0), *run_lengths)
        homes.setdefault(key, trained_on)
        plans.append(_Plan(folder, config, key, run_lengths))
    return plans, span_lengths, homes


def planned_sets(
    run_names, lengths, results, max_tokens, protocol="stream", data=None, stride=None, allow_split_mismatch=False
):
    """Each run checked and planned (``Plan``: folder, config, set key, lengths), and the evaluation set
    of every corpus they read, as ``evaluate_runs`` scores them (``poscli inspect`` reads the same
    spans). Raises before any model is loaded. -> (plans, {key: EvalSet}, corpora, homes)."""
    data = absolute_spec(data) if data is not None else None
    corpora = _Corpora()
    plans, span_lengths, homes = _plan_runs(run_names, lengths, results, data, stride, allow_split_mismatch, corpora)
    eval_sets = {
        key: build_eval_set(
            corpora.of(key),
            span_length,
            max_tokens,
            protocol,
            all_documents=key.foreign,
            token_bytes=corpora.token_bytes(key),
        )
        for key, span_length in span_lengths.items()
    }  # raises now, not after an hour of evaluation
    return plans, eval_sets, corpora, homes


def run_parts(name: str, results):
    """A run's folder, config, tokenizer and training config; for ``hf:NAME`` (a pretrained
    transformers model) no folder, its config and tokenizer, and the default training config
    (whose corpus and held-out fraction it is evaluated on unless --data)."""
    if pretrained.is_pretrained(name):
        return None, pretrained.pretrained_config(name), pretrained.pretrained_tokenizer(name), TrainConfig()
    folder = runs.find_run(name, results)
    config = runs.read_config(folder)
    train_config = TrainConfig.from_dict(config["train"])
    return folder, config, run_tokenizer(train_config.tokenizer, folder), train_config


def load_any(name: str, results, device: str, tokenizer=None):
    """A run's model (``runs.load_model``), or an ``hf:`` model's (``poscli.model.pretrained``; ``tokenizer``:
    its tokenizer, when the caller read it already), and its config."""
    if pretrained.is_pretrained(name):
        return pretrained.load_pretrained(name, device, tokenizer)
    return runs.load_model(runs.find_run(name, results), device)


NOT_APPLICABLE = {
    **dict.fromkeys(("ppl", "ci_low", "ci_high", "bpb", "bpb_low", "bpb_high"), float("nan")),
    "bytes": 0,
    "loss": float("nan"),
    **dict.fromkeys(("windows", "spans", "documents", "tokens"), 0),
}  # a row's values where the run cannot be evaluated at the length (e.g. a learned table's rows run out)


class _Rows:
    """The rows an evaluation collects: perplexity rows, loss-by-position rows and per-span rows."""

    def __init__(self):
        self.rows, self.positions, self.spans = [], [], []
        self.now = datetime.now(UTC).isoformat(timespec="seconds")

    def add(self, identity: dict, eval_set: EvalSet, result: dict) -> None:
        span_loss, span_tokens = result.pop("span_loss"), result.pop("span_tokens")
        for span, (unit, loss, tokens) in enumerate(zip(eval_set.units, span_loss, span_tokens)):
            keys = {k: identity[k] for k in TABLE_KEY}
            self.spans.append({**keys, "span": span, "unit": int(unit), "loss": float(loss), "tokens": int(tokens)})
        self.rows.append(
            {**identity, **result, "eval_set": eval_set.fingerprint, "note": eval_set.note(), "evaluated": self.now}
        )

    def add_not_applicable(self, identity: dict, eval_set: EvalSet, reason: Exception) -> None:
        note = f"n/a: {reason}"
        self.rows.append(
            {**identity, **NOT_APPLICABLE, "eval_set": eval_set.fingerprint, "note": note, "evaluated": self.now}
        )

    def mark(self) -> tuple[int, int, int]:
        return len(self.rows), len(self.positions), len(self.spans)

    def since(self, mark: tuple[int, int, int]) -> dict[str, list[dict]]:
        return {"rows": self.rows[mark[0] :], "positions": self.positions[mark[1] :], "spans": self.spans[mark[2] :]}


def evaluate_runs(
    run_names: list[str],
    lengths: list[int] | None,
    results: str | Path | None = None,
    max_tokens: int = 131072,
    device: str = "auto",
    progress=None,
    stride: int | None = None,
    protocol: str = "stream",
    data: str | None = None,
    reference: bool = True,
    allow_split_mismatch: bool = False,
    save: Callable[[dict], None] | None = None,
    compile: bool = False,
    null: bool = False,
) -> dict[str, list[dict]]:
    """Evaluate each run at each length on one evaluation set per corpus. ``lengths`` None means
    ``default_lengths`` of each run; the set's spans are as long as the longest length asked of
    any run on that corpus, so every length scores the same tokens.

    ``data`` evaluates on another corpus (all of its documents when it is not the run's training
    corpus); otherwise the run's held-out documents, checked against the split it recorded
    (``check_split``). ``reference`` adds the context-free row of ``poscli.evaluation.reference``.

    Every run, length and evaluation set is checked before any model is evaluated, so a bad
    request fails fast and writes nothing. Returns {"rows", "positions", "spans"}: the
    perplexity rows, the loss-by-position rows and the per-span rows (for summaries over seeds).
    ``save``, if given, receives each run's part of that as soon as the run is done (so an
    interrupted evaluation of many runs keeps the finished ones). ``compile`` runs each model
    through ``torch.compile`` (``poscli.core.device.compile_model``). ``null`` adds, at every length
    longer than a run's train length, the truncation null (mode ``truncated-C``, C = ``null_context``):
    the same targets and cold starts with the context cut to the train length.
    """
    if stride is not None and stride < 1:
        raise PoscliError(f"--stride must be at least 1, got {stride}")
    device = select_device(device)
    plans, eval_sets, corpora, homes = planned_sets(
        run_names, lengths, results, max_tokens, protocol, data, stride, allow_split_mismatch
    )
    for plan in plans:  # a pretrained model's longest window must fit: refused now, in one line
        if plan.folder is None:
            longest = max(plan.lengths)
            windows = eval_batch_size(longest, plan.config["model"]["vocab_size"])
            report = progress.console.print if progress else None
            check_memory(plan.config["name"], longest, windows, EVAL_BATCH_LOGITS, device, report)
    collected = _Rows()
    for plan in plans:
        mark = collected.mark()
        name = plan.config["name"] if plan.folder is None else str(plan.folder)
        model, config = load_any(name, None, str(device), corpora.tokenizers[plan.key.fingerprint])
        if compile:
            compile_model(model, device, min(plan.lengths), report=progress.console.print if progress else print)
        for length in plan.lengths:
            _evaluate_length(collected, model, config, eval_sets[plan.key], length, device, stride, null, progress)
        if save:
            save(collected.since(mark))
    if reference:
        _reference_rows(collected, eval_sets, plans, homes, corpora, stride)
    return {"rows": collected.rows, "positions": collected.positions, "spans": collected.spans}


def _evaluate_length(collected: _Rows, model, config, eval_set: EvalSet, length, device, stride, null, progress):
    """One run at one length: its row (or an n/a row), its loss by position, and its truncation null."""
    identity = _identity(config, eval_set, length, stride)
    count = len(eval_set.windows(length, stride))
    task = progress.add_task(f"{identity['label']} @ {length}", total=count) if progress else None
    advance = (lambda n, task=task: progress.advance(task, n)) if progress else None
    try:
        result = perplexity(model, eval_set, length, device, stride, on_window=advance)
    except NotApplicable as reason:
        collected.add_not_applicable(identity, eval_set, reason)
        if progress:
            progress.update(task, completed=count)
        return
    for bucket in loss_by_position(
        result.pop("position_loss"), result.pop("position_tokens"), min(length, eval_set.span_length)
    ):
        collected.positions.append({**identity, **bucket})
    collected.add(identity, eval_set, result)
    context = null_context(config)
    if null and length > context and stride is None:
        identity = _identity(config, eval_set, length, None, context)
        result = perplexity(model, eval_set, length, device, context=context)
        del result["position_loss"], result["position_tokens"]
        collected.add(identity, eval_set, result)


def _reference_train(corpora: _Corpora, home: tuple, byte_runs: bool) -> np.ndarray | None:
    """The bytes the 3-gram is fitted on: the train split of ``home`` (a set's runs' corpus; of a
    prepared corpus, its first REFERENCE_TOKENS tokens, read, not loaded whole); None where the
    corpus holds no bytes (prepared in another tokenizer)."""
    corpus = corpora.get(*home) if byte_runs else load_corpus(*home[:3])
    if corpus.tokenizer != "bytes":
        return None
    train = corpus.train_tokens()
    return train.read(0, min(len(train), REFERENCE_TOKENS)) if isinstance(train, TokenFile) else train


def reference_token_losses(corpora: _Corpora, home: tuple, eval_set: EvalSet, tokenizer) -> np.ndarray | None:
    """The context-free 3-gram's loss of every target of a byte-level set, (S, span_length): the
    table's 3-gram row and its curve by position, and the offset of ``effective_context`` for
    ``poscli inspect``. None on a set in another tokenizer's tokens."""
    train = _reference_train(corpora, home, True) if tokenizer.spec == "bytes" else None
    if train is None:
        return None
    ngram = NGram.fit(train)
    return np.stack([ngram.token_losses(span) for span in eval_set.spans])


def _byte_losses(ngram, tokenizer, eval_set: EvalSet) -> tuple[np.ndarray, np.ndarray]:
    """Per span of a set in another tokenizer's tokens: the 3-gram's summed loss on the UTF-8 bytes
    of its tokens 1 .. (the ones a model scores; token 0 is context), and their byte count as
    bits per byte counts them (``token_bytes``). The perplexity of the row is then per model token:
    exp(nats of the same text / the model's tokens). -> (S,), (S,)."""
    token_bytes = eval_set.token_bytes
    losses, counts = np.zeros(eval_set.num_spans), np.zeros(eval_set.num_spans)
    for index, span in enumerate(eval_set.spans):
        first = len(tokenizer.decode(span[:1]).encode("utf-8"))
        text = np.frombuffer(tokenizer.decode(span).encode("utf-8"), dtype=np.uint8)
        losses[index] = ngram.token_losses(text)[max(first - 1, 0) :].sum()  # targets: bytes first ..
        counts[index] = token_bytes[span[1:]].sum()
    return losses, counts


def _reference_rows(collected: _Rows, eval_sets: dict, plans: list[_Plan], homes: dict, corpora: _Corpora, stride):
    """The context-free 3-gram row (``poscli.evaluation.reference``) on every set, at every length
    asked of it, fitted on the bytes of the train split of the set's runs' corpus: on a byte-level
    set over its tokens, on a set in another tokenizer (a BPE run, an hf: model) over the same text's
    bytes (``_byte_losses``)."""
    for key, eval_set in eval_sets.items():
        tokenizer = corpora.tokenizers[key.fingerprint]
        byte_set = tokenizer.spec == "bytes"
        # (S, span_length) on a byte-level set: its curve by position too
        token_losses = reference_token_losses(corpora, homes[key], eval_set, tokenizer) if byte_set else None
        train = None if byte_set else _reference_train(corpora, homes[key], False)
        if token_losses is not None:
            span_loss, span_bytes = token_losses.sum(1), None
        elif train is not None:  # the same text in bytes: the nats of the bytes of tokens 1 .. of each span
            span_loss, span_bytes = _byte_losses(NGram.fit(train), tokenizer, eval_set)
        else:
            continue  # a corpus prepared in other tokens: no bytes to fit the 3-gram on
        span_tokens = np.full(eval_set.num_spans, float(eval_set.span_length))
        # in another tokenizer: a row of its own (per that tokenizer's token), beside a byte set's on the same corpus
        name = REFERENCE_RUN if byte_set else f"{REFERENCE_RUN}-{key.fingerprint[:8]}"
        label = f"3-gram, no positions ({homes[key][0]} train split)"
        if not byte_set:
            short = tokenizer.spec.rstrip("/").rsplit("/", 1)[-1]  # an hf: model's folder or hub name, not its path
            label = f"3-gram over bytes, no positions ({homes[key][0]} train split), per {short} token"
        config = {"name": name, "model": {"pe": "reference", "train_length": 0}}
        for length in sorted({n for plan in plans if plan.key == key for n in plan.lengths}):
            identity = {**_identity({**config, "label": REFERENCE_LABEL}, eval_set, length, stride), "label": label}
            result = summarize(eval_set, span_loss, span_tokens, span_bytes) | {
                "windows": len(eval_set.windows(length, stride))
            }
            collected.add(identity, eval_set, result)
            if token_losses is not None:  # the text's difficulty by window position (effective_context)
                position_loss, position_tokens = position_curve(token_losses, eval_set, length, stride)
                buckets = loss_by_position(position_loss, position_tokens, len(position_loss))
                collected.positions += [{**identity, **bucket} for bucket in buckets]
