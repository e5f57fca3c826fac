"""``--task associative-recall``: multi-query associative recall (Arora et al., 2023, Zoology's
MQAR): `size` key-value pairs (distinct letter keys, either case; digit values), then `size`
queries of those keys, each followed by its value. As in Zoology, the queries are given and the
values are the model's to write: the answer is ``query value query value ... .``, teacher-forced,
and only the values and the full stop are scored (``scored``). The queries are drawn with
replacement, so no value follows by elimination (a model that has not learned to recall can
otherwise answer the last query as the one pair not yet asked for)."""

from __future__ import annotations

import numpy as np

from poscli.errors import PoscliError
from poscli.evaluation.algorithmic import AlgorithmicTask
from poscli.evaluation.tasks import register

KEYS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"  # 52: trained to 8 pairs, tested to 4x and more


@register("associative-recall")
class AssociativeRecall(AlgorithmicTask):
    summary = "`size` key-value pairs, then `size` queried keys, each followed by its value (the values scored)"
    citation = "Arora et al., 2023 (Zoology, multi-query associative recall)"

    def instance(self, size, rng):
        if size > len(KEYS):
            raise PoscliError(f"--task associative-recall has {len(KEYS)} keys; use --sizes up to {len(KEYS)}")
        keys = rng.sample(KEYS, size)
        values = {key: str(rng.randrange(10)) for key in keys}
        pairs = "".join(key + values[key] for key in keys)
        queries = [rng.choice(keys) for _ in range(size)]  # with replacement: no answer follows by elimination
        return pairs, "".join(key + values[key] for key in queries)

    def scored(self, answer: str) -> np.ndarray:
        """The values (every second token) and the full stop; the queried keys are given."""
        mask = np.arange(len(answer)) % 2 == 1  # (A,): key value key value ... .
        mask[-1] = True
        return mask
