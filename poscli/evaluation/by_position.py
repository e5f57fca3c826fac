"""Loss by position: the held-out loss in octave buckets of token position, and the effective
context a model uses (where a later octave stops lowering the loss)."""

from __future__ import annotations

import math

import numpy as np

from poscli.evaluation.evalset import EvalSet


def position_buckets(length: int, per_octave: int = 4) -> list[tuple[int, int]]:
    """Log-spaced buckets [start, end) of 0-based positions covering 0..length-1:
    position p has p + 1 tokens of context, and bucket edges are 2^(k/per_octave) in p + 1."""
    edges = sorted({int(2 ** (k / per_octave)) for k in range(int(math.log2(length) * per_octave) + 1)} | {length + 1})
    edges = [e for e in edges if e <= length + 1]
    if len(edges) > 2 and edges[-1] - edges[-2] < (edges[-2] - edges[-3]) / 2:
        del edges[-2]  # fold a sliver of a last bucket into the one before it
    return [(a - 1, b - 1) for a, b in zip(edges[:-1], edges[1:])]


def loss_by_position(position_loss, position_tokens, length: int) -> list[dict]:
    """Mean loss per log-spaced position bucket (buckets with no scored token are left out)."""
    rows = []
    for start, end in position_buckets(length):
        tokens = float(position_tokens[start:end].sum())
        if tokens:
            rows.append(
                {
                    "position_start": start,
                    "position_end": end,
                    "loss": float(position_loss[start:end].sum()) / tokens,
                    "tokens": int(tokens),
                }
            )
    return rows


def position_curve(span_token_losses: np.ndarray, eval_set: EvalSet, length: int, stride: int | None = None):
    """The sums ``perplexity`` accumulates by window position, for a scorer whose loss of a target
    does not depend on the window it is read in (the context-free 3-gram): ``span_token_losses``
    (S, span_length), target t of span s at [s, t - 1]. -> position_loss, position_tokens: (width,)."""
    width = min(length, eval_set.span_length)
    position_loss, position_tokens = np.zeros(width), np.zeros(width)
    for window in eval_set.windows(length, stride):
        first, count = window.scored_from, window.length
        position_loss[first:count] += span_token_losses[window.span, window.start + first : window.end]
        position_tokens[first:count] += 1
    return position_loss, position_tokens


CONTEXT_TOLERANCE = 0.01  # nats: a later octave must lower the loss by 1% of perplexity to count as using more context


def effective_context(buckets: list[dict], reference: list[dict] | None = None) -> tuple[int, bool]:
    """The context a model uses: the start of the first octave of positions (p + 1 in [2^k, 2^(k+1)))
    after which no later octave's loss is lower by ``CONTEXT_TOLERANCE`` nats or more (the loss by
    position stops falling there). buckets: ``loss_by_position`` rows at one length; ``reference``:
    the context-free 3-gram's rows on the same windows, subtracted bucket by bucket first.

    Both are there for noise. A bucket of a few positions over 1,024 windows is a small sample of
    text, and its difficulty moves every model's loss alike (on the reference study's set, 0.03-0.08
    nats from bucket to bucket, the same pattern in every run, which put "89 of 128" on nearly every
    trained model); the 3-gram on the same targets carries that difficulty but no position, and an
    octave pools 16-64 positions. -> (tokens of context, whether the loss still falls in the last
    octave, so the model may use all of the length it was given)."""
    offset = {b["position_start"]: b["loss"] for b in reference or []}
    octaves: dict[int, list[float]] = {}  # octave start -> [summed loss, tokens]
    for bucket in buckets:
        start = int(bucket["position_start"])
        if reference is not None and start not in offset:
            raise ValueError(f"the reference has no bucket at position {start}")
        octave = 2 ** int(math.log2(start + 1)) - 1
        summed = octaves.setdefault(octave, [0.0, 0.0])
        summed[0] += (bucket["loss"] - offset.get(start, 0.0)) * bucket["tokens"]
        summed[1] += bucket["tokens"]
    starts = sorted(octaves)
    losses = [octaves[start][0] / octaves[start][1] for start in starts]
    for index, start in enumerate(starts):  # the last octave always qualifies: the loop returns
        if all(losses[index] - later < CONTEXT_TOLERANCE for later in losses[index + 1 :]):
            return start, index == len(starts) - 1
    raise ValueError("no position buckets")
