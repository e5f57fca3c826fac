"""``--task modular-arithmetic``: `size` numbers from 0 to 4 joined by +, - and *, evaluated from
left to right modulo 5 (Ruoss et al., 2023, modular arithmetic without brackets; there the
operators keep their precedence; left to right keeps the answer a running state, one digit)."""

from __future__ import annotations

from poscli.evaluation.algorithmic import AlgorithmicTask
from poscli.evaluation.tasks import register

MODULUS = 5


@register("modular-arithmetic")
class ModularArithmetic(AlgorithmicTask):
    summary = "`size` numbers mod 5 joined by + - *, evaluated left to right"
    citation = "Ruoss et al., 2023 (modular arithmetic)"

    def instance(self, size, rng):
        numbers = [rng.randrange(MODULUS) for _ in range(size)]
        operators = [rng.choice("+-*") for _ in range(size - 1)]
        value = numbers[0]
        for operator, number in zip(operators, numbers[1:]):
            value = {"+": value + number, "-": value - number, "*": value * number}[operator] % MODULUS
        question = str(numbers[0]) + "".join(f"{o}{n}" for o, n in zip(operators, numbers[1:]))
        return question, str(value)
