"""``--task counting``: how many x's follow the last reset mark, among x's and o's (a counting task
after Golovneva et al., 2024, "Contextual Position Encoding", on which they report CoPE succeeds
where token positions fail; the format is poscli's). The count stays a single digit at every size:
what grows with the size is the text before the last reset, which the model must pass over to find
where to start counting, so the task asks to count "what is important", not to read longer numbers."""

from __future__ import annotations

from poscli.evaluation.algorithmic import AlgorithmicTask
from poscli.evaluation.tasks import register

COUNTED, OTHER, RESET = "x", "o", "|"
MAX_COUNTED_SPAN = 9  # the symbols after the last reset: at most 9, so the count is one digit


@register("counting")
class Counting(AlgorithmicTask):
    summary = "`size` symbols x, o and | (a reset); the number of x's after the last |"
    citation = "Golovneva et al., 2024 (counting; format ours)"

    def instance(self, size, rng):
        span = rng.randint(1, min(size, MAX_COUNTED_SPAN))  # the symbols after the last reset
        before = [rng.choice(COUNTED + OTHER + RESET) for _ in range(size - span - 1)] + [RESET] if size > span else []
        counted = [rng.choice(COUNTED + OTHER) for _ in range(span)]
        return "".join(before + counted), str(counted.count(COUNTED))
