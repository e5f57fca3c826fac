"""``--task addition``: the sum of two numbers of `size` digits each (Kazemnejad et al., 2023),
written as usual, most significant digit first."""

from __future__ import annotations

from poscli.evaluation.algorithmic import AlgorithmicTask
from poscli.evaluation.tasks import register


def operands(size: int, rng) -> tuple[int, int]:
    """Two numbers of exactly ``size`` digits (no leading zero, except the number 0 at size 1)."""
    low = 0 if size == 1 else 10 ** (size - 1)
    return rng.randint(low, 10**size - 1), rng.randint(low, 10**size - 1)


@register("addition")
class Addition(AlgorithmicTask):
    summary = "a+b for two numbers of `size` digits"
    citation = "Kazemnejad et al., 2023"

    def instance(self, size, rng):
        a, b = operands(size, rng)
        return f"{a}+{b}", str(a + b)
