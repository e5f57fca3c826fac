"""``--task duplicate``: a random string written twice (Ruoss et al., 2023, duplicate string)."""

from __future__ import annotations

from poscli.evaluation.algorithmic import AlgorithmicTask, letters
from poscli.evaluation.tasks import register


@register("duplicate")
class Duplicate(AlgorithmicTask):
    summary = "a string of `size` letters, written twice"
    citation = "Ruoss et al., 2023 (duplicate string)"

    def instance(self, size, rng):
        text = letters(size, rng)
        return text, text + text
