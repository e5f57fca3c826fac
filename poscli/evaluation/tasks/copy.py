"""``--task copy``: repeat a random string (Kazemnejad et al., 2023; Ruoss et al., 2023)."""

from __future__ import annotations

from poscli.evaluation.algorithmic import AlgorithmicTask, letters
from poscli.evaluation.tasks import register


@register("copy")
class Copy(AlgorithmicTask):
    summary = "repeat a string of `size` letters"
    citation = "Kazemnejad et al., 2023"

    def instance(self, size, rng):
        text = letters(size, rng)
        return text, text
