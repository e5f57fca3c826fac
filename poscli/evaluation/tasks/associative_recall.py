"""``--task associative-recall``: multi-query associative recall (Arora et al., 2023, Zoology's
MQAR): `size` key-value pairs (distinct letter keys, digit values), then `size` queries of those
keys in a random order; the answer is each queried key's value, in query order."""

from __future__ import annotations

from poscli.errors import PoscliError
from poscli.evaluation.algorithmic import AlgorithmicTask
from poscli.evaluation.tasks import register

KEYS = "abcdefghijklmnopqrstuvwxyz"


@register("associative-recall")
class AssociativeRecall(AlgorithmicTask):
    summary = "`size` key-value pairs, then the values of `size` queried keys"
    citation = "Arora et al., 2023 (Zoology, multi-query associative recall)"

    def instance(self, size, rng):
        if size > len(KEYS):
            raise PoscliError(f"--task associative-recall has {len(KEYS)} keys; use --sizes up to {len(KEYS)}")
        keys = rng.sample(KEYS, size)
        values = {key: str(rng.randrange(10)) for key in keys}
        queries = rng.sample(keys, size)
        pairs = "".join(key + values[key] for key in keys)
        return f"{pairs}|{''.join(queries)}", "".join(values[key] for key in queries)
