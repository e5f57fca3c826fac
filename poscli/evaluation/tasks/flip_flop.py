"""``--task flip-flop``: flip-flop language modelling (Liu et al., 2023, "Exposing Attention
Glitches with Flip-Flop Language Modeling"): `size` instructions, each w (write), i (ignore) or
r (read) with a bit; the answer is the bit of the last write before the final read."""

from __future__ import annotations

from poscli.evaluation.algorithmic import AlgorithmicTask
from poscli.evaluation.tasks import register


@register("flip-flop")
class FlipFlop(AlgorithmicTask):
    summary = "`size` write / ignore / read instructions; the bit last written"
    citation = "Liu et al., 2023"

    def instance(self, size, rng):
        instructions = ["w" + rng.choice("01")]  # the first instruction writes, so a read has an answer
        for _ in range(size - 1):
            op = rng.choice("wir")
            written = [i[1] for i in instructions if i[0] == "w"][-1]
            instructions.append(op + (written if op == "r" else rng.choice("01")))
        last = [i[1] for i in instructions if i[0] == "w"][-1]
        return "".join(instructions) + "r", last
