"""``--task reverse``: a random string backwards (Kazemnejad et al., 2023; Ruoss et al., 2023)."""

from __future__ import annotations

from poscli.evaluation.algorithmic import AlgorithmicTask, letters
from poscli.evaluation.tasks import register


@register("reverse")
class Reverse(AlgorithmicTask):
    summary = "a string of `size` letters, backwards"
    citation = "Kazemnejad et al., 2023; Ruoss et al., 2023 (reverse string)"

    def instance(self, size, rng):
        text = letters(size, rng)
        return text, text[::-1]
