"""``--task selective-copy``: copy the letters of a string and skip the blanks between them
(selective copying, Gu & Dao, 2023, "Mamba", arXiv 2312.00752; one of the tasks on which Golovneva
et al., 2024, report that CoPE succeeds where absolute and rotary positions fail). A letter's place
in the answer is its count among the letters before it, not its position in the question."""

from __future__ import annotations

from poscli.evaluation.algorithmic import AlgorithmicTask, letters
from poscli.evaluation.tasks import register

BLANK = "."


@register("selective-copy")
class SelectiveCopy(AlgorithmicTask):
    summary = "`size` letters scattered among `size` blanks; the letters in order"
    citation = "Gu & Dao, 2023; Golovneva et al., 2024"

    def instance(self, size, rng):
        text = letters(size, rng)
        places = sorted(rng.sample(range(2 * size), size))  # where the letters go among 2 x size slots
        question = [BLANK] * (2 * size)
        for place, letter in zip(places, text, strict=True):
            question[place] = letter
        return "".join(question), text
