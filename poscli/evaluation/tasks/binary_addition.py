"""``--task binary-addition``: the sum of two binary numbers of `size` bits each, most
significant bit first (Ruoss et al., 2023, binary addition)."""

from __future__ import annotations

from poscli.evaluation.algorithmic import AlgorithmicTask
from poscli.evaluation.tasks import register


@register("binary-addition")
class BinaryAddition(AlgorithmicTask):
    summary = "a+b for two binary numbers of `size` bits"
    citation = "Ruoss et al., 2023 (binary addition)"

    def instance(self, size, rng):
        low = 0 if size == 1 else 2 ** (size - 1)
        a, b = rng.randint(low, 2**size - 1), rng.randint(low, 2**size - 1)
        return f"{a:b}+{b:b}", f"{a + b:b}"
