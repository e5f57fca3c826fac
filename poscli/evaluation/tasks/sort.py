"""``--task sort``: the letters of a random string in order (Kazemnejad et al., 2023, sorting)."""

from __future__ import annotations

from poscli.evaluation.algorithmic import AlgorithmicTask, letters
from poscli.evaluation.tasks import register


@register("sort")
class Sort(AlgorithmicTask):
    summary = "the `size` letters of a string, sorted"
    citation = "Kazemnejad et al., 2023"

    def instance(self, size, rng):
        text = letters(size, rng)
        return text, "".join(sorted(text))
