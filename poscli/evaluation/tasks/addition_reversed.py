"""``--task addition-reversed``: addition with every number written least significant digit
first, so each answer digit depends on digits already seen (Zhou et al., 2024, "Transformers
Can Achieve Length Generalization But Not Robustly"; Lee et al., 2023)."""

from __future__ import annotations

from poscli.evaluation.algorithmic import AlgorithmicTask
from poscli.evaluation.tasks import register
from poscli.evaluation.tasks.addition import operands


@register("addition-reversed")
class AdditionReversed(AlgorithmicTask):
    summary = "a+b for two numbers of `size` digits, every number written least significant digit first"
    citation = "Zhou et al., 2024"

    def instance(self, size, rng):
        a, b = operands(size, rng)
        return f"{str(a)[::-1]}+{str(b)[::-1]}", str(a + b)[::-1]
