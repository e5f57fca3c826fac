"""Training batches: sequences drawn from a corpus's token stream (or a task's instances, or a mix),
split into micro-batches, and the check that a corpus holds a batch."""

from __future__ import annotations

import random

import numpy as np
import torch

from poscli.config import ModelConfig, TrainConfig
from poscli.data.corpus import Corpus
from poscli.data.passkey import PasskeyTraining
from poscli.data.prepared import TokenFile
from poscli.errors import PoscliError
from poscli.evaluation.evalset import build_eval_set
from poscli.training.tasks import TaskTraining


def sample_batch(
    stream: torch.Tensor,
    batch_size: int,
    length: int,
    generator: torch.Generator,
    device: torch.device,
    passkey: PasskeyTraining | None = None,
):
    """Random windows of the training stream, each ending with probability ``passkey.fraction``
    in a whole passkey example (so the question and its key are in one sequence): of the full
    window's length, or (``passkey.lengths == "random"``) of a length drawn uniformly from the
    format's shortest to the window's, the corpus text before it. With ``passkey.answer_weight``
    W > 0 the loss adds W times the mean loss of the batch's answer tokens (the key's digits and
    the stop after them) to the mean loss of all tokens, given as per-token weights (None when
    W = 0 or the batch holds no example).
    stream: (N,) uint8 or int32 tensor, or a TokenFile -> tokens, targets: (B, T) int64, weights: (B, T) float32
    or None."""
    starts = torch.randint(0, len(stream) - length - 1, (batch_size,), generator=generator)  # (B,)
    if isinstance(stream, TokenFile):  # a prepared corpus on disk: read the windows, nothing else
        window = torch.from_numpy(stream.windows(starts.numpy(), length + 1).astype(np.int64))  # (B, T + 1)
    else:
        index = starts[:, None] + torch.arange(length + 1)[None, :]  # (B, T + 1)
        window = stream[index]  # (B, T + 1) uint8 (bytes) or int32
    answers = torch.zeros(batch_size, length, dtype=torch.bool)  # (B, T): targets that are answer tokens
    if passkey is not None and passkey.fraction > 0:
        chosen = (torch.rand(batch_size, generator=generator) < passkey.fraction).nonzero().flatten().tolist()
        for row in chosen:
            seed = int(torch.randint(0, 2**62, (1,), generator=generator))
            example, answer_start = passkey.example(length + 1, random.Random(seed))
            offset = length + 1 - len(example)  # (T + 1 - E) corpus tokens, then the example
            window[row, offset:] = torch.from_numpy(example)
            answers[row, offset + answer_start - 1 :] = (
                True  # targets answer_start.. are predicted from answer_start - 1..
            )
    weights = None
    if passkey is not None and passkey.answer_weight > 0 and answers.any():
        weights = torch.ones(batch_size, length) + answers * (
            passkey.answer_weight * answers.numel() / answers.sum()
        )  # (B, T)
        weights = weights.to(device)
    window = window.to(device=device, dtype=torch.long)
    return window[:, :-1], window[:, 1:], weights


def micro_batches(
    accumulate: int,
    tokens: torch.Tensor,
    targets: torch.Tensor,
    positions: torch.Tensor | None,
    weights: torch.Tensor | None,
) -> list[tuple]:
    """The batch cut into ``accumulate`` equal runs of rows; positions shared by every row ((T,),
    PoSE) stay whole. -> [(tokens, targets, positions, weights)] with (B / N, T) tensors."""
    if accumulate == 1:
        return [(tokens, targets, positions, weights)]
    rows = tokens.shape[0] // accumulate
    cut = lambda x: [x[i * rows : (i + 1) * rows] for i in range(accumulate)] if x is not None else [None] * accumulate  # noqa: E731
    shared = positions is not None and positions.dim() == 1
    return list(zip(cut(tokens), cut(targets), [positions] * accumulate if shared else cut(positions), cut(weights)))


def check_corpus_fits(corpus: Corpus, train_length: int, batch_size: int) -> None:
    train_tokens = int(corpus.document_lengths()[~corpus.heldout].sum())
    if train_tokens < train_length + 2:
        raise PoscliError(
            f"the training part of {corpus.spec!r} has {train_tokens} tokens, too few for --train-length "
            f"{train_length}; "
            f"use a shorter --train-length or a larger corpus"
        )
    build_eval_set(corpus, train_length, max_tokens=1)  # raises if the held-out text is too short


def next_batch(stream, train_config: TrainConfig, model_config: ModelConfig, generator, device, mix, group, scheme):
    """One step's batch, this process's rows of it: tokens, targets (B, T), positions (T,) or (B, T)
    or None, answer weights (B, T) or None. The generator draws the batch (text with passkey
    examples mixed in, or a task's instances), then the positions (from the run's training position
    scheme, ``poscli.extension.positions``; None: 0..T-1)."""
    length, batch_size = model_config.train_length, train_config.batch_size
    if train_config.mixed_short and float(torch.rand((), generator=generator)) < train_config.mixed_short:
        # LongRoPE2's mixed context windows: this step at the original length, the same tokens per step
        length, batch_size = train_config.mixed_length, max(1, batch_size * length // train_config.mixed_length)
    if isinstance(mix, TaskTraining):
        tokens, targets, weights = mix.batch(batch_size, length, generator, device)
    else:
        tokens, targets, weights = sample_batch(stream, batch_size, length, generator, device, mix)
    positions = None
    if scheme is not None:
        positions = scheme.draw(train_config.batch_size, model_config.train_length, generator, device)
    shared = positions if positions is not None and positions.dim() == 1 else None  # PoSE: one row for every sequence
    tokens, targets, positions, weights = group.shard(
        tokens, targets, None if shared is not None else positions, weights
    )  # the global batch, this process's rows
    return tokens, targets, shared if shared is not None else positions, weights


def token_stream(corpus: Corpus):
    """The training tokens: (N_train,) uint8 or int32 in memory, or a TokenFile for a prepared corpus."""
    stream = corpus.train_tokens()
    if isinstance(stream, TokenFile):
        return stream
    return torch.from_numpy(stream if stream.dtype == np.uint8 else stream.astype(np.int32))
