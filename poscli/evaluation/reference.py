"""A context-free reference row: an interpolated byte n-gram model with no positional information.

Fitted on a run's training split and scored on the same spans as the models, it measures how
hard the sampled text is by itself. It reads at most ``order - 1`` tokens back inside a span
and knows nothing of windows or positions, so under the same-tokens protocol (``poscli.evaluation.evalset``)
its perplexity is the same at every length; a model whose curve moves with length moves for
its own reasons, not the text's.

Estimate: p(c | a, b) = w3 P3 + w2 P2 + w1 P1 with maximum-likelihood P3 = n(abc) / n(ab·),
P2 = n(bc) / n(b·), add-one P1 = (n(c) + 1) / (N + 256), weights (0.7, 0.25, 0.05) renormalised
over the orders whose context was seen (Jelinek and Mercer, 1980).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

VOCAB = 256
WEIGHTS = (0.05, 0.25, 0.7)  # unigram, bigram, trigram
REFERENCE_RUN = "reference-3gram"
REFERENCE_LABEL = "3-gram, no positions (train split)"


@dataclass
class NGram:
    unigram: np.ndarray  # (V,)
    bigram: np.ndarray  # (V, V) counts of (b, c)
    trigram: np.ndarray  # (V * V, V) counts of ((a, b), c), as float32 to bound memory

    @classmethod
    def fit(cls, tokens: np.ndarray) -> NGram:
        t = tokens.astype(np.int64)
        unigram = np.bincount(t, minlength=VOCAB).astype(np.float64)
        bigram = np.bincount(t[:-1] * VOCAB + t[1:], minlength=VOCAB**2).reshape(VOCAB, VOCAB).astype(np.float64)
        trigram = (
            np.bincount((t[:-2] * VOCAB + t[1:-1]) * VOCAB + t[2:], minlength=VOCAB**3)
            .reshape(VOCAB**2, VOCAB)
            .astype(np.float32)
        )
        return cls(unigram, bigram, trigram)

    def token_losses(self, span: np.ndarray) -> np.ndarray:
        """-log p of targets 1 .. len(span) - 1 of a span, each given up to two tokens before it. (len - 1,)"""
        s = span.astype(np.int64)
        target = s[1:]
        p1 = (self.unigram[target] + 1) / (self.unigram.sum() + VOCAB)
        previous = s[:-1]
        bigram_context = self.bigram[previous].sum(1)
        p2 = np.divide(
            self.bigram[previous, target], bigram_context, out=np.zeros(len(target)), where=bigram_context > 0
        )
        w1, w2, w3 = WEIGHTS
        mix = w1 * p1 + np.where(bigram_context > 0, w2 * p2, 0.0)
        weight = w1 + np.where(bigram_context > 0, w2, 0.0)
        if len(s) > 2:  # targets from the second on have a two-token context
            pair = s[:-2] * VOCAB + s[1:-1]
            trigram_context = self.trigram[pair].sum(1, dtype=np.float64)
            p3 = np.divide(
                self.trigram[pair, s[2:]].astype(np.float64),
                trigram_context,
                out=np.zeros(len(pair)),
                where=trigram_context > 0,
            )
            mix[1:] += np.where(trigram_context > 0, w3 * p3, 0.0)
            weight[1:] += np.where(trigram_context > 0, w3, 0.0)
        return -np.log(mix / weight)
